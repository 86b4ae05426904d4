"""Result files of a resumed trial: each iteration once, one column set, torn lines skipped."""

import csv
import json

import pandas as pd

from pettingllms_rllib.trial_results import read_results, tidy_trial


def _write(trial, rows, tail=""):
    (trial / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_a_redone_iteration_counts_once_and_the_later_row_wins(tmp_path):
    _write(tmp_path, [{"training_iteration": 1, "a": {"b": 1}},
                      {"training_iteration": 2, "a": {"b": 2}},
                      {"training_iteration": 2, "a": {"b": 20}, "config": {"lr": 1}},
                      {"training_iteration": 3, "a": {"b": 3}}])
    rows = read_results(tmp_path)
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    assert rows[1]["a/b"] == 20 and "config/lr" not in rows[1]


def test_a_torn_last_line_is_skipped(tmp_path):
    _write(tmp_path, [{"training_iteration": 1}], tail='{"training_iteration": 2, "a"')
    assert [r["training_iteration"] for r in read_results(tmp_path)] == [1]


def test_tidy_rewrites_both_files_with_one_column_set(tmp_path):
    _write(tmp_path, [{"training_iteration": 1, "x": 1.0},
                      {"training_iteration": 2, "x": 2.0},
                      {"training_iteration": 2, "x": 2.5},
                      {"training_iteration": 3, "x": float("nan"), "evaluation": {"success": 0.5}}])
    (tmp_path / "progress.csv").write_text("training_iteration,x\n1,1.0\n2,2.0,0.5\n")
    assert tidy_trial(tmp_path) == 3
    with open(tmp_path / "progress.csv", newline="") as handle:
        lines = list(csv.reader(handle))
    assert lines[0] == ["training_iteration", "x", "evaluation/success"]
    assert {len(line) for line in lines} == {3}
    frame = pd.read_csv(tmp_path / "progress.csv")
    assert frame["training_iteration"].tolist() == [1, 2, 3]
    assert [json.loads(line)["training_iteration"]
            for line in (tmp_path / "result.json").read_text().splitlines()] == [1, 2, 3]


def test_a_trial_without_results_is_left_alone(tmp_path):
    (tmp_path / "progress.csv").write_text("keep me")
    assert tidy_trial(tmp_path) == 0
    assert (tmp_path / "progress.csv").read_text() == "keep me"


def test_a_full_disk_leaves_both_files_as_they_were(tmp_path, monkeypatch):
    import errno
    import os

    _write(tmp_path, [{"training_iteration": 1}, {"training_iteration": 1}])
    (tmp_path / "progress.csv").write_text("training_iteration\n1\n1\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    try:
        tidy_trial(tmp_path)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        raise AssertionError("a full disk must be reported")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temp file left
