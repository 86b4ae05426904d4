"""Learning curves from Tune's ``progress.csv`` files, with seeds of one setting aggregated.

A single seed says little about an RL method, so trials are grouped into *arms* (the same
experiment folder and the same config apart from the seed) and each arm is drawn as the mean
over its seeds with a min-max band: with the 3-5 seeds these runs afford, the band shows every
seed's curve, where a std band would be an unreliable estimate from so few points. A one-trial
arm is a plain line.

Panels (:data:`PANELS`): success rate, per-agent episode return, turns per episode, share of
zero-variance groups (no learning signal), the learner's policy-vs-behaviour probability ratio
per module (drift from the sampling policy), where each iteration's seconds went (generate, env
and sandbox, advantages and batching, learner, weight sync, other: stacked for a single arm, the
total per arm otherwise), for runs with ``evaluation_interval`` held-out success against
generated tokens with the untrained team's held-out success as a dashed line, and the
per-module learning diagnostics of :data:`MODULE_DIAGNOSTICS`; one more axes holds the arms'
key. Columns a run does not log are skipped. Every series has markers (a run of one or two
iterations still shows its points), and each agent / module has its own colour, marker and
legend entry. The plotted numbers go to a JSON beside the PNG so they can be quoted without
reopening the CSVs.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pettingllms_rllib import metric_keys as keys
from pettingllms_rllib.trial_results import RESULT_FILE, read_results


def _column(*parts: str) -> str:
    """A result key as Tune's flattened column name (``env_runners/success_rate``)."""
    return "/".join(parts)


def _per_name(before: str, after: str | None = None) -> re.Pattern:
    """Columns ``<before>/<name>[/<after>]``, the name (a module, agent or part) captured."""
    return re.compile(f"^{re.escape(before)}/([^/]+)"
                      + (f"/{re.escape(after)}" if after is not None else "") + "$")


_AGENTS = _column(keys.ENV_RUNNERS, keys.AGENT)
SUCCESS = _column(keys.ENV_RUNNERS, keys.SUCCESS_RATE)
TURNS = _column(keys.ENV_RUNNERS, keys.EPISODE_TURNS_MEAN)
ZERO_VARIANCE = _column(keys.AT_GRPO_RESULTS, keys.ZERO_VARIANCE_GROUP_FRACTION)
AGENT_REWARD_PREFIX = _AGENTS + "/"
AGENT_REWARD_SUFFIX = "/" + keys.AGENT_EPISODE_RETURN_MEAN
AGENT_RETURN = _per_name(_AGENTS, keys.AGENT_EPISODE_RETURN_MEAN)
MODULE_RATIO = _per_name(keys.LEARNERS, keys.POLICY_BEHAVIOUR_RATIO)
#: Per-module learning diagnostics, one panel each: (panel, series suffix, column pattern).
MODULE_DIAGNOSTICS = (
    (7, keys.ENTROPY, _per_name(keys.LEARNERS, keys.ENTROPY)),
    (8, keys.KL_TO_START, _per_name(keys.LEARNERS, keys.KL_TO_START)),
    (9, keys.ADVANTAGE_STD, _per_name(_column(keys.AT_GRPO_RESULTS, keys.ADVANTAGE_STD))),
    (10, "gradient_norm", _per_name(keys.LEARNERS, keys.GRADIENT_NORM)),
    (11, keys.CLIP_FRACTION, _per_name(keys.LEARNERS, keys.CLIP_FRACTION)),
    (12, keys.AGENT_RESPONSE_TOKENS_MEAN, _per_name(_AGENTS, keys.AGENT_RESPONSE_TOKENS_MEAN)),
    (13, keys.REWARD_STD, _per_name(_column(keys.AT_GRPO_RESULTS, keys.REWARD_STD))),
    (14, keys.LOGP_MISMATCH_MEAN, _per_name(keys.LEARNERS, keys.LOGP_MISMATCH_MEAN)),
)
#: Panels whose series are one per module or agent (told apart by colour, marker, linestyle
#: and the legend).
PER_MODULE_PANELS = (1, 4) + tuple(panel for panel, _, _ in MODULE_DIAGNOSTICS)
#: Seconds of one part of an iteration (``pettingllms_rllib.core.timing.TIME_PARTS``).
TIME_PART = _per_name(_column(keys.AT_GRPO_RESULTS, keys.TIME_SECONDS))
ITERATION_SECONDS = _column(keys.AT_GRPO_RESULTS, keys.ITERATION_SECONDS)
HELD_OUT = _column(keys.EVALUATION, keys.EVALUATION_SUCCESS_RATE)
HELD_OUT_UNTRAINED = _column(keys.EVALUATION, keys.EVALUATION_UNTRAINED_SUCCESS_RATE)
GENERATED_TOKENS = _column(keys.ENV_RUNNERS, keys.NUM_GENERATED_TOKENS_LIFETIME)
#: Names of the held-out series in the figure's JSON (the first is the top-level result key
#: that holds the same number).
HELD_OUT_SERIES = keys.HELD_OUT_SUCCESS
HELD_OUT_UNTRAINED_SERIES = "held_out_untrained_success_rate"
TIME_PARTS = ("generate", "env", "advantages", "learner", "weight_sync", "other")
ALL_MODULES = "__all_modules__"
GRID_KEY = "__grid__"  # same as pettingllms_rllib.algorithms.config.GRID_KEY (no ray import here)
BAND = "min-max over seeds"
GROUP_BY = ("arm", "name", "trial", "run_dir")

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass
class Trial:
    """One Tune trial folder: its progress rows and its resolved config."""

    run_dir: Path
    name: str
    frame: pd.DataFrame
    params: dict[str, Any] | None
    seed: Any = None
    config: dict[str, Any] = field(default_factory=dict)  # params with the grid applied, no seed


