"""Which evaluation instances of a replication's runs were also training instances.

    python bench/seen_instances.py runs/replication_plan_path_helper

For each trained run ``<replication>/train/<arm>/seed=<s>`` (one trial, driver-local env runner)
and its evaluation ``<replication>/eval/<arm>/seed=<s>/episodes.csv``: the run's training task
seeds are replayed with the runner's own draw (``task_seed_rng``, ``draw_training_seeds``;
``num_tasks_per_iteration`` per iteration for the iterations in ``progress.csv``), each seed's
instance is identified by what the agents are shown at reset (``instance_fingerprint``), and
the evaluated episodes are split into instances the run also trained on and instances it never
saw, with the success on each. On a task whose splits are disjoint (``plan_path_v1``) every
evaluation instance is unseen; ``plan_path_v0`` drew both from one pool. The first turn of an
unseen instance is a prompt the run never trained on; later turns reach states (the agent's
position, the goal) that training episodes may have visited.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pandas as pd

from pettingllms_rllib.algorithms.env_runner import draw_training_seeds, task_seed_rng
from pettingllms_rllib.envs import instance_fingerprint, make_text_env


def training_seeds(seed: int, num_tasks_per_iteration: int, iterations: int) -> list[int]:
    """The task seeds a run with a driver-local runner drew over ``iterations`` iterations."""
    rng = task_seed_rng(seed, 0)
    return [task for _ in range(iterations)
            for task in draw_training_seeds(rng, num_tasks_per_iteration)]


def seen_split(trial: Path, episodes_csv: Path) -> dict:
    """Success on the evaluated instances the trial trained on and on those it never saw."""
    params = json.loads((trial / "params.json").read_text())
    if int(params.get("num_env_runners") or 0) != 0:
        raise ValueError(f"{trial}: remote env runners draw their own seeds; only runs with "
                         f"num_env_runners=0 are replayed")
    iterations = int(pd.read_csv(trial / "progress.csv")["training_iteration"].max())
    env = make_text_env(params["env"], params["env_config"])
    trained = {instance_fingerprint(env, s) for s in training_seeds(
        int(params.get("seed") or 0), int(params["num_tasks_per_iteration"]), iterations)}
    seen, unseen = [], []
    with open(episodes_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            seed = int(row["task"].rsplit("=", 1)[1])
            target = seen if instance_fingerprint(env, seed) in trained else unseen
            target.append(int(float(row["success"])))
    return {"env": params["env"], "iterations": iterations, "training_instances": len(trained),
            "seen": len(seen), "seen_solved": sum(seen), "unseen": len(unseen),
            "unseen_solved": sum(unseen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("replication", type=Path, help="a bench/replicate.sh output folder")
    args = parser.parse_args()
    print("| arm | seed | env | iterations | distinct training instances | evaluated instances "
          "also trained on: solved | never trained on: solved |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for run in sorted((args.replication / "train").glob("*/seed=*")):
        arm, seed = run.parent.name, run.name.split("=", 1)[1]
        episodes = args.replication / "eval" / arm / f"seed={seed}" / "episodes.csv"
        trials = sorted(run.glob("*/*/progress.csv"))
        if not episodes.exists() or len(trials) != 1:
            continue
        split = seen_split(trials[0].parent, episodes)
        print(f"| {arm} | {seed} | {split['env']} | {split['iterations']} | "
              f"{split['training_instances']} | {split['seen_solved']}/{split['seen']} | "
              f"{split['unseen_solved']}/{split['unseen']} |")


if __name__ == "__main__":
    main()
