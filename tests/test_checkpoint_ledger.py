"""Complete checkpoints are listed as Tune saves them, and a resume whose saved state names a
deleted checkpoint is pointed at the newest complete one (the kill -9 fault test runs it for
real)."""

import json
from types import SimpleNamespace

from pettingllms_rllib.checkpoint_ledger import (
    LEDGER,
    CheckpointLedger,
    append_journal,
    completed_checkpoints,
    repair_experiment_state,
)


def _save(ledger, trial_dir, index, iteration):
    folder = trial_dir / f"checkpoint_{index:06d}"
    folder.mkdir(parents=True)
    trial = SimpleNamespace(last_result={"training_iteration": iteration})
    ledger.on_checkpoint(iteration=0, trials=[trial], trial=trial,
                         checkpoint=SimpleNamespace(path=str(folder)))
    return folder


def test_each_saved_checkpoint_is_listed_once_and_pruned_ones_drop_out(tmp_path):
    ledger = CheckpointLedger()
    first = _save(ledger, tmp_path, 0, 1)
    _save(ledger, tmp_path, 1, 2)
    first.rmdir()  # Tune pruned it
    _save(ledger, tmp_path, 2, 3)
    assert completed_checkpoints(tmp_path) == [
        {"name": "checkpoint_000001", "training_iteration": 2},
        {"name": "checkpoint_000002", "training_iteration": 3}]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_checkpoint_saved_again_under_its_name_is_listed_with_its_new_iteration(tmp_path):
    ledger = CheckpointLedger()
    folder = _save(ledger, tmp_path, 4, 5)
    folder.rmdir()
    _save(ledger, tmp_path, 4, 4)  # a resumed trial reuses the index
    assert completed_checkpoints(tmp_path) == [
        {"name": "checkpoint_000004", "training_iteration": 4}]


def test_a_missing_or_unreadable_ledger_lists_nothing(tmp_path):
    assert completed_checkpoints(tmp_path) == []
    (tmp_path / LEDGER).write_text("[{\"name\": ")
    assert completed_checkpoints(tmp_path) == []
    (tmp_path / LEDGER).write_text(json.dumps({"name": "checkpoint_000001"}))
    assert completed_checkpoints(tmp_path) == []


def test_a_remote_checkpoint_is_not_listed(tmp_path):
    trial = SimpleNamespace(last_result={"training_iteration": 1})
    CheckpointLedger().on_checkpoint(iteration=0, trials=[trial], trial=trial,
                                     checkpoint=SimpleNamespace(path="bucket/run/checkpoint_0"))
    assert not any(tmp_path.iterdir())


def test_an_unreadable_newest_state_is_moved_aside_for_the_session_before(tmp_path):
    assert repair_experiment_state(tmp_path) == []
    older = tmp_path / "experiment_state-2026-12-01_00-00-00.json"
    older.write_text(json.dumps({"trial_data": []}))
    newest = tmp_path / "experiment_state-2026-12-01_01-00-00.json"
    newest.write_text('{"trial_data": [')  # cut short by a kill while Tune wrote it
    assert repair_experiment_state(tmp_path) == []
    assert not newest.exists() and older.exists()
    assert (tmp_path / f"{newest.name}.unreadable").read_text() == '{"trial_data": ['


def test_journal_rows_fill_in_what_result_json_lacks_and_a_redone_row_wins(tmp_path):
    from pettingllms_rllib.trial_results import read_results, tidy_trial

    rows = [{"training_iteration": i, "timestamp": 100 + i, "x": i} for i in (1, 2, 3)]
    (tmp_path / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    for row in rows:  # the journal has every row; Tune's copy missed the third
        append_journal(tmp_path, row)
    append_journal(tmp_path, {"training_iteration": 3, "timestamp": 200, "x": 30})  # redone
    assert [r["x"] for r in read_results(tmp_path)] == [1, 2, 30]
    assert tidy_trial(tmp_path) == 3
    assert [json.loads(line)["x"] for line in
            (tmp_path / "result.json").read_text().splitlines()] == [1, 2, 30]
