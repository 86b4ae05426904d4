#!/usr/bin/env bash
# The CPU replication of the paper's comparisons, one command per task (TASK=math,
# plan_path, the default, plan_path_split: Plan-Path with the offsets in the tool's prompt
# only, where the planner needs the tool, or plan_path_helper: the tool calls a move helper
# with the two positions it reads, and the untrained team is inside the 5-30% band):
#
#   TASK=math bench/replicate.sh                      # everything, 3 seeds (hours on 2 cores)
#   SEEDS="0" ARMS="atgrpo_per_role vanilla_grpo" TASKS=16 bench/replicate.sh
#   EXTRA_SET='stop={training_iteration: 1}' ...      # extra --set overrides for every training
#   ARMS="" bench/replicate.sh                         # only the untrained rows, report, plot
#   SEEDS=1 SUMMARY=0 bench/replicate.sh & SEEDS=2 SUMMARY=0 bench/replicate.sh
#                                                     # seeds in parallel (a training uses one
#                                                     # core), then once without SUMMARY=0 (it
#                                                     # reuses every finished training)
#
# For every arm and seed: train the task's setting file with --arm <arm> (its `arms:`; all arms
# stop at the same generated-token budget), evaluate the LAST checkpoint (no checkpoint is picked
# on the evaluation set) on the fixed evaluation seeds with greedy decoding; then the untrained
# base model (prompt-only, as a team and as a single agent) and the role swap of every per-role
# seed, and its trained planner (math: reasoner) alone on the one-agent task; then one Markdown
# report and one learning-curve figure.
set -euo pipefail
cd "$(dirname "$0")/.."

TASK=${TASK:-plan_path}
OUT=${OUT:-runs/replication_$TASK}
# Unset: the defaults; set but empty (ARMS=""): no trainings, only the untrained rows, the
# report and the plot over what is already under $OUT.
SEEDS=${SEEDS-"0 1 2"}
ARMS=${ARMS-"atgrpo_per_role atgrpo_shared vanilla_grpo single_agent_grpo"}
TASKS=${TASKS:-64}
CLI=${CLI:-.venv/bin/pettingllms-rllib}
EXTRA_SET=${EXTRA_SET:-}
SUMMARY=${SUMMARY:-1}  # 0: only this worker's trainings and evals (no baselines, report, plot)
case "$TASK" in  # the setting's file, and the role a per-role team's planner-alone eval plays
  plan_path) CONFIG=tune_configs/plan_path_prefill_cpu.yaml ALONE_ROLE=planner ;;
  plan_path_split) CONFIG=tune_configs/plan_path_tool_offsets_cpu.yaml ALONE_ROLE=planner ;;
  plan_path_helper) CONFIG=tune_configs/plan_path_tool_helper_cpu.yaml ALONE_ROLE=planner ;;
  math) CONFIG=tune_configs/math_cpu.yaml ALONE_ROLE=reasoner ;;
  *) echo "TASK must be plan_path, plan_path_split, plan_path_helper or math, got $TASK" >&2
     exit 2 ;;
esac
# The untrained rows play the task (env, env_config, max_new_tokens) of the trained arms'
# own configs: the per-role team's for the team, the single-agent arm's for the single agent.

last_checkpoint() {  # the newest checkpoint of the only trial under $1
  find "$1" -maxdepth 3 -type d -name 'checkpoint_*' | sort | tail -1
}

read -r -a seed_list <<< "$SEEDS"
read -r -a arm_list <<< "$ARMS"
total=$(( ${#seed_list[@]} * ${#arm_list[@]} ))
done_count=0
started=$SECONDS
progress() {  # one line per arm: where the grid is and how long it has run
  echo "[replicate $(date +%H:%M:%S)] arm $done_count/$total, $(( (SECONDS - started) / 60 )) min: $*" >&2
}

for seed in $SEEDS; do  # seeds outside: a cut-short grid still has every arm at seed 0
  for arm in $ARMS; do
    done_count=$((done_count + 1))
    run="$OUT/train/$arm/seed=$seed"
    if [ -f "$run/.trained" ]; then
      progress "$arm seed=$seed already trained; evaluating"
    else  # an interrupted run is trained again from scratch
      progress "$arm seed=$seed training"
      rm -rf "$run"
      extra=()
      if [ -n "$EXTRA_SET" ]; then extra=(--set "$EXTRA_SET"); fi
      "$CLI" train "$CONFIG" --arm "$arm" --output "$run" \
        --set 'grid={}' --set "debugging.seed=$seed" "${extra[@]}"
      touch "$run/.trained"
    fi
    ckpt=$(last_checkpoint "$run")
    "$CLI" eval --checkpoint "$ckpt" --num-tasks "$TASKS" --arm "$arm" --train-seed "$seed" \
      --label "$arm/seed=$seed" --out "$OUT/eval/$arm/seed=$seed"
    if [ "$arm" = atgrpo_per_role ]; then
      "$CLI" eval --checkpoint "$ckpt" --swap-roles --num-tasks "$TASKS" --arm role_swap \
        --train-seed "$seed" --label "role_swap/seed=$seed" --out "$OUT/eval/role_swap/seed=$seed"
      "$CLI" eval --checkpoint "$ckpt" --role-alone "$ALONE_ROLE" \
        --env-override '{"single_agent": true}' --num-tasks "$TASKS" --arm "${ALONE_ROLE}_alone" \
        --train-seed "$seed" --label "${ALONE_ROLE}_alone/seed=$seed" \
        --out "$OUT/eval/${ALONE_ROLE}_alone/seed=$seed"
    fi
  done
done

if [ "$SUMMARY" = 0 ]; then exit 0; fi
progress "untrained baselines, report and plot"
"$CLI" eval --base-model smollm2-135m-instruct --config "$CONFIG" --config-arm atgrpo_per_role \
  --num-tasks "$TASKS" --arm prompt_only --label prompt_only --out "$OUT/eval/prompt_only"
"$CLI" eval --base-model smollm2-135m-instruct --config "$CONFIG" \
  --config-arm single_agent_grpo --num-tasks "$TASKS" \
  --arm prompt_only_single_agent --label prompt_only_single_agent \
  --out "$OUT/eval/prompt_only_single_agent"

"$CLI" report "$OUT/eval" --out "$OUT/report.md"
"$CLI" plot "$OUT"/train/*/*/* --group-by name --out "$OUT/learning_curves.png"
echo "report: $OUT/report.md, curves: $OUT/learning_curves.png"
