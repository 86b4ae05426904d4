"""`pettingllms-rllib train` end to end: YAML grid over the mapping -> Tune -> plot."""

import json
import textwrap

import pytest

pytest.importorskip("ray")

from pettingllms_rllib.cli import main  # noqa: E402

pytestmark = pytest.mark.integration

GRID = """
name: grid
mapping: shared
grid:
  mapping: [shared, per_role]
stop: {training_iteration: 1}
algorithm:
  environment: {env: plan_path_v0, env_config: {grid_size: 3, max_turns: 1, prompt_style: compact}}
  llm:
    model: tiny-random
    tiny_model_config: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                        num_attention_heads: 2, num_key_value_heads: 1}
    max_new_tokens: 4
  training: {num_branches: 2, num_tasks_per_iteration: 1}
"""


def test_train_runs_a_mapping_grid_and_writes_the_learning_curve(tmp_path):
    config = tmp_path / "grid.yaml"
    config.write_text(textwrap.dedent(GRID))
    output = tmp_path / "runs"
    assert main(["train", str(config), "--output", str(output), "--num-cpus", "2"]) == 0
    experiment = output / "grid"
    assert (experiment / "learning_curve.png").stat().st_size > 0
    curves = json.loads((experiment / "learning_curve.json").read_text())
    assert len(curves) == 2  # one trial per mapping
    for trial in curves.values():
        assert trial["training_iteration"] == [1]
        assert len(trial["success_rate"]) == 1
    modules = sorted(p.name for p in experiment.glob("*/checkpoint_*/learner_group/learner/rl_module/*")
                     if p.is_dir())
    assert {"shared", "tool", "planner"} <= set(modules)
