"""`pettingllms-rllib report`: eval.json records -> Markdown with seeds aggregated per arm."""

import json

import pytest

from pettingllms_rllib.cli import main
from pettingllms_rllib.reporting import (arm_table, build_report, find_eval_files,
                                         load_eval_records, write_report)


def record(arm, seed, success, *, pass4=None, turns=2.0, budget=None, decoding="greedy",
           search=False, task="plan_path_v1", parse_errors=0.05):
    """An eval record in the shared format, with hand-picked numbers."""
    summary = {"num_tasks": 4, "samples_per_task": 4, "num_episodes": 16,
               "success_rate": success, "success_ci95": [max(0.0, success - 0.2),
                                                         min(1.0, success + 0.2)],
               "mean_at_k": {"1": success, "4": success},
               "pass_at_k": {"1": success, "4": success if pass4 is None else pass4},
               "pass_at_k_ci95": {"1": [0.0, 1.0], "4": [0.0, 1.0]},
               "turns_mean": turns,
               "agents": {"planner": {"return_mean": 0.1, "reward_team_mean": 0.1,
                                      "reward_local_mean": 0.0,
                                      "parse_error_rate": parse_errors}}}
    return {"label": f"{arm}/seed={seed}", "arm": arm, "seed": seed, "task": task,
            "env_config": {}, "checkpoint": None, "model": "smollm2-135m-instruct",
            "mapping": {"tool": "tool", "planner": "planner"}, "decoding": decoding,
            "temperature": 1.0, "search": search, "num_branches": 4 if search else 1,
            "eval_seeds": [1000000000], "num_tasks": 4, "samples_per_task": 4,
            "training_budget": budget, "summary": summary}


BUDGET = {"iterations": 7, "generated_tokens": 123456}


def write(folder, rec):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "eval.json").write_text(json.dumps(rec))
    return folder / "eval.json"


@pytest.fixture
def evals(tmp_path):
    root = tmp_path / "evals"
    for seed, success, pass4, turns in ((1, 0.5, 1.0, 2.0), (2, 0.25, 0.5, 3.0),
                                        (3, 0.75, 0.75, 4.0)):
        write(root / "per_role" / f"seed{seed}",
              record("per_role", seed, success, pass4=pass4, turns=turns, budget=BUDGET))
    write(root / "base", record("base", None, 0.125))
    return root


def rows(markdown):
    """Table rows as lists of cells (header first, separator dropped)."""
    out = []
    for line in markdown.strip().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if set(cells) != {"---"}:
            out.append(cells)
    return out


def by_arm(markdown):
    header, *body = rows(markdown)
    return {row[0]: dict(zip(header, row)) for row in body}


def test_arm_rows_aggregate_seeds_by_hand(evals):
    table = by_arm(arm_table(load_eval_records([evals])))
    assert list(table) == ["base", "per_role"]  # folder order: base/ before per_role/
    arm = table["per_role"]
    assert arm["n seeds"] == "3"
    # success 0.5, 0.25, 0.75: mean 0.5, sample std sqrt(((0)^2 + .25^2 + .25^2) / 2) = 0.25
    assert arm["success (mean ± std)"] == "0.500 ± 0.250"
    assert arm["success per seed"] == "1: 0.500, 2: 0.250, 3: 0.750"
    assert arm["pass@1"] == "0.500 ± 0.250"
    assert arm["pass@4"] == "0.750 ± 0.250"  # 1.0, 0.5, 0.75
    assert arm["mean@4"] == "0.500 ± 0.250"
    assert arm["turns"] == "3.00 ± 1.00"
    assert arm["train iterations"] == "7"
    assert arm["train generated tokens"] == "123,456"
    assert arm["decoding / search"] == "greedy, no search"
    assert arm["task"] == "plan_path_v1"


def test_untrained_baseline_has_dashes_and_no_std(evals):
    base = by_arm(arm_table(load_eval_records([evals])))["base"]
    assert base["n seeds"] == "1"
    assert base["success (mean ± std)"] == "0.125"
    assert base["success per seed"] == "untrained: 0.125"
    assert base["train iterations"] == "-"
    assert base["train generated tokens"] == "-"


def test_settings_are_not_averaged_and_partial_budgets_are_marked():
    records = [record("a", 1, 0.5, budget=BUDGET),
               record("a", 2, 0.7, budget={"iterations": 9, "generated_tokens": None}),
               record("a", 3, 0.9, budget=None),
               record("a", 1, 0.8, decoding="sample", search=True)]
    header, *body = rows(arm_table(records))
    assert len(body) == 2
    greedy, sampled = (dict(zip(header, row)) for row in body)
    assert greedy["n seeds"] == "3" and greedy["success (mean ± std)"] == "0.700 ± 0.200"
    assert greedy["train iterations"] == "7..9 (1 null)"
    assert greedy["train generated tokens"] == "123,456 (2 null)"
    assert sampled["n seeds"] == "1" and sampled["success (mean ± std)"] == "0.800"
    assert sampled["decoding / search"] == "sample (T=1), search K=4"


def test_parse_errors_are_averaged_per_agent_over_seeds():
    records = [record("a", 1, 0.5, parse_errors=0.25), record("a", 2, 0.5, parse_errors=0.75)]
    records[1]["summary"]["agents"]["tool"] = {"parse_error_rate": 1.0}
    assert by_arm(arm_table(records))["a"]["parse errors (mean)"] == "planner 0.500, tool 1.000"
    del records[0]["summary"]["agents"], records[1]["summary"]["agents"]
    assert by_arm(arm_table(records))["a"]["parse errors (mean)"] == "-"


def test_missing_k_is_averaged_over_the_seeds_that_have_it():
    records = [record("a", 1, 0.5), record("a", 2, 0.3)]
    del records[1]["summary"]["pass_at_k"]["4"]
    row = by_arm(arm_table(records))["a"]
    assert row["pass@4"] == "0.500 (n=1)"
    assert row["pass@1"] == "0.400 ± 0.141"


def test_write_report_has_both_tables_and_the_exact_file_list(evals, tmp_path):
    out = write_report([evals, evals / "base" / "eval.json"], tmp_path / "r" / "report.md")
    text = out.read_text()
    assert text.index("## Arms") < text.index("## Per evaluation") < text.index("## Eval files")
    files = [line[3:-1] for line in text.splitlines() if line.startswith("- `")]
    assert files == [str(p.resolve()) for p in sorted(evals.rglob("eval.json"))]
    assert "per_role/seed=2" in text  # the per-record table's label column
    assert text == build_report([evals])[0]


def test_no_eval_files_is_an_error_naming_the_paths(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        find_eval_files([tmp_path / "empty"])
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_eval_records([tmp_path / "nowhere"])


def test_a_file_that_is_not_a_record_is_named(tmp_path):
    bad = tmp_path / "eval.json"
    bad.write_text(json.dumps({"label": "x"}))
    with pytest.raises(ValueError, match="eval.json.*summary"):
        load_eval_records([bad])


def test_cli_report(evals, tmp_path, capsys):
    assert main(["report", str(evals)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Evaluation report") and "| per_role |" in out
    assert main(["report", str(evals), "--out", str(tmp_path / "x" / "report.md")]) == 0
    assert (tmp_path / "x" / "report.md").read_text() == out
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "eval.json").write_text("{not json")
    assert main(["report", str(tmp_path / "broken")]) == 2
