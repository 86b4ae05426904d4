"""A checkpoint written before this release still loads and evaluates.

``tests/fixtures/checkpoint_ca19997_tiny`` was written by main at ca19997 (2026-12-05): one
iteration of per-role LoRA (r=2) on a one-layer tiny-random llama, ``plan_path_v1`` 3x3, saved
with ``Algorithm.save_to_path`` (192 KB). Its config predates ``model_dtype: auto`` (it holds
``float32``), the checkpoints module and the engine registry."""

import json
from pathlib import Path

from pettingllms_rllib import checkpoints
from pettingllms_rllib.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_ca19997_tiny"


def test_its_layout_and_config_are_read():
    assert checkpoints.is_algorithm_checkpoint(FIXTURE)
    assert checkpoints.resolve(FIXTURE) == FIXTURE
    config = checkpoints.read_config(FIXTURE)
    assert config["env"] == "plan_path_v1" and config["model_dtype"] == "float32"
    assert [d.parent.name for d in checkpoints.module_dirs(FIXTURE)] == ["learner"]
    assert checkpoints.checkpoint_iteration(FIXTURE) == 1


def test_it_is_evaluated_with_its_trained_adapters(tmp_path):
    from pettingllms_rllib.evaluation.evaluate import checkpoint_policies

    policies = checkpoint_policies(FIXTURE)
    assert sorted(policies.modules) == ["planner", "tool"]
    assert policies.mapping == {"tool": "tool", "planner": "planner"}
    out = tmp_path / "eval"
    assert main(["eval", "--checkpoint", str(FIXTURE), "--num-tasks", "2",
                 "--out", str(out)]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["num_tasks"] == 2 and record["task"] == "plan_path_v1"
    assert record["training_budget"] is None  # not inside a Tune trial folder
