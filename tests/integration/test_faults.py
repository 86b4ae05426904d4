"""Fault injection: what survives a kill, and what the user sees afterwards.

Each test breaks a real run of the CLI on the tiny random model and asserts on the files a user
would open next: every iteration once, in order, in every results file; ``plot`` works; the run
finishes."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from pettingllms_rllib.checkpoint_ledger import completed_checkpoints, repair_experiment_state
from pettingllms_rllib.trial_results import read_results

pytest.importorskip("ray")

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CLI = [sys.executable, "-m", "pettingllms_rllib.cli"]
ITERATIONS = 8
CONFIG = f"""
name: faults
mapping: per_role
stop: {{training_iteration: {ITERATIONS}}}
checkpoint_frequency: 1
algorithm:
  environment: {{env: plan_path_v1, env_config: {{grid_size: 3, max_turns: 1, variant: compact}}}}
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


def _saved_checkpoint(state_file: Path) -> Path:
    """The checkpoint the (only) trial of a saved Tune experiment state would resume from."""
    from ray.tune.utils.serialization import TuneFunctionDecoder

    trial = json.loads(state_file.read_text())["trial_data"][0]
    manager = json.loads(trial[1], cls=TuneFunctionDecoder,
                         allow_cloudpickle=True)["checkpoint_manager"]
    return Path(manager.latest_checkpoint_result.checkpoint.path)


