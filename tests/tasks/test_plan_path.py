"""Plan-Path: conformance, instance generation, parsing, reward arithmetic and hostile input."""

import dataclasses
import math
import time

import numpy as np
import pytest
from hang_guard import parse_within_bound
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test
from reward_keywords import check_old_reward_keywords_load_as_rewards

from pettingllms_envs.common import extract_python_code
from pettingllms_envs.moves import (MAX_PARSED_MOVES, parse_move_tokens, parse_planner_answer,
                                    parse_program_output)
from pettingllms_envs.plan_path import (
    VARIANTS, GridTask, PlanPathEnv, PlanPathVariant, RewardConfig, bfs_distances,
    generate_split_task, generate_task, shortest_path, simulate_moves, task_split)
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, Prompt, check_clone_contract, check_splits_disjoint,
    check_text_env, make_text_env)

FAST = SandboxLimits(wall_time_s=2, cpu_time_s=2, memory_mb=256)
# A hand-made 4x4 instance. Shortest path from (0, 0) to (3, 3): 6 moves, e.g. R R R D D D.
GRID = ("....",
        ".##.",
        ".#..",
        "....")
TASK = GridTask(GRID, (0, 0), (3, 3))


VARIANT_FIELDS = {field.name for field in dataclasses.fields(PlanPathVariant)}


def _plan_path(**kwargs) -> PlanPathEnv:
    """A PlanPathEnv with the :class:`PlanPathVariant` fields among ``kwargs`` gathered into
    one variant: the tests below try each field alone, as no named variant does."""
    fields = {name: kwargs.pop(name) for name in list(kwargs) if name in VARIANT_FIELDS}
    return PlanPathEnv(**kwargs, variant=PlanPathVariant(**fields))


def _env(**kwargs) -> PlanPathEnv:
    env = _plan_path(grid_size=4, sandbox_limits=FAST, **kwargs)
    env.reset(seed=0, options={"task": TASK})
    return env


def _program(moves: str) -> str:
    return f"Here is my BFS.\n```python\nprint({moves!r})\n```\n"


def _solving_actions(env: PlanPathEnv, step: int) -> dict[str, str]:
    """Correct tool code and planner answers (so the clone contract runs the real sandbox)."""
    path = " ".join(shortest_path(env.task.grid, env.position, env.task.goal))
    return {"tool": _program(path), "planner": f"Moves: {path}"}


# ------------------------------------------------------------------------------ conformance
def test_pettingzoo_parallel_api():
    parallel_api_test(PlanPathEnv(sandbox_limits=FAST), num_cycles=30)


def test_text_env_conformance_suite():
    check_text_env(lambda: PlanPathEnv(grid_size=6, sandbox_limits=FAST), seeds=(0, 1, 2))


def test_clone_contract_with_real_sandbox_runs():
    env = PlanPathEnv(grid_size=6, sandbox_limits=FAST, max_turns=2)
    check_clone_contract(env, seed=5, action_fn=_solving_actions, clone_after_steps=(0, 1))


def test_registered_id_builds_the_env_and_rejects_bad_config():
    env = make_text_env("plan_path_v1", {"grid_size": 5, "sandbox_limits": {"wall_time_s": 1}})
    assert isinstance(env, PlanPathEnv) and env.sandbox_limits.wall_time_s == 1
    assert env.metadata["name"] == "plan_path_v1" and env.test_fraction == 0.2
    with pytest.raises(ValueError):
        make_text_env("plan_path_v1", {"no_such_arg": 1})


@pytest.mark.parametrize("bad", [
    {"test_fraction": 0.0}, {"test_fraction": 1.0}, {"test_fraction": "half"},
    {"test_fraction": None},
    {"grid_size": 1}, {"grid_size": 2.5}, {"grid_size": True}, {"wall_prob": 1.0},
    {"wall_prob": -0.1}, {"max_turns": 0}, {"max_moves_per_turn": 0},
    {"rewards": {"step_cost": -0.1}}, {"rewards": {"goal_bonus": float("nan")}},
    {"rewards": {"goal": 1.0}}, {"rewards": [1.0]}, {"alpha": "1"}, {"sandbox_limits": "fast"},
    {"sandbox_limits": {"bogus": 1}}, {"sandbox_limits": {"wall_time_s": 0}},
    {"code_runner": 3},
])
def test_constructor_validates_arguments(bad):
    with pytest.raises(ValueError):
        PlanPathEnv(**bad)


