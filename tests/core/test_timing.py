"""Iteration time shares: the measured parts, and what they leave of the total as 'other'."""

import pytest

from pettingllms_rllib.core.timing import TIME_PARTS, Stopwatch, TimedCall, time_shares


def test_other_is_what_the_measured_parts_leave_and_shares_sum_to_one():
    parts = time_shares({"generate": 6.0, "env": 2.0, "learner": 1.5, "advantages": 0.25,
                         "weight_sync": 0.05}, total=10.0)
    assert parts["seconds"]["other"] == pytest.approx(0.2)
    assert parts["share"]["generate"] == pytest.approx(0.6)
    assert sum(parts["share"].values()) == pytest.approx(1.0)
    assert list(parts["seconds"]) == list(TIME_PARTS)


def test_parts_larger_than_the_total_leave_no_negative_other():
    assert time_shares({"generate": 3.0}, total=2.0)["seconds"]["other"] == 0.0


def test_unknown_parts_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="known"):
        time_shares({"sampling": 1.0}, total=1.0)


def test_timed_call_adds_up_the_seconds_spent_in_the_function():
    calls = TimedCall(lambda x: x * 2)
    assert calls(4) == 8 and calls(5) == 10
    assert calls.seconds > 0


def test_stopwatch_adds_up_each_named_phase_within_the_total():
    clock = Stopwatch()
    for _ in range(2):
        with clock("learner"):
            sum(range(1000))
    with clock("generate"):
        pass
    assert set(clock.seconds) == {"learner", "generate"}
    assert 0 < sum(clock.seconds.values()) <= clock.elapsed()


def test_rollout_seconds_count_only_as_far_as_the_iteration_waited_for_them():
    from pettingllms_rllib.core.timing import rollout_seconds_waited

    assert rollout_seconds_waited(30.0, 10.0, waited=41.0) == (30.0, 10.0)  # synchronous
    assert rollout_seconds_waited(30.0, 10.0, waited=4.0) == pytest.approx((3.0, 1.0))  # async
    assert rollout_seconds_waited(0.0, 0.0, waited=0.0) == (0.0, 0.0)
