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
behaviour/learner log-prob gap shows only above ``metric_keys.LOGP_MISMATCH_WARNING``. With
``async_rollout`` and resource pools the line also shows how far trained responses lagged and
each pool's update seconds, and labels the shares as the driver's waits, since the learner then
runs while the runners generate (see :func:`_time_field`):

    ... | staleness planner 1.00 tool 0.50 (max 1) | pool updates planner 32.1 s |
    41.2 s, overlapped (waited on generate 5%, learner 1%; learner busy 78%)

The text is built by :func:`progress_line`, a pure function tested on plain dicts.

Trials are named by :class:`TrialNames` (Tune's trial name and folder name creators): Tune's
trainable, env and trial id, then the grid point's values, e.g.
``ATGRPO_plan_path_v1_a1b2c_00001_mapping=per_role,lr=1e-05``.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any, Mapping, Sequence

from ray.tune import Callback

from pettingllms_rllib import metric_keys as keys

logger = logging.getLogger("pettingllms_rllib")

__all__ = ["ProgressLine", "TrialNames", "grid_label", "progress_line", "trial_name"]


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
    staleness = _staleness_field(at_grpo)
    if staleness:
        parts.append(staleness)
    pools = _named_numbers(at_grpo.get(keys.POOL_UPDATE_SECONDS))
    if pools:
        parts.append("pool updates " + " ".join(f"{p} {s:.1f} s" for p, s in pools.items()))
    seconds = _number(at_grpo.get(keys.ITERATION_SECONDS))
    if seconds is not None:
        parts.append(_time_field(at_grpo, seconds, overlapped=bool(staleness), pools=pools))
    return " | ".join(parts)


def _named_numbers(values: Any) -> dict[str, float]:
    """The finite numbers of a ``{name: value}`` result group, by name (NaN: left out)."""
    if not isinstance(values, Mapping):
        return {}
    return {str(name): v for name, value in sorted(values.items())
            if (v := _number(value)) is not None}


def _staleness_field(at_grpo: Mapping[str, Any]) -> str:
    """``staleness 1.00 (max 1)`` (one value when every module has it, else per module), or
    "" when no trained row lagged (synchronous runs, an async run's first iteration)."""
    means = _named_numbers(at_grpo.get(keys.STALENESS_MEAN))
    highest = max(_named_numbers(at_grpo.get(keys.STALENESS_MAX)).values(), default=0.0)
    if not means or max(max(means.values()), highest) <= 0:
        return ""
    if len(set(means.values())) == 1:
        shown = f"{next(iter(means.values())):.2f}"
    else:
        shown = " ".join(f"{m} {v:.2f}" for m, v in means.items())
    return f"staleness {shown}" + (f" (max {highest:g})" if highest > 0 else "")


def _time_field(at_grpo: Mapping[str, Any], seconds: float, *, overlapped: bool,
                pools: Mapping[str, float]) -> str:
    """The iteration's seconds and the generate and learner shares of them.

    The shares are of the driver's wall clock (``core/timing.py``): the time it waited for
    each part. Synchronous runs do one part after another, so that is all there is. With
    ``async_rollout`` the runners sample while the learner updates, and with resource pools
    the pools update in the background, so the learner share is only the driver's wait for
    it (near 0% while the pools train the whole iteration). Such runs (a trained row lagged,
    or a pool updated longer than the driver waited on the learner) are labelled
    "overlapped", the shares read "waited on", and with pools the busiest pool's update
    seconds over the iteration's are shown as "learner busy" (pools update in parallel, so
    the busiest one is the learner's own time)."""
    shares = at_grpo.get(keys.TIME_SHARE) or {}
    named = [f"{part} {share:.0%}" for part in ("generate", "learner")
             if (share := _number(shares.get(part))) is not None]
    busy = max(pools.values(), default=None)
    if busy is not None:
        waited = _number((at_grpo.get(keys.TIME_SECONDS) or {}).get("learner"))
        if waited is None:
            waited = (_number(shares.get("learner")) or 0.0) * seconds
        overlapped = overlapped or busy > waited + max(0.05 * seconds, 0.01)
    text = f"{seconds:.1f} s"
    if not overlapped:
        return text + (f" ({', '.join(named)})" if named else "")
    text += ", overlapped"
    inner = "waited on " + ", ".join(named) if named else ""
    if busy is not None and seconds > 0:
        inner += ("; " if inner else "") + f"learner busy {busy / seconds:.0%}"
    return text + (f" ({inner})" if inner else "")
    return " | ".join(parts)


class ProgressLine(Callback):
    """Logs :func:`progress_line` for every result of every trial (the trial's name first when
    an experiment runs several)."""

    def __init__(self, stop_iteration: int | None = None):
        self.stop_iteration = stop_iteration

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        line = progress_line(result, self.stop_iteration)
        logger.info("%s%s", f"{trial}: " if len(trials) > 1 else "", line)


# ------------------------------------------------------------------------------ trial names
#: Same as ``pettingllms_rllib.algorithms.config.GRID_KEY`` (a grid point's varying keys).
GRID_KEY = "__grid__"
#: The longest trial name (and folder name) :func:`trial_name` makes; Tune's own default cuts
#: at 130 characters (``TUNE_MAX_LEN_IDENTIFIER``) and then adds a date.
TRIAL_NAME_MAX_LENGTH = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=,-]+")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _label_value(value: Any) -> str:
    """A grid value as a short token: numbers as ``%g`` (``1e-05``), a mapping as its keys,
    a list as its items, joined by ``+``."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return "+".join(sorted(str(k) for k in value))
    if isinstance(value, (list, tuple)):
        return "+".join(_label_value(v) for v in value)
    return str(value)


def grid_label(point: Mapping[str, Any]) -> str:
    """``mapping=per_role,lr=1e-05`` from a grid point ``{dotted key: value}`` (the YAML's
    ``grid`` keys: each key by its last dotted part unless two keys share it), filesystem-safe
    (only letters, digits and ``._+=,-``); "" for no point."""
    last = [str(key).rsplit(".", 1)[-1] for key in point]
    pairs = []
    for key, short in zip(point, last):
        name = short if last.count(short) == 1 else str(key)
        pairs.append(f"{name}={_label_value(point[key])}")
    return ",".join(_UNSAFE.sub("_", pair).strip("_") for pair in pairs)


def trial_name(prefix: str, trial_id: str, label: str = "",
               max_length: int = TRIAL_NAME_MAX_LENGTH) -> str:
    """``<prefix>_<trial_id>_<label>``, e.g. ``ATGRPO_plan_path_v1_a1b2c_00001_mapping=per_role``.

    Tune's trial id keeps names unique; the label (:func:`grid_label`) makes them readable.
    Within ``max_length``, whole ``key=value`` pairs are dropped from the end (``,+N`` says
    how many), and the first one is cut if it alone does not fit; prefix and id are never cut.
    Filesystem-safe: it is also the trial's folder name."""
    head = _UNSAFE.sub("_", f"{prefix}_{trial_id}")
    pairs = [pair for pair in _UNSAFE.sub("_", label).split(",") if pair]
    room = max_length - len(head) - 1
    for kept in range(len(pairs), -1, -1):
        text = ",".join(pairs[:kept] + ([f"+{len(pairs) - kept}"] if kept < len(pairs) else []))
        if len(text) <= room:
            break
    if kept == 0 and pairs:  # not even one pair fits: the first one, cut
        text = pairs[0][:room]
    return f"{head}_{text}" if text and room > 0 else head


