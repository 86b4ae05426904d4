"""Resume from the newest complete checkpoint, also when Tune's saved state names a deleted one.

Why: Tune deletes a trial's oldest kept checkpoint as soon as a new one is registered
(``num_to_keep``), but saves the experiment state that ``--resume`` reads only on a later
controller step (forced once every ``num_to_keep`` checkpoints, otherwise every >= 10 s). A run
killed in between has a state that names a checkpoint no longer on disk, and Tune then refuses
to resume it ("Could not recover from checkpoint as it does not exist on storage anymore"),
although newer, complete checkpoints sit right beside it.

Two parts:

* :class:`CheckpointLedger`, a Tune callback: on each checkpoint (Tune calls it after the
  trainable has persisted the folder and before it prunes old ones) it appends the folder's
  name and iteration to ``<trial>/completed_checkpoints.json``, written atomically. A folder is
  complete exactly when it is listed: a kill in the middle of a save leaves an unlisted folder.
  It also appends every result to ``<trial>/result_journal.jsonl`` (:data:`JOURNAL`), because
  the ``result.json`` in the trial's folder is only Tune's periodic copy of one in Ray's
  session folder and lags behind the checkpoints (in the kill -9 test, iteration 5's
  checkpoint was listed while that copy held 4 rows).
* :func:`repair_experiment_state`, run by the CLI before ``Tuner.restore``: for every trial whose
  saved state names a checkpoint that is gone, it points the state at the newest listed folder
  still on disk whose iteration has a result row (in ``result.json`` or the journal), and says
  so in the log. The iterations after it are redone; the result files still hold each
  iteration once (:mod:`pettingllms_rllib.trial_results`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ray.tune import Callback

from pettingllms_rllib.trial_results import (ITERATION_KEY, JOURNAL_FILE, read_results,
                                             replace_atomically)

logger = logging.getLogger("pettingllms_rllib")

__all__ = ["JOURNAL", "LEDGER", "CheckpointLedger", "append_journal", "completed_checkpoints",
           "repair_experiment_state"]

#: The ledger, in each trial's folder: ``[{"name": "checkpoint_00000N", "training_iteration":
#: N}, ...]``, oldest first.
LEDGER = "completed_checkpoints.json"
#: Every result as one JSON line, written straight into the trial's folder. Tune writes
#: ``result.json`` in a staging folder under Ray's session folder and copies it into the trial's
#: folder only when it saves the experiment state, so after a kill the copy can lack the last
#: iterations whose checkpoints exist; :mod:`pettingllms_rllib.trial_results` reads both.
JOURNAL = JOURNAL_FILE


def append_journal(trial_dir: Path, result: dict) -> None:
    """Append one result to the trial's :data:`JOURNAL` and flush it to the disk."""
    from ray.tune.utils.util import SafeFallbackEncoder

    with open(trial_dir / JOURNAL, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def completed_checkpoints(trial_dir: str | Path) -> list[dict]:
    """The ledger's entries for ``trial_dir``, oldest first (empty when there is none or it is
    unreadable)."""
    try:
        entries = json.loads((Path(trial_dir) / LEDGER).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)]


def _record(checkpoint_dir: Path, iteration: int | None) -> None:
    trial_dir = checkpoint_dir.parent
    entries = [e for e in completed_checkpoints(trial_dir) if e["name"] != checkpoint_dir.name]
    entries.append({"name": checkpoint_dir.name, "training_iteration": iteration})
    entries = [e for e in entries if (trial_dir / e["name"]).exists()]  # Tune pruned the rest
    replace_atomically(trial_dir / LEDGER, lambda handle: handle.write(json.dumps(entries)))


