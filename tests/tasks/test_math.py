"""Math: conformance, answer extraction, math-verify scoring, agreement, data, hostile input."""

import ast
import dataclasses
import inspect
import math
import re
import threading

import pytest
from hang_guard import MEGABYTE_PARSE_BOUND_S, finishes_within
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test
from reward_keywords import check_old_reward_keywords_load_as_rewards

from pettingllms_envs.data import DatasetUnavailableError
from pettingllms_envs.math import (
    MAX_ANSWER_CHARS,
    VARIANTS,
    MathData,
    MathEnv,
    MathVariant,
    RewardConfig,
    answers_equivalent,
    expression_too_costly,
    extract_boxed,
    extract_python_code,
    math_equal,
    parse_math,
    SENTENCE_PLACEHOLDER,
    TOOL_PLACEHOLDER,
    states_a_value,
    parse_answer_sentence,
    parse_program_output,
    parse_reasoner_answer,
    to_ascii,
)
from pettingllms_envs.math_data import (
    KINDS, MathProblem, generate_problems, split_of_id, split_of_question,
    write_problems_jsonl)
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, check_clone_contract, check_text_env, make_text_env)

FAST = SandboxLimits(wall_time_s=2, cpu_time_s=2, memory_mb=256)
HALF = MathProblem(id="half", question="What is 1 divided by 2?", answer="\\frac{1}{2}")


def _result(stdout: str, exit_code: int = 0, stderr: str = "") -> SandboxResult:
    return SandboxResult(stdout=stdout, stderr=stderr, exit_code=exit_code, timed_out=False,
                         killed_by_signal=None, output_truncated=False, network_isolated=True,
                         wall_time_s=0.0)


def _fake_python(code: str) -> SandboxResult:
    """Stand-in for the sandbox that runs programs made of ``print(<literal>)`` lines (and
    fails on anything else), so env-level tests do not pay an interpreter start."""
    printed = []
    for line in code.splitlines():
        match = re.fullmatch(r"print\((.*)\)", line.strip())
        try:
            printed.append(str(ast.literal_eval(match.group(1))))
        except (AttributeError, ValueError, SyntaxError):
            return _result("", exit_code=1, stderr=f"cannot run: {line[:40]!r}")
    return _result("".join(p + "\n" for p in printed))


def _echo_runner(code: str) -> SandboxResult:
    """The program 'prints' its own source, so hostile text also reaches the output parser."""
    return _result(code)


def _program(answer: str) -> str:
    return f"Let me compute it.\n```python\nprint({answer!r})\n```\n"


VARIANT_FIELDS = {field.name for field in dataclasses.fields(MathVariant)}


def _math(**kwargs) -> MathEnv:
    """A MathEnv with the :class:`MathVariant` fields among ``kwargs`` gathered into one
    variant: the tests below try each field alone, as no named variant does."""
    fields = {name: kwargs.pop(name) for name in list(kwargs) if name in VARIANT_FIELDS}
    return MathEnv(**kwargs, variant=MathVariant(**fields))


def _env(problem: MathProblem = HALF, **kwargs) -> MathEnv:
    kwargs.setdefault("code_runner", _fake_python)
    env = _math(sandbox_limits=FAST, **kwargs)
    env.reset(seed=0, options={"problem": problem})
    return env


def _play(env: MathEnv, step: int) -> dict[str, str]:
    """Real moves: on even steps the reasoner is right and the tool wrong (no agreement, the
    episode goes on), on odd steps both are right (agreement ends it)."""
    answer = env.problem.answer
    tool = answer if step % 2 else f"{answer} + 1"
    return {"reasoner": f"So the answer is \\boxed{{{answer}}}.", "tool": _program(tool)}


# ------------------------------------------------------------------------------ conformance
def test_pettingzoo_parallel_api():
    parallel_api_test(MathEnv(code_runner=_fake_python), num_cycles=20)


def test_text_env_conformance_suite():
    check_text_env(lambda: MathEnv(code_runner=_fake_python), seeds=(0, 1, 2))


def test_clone_contract_with_answers_that_agree_and_disagree():
    env = MathEnv(code_runner=_fake_python, max_turns=4)
    check_clone_contract(env, seed=3, action_fn=_play, clone_after_steps=(0, 1))


def test_clone_contract_with_real_sandbox_runs():
    env = MathEnv(sandbox_limits=FAST, max_turns=2, dataset={"kinds": ["arithmetic"]})
    check_clone_contract(env, seed=5, action_fn=_play, clone_after_steps=(1,))


def test_clone_shares_the_loaded_problem_list_instead_of_copying_it(tmp_path):
    path = str(tmp_path / "set.jsonl")
    write_problems_jsonl(generate_problems(40, seed=0), path)
    env = MathEnv(dataset={"source": path, "format": "records"}, code_runner=_fake_python)
    env.reset(seed=1)
    twin = env.clone()
    assert twin.problems is env.problems and twin.problem is env.problem
    assert twin.answers is not env.answers
    twin.step(_play(twin, 0))
    assert env.turn == 0 and twin.turn == 1
    check_clone_contract(env, seed=2, action_fn=_play)


