"""Evaluation metrics (pass@k, mean@k, intervals, the eval summary), checked against hand values."""

import csv
import io
import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms_rllib.core.tree_sampler import EpisodeSummary
from pettingllms_rllib.evaluation.metrics import (bootstrap_interval, episodes_csv_rows,
                                                  markdown_table, mean_at_k, pass_at_k, summarize,
                                                  wilson_interval)


def episode(task, success, turns, *, ret, team, local, errors, actions):
    return EpisodeSummary(task=task, success=success, num_turns=turns, agent_return=ret,
                          agent_reward_team=team, agent_reward_local=local, parse_errors=errors,
                          agent_actions=actions)


# ----------------------------------------------------------------------------------- pass@k
@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 1, 0.25),          # c / n
    (4, 1, 2, 0.5),           # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 3, 0.9),           # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
    (7, 0, 3, 0.0),           # nothing correct
    (7, 7, 3, 1.0),           # everything correct
    (7, 5, 3, 1.0),           # n - c < k: every 3-subset holds a correct sample
    (1, 1, 1, 1.0),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_brute_force_over_subsets(nck):
    n, c, k = nck
    subsets = list(itertools.combinations(range(n), k))  # samples 0..c-1 are the correct ones
    hit = sum(any(i < c for i in subset) for subset in subsets)
    assert pass_at_k(n, c, k) == pytest.approx(hit / len(subsets), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    # C(1000, 500) overflows a float; the product form must not.
    expected = 1 - math.comb(600, 500) / math.comb(1000, 500)
    assert pass_at_k(1000, 400, 500) == pytest.approx(expected, abs=1e-12)
    assert 0.0 < pass_at_k(1000, 1, 10) < 1.0


@pytest.mark.parametrize("n, c, k", [(3, 1, 4), (3, 4, 1), (-1, 0, 1), (3, -1, 1), (3, 1, -1),
                                     (3, 1, 0)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# ----------------------------------------------------------------------------------- mean@k
def test_mean_at_k_hand_values():
    tasks = [[True, False, True, True], [False, False, False, True], [True, True, True, True]]
    assert mean_at_k(tasks, 1) == pytest.approx(2 / 3)                   # (1 + 0 + 1) / 3
    assert mean_at_k(tasks, 2) == pytest.approx((0.5 + 0 + 1) / 3)
    assert mean_at_k(tasks, 4) == pytest.approx((0.75 + 0.25 + 1) / 3)   # overall success rate


def test_mean_at_k_does_not_grow_like_pass_at_k():
    # one correct sample out of 4: a single try succeeds 1/4 of the time, any of 4 always does
    tasks = [[False, False, False, True]]
    assert mean_at_k(tasks, 4) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 4) == pytest.approx(1.0)


def test_mean_at_k_errors():
    with pytest.raises(ValueError, match="empty"):
        mean_at_k([], 1)
    with pytest.raises(ValueError, match="samples per task"):
        mean_at_k([[True, False], [True]], 2)
    with pytest.raises(ValueError):
        mean_at_k([[True]], 0)


# ----------------------------------------------------------------------------------- Wilson
# Textbook values by the Wilson score formula with z = 1.959964 (95%):
#   centre = (p + z^2/2n) / (1 + z^2/n),  half = z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2)
#   0/10:  [0, 3.8415/10 / 1.38415]                        = [0, 0.2775]
#   10/10: [1 - 0.2775, 1]                                 = [0.7225, 1]
#   5/10:  0.5 -+ 1.41601 * sqrt(0.025 + 0.0096037)         = [0.2366, 0.7634]
#   1/10:  (0.1 + 0.19207)/1.38415 -+ 1.41601 * sqrt(0.009 + 0.0096037) = [0.0179, 0.4042]
@pytest.mark.parametrize("successes, trials, lo, hi", [
    (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (5, 10, 0.2366, 0.7634), (1, 10, 0.0179, 0.4042),
])
def test_wilson_interval_textbook_values(successes, trials, lo, hi):
    got_lo, got_hi = wilson_interval(successes, trials)
    assert got_lo == pytest.approx(lo, abs=1e-3) and got_hi == pytest.approx(hi, abs=1e-3)


def test_wilson_interval_narrows_with_confidence_and_rejects_bad_input():
    lo90, hi90 = wilson_interval(5, 10, confidence=0.90)
    lo95, hi95 = wilson_interval(5, 10)
    assert lo95 < lo90 < 0.5 < hi90 < hi95
    for args in [(0, 0), (11, 10), (-1, 10)]:
        with pytest.raises(ValueError):
            wilson_interval(*args)
    with pytest.raises(ValueError):
        wilson_interval(1, 10, confidence=1.0)


# ----------------------------------------------------------------------------------- bootstrap
def test_bootstrap_is_deterministic_for_a_seed_and_contains_the_mean():
    values = [0.91, 0.03, 0.77, 0.52, 0.26, 0.11, 0.98, 0.64]  # irregular: seeds differ
    first = bootstrap_interval(values, seed=3)
    assert bootstrap_interval(values, seed=3) == first
    assert bootstrap_interval(values, seed=4) != first
    lo, hi = first
    assert 0.0 <= lo < np.mean(values) < hi <= 1.0
    narrow = bootstrap_interval(values, seed=3, confidence=0.5)
    assert lo <= narrow[0] <= narrow[1] <= hi


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_bootstrap_of_success_indicators_contains_the_mean(successes):
    values = [float(s) for s in successes]
    lo, hi = bootstrap_interval(values, num_resamples=500)
    assert lo <= np.mean(values) <= hi


def test_bootstrap_edge_cases():
    assert bootstrap_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError):
        bootstrap_interval([])
    with pytest.raises(ValueError):
        bootstrap_interval([1.0, 0.0], confidence=0.0)


# ----------------------------------------------------------------------------------- summarize
def hand_episodes():
    """3 tasks x 2 samples. Successes: a = [F, T], b = [F, F], c = [T, T].

    The planner acts 2 times every episode; the tool acts only in a's and c's first samples.
    """
    def ep(task, success, turns, planner_ret, errs, tool=None):
        ret, team, local = {"planner": planner_ret}, {"planner": 1.0}, {"planner": planner_ret - 1}
        errors, actions = {"planner": errs}, {"planner": 2}
        if tool is not None:  # (return, parse errors, actions)
            ret["tool"], team["tool"], local["tool"] = tool[0], 0.5, tool[0] - 0.5
            errors["tool"], actions["tool"] = tool[1], tool[2]
        return episode(task, success, turns, ret=ret, team=team, local=local, errors=errors,
                       actions=actions)

    return [
        ep("a", False, 2, 1.0, 1, tool=(2.0, 1, 2)),
        ep("b", False, 4, 0.0, 0),
        ep("c", True, 3, 3.0, 0, tool=(4.0, 0, 2)),
        ep("a", True, 1, 2.0, 0),
        ep("b", False, 5, 0.0, 1),
        ep("c", True, 3, 0.0, 0),
    ]


def test_summarize_hand_example():
    summary = summarize(hand_episodes(), samples_per_task=2)
    assert set(summary) == {"num_tasks", "samples_per_task", "num_episodes", "success_rate",
                            "success_ci95", "mean_at_k", "pass_at_k", "pass_at_k_ci95",
                            "turns_mean", "agents"}
    assert (summary["num_tasks"], summary["samples_per_task"], summary["num_episodes"]) == (3, 2, 6)
    assert summary["success_rate"] == pytest.approx(0.5)
    assert summary["success_ci95"] == pytest.approx(list(wilson_interval(3, 6)))
    # first samples (in the given order): a F, b F, c T
    assert summary["mean_at_k"] == pytest.approx({"1": 1 / 3, "2": (0.5 + 0 + 1) / 3})
    # pass@1 = mean of c/n; pass@2 with n=2: a 1, b 0, c 1
    assert summary["pass_at_k"] == pytest.approx({"1": 0.5, "2": 2 / 3})
    assert summary["pass_at_k_ci95"]["2"] == pytest.approx(list(bootstrap_interval([1, 0, 1])))
    for k, (lo, hi) in summary["pass_at_k_ci95"].items():
        assert 0.0 <= lo <= summary["pass_at_k"][k] <= hi <= 1.0
    assert summary["turns_mean"] == pytest.approx(18 / 6)
    planner, tool = summary["agents"]["planner"], summary["agents"]["tool"]
    assert planner == pytest.approx({"return_mean": 6.0 / 6, "reward_team_mean": 1.0,
                                     "reward_local_mean": 0.0, "parse_error_rate": 2 / 12})
    # the tool did not act in 4 episodes: those count 0 in the means, 0 actions in the rate
    assert tool == pytest.approx({"return_mean": 6.0 / 6, "reward_team_mean": 1.0 / 6,
                                  "reward_local_mean": 5.0 / 6, "parse_error_rate": 1 / 4})


def test_summarize_round_trips_through_json_and_takes_custom_ks():
    summary = summarize(hand_episodes(), samples_per_task=2, ks=[2])
    assert set(summary["pass_at_k"]) == set(summary["mean_at_k"]) == {"2"}
    assert json.loads(json.dumps(summary)) == summary


def test_summarize_single_sample_per_task():
    eps = [episode(t, s, 1, ret={}, team={}, local={}, errors={}, actions={})
           for t, s in [("x", True), ("y", False), ("z", False), ("w", False)]]
    summary = summarize(eps, samples_per_task=1)
    assert summary["pass_at_k"] == {"1": 0.25} and summary["mean_at_k"] == {"1": 0.25}
    assert summary["agents"] == {}


def test_summarize_errors():
    with pytest.raises(ValueError, match="empty eval set"):
        summarize([], samples_per_task=1)
    uneven = hand_episodes()[:-1] + [hand_episodes()[0]]  # c has 1 episode, a has 3
    with pytest.raises(ValueError, match=r"'a' \(3\), 'c' \(1\)"):
        summarize(uneven, samples_per_task=2)
    with pytest.raises(ValueError, match="samples_per_task=2"):
        summarize(hand_episodes(), samples_per_task=2, ks=(1, 3))
    with pytest.raises(ValueError):
        summarize(hand_episodes(), samples_per_task=2, ks=(0,))
    bad = hand_episodes()
    bad[0].agent_actions = {"planner": 0, "tool": 2}  # 1 parse error in 0 actions
    with pytest.raises(ValueError, match="parse errors"):
        summarize(bad, samples_per_task=2)


# ----------------------------------------------------------------------------------- reports
def record(label, summary, **extra):
    return {"label": label, "arm": label.split("/")[0], "seed": 1, "task": "plan_path_v1",
            "decoding": "greedy", "temperature": 1.0, "search": False, "num_branches": 1,
            "summary": summary, **extra}


def test_markdown_table_has_one_row_per_record_with_its_numbers():
    base = summarize(hand_episodes(), samples_per_task=2)
    single = summarize(hand_episodes()[:3], samples_per_task=1)
    table = markdown_table([
        record("atgrpo_per_role/seed=1", base),
        record("base|model", single, decoding="sample", search=True, num_branches=4),
    ])
    lines = table.strip().splitlines()
    assert len(lines) == 4  # header, separator, 2 rows
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["label", "task", "decoding", "search (K)", "tasks × samples",
                      "success [95% CI]", "pass@1", "pass@2", "mean@1", "mean@2", "turns",
                      "parse err (planner)", "parse err (tool)"]
    first = lines[2]
    lo, hi = base["success_ci95"]
    assert "atgrpo_per_role/seed=1" in first and "3 × 2" in first and "off" in first
    assert f"0.500 [{lo:.2f}, {hi:.2f}]" in first
    assert "0.667 [" in first and "0.333" in first and "3.00" in first
    assert "0.167" in first and "0.250" in first  # parse-error rates
    second = lines[3]
    assert "base\\|model" in second and "sample (T=1)" in second and "on (K=4)" in second
    assert "3 × 1" in second and second.count("–") == 2  # no pass@2 / mean@2
    assert markdown_table([]).count("\n") == 2  # header and separator only


def test_episodes_csv_rows_are_flat_and_uniform():
    rows = episodes_csv_rows(hand_episodes())
    assert len(rows) == 6
    assert rows[0] == {"task": "a", "success": 0, "num_turns": 2,
                       "planner/return": 1.0, "planner/team": 1.0, "planner/local": 0.0,
                       "planner/parse_errors": 1, "planner/actions": 2,
                       "tool/return": 2.0, "tool/team": 0.5, "tool/local": 1.5,
                       "tool/parse_errors": 1, "tool/actions": 2}
    assert rows[1]["tool/actions"] == 0 and rows[2]["success"] == 1
    assert all(list(row) == list(rows[0]) for row in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    assert len(out.getvalue().strip().splitlines()) == 7