# ---------------------------------------------------------------------------------- loading
def _read_progress(csv: Path) -> pd.DataFrame | None:
    """A trial's rows, each iteration once: from ``result.json`` where there is one (it stays
    parseable after a resume, see :mod:`~pettingllms_rllib.trial_results`), else the CSV."""
    if (csv.parent / RESULT_FILE).is_file():
        rows = read_results(csv.parent)
        frame = pd.DataFrame(rows) if rows else None
    else:
        try:
            frame = pd.read_csv(csv)
        except (pd.errors.EmptyDataError, pd.errors.ParserError):
            return None
    if frame is None or not len(frame) or "training_iteration" not in frame:
        return None
    # A resumed trial can log an iteration twice; the later row is the one that counts.
    frame = frame.dropna(subset=["training_iteration"])
    frame = frame.drop_duplicates("training_iteration", keep="last")
    return frame.sort_values("training_iteration").reset_index(drop=True)


def _read_params(trial_dir: Path) -> dict[str, Any] | None:
    try:
        params = json.loads((trial_dir / "params.json").read_text())
    except (OSError, ValueError):
        return None
    return params if isinstance(params, dict) else None


def split_seed(params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(seed, config without it), with a Tune grid point applied first.

    Why: seeds of one setting must compare equal. RLlib stores ``debugging(seed=...)`` as the
    top-level ``seed``; a YAML ``grid`` puts the varying keys (the seed too, if it is varied)
    under ``__grid__``, which the algorithm merges over the base config, so do the same here.
    A nested ``debugging.seed`` is also removed in case a config was stored by section.
    """
    config = copy.deepcopy(params)
    config.update(config.pop(GRID_KEY, None) or {})
    seed = config.pop("seed", None)
    debugging = config.get("debugging")
    if isinstance(debugging, dict) and "seed" in debugging:
        nested = debugging.pop("seed")
        seed = nested if seed is None else seed
    return seed, config


def load_run_trials(run_dir: str | Path) -> list[Trial]:
    """Every trial with at least one progress row under ``run_dir`` (or ``run_dir`` itself
    when it is a trial folder, so one trial can be plotted on its own)."""
    run_dir = Path(run_dir)
    if (run_dir / "progress.csv").is_file():
        csvs, owner = [run_dir / "progress.csv"], run_dir.parent
    else:
        csvs, owner = sorted(run_dir.glob("*/progress.csv")), run_dir
    trials = []
    for csv in csvs:
        frame = _read_progress(csv)
        if frame is None:
            continue
        params = _read_params(csv.parent)
        seed, config = split_seed(params) if params is not None else (None, {})
        trials.append(Trial(run_dir=owner, name=csv.parent.name, frame=frame, params=params,
                            seed=seed, config=config))
    return trials


# ---------------------------------------------------------------------------------- grouping
def _canonical(config: dict[str, Any]) -> str:
    # Object reprs may carry memory addresses that differ between otherwise equal trials.
    return _ADDRESS.sub("", json.dumps(config, sort_keys=True, default=str))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def _value_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return _ADDRESS.sub("", text)


def _short_value(value: Any, limit: int = 32) -> str:
    text = _value_text(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _arm_labels(run_name: str, configs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Name arms of one run folder by the config keys that tell them apart."""
    if len(configs) == 1:
        return {key: run_name for key in configs}
    flats = {key: _flatten(config) for key, config in configs.items()}
    keys = sorted({k for flat in flats.values() for k in flat})
    differing = [k for k in keys
                 if len({_value_text(f[k]) if k in f else "<unset>" for f in flats.values()}) > 1]
    labels = {}
    for key, flat in flats.items():
        parts = [f"{k}={_short_value(flat[k]) if k in flat else '<unset>'}" for k in differing[:4]]
        if len(differing) > 4:
            parts.append(f"+{len(differing) - 4} keys")
        labels[key] = f"{run_name}: {', '.join(parts)}"
    return labels


def group_trials(trials: Sequence[Trial],
                 group_by: str | Callable[[Trial], str] = "arm") -> dict[str, list[Trial]]:
    """Arm label -> its trials, in the order the arms first appear.

    ``"arm"`` (default): same run folder and same config apart from the seed; a trial without
    a readable ``params.json`` is its own arm, since nothing shows it shares a setting.
    ``"name"``: as ``"arm"`` but run folders of the same *name* count as one (one seed per
    folder, e.g. ``train/<arm>/seed=<s>/<experiment>``). ``"trial"``: every trial alone.
    ``"run_dir"``: every trial of a run folder together.
    A callable maps a :class:`Trial` to its arm label.
    """
    if callable(group_by):
        groups: dict[str, list[Trial]] = {}
        for trial in trials:
            groups.setdefault(str(group_by(trial)), []).append(trial)
        return groups
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY} or a callable, got {group_by!r}")
    keyed: dict[tuple[str, str], list[Trial]] = {}
    for trial in trials:
        run = trial.run_dir.name if group_by == "name" else str(trial.run_dir.resolve())
        if group_by == "trial" or (group_by == "arm" and trial.params is None):
            key = (run, "trial:" + trial.name)
        elif group_by == "run_dir":
            key = (run, "")
        else:
            key = (run, _canonical(trial.config))
        keyed.setdefault(key, []).append(trial)
    # Labels: run folder name, plus the differing keys when a folder holds several arms.
    by_run: dict[str, dict[str, dict[str, Any]]] = {}
    for (run, sub), members in keyed.items():
        by_run.setdefault(run, {})[sub] = members[0].config
    run_names = {run: Path(run).name for run in by_run}
    if len(set(run_names.values())) < len(run_names):  # same folder name under two parents
        run_names = {run: f"{Path(run).parent.name}/{Path(run).name}" for run in by_run}
    labels: dict[tuple[str, str], str] = {}
    for run, configs in by_run.items():
        alone = {sub for sub in configs if sub.startswith("trial:")}
        for sub in alone:
            labels[(run, sub)] = f"{run_names[run]}: {sub[len('trial:'):]}"
        rest = {sub: config for sub, config in configs.items() if sub not in alone}
        for sub, label in (_arm_labels(run_names[run], rest) if rest else {}).items():
            labels[(run, sub)] = label
    groups = {}
    for key, members in keyed.items():
        label, n = labels[key], 2
        while label in groups:  # never merge two arms through a label clash
            label, n = f"{labels[key]} #{n}", n + 1
        groups[label] = members
    return groups


