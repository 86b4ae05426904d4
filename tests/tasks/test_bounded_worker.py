"""The bounded worker: a call that runs too long gets its fallback, on any thread, and the
next call is served by a fresh child."""

import threading
import time

from pettingllms_envs.bounded_worker import BoundedWorker
from pettingllms_envs.math import MATH_VERIFY_WALL_S, _WORKER, parse_math


def test_a_call_past_its_bound_gets_the_fallback_and_the_worker_recovers():
    worker = BoundedWorker("time", wall_time_s=0.5)
    try:
        answers = {}
        thread = threading.Thread(target=lambda: answers.setdefault(
            "slow", worker.call("sleep", (30,), "cut short")))
        thread.start()
        thread.join(20)  # far below the 30 s the call asked for
        assert not thread.is_alive() and answers["slow"] == "cut short"
        assert worker.timeouts == 1
        now = worker.call("time", (), None)  # a fresh child answers: the clock, not None
        assert isinstance(now, float) and abs(now - time.time()) < 60
    finally:
        worker.close()


def test_errors_in_the_child_give_the_fallback():
    worker = BoundedWorker("math", wall_time_s=5)
    try:
        assert worker.call("sqrt", (-1,), "bad") == "bad"
        assert worker.call("sqrt", (9,), None) == 3.0
    finally:
        worker.close()


def test_hostile_math_answers_off_the_main_thread_return_and_never_raise():
    hostile = [r"\left(" * 5 + "1" + r"\right)" * 5, "[[[[[1]]]]]," * 16,
               r"\boxed{3^{3^{3^{3}}}}", "{" * 9 + "1" + "}" * 9]
    results = {}

    def parse_all():
        for text in hostile:
            parse_math.cache_clear()
            results[text] = parse_math(text)

    thread = threading.Thread(target=parse_all)
    thread.start()
    thread.join(len(hostile) * (MATH_VERIFY_WALL_S + 30))
    assert not thread.is_alive()
    assert set(results) == set(hostile) and all(isinstance(r, tuple) for r in results.values())
    assert _WORKER.wall_time_s == MATH_VERIFY_WALL_S


def test_a_result_that_cannot_be_unpickled_here_gives_the_fallback_and_the_worker_stays():
    # math-verify reads "x = 3 = 3" as a patched sympy And that its own __new__ cannot rebuild
    # on unpickling (it collapses to an Equality, which then refuses an attribute): this used
    # to raise AttributeError out of parse_math and drop the whole training task.
    parse_math.cache_clear()
    assert parse_math("x = 3 = 3") == ()
    process = _WORKER._process
    assert parse_math("x = 4") != () and _WORKER._process is process  # no restart needed
