"""What the terminal shows during ``pettingllms-rllib train``: one line per iteration that
answers "is it learning?", and a summary at the end.

Ray 2.60's new output engine ignores a passed-in ``ProgressReporter`` (it logs "AIR_VERBOSITY
is set, ignoring passed-in ProgressReporter"), and its own status table truncates columns and
shows no success rate. So the CLI turns Tune's output off (``AIR_VERBOSITY=0`` unless
``--verbose``) and this Tune callback, which runs on the driver for every result, logs one line:

    iter 3/12 | tokens 5,210 | success 0.62 | held-out 0.81 (untrained 0.50) |
    return reasoner 1.30 tool 1.10 | parse errors reasoner 0.00 tool 0.06 | zero-var 0.25 |
    41.2 s (generate 61%, learner 30%)

Fields missing from a result (no held-out evaluation this iteration) are left out; the
behaviour/learner log-prob gap shows only above ``metric_keys.LOGP_MISMATCH_WARNING``. The text is
built by :func:`progress_line`, a pure function tested on plain dicts.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

from ray.tune import Callback

from pettingllms_rllib import metric_keys as keys

logger = logging.getLogger("pettingllms_rllib")

__all__ = ["ProgressLine", "progress_line"]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def progress_line(result: Mapping[str, Any], stop_iteration: int | None = None) -> str:
    """One compact line from a Tune result (nested dicts as RLlib reports them)."""
    runners = result.get(keys.ENV_RUNNERS) or {}
    at_grpo = result.get(keys.AT_GRPO_RESULTS) or {}
    held_out = result.get(keys.EVALUATION) or {}
    iteration = int(result.get("training_iteration", 0))
    parts = [f"iter {iteration}" + (f"/{stop_iteration}" if stop_iteration else "")]
    tokens = _number(runners.get(keys.NUM_GENERATED_TOKENS_LIFETIME))
    if tokens is not None:
        parts.append(f"tokens {int(tokens):,}")
    success = _number(runners.get(keys.SUCCESS_RATE))
    if success is not None:
        parts.append(f"success {success:.2f}")
    evaluated = _number(held_out.get(keys.EVALUATION_SUCCESS_RATE))
    if evaluated is not None:
        untrained = _number(held_out.get(keys.EVALUATION_UNTRAINED_SUCCESS_RATE))
        parts.append(f"held-out {evaluated:.2f}"
                     + (f" (untrained {untrained:.2f})" if untrained is not None else ""))
    agents = runners.get(keys.AGENT) or {}
    returns = [f"{a} {v:.2f}" for a, stats in sorted(agents.items())
               if (v := _number(stats.get(keys.AGENT_EPISODE_RETURN_MEAN))) is not None]
    if returns:
        parts.append("return " + " ".join(returns))
    errors = [f"{a} {v:.2f}" for a, stats in sorted(agents.items())
              if (v := _number(stats.get(keys.AGENT_PARSE_ERROR_RATE))) is not None]
    if errors:
        parts.append("parse errors " + " ".join(errors))
    failed = [f"{a} {int(v)}" for a, stats in sorted(agents.items())
              if (v := _number(stats.get(keys.AGENT_ROLLOUT_ERRORS)))]
    if failed:
        parts.append("rollout errors " + " ".join(failed))
    learners = result.get(keys.LEARNERS) or {}
    gaps = [f"{m} {v:.2f}" for m, stats in sorted(learners.items()) if isinstance(stats, Mapping)
            and (v := _number(stats.get(keys.LOGP_MISMATCH_MEAN))) is not None
            and v > keys.LOGP_MISMATCH_WARNING]
    if gaps:
        parts.append("logp mismatch " + " ".join(gaps))
    zero_var = _number(at_grpo.get(keys.ZERO_VARIANCE_GROUP_FRACTION))
    if zero_var is not None:
        parts.append(f"zero-var {zero_var:.2f}")
    seconds = _number(at_grpo.get(keys.ITERATION_SECONDS))
    if seconds is not None:
        shares = at_grpo.get(keys.TIME_SHARE) or {}
        named = [f"{part} {share:.0%}" for part in ("generate", "learner")
                 if (share := _number(shares.get(part))) is not None]
        parts.append(f"{seconds:.1f} s" + (f" ({', '.join(named)})" if named else ""))
    return " | ".join(parts)


class ProgressLine(Callback):
    """Logs :func:`progress_line` for every result of every trial (the trial's name first when
    an experiment runs several)."""

    def __init__(self, stop_iteration: int | None = None):
        self.stop_iteration = stop_iteration

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        line = progress_line(result, self.stop_iteration)
        logger.info("%s%s", f"{trial}: " if len(trials) > 1 else "", line)