@pytest.mark.parametrize("bad", [
    {"dataset": {"difficulty": 0}}, {"dataset": {"difficulty": 2.0}}, {"dataset": {"kinds": []}},
    {"dataset": {"kinds": ["geometry"]}}, {"max_turns": 0}, {"alpha": "1"},
    {"invalid_action_penalty": float("nan")}, {"rewards": {"correct_reward": None}},
    {"rewards": {"wrong_reward": float("inf")}}, {"wrong_reward": float("nan")},
    {"rewards": {"bonus": 1.0}}, {"dataset": {"test_fraction": 1.5}},
    {"dataset": {"test_fraction": -0.1}}, {"sandbox_limits": "fast"},
    {"sandbox_limits": {"bogus": 1}}, {"variant": "tiny"}, {"variant": None},
    {"code_runner": 3}, {"dataset": ""}, {"dataset": None}, {"dataset": {"source": ""}},
    {"dataset": "org/name"}, {"dataset": {"source": "org/name"}},
    {"dataset": {"source": "org/name", "format": "gsm8k"}}, {"dataset": {"format": "aime"}},
    {"dataset": {"fmt": "aime"}}, {"problems": []}, {"problems": "abc"},
    {"problems": [{"question": "no id", "answer": "1"}]},
    {"problems": [HALF], "dataset": {"source": "org/name", "format": "aime"}},
    {"dataset": {"source": "org/name", "format": "aime", "split": ""}},
    {"dataset": {"source": "org/name", "format": "aime", "config": 3}},
])
def test_constructor_validates_arguments(bad):
    with pytest.raises(ValueError):
        MathEnv(**bad)


def test_defaults():
    env = MathEnv()
    assert env.workflow == [("reasoner", "tool")] and env.max_turns == 3 and env.alpha == 1.0
    assert env.invalid_action_penalty == -1.0 and env.variant == VARIANTS["paper"]
    assert env.data == MathData() and env.data.difficulty == 2 and env.problems is None
    assert env.data.test_fraction == 0.5 and env.data.kinds == KINDS
    assert env.sandbox_limits.wall_time_s == 3 and env.sandbox_limits.memory_mb == 256


# ------------------------------------------------------------------------------ instances
def test_same_seed_same_problem_and_prompts_different_seeds_different_problems():
    questions = []
    for seed in range(15):
        obs_a, _ = MathEnv().reset(seed=seed)
        first = MathEnv()
        obs_b, _ = first.reset(seed=seed)
        assert obs_a == obs_b
        questions.append(first.problem.question)
    assert len(set(questions)) == len(questions)


def test_generated_instances_come_from_the_split_of_the_seed():
    env = MathEnv()
    for seed in (0, 1, 2, 17, TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 1, TRAIN_SEED_LIMIT + 99):
        env.reset(seed=seed)
        expected = "test" if seed >= TRAIN_SEED_LIMIT else "train"
        assert split_of_question(env.problem.question) == expected


def test_loaded_problems_are_split_by_id_and_test_seeds_walk_the_test_list():
    problems = [MathProblem(id=f"p{i}", question=f"What is {i} + {i}?", answer=str(2 * i))
                for i in range(30)]
    env = MathEnv(problems=problems, dataset={"test_fraction": 0.3})
    test_ids = {p.id for p in problems if split_of_id(p.id, 0.3) == "test"}
    assert 0 < len(test_ids) < len(problems)
    seen = []
    for offset in range(len(test_ids)):
        env.reset(seed=TRAIN_SEED_LIMIT + offset)
        seen.append(env.problem.id)
    assert set(seen) == test_ids and len(seen) == len(set(seen))
    for seed in range(40):
        env.reset(seed=seed)
        assert env.problem.id not in test_ids


def test_an_evaluation_only_dataset_has_no_training_seeds():
    env = MathEnv(problems=[HALF], dataset={"test_fraction": 1.0})
    env.reset(seed=TRAIN_SEED_LIMIT + 5)
    assert env.problem == HALF
    with pytest.raises(ValueError, match="no train problems"):
        env.reset(seed=0)


def test_dataset_argument_loads_a_local_file_once(tmp_path):
    path = str(tmp_path / "aime.jsonl")
    with open(path, "w") as handle:
        handle.write('{"id": "a1", "problem": "What is 6 * 7?", "answer": 42}\n{oops\n')
    env = MathEnv(dataset={"source": path, "format": "aime", "test_fraction": 0.0})
    assert env.load_report.kept == 1 and env.load_report.skipped == 1
    obs, _ = env.reset(seed=3)
    assert "What is 6 * 7?" in obs["reasoner"] and env.problem.answer == "42"
    with pytest.raises(DatasetUnavailableError):
        MathEnv(dataset={"source": str(tmp_path / "missing.jsonl"), "format": "aime"})


def test_reset_plays_a_given_problem_dict():
    env = MathEnv(code_runner=_fake_python)
    obs, _ = env.reset(options={"problem": {"question": "What is 2 + 2?", "answer": "4"}})
    assert env.problem.answer == "4" and "What is 2 + 2?" in obs["tool"]
    with pytest.raises(ValueError):
        env.reset(options={"problem": {"question": "no answer"}})


