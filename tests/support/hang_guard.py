"""A hang guard for tests that feed hostile inputs (megabytes of text) to parsers.

This is NOT a speed benchmark. The bounds are generous (at least 20 times what a linear-time
implementation takes on a loaded CI machine, and never under 2 s), so they only trip when the
work grows much faster than the input: a quadratic parser on a megabyte input does about 10**12
steps and would run for hours, hanging CI instead of failing it. With the guard it fails at the
bound, naming the block.

Two checks, so the guard holds wherever it runs:

* on the main thread of a POSIX process, a ``SIGALRM`` interval timer interrupts the block at
  the bound (Python code and ``re`` matching both see the signal) with ``pytest.fail``, which
  is a ``BaseException``: code under test that catches ``Exception`` cannot swallow it;
* always, the block's wall time (``time.perf_counter``) is compared with the bound once it
  returns.

A timer that is already armed (someone else's alarm) is left alone: then only the second check
applies.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

#: The least bound any guard uses: below it, a busy machine's scheduling noise could trip it.
MIN_BOUND_S = 2.0


def hang_bound(measured_s: float, factor: float = 20.0) -> float:
    """The bound for a block measured at ``measured_s`` seconds: ``factor`` times that, and
    never under :data:`MIN_BOUND_S`."""
    return max(MIN_BOUND_S, factor * measured_s)


#: The bound for one parser call on a few megabytes of hostile text (tests/tasks/test_math.py,
#: test_sudoku.py, test_code.py, test_plan_path.py): the slowest such call measured 0.47 s on
#: 2 cores busy with other work (most take under 0.2 s); a quadratic parser would take hours.
MEGABYTE_PARSE_BOUND_S = hang_bound(0.5)


def _can_interrupt() -> bool:
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


@contextmanager
def finishes_within(seconds: float, what: str = "the block") -> Iterator[None]:
    """Fail the test if the ``with`` block runs longer than ``seconds`` (a hang guard; see the
    module docstring): interrupted at the bound where a ``SIGALRM`` timer can be used, and
    checked against ``time.perf_counter`` when the block ends in any case."""
    if seconds <= 0:
        raise ValueError(f"a bound must be positive, not {seconds}")
    interrupt = _can_interrupt()
    if interrupt:
        def _expired(signum, frame):
            pytest.fail(f"{what} was still running after {seconds:g} s (hang guard: "
                        "work growing faster than linear in the input?)", pytrace=True)

        previous = signal.signal(signal.SIGALRM, _expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        if interrupt:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    assert elapsed <= seconds, (f"{what} took {elapsed:.2f} s, over its {seconds:g} s hang "
                                "guard (work growing faster than linear in the input?)")


def parse_within_bound(parser, text: str, expected, *args):
    """``parser(text, *args)`` under the megabyte hang guard, checked against ``expected``: a
    parse result it must equal, or the words its refusal must contain (then nothing was
    parsed). Returns the result for further checks."""
    with finishes_within(MEGABYTE_PARSE_BOUND_S, f"{parser.__name__} on {text[:12]!r}..."):
        result = parser(text, *args)
    if isinstance(expected, str):
        assert not result.ok and result.value is None and expected in result.error, result
    else:
        assert result == expected
    return result