# ------------------------------------------------------------------------------ aggregation
def aggregate(trials: Sequence[Trial], column: str) -> dict[str, list] | None:
    """Per training iteration: mean, min, max, sample std (null below 2 values) and n over
    the trials that logged ``column`` there; None when no trial has a value."""
    series = [t.frame.set_index("training_iteration")[column] for t in trials
              if column in t.frame]
    series = [s.dropna() for s in series]
    series = [s for s in series if len(s)]
    if not series:
        return None
    # Sorted: concat puts iterations the first trial lacks after its own, which would draw a
    # module that skipped an update in one seed (every group dropped) as a line going back.
    table = pd.concat(series, axis=1).sort_index()
    values = table.to_numpy(dtype=float)
    n = (~np.isnan(values)).sum(axis=1)
    out: dict[str, list] = {"training_iteration": [int(i) for i in table.index],
                            "mean": [], "min": [], "max": [], "std": [], "n": n.tolist()}
    for row, count in zip(values, n):
        row = row[~np.isnan(row)]
        out["mean"].append(round(float(row.mean()), 6) + 0.0)  # no -0.0 in the JSON
        out["min"].append(round(float(row.min()), 6))
        out["max"].append(round(float(row.max()), 6))
        out["std"].append(round(float(row.std(ddof=1)), 6) if count > 1 else None)
    return out