# ------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text, content", [
    ("The answer is \\boxed{42}.", "42"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("first \\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{3} and an unclosed \\boxed{4", "3"),
    ("\\boxed {x = \\{1, 2\\}}", "x = \\{1, 2\\}"),
    ("$\\boxed 7$", "7"),
    ("\\boxed 1\\boxed 2", "2"),  # a space-form token ends where the next box starts
    ("\\boxed 2\\sqrt3", "2\\sqrt3"),
    ("\\boxed{\\boxed{5}}", "5"),
    ("}}} \\boxed{a{b}c} {{{", "a{b}c"),
])
def test_extract_boxed_takes_the_last_complete_box(text, content):
    assert extract_boxed(text) == content


@pytest.mark.parametrize("text", ["", "42", "\\boxed", "\\boxed{", "\\boxed{1", "boxed{1}",
                                  "\\boxed\n{1"])
def test_extract_boxed_finds_nothing(text):
    assert extract_boxed(text) is None


@pytest.mark.parametrize("text, error", [
    ("I think it is 7.", "no \\boxed"),
    ("\\boxed{}", "empty"),
    ("\\boxed{ $ $ }", "empty"),
    ("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}", "longer than"),
])
def test_reasoner_answers_that_do_not_parse(text, error):
    result = parse_reasoner_answer(text)
    assert not result.ok and result.value is None and error in result.error


def test_reasoner_answer_is_the_stripped_box_content():
    assert parse_reasoner_answer("so \\boxed{ $-3$ }") == ParseResult(value="-3")


@pytest.mark.parametrize("stdout, answer", [
    ("42\n", "42"), ("thinking\n\n  1/2  \n\n", "1/2"), ("a\r\nb\r\n", "b"), ("$7$", "7")])
def test_program_answer_is_the_last_non_empty_line(stdout, answer):
    assert parse_program_output(stdout) == ParseResult(value=answer)


@pytest.mark.parametrize("stdout", ["", " \n \n", "9" * (MAX_ANSWER_CHARS + 1)])
def test_program_outputs_without_a_usable_answer(stdout):
    assert not parse_program_output(stdout).ok


# ------------------------------------------------------------------------------ math-verify
@pytest.mark.parametrize("gold, prediction", [
    ("\\frac{1}{2}", "0.5"), ("\\frac{1}{2}", "1/2"), ("0.5", "\\frac{1}{2}"),
    ("\\frac{1}{2}", "\\dfrac{1}{2}"), ("42", "42.0"), ("42", "x = 42"),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2"), ("3, 5", "5, 3"), ("-7/12", "-\\frac{7}{12}"),
    ("5", "The answer is 5"),
])
def test_equivalent_forms_are_correct(gold, prediction):
    assert math_equal(gold, prediction)


@pytest.mark.parametrize("gold, prediction", [
    ("\\frac{1}{2}", "0.3333"), ("42", "43"), ("3, 5", "3"), ("2^{10}", "2^{11}"),
    ("1/2", ""), ("1/2", "half"),
])
def test_different_answers_are_wrong(gold, prediction):
    assert not math_equal(gold, prediction)


@pytest.mark.parametrize("answer", [
    "3^{3^{3^{3}}}", "(10^{100})!", "e^{e^{e^{e^{e}}}}", "\\binom{10^{9}}{10^{5}}",
    "\\prod_{k=1}^{10^{6}} k", "(x+y+z)^{40}", "\\Gamma(10^{8})", "{{{{{{{{{{1}}}}}}}}}}",
])
def test_answers_too_costly_to_compare_are_unusable_not_a_hang(answer):
    """Off the main thread math-verify has no timeout: these must be refused up front."""
    done = {}
    worker = threading.Thread(target=lambda: done.update(parsed=parse_math(answer)))
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), f"parsing {answer!r} hung"
    assert done["parsed"] == ()


def test_cheap_large_answers_still_compare():
    assert math_equal("2^{2023}", "2^{2023}") and not math_equal("2^{2023}", "2^{2022}")
    assert math_equal("720", "6!")
    assert not expression_too_costly(parse_math("(x+1)^{10}")[0])


def test_agreement_is_symmetric():
    a, b = parse_math("x = 3"), parse_math("3")
    assert answers_equivalent(a, b) and answers_equivalent(b, a)
    assert not answers_equivalent(parse_math("3"), parse_math("4"))
    assert not answers_equivalent((), ())


def test_scoring_works_off_the_main_thread():
    """Ray may step envs from a worker thread, where signal-based timeouts would raise."""
    out = {}

    def run():
        env = _env()
        out["step"] = env.step({"reasoner": "\\boxed{0.5}", "tool": _program("1/2")})

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=120)
    _, rewards, terms, _, infos = out["step"]
    assert infos["reasoner"]["reward_local"] == 1.0 and infos["tool"]["reward_local"] == 1.0
    assert all(terms.values())


# ------------------------------------------------------------------------------ rewards
@pytest.mark.parametrize("boxed", ["\\frac{1}{2}", "1/2", "0.5", "\\dfrac12"])
def test_correct_boxed_answer_in_any_equivalent_form(boxed):
    env = _env()
    _, rewards, _, _, infos = env.step({"reasoner": f"Thus \\boxed{{{boxed}}}.",
                                        "tool": _program("0.25")})
    info = infos["reasoner"]
    assert info["reward_local"] == 1.0 and info["reward_team"] == 1.0 and info["success"]
    assert rewards["reasoner"] == 2.0 and info["parse_error"] is None
    assert infos["tool"]["reward_local"] == 0.0 and rewards["tool"] == 1.0  # team reward


