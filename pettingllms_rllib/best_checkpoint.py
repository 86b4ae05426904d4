"""Keep a copy of each trial's best checkpoint by held-out success, beside the ones Tune keeps.

Tune's ``CheckpointConfig`` keeps the newest two checkpoints by recency. That is what
``--resume`` needs: Tune deletes an old checkpoint as soon as a newer one is registered and
saves the experiment state (what a resume reads) one controller step later, so a run killed in
that window names a deleted checkpoint (:mod:`pettingllms_rllib.checkpoint_ledger` repairs
that at resume from the newest complete one). Ranked by a score, the deleted one is the
previous checkpoint itself, which would make every save such a window. So the best
checkpoint is kept apart: when an iteration that evaluated on the held-out set
(``held_out_success_rate``) scores at least as well as every earlier one, its checkpoint is
copied to ``<trial>/best_checkpoint/``, with ``held_out.json`` saying which iteration and score
it holds. Equal scores go to the newer one. The copy runs on a worker thread, so the callback
returns at once and Tune's state save is not delayed (a slow copy there widened the window
too); the callback waits for pending copies when the experiment ends.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ray.tune import Callback

from pettingllms_rllib.metric_keys import HELD_OUT_SUCCESS

logger = logging.getLogger("pettingllms_rllib")

__all__ = ["BEST_FOLDER", "BestCheckpoint", "keep_if_best", "read_best"]

#: The folder, inside a trial's folder, that holds the copy of its best checkpoint.
BEST_FOLDER = "best_checkpoint"
#: The record inside it: ``{"held_out_success_rate": ..., "training_iteration": ...,
#: "copied_from": "checkpoint_00000N"}``.
RECORD = "held_out.json"


def read_best(trial_dir: str | Path) -> dict[str, Any] | None:
    """The record of a trial's best checkpoint (with its ``path``), or None if it has none."""
    folder = Path(trial_dir) / BEST_FOLDER
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return {**record, "path": str(folder)}


def keep_if_best(checkpoint_dir: str | Path, score: float, iteration: int) -> bool:
    """Copy ``checkpoint_dir`` to its trial's best folder when ``score`` is at least the best
    so far; returns whether it did. The copy is built beside the folder and renamed into
    place, so a crash leaves the previous best intact."""
    checkpoint_dir = Path(checkpoint_dir)
    trial_dir = checkpoint_dir.parent
    best = read_best(trial_dir)
    if best is not None and float(score) < float(best[HELD_OUT_SUCCESS]):
        return False
    target = trial_dir / BEST_FOLDER
    building, replaced = trial_dir / f".{BEST_FOLDER}.new", trial_dir / f".{BEST_FOLDER}.old"
    for leftover in (building, replaced):
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.copytree(checkpoint_dir, building)
    (building / RECORD).write_text(json.dumps({
        HELD_OUT_SUCCESS: float(score), "training_iteration": int(iteration),
        "copied_from": checkpoint_dir.name}))
    if target.exists():
        target.rename(replaced)
    building.rename(target)
    shutil.rmtree(replaced, ignore_errors=True)
    return True


class BestCheckpoint(Callback):
    """Tune callback (driver side): after each save, :func:`keep_if_best` for the iteration's
    held-out score, when that iteration evaluated."""

    def __init__(self):
        self._scored: dict[str, tuple[int, float]] = {}
        self._copies = None  # one worker thread, created on first use (not pickled by Tune)

    def __getstate__(self):
        return {"_scored": dict(self._scored), "_copies": None}

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        value = result.get(HELD_OUT_SUCCESS)
        if isinstance(value, (int, float)) and math.isfinite(value):
            self._scored[trial.trial_id] = (int(result["training_iteration"]), float(value))
        else:
            self._scored.pop(trial.trial_id, None)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        scored = self._scored.pop(trial.trial_id, None)
        if scored is None or (trial.last_result or {}).get("training_iteration") != scored[0]:
            return  # this save is not of an evaluated iteration
        if self._copies is None:
            self._copies = ThreadPoolExecutor(max_workers=1, thread_name_prefix="best-ckpt")
        self._copies.submit(_copy_logging_errors, checkpoint.path, scored, str(trial))

    def on_experiment_end(self, trials, **info) -> None:
        if self._copies is not None:
            self._copies.shutdown(wait=True)
            self._copies = None


def _copy_logging_errors(path: str, scored: tuple[int, float], trial: str) -> None:
    try:
        keep_if_best(path, scored[1], scored[0])
    except OSError as exc:  # a full disk, or Tune deleted the source: its own are unaffected
        logger.warning("could not copy the best checkpoint of %s (%s)", trial, exc)
