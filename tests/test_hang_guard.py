"""The hang guard of the hostile-input tests (tests/support/hang_guard.py) fails a runaway block
at its bound instead of waiting for it, and still fails it by wall time where it cannot
interrupt; a block within its bound passes and leaves no timer behind."""

import signal
import time

import pytest
from hang_guard import MIN_BOUND_S, finishes_within, hang_bound


def test_a_block_within_its_bound_passes_and_leaves_no_timer_or_handler():
    handler = signal.getsignal(signal.SIGALRM)
    with finishes_within(5, "a quick block"):
        total = sum(range(1000))
    assert total == 499500
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is handler


def test_a_runaway_block_is_interrupted_at_its_bound_even_inside_except_exception():
    start = time.perf_counter()
    with pytest.raises(pytest.fail.Exception, match="a loop was still running after 0.3 s"):
        with finishes_within(0.3, "a loop"):
            while time.perf_counter() - start < 5:  # (a broken guard fails, not hangs)
                try:
                    time.sleep(0.01)
                except Exception:  # code under test that swallows errors cannot swallow this
                    pass
    assert 0.3 <= time.perf_counter() - start < 3
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_where_a_timer_is_already_armed_the_wall_time_still_fails_the_block():
    previous = signal.signal(signal.SIGALRM, lambda *args: None)
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        with pytest.raises(AssertionError, match=r"a sleep took 0\.\d\d s, over its 0.1 s"):
            with finishes_within(0.1, "a sleep"):
                time.sleep(0.3)
        assert 50 < signal.getitimer(signal.ITIMER_REAL)[0] <= 60  # someone else's, untouched
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_bounds_are_twenty_times_the_measured_time_and_never_under_two_seconds():
    assert hang_bound(0.5) == 10.0 and hang_bound(0.01) == MIN_BOUND_S == 2.0
    with pytest.raises(ValueError, match="positive"):
        with finishes_within(0):
            pass