ARITHMETIC = MathProblem(id="arith", question="Compute the value of 10 - 10 * 2.", answer="-10")


@pytest.mark.parametrize("answer_format,reasoner", [
    ("sentence", "The answer is 10 - 10 * 2."), ("boxed", "\\boxed{10 - 10 * 2}"),
    ("sentence", "The answer is -20 + 10.")])
def test_restating_the_computation_is_not_its_value(answer_format, reasoner):
    # math-verify alone evaluates both sides and accepts "10 - 10 * 2" for -10: a trained
    # reasoner found that and answered every held-out problem with its own expression.
    env = _env(ARITHMETIC, answer_format=answer_format)
    _, rewards, _, _, infos = env.step({"reasoner": reasoner, "tool": _program("10 - 10 * 2")})
    assert infos["reasoner"]["reward_local"] == 0.0 and not infos["reasoner"]["success"]
    assert infos["tool"]["reward_local"] == 0.0  # a printed expression is no value either
    assert "not a number" in infos["reasoner"]["feedback"]


def test_a_restated_computation_does_not_agree_with_the_tools_value():
    # Agreement ends the episode: a reasoner that restates the problem on turn 1 must still
    # get turn 2, where it sees what the tool's program printed.
    env = _env(ARITHMETIC, answer_format="sentence", max_turns=2)
    obs, _, terms, _, infos = env.step({"reasoner": "The answer is 10 - 10 * 2.",
                                        "tool": _program("-10")})
    assert not any(terms.values()) and env.turn == 1 and "agree" not in infos["tool"]["feedback"]
    assert 'tool agent\'s latest answer: "-10"' in obs["reasoner"]
    _, _, terms, _, infos = env.step({"reasoner": "The answer is -10.",
                                      "tool": _program("-10")})
    assert all(terms.values()) and infos["reasoner"]["success"]


@pytest.mark.parametrize("reasoner", ["The answer is -10.", "The answer is x = -10.",
                                      "\\boxed{-10}", "The answer is $-10$."])
def test_a_stated_value_still_counts_in_its_usual_forms(reasoner):
    env = _env(ARITHMETIC, answer_format="sentence")
    _, _, _, _, infos = env.step({"reasoner": reasoner, "tool": _program("-10")})
    assert infos["reasoner"]["success"] and infos["tool"]["reward_local"] == 1.0


def test_answers_that_are_expressions_are_judged_by_math_verify_alone():
    problem = MathProblem(id="poly", question="Expand (x+1)^2.", answer="x^2 + 2x + 1")
    env = _env(problem, answer_format="sentence")
    _, _, _, _, infos = env.step({"reasoner": "The answer is x^2 + 2*x + 1.",
                                  "tool": _program("x**2")})
    assert infos["reasoner"]["success"]


def test_wrong_answers_score_zero_and_no_team_reward():
    env = _env(alpha=0.5)
    _, rewards, _, _, infos = env.step({"reasoner": "\\boxed{1/3}", "tool": _program("1/3")})
    assert rewards == {"reasoner": 0.0, "tool": 0.0}
    assert not infos["reasoner"]["success"] and "wrong" in infos["reasoner"]["feedback"]


def test_missing_box_is_a_parse_error_with_the_penalty():
    env = _env(invalid_action_penalty=-2.0)
    _, rewards, terms, _, infos = env.step({"reasoner": "The answer is one half.",
                                            "tool": _program("0.5")})
    assert infos["reasoner"]["parse_error"] and rewards["reasoner"] == -2.0
    assert infos["tool"]["reward_local"] == 1.0 and rewards["tool"] == 1.0  # team stays 0
    assert not any(terms.values())


def test_reward_coefficients_are_configurable():
    env = _env(rewards={"correct_reward": 2.0, "wrong_reward": -0.5}, alpha=0.0)
    _, rewards, _, _, _ = env.step({"reasoner": "\\boxed{0.5}", "tool": _program("2")})
    assert rewards == {"reasoner": 2.0, "tool": -0.5}


@pytest.mark.parametrize("response, reason", [
    ("I would use Python.", "no program ran"),
    ("```python\nraise ValueError\n```", "failed"),
    ("```python\nprint('')\n```", "printed nothing"),
    (_program("9" * 300), "longer than"),
])
def test_tool_failures_get_the_penalty_and_are_shown_to_the_reasoner(response, reason):
    env = _env()
    obs, rewards, _, _, infos = env.step({"reasoner": "\\boxed{7}", "tool": response})
    assert infos["tool"]["reward_local"] == env.invalid_action_penalty
    assert reason in obs["reasoner"].lower() and reason in infos["tool"]["feedback"].lower()


def test_tool_answer_is_the_last_printed_line():
    env = _env()
    code = "```python\nprint('computing...')\nprint(0.5)\n```"
    _, _, _, _, infos = env.step({"reasoner": "\\boxed{3}", "tool": code})
    assert infos["tool"]["reward_local"] == 1.0


