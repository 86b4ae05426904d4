"""The single-agent baseline (``single_agent=True``; arXiv 2510.11062, Table 1): one role does
the whole task with the same turn budget and the same kind of feedback, and no other role.

Tool -> planner tasks: the planner alone. Math: the reasoner alone, checking its boxed answer
with its own program. Code: the coder alone, writing its own tests."""

import pytest

from pettingllms_rllib.envs import check_text_env
from pettingllms_rllib.envs.registry import make_text_env
from pettingllms_envs.math import MathVariant
from pettingllms_envs.plan_path import shortest_path

TASKS = [("plan_path_v1", {"grid_size": 4, "wall_prob": 0.2, "max_turns": 2}),
         ("sokoban_v0", {"max_turns": 2}), ("sudoku_v0", {"max_turns": 2})]
FAST = {"wall_time_s": 3, "cpu_time_s": 3, "memory_mb": 256}
MATH = {"max_turns": 2, "sandbox_limits": FAST}
CODE = {"dataset": "generated", "max_turns": 2, "sandbox_limits": FAST}
# (env id, config, the one agent left alone, the team's agents)
SOLOS = [("math_v0", MATH, "reasoner", ["reasoner", "tool"]),
         ("code_v0", CODE, "coder", ["coder", "tester"])]


def _style(env_id: str, style: str) -> dict:
    """The env config that picks ``style`` (math names it in a variant, with a boxed answer)."""
    if env_id == "math_v0":
        return {"variant": MathVariant(prompt_style=style)}
    return {"prompt_style": style}


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
    env = make_text_env("plan_path_v1", {"grid_size": 4, "wall_prob": 0.2, "max_turns": 2,
                                         "single_agent": True})
    env.reset(seed=5)
    _, rewards, terminations, truncations, infos = env.step({"planner": "Moves: "})
    assert not terminations["planner"] and not truncations["planner"]  # turn 1 of 2 used
    moves = shortest_path(env.task.grid, env.position, env.task.goal)
    _, rewards, terminations, _, infos = env.step({"planner": "Moves: " + " ".join(moves)})
    assert infos["planner"]["success"] and terminations["planner"]
    assert rewards["planner"] > 0


# ------------------------------------------------------------------------------ math and code
@pytest.mark.parametrize("env_id,config,agent,team_agents", SOLOS, ids=[s[0] for s in SOLOS])
def test_single_agent_mode_has_only_one_agent_and_passes_the_conformance_suite(
        env_id, config, agent, team_agents):
    solo = make_text_env(env_id, {**config, "single_agent": True})
    assert solo.possible_agents == [agent] and list(solo.workflow) == [(agent,)]
    observations, _ = solo.reset(seed=3)
    assert list(observations) == [agent]
    check_text_env(lambda: make_text_env(env_id, {**config, "single_agent": True}))


@pytest.mark.parametrize("style", ["full", "compact"])
@pytest.mark.parametrize("env_id,config,agent,team_agents", SOLOS, ids=[s[0] for s in SOLOS])
def test_the_prompt_says_the_agent_works_alone(env_id, config, agent, team_agents, style):
    solo = make_text_env(env_id, {**config, "single_agent": True, **_style(env_id, style)})
    observations, _ = solo.reset(seed=3)
    assert "You work alone" in observations[agent]


@pytest.mark.parametrize("env_id,config,agent,team_agents", SOLOS, ids=[s[0] for s in SOLOS])
def test_team_mode_is_still_the_default(env_id, config, agent, team_agents):
    team = make_text_env(env_id, config)
    assert team.possible_agents == team_agents and list(team.workflow) == [tuple(team_agents)]
    observations, _ = team.reset(seed=3)
    assert list(observations) == team_agents
    assert all("You work alone" not in text for text in observations.values())


# ------------------------------------------------------------------------------ math alone
#: How the full and the compact prompt introduce its own answer and its program's answer.
MATH_LABELS = {"full": ("Your latest answer: ", "What your latest program printed: "),
               "compact": ("Your answer: ", "Your program: ")}


def _math(**config):
    env = make_text_env("math_v0", {**MATH, **config, "single_agent": True})
    env.reset(seed=4)
    return env


def _boxed(answer: str) -> str:
    return f"So the answer is \\boxed{{{answer}}}."


def _program(printed: str) -> str:
    return f"Let me check it.\n```python\nprint({printed!r})\n```\n"


def test_math_a_correct_boxed_answer_with_an_agreeing_program_ends_with_success():
    env = _math()
    answer = env.problem.answer
    _, rewards, terminations, truncations, infos = env.step(
        {"reasoner": _boxed(answer) + "\n" + _program(answer)})
    info = infos["reasoner"]
    assert terminations["reasoner"] and not truncations["reasoner"] and env.agents == []
    assert info["success"] and info["reward_team"] == 1.0 and info["reward_local"] == 1.0
    assert rewards["reasoner"] == 2.0 and "its program agrees" in info["feedback"]


def test_math_a_boxed_answer_without_a_program_runs_to_max_turns_and_is_truncated():
    env = _math()
    reply = {"reasoner": _boxed(env.problem.answer)}
    _, _, terminations, truncations, infos = env.step(reply)
    assert infos["reasoner"]["success"]  # correct, but nothing to agree with
    assert not terminations["reasoner"] and not truncations["reasoner"]
    _, _, terminations, truncations, _ = env.step(reply)
    assert not terminations["reasoner"] and truncations["reasoner"] and env.agents == []


