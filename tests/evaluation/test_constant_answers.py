"""The best constant answer: one fixed response per role, searched over what the team said."""

import pytest

from pettingllms_rllib.envs import make_text_env
from pettingllms_rllib.evaluation.constant_answers import (best_constant_answer,
                                                           play_constant_team)
from pettingllms_rllib.reporting import constant_table


ENV = "plan_path_v1"
CONFIG = {"grid_size": 3, "wall_prob": 0.0, "max_turns": 2, "variant": "compact"}
SEEDS = list(range(1_000_000_000, 1_000_000_000 + 32))
NO_PROGRAM = "no code"


def test_playing_a_constant_team_counts_the_instances_it_solves():
    env = make_text_env(ENV, CONFIG)
    every_move = play_constant_team(env, SEEDS, {"tool": NO_PROGRAM,
                                                 "planner": "Moves: R R D D L L U U"})
    nothing = play_constant_team(env, SEEDS, {"tool": NO_PROGRAM, "planner": "no moves"})
    assert nothing == 0 and 0 < every_move <= len(SEEDS)


def test_the_search_keeps_the_best_response_of_each_role():
    responses = {"planner": ["no moves"] * 5 + ["Moves: L"] * 3 + ["Moves: R D"],
                 "tool": [NO_PROGRAM] * 2}
    result = best_constant_answer(ENV, CONFIG, SEEDS, responses)
    env = make_text_env(ENV, CONFIG)
    for candidate in ("no moves", "Moves: L", "Moves: R D"):
        assert result.num_successes >= play_constant_team(
            env, SEEDS, {"tool": NO_PROGRAM, "planner": candidate})
    assert result.num_successes == play_constant_team(env, SEEDS, result.answers)
    assert result.success_rate == pytest.approx(result.num_successes / len(SEEDS))
    assert result.num_candidates["planner"] >= 3  # the responses plus the prompts' examples


def test_the_report_shows_the_best_constant_over_records_of_one_task():
    def record(rate, answer):
        return {"task": ENV, "env_config": CONFIG, "eval_seeds": SEEDS,
                "best_constant_answer": {"answers": {"planner": answer}, "success_rate": rate,
                                         "num_successes": int(rate * 32), "num_tasks": 32}}
    table = constant_table([record(0.125, "Moves: R D"), record(0.25, "Moves: D D"),
                            {"task": ENV, "summary": {}}])
    assert "0.250 (8/32)" in table and "Moves: D D" in table and "0.125" not in table
    assert constant_table([{"task": ENV}]) == ""