def test_code_runner_exceptions_are_contained():
    def broken(code):
        raise RuntimeError("executor down")

    env = _env(code_runner=broken)
    _, rewards, _, _, infos = env.step({"reasoner": "\\boxed{1}", "tool": _program("0.5")})
    assert infos["tool"]["reward_local"] == -1.0 and "RuntimeError" in infos["tool"]["feedback"]


# ------------------------------------------------------------------------------ turns
def test_agreement_terminates_even_on_a_wrong_answer():
    env = _env()
    _, rewards, terms, truncs, infos = env.step({"reasoner": "\\boxed{x = 2}",
                                                 "tool": _program("2.0")})
    assert all(terms.values()) and not any(truncs.values()) and env.agents == []
    assert not infos["reasoner"]["success"] and "agree" in infos["tool"]["feedback"]


def test_correct_agreement_solves_the_episode():
    env = _env()
    _, rewards, terms, _, infos = env.step({"reasoner": "\\boxed{\\frac{1}{2}}",
                                            "tool": _program("0.5")})
    assert all(terms.values()) and infos["tool"]["success"]
    assert rewards == {"reasoner": 2.0, "tool": 2.0}


def test_disagreement_continues_and_each_sees_the_others_latest_answer():
    env = _env()
    obs, _, terms, truncs, infos = env.step({"reasoner": "\\boxed{0.5}", "tool": _program("3/7")})
    assert not any(terms.values()) and not any(truncs.values()) and env.turn == 1
    assert 'tool agent\'s latest answer: "3/7"' in obs["reasoner"]
    assert 'Your latest answer: "0.5"' in obs["reasoner"]
    assert 'reasoning agent\'s latest answer: "0.5"' in obs["tool"]
    assert 'Your latest answer: "3/7"' in obs["tool"]
    assert all(info["acting"] for info in infos.values())
    obs, _, terms, _, _ = env.step({"reasoner": "no box", "tool": _program("0.5")})
    assert "reasoning agent's latest answer: none (no \\boxed" in obs["tool"]
    assert not any(terms.values())


def test_episode_truncates_after_max_turns():
    env = _env(max_turns=2)
    env.step({"reasoner": "\\boxed{1}", "tool": _program("2")})
    _, _, terms, truncs, infos = env.step({"reasoner": "\\boxed{0.5}", "tool": _program("2")})
    assert all(truncs.values()) and not any(terms.values()) and env.agents == []
    assert infos["reasoner"]["success"] and infos["reasoner"]["acting"] is False


def test_oracle_pair_solves_seeded_instances():
    for seed in (1, 2, TRAIN_SEED_LIMIT + 3):
        env = MathEnv(code_runner=_fake_python)
        env.reset(seed=seed)
        answer = env.problem.answer
        _, rewards, terms, _, infos = env.step(
            {"reasoner": f"Step by step ... \\boxed{{{answer}}}", "tool": _program(answer)})
        assert all(terms.values()) and infos["reasoner"]["success"]
        assert rewards == {"reasoner": 2.0, "tool": 2.0}


def test_real_sandbox_program_solves_an_instance():
    env = MathEnv(sandbox_limits=FAST)
    env.reset(options={"problem": MathProblem(id="frac", question="Compute 1/3 + 1/6.",
                                              answer="1/2")})
    code = ("```python\nfrom fractions import Fraction\n"
            "print('working')\nprint(Fraction(1, 3) + Fraction(1, 6))\n```")
    _, rewards, terms, _, infos = env.step({"reasoner": "\\boxed{\\frac12}", "tool": code})
    assert infos["tool"]["reward_local"] == 1.0 and all(terms.values())


# ------------------------------------------------------------------------------ prompts
def test_full_prompts_show_the_problem_turn_and_answer_format():
    env = MathEnv(code_runner=_fake_python)
    obs, _ = env.reset(seed=4)
    for agent, text in obs.items():
        assert env.problem.question in text and "turn 1 of 3" in text and text.isascii()
    assert "\\boxed{42}" in obs["reasoner"] and "```python" in obs["tool"]
    obs, *_ = env.step({"reasoner": "\\boxed{1}", "tool": _program("2")})
    assert "turn 2 of 3" in obs["reasoner"] and env.problem.question in obs["tool"]


def test_compact_prompt_keeps_the_state_and_answer_format():
    env = _env(prompt_style="compact")
    obs = env.current_observations()
    assert obs["reasoner"].startswith("Problem: What is 1 divided by 2?")
    assert "\\boxed{42}" in obs["reasoner"] and TOOL_PLACEHOLDER in obs["tool"]
    assert env.prompt_examples()["tool"] == f"```python\n{TOOL_PLACEHOLDER}\n```"
    obs, *_ = env.step({"reasoner": "\\boxed{1}", "tool": _program("2")})
    assert 'The tool\'s program printed: "2".' in obs["reasoner"]
    assert 'The reasoner answered: "1".' in obs["tool"]
    assert max(len(t.splitlines()) for t in obs.values()) <= 4