def test_rewards_override_only_the_coefficients_they_name():
    assert PlanPathEnv(rewards={"goal_bonus": 2.0}).reward_config == RewardConfig(goal_bonus=2.0)
    assert PlanPathEnv().reward_config == RewardConfig()
    with pytest.raises(ValueError, match=r"unknown rewards key\(s\) \['goal'\]; accepted: "
                                         r"\['step_cost', 'invalid_move_penalty'"):
        PlanPathEnv(rewards={"goal": 1.0})


def test_a_coefficient_given_as_its_own_keyword_loads_as_a_rewards_entry(caplog):
    """Env configs written before ``rewards:`` (an old checkpoint's) still load, logged; the
    same coefficient given both ways is refused."""
    check_old_reward_keywords_load_as_rewards(PlanPathEnv, RewardConfig,
                                              {"step_cost": 0.0, "goal_bonus": 2.0}, caplog)


def test_defaults_match_the_paper():
    env = PlanPathEnv()
    assert env.grid_size == 10 and env.wall_prob == 0.22 and env.max_turns == 3
    assert env.max_moves_per_turn == 40 and env.workflow == [("tool",), ("planner",)]
    assert env.sandbox_limits.wall_time_s == 3 and env.sandbox_limits.memory_mb == 256


# ------------------------------------------------------------------------------ instances
def test_seeds_reproduce_identical_instances():
    tasks = []
    for seed in range(20):
        first, second = PlanPathEnv(), PlanPathEnv()
        obs_a, _ = first.reset(seed=seed)
        obs_b, _ = second.reset(seed=seed)
        assert first.task == second.task and obs_a == obs_b
        tasks.append(first.task)
    assert len(set(tasks)) == len(tasks)


SMALL_OPEN = {"grid_size": 4, "wall_prob": 0.0, "max_turns": 6, "max_moves_per_turn": 1,
              "variant": PlanPathVariant(prompt_style="compact", goal_off_axis=True)}


def test_evaluation_seeds_never_produce_a_training_instance():
    # 144 off-axis instances on a 4x4 open grid: without the split most would be shared.
    check_splits_disjoint(lambda: make_text_env("plan_path_v1", SMALL_OPEN))
    env = PlanPathEnv(**SMALL_OPEN, test_fraction=0.5)
    train, test = set(), set()
    for seed in range(300):
        env.reset(seed=seed)
        train.add(env.task)
        env.reset(seed=TRAIN_SEED_LIMIT + seed)
        test.add(env.task)
    assert not train & test
    assert {task_split(t, 0.5) for t in train} == {"train"}
    assert {task_split(t, 0.5) for t in test} == {"test"}
    assert len(train | test) == 144


def test_the_split_is_stable_near_its_fraction_and_a_larger_fraction_only_adds_test_instances():
    rng = np.random.default_rng(0)
    tasks = {generate_task(rng, 6, 0.2) for _ in range(2000)}
    splits = {t: task_split(t, 0.2) for t in tasks}
    assert 0.16 < list(splits.values()).count("test") / len(tasks) < 0.24
    assert all(task_split(t, 0.5) == "test" for t, s in splits.items() if s == "test")


def test_a_split_with_no_instance_left_fails_clearly():
    with pytest.raises(RuntimeError, match="no test instance in 5 draws"):
        generate_split_task(np.random.default_rng(0), 2, 0.0, split="test",
                            test_fraction=1e-12, max_draws=5)


def test_plan_path_v0_keeps_its_unsplit_instances_for_reproducing_old_results():
    v0 = make_text_env("plan_path_v0", SMALL_OPEN)
    assert v0.metadata["name"] == "plan_path_v0" and v0.test_fraction is None
    for seed in (0, 7, TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 3):
        v0.reset(seed=seed)
        assert v0.task == generate_task(np.random.default_rng(seed), 4, 0.0, goal_off_axis=True)
    with pytest.raises(AssertionError, match="52 of the first 64 evaluation instances"):
        check_splits_disjoint(lambda: make_text_env("plan_path_v0", SMALL_OPEN))
    with pytest.raises(ValueError, match="no test_fraction"):
        make_text_env("plan_path_v0", {"test_fraction": 0.3})


@pytest.mark.parametrize("size", [2, 3, 5, 10, 16])
@pytest.mark.parametrize("wall_prob", [0.0, 0.22, 0.5, 0.8, 0.97])
def test_every_generated_grid_has_a_path(size, wall_prob):
    for seed in range(40):
        task = generate_task(np.random.default_rng(seed), size, wall_prob)
        assert task.size == size and all(len(row) == size for row in task.grid)
        assert task.start != task.goal
        assert task.grid[task.start[0]][task.start[1]] == "."
        assert task.grid[task.goal[0]][task.goal[1]] == "."
        path = shortest_path(task.grid, task.start, task.goal)
        assert path is not None and len(path) == bfs_distances(task.grid, task.goal)[task.start]


