"""Three reasoning-gym datasets validate and train 2 iterations with the tiny model through the
CLI, one Tune trial each."""

import json
import textwrap

import pytest

pytest.importorskip("ray")

from toy_ray import TINY_RUN_SECTIONS  # noqa: E402

from pettingllms_rllib.cli import main  # noqa: E402

pytestmark = pytest.mark.integration

EXPERIMENT = """
name: reasoning_gym
mapping: per_role
grid:
  environment.env_config:
    - {dataset: basic_arithmetic}
    - {dataset: chain_sum, dataset_config: {min_terms: 2, max_terms: 3}}
    - {dataset: gcd}
stop: {training_iteration: 2}
checkpoint_frequency: 2
algorithm:
  environment: {env: reasoning_gym_v0}
""" + TINY_RUN_SECTIONS


def test_three_datasets_train_two_iterations_through_the_cli(tmp_path):
    config = tmp_path / "reasoning_gym.yaml"
    config.write_text(textwrap.dedent(EXPERIMENT))
    output = tmp_path / "runs"
    assert main(["train", str(config), "--output", str(output), "--num-cpus", "2"]) == 0
    curves = json.loads((output / "reasoning_gym" / "learning_curve.json").read_text())
    assert len(curves) == 3
    assert all(trial["training_iteration"] == [1, 2] for trial in curves.values())
