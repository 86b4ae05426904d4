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
  environment: {env: plan_path_v1, env_config: {grid_size: 3, max_turns: 1, variant: compact}}
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


TWO_ITERATIONS = GRID.replace("name: grid", "name: terminal").replace(
    "grid:\n  mapping: [shared, per_role]\n", "").replace(
    "stop: {training_iteration: 1}", "stop: {training_iteration: 2}")


def test_the_terminal_shows_one_line_per_iteration_no_warnings_and_where_things_are(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "terminal.yaml"
    config.write_text(textwrap.dedent(TWO_ITERATIONS))
    run = subprocess.run([sys.executable, "-m", "pettingllms_rllib.cli", "train", str(config),
                          "--output", str(tmp_path / "runs"), "--num-cpus", "2"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    shown = run.stdout + run.stderr
    assert run.returncode == 0, shown[-3000:]
    lines = [line for line in shown.splitlines() if "pettingllms_rllib: iter " in line]
    assert [line.split("pettingllms_rllib: ")[1].split(" |")[0] for line in lines] == [
        "iter 1/2", "iter 2/2"]
    for field in ("tokens ", "success ", "return planner ", "parse errors planner ",
                  "zero-var ", " s (generate "):
        assert all(field in line for line in lines), (field, lines)
    for noise in ("DeprecationWarning", "FutureWarning", "_disable_action_flattening",
                  "new API stack", "Install gputil", "Trainable.setup took",
                  "snapshotting has been triggered", "Loading weights",
                  "Checkpoint successfully created"):
        assert noise not in shown, noise
    assert f"learning curve: {tmp_path / 'runs' / 'terminal' / 'learning_curve.png'}" in shown
    assert "last checkpoint " in shown and "final iter 2" in shown
    assert len(shown.splitlines()) < 40  # not hundreds


FIVE_EVALUATED = GRID.replace("name: grid", "name: keep").replace(
    "grid:\n  mapping: [shared, per_role]\n", "checkpoint_frequency: 1\n").replace(
    "stop: {training_iteration: 1}", "stop: {training_iteration: 5}") + (
    "  evaluation: {evaluation_interval: 2, evaluation_duration: 1}\n")


def test_the_latest_and_best_checkpoints_and_every_held_out_transcript_are_kept(tmp_path,
                                                                              caplog):
    import logging

    from pettingllms_rllib.algorithms.held_out import HELD_OUT_TRANSCRIPTS_DIR
    from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT, task_name
    from pettingllms_rllib import checkpoints

    config = tmp_path / "keep.yaml"
    config.write_text(textwrap.dedent(FIVE_EVALUATED))
    with caplog.at_level(logging.INFO, logger="pettingllms_rllib"):
        assert main(["train", str(config), "--output", str(tmp_path / "runs"),
                     "--num-cpus", "2"]) == 0
    trial = next((tmp_path / "runs" / "keep").glob("ATGRPO_*/"))
    rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    held_out = {row["training_iteration"]: row["held_out_success_rate"] for row in rows}
    assert sorted(i for i, v in held_out.items() if v == v) == [2, 4]  # NaN elsewhere
    # Tune keeps the two newest saves (save k holds iteration k + 1), as resuming needs.
    kept = sorted(int(p.name.split("_")[1]) for p in trial.glob("checkpoint_*"))
    assert kept == [3, 4]
    # The best evaluated iteration (ties: the newer) is copied apart, with its record.
    best = max((2, 4), key=lambda i: (held_out[i], i))
    record = json.loads((trial / "best_checkpoint" / "held_out.json").read_text())
    assert record == {"held_out_success_rate": held_out[best], "training_iteration": best,
                      "copied_from": f"checkpoint_{best - 1:06d}"}
    assert checkpoints.read_config(trial / "best_checkpoint")["env"] == "plan_path_v1"
    assert checkpoints.resolve(trial).name == "checkpoint_000004"  # eval RUN_DIR: the newest
    assert (f"best held-out checkpoint {trial / 'best_checkpoint'} "
            f"(success {held_out[best]:.3f} at iteration {best}; picked on those") in caplog.text
    # Each evaluation's transcript (the untrained team's too) is in the trial folder: every
    # held-out instance, and the parse errors the metrics counted.
    transcripts = trial / HELD_OUT_TRANSCRIPTS_DIR
    assert sorted(p.name for p in transcripts.iterdir()) == [
        "iteration_000000.jsonl", "iteration_000002.jsonl", "iteration_000004.jsonl"]
    by_iteration = {row["training_iteration"]: row for row in rows}
    for iteration in (2, 4):
        entries = [json.loads(line) for line in
                   (transcripts / f"iteration_{iteration:06d}.jsonl").read_text().splitlines()]
        assert {e["task"] for e in entries} == {task_name("plan_path_v1", TRAIN_SEED_LIMIT)}
        for agent in ("planner", "tool"):
            errors = [e["parse_error"] is not None for e in entries if e["agent"] == agent]
            logged = by_iteration[iteration]["evaluation"]["agent"][agent]["parse_error_rate"]
            assert errors and sum(errors) / len(errors) == pytest.approx(logged)