def test_bfs_and_shortest_path_on_a_known_grid():
    dist = bfs_distances(GRID, (3, 3))
    assert dist[(0, 0)] == 6 and dist[(3, 3)] == 0 and (1, 1) not in dist
    assert shortest_path(GRID, (0, 0), (3, 3)) == ["D", "D", "D", "R", "R", "R"]
    assert shortest_path(GRID, (2, 2), (2, 2)) == []
    assert shortest_path(("..", "##"), (0, 0), (1, 0)) is None


# ------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text, moves", [
    ("Moves: R D", "RD"), ("moves: up, LEFT,down", "ULD"), ("MOVES : [R, D, 'L']", "RDL"),
    ("**Moves:** R D", "RD"), ("Moves: RRD", "RRD"), ("Moves: right; right", "RR"),
    ("Moves: U\nthinking...\nFinal answer. Moves: D D", "DD"), ("Moves: R D.", "RD"),
])
def test_planner_answers_that_parse(text, moves):
    assert parse_planner_answer(text) == ParseResult(value=tuple(moves))


@pytest.mark.parametrize("text", [
    "", "go right then down", "Moves:", "Moves: ", "Moves: R X", "Moves: north",
    "Moves taken so far: R", "Moves: R D\nMoves: nope",
])
def test_planner_answers_that_do_not_parse(text):
    result = parse_planner_answer(text)
    assert not result.ok and result.value is None and result.error


def test_code_extraction_takes_the_last_complete_python_block():
    text = ("```python\nprint('first')\n```\n```text\nnot code\n```\n"
            "```py\nprint('second')\n```\n```python\nprint('unclosed')\n")
    assert extract_python_code(text).value == "print('second')"
    assert extract_python_code("```python3\nx = 1\n```").value == "x = 1"
    assert not extract_python_code("print('R')").ok
    assert not extract_python_code("```python\n\n```").ok
    assert not extract_python_code("```bash\nls\n```").ok


@pytest.mark.parametrize("stdout, moves", [
    ("R D\n", "RD"), ("['R', 'D']\n", "RD"), ("R\nD\n", "RD"), ("BFS done\nMoves: L", "L"),
    ("up down", "UD"),
])
def test_program_output_that_parses(stdout, moves):
    assert parse_program_output(stdout).value == tuple(moves)


@pytest.mark.parametrize("stdout", ["", "  \n", "path found\nR D", "None", "[]"])
def test_program_output_that_does_not_parse(stdout):
    assert not parse_program_output(stdout).ok


# ------------------------------------------------------------------------------ rewards
def test_known_optimal_solve_gets_goal_and_optimal_bonus():
    env = _env()
    env.step({"tool": "no code here"})
    _, rewards, terms, truncs, infos = env.step({"planner": "Moves: R R R D D D"})
    shaped = 6 * (-0.05 + 0.1)
    assert infos["planner"]["reward_local"] == pytest.approx(shaped + 1.0 + 0.5)
    assert infos["planner"]["reward_team"] == 1.0 and infos["planner"]["success"]
    assert rewards["planner"] == pytest.approx(1.0 + shaped + 1.5)
    assert all(terms.values()) and not any(truncs.values()) and env.agents == []
    assert "shortest path" in infos["planner"]["feedback"]


def test_a_longer_solve_gets_the_goal_bonus_only():
    env = _env()
    env.step({"tool": ""})
    env.step({"planner": "Moves: R L"})  # 2 valid moves that cancel out
    env.step({"tool": ""})
    _, rewards, terms, _, infos = env.step({"planner": "Moves: D D D R R R"})
    assert infos["planner"]["reward_local"] == pytest.approx(6 * (-0.05 + 0.1) + 1.0)
    assert all(terms.values()) and env.moves_taken == list("RLDDDRRR")


def test_invalid_move_is_penalised_does_not_move_and_stops_the_answer():
    env = _env()
    env.step({"tool": ""})
    _, rewards, terms, _, infos = env.step({"planner": "Moves: R D R R"})  # (1, 1) is a wall
    assert env.position == (0, 1) and env.moves_taken == ["R"]
    assert infos["planner"]["reward_local"] == pytest.approx((-0.05 + 0.1) + (-0.05 - 0.2))
    assert "wall" in infos["planner"]["feedback"] and not any(terms.values())
    env.step({"tool": ""})
    _, _, _, _, infos = env.step({"planner": "Moves: U"})
    assert env.position == (0, 1) and "off the grid" in infos["planner"]["feedback"]
    assert infos["planner"]["reward_local"] == pytest.approx(-0.25)