def _columns(trials: Sequence[Trial], pattern: re.Pattern) -> dict[str, str]:
    found = {}
    for trial in trials:
        for column in trial.frame.columns:
            match = pattern.match(column)
            if match and match.group(1) != ALL_MODULES:
                found.setdefault(match.group(1), column)
    return dict(sorted(found.items()))


def _panel_series(trials: Sequence[Trial]) -> list[tuple[int, str, str]]:
    """(panel, series name, column) for every plotted quantity this arm has."""
    series = [(0, keys.SUCCESS_RATE, SUCCESS)]
    series += [(1, f"{agent}/{keys.AGENT_EPISODE_RETURN_MEAN}", column)
               for agent, column in _columns(trials, AGENT_RETURN).items()]
    series.append((2, keys.EPISODE_TURNS_MEAN, TURNS))
    series.append((3, keys.ZERO_VARIANCE_GROUP_FRACTION, ZERO_VARIANCE))
    series += [(4, f"{module}/{keys.POLICY_BEHAVIOUR_RATIO}", column)
               for module, column in _columns(trials, MODULE_RATIO).items()]
    series.append((5, keys.ITERATION_SECONDS, ITERATION_SECONDS))
    series.append((6, HELD_OUT_SERIES, HELD_OUT))
    series.append((6, HELD_OUT_UNTRAINED_SERIES, HELD_OUT_UNTRAINED))
    parts = _columns(trials, TIME_PART)
    series += [(5, f"{keys.TIME_SECONDS}/{part}", parts[part])
               for part in TIME_PARTS if part in parts]
    for panel, suffix, pattern in MODULE_DIAGNOSTICS:
        series += [(panel, f"{module}/{suffix}", column)
                   for module, column in _columns(trials, pattern).items()]
    return series


PANELS = ("success rate", "per-agent episode return", "turns per episode",
          "zero-variance group share", "policy / behaviour prob ratio (per module)",
          "seconds per iteration, by part", "held-out success vs generated tokens",
          "policy entropy (per module, nats/token)", "KL from the starting policy (per module)",
          "advantage std (per module)", "gradient norm (per module)",
          "clip fraction (per module)", "response tokens (per agent)",
          "within-group reward std (per module)",
          "behaviour vs learner |log-prob| gap (per module, nats/token)")