def _canonical(value: Any) -> str:
    # Object reprs may carry memory addresses; Tune hands the trial a copy of the grid point.
    return _ADDRESS.sub("", json.dumps(value, sort_keys=True, default=repr))


class TrialNames:
    """Tune's ``trial_name_creator`` and ``trial_dirname_creator``: :func:`trial_name` with the
    grid point's label (``TuneConfig(trial_name_creator=names, trial_dirname_creator=names)``).

    Args:
        grid_points: the values of the param space's ``__grid__`` grid search (one config dict
            of the varying keys per grid point), in order.
        variants: the YAML's grid point for each (``{"mapping": "per_role", "training.lr":
            1e-5}``), which name it better than the config keys do (``policies``,
            ``policy_mapping_fn``). Without them, or for a point not found, the label is made
            from the config keys.
    """

    def __init__(self, grid_points: Sequence[Mapping[str, Any]] = (),
                 variants: Sequence[Mapping[str, Any]] = ()):
        self.labels = {_canonical(dict(point)): grid_label(variant)
                       for point, variant in zip(grid_points, variants)}

    @classmethod
    def for_param_space(cls, param_space: Mapping[str, Any],
                        variants: Sequence[Mapping[str, Any]] = ()) -> "TrialNames":
        grid = param_space.get(GRID_KEY)
        points = grid.get("grid_search", []) if isinstance(grid, Mapping) else []
        return cls(points, variants if len(variants) == len(points) else ())

    def label(self, config: Mapping[str, Any]) -> str:
        """The label of a trial's config (its ``__grid__`` point); "" without a grid."""
        point = config.get(GRID_KEY)
        if not isinstance(point, Mapping) or not point:
            return ""
        known = self.labels.get(_canonical(dict(point)))
        if known is not None:
            return known
        return grid_label({key: value for key, value in sorted(point.items())
                           if isinstance(value, (str, int, float, bool, Mapping, list, tuple))
                           or value is None})

    def __call__(self, trial) -> str:
        env = trial.config.get("env")
        env = getattr(env, "__name__", env)
        prefix = f"{trial.trainable_name}_{env}" if env else str(trial.trainable_name)
        return trial_name(prefix, str(trial.trial_id), self.label(trial.config))
