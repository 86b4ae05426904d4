"""Does a refactor change a number? The main job's first iterations in two trees, compared.

    python bench/same_numbers.py --baseline-rev a0ce795            # 4 iterations, seed 0
    python bench/same_numbers.py --baseline-rev a0ce795 --set llm.model_dtype=float32

Each tree (``--baseline-rev`` checked out into a temporary worktree, and this one) builds its own
``tune_configs/math_cpu.yaml`` with ``build_algo`` in a fresh process, one thread, held-out
evaluation every 2 iterations, and trains ``--iterations``. Every numeric entry of every result
(flattened, ``learners/<module>/...`` included) is compared, except wall-clock times, timers
and the keys only one tree logs (listed). Prints the differing keys, if any, and exits 1 then.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from iteration_speed import baseline_tree  # noqa: E402  (bench/ itself, on the path above)
from worker import run_worker  # noqa: E402

MAIN_JOB = Path("tune_configs/math_cpu.yaml")
#: Result keys that measure the machine, not the algorithm.
TIMING_MARKERS = ("time", "timer", "_s/", "throughput", "per_s", "sys_usage", "perf/", "_seconds",
                  "date", "hostname", "pid", "node_ip", "timestamp", "iteration_s",
                  "pool_update_s", "time_share", "time_s")

WORKER = r"""
import json, sys
import ray
from pettingllms_rllib.experiment import load_experiment
experiment = load_experiment(sys.argv[1], sys.argv[3:])
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
algo = experiment.config.build_algo()
rows = []

def flat(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flat(item, f"{prefix}{key}/")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix[:-1], float(value)

for _ in range(int(sys.argv[2])):
    rows.append(dict(flat(algo.train())))
algo.stop()
print("RESULT " + json.dumps(rows))
"""


def _numbers(tree: Path, args) -> list[dict[str, float]]:
    overrides = ["resources.num_cpus_for_main_process=1", "evaluation.evaluation_interval=2",
                 *args.set]
    return run_worker(WORKER, [tree / MAIN_JOB, args.iterations, *overrides], cwd=tree,
                      env={**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"},
                      what=f"main job in {tree}")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-rev", required=True)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--set", nargs="*", default=[], help="overrides for both trees")
    args = parser.parse_args()
    with baseline_tree(args.baseline_rev) as tree:
        before = _numbers(tree, args)
    after = _numbers(REPO, args)
    differing, compared, only_one = [], 0, set()
    for iteration, (old, new) in enumerate(zip(before, after), start=1):
        only_one |= set(old) ^ set(new)
        for key in sorted(set(old) & set(new)):
            if any(marker in key for marker in TIMING_MARKERS):
                continue
            compared += 1
            if not _same(old[key], new[key]):
                differing.append(f"iteration {iteration}: {key}: {old[key]!r} -> {new[key]!r}")
    print(f"{len(before)} iterations, {compared} numbers compared, {len(differing)} differ")
    print("\n".join(differing[:50]))
    if only_one:
        print("logged by one tree only:", ", ".join(sorted(only_one)[:30]))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
