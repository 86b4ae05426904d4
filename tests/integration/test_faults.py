"""Fault injection: what survives a kill, and what the user sees afterwards.

Each test breaks a real run of the CLI on the tiny random model and asserts on the files a user
would open next: every iteration once, in order, in every results file; ``plot`` works; the run
finishes."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("ray")

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "pettingllms_rllib.cli"]
ITERATIONS = 8
CONFIG = f"""
name: faults
mapping: per_role
stop: {{training_iteration: {ITERATIONS}}}
checkpoint_frequency: 1
algorithm:
  environment: {{env: plan_path_v0, env_config: {{grid_size: 3, max_turns: 1, prompt_style: compact}}}}
  llm:
    model: tiny-random
    tiny_model_config: {{hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                        num_attention_heads: 2, num_key_value_heads: 1}}
    max_new_tokens: 4
    lora: {{r: 4}}
  training: {{num_branches: 2, num_tasks_per_iteration: 1}}
  evaluation: {{evaluation_interval: 3, evaluation_duration: 2}}
"""


def _iterations(trial_dir: Path) -> list[int]:
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()
            if line.strip()]
    return [row["training_iteration"] for row in rows]


def _wait_for_results(output: Path, count: int, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in output.glob("faults/*/result.json"):
            lines = [line for line in path.read_text().splitlines() if line.strip()]
            if len(lines) >= count:
                return path.parent
        time.sleep(0.5)
    raise AssertionError(f"no trial reached {count} results in {timeout_s} s")


def test_kill_9_mid_run_then_resume_continues_and_every_file_stays_readable(tmp_path):
    config = tmp_path / "faults.yaml"
    config.write_text(textwrap.dedent(CONFIG))
    output = tmp_path / "runs"
    command = [*CLI, "train", str(config), "--output", str(output), "--num-cpus", "2"]
    env = dict(os.environ)
    first = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=open(tmp_path / "first.log", "w"))
    try:
        trial_dir = _wait_for_results(output, 4, timeout_s=300)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        first.wait()
    before = _iterations(trial_dir)
    assert before[:4] == [1, 2, 3, 4]

    resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    assert _iterations(trial_dir) == list(range(1, ITERATIONS + 1))  # no gap, no duplicate
    with open(trial_dir / "progress.csv", newline="") as handle:
        lines = list(csv.reader(handle))
    assert {len(line) for line in lines} == {len(lines[0])}  # every row fits the header
    frame = pd.read_csv(trial_dir / "progress.csv")
    assert frame["training_iteration"].tolist() == list(range(1, ITERATIONS + 1))
    plot = subprocess.run([*CLI, "plot", str(output / "faults")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert plot.returncode == 0, plot.stderr[-2000:]
    curve = json.loads((output / "faults" / "learning_curve.json").read_text())
    assert [trial["training_iteration"] for trial in curve.values()] == [
        list(range(1, ITERATIONS + 1))]
