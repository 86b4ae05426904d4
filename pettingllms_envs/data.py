"""Loading benchmark records (code and math problems) from a local file or a `datasets` hub name.

Why a shared loader: every benchmark has its own field names, but the failure rules are the
same for all and users rely on them: a path that does not exist, or a hub name that cannot be
reached (no network), is ONE clear error before any training starts; a malformed row (missing
field, unparsable tests) is skipped, counted and logged, never a crash halfway through a run.

Sources:
* a local ``.jsonl`` / ``.json`` (a list of objects, or ``{"data": [...]}``) / ``.parquet``
  file; anything that looks like a path (starts with ``/``, ``.`` or ``~``, or ends in one of
  these suffixes) is treated as one, so a typo is reported as a missing file, not sent to the hub;
* otherwise a hub dataset name (``org/name``) for :func:`datasets.load_dataset` (``name``/``split`` as there).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Callable, Iterable, TypeVar

logger = logging.getLogger(__name__)

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
T = TypeVar("T")


class DatasetUnavailableError(RuntimeError):
    """A dataset source could not be read at all (missing file, unreachable hub, bad format)."""


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """How many rows a loader read, kept and skipped, with the first few skip reasons."""

    source: str
    total: int
    kept: int
    skipped: int
    reasons: tuple[str, ...]


def write_jsonl(path: str, rows: Iterable[dict], **dumps_kwargs: Any) -> int:
    """Write ``rows`` as JSONL, one ``json.dumps(row, **dumps_kwargs)`` per line; returns how
    many were written (the local-file format :func:`read_rows` reads back)."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, **dumps_kwargs) + "\n")
            count += 1
    return count


def looks_like_local_path(source: str) -> bool:
    """Absolute/relative/home paths, names ending in a data suffix, and existing files are local;
    anything else (``org/name``) is a hub dataset name."""
    return (source.startswith(("/", ".", "~")) or source.lower().endswith(LOCAL_SUFFIXES)
            or os.path.exists(source))


def read_rows(source: str, *, split: str = "train", name: str | None = None) -> list[dict]:
    """Every row of ``source`` as a dict (see the module docstring for what ``source`` may be).

    Raises :class:`DatasetUnavailableError` naming the source when it cannot be read. Lines of
    a JSONL file that are not JSON objects are returned as ``{"__malformed__": reason}`` so the
    caller's skip count includes them.
    """
    if not isinstance(source, str) or not source.strip():
        raise DatasetUnavailableError(f"dataset source must be a path or a hub name, got {source!r}")
    if looks_like_local_path(source):
        return _read_local(os.path.expanduser(source))
    return _read_hub(source, split=split, name=name)


def convert_rows(rows: Iterable[Any], convert: Callable[[dict], T], *, source: str,
                 limit: int | None = None) -> tuple[list[T], LoadReport]:
    """Apply ``convert`` to each row; rows it rejects are skipped and counted, not fatal.

    ``convert`` signals a malformed row by raising ``ValueError``, ``KeyError`` or
    ``TypeError``. A source with no usable row at all is an error (an empty evaluation set
    must not read as a 0% result).
    """
    kept: list[T] = []
    reasons: list[str] = []
    total = 0
    for row in rows:
        if limit is not None and len(kept) >= limit:
            break
        total += 1
        try:
            if not isinstance(row, dict):
                raise TypeError(f"row is {type(row).__name__}, not an object")
            if "__malformed__" in row:
                raise ValueError(row["__malformed__"])
            kept.append(convert(row))
        except (ValueError, KeyError, TypeError) as exc:
            reasons.append(f"row {total - 1}: {type(exc).__name__}: {str(exc)[:120]}")
    report = LoadReport(source, total, len(kept), len(reasons), tuple(reasons[:5]))
    if reasons:
        logger.warning("%s: skipped %d of %d malformed rows (first: %s)",
                       source, len(reasons), total, reasons[0])
    if not kept:
        raise DatasetUnavailableError(
            f"{source}: no usable rows ({total} read, {len(reasons)} malformed"
            + (f"; first: {reasons[0]}" if reasons else "") + ")")
    logger.info("%s: loaded %d rows (%d skipped)", source, len(kept), len(reasons))
    return kept, report


# ------------------------------------------------------------------------------ readers
def _read_local(path: str) -> list[dict]:
    if not os.path.isfile(path):
        raise DatasetUnavailableError(
            f"dataset file {path!r} does not exist (expected a local {'/'.join(LOCAL_SUFFIXES)} "
            "file; a hub dataset is named like 'org/name')")
    lower = path.lower()
    try:
        if lower.endswith(".parquet"):
            import pyarrow.parquet as pq
            return pq.read_table(path).to_pylist()
        if lower.endswith(".json"):
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            if isinstance(data, dict) and isinstance(data.get("data"), list):
                data = data["data"]
            if not isinstance(data, list):
                raise DatasetUnavailableError(
                    f"{path}: a .json dataset must be a list of objects or {{'data': [...]}}")
            return data
        return list(_read_jsonl(path))
    except DatasetUnavailableError:
        raise
    except Exception as exc:
        raise DatasetUnavailableError(f"could not read dataset file {path!r}: {exc}") from exc


def _read_jsonl(path: str) -> Iterable[dict]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield {"__malformed__": f"line {number} is not JSON ({exc.msg})"}
                continue
            yield row if isinstance(row, dict) else {
                "__malformed__": f"line {number} is {type(row).__name__}, not an object"}


def _read_hub(name_or_path: str, *, split: str, name: str | None) -> list[dict]:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise DatasetUnavailableError("hub datasets need `pip install datasets`") from exc
    try:
        dataset = datasets.load_dataset(name_or_path, name, split=split)
    except Exception as exc:
        raise DatasetUnavailableError(
            f"could not load hub dataset {name_or_path!r} (config {name!r}, split {split!r}): "
            f"{type(exc).__name__}: {str(exc)[:300]}. Without network access, download it "
            "elsewhere and pass the local .jsonl/.parquet file instead.") from exc
    return [dict(row) for row in dataset]