def test_garbage_answer_is_a_flagged_parse_error_with_the_penalty():
    env = _env(invalid_action_penalty=-2.0)
    env.step({"tool": ""})
    _, rewards, _, _, infos = env.step({"planner": "I would go right, then down."})
    assert infos["planner"]["parse_error"] and rewards["planner"] == -2.0
    assert env.position == (0, 0) and env.moves_taken == []


def test_moves_beyond_the_per_turn_cap_are_ignored():
    env = _env(max_moves_per_turn=2)
    env.step({"tool": ""})
    _, _, _, _, infos = env.step({"planner": "Moves: D D D R R R"})
    assert env.position == (2, 0) and "4 move(s) ignored" in infos["planner"]["feedback"]


def test_episode_truncates_after_max_turns():
    env = _env(max_turns=1)
    env.step({"tool": ""})
    _, _, terms, truncs, infos = env.step({"planner": "Moves: D"})
    assert all(truncs.values()) and not any(terms.values()) and not infos["planner"]["success"]


# ------------------------------------------------------------------------------ the tool
def test_tool_code_printing_the_right_moves_scores_as_the_planner_would():
    env = _env()
    obs, rewards, _, _, infos = env.step({"tool": _program("D D D R R R")})
    assert infos["tool"]["parse_error"] is None and env.position == (0, 0)  # simulated only
    tool_local = infos["tool"]["reward_local"]
    assert tool_local == pytest.approx(6 * 0.05 + 1.5) and rewards["tool"] == tool_local
    assert "D D D R R R" in env._observe("planner")  # the planner sees the program's output
    _, _, _, _, infos = env.step({"planner": "Moves: D D D R R R"})
    assert infos["planner"]["reward_local"] == pytest.approx(tool_local)


@pytest.mark.parametrize("response, reason", [
    ("I'd use BFS.", "no program"),
    ("```python\nraise SystemExit(3)\n```", "exit code 3"),
    ("```python\n1/0\n```", "ZeroDivisionError"),
    ("```python\nprint('the path is long')\n```", "not a move list"),
    ("```python\npass\n```", "not a move list"),
])
def test_tool_failures_get_the_penalty_and_are_reported_to_the_planner(response, reason):
    env = _env()
    obs, rewards, _, _, infos = env.step({"tool": response})
    assert rewards["tool"] == env.invalid_action_penalty
    assert reason.lower() in obs["planner"].lower()


def test_tool_infinite_loop_is_a_failure_not_a_hang():
    env = PlanPathEnv(grid_size=4, sandbox_limits=SandboxLimits(wall_time_s=1, cpu_time_s=5))
    env.reset(seed=0, options={"task": TASK})
    started = time.monotonic()
    obs, rewards, _, _, infos = env.step({"tool": "```python\nwhile True:\n    pass\n```"})
    assert time.monotonic() - started < 30  # killed by the 1 s wall limit, not hung
    assert rewards["tool"] == env.invalid_action_penalty and "timed out" in infos["tool"]["feedback"]
    assert "timed out" in obs["planner"]


def test_code_runner_exceptions_are_contained():
    def broken(code):
        raise RuntimeError("executor down")

    env = _env(code_runner=broken)
    _, rewards, _, _, infos = env.step({"tool": _program("R")})
    assert rewards["tool"] == env.invalid_action_penalty and "RuntimeError" in infos["tool"]["feedback"]


# ------------------------------------------------------------------------------ prompts
def test_current_position_appears_in_every_prompt():
    env = PlanPathEnv(grid_size=6, sandbox_limits=FAST, max_turns=3)
    obs, _ = env.reset(seed=11)
    answers = iter(["Moves: U", "Moves: L L", "Moves: D R", "Moves: R"])
    while True:
        for agent, text in obs.items():
            row, col = env.position
            assert f"Current position: ({row}, {col})" in text, agent
            grid_lines = [line for line in text.splitlines() if len(line) == 6 and "A" in line]
            assert len(grid_lines) == 1 and grid_lines[0][col] == "A"
            assert f"Goal: {env.task.goal}" in text and "You are the" in text
        if not env.agents:
            break
        agent = env.acting_agents()[0]
        action = _program("R") if agent == "tool" else next(answers)
        obs, *_ = env.step({agent: action})


