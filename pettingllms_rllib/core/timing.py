"""Where an iteration's seconds go: the parts users see in the progress table and the figure.

``generate`` is the engines' sampling, ``env`` the env steps around it (sandboxed programs
included), ``advantages`` grouping and batching, ``learner`` the update, ``weight_sync`` pushing
weights to the runners, and ``other`` the rest of the training step (Ray transfers, metrics):
framework overhead, which should stay a few percent.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Mapping

TIME_PARTS = ("generate", "env", "advantages", "learner", "weight_sync", "other")


def time_shares(seconds: Mapping[str, float], total: float) -> dict[str, dict[str, float]]:
    """Seconds and shares of ``total`` per part of :data:`TIME_PARTS`; ``other`` is what the
    measured parts leave of ``total`` (never below 0).

    Returns ``{"seconds": {part: s}, "share": {part: s / total}}``.
    """
    unknown = set(seconds) - set(TIME_PARTS[:-1])
    if unknown:
        raise ValueError(f"unknown time parts {sorted(unknown)}; known: {TIME_PARTS[:-1]}")
    parts = {part: max(0.0, float(seconds.get(part, 0.0))) for part in TIME_PARTS[:-1]}
    parts["other"] = max(0.0, float(total) - sum(parts.values()))
    scale = 1.0 / total if total > 0 else 0.0
    return {"seconds": parts, "share": {part: s * scale for part, s in parts.items()}}


def rollout_seconds_waited(generate: float, env: float, waited: float) -> tuple[float, float]:
    """The runner's generate and env seconds that the iteration spent waiting for: all of
    them when the driver waited as long (synchronous sampling), else scaled down to the wait
    (with ``async_rollout`` the rest ran during the previous update, and counting it again
    would make the parts add up to more than the iteration)."""
    generate, env = max(0.0, float(generate)), max(0.0, float(env))
    ran = generate + env
    if ran <= waited or ran == 0:
        return generate, env
    scale = max(0.0, float(waited)) / ran
    return generate * scale, env * scale


class TimedCall:
    """Wraps a callable and adds the seconds spent in it to :attr:`seconds`."""

    def __init__(self, function: Callable[..., Any]):
        self.function = function
        self.seconds = 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


class Stopwatch:
    """Seconds per named phase (``with stopwatch("learner"): ...``) and the total elapsed
    since it was made."""

    def __init__(self):
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - begin

    def elapsed(self) -> float:
        return time.perf_counter() - self.start
