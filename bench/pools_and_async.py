"""Iteration wall time of resource pools and of asynchronous training, side by side.

Each arm is the main job (``tune_configs/math_cpu.yaml``: reasoner || tool, one LoRA adapter per
role on the bundled SmolLM2-135M, K = 4, 8 tasks per iteration) built with ``build_algo`` (no
Tune, no held-out evaluation), same seed, run in its own fresh process one after the other:

* ``one_pool`` / ``two_pools``: both modules in one remote learner (1 CPU), or one remote
  learner (1 CPU) per role, updating concurrently; the runner inside the driver.
* ``sync`` / ``async``: one remote env runner (1 CPU) and the learner inside the driver
  (1 CPU); ``async_rollout`` overlaps the runner's next sample with the update.
* ``two_pools_remote_runner`` / ``two_pools_async``: the layout of
  ``tune_configs/math_cpu_pools_async.yaml`` (one remote runner, one remote learner per role,
  fractional CPUs), synchronous or with ``async_rollout``, where each pool updates on its own
  schedule (``algorithms/pool_schedule.py``).

Per iteration it records Tune's ``time_this_iter_s``, the learner part, and each pool's own
update seconds. Run::

    .venv/bin/python bench/pools_and_async.py --iterations 3 --out /tmp/pools_async.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from worker import run_worker

REPO = Path(__file__).resolve().parent.parent
MAIN_JOB = REPO / "tune_configs" / "math_cpu.yaml"
OFF = ["evaluation.evaluation_interval=null"]
#: The shipped pools-and-async file's layout (tune_configs/math_cpu_pools_async.yaml).
TWO_SMALL_POOLS = ['resource_pools.pools={"reasoner_pool": {"modules": ["reasoner"], '
                   '"num_learners": 1, "num_cpus_per_learner": 0.5}, "tool_pool": '
                   '{"modules": ["tool"], "num_learners": 1, "num_cpus_per_learner": 0.5}}']
REMOTE_RUNNER = ["env_runners.num_env_runners=1", "env_runners.num_cpus_per_env_runner=0.5",
                 "resources.num_cpus_for_main_process=0.5"]
ARMS = {
    "one_pool": OFF + ['resource_pools.pools={"both": {"modules": ["reasoner", "tool"], '
                       '"num_learners": 1, "num_cpus_per_learner": 1}}'],
    "two_pools": OFF + ['resource_pools.pools={"reasoner_pool": {"modules": ["reasoner"], '
                        '"num_learners": 1, "num_cpus_per_learner": 1}, "tool_pool": '
                        '{"modules": ["tool"], "num_learners": 1, "num_cpus_per_learner": 1}}'],
    "sync": OFF + ["env_runners.num_env_runners=1", "env_runners.num_cpus_per_env_runner=1",
                   "resources.num_cpus_for_main_process=1"],
    "async": OFF + ["env_runners.num_env_runners=1", "env_runners.num_cpus_per_env_runner=1",
                    "resources.num_cpus_for_main_process=1", "training.async_rollout=true"],
    "two_pools_remote_runner": OFF + TWO_SMALL_POOLS + REMOTE_RUNNER,
    "two_pools_async": OFF + TWO_SMALL_POOLS + REMOTE_RUNNER + ["training.async_rollout=true"],
}

WORKER = r"""
import json, sys
import ray
from pettingllms_rllib.experiment import load_experiment
experiment = load_experiment(sys.argv[1], sys.argv[3:])
ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
algo = experiment.config.build_algo()
rows = []
for _ in range(int(sys.argv[2])):
    result = algo.train()
    stats = result.get("at_grpo", {})
    rows.append({"time_this_iter_s": result["time_this_iter_s"],
                 "learner_s": stats.get("time_s", {}).get("learner"),
                 "sample_wait_s": result["timers"].get("env_runner_sampling_timer"),
                 "pool_update_s": stats.get("pool_update_s"),
                 "weights_version_min": result["env_runners"].get("weights_version_min"),
                 "staleness_max": stats.get("staleness_max"),
                 "success_rate": result["env_runners"]["success_rate"]})
algo.stop()
print("RESULT " + json.dumps(rows, default=float))
"""


def run_arm(name: str, iterations: int) -> list[dict]:
    return run_worker(WORKER, [MAIN_JOB, iterations, *ARMS[name]], cwd=REPO, what=f"arm {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args()
    results = {}
    for name in args.arms:
        results[name] = run_arm(name, args.iterations)
        print(name, [round(row["time_this_iter_s"], 1) for row in results[name]], flush=True)
    text = json.dumps(results, indent=1, default=float)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