# ------------------------------------------------------------------------------ hostile input
_PIECES = ["```python\n", "```py\n", "```", "```\n", "\n", "Moves:", "moves :", "R", "d", "up",
           "LEFT", ",", " ", "print('R D')", "while True: pass", "\x00", "\ufffd", "é", "🙂",
           "\r\n", "[", "]", "'", "**", "MOVES: ", "x" * 50, "```python\nprint('U')\n```"]
_hostile = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    st.tuples(st.text(max_size=12), st.integers(50, 1000)).map(lambda p: p[0] * p[1]),
    st.sampled_from(["", " ", "\n" * 1000, "```" * 2000, "Moves:" * 3000, "Moves: " + "R " * 20000,
                     "```python\n" * 500 + "print(1)\n" + "```\n" * 500]),
)


@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_hostile)
def test_parsers_never_raise_on_hostile_text(text):
    for parser in (parse_planner_answer, parse_move_tokens, parse_program_output,
                   extract_python_code):
        result = parser(text)
        assert isinstance(result, ParseResult) and (result.ok == (result.error is None))
    moves = parse_planner_answer(text)
    if moves.ok:
        assert moves.value and set(moves.value) <= set("UDLR")


_NO_LABEL, _NO_CODE, _TOO_MANY = ("no 'Moves:' line", "no complete ```python code block",
                                  f"more than {MAX_PARSED_MOVES} moves")


@pytest.mark.parametrize("text,answer,program_output,code", [
    ("x" * 5_000_000, _NO_LABEL, 'not a move: "xxxx', _NO_CODE),
    ("Moves: " + "R" * 5_000_000, 'not a move: "RRRR', 'not a move: "RRRR', _NO_CODE),
    ("Moves: " + "R " * 2_000_000, _TOO_MANY, _TOO_MANY, _NO_CODE),
    ("```python\n" * 500_000, _NO_LABEL, 'not a move: "python"', _NO_CODE),
    ("moves:" * 800_000, "no moves given", "no moves given", _NO_CODE),
    # five megabytes of junk, then a real answer (the program output's last line): found
    ("x" * 5_000_000 + "\nMoves: R D R\n", ParseResult(value=("R", "D", "R")),
     ParseResult(value=("R", "D", "R")), _NO_CODE),
], ids=["x", "long_word", "spaced_moves", "fences", "labels", "junk_then_answer"])
def test_parsers_handle_megabytes_of_text(text, answer, program_output, code):
    for parser, expected in ((parse_planner_answer, answer), (parse_program_output, program_output),
                             (extract_python_code, code)):
        result = parse_within_bound(parser, text, expected)
        if not result.ok:
            assert len(result.error) < 200  # the megabyte word is cut in the message


def _echo_runner(code: str) -> SandboxResult:
    """Stand-in for the sandbox: the program 'prints' its own source, so hostile text also
    reaches the program-output parser, without paying an interpreter start per example."""
    return SandboxResult(stdout=code, stderr="", exit_code=0, timed_out=False,
                         killed_by_signal=None, output_truncated=False, network_isolated=True,
                         wall_time_s=0.0)


_HOSTILE_ENV = PlanPathEnv(grid_size=5, sandbox_limits=FAST, code_runner=_echo_runner)


@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_hostile)
def test_env_step_never_raises_on_hostile_text(text):
    env = _HOSTILE_ENV
    env.reset(seed=3)
    for agent in ("tool", "planner"):  # the same text to both roles: half the generation cost
        obs, rewards, terms, truncs, infos = env.step({agent: text})
        assert math.isfinite(rewards[agent])
        for observation in obs.values():
            assert env.observation_space(agent).contains(observation)
        if not env.agents:
            break


def test_compact_prompt_keeps_the_current_state_and_answer_format():
    env = _plan_path(grid_size=3, wall_prob=0.0, prompt_style="compact")
    obs, _ = env.reset(seed=0)
    assert f"A is at {env.position}" in obs["planner"] and "Moves: R D" in obs["planner"]
    assert "```python" in obs["tool"]
    with pytest.raises(ValueError, match="accepted: \\('full', 'compact'\\)"):
        PlanPathVariant(prompt_style="tiny")


