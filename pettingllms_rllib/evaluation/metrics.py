"""Pure evaluation metrics for ``pettingllms-rllib eval`` (no Ray, no model, no pandas).

An evaluation runs ``samples_per_task`` (n) episodes on each of ``num_tasks`` held-out task
instances and reduces them with :func:`summarize` to the ``summary`` dict of an ``eval.json``
record (keys are fixed by the eval-record contract). Two success metrics are reported because
they answer different questions:

* **pass@k**: the probability that *at least one* of k samples solves the task, estimated
  without bias from all n >= k samples per task (Chen et al. 2021, "Evaluating Large Language
  Models Trained on Code", eq. 1)::

      pass@k = E_tasks[ 1 - C(n - c, k) / C(n, k) ]      (c = correct samples of the task)

  It measures what a best-of-k *oracle selector* would achieve, and grows with k.
* **mean@k**: the expected success of *one* sample, estimated from the first k samples of each
  task (mean over those k, then over tasks). It does not grow with k; a larger k only lowers
  its variance. mean@1 is pass@1 computed from the first sample alone; mean@n is the overall
  success rate.

Uncertainty: the overall success rate gets a Wilson score interval (episodes treated as
independent Bernoulli trials; unlike the normal approximation it stays inside [0, 1] and is
sensible at 0/n and n/n, which small eval sets hit often). pass@k gets a percentile bootstrap
over *tasks*, because samples of one task are correlated and the task is the unit we resample.

Everything returned is a plain Python ``float``/``int``/``list``/``dict`` so that it serialises
to JSON unchanged; k keys are strings (JSON object keys are strings anyway, so they round-trip).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

#: The confidence level of the ``*_ci95`` entries in the summary.
SUMMARY_CONFIDENCE = 0.95


# ---------------------------------------------------------------------------- estimators
def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k of one task from ``num_samples`` (n) samples, ``num_correct`` (c) correct.

    ``1 - C(n-c, k) / C(n, k)`` is evaluated as ``1 - prod_{i=n-c+1..n} (1 - k/i)``: the
    binomials of n in the hundreds overflow floats, the product of c terms in (0, 1] does not.
    k must be in [1, n]: pass@0 is not a metric, and k > n cannot be estimated from n samples.
    """
    n = _as_count(num_samples, "num_samples")
    c = _as_count(num_correct, "num_correct")
    k = _as_count(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"k={k} > num_samples={n}: pass@k needs at least k samples per task")
    if c > n:
        raise ValueError(f"num_correct={c} > num_samples={n}")
    if n - c < k:
        return 1.0  # every k-subset contains a correct sample
    survive = 1.0  # C(n-c, k) / C(n, k): probability that a random k-subset has no correct one
    for i in range(n - c + 1, n + 1):
        survive *= 1.0 - k / i
    return float(1.0 - survive)


