"""``train`` says once which launcher runs the agents' programs and records it beside the run's
params (issue 42: the choice and its guarantees, printed and written), only for tasks that run
programs."""

import json
import logging

import registered_toy_envs  # noqa: F401  (registers toy_score_v0)

from pettingllms_envs.sandbox.bwrap import find_bwrap
from pettingllms_rllib.cli import _record_sandbox
from pettingllms_rllib.experiment import load_experiment

MATH = """
name: tiny_math
mapping: per_role
stop: {training_iteration: 1}
algorithm:
  environment: {env: math_v0, env_config: {max_turns: 1}}
  llm: {model: tiny-random, max_new_tokens: 4}
  training: {num_branches: 2, num_tasks_per_iteration: 1}
"""


def test_a_task_that_runs_programs_records_its_launcher_and_guarantees(tmp_path, caplog):
    path = tmp_path / "math.yaml"
    path.write_text(MATH)
    with caplog.at_level(logging.INFO, logger="pettingllms_rllib"):
        _record_sandbox(load_experiment(str(path), []), tmp_path / "tiny_math")
    recorded = json.loads((tmp_path / "tiny_math" / "sandbox.json").read_text())
    # make test installs bubblewrap; where it is installed it must be the one in use.
    assert recorded["launcher"] == ("bubblewrap" if find_bwrap() else "unshare")
    assert recorded["guarantees"] and isinstance(recorded["guarantees"], list)
    assert f"sandbox: {recorded['launcher']}" in caplog.text


def test_a_task_without_programs_records_nothing(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(MATH.replace("math_v0, env_config: {max_turns: 1}",
                                 "toy_score_v0, env_config: {max_turns: 1}")
                    .replace("name: tiny_math", "name: tiny_toy"))
    _record_sandbox(load_experiment(str(path), []), tmp_path / "tiny_toy")
    assert not (tmp_path / "tiny_toy" / "sandbox.json").exists()