def test_the_compact_tool_line_can_be_a_number_that_is_never_the_answer():
    env = _env(MathProblem(id="a", question="What is 40 + 2?", answer="42"),
               prompt_style="compact", tool_example="number")
    obs = env.current_observations()
    assert "prints the answer, like: print(17)" in obs["tool"] and TOOL_PLACEHOLDER not in obs["tool"]
    assert env.prompt_examples()["tool"] == "```python\nprint(17)\n```"
    assert env.clone().current_observations()["tool"] == obs["tool"]


def test_an_unknown_tool_example_is_refused_naming_the_accepted_ones():
    with pytest.raises(ValueError, match="tool_example='code'.*placeholder"):
        MathVariant(tool_example="code")


def test_non_ascii_problems_are_shown_in_ascii():
    env = _env(MathProblem(id="u", question="Find x \u2264 3 \u2212 y for caf\u00e9 \u65e5.",
                           answer="1"))
    text = env.current_observations()["reasoner"]
    assert "Find x <= 3 - y for cafe ?." in text
    assert to_ascii("plain") == "plain"


# ------------------------------------------------------------------------------ hostile input
_PIECES = ["\\boxed{", "\\boxed", "\\boxed ", "}", "{", "\\frac{1}{2}", "$", "```python\n",
           "```py\n", "```", "```\n", "\n", "print(", ")", "'", "0.5", "1/2", "^{", "9", "!",
           "\\{", "\\}", "\x00", "\ufffd", "\u00e9", "\U0001f642", "\r\n", "x" * 50, " ",
           "{\"answer\": ", "\"", "[", "\\sqrt{", "(", "```python\nprint(1)\n```"]
_ECHO = MathEnv(code_runner=_fake_python).reset(seed=8)[0]["reasoner"]
_hostile = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    st.tuples(st.text(max_size=12), st.integers(50, 1000)).map(lambda p: p[0] * p[1]),
    st.sampled_from(["", " ", "\n" * 1000, "\\boxed{" * 3000, "}" * 5000 + "\\boxed{1}",
                     "```python\n" * 500 + "print(1)\n" + "```\n" * 500, _ECHO,
                     _ECHO + "\\boxed{" + _ECHO + "}", '{"answer": "1/2", "reason',
                     "\\boxed{" * 100 + "1" + "}" * 100, "\\boxed " + "7" * 10_000]),
)
_HOSTILE = settings(max_examples=2000, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_HOSTILE
@given(_hostile)
def test_parsers_never_raise_on_hostile_text(text):
    for parser in (parse_reasoner_answer, parse_program_output, extract_python_code):
        result = parser(text)
        assert isinstance(result, ParseResult) and (result.ok == (result.error is None))
    answer = parse_reasoner_answer(text)
    if answer.ok:
        assert answer.value.strip() and len(answer.value) <= MAX_ANSWER_CHARS
        assert answer.value == extract_boxed(text).strip().strip("$").strip()


_NO_BOX, _LONG_LINE, _NO_CODE = ("no \\boxed{...} answer", "longer than 200 characters",
                                 "no complete ```python code block")


def _expect(result: ParseResult, expected) -> None:
    """``expected``: the whole ParseResult, a set of accepted ParseResults, or the phrase a
    parse error must contain."""
    if isinstance(expected, ParseResult):
        assert result == expected
    elif isinstance(expected, set):
        assert result in expected
    else:
        assert not result.ok and result.value is None and expected in result.error, result


@pytest.mark.parametrize("text,reasoner,program_output,code", [
    ("x" * 2_000_000, _NO_BOX, _LONG_LINE, _NO_CODE),
    ("\\boxed{" * 200_000, _NO_BOX, _LONG_LINE, _NO_CODE),
    ("{" * 1_000_000 + "\\boxed{1}", ParseResult(value="1"), _LONG_LINE, _NO_CODE),
    # The token after "\\boxed " runs to whitespace, so it swallows the next "\\boxed" (the last
    # box read is "1\\boxed", as for "\\boxed 1" * 2); "1" would be the last box by start.
    ("\\boxed 1" * 200_000, {ParseResult(value="1"), ParseResult(value="1\\boxed")},
     _LONG_LINE, _NO_CODE),
    ("\n" * 1_000_000 + "7", _NO_BOX, ParseResult(value="7"), _NO_CODE),
], ids=["x", "open_boxes", "open_braces", "spaced_boxes", "newlines"])
def test_parsers_handle_megabytes_of_text(text, reasoner, program_output, code):
    for parser, expected in ((parse_reasoner_answer, reasoner),
                             (parse_program_output, program_output),
                             (extract_python_code, code)):
        with finishes_within(MEGABYTE_PARSE_BOUND_S, f"{parser.__name__} on {text[:12]!r}..."):
            result = parser(text)
        _expect(result, expected)


_HOSTILE_ENV = MathEnv(code_runner=_echo_runner)


@settings(_HOSTILE, max_examples=1000)
@given(_hostile)
def test_env_step_never_raises_on_hostile_text(text):
    env = _HOSTILE_ENV
    env.reset(seed=3)
    # The same text to both roles (half the generation cost); the echo runner makes the tool's
    # "program output" its own source, so the text also reaches the output parser.
    obs, rewards, terms, truncs, infos = env.step({"reasoner": text, "tool": text})
    assert all(math.isfinite(r) for r in rewards.values())
    for agent, observation in obs.items():
        assert env.observation_space(agent).contains(observation)


# ------------------------------------------------------------------------------ sentence format
@pytest.mark.parametrize("text,answer", [
    ("8 + 4 + 4 = 16\n\nThe answer is 16.", "16"),
    ("The answer is -10", "-10"),
    ("answer: 3/4.", "3/4"),
    ("The Answer is **0.5**.\nThanks", "0.5"),
    ("The answer is 7, which is odd.", "7"),
    ("First the answer is 3. No, the answer is $5$.", "5"),
    ("The answer is 12 but \\boxed{13}", "13"),
])
def test_sentence_answer_is_what_follows_the_last_answer_is(text, answer):
    assert parse_answer_sentence(text) == ParseResult(value=answer)


@pytest.mark.parametrize("text", ["16", "So it is 16.", SENTENCE_PLACEHOLDER,
                                  "The answer is unknown.", "The answer is " + "9" * 400])
def test_sentence_answers_without_a_number_after_answer_is_are_parse_errors(text):
    assert not parse_answer_sentence(text).ok


def test_sentence_format_scores_the_sentence_and_shows_a_placeholder_never_an_answer():
    env = _env(MathProblem(id="a", question="Compute the value of 8 + 4 + 4.", answer="16"),
               prompt_style="compact", answer_format="sentence")
    obs = env.current_observations()
    assert SENTENCE_PLACEHOLDER in obs["reasoner"] and "boxed" not in obs["reasoner"]
    assert env.prompt_examples()["reasoner"] == SENTENCE_PLACEHOLDER
    _, rewards, terms, _, infos = env.step({"reasoner": "8 + 4 + 4 = 16. The answer is 16.",
                                            "tool": _program("16")})
    assert infos["reasoner"]["success"] and rewards["reasoner"] == 2.0 and all(terms.values())
    env.reset(seed=0, options={"problem": env.problem})
    _, rewards, *_ = env.step({"reasoner": SENTENCE_PLACEHOLDER, "tool": _program("16")})
    assert rewards["reasoner"] == -1.0  # the copied placeholder is an invalid action


def test_sentence_format_applies_to_the_single_agent_and_full_prompts():
    env = _math(code_runner=_fake_python, answer_format="sentence", single_agent=True)
    obs, _ = env.reset(seed=4)
    assert SENTENCE_PLACEHOLDER in obs["reasoner"]
    assert env.roles["reasoner"].parse("The answer is 3.") == ParseResult(value="3")


def test_unknown_answer_format_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="answer_format.*boxed.*sentence"):
        MathVariant(answer_format="latex")


