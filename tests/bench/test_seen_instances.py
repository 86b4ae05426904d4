"""bench/seen_instances.py: it replays exactly the training seeds a run's runner drew, and
splits a run's evaluated episodes into instances the run trained on and instances it never saw."""

import csv
import importlib.util
import json
from pathlib import Path

from toy_env import ToyScoreEnv

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.env_runner import LLMEnvRunner
from pettingllms_rllib.envs import TRAIN_SEED_LIMIT, instance_fingerprint, register_text_env
from pettingllms_rllib.experiment import multi_agent_kwargs

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("seen_instances", REPO / "bench" / "seen_instances.py")
seen_instances = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seen_instances)

CONFIG = {"max_turns": 1}


def test_the_replayed_seeds_are_the_ones_the_runner_draws():
    register_text_env("toy_score_v0", ToyScoreEnv)
    config = (ATGRPOConfig()
              .environment("toy_score_v0", env_config=CONFIG)
              .llm(model="tiny-random", tiny_model_config={"hidden_size": 16,
                                                           "intermediate_size": 32},
                   max_new_tokens=2)
              .training(num_branches=2, num_tasks_per_iteration=3)
              .multi_agent(**multi_agent_kwargs("shared", ["writer", "reviewer"]))
              .debugging(seed=7))
    runner = LLMEnvRunner(config=config)
    drawn = [seed for _ in range(4) for seed in runner.draw_task_seeds(3)]
    assert drawn == seen_instances.training_seeds(7, 3, 4)
    assert drawn != seen_instances.training_seeds(8, 3, 4)


def test_evaluated_episodes_split_into_trained_and_never_seen_instances(tmp_path):
    register_text_env("toy_score_v0", ToyScoreEnv)
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "params.json").write_text(json.dumps({
        "env": "toy_score_v0", "env_config": CONFIG, "seed": 5,
        "num_tasks_per_iteration": 4, "num_env_runners": 0}))
    (trial / "progress.csv").write_text("training_iteration\n1\n2\n")
    env = ToyScoreEnv(**CONFIG)
    trained = {instance_fingerprint(env, s) for s in seen_instances.training_seeds(5, 4, 2)}
    evaluated = range(TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 40)
    seen = [s for s in evaluated if instance_fingerprint(env, s) in trained]
    unseen = [s for s in evaluated if s not in seen]
    assert seen and unseen  # 8 draws of 100 topics: some of 40 evaluation seeds repeat one
    episodes = tmp_path / "episodes.csv"
    with open(episodes, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["task", "success"])
        for seed in evaluated:  # solve every seen instance and the first unseen one
            writer.writerow([f"toy_score_v0/seed={seed}", int(seed in seen or seed == unseen[0])])
    split = seen_instances.seen_split(trial, episodes)
    assert (split["seen"], split["seen_solved"]) == (len(seen), len(seen))
    assert (split["unseen"], split["unseen_solved"]) == (len(unseen), 1)
    assert split["iterations"] == 2 and split["training_instances"] == len(trained)