class CheckpointLedger(Callback):
    """Tune callback (driver side): lists every checkpoint once it is complete, and journals
    every result straight into the trial's folder (see the module docstring)."""

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        trial_dir = Path(trial.path) if trial.path else None
        if trial_dir is None or not trial_dir.is_dir():  # remote storage
            return
        try:
            append_journal(trial_dir, result)
        except OSError as exc:  # a full disk: result.json (synced by Tune) is still there
            logger.warning("could not journal a result of %s (%s)", trial, exc)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        path = Path(checkpoint.path)
        if not path.is_dir():  # remote storage: Tune's own state is all there is
            return
        try:
            _record(path, (trial.last_result or {}).get("training_iteration"))
        except OSError as exc:  # a full disk: resuming falls back to Tune's own state
            logger.warning("could not list checkpoint %s as complete (%s)", path, exc)


def _last_logged_iteration(trial_dir: Path) -> int:
    """The newest iteration with a result row (``read_results`` keeps only rows that have
    one)."""
    return max((row[ITERATION_KEY] for row in read_results(trial_dir)), default=0)


def repair_experiment_state(experiment_dir: str | Path) -> list[str]:
    """Point every trial whose saved state names a missing checkpoint at its newest complete
    one: the ledger's newest entry still on disk whose iteration has a result row (in
    ``result.json`` or the journal; resuming from a later one would leave the rows in between
    missing for good, so that is done, with a warning, only when no such entry exists). Returns one
    message per trial changed, each also logged. A trial without such a checkpoint is left for
    Tune to report."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.utils.serialization import TuneFunctionDecoder, TuneFunctionEncoder

    while True:
        state_path = _find_newest_experiment_checkpoint(str(experiment_dir))
        if state_path is None or not os.path.isfile(state_path):
            return []
        try:
            with open(state_path, encoding="utf-8") as handle:
                state = json.load(handle)
            break
        except (OSError, ValueError) as exc:  # cut short by a kill while Tune wrote it
            aside = f"{state_path}.unreadable"
            logger.warning("%s is unreadable (%s); moved to %s, so the resume uses the state "
                           "of the session before, if any", state_path, exc, aside)
            os.replace(state_path, aside)
    messages = []
    for entry in state.get("trial_data", []):
        metadata = json.loads(entry[1], cls=TuneFunctionDecoder,  # our own run's state,
                              allow_cloudpickle=True)  # as trusted as Tune's resume
        manager = metadata.get("checkpoint_manager")
        latest = getattr(manager, "latest_checkpoint_result", None)
        if latest is None or latest.checkpoint is None or os.path.exists(latest.checkpoint.path):
            continue
        named = Path(latest.checkpoint.path)
        logged = _last_logged_iteration(named.parent)
        on_disk = [e for e in completed_checkpoints(named.parent)
                   if (named.parent / e["name"]).is_dir()
                   and isinstance(e.get("training_iteration"), int)]
        if not on_disk:
            continue
        logged_before = [e for e in on_disk if e["training_iteration"] <= logged]
        newest = logged_before[-1] if logged_before else min(
            on_disk, key=lambda e: e["training_iteration"])
        if newest["training_iteration"] > logged:
            logger.warning("%s: iterations %d-%d have no result row; resuming past them",
                           named.parent.name, logged + 1, newest["training_iteration"])
        replacement = _TrainingResult(
            checkpoint=Checkpoint(str(named.parent / newest["name"]),
                                  filesystem=latest.checkpoint.filesystem),
            metrics={"training_iteration": newest.get("training_iteration")})
        manager._checkpoint_results = [replacement]
        manager._latest_checkpoint_result = replacement
        entry[1] = json.dumps(metadata, indent=2, cls=TuneFunctionEncoder)
        message = (f"{named.parent.name}: the saved state named {named.name}, which Tune had "
                   f"already deleted; resuming from {newest['name']}, the newest complete one")
        logger.warning("%s", message)
        messages.append(message)
    if messages:
        replace_atomically(Path(state_path), lambda handle: json.dump(
            state, handle, cls=TuneFunctionEncoder))
    return messages
