"""One training worker per measured arm, shared by the benchmarks that train
(``iteration_speed.py``, ``pools_and_async.py``, ``async_learning.py``).

Each arm runs in a fresh Python process, so no arm inherits another's Ray session, threads or
caches; the process prints one ``RESULT <json>`` line and that line is the arm's result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

RESULT_PREFIX = "RESULT "


def run_worker(script: str, args: Sequence[str], *, cwd: Path, what: str,
               env: Mapping[str, str] | None = None) -> Any:
    """Run ``script`` (Python source) as ``python -c script args...`` in ``cwd`` and return the
    JSON of its last ``RESULT`` line.

    Args:
        script: the worker's source; it prints ``RESULT `` followed by its JSON result.
        args: its command-line arguments (``sys.argv[1:]``).
        cwd: where it runs (the tree whose package it imports, with ``env``'s PYTHONPATH).
        what: the arm's name, for the error.
        env: the process environment (default: this one's).

    Raises:
        RuntimeError: the worker failed or printed no result; the message ends with its
            stderr's last 3,000 characters.
    """
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=cwd,
                         env=None if env is None else dict(env), capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if out.returncode or not lines:
        raise RuntimeError(f"{what} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def emit_result(result: Any, out: str | None) -> None:
    """Print a benchmark's JSON result, and write it to ``out`` too when given."""
    from pathlib import Path

    text = json.dumps(result, indent=1, default=float)
    print(text)
    if out:
        Path(out).write_text(text)