@pytest.mark.parametrize("text,states", [
    ("-10", True), ("1,000", True), ("3.5", True), ("-3/4", True), ("\\frac{1}{2}", True),
    ("\\dfrac12", True), ("x = 3", True), ("$5$", True), ("4 - 2 * 6 = -8", True),
    ("10 - 10 * 2", False), ("2^3", False), ("sqrt(4)", False), ("1e3", False),
    ("10 - 10 * 2 = 10 - 10*2", False)])
def test_a_value_is_a_number_alone_or_after_the_last_equals_sign(text, states):
    assert states_a_value(text) is states


# ------------------------------------------------------------------------------ named variants
#: Each named variant as env configs spelled it before the names (the shipped configs' flags).
OLD_SPELLINGS = {
    "paper": {"prompt_style": "full"},
    "compact_sentence": {"prompt_style": "compact", "answer_format": "sentence"},
    "compact_sentence_number_example": {"prompt_style": "compact", "answer_format": "sentence",
                                        "tool_example": "number"},
}
#: Answers that disagree, so every episode reaches its last turn and shows both answers.
_DISAGREEING = {"reasoner": "So \\boxed{12345}.\n" + _program("54321"),
                "tool": _program("54321")}


def _shown(env: MathEnv, seed: int) -> list[dict[str, str]]:
    """Everything the agents are shown in one episode: the prompts at reset and after each
    step, and the format examples."""
    observations, _ = env.reset(seed=seed)
    shown = [{agent: str(text) for agent, text in observations.items()}, env.prompt_examples()]
    while env.agents:
        observations, *_ = env.step({agent: _DISAGREEING[agent] for agent in env.agents})
        shown.append({agent: str(text) for agent, text in observations.items()})
    return shown


def test_every_shipped_variant_has_its_old_spelling():
    assert set(OLD_SPELLINGS) == set(VARIANTS)


