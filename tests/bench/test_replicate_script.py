"""bench/replicate.sh's orchestration, with a stand-in CLI that records its calls: which arms
train, which checkpoint each evaluation gets (the role swap and the planner alone included),
the per-arm progress lines, and that a rerun skips finished trainings."""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Records each call; `train` leaves two checkpoints (the newest is the one to evaluate).
FAKE_CLI = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$1" = train ]; then
  while [ $# -gt 0 ]; do
    if [ "$1" = --output ]; then out=$2; fi
    shift
  done
  mkdir -p "$out/exp/trial/checkpoint_000000" "$out/exp/trial/checkpoint_000001"
fi
"""


def _replicate(tmp_path, calls, **env):
    cli = tmp_path / "cli"
    cli.write_text(FAKE_CLI)
    cli.chmod(0o755)
    return subprocess.run(
        ["bash", str(REPO / "bench" / "replicate.sh")], capture_output=True, text=True,
        timeout=60, env={**os.environ, "CLI": str(cli), "CALLS": str(calls),
                         "OUT": str(tmp_path / "out"), **env})


def test_every_arm_trains_once_is_evaluated_on_its_newest_checkpoint_and_reports_progress(
        tmp_path):
    calls = tmp_path / "calls.txt"
    run = _replicate(tmp_path, calls, SEEDS="0 1", ARMS="atgrpo_per_role vanilla_grpo")
    assert run.returncode == 0, run.stderr
    lines = calls.read_text().splitlines()
    trains = [line for line in lines if line.startswith("train ")]
    assert len(trains) == 4
    evals = [line for line in lines if line.startswith("eval --checkpoint")]
    # every arm and seed, plus the role swap and the planner alone of each per-role seed
    assert len(evals) == 4 + 2 + 2
    assert all("checkpoint_000001 " in line for line in evals)
    assert sum("--swap-roles" in line for line in evals) == 2
    alone = [line for line in evals if "--role-alone planner" in line]
    assert len(alone) == 2 and all('--env-override {"single_agent": true}' in line
                                   for line in alone)
    base = [line for line in lines if line.startswith("eval --base-model")]
    # the untrained rows play the trained arms' own task configs (no env config copied here)
    assert [line.split("--config ")[1].split()[:3] for line in base] == [
        ["tune_configs/plan_path_prefill_cpu.yaml", "--config-arm", "atgrpo_per_role"],
        ["tune_configs/plan_path_prefill_cpu.yaml", "--config-arm", "single_agent_grpo"]]
    assert all(line.split()[1:4] == ["tune_configs/plan_path_prefill_cpu.yaml", "--arm",
                                     line.split()[3]] for line in trains)
    progress = [line for line in run.stderr.splitlines() if line.startswith("[replicate ")]
    assert [line.split("] ")[1].split(",")[0] for line in progress] == [
        "arm 1/4", "arm 2/4", "arm 3/4", "arm 4/4", "arm 4/4"]
    assert progress[0].endswith("atgrpo_per_role seed=0 training")
    assert progress[-1].endswith("untrained baselines, report and plot")


def test_a_rerun_evaluates_again_without_training_again(tmp_path):
    calls = tmp_path / "calls.txt"
    settings = dict(SEEDS="0", ARMS="vanilla_grpo", SUMMARY="0")
    assert _replicate(tmp_path, calls, **settings).returncode == 0
    again = _replicate(tmp_path, calls, **settings)
    assert again.returncode == 0, again.stderr
    lines = calls.read_text().splitlines()
    assert sum(line.startswith("train ") for line in lines) == 1
    assert sum(line.startswith("eval ") for line in lines) == 2
    assert "vanilla_grpo seed=0 already trained; evaluating" in again.stderr


def test_empty_arms_run_only_the_untrained_rows_the_report_and_the_plot(tmp_path):
    calls = tmp_path / "calls.txt"
    run = _replicate(tmp_path, calls, ARMS="")
    assert run.returncode == 0, run.stderr
    lines = calls.read_text().splitlines()
    assert not any(line.startswith("train ") for line in lines)
    assert [line.split()[0] for line in lines] == ["eval", "eval", "report", "plot"]
    assert all(line.startswith("eval --base-model") for line in lines[:2])


def test_every_task_names_an_existing_config_and_arm_for_every_training_and_untrained_row(
        tmp_path):
    """Each TASK trains its setting's file with --arm; a file or arm missing for one arm would
    only fail hours into a real replication."""
    from pettingllms_rllib.experiment import arm_names

    arms = "atgrpo_per_role atgrpo_shared vanilla_grpo single_agent_grpo"
    for task in ("plan_path", "plan_path_split", "plan_path_helper", "math"):
        (tmp_path / task).mkdir()
        calls = tmp_path / task / "calls.txt"
        run = _replicate(tmp_path / task, calls, TASK=task, SEEDS="0", ARMS=arms)
        assert run.returncode == 0, run.stderr
        lines = calls.read_text().splitlines()
        picked = [(line.split()[1], line.split("--arm ")[1].split()[0]) for line in lines
                  if line.startswith("train ")]
        picked += [(line.split("--config ")[1].split()[0],
                    line.split("--config-arm ")[1].split()[0]) for line in lines
                   if line.startswith("eval --base-model")]
        assert len(picked) == 4 + 2
        assert len({config for config, _ in picked}) == 1, picked
        for config, arm in picked:
            assert arm in arm_names(REPO / config), (task, config, arm)


def test_an_unknown_task_is_refused_with_the_known_ones(tmp_path):
    run = _replicate(tmp_path, tmp_path / "calls.txt", TASK="sokoban")
    assert run.returncode == 2
    assert "plan_path, plan_path_split, plan_path_helper or math" in run.stderr