# ------------------------------------------------------------------------------------ plot
def plot_runs(run_dirs: Sequence[str | Path], out_path: str | Path, *,
              group_by: str | Callable[[Trial], str] = "arm",
              references: dict[str, float] | None = None) -> Path:
    """Draw the learning curves of every trial under ``run_dirs`` into ``out_path`` (PNG).

    Trials are grouped into arms by ``group_by`` (see :func:`group_trials`); an arm with
    several trials is its mean with a min-max band, one trial is a plain line. Beside the PNG,
    ``<out>.json`` maps arm label -> ``training_iteration``, the plotted means per series
    (``success_rate``, ``<agent>/episode_return_mean``, ``episode_turns_mean``,
    ``zero_variance_group_fraction``, ``<module>/policy_behaviour_ratio``, the diagnostics
    ``<module>/{entropy,kl_to_start,advantage_std,gradient_norm,clip_fraction,reward_std,
    logp_mismatch_mean}`` and
    ``<agent>/response_tokens_mean``, ``iteration_s``, ``time_s/<part>``, ``held_out_*``; each aligned to
    that arm's iterations, null where no seed logged it), ``spread`` (min, max, std, n per
    iteration for each series), ``trials``, ``seeds`` and ``band``.
    ``references`` (label -> success rate, e.g. the best constant answer on the same held-out
    set from ``eval``) are drawn as dotted horizontal lines on the held-out panel and stored
    under the JSON's ``__references__`` key.
    Raises FileNotFoundError naming the folders when none holds a trial with progress rows.
    """
    import matplotlib.pyplot as plt

    out_path = Path(out_path)
    fig, summary = draw_runs(run_dirs, group_by=group_by, references=references)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    out_path.with_suffix(".json").write_text(json.dumps(_json_safe(summary), indent=1))
    return out_path


