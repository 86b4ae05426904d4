"""A user's plain PettingZoo envs (tests/support/plain_envs.py: a sequential and a parallel
``ParallelEnv`` and a turn-based ``AECEnv``, none written for this library) train through the
CLI once a module listed under ``imports:`` registers them wrapped, as a user would."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray")

from toy_ray import TINY_RUN_SECTIONS  # noqa: E402

pytestmark = pytest.mark.integration

SUPPORT = Path(__file__).resolve().parents[1] / "support"

USER_MODULE = """
from plain_envs import ClueGame, RelayAEC, VoteGame

from pettingllms_rllib.envs import register_text_env, wrap_aec_env, wrap_parallel_env

register_text_env("clue_game_v0", wrap_parallel_env(ClueGame))
register_text_env("vote_game_v0", wrap_parallel_env(VoteGame))
register_text_env("relay_aec_v0", wrap_aec_env(RelayAEC))
"""

EXPERIMENT = """
name: wrapped
imports: [my_team_envs]
mapping: per_role
grid:
  environment.env: [clue_game_v0, vote_game_v0, relay_aec_v0]
stop: {training_iteration: 2}
checkpoint_frequency: 2
algorithm:
  environment: {env: clue_game_v0}
""" + TINY_RUN_SECTIONS


def test_plain_parallel_and_aec_envs_train_two_iterations_through_the_cli(tmp_path):
    (tmp_path / "my_team_envs.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "wrapped.yaml").write_text(textwrap.dedent(EXPERIMENT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SUPPORT)])}
    run = subprocess.run([sys.executable, "-m", "pettingllms_rllib.cli", "train", "wrapped.yaml",
                          "--output", "runs", "--num-cpus", "2"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    curves = json.loads((tmp_path / "runs" / "wrapped" / "learning_curve.json").read_text())
    assert len(curves) == 3
    assert all(trial["training_iteration"] == [1, 2] for trial in curves.values())
    modules = {p.name for p in (tmp_path / "runs" / "wrapped").glob(
        "*/checkpoint_*/learner_group/learner/rl_module/*") if p.is_dir()}
    assert {"describer", "guesser", "left", "right", "first", "second"} <= modules