def mean_at_k(per_task_successes: Sequence[Sequence[bool | float]], k: int) -> float:
    """mean@k: success averaged over the *first* k samples of each task, then over tasks.

    It estimates the expected success of a single sample (what a deployed team gets on one try),
    using k samples per task to reduce variance; pass@k instead asks whether *any* of k samples
    succeeds. The sample order given is the order used ("first k"), so keep samples in the order
    they were drawn.
    """
    k = _as_count(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(per_task_successes) == 0:
        raise ValueError("mean@k of no tasks: an empty eval set is an error, not a 0% result")
    short = [i for i, samples in enumerate(per_task_successes) if len(samples) < k]
    if short:
        raise ValueError(f"mean@{k} needs >= {k} samples per task; tasks at positions {short} "
                         f"have fewer")
    per_task = [float(np.mean([float(s) for s in samples[:k]])) for samples in per_task_successes]
    return float(np.mean(per_task))


def wilson_interval(successes: int, trials: int,
                    confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927).

    With p = successes / trials and z the two-sided normal quantile::

        (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    """
    successes, trials = _as_count(successes, "successes"), _as_count(trials, "trials")
    _check_confidence(confidence)
    if trials == 0:
        raise ValueError("Wilson interval of 0 trials is undefined")
    if successes > trials:
        raise ValueError(f"successes={successes} > trials={trials}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    # Exact end points where the formula gives them analytically (avoids 1e-17 round-off).
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == trials else min(1.0, centre + half)
    return float(lo), float(hi)


def bootstrap_interval(per_task_values: Sequence[float], *, confidence: float = 0.95,
                       num_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``per_task_values``, resampling tasks.

    Tasks are drawn with replacement ``num_resamples`` times; the interval is the
    ((1-confidence)/2, (1+confidence)/2) quantiles of the resampled means. A fixed ``seed`` makes
    it reproducible, so two runs of ``eval`` on the same episodes give the same record.
    """
    values = np.asarray(per_task_values, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0:
        raise ValueError("bootstrap needs a non-empty flat sequence of per-task values")
    if not np.all(np.isfinite(values)):
        raise ValueError("bootstrap values must be finite")
    _check_confidence(confidence)
    if int(num_resamples) < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples}")
    if np.all(values == values[0]):
        return float(values[0]), float(values[0])  # no spread (also avoids ulp-level noise)
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, len(values), size=(int(num_resamples), len(values)))
    means = values[indices].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


# ---------------------------------------------------------------------------- summary
def summarize(episodes: Sequence[Any], *, samples_per_task: int,
              ks: Iterable[int] | None = None) -> dict:
    """Reduce evaluation episodes to the ``summary`` dict of an eval record.

    ``episodes`` are :class:`~pettingllms_rllib.core.tree_sampler.EpisodeSummary`-like objects
    (``task``, ``success``, ``num_turns``, ``agent_return``, ``agent_reward_team``,
    ``agent_reward_local``, ``parse_errors``, ``agent_actions``). They are grouped by ``task``;
    within a task, their order is the sample order used by mean@k. Every task must have exactly
    ``samples_per_task`` episodes, since pass@k's n must be the same for every task to be
    comparable. ``ks`` defaults to ``(1, samples_per_task)``.

    Per-agent means are over *all* episodes, an agent that did not act in an episode counting
    0 (it earned nothing there); the parse-error rate is errors / actions summed over episodes.
    """
    samples_per_task = _as_count(samples_per_task, "samples_per_task")
    if samples_per_task < 1:
        raise ValueError(f"samples_per_task must be >= 1, got {samples_per_task}")
    if len(episodes) == 0:
        raise ValueError("no episodes: an empty eval set is an error, not a 0% result")
    ks = _check_ks((1, samples_per_task) if ks is None else ks, samples_per_task)

    by_task = _group_by_task(episodes)
    uneven = {task: len(group) for task, group in by_task.items()
              if len(group) != samples_per_task}
    if uneven:
        ordered = sorted(uneven.items(), key=lambda item: str(item[0]))
        listed = ", ".join(f"{task!r} ({count})" for task, count in ordered)
        raise ValueError(f"every task needs exactly samples_per_task={samples_per_task} episodes; "
                         f"these have another count: {listed}")

    successes = [[bool(e.success) for e in group] for group in by_task.values()]
    num_episodes = len(episodes)
    num_success = sum(sum(task) for task in successes)

    mean_k, pass_k, pass_k_ci = {}, {}, {}
    for k in ks:
        per_task_pass = [pass_at_k(samples_per_task, sum(task), k) for task in successes]
        mean_k[str(k)] = mean_at_k(successes, k)
        pass_k[str(k)] = float(np.mean(per_task_pass))
        pass_k_ci[str(k)] = list(bootstrap_interval(per_task_pass, confidence=SUMMARY_CONFIDENCE))

    return {
        "num_tasks": len(by_task),
        "samples_per_task": samples_per_task,
        "num_episodes": num_episodes,
        "success_rate": num_success / num_episodes,
        "success_ci95": list(wilson_interval(num_success, num_episodes, SUMMARY_CONFIDENCE)),
        "mean_at_k": mean_k,
        "pass_at_k": pass_k,
        "pass_at_k_ci95": pass_k_ci,
        "turns_mean": float(np.mean([float(e.num_turns) for e in episodes])),
        "agents": {agent: _agent_stats(episodes, agent) for agent in _agents_of(episodes)},
    }


def _agent_stats(episodes: Sequence[Any], agent: str) -> dict:
    errors = actions = 0
    for episode in episodes:
        e, a = int(episode.parse_errors.get(agent, 0)), int(episode.agent_actions.get(agent, 0))
        if e > a:
            raise ValueError(f"task {episode.task!r}: agent {agent!r} has {e} parse errors but "
                             f"only {a} actions (is agent_actions filled in?)")
        errors, actions = errors + e, actions + a

    def mean(field: str) -> float:
        return float(np.mean([float(getattr(e, field).get(agent, 0.0)) for e in episodes]))

    return {
        "return_mean": mean("agent_return"),
        "reward_team_mean": mean("agent_reward_team"),
        "reward_local_mean": mean("agent_reward_local"),
        # 0 actions implies 0 errors (checked above): report 0.0, a JSON-safe float, not NaN.
        "parse_error_rate": errors / actions if actions else 0.0,
    }


# ---------------------------------------------------------------------------- reporting
def markdown_table(records: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table with one row per eval record (the whole ``eval.json`` dict).

    Columns, in a fixed order: label, task, decoding, search (K), tasks × samples, success with
    its 95% Wilson interval, pass@k (with bootstrap interval) and mean@k for every k found in any
    record (ascending), mean turns, and one parse-error-rate column per agent found in any record
    (sorted). A cell a record has no value for shows "–".
    """
    summaries = [record["summary"] for record in records]
    ks = sorted({int(k) for s in summaries for k in (*s.get("pass_at_k", {}),
                                                     *s.get("mean_at_k", {}))})
    agents = sorted({agent for s in summaries for agent in s.get("agents", {})})
    header = (["label", "task", "decoding", "search (K)", "tasks × samples", "success [95% CI]"]
              + [f"pass@{k}" for k in ks] + [f"mean@{k}" for k in ks] + ["turns"]
              + [f"parse err ({agent})" for agent in agents])
    rows = [header, ["---"] * len(header)]
    for record, s in zip(records, summaries):
        row = [str(record.get("label", "")), str(record.get("task", "")), _decoding_cell(record),
               _search_cell(record), f"{s['num_tasks']} × {s['samples_per_task']}",
               _with_interval(s.get("success_rate"), s.get("success_ci95"))]
        row += [_with_interval(s.get("pass_at_k", {}).get(str(k)),
                               s.get("pass_at_k_ci95", {}).get(str(k))) for k in ks]
        row += [_number(s.get("mean_at_k", {}).get(str(k))) for k in ks]
        row.append(_number(s.get("turns_mean"), digits=2))
        row += [_number(s.get("agents", {}).get(agent, {}).get("parse_error_rate"))
                for agent in agents]
        rows.append(row)
    return "\n".join("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows) + "\n"


def episodes_csv_rows(episodes: Sequence[Any]) -> list[dict]:
    """One flat dict per episode for ``episodes.csv``, in the order given.

    Every row has the same keys (``task``, ``success`` as 0/1, ``num_turns``, then for each agent
    of any episode, sorted: ``<agent>/return``, ``/team``, ``/local``, ``/parse_errors``,
    ``/actions``), so the rows go straight into ``csv.DictWriter``; an agent that did not act in
    an episode gets zeros.
    """
    agents = _agents_of(episodes)
    rows = []
    for e in episodes:
        row: dict[str, Any] = {"task": e.task, "success": int(bool(e.success)),
                               "num_turns": int(e.num_turns)}
        for agent in agents:
            row[f"{agent}/return"] = float(e.agent_return.get(agent, 0.0))
            row[f"{agent}/team"] = float(e.agent_reward_team.get(agent, 0.0))
            row[f"{agent}/local"] = float(e.agent_reward_local.get(agent, 0.0))
            row[f"{agent}/parse_errors"] = int(e.parse_errors.get(agent, 0))
            row[f"{agent}/actions"] = int(e.agent_actions.get(agent, 0))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- helpers
def _as_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _check_ks(ks: Iterable[int], samples_per_task: int) -> list[int]:
    ks = sorted({_as_count(k, "k") for k in ks})
    bad = [k for k in ks if not 1 <= k <= samples_per_task]
    if bad:
        raise ValueError(f"ks {bad} outside [1, samples_per_task={samples_per_task}]: "
                         f"pass@k and mean@k need k samples per task")
    if not ks:
        raise ValueError("ks is empty")
    return ks


def _group_by_task(episodes: Sequence[Any]) -> dict[Hashable, list[Any]]:
    """Episodes by task, tasks in first-seen order, episodes in their given (sample) order."""
    groups: dict[Hashable, list[Any]] = {}
    for episode in episodes:
        groups.setdefault(episode.task, []).append(episode)
    return groups


def _agents_of(episodes: Sequence[Any]) -> list[str]:
    fields = ("agent_return", "agent_reward_team", "agent_reward_local", "parse_errors",
              "agent_actions")
    return sorted({agent for e in episodes for f in fields for agent in getattr(e, f)})


def _number(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{float(value):.{digits}f}"


def _with_interval(value: Any, interval: Sequence[float] | None) -> str:
    if value is None:
        return "–"
    if interval is None:
        return _number(value)
    return f"{float(value):.3f} [{float(interval[0]):.2f}, {float(interval[1]):.2f}]"


def _decoding_cell(record: Mapping[str, Any]) -> str:
    decoding = str(record.get("decoding", ""))
    if decoding == "sample" and record.get("temperature") is not None:
        return f"sample (T={float(record['temperature']):g})"
    return decoding


def _search_cell(record: Mapping[str, Any]) -> str:
    return f"on (K={int(record.get('num_branches', 1))})" if record.get("search") else "off"


def _cell(value: str) -> str:
    """Keep a free-text cell on one line and from splitting the row."""
    return value.replace("|", "\\|").replace("\n", " ")
