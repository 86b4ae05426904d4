"""Markdown comparison reports from ``eval.json`` records (``pettingllms-rllib report``).

A claim such as "per-role adapters beat a shared model" rests on several training seeds per
setting, so the main table has one row per *arm* with the seed-to-seed spread (mean ± sample
std over seeds, plus each seed's value so a single outlier seed is visible). The per-record
table from :func:`pettingllms_rllib.evaluation.metrics.markdown_table` follows with each
record's own confidence intervals, and the report ends with the exact list of eval files read,
so the numbers can be traced back.

An arm evaluated under two settings (greedy and sampled decoding, search on and off, or two
tasks) gets one row per setting: averaging a greedy score with a sampled one would describe
neither.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

EVAL_FILE = "eval.json"
MISSING = "-"
REQUIRED_SUMMARY_KEYS = ("success_rate",)


# ---------------------------------------------------------------------------------- loading
def find_eval_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every eval file named by ``paths``: a file is taken as is, a folder is searched
    recursively for ``eval.json``. Order: as given, folders sorted; duplicates dropped.

    Raises FileNotFoundError for a path that does not exist, or when nothing is found (naming
    the paths searched), since an empty report would look like a result.
    """
    paths = [Path(p) for p in paths]
    found: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(path.rglob(EVAL_FILE))
        else:
            raise FileNotFoundError(f"no such eval file or folder: {path}")
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append(candidate)
    if not found:
        raise FileNotFoundError(
            f"no {EVAL_FILE} under " + ", ".join(str(p) for p in paths))
    return found


def _load_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    summary = record.get("summary") if isinstance(record, dict) else None
    if not isinstance(summary, dict) or any(k not in summary for k in REQUIRED_SUMMARY_KEYS):
        raise ValueError(f"{path}: not an eval record (needs a 'summary' object with "
                         f"{', '.join(REQUIRED_SUMMARY_KEYS)}; see the eval-record format)")
    return record


def load_eval_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The eval records found by :func:`find_eval_files`, in that order."""
    return [_load_record(path) for path in find_eval_files(paths)]


# ------------------------------------------------------------------------------ aggregation
def _arm_name(record: Mapping[str, Any]) -> str:
    return str(record.get("arm") or record.get("label") or "?")


def _setting(record: Mapping[str, Any]) -> tuple:
    """What must match for two records to be seeds of one row (besides the arm)."""
    decoding = record.get("decoding")
    temperature = record.get("temperature") if decoding == "sample" else None
    search = bool(record.get("search"))
    branches = int(record.get("num_branches") or 1) if search else None
    return (record.get("task"), decoding, temperature, search, branches)


def group_by_arm(records: Sequence[Mapping[str, Any]]) -> dict[tuple, list[Mapping[str, Any]]]:
    """(arm, task, decoding, temperature, search, K) -> records, in first-seen order; within a
    row, records are sorted by seed (untrained baselines, seed null, last)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault((_arm_name(record), *_setting(record)), []).append(record)
    for members in groups.values():
        members.sort(key=lambda r: (r.get("seed") is None, str(r.get("seed"))))
    return groups


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof=1: the seeds are a sample of all seeds);
    the std is None for one value, where it is undefined."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _mean_std_cell(values: Sequence[Any], total: int, digits: int = 3) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return MISSING
    mean, std = mean_std(present)
    text = f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"
    return text if len(present) == total else f"{text} (n={len(present)})"


def _seed_name(record: Mapping[str, Any]) -> str:
    """The training seed, or ``untrained`` for a base model and ``seed ?`` for a checkpoint
    evaluated without ``--train-seed`` ("none" read as if the seed were None)."""
    seed = record.get("seed")
    if seed is not None:
        return str(seed)
    return "untrained" if record.get("training_budget") is None else "seed ?"


def _budget_cell(values: Sequence[Any], *, thousands: bool = False) -> str:
    present = sorted(int(v) for v in values if v is not None)
    if not present:
        return MISSING

    def fmt(value: int) -> str:
        return f"{value:,}" if thousands else str(value)

    low, high = fmt(present[0]), fmt(present[-1])
    text = low if low == high else f"{low}..{high}"
    missing = len(values) - len(present)
    return text if not missing else f"{text} ({missing} null)"


def _decoding(record: Mapping[str, Any]) -> str:
    decoding = str(record.get("decoding") or MISSING)
    if decoding == "sample" and record.get("temperature") is not None:
        decoding += f" (T={float(record['temperature']):g})"
    if record.get("search"):
        return f"{decoding}, search K={int(record.get('num_branches') or 1)}"
    return f"{decoding}, no search"


def _parse_error_cell(summaries: Sequence[Mapping[str, Any]]) -> str:
    """Each agent's parse-error rate, mean over the seeds that recorded it (``agent rate``,
    agents sorted): whether a role produces usable actions at all is the first thing training
    changes in a small model, and success alone hides it."""
    rates: dict[str, list[float]] = {}
    for summary in summaries:
        for agent, stats in (summary.get("agents") or {}).items():
            if stats.get("parse_error_rate") is not None:
                rates.setdefault(agent, []).append(float(stats["parse_error_rate"]))
    if not rates:
        return MISSING
    return ", ".join(f"{agent} {statistics.fmean(values):.3f}"
                     for agent, values in sorted(rates.items()))