def _name_in_saved_state(state_file: Path, checkpoint: Path) -> Path:
    """Make the (only) trial of a saved Tune experiment state resume from ``checkpoint``, as a
    state saved before Tune pruned it would; returns the checkpoint it named before."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.utils.serialization import TuneFunctionDecoder, TuneFunctionEncoder

    state = json.loads(state_file.read_text())
    metadata = json.loads(state["trial_data"][0][1], cls=TuneFunctionDecoder,
                          allow_cloudpickle=True)
    manager = metadata["checkpoint_manager"]
    before = Path(manager.latest_checkpoint_result.checkpoint.path)
    stale = _TrainingResult(Checkpoint(str(checkpoint)), {"training_iteration": 1})
    manager._checkpoint_results, manager._latest_checkpoint_result = [stale], stale
    state["trial_data"][0][1] = json.dumps(metadata, cls=TuneFunctionEncoder)
    state_file.write_text(json.dumps(state, cls=TuneFunctionEncoder))
    return before


def test_kill_9_then_resume_continues_from_the_newest_complete_checkpoint(tmp_path):
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
    # Tune's pruning window (pettingllms_rllib.checkpoint_ledger): the saved state names a
    # checkpoint Tune already deleted. While it exists, the repair changes nothing.
    experiment = output / "faults"
    state_file = max(experiment.glob("experiment_state-*.json"))
    saved, named = state_file.read_bytes(), _saved_checkpoint(state_file)
    if named.exists():
        assert repair_experiment_state(experiment) == [] and state_file.read_bytes() == saved
    else:  # the kill itself landed in the window (seen in a full make test run)
        assert [f"the saved state named {named.name}, which Tune had already deleted" in m
                for m in repair_experiment_state(experiment)] == [True]
    gone = trial_dir / "checkpoint_000000"  # iteration 1's: pruned once the third was kept
    assert not gone.exists() and _name_in_saved_state(state_file, gone) != gone
    complete = [e["name"] for e in completed_checkpoints(trial_dir)
                if (trial_dir / e["name"]).is_dir()]
    assert complete  # what the resume can fall back to

    resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the saved state named checkpoint_000000, which Tune had already deleted; " \
           "resuming from checkpoint_" in resumed.stderr, resumed.stderr[-3000:]

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


REMOTE_RUNNER = CONFIG.replace("name: faults", "name: runner_faults").replace(
    "  evaluation: {evaluation_interval: 3, evaluation_duration: 2}\n",
    "  env_runners: {num_env_runners: 1}\n"
    "  fault_tolerance: {restart_failed_env_runners: RESTARTS}\n")


def _runner_pids(session: int) -> list[int]:
    """The env runners of the run whose driver leads ``session`` (Ray's workers stay in the
    driver's session); never another run's, such as a test running beside this one."""
    found = subprocess.run(["pgrep", "-s", str(session), "-f", "ray::LLMEnvRunner"],
                           capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def _train_killing_the_runner(tmp_path, restarts: bool, async_rollout: bool = False):
    config = tmp_path / "runner.yaml"
    text = REMOTE_RUNNER.replace("RESTARTS", str(restarts).lower())
    if async_rollout:
        text = text.replace("num_tasks_per_iteration: 1}", "num_tasks_per_iteration: 1, "
                            "async_rollout: true}")
    config.write_text(textwrap.dedent(text))
    output = tmp_path / "runs"
    run = subprocess.Popen([*CLI, "train", str(config), "--output", str(output), "--num-cpus", "3"],
                           cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(
                len(p.read_text().splitlines()) >= 2
                for p in output.glob("runner_faults/*/result.json")):
            time.sleep(0.3)
        pids = _runner_pids(run.pid)
        assert pids, "no env runner process found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        log, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    return run.returncode, log, output


def _rows_of_a_run_that_survived_the_kill(code, log, output) -> list[dict]:
    """What every run with restarts on must show after its runner was killed: it finished
    every iteration once, logged the kill and resampled, and lost no task."""
    assert code == 0, log[-3000:]
    trial_dir = next(output.glob("runner_faults/*/"))
    assert _iterations(trial_dir) == list(range(1, ITERATIONS + 1))
    # The kill is seen either as a failed call or as a restarted runner answering with its
    # initial weights; both are logged and resampled.
    assert "failed while sampling; restarted [1]" in log or "answered with initial weights" in log
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    # Every iteration sampled with weights the check allows (else WeightsLagError) and no
    # task was dropped.
    assert all(row["env_runners"]["num_runners_lost"] == 0 for row in rows)
    return rows


def test_a_killed_env_runner_is_restarted_with_current_weights_and_the_run_finishes(tmp_path):
    rows = _rows_of_a_run_that_survived_the_kill(*_train_killing_the_runner(tmp_path,
                                                                            restarts=True))
    # The restarted runner sampled with the learner's current weights: one version per update.
    versions = [int(row["env_runners"]["weights_version_min"]) for row in rows]
    assert versions == list(range(versions[0], versions[0] + ITERATIONS)), versions


def test_async_a_runner_killed_mid_sample_is_restarted_and_staleness_stays_bounded(tmp_path):
    rows = _rows_of_a_run_that_survived_the_kill(*_train_killing_the_runner(
        tmp_path, restarts=True, async_rollout=True))
    lags = [lag for row in rows for lag in row["at_grpo"]["staleness_max"].values()
            if lag == lag]  # NaN: a module that trained nothing that iteration
    assert lags and all(lag <= 1 for lag in lags), lags  # a resampled share is current: 0


def test_with_restarts_off_the_error_names_the_dead_runner(tmp_path):
    code, log, _ = _train_killing_the_runner(tmp_path, restarts=False)
    assert code == 1
    assert re.search(r"an env runner failed while (sampling|receiving weights) and "
                     r"restart_failed_env_runners is off", log), log[-3000:]


@pytest.mark.skipif(os.geteuid() != 0, reason="a small tmpfs for the output needs root")
def test_a_full_checkpoint_disk_ends_the_run_with_the_reason_and_readable_results(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=900k", "tmpfs", str(small)], check=True)
    try:
        config = tmp_path / "faults.yaml"
        config.write_text(textwrap.dedent(CONFIG.replace(
            f"training_iteration: {ITERATIONS}", "training_iteration: 40")))
        run = subprocess.run([*CLI, "train", str(config), "--output", str(small / "runs"),
                              "--num-cpus", "2"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600)
        log = run.stdout + run.stderr
        assert run.returncode == 1, log[-3000:]
        assert "No space left on device" in log
        trial_dir = next((small / "runs" / "faults").glob("*/"))
        rows = read_results(trial_dir)  # what was written before the disk filled still reads
        assert rows and [r["training_iteration"] for r in rows] == list(range(1, len(rows) + 1))
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
