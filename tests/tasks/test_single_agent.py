"""The single-agent baseline of the tool -> planner tasks: the planner alone, same turn budget
and feedback, no tool role (``single_agent=True``)."""

import pytest

from pettingllms_rllib.envs import check_text_env
from pettingllms_rllib.envs.registry import make_text_env
from pettingllms_envs.plan_path import shortest_path

TASKS = [("plan_path_v0", {"grid_size": 4, "wall_prob": 0.2, "max_turns": 2}),
         ("sokoban_v0", {"max_turns": 2}), ("sudoku_v0", {"max_turns": 2})]


@pytest.mark.parametrize("env_id,config", TASKS, ids=[t[0] for t in TASKS])
def test_single_agent_mode_has_only_the_planner_and_passes_the_conformance_suite(env_id, config):
    solo = make_text_env(env_id, {**config, "single_agent": True})
    assert solo.possible_agents == ["planner"] and list(solo.workflow) == [("planner",)]
    observations, _ = solo.reset(seed=3)
    assert list(observations) == ["planner"]
    assert "no tool agent: you work alone" in observations["planner"]
    assert "not run yet" not in observations["planner"]
    check_text_env(lambda: make_text_env(env_id, {**config, "single_agent": True}))
    team = make_text_env(env_id, config)  # the default is still the two-agent team
    assert team.possible_agents == ["tool", "planner"]


def test_the_planner_alone_gets_the_same_turn_budget_and_can_solve_the_task():
    env = make_text_env("plan_path_v0", {"grid_size": 4, "wall_prob": 0.2, "max_turns": 2,
                                         "single_agent": True})
    env.reset(seed=5)
    _, rewards, terminations, truncations, infos = env.step({"planner": "Moves: "})
    assert not terminations["planner"] and not truncations["planner"]  # turn 1 of 2 used
    moves = shortest_path(env.task.grid, env.position, env.task.goal)
    _, rewards, terminations, _, infos = env.step({"planner": "Moves: " + " ".join(moves)})
    assert infos["planner"]["success"] and terminations["planner"]
    assert rewards["planner"] > 0
