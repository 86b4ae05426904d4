"""The best held-out checkpoint is copied apart from the ones Tune keeps (and may delete)."""

import json

from pettingllms_rllib.best_checkpoint import BEST_FOLDER, keep_if_best, read_best


def _checkpoint(trial, index, marker):
    folder = trial / f"checkpoint_{index:06d}"
    folder.mkdir(parents=True)
    (folder / "weights.txt").write_text(marker)
    return folder


def test_a_better_or_equal_score_replaces_the_copy_and_a_worse_one_does_not(tmp_path):
    assert read_best(tmp_path) is None
    assert keep_if_best(_checkpoint(tmp_path, 1, "it2"), 0.5, 2)
    assert not keep_if_best(_checkpoint(tmp_path, 3, "it4"), 0.25, 4)
    assert (tmp_path / BEST_FOLDER / "weights.txt").read_text() == "it2"
    assert keep_if_best(_checkpoint(tmp_path, 5, "it6"), 0.5, 6)  # equal: the newer one
    best = read_best(tmp_path)
    assert best == {"held_out_success_rate": 0.5, "training_iteration": 6,
                    "copied_from": "checkpoint_000005", "path": str(tmp_path / BEST_FOLDER)}
    assert (tmp_path / BEST_FOLDER / "weights.txt").read_text() == "it6"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_copy_left_half_built_by_a_crash_is_replaced_and_the_best_survives(tmp_path):
    keep_if_best(_checkpoint(tmp_path, 1, "it2"), 0.5, 2)
    (tmp_path / f".{BEST_FOLDER}.new").mkdir()  # a crash while copying
    (tmp_path / f".{BEST_FOLDER}.new" / "partial").write_text("x")
    assert json.loads((tmp_path / BEST_FOLDER / "held_out.json").read_text())[
        "training_iteration"] == 2
    assert keep_if_best(_checkpoint(tmp_path, 3, "it4"), 0.75, 4)
    assert not (tmp_path / BEST_FOLDER / "partial").exists()
    assert (tmp_path / BEST_FOLDER / "weights.txt").read_text() == "it4"
