"""Three reasoning-gym datasets validate and train 2 iterations with the tiny model through the
CLI, one Tune trial each."""

import json
import textwrap

import pytest

pytest.importorskip("ray")

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
  llm:
    model: tiny-random
    tiny_model_config: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                        num_attention_heads: 2, num_key_value_heads: 1}
    max_new_tokens: 4
  training: {num_branches: 2, num_tasks_per_iteration: 1, drop_zero_variance_groups: false}
"""


def test_three_datasets_train_two_iterations_through_the_cli(tmp_path):
    config = tmp_path / "reasoning_gym.yaml"
    config.write_text(textwrap.dedent(EXPERIMENT))
    output = tmp_path / "runs"
    assert main(["train", str(config), "--output", str(output), "--num-cpus", "2"]) == 0
    curves = json.loads((output / "reasoning_gym" / "learning_curve.json").read_text())
    assert len(curves) == 3
    assert all(trial["training_iteration"] == [1, 2] for trial in curves.values())