def test_offsets_state_where_the_goal_lies_when_asked():
    from pettingllms_envs.plan_path import offset_text

    assert offset_text((0, 0), (2, 1)) == "G is 2 rows down and 1 column right of A."
    assert offset_text((2, 2), (1, 2)) == "G is 1 row up of A."
    env = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style="compact",
                      show_offsets=True)
    observations, _ = env.reset(seed=0, options={"task": TASK})
    assert all("G is 3 rows down and 3 columns right of A." in text
               for text in observations.values())
    plain, _ = _env(prompt_style="compact").reset(seed=0, options={"task": TASK})
    assert "G is 3 rows" not in plain["planner"]
    with pytest.raises(ValueError, match="show_offsets"):
        PlanPathVariant(show_offsets="yes")


def test_a_placeholder_example_shows_the_format_and_cannot_be_played():
    env = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style="compact",
                      placeholder_example=True)
    observations, _ = env.reset(seed=0, options={"task": TASK})
    assert "Moves: <moves>" in observations["planner"]
    assert "print('<moves>')" in observations["tool"]
    _, _, _, _, infos = env.step({"tool": env.prompt_examples()["tool"]})
    _, _, _, _, infos = env.step({"planner": env.prompt_examples()["planner"]})
    assert infos["planner"]["parse_error"] and not infos["planner"]["success"]


def test_with_one_move_per_turn_the_placeholder_names_the_letters_and_cannot_be_played():
    env = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style="compact",
                      placeholder_example=True, max_moves_per_turn=1)
    observations, _ = env.reset(seed=0, options={"task": TASK})
    assert "Moves: <U, D, L or R>" in observations["planner"]
    _, _, _, _, infos = env.step({"tool": env.prompt_examples()["tool"]})
    assert "not a move list" in infos["tool"]["feedback"]
    assert infos["tool"]["reward_local"] == env.invalid_action_penalty
    _, _, _, _, infos = env.step({"planner": env.prompt_examples()["planner"]})
    assert infos["planner"]["parse_error"] and not infos["planner"]["success"]


def _planner_example(env) -> str:
    return env.prompt_examples()["planner"]


def test_offset_letters_name_the_move_of_each_offset_and_need_the_offsets():
    from pettingllms_envs.plan_path import offset_text

    assert offset_text((0, 3), (2, 1), letters=True) == (
        "G is 2 rows down (D) and 2 columns left (L) of A.")
    assert offset_text((2, 2), (1, 2), letters=True) == "G is 1 row up (U) of A."
    env = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style="compact",
                      show_offsets=True, offset_letters=True)
    observations, _ = env.reset(seed=0, options={"task": TASK})
    assert "3 rows down (D) and 3 columns right (R)" in observations["planner"]
    with pytest.raises(ValueError, match="offset_letters.*show_offsets"):
        PlanPathVariant(offset_letters=True)


@pytest.mark.parametrize("prompt_style", ["compact", "full"])
def test_offsets_for_the_tool_only_reach_the_planner_only_through_the_tool(prompt_style):
    env = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style=prompt_style,
                      show_offsets=True, offset_letters=True, offsets_for_tool_only=True)
    observations, _ = env.reset(seed=0, options={"task": TASK})
    offsets = "3 rows down (D) and 3 columns right (R)"
    assert offsets in observations["tool"] and offsets not in observations["planner"]
    assert str(TASK.goal) in observations["planner"]  # the coordinates are still there
    solo = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style=prompt_style,
                       show_offsets=True, offsets_for_tool_only=True, single_agent=True)
    alone, _ = solo.reset(seed=0, options={"task": TASK})
    assert "rows down" not in alone["planner"]
    with pytest.raises(ValueError, match="offsets_for_tool_only.*show_offsets"):
        PlanPathVariant(offsets_for_tool_only=True)


def test_goal_off_axis_instances_need_two_directions_so_no_repeated_letter_solves_one():
    for seed in range(200):
        env = _plan_path(grid_size=4, wall_prob=0.0, sandbox_limits=FAST, max_turns=6,
                          max_moves_per_turn=1, goal_off_axis=True)
        env.reset(seed=seed)
        start, goal = env.task.start, env.task.goal
        assert start[0] != goal[0] and start[1] != goal[1], seed
        for letter in "UDLR":  # the whole episode's six moves at once, one letter repeated
            assert not simulate_moves(env.task.grid, start, goal, [letter] * 6,
                                      distances=env.distances, rewards=env.reward_config,
                                      moves_before=0, optimal_length=env.optimal_length,
                                      max_moves=6).solved
        played = env.clone()
        for _ in range(6):
            played.step({"tool": "no program"})
            _, _, _, _, infos = played.step({"planner": "Moves: U"})
            assert not infos["planner"]["success"]