def draw_runs(run_dirs: Sequence[str | Path], *,
              group_by: str | Callable[[Trial], str] = "arm",
              references: dict[str, float] | None = None) -> tuple[Any, dict[str, Any]]:
    """The figure of :func:`plot_runs` (a matplotlib ``Figure``, not yet saved or closed) and
    the summary its JSON holds.

    Readable at any length: a series of one point is a marker (every series has markers,
    larger when an arm has few iterations), iteration axes have integer ticks and half an
    iteration of margin, and on per-agent / per-module panels each agent or module has its
    own colour (a shade of the arm's colour when several arms share the panel), marker and
    linestyle, named in the legend.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dirs = [Path(d) for d in run_dirs]
    trials = [trial for run_dir in run_dirs for trial in load_run_trials(run_dir)]
    if not trials:
        raise FileNotFoundError(
            "no trial with rows in progress.csv under " + ", ".join(str(d) for d in run_dirs))
    arms = group_trials(trials, group_by)

    # one axes per panel and one more for the arms' key (4 x 4: 15 panels + the key)
    fig, axes = plt.subplots(4, 4, figsize=(22, 16))
    axes = axes.ravel()
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    # One colour, marker and linestyle per agent / module across all arms, so each means the
    # same on every panel (an agent and its module share the name with a per-role mapping).
    subs = sorted({name for pattern in (AGENT_RETURN, MODULE_RATIO) + tuple(
        pattern for _, _, pattern in MODULE_DIAGNOSTICS) for name in _columns(trials, pattern)})
    look_of = {name: _series_look(i, len(subs)) for i, name in enumerate(subs)}
    all_iterations = sorted({int(i) for t in trials for i in t.frame["training_iteration"]})
    summary: dict[str, Any] = {}
    drawn = [False] * len(PANELS)
    legend_handles = []
    for index, (label, members) in enumerate(arms.items()):
        color = colors[index % len(colors)]
        iterations = sorted({int(i) for t in members for i in t.frame["training_iteration"]})
        marker_size = 3 if len(iterations) > 5 else 6
        entry: dict[str, Any] = {"training_iteration": iterations}
        spread: dict[str, Any] = {}
        stack_base = None
        for panel, name, column in _panel_series(members):
            stats = aggregate(members, column)
            if stats is None:
                continue
            ax = axes[panel]
            x = stats["training_iteration"]
            if panel == 5:
                stack_base = _draw_time_part(ax, name, stats, color, label, len(arms) == 1,
                                             stack_base, marker_size)
            elif panel == 6:
                _draw_held_out(ax, name, stats, members, color, label, marker_size)
            else:
                sub = name.split("/")[0] if panel in PER_MODULE_PANELS else None
                look = look_of.get(sub, {"shade": 0.0, "marker": "o", "linestyle": "-"})
                # one arm: a colour per agent / module; several: shades of the arm's colour
                shade = colors[subs.index(sub) % len(colors)] if sub in subs and len(arms) == 1 \
                    else _shaded(color, look["shade"])
                if len(members) > 1:
                    _draw_band(ax, x, stats["min"], stats["max"], shade)
                ax.plot(x, stats["mean"], color=shade, linestyle=look["linestyle"],
                        marker=look["marker"], markersize=marker_size,
                        label=f"{label}: {sub}" if sub else label)
            drawn[panel] = True
            by_iteration = dict(zip(x, range(len(x))))
            entry[name] = [stats["mean"][by_iteration[i]] if i in by_iteration else None
                           for i in iterations]
            spread[name] = {key: [stats[key][by_iteration[i]] if i in by_iteration else None
                                  for i in iterations]
                            for key in ("min", "max", "std", "n")}
        seeds = [t.seed for t in members]
        entry.update(spread=spread, trials=[t.name for t in members], seeds=seeds,
                     run_dir=str(members[0].run_dir),
                     band=BAND if len(members) > 1 else "none (single trial)")
        summary[label] = entry
        legend_handles.append(plt.Line2D([], [], color=color, marker="o",
                                         label=f"{label} (n={len(members)})"))

    for index, (name, rate) in enumerate((references or {}).items()):
        axes[6].axhline(rate, color="black", linestyle=(":", "-.")[index % 2], linewidth=1.2,
                        label=f"{name} ({rate:.3f})")
        drawn[6] = True
    if references:
        summary["__references__"] = dict(references)
    for ax, title, has_data in zip(axes, PANELS, drawn):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("generated tokens" if title == PANELS[6] else "training iteration")
        ax.grid(alpha=0.3)
        if title != PANELS[6] and has_data:
            _iteration_axis(ax, all_iterations)
        if has_data:
            if PANELS.index(title) in PER_MODULE_PANELS + (5, 6):
                ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "not logged by these runs", ha="center", va="center",
                    transform=ax.transAxes, color="grey")
    for panel in (0, 3, 6):
        axes[panel].set_ylim(-0.05, 1.05)
    key_ax = axes[len(PANELS)]
    key_ax.axis("off")
    key_ax.legend(handles=legend_handles, loc="upper left", fontsize=7, title="arms",
                  title_fontsize=8, frameon=False)
    key_ax.text(0.0, 0.0, f"line: mean over an arm's seeds\nband: {BAND}\n"
                          "agent / module: its own colour (one arm) or shade of the arm's\n"
                          "colour (several), marker and linestyle, named in each legend",
                transform=key_ax.transAxes, fontsize=8, va="bottom")
    # One entry per distinct folder name (seed folders of one arm share it), shortened so a
    # grid of many runs still gives a readable title; the legend names every arm.
    names = ", ".join(dict.fromkeys(d.name for d in run_dirs))
    if len(names) > 90:
        names = f"{len(arms)} arms"
    seeds = max((len(members) for members in arms.values()), default=1)
    fig.suptitle(f"AT-GRPO: {names}  (mean over seeds, band = {BAND})" if seeds > 1 else
                 f"AT-GRPO: {names}  (one trial per arm: no band)")
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # room for the suptitle
    return fig, summary


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", ":", "-.")


def _series_look(index: int, count: int) -> dict[str, Any]:
    """The marker, linestyle and shade (-0.45 darker .. 0.45 lighter) of the ``index``-th of
    ``count`` agents / modules."""
    shade = 0.0 if count < 2 else -0.45 + 0.9 * index / (count - 1)
    return {"shade": shade, "marker": _MARKERS[index % len(_MARKERS)],
            "linestyle": _LINESTYLES[index % len(_LINESTYLES)]}


def _shaded(color, shade: float) -> tuple[float, float, float]:
    """``color`` mixed with black (``shade`` < 0) or white (> 0) by ``|shade|``."""
    from matplotlib.colors import to_rgb

    rgb = np.asarray(to_rgb(color))
    target = np.ones(3) if shade > 0 else np.zeros(3)
    return tuple(float(v) for v in rgb + (target - rgb) * abs(shade))


def _draw_band(ax, x, low, high, color) -> None:
    """The min-max band over seeds; at a lone point (nothing to fill between) a vertical bar."""
    if len(x) == 1:
        ax.vlines(x, low, high, color=color, alpha=0.35, linewidth=4)
    else:
        ax.fill_between(x, low, high, color=color, alpha=0.18, linewidth=0)


def _iteration_axis(ax, iterations: Sequence[int]) -> None:
    """Integer ticks and half an iteration of margin either side, so a run of one or two
    iterations reads as such (not ticks at 1.2, 1.4, ... or a point on the frame)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if iterations:
        ax.set_xlim(min(iterations) - 0.5, max(iterations) + 0.5)


