"""A trial's result files, read and repaired so that a resumed run stays readable.

Tune writes each result twice: as one JSON line in ``result.json`` and as one row of
``progress.csv``. After a restore both go wrong in their own way:

* ``progress.csv``: Tune's CSV logger reopens the file in append mode and takes its columns
  from the *first result after the restore*, not from the header already in the file (Ray's
  ``tune/logger/csv.py``). RLlib's result set is not fixed: timers, ``perf`` and the
  ``evaluation/`` keys come and go between iterations. So the resumed rows get other columns
  than the header, and the file no longer parses (the issue saw 94 header columns against 95).
* ``result.json``: an iteration whose result never reached the driver before the kill is
  trained again, so it can appear twice. And the trial folder's copy is only Tune's periodic
  copy of the one in Ray's session folder: after a kill it can lack the last iterations, whose
  rows are then in the journal the CLI's
  :class:`~pettingllms_rllib.checkpoint_ledger.CheckpointLedger` writes beside it.

JSON lines stay parseable through all of this, so ``result.json`` (with the journal) is the
source:
:func:`read_results` flattens its rows the way Tune names CSV columns (``a/b/c``, without
``config``) and keeps each iteration once (the later row wins, as the one that continued the
run). :func:`tidy_trial` rewrites both files from it, atomically: every iteration once, and a
CSV whose columns are the union of every row's keys. The CLI calls it on every trial after
``fit``. Plotting reads through :func:`read_results`, so it works on a run that is still
going or was killed.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["read_results", "tidy_trial"]

RESULT_FILE = "result.json"
#: The journal :class:`pettingllms_rllib.checkpoint_ledger.CheckpointLedger` writes.
JOURNAL_FILE = "result_journal.jsonl"
PROGRESS_FILE = "progress.csv"
ITERATION_KEY = "training_iteration"


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _rows_of(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file's result rows in file order; a torn line (a kill mid-write) is
    skipped."""
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            logger.warning("%s line %d is not JSON (a run killed mid-write?); skipped", path,
                           number)
            continue
        if isinstance(row, dict) and isinstance(row.get(ITERATION_KEY), int):
            rows.append(row)
    return rows


def _raw_rows(trial_dir: Path) -> list[dict[str, Any]]:
    """``result.json``'s rows, then the journal's (the rows Tune had not copied into the trial
    folder when a run was killed), each in file order."""
    return _rows_of(trial_dir / RESULT_FILE) + _rows_of(trial_dir / JOURNAL_FILE)


def _unique_iterations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each iteration once: a redone iteration's later row (by ``timestamp``, then by order)
    counts, as the one that continued the run."""
    latest: dict[int, tuple[float, int, dict[str, Any]]] = {}
    for order, row in enumerate(rows):
        stamp = row.get("timestamp")
        key = (float(stamp) if isinstance(stamp, (int, float)) else -math.inf, order)
        kept = latest.get(row[ITERATION_KEY])
        if kept is None or key >= kept[:2]:
            latest[row[ITERATION_KEY]] = (*key, row)
    return [latest[i][2] for i in sorted(latest)]


def read_results(trial_dir: str | Path) -> list[dict[str, Any]]:
    """The trial's results, one flattened row per iteration in order (``[]`` if none)."""
    rows = _unique_iterations(_raw_rows(Path(trial_dir)))
    return [_flatten({k: v for k, v in row.items() if k != "config"}) for row in rows]


def _csv_cell(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def replace_atomically(path: Path, write) -> None:
    """Write ``path`` through ``write(text_handle)`` into a temporary file beside it, then
    rename it into place: a crash leaves the old file or the new one, never half of one."""
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                         delete=False, encoding="utf-8", newline="")
    try:
        with handle:
            write(handle)
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise


def tidy_trial(trial_dir: str | Path) -> int:
    """Rewrite the trial's ``result.json`` and ``progress.csv`` with every iteration once and
    one column set; returns the number of iterations (0: nothing to tidy, files untouched)."""
    trial_dir = Path(trial_dir)
    raw = _raw_rows(trial_dir)
    rows = _unique_iterations(raw)
    if not rows:
        return 0
    if len(rows) != len(raw):
        logger.info("%s: %d result rows for %d iterations; each iteration kept once",
                    trial_dir.name, len(raw), len(rows))
    replace_atomically(trial_dir / RESULT_FILE, lambda handle: handle.writelines(
        json.dumps(row) + "\n" for row in rows))
    flat = [_flatten({k: v for k, v in row.items() if k != "config"}) for row in rows]
    columns = list(dict.fromkeys(key for row in flat for key in row))

    def write_csv(handle) -> None:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows({k: _csv_cell(v) for k, v in row.items()} for row in flat)

    replace_atomically(trial_dir / PROGRESS_FILE, write_csv)
    return len(rows)