def test_goal_off_axis_leaves_the_default_instances_unchanged():
    # Drawn by the generator before goal_off_axis existed (commit 787ea36), seeds 0-2.
    before = {0: (("..##", "....", "...#", ".#.#"), (3, 0), (0, 0)),
              1: (("..#.", "....", ".#..", "...."), (0, 1), (3, 2)),
              2: (("...#", "..##", "...#", "...."), (3, 2), (3, 3))}
    for seed, instance in before.items():
        task = generate_task(np.random.default_rng(seed), 4, 0.22)
        assert (task.grid, task.start, task.goal) == instance
    with pytest.raises(ValueError, match="goal_off_axis"):
        PlanPathVariant(goal_off_axis="yes")


@pytest.mark.parametrize("prompt_style, tool_prefix", [("compact", "```python\nprint('"),
                                                       ("full", "```python\n")])
def test_prefill_answers_starts_each_answer_and_the_env_reads_the_whole_answer(
        prompt_style, tool_prefix):
    env = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style=prompt_style,
                      max_moves_per_turn=1, prefill_answers=True, code_runner=_echo_runner)
    observations, _ = env.reset(seed=0, options={"task": TASK})
    assert isinstance(observations["tool"], Prompt)
    assert observations["tool"].answer_prefix == tool_prefix
    assert observations["planner"].answer_prefix == "Moves:"
    env.step({"tool": tool_prefix + "D')\n```"})
    env.step({"planner": "Moves:" + " D"})  # the prefix plus what the model wrote
    assert env.position == (1, 0)
    plain, _ = _plan_path(grid_size=4, sandbox_limits=FAST, prompt_style=prompt_style,
                           max_moves_per_turn=1).reset(seed=0, options={"task": TASK})
    assert all(type(text) is str for text in plain.values())
    assert plain == observations  # the same prompt text, with or without the prefixes
    with pytest.raises(ValueError, match="prefill_answers"):
        PlanPathVariant(prefill_answers="yes")


# ------------------------------------------------------------------------------ the tool helper
def _helper_env(**kwargs) -> PlanPathEnv:
    settings = dict(grid_size=4, wall_prob=0.0, sandbox_limits=FAST, prompt_style="compact",
                    max_moves_per_turn=1, tool_helper=True, prefill_answers=True)
    return _plan_path(**{**settings, **kwargs})


def _tool_prefix(env: PlanPathEnv) -> str:
    return env.answer_prefix("tool")


def test_the_tool_helper_turns_two_positions_into_the_open_grid_move_list():
    from pettingllms_envs.plan_path import TOOL_HELPER_SOURCE

    namespace = {}
    exec(TOOL_HELPER_SOURCE, namespace)  # the trusted helper itself, not model code
    moves = namespace["moves"]
    assert moves((3, 3), (0, 1)) == "U U U L L"
    assert moves((1, 0), (3, 3)) == "D D R R R"
    assert moves((2, 2), (2, 2)) == ""
    open_grid = ("....",) * 4
    for a, g in (((3, 3), (0, 1)), ((0, 2), (3, 0)), ((1, 1), (1, 3))):
        played = simulate_moves(open_grid, a, g, moves(a, g).split(),
                                distances=bfs_distances(open_grid, g), rewards=RewardConfig(),
                                moves_before=0, optimal_length=bfs_distances(open_grid, g)[a])
        assert played.reached_goal and played.optimal


def test_with_the_tool_helper_the_tool_only_reads_the_positions_and_its_call_runs_in_the_sandbox():
    env = _helper_env()
    observations, _ = env.reset(seed=0, options={"task": GridTask(("....",) * 4, (1, 0), (3, 3))})
    tool = observations["tool"]
    assert tool.answer_prefix == "```python\nprint(moves(a=("
    assert "moves(a, g) prints the moves from position a to position g." in tool
    assert "print(moves(a=<position of A>, g=<position of G>))" in tool
    # The model continues the prefix; the env runs the whole answer after the helper.
    _, rewards, _, _, _ = env.step({"tool": tool.answer_prefix + "1, 0), g=(3, 3)))\n```"})
    assert env.tool_moves == ("D", "D", "R", "R", "R")
    assert "The program printed:\n```\nD D R R R\n```" in env.tool_report
    assert rewards["tool"] > 0  # a move towards the goal, as the planner would score it
    wrong = _helper_env()
    wrong.reset(seed=0, options={"task": GridTask(("....",) * 4, (1, 0), (3, 3))})
    wrong.step({"tool": tool.answer_prefix + "3, 3), g=(1, 0)))\n```"})  # A and G swapped
    assert wrong.tool_moves == ("U", "U", "L", "L", "L")