def _draw_time_part(ax, name: str, stats: dict[str, list], color, label: str, stacked: bool,
                    base: np.ndarray | None, marker_size: float = 3) -> np.ndarray | None:
    """One series of the time panel. A single arm: its parts stacked (``base`` is the running
    top of the stack). Several arms: each arm's total iteration seconds as a line."""
    x, mean = stats["training_iteration"], np.asarray(stats["mean"], dtype=float)
    if name == keys.ITERATION_SECONDS:
        if not stacked:
            ax.plot(x, mean, color=color, marker="o", markersize=marker_size,
                    label=f"{label}: training step")
        return base
    if not stacked:
        return base
    part = name.split("/", 1)[1]
    bottom = np.zeros_like(mean) if base is None or len(base) != len(mean) else base
    ax.bar(x, mean, bottom=bottom, width=0.8, label=part,
           color=f"C{TIME_PARTS.index(part) % 10}")
    return bottom + mean


def _draw_held_out(ax, name: str, stats: dict[str, list], members: Sequence[Trial], color,
                   label: str, marker_size: float = 3) -> None:
    """Held-out success (mean over seeds, min-max band) at the iterations that evaluated,
    against the arm's mean generated tokens there, starting from the untrained team at 0
    tokens; the untrained team also as a dashed line."""
    tokens = aggregate(members, GENERATED_TOKENS)
    if tokens is None:
        return
    at = dict(zip(tokens["training_iteration"], tokens["mean"]))
    points = [(at[i], m, lo, hi) for i, m, lo, hi in zip(
        stats["training_iteration"], stats["mean"], stats["min"], stats["max"]) if i in at]
    if not points:
        return
    x, mean, low, high = (list(column) for column in zip(*points))
    untrained = aggregate(members, HELD_OUT_UNTRAINED)
    if name == HELD_OUT_SERIES and untrained is not None:
        # the untrained team is the curve's start, at 0 generated tokens
        x, mean = [0.0] + x, [untrained["mean"][0]] + mean
        low, high = [untrained["min"][0]] + low, [untrained["max"][0]] + high
    if name == HELD_OUT_UNTRAINED_SERIES:
        ax.axhline(mean[0], color=color, linestyle="--", linewidth=1,
                   label=f"{label}: untrained")
        return
    if len(members) > 1:
        _draw_band(ax, x, low, high, color)
    ax.plot(x, mean, color=color, marker="o", markersize=marker_size, label=f"{label}: held-out")


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return _json_safe(float(value))
    return value


def plot_experiment(run_dir: str | Path, out_path: str | Path) -> Path:
    """One experiment folder (what ``train`` writes at the end): :func:`plot_runs` on it."""
    return plot_runs([run_dir], out_path)
