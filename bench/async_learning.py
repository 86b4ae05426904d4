"""Does asynchronous training learn as well? Held-out success after the same wall time.

The main job (``tune_configs/math_cpu.yaml``) with one remote env runner (1 CPU) and the
learner inside the driver (1 CPU), synchronous or with ``async_rollout``, trained through
``build_algo`` until ``--seconds`` of training have passed (whole iterations: the last one
that starts before the budget runs to its end), then evaluated greedily on the first 32
held-out instances (the ones ``evaluation/success_rate`` uses). One fresh process per
(mode, seed), one after the other. Run::

    .venv/bin/python bench/async_learning.py --seconds 420 --seeds 0 1 2 --out /tmp/al.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from worker import run_worker

REPO = Path(__file__).resolve().parent.parent
MAIN_JOB = REPO / "tune_configs" / "math_cpu.yaml"
COMMON = ["evaluation.evaluation_interval=null", "evaluation.evaluation_duration=32",
          "env_runners.num_env_runners=1", "env_runners.num_cpus_per_env_runner=1",
          "resources.num_cpus_for_main_process=1"]
MODES = {"sync": COMMON, "async": COMMON + ["training.async_rollout=true"]}

WORKER = r"""
import json, sys, time
import ray
from pettingllms_rllib.experiment import load_experiment
from pettingllms_rllib.metric_keys import EVALUATION_SUCCESS_RATE
budget, seed = float(sys.argv[2]), int(sys.argv[3])
experiment = load_experiment(sys.argv[1], [f"debugging.seed={seed}", *sys.argv[4:]])
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
algo = experiment.config.build_algo()
trained, iterations = 0.0, []
while trained < budget:
    result = algo.train()
    trained += result["time_this_iter_s"]
    iterations.append({"time_this_iter_s": result["time_this_iter_s"],
                       "success_rate": result["env_runners"]["success_rate"]})
held_out = algo.evaluate()
algo.stop()
print("RESULT " + json.dumps({"seed": seed, "trained_s": trained, "iterations": iterations,
                              "held_out_success": held_out[EVALUATION_SUCCESS_RATE]},
                             default=float))
"""


def run(mode: str, seed: int, seconds: float) -> dict:
    return run_worker(WORKER, [MAIN_JOB, seconds, seed, *MODES[mode]], cwd=REPO,
                      what=f"{mode} seed {seed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=420.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for seed in args.seeds:
        for mode in args.modes:
            row = run(mode, seed, args.seconds)
            results[mode].append(row)
            print(f"{mode} seed {seed}: {len(row['iterations'])} iterations in "
                  f"{row['trained_s']:.0f} s, held-out success {row['held_out_success']:.3f}",
                  flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    print(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