@pytest.mark.parametrize("single_agent", [False, True], ids=["team", "alone"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_named_variant_shows_exactly_the_prompts_of_its_old_flags(name, single_agent, caplog):
    common = {"code_runner": _fake_python, "max_turns": 2, "single_agent": single_agent}
    with caplog.at_level("WARNING", logger="pettingllms_envs.math"):
        old = MathEnv(**common, **OLD_SPELLINGS[name])
    assert f"this is variant={name!r}" in caplog.text
    new = MathEnv(**common, variant=name)
    assert old.variant == new.variant == VARIANTS[name]
    for seed in (0, 7, TRAIN_SEED_LIMIT):
        shown = _shown(new, seed)
        assert shown == _shown(old, seed) and len(shown) == 4
    assert new.roles["reasoner"].parse is old.roles["reasoner"].parse


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_named_variant_builds_from_its_name_and_passes_the_env_checks(name):
    config = {"variant": name, "max_turns": 2, "code_runner": _fake_python}
    assert make_text_env("math_v0", config).variant == VARIANTS[name]
    check_text_env(lambda: make_text_env("math_v0", config), seeds=(0, 1))


def test_an_unknown_variant_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown math variant 'compact'.*'compact_sentence'"):
        make_text_env("math_v0", {"variant": "compact"})


def test_an_env_config_from_before_the_names_loads_as_the_variant_its_flags_spell(caplog):
    """An old checkpoint's env config: its flags are exactly one named variant, or refused."""
    old = {"prompt_style": "compact", "answer_format": "sentence", "tool_example": "number"}
    with caplog.at_level("WARNING", logger="pettingllms_envs.math"):
        env = make_text_env("math_v0", old)
    assert env.variant == VARIANTS["compact_sentence_number_example"]
    assert "this is variant='compact_sentence_number_example'" in caplog.text
    assert make_text_env("math_v0", {"tool_example": "placeholder"}).variant == VARIANTS["paper"]
    with pytest.raises(ValueError, match="no shipped math variant .*'compact_sentence': "
                                         "{'prompt_style': 'compact', 'answer_format'"):
        make_text_env("math_v0", {"prompt_style": "compact"})  # the compact boxed pilot
    with pytest.raises(ValueError, match="no shipped math variant \\(tool_example='number' "
                                         "changes the compact prompt.*'paper'"):
        make_text_env("math_v0", {"tool_example": "number"})
    with pytest.raises(ValueError, match="exclude each other"):
        make_text_env("math_v0", {"variant": "compact_sentence", "answer_format": "sentence"})
    with pytest.raises(ValueError, match="unexpected keyword arguments \\['prompt_styles'\\]"):
        make_text_env("math_v0", {"prompt_styles": "full"})


# ------------------------------------------------------------------------------ data source
def test_the_constructor_holds_the_setting_in_eleven_arguments():
    """Issue 44: the prompt flags became one ``variant``, the data keywords one ``dataset``,
    the reward keywords one ``rewards``."""
    parameters = inspect.signature(MathEnv).parameters
    named = [name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert len(named) <= 11, named
    retired = {"prompt_style", "answer_format", "tool_example", "dataset_format", "hub_split",
               "hub_config", "test_fraction", "difficulty", "kinds", "correct_reward",
               "wrong_reward"}
    assert not retired & set(parameters)


def test_old_flat_data_keywords_load_as_the_same_generated_source(caplog):
    new = MathEnv(dataset={"source": "generated", "difficulty": 1, "kinds": ["arithmetic"]},
                  code_runner=_fake_python)
    assert new.data == MathData(difficulty=1, kinds=("arithmetic",))
    with caplog.at_level("WARNING", logger="pettingllms_envs.math"):
        old = MathEnv(dataset="generated", difficulty=1, kinds=["arithmetic"],
                      code_runner=_fake_python)
    assert old.data == new.data
    assert ("this is dataset={'source': 'generated', 'difficulty': 1, "
            "'kinds': ('arithmetic',)}") in caplog.text
    for seed in (0, 5, TRAIN_SEED_LIMIT):
        assert old.reset(seed=seed)[0] == new.reset(seed=seed)[0]
    assert MathEnv(dataset=new.data).data is new.data


def test_old_reward_keywords_load_as_rewards_entries(caplog):
    check_old_reward_keywords_load_as_rewards(MathEnv, RewardConfig, {"wrong_reward": -0.5},
                                              caplog, code_runner=_fake_python)


def test_old_flat_data_keywords_load_as_the_same_loaded_source(tmp_path):
    path = str(tmp_path / "set.jsonl")
    write_problems_jsonl(generate_problems(30, seed=0), path)
    old = MathEnv(dataset=path, dataset_format="records", test_fraction=0.3, hub_split="train")
    new = MathEnv(dataset={"source": path, "format": "records", "test_fraction": 0.3})
    assert old.data == new.data and old.problems == new.problems
    assert old._splits == new._splits and 0 < len(new._splits["test"]) < 30


def test_data_spellings_with_no_one_reading_are_refused_naming_the_new_one():
    with pytest.raises(ValueError, match="dataset='aime.jsonl' needs its row format: "
                                         "dataset: {source: 'aime.jsonl', format: one of"):
        MathEnv(dataset="aime.jsonl")
    with pytest.raises(ValueError, match="retired keywords \\['difficulty'\\].*exclude each "
                                         "other: give them inside dataset"):
        MathEnv(dataset={"source": "generated"}, difficulty=1)
    with pytest.raises(ValueError, match="unknown keys \\['fmt'\\]; accepted: \\['source', "
                                         "'format', 'split', 'config', 'test_fraction'"):
        MathEnv(dataset={"fmt": "aime"})
    with pytest.raises(ValueError, match="needs format, one of"):
        MathEnv(dataset="org/name", hub_split="test")
    with pytest.raises(ValueError, match="give either problems or a loaded dataset"):
        MathEnv(problems=[HALF], dataset={"source": "org/name", "format": "aime"})
