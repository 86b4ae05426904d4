#!/usr/bin/env bash
# Learning parity of model_dtype=auto against float32 (issue 43): the same experiment, seeds
# and budget in both arms, two trainings at a time, one core each.
#
#   bench/precision_parity.sh                                   # the main job, seeds 0 1 2
#   CONFIG=tune_configs/plan_path_cpu.yaml bench/precision_parity.sh
#   SEEDS="0" bench/precision_parity.sh
#   EXTRA_SET='stop={training_iteration: 12}' ...   # one more --set override for every run
#
# Writes runs/precision_parity/<config>/<arm>_s<seed>/ (each a Tune experiment with its
# progress.csv: held-out success per evaluation, generated tokens, and the per-module
# learners/<module>/logp_mismatch_{mean,max,kl}), then one figure of both arms
# (<out>/parity.png, one line per arm and seed) and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=${CONFIG:-tune_configs/math_cpu.yaml}
SEEDS=${SEEDS:-"0 1 2"}
ARMS=${ARMS:-"float32 auto"}
CLI=${CLI:-.venv/bin/pettingllms-rllib}
EXTRA_SET=${EXTRA_SET:-}
NAME=$(basename "$CONFIG" .yaml)
OUT=${OUT:-runs/precision_parity/$NAME}
mkdir -p "$OUT"

train() {  # arm seed
  local dir="$OUT/$1_s$2" extra=()
  if [ -n "$EXTRA_SET" ]; then extra=(--set "$EXTRA_SET"); fi
  if compgen -G "$dir/*/*/progress.csv" >/dev/null && [ -e "$dir/done" ]; then return; fi
  OMP_NUM_THREADS=1 "$CLI" train "$CONFIG" --output "$dir" --set "llm.model_dtype=$1" \
    --set "debugging.seed=$2" --set "resources.num_cpus_for_main_process=1" "${extra[@]}" \
    --num-cpus 1 \
    > "$dir.log" 2>&1 && touch "$dir/done"
}

jobs=()
for seed in $SEEDS; do for arm in $ARMS; do jobs+=("$arm $seed"); done; done
for ((i = 0; i < ${#jobs[@]}; i += 2)); do
  mkdir -p "$OUT/${jobs[i]// /_s}"
  train ${jobs[i]} &
  if ((i + 1 < ${#jobs[@]})); then mkdir -p "$OUT/${jobs[i+1]// /_s}"; train ${jobs[i+1]} & fi
  wait
done

.venv/bin/python - "$OUT" <<'EOF'
import csv, glob, math, sys
out = sys.argv[1]
print("| arm | seed | held-out by iteration (untrained first) | generated tokens | "
      "logp gap mean (max over iterations, per module) |\n|---|---|---|---|---|")
for path in sorted(glob.glob(f"{out}/*_s*/*/*/progress.csv")):
    run = path[len(out) + 1:].split("/")[0]
    rows = list(csv.DictReader(open(path)))
    held = [r["evaluation/untrained_success_rate"] for r in rows[:1]]
    held += [f'{float(r["evaluation/success_rate"]):.2f}@{r["training_iteration"]}'
             for r in rows if r.get("evaluation/success_rate") not in (None, "", "nan")]
    tokens = rows[-1].get("env_runners/num_generated_tokens_lifetime", "")
    gaps = {}
    for r in rows:
        for key, value in r.items():
            if key.endswith("/logp_mismatch_mean") and value not in ("", "nan"):
                module = key.split("/")[1]
                gaps[module] = max(gaps.get(module, 0.0), float(value))
    arm, seed = run.rsplit("_s", 1)
    print(f"| {arm} | {seed} | {' '.join(held)} | {tokens} | "
          + ", ".join(f"{m} {v:.4f}" for m, v in sorted(gaps.items())) + " |")
EOF
"$CLI" plot "$OUT"/*_s*/"$NAME" --out "$OUT/parity.png" --group-by run_dir >/dev/null