def _ks(records: Sequence[Mapping[str, Any]], key: str) -> list[str]:
    return [str(k) for k in sorted({int(k) for r in records for k in r["summary"].get(key, {})})]


def _cell(value: str) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def arm_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per arm (per evaluation setting), aggregating its seeds.

    Columns: arm, task, n seeds, success rate mean ± std over seeds, each seed's success rate,
    pass@k and mean@k (mean ± std) for every k in any record, mean turns, each agent's mean
    parse-error rate, training budget (iterations and generated tokens: the value, a min..max
    range if seeds differ, ``-`` when null), decoding + search. A metric some seeds lack is
    averaged over those that have it, with ``(n=...)`` saying how many.
    """
    if not records:
        raise ValueError("no eval records to tabulate")
    pass_ks, mean_ks = _ks(records, "pass_at_k"), _ks(records, "mean_at_k")
    header = (["arm", "task", "n seeds", "success (mean ± std)", "success per seed"]
              + [f"pass@{k}" for k in pass_ks] + [f"mean@{k}" for k in mean_ks]
              + ["turns", "parse errors (mean)", "train iterations", "train generated tokens",
                 "decoding / search"])
    rows = [header, ["---"] * len(header)]
    for (arm, *_), members in group_by_arm(records).items():
        n = len(members)
        summaries = [r["summary"] for r in members]
        budgets = [r.get("training_budget") or {} for r in members]
        row = [arm, str(members[0].get("task") or MISSING), str(n),
               _mean_std_cell([s.get("success_rate") for s in summaries], n),
               ", ".join(f"{_seed_name(r)}: {float(r['summary']['success_rate']):.3f}"
                         for r in members)]
        row += [_mean_std_cell([s.get("pass_at_k", {}).get(k) for s in summaries], n)
                for k in pass_ks]
        row += [_mean_std_cell([s.get("mean_at_k", {}).get(k) for s in summaries], n)
                for k in mean_ks]
        row.append(_mean_std_cell([s.get("turns_mean") for s in summaries], n, digits=2))
        row.append(_parse_error_cell(summaries))
        row.append(_budget_cell([b.get("iterations") for b in budgets]))
        row.append(_budget_cell([b.get("generated_tokens") for b in budgets], thousands=True))
        row.append(_decoding(members[0]))
        rows.append(row)
    return "\n".join("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows) + "\n"


def constant_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per task setting (task, env_config, evaluation seeds), the best constant
    answer found in any of its records (``evaluation/constant_answers.py``): a team must beat
    it to show a skill. Records written before it existed are skipped; "" when none has it."""
    best: dict[str, Mapping[str, Any]] = {}
    for record in records:
        constant = record.get("best_constant_answer")
        if not constant:
            continue
        key = json.dumps([record.get("task"), record.get("env_config"),
                          record.get("eval_seeds")], sort_keys=True, default=str)
        if key not in best or constant["success_rate"] > best[key]["success_rate"]:
            best[key] = {**constant, "task": record.get("task")}
    if not best:
        return ""
    rows = [["task", "best constant success", "answers (per role)"], ["---"] * 3]
    for constant in best.values():
        answers = "; ".join(f"{agent}: {json.dumps(text)[:80]}"
                            for agent, text in sorted(constant["answers"].items()))
        rows.append([str(constant["task"]),
                     f"{constant['success_rate']:.3f} ({constant['num_successes']}/"
                     f"{constant['num_tasks']})", answers])
    return "\n".join("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows) + "\n"


# ---------------------------------------------------------------------------------- report
def build_report(paths: Iterable[str | Path]) -> tuple[str, list[Path]]:
    """(Markdown text, eval files used): the arm table, the per-record table, the file list."""
    from pettingllms_rllib.evaluation.metrics import markdown_table

    files = find_eval_files(paths)
    records = [_load_record(path) for path in files]
    lines = [
        "# Evaluation report",
        "",
        f"{len(records)} eval record(s), {len(group_by_arm(records))} arm row(s).",
        "",
        "## Arms",
        "",
        "Seeds of an arm (same decoding, search and task) are aggregated: mean ± sample std "
        "(ddof=1) over seeds; `-`: not recorded.",
        "",
        arm_table(records),
        *(["## Best constant answer", "",
           "One fixed response per role played on every instance and turn, searched over the "
           "evaluated teams' responses and the prompts' examples (a lower bound of the best "
           "constant's score). A team that does not beat it has not shown a skill.", "",
           table] if (table := constant_table(records)) else []),
        "## Per evaluation",
        "",
        "Intervals: Wilson 95% for success, task bootstrap 95% for pass@k.",
        "",
        markdown_table(records),
        "## Eval files",
        "",
        *[f"- `{path.resolve()}`" for path in files],
        "",
    ]
    return "\n".join(lines), files


def write_report(paths: Iterable[str | Path], out_md: str | Path) -> Path:
    """Write :func:`build_report`'s Markdown to ``out_md`` (folders created) and return it."""
    text, _ = build_report(paths)
    out_md = Path(out_md)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(text)
    return out_md