@pytest.mark.parametrize("style", ["full", "compact"])
def test_math_what_the_program_printed_appears_in_the_next_prompt(style):
    env = _math(variant=MathVariant(prompt_style=style))
    observations, _, terminations, _, _ = env.step(
        {"reasoner": _boxed(env.problem.answer) + "\n" + _program("12345")})
    assert not terminations["reasoner"]  # the program disagrees with the box
    own, program = MATH_LABELS[style]
    assert f'{own}"{env.problem.answer}"' in observations["reasoner"]
    assert program + '"12345"' in observations["reasoner"]


def test_math_without_a_program_the_next_prompt_says_so():
    env = _math()
    observations, *_ = env.step({"reasoner": _boxed(env.problem.answer)})
    assert "What your latest program printed: (no program)" in observations["reasoner"]


def test_math_a_program_without_a_box_is_a_parse_error_with_the_penalty():
    env = _math(invalid_action_penalty=-2.0)
    observations, rewards, terminations, _, infos = env.step(
        {"reasoner": _program(env.problem.answer)})
    assert infos["reasoner"]["parse_error"] and rewards["reasoner"] == -2.0
    assert not infos["reasoner"]["success"] and not terminations["reasoner"]
    # The printout is still feedback.
    assert f'What your latest program printed: "{env.problem.answer}"' in observations["reasoner"]


# ------------------------------------------------------------------------------ code alone
def _code(**config):
    env = make_text_env("code_v0", {**CODE, **config, "single_agent": True})
    env.reset(seed=2)
    return env


def _solution(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\n"


def _tests(*pairs: tuple[str, str]) -> str:
    return "\n".join(f"Input:\n{given}\nOutput:\n{expected}\n" for given, expected in pairs)


def _own_test(env, expected: str | None = None) -> tuple[str, str]:
    """A test built from the first hidden test (its expected output replaced if given)."""
    first = env.task.tests[0]
    return first.input.strip(), (first.output.strip() if expected is None else expected)


def test_code_correct_code_with_its_own_passing_tests_ends_with_success():
    env = _code()
    reply = _solution(env.task.reference) + _tests(_own_test(env))
    _, rewards, terminations, truncations, infos = env.step({"coder": reply})
    info = infos["coder"]
    assert terminations["coder"] and not truncations["coder"] and env.agents == []
    assert info["success"] and info["reward_team"] == 1.0 and info["reward_local"] == 1.0
    assert rewards["coder"] == 2.0 and "failed 0 of its own 1 tests" in info["feedback"]


def test_code_correct_code_without_tests_runs_to_max_turns():
    env = _code()
    reply = {"coder": _solution(env.task.reference)}
    _, _, terminations, truncations, infos = env.step(reply)
    assert infos["coder"]["success"] and infos["coder"]["parse_error"] is None
    assert not terminations["coder"] and not truncations["coder"]
    _, _, terminations, truncations, _ = env.step(reply)
    assert not terminations["coder"] and truncations["coder"] and env.agents == []


@pytest.mark.parametrize("style", ["full", "compact"])
def test_code_a_failing_own_test_shows_up_in_the_next_prompt(style):
    env = _code(prompt_style=style)
    reply = _solution(env.task.reference) + _tests(_own_test(env), _own_test(env, "wrong"))
    observations, rewards, terminations, _, infos = env.step({"coder": reply})
    assert not terminations["coder"]
    assert rewards["coder"] == 2.0  # its own tests are feedback only: the wrong one costs nothing
    prompt = observations["coder"]
    if style == "full":
        assert "Test 1: passed" in prompt and "Test 2: FAILED" in prompt
        assert "Expected output:\n```\nwrong\n```" in prompt and "Your own latest tests" in prompt
    else:
        assert "failed 1 of 2 tests" in prompt and 'expected: "wrong"' in prompt


def test_code_only_the_first_max_tests_per_answer_own_tests_count():
    env = _code(max_tests_per_answer=1)
    reply = _solution(env.task.reference) + _tests(_own_test(env), _own_test(env, "wrong"))
    _, _, terminations, _, _ = env.step({"coder": reply})
    assert terminations["coder"] and len(env.last_tests) == 1


def test_code_lines_of_the_solution_are_not_read_as_tests():
    env = _code()
    code = "import sys\ninput = sys.stdin.readline\noutput = []\n" + env.task.reference
    _, _, terminations, _, infos = env.step({"coder": _solution(code)})
    assert infos["coder"]["success"] and not terminations["coder"] and env.last_tests == ()


def test_code_no_code_block_is_a_parse_error_with_the_penalty():
    env = _code(invalid_action_penalty=-2.0)
    observations, rewards, terminations, _, infos = env.step(
        {"coder": "print(2 * n)\n" + _tests(_own_test(env))})
    assert infos["coder"]["parse_error"] and rewards["coder"] == -2.0
    assert not infos["coder"]["success"] and not terminations["coder"]
    assert "no usable code" in observations["coder"]