def test_a_copied_helper_placeholder_does_not_run():
    env = _helper_env()
    env.reset(seed=0, options={"task": TASK})
    env.step({"tool": env.prompt_examples()["tool"]})
    assert env.tool_moves is None and "SyntaxError" in env.tool_report


def test_shuffled_positions_keep_both_labels_and_vary_their_order_per_state_only():
    def first_named(seed):
        env = _helper_env(shuffle_positions=True)
        observations, _ = env.reset(seed=seed)
        line = next(l for l in observations["tool"].splitlines() if " is at " in l)
        assert f"A is at {env.position}" in line and f"G is at {env.task.goal}" in line
        again, _ = env.clone().reset(seed=seed)
        assert again == observations
        return line[0]

    assert {first_named(seed) for seed in range(20)} == {"A", "G"}
    plain, _ = _helper_env().reset(seed=0, options={"task": TASK})
    assert "A is at (0, 0), G is at (3, 3)." in plain["tool"]


def test_the_tool_output_example_shows_the_planner_what_the_tool_printed():
    task = GridTask(("....",) * 4, (1, 0), (3, 3))
    env = _helper_env(tool_output_example=True, placeholder_example=True)
    observations, _ = env.reset(seed=0, options={"task": task})
    assert "Moves: <U, D, L or R>" in observations["planner"]  # no tool output yet
    observations, *_ = env.step({"tool": _tool_prefix(env) + "1, 0), g=(3, 0)))\n```"})
    assert "The tool printed: D D" in observations["planner"]
    assert "Answer with one line: Moves: D D" in observations["planner"]
    assert env.prompt_examples()["planner"] == "Moves: D D"
    env.step({"planner": "Moves: D"})
    observations, *_ = env.step({"tool": "no program"})
    assert env.tool_moves is None and "Moves: <U, D, L or R>" in observations["planner"]



@pytest.mark.parametrize("option", ["tool_helper", "shuffle_positions", "tool_output_example"])
def test_the_compact_prompt_options_refuse_the_full_prompt(option):
    with pytest.raises(ValueError, match=f"{option}.*compact"):
        _plan_path(prompt_style="full", **{option: True})
    with pytest.raises(ValueError, match=option):
        _plan_path(prompt_style="compact", **{option: "yes"})


# ------------------------------------------------------------------------------ named variants
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_named_variant_builds_from_its_name_and_passes_the_env_checks(name):
    env = make_text_env("plan_path_v1", {"grid_size": 4, "wall_prob": 0.0, "variant": name,
                                         "sandbox_limits": {"wall_time_s": 2}})
    assert env.variant == VARIANTS[name]
    assert env.prompt_style == VARIANTS[name].prompt_style
    assert env.prefill_answers == VARIANTS[name].prefill_answers
    check_text_env(lambda: make_text_env("plan_path_v1", {"grid_size": 4, "variant": name}),
                   seeds=(0, 1))


def test_an_unknown_variant_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown Plan-Path variant 'helper'.*tool_helper"):
        make_text_env("plan_path_v1", {"variant": "helper"})


def test_an_env_config_from_before_the_names_loads_as_the_variant_its_flags_spell(caplog):
    """An old checkpoint's env config: its flags are exactly one named variant, or refused."""
    old = {"grid_size": 4, "prompt_style": "compact", "placeholder_example": True,
           "goal_off_axis": True, "prefill_answers": True, "tool_helper": True,
           "shuffle_positions": True, "tool_output_example": True}
    with caplog.at_level("WARNING", logger="pettingllms_envs.plan_path"):
        env = make_text_env("plan_path_v1", old)
    assert env.variant == VARIANTS["tool_helper"]
    assert "this is variant='tool_helper'" in caplog.text
    assert make_text_env("plan_path_v1", {"prompt_style": "full"}).variant == VARIANTS["paper"]
    with pytest.raises(ValueError, match="no shipped Plan-Path variant.*'one_move'"):
        make_text_env("plan_path_v1", {"prompt_style": "compact", "show_offsets": True})
    with pytest.raises(ValueError, match="exclude each other"):
        make_text_env("plan_path_v1", {"variant": "prefill", "show_offsets": True})
    with pytest.raises(ValueError, match="random_example"):  # the retired pilot
        make_text_env("plan_path_v1", {"random_example": True})
