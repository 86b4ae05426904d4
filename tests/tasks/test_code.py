"""Code (coder || tester): conformance, problem selection, the tester's answer format, reward
components on hand-made states, prompts, a few real-sandbox runs and hostile input."""

import json
import math

import pytest
from hang_guard import parse_within_bound
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test

from pettingllms_envs.code import MAX_PARSED_TESTS, CodeEnv, parse_tester_answer
from pettingllms_envs.code_data import (CodeData, load_dataset_problems, load_humaneval,
                                        problem_split)
from pettingllms_envs.code_problem import CodeProblem, TestCase
from pettingllms_envs.common import extract_python_code
from pettingllms_envs.data import DatasetUnavailableError
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, check_clone_contract, check_text_env)

FAST = SandboxLimits(wall_time_s=3, cpu_time_s=3, memory_mb=256)
# Hand-made instances: 4 hidden tests; one problem without a reference solution.
DOUBLE = CodeProblem(id="hand/double", prompt="Read n and print 2 * n.", kind="stdio",
                     tests=tuple(TestCase(f"{n}\n", f"{2 * n}\n") for n in (1, 2, 3, 4)),
                     reference="print(2 * int(input()))\n")
NO_REFERENCE = CodeProblem(id="hand/no-reference", prompt="Read n and print n.", kind="stdio",
                           tests=(TestCase("1\n", "1\n"),))
THIRD = CodeProblem(id="hand/third", prompt="Print 1/3.", kind="stdio",
                    tests=(TestCase("", "0.333333333\n"),), reference="print(1 / 3)\n")


# ------------------------------------------------------------------------------ fakes
def _result(stdout: str, exit_code: int = 0, stderr: str = "") -> SandboxResult:
    return SandboxResult(stdout=stdout, stderr=stderr, exit_code=exit_code, timed_out=False,
                         killed_by_signal=None, output_truncated=False, network_isolated=True,
                         wall_time_s=0.0)


def _table_code(answers: dict[str, str]) -> str:
    """A real program printing the answer stored for its stdin, so the fake runner can 'run'
    it without executing anything."""
    return ("import sys\nANSWERS = " + json.dumps(answers)
            + "\nsys.stdout.write(ANSWERS.get(sys.stdin.read(), ''))\n")


_REFERENCES: dict[str, dict[str, str]] = {}
for _problem in (*load_dataset_problems("generated"), DOUBLE, THIRD):
    # Problems of one template share their reference program: merge what it prints per input.
    _REFERENCES.setdefault(_problem.reference.strip(), {}).update(
        {t.input: t.output for t in _problem.tests})


def _fake_runner(program: str, stdins):
    """Stand-in for the sandbox: table programs answer from their table, known reference
    solutions from their problem's hidden tests, anything else crashes."""
    table = _REFERENCES.get(program.strip())
    for line in program.split("\n"):
        if line.startswith("ANSWERS = "):
            table = json.loads(line[len("ANSWERS = "):])
    if table is None:
        return [_result("", 1, "NameError: unknown program") for _ in stdins]
    return [_result(table.get(s, "")) for s in stdins]


def _echo_runner(program: str, stdins):
    """Every 'run' prints its stdin back (hostile tester inputs reach comparison and prompts)."""
    return [_result(s) for s in stdins]


def _python(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\n"


def _tests(*pairs: tuple[str, str]) -> str:
    return "\n".join(f"Input:\n{given}\nOutput:\n{expected}\n" for given, expected in pairs)


def _env(problem: CodeProblem = DOUBLE, **kwargs) -> CodeEnv:
    env = CodeEnv(problems=[DOUBLE, NO_REFERENCE, THIRD], code_runner=_fake_runner, **kwargs)
    env.reset(seed=0, options={"task": problem})
    return env


def _varied_actions(env: CodeEnv, step: int) -> dict[str, str]:
    """Wrong code vs a test that catches it, then garbage, then the solving pair."""
    answers = {t.input: t.output for t in env.task.tests}
    wrong = dict(answers, **{env.task.tests[0].input: "wrong\n"})
    first, second = env.task.tests[:2]
    moves = [(_python(_table_code(wrong)), _tests((first.input.strip(), first.output.strip()),
                                                  (second.input.strip(), "nonsense"))),
             ("no code at all", "no tests either"),
             (_python(env.task.reference), _tests((first.input.strip(), first.output.strip())))]
    coder, tester = moves[step % 3]
    return {"coder": coder, "tester": tester}


# ------------------------------------------------------------------------------ conformance
def test_pettingzoo_parallel_api():
    parallel_api_test(CodeEnv(dataset="generated", code_runner=_fake_runner), num_cycles=20)


def test_text_env_conformance_suite():
    check_text_env(lambda: CodeEnv(dataset="generated", code_runner=_fake_runner),
                   seeds=(0, 1, TRAIN_SEED_LIMIT))


def test_clone_contract_with_real_moves():
    env = CodeEnv(dataset="generated", code_runner=_fake_runner)
    check_clone_contract(env, seed=4, action_fn=_varied_actions, clone_after_steps=(0, 1, 2))


def test_clones_share_the_loaded_problems_instead_of_copying_them():
    env = CodeEnv(code_runner=_fake_runner)
    env.reset(seed=3)
    twin = env.clone()
    assert twin.problem_set is env.problem_set and twin.task is env.task
    assert CodeEnv().problem_set is env.problem_set  # loaded once per process
    twin.step({"coder": "```python\nprint(1)\n```", "tester": "Input: 1\nOutput: 1"})
    assert env.turn == 0 and env.last_code is None and twin.last_code == "print(1)"


@pytest.mark.parametrize("bad", [
    {"test_fraction": 1.0}, {"test_fraction": -0.1}, {"max_turns": 0},
    {"max_tests_per_answer": 0}, {"max_hidden_tests": 0}, {"max_hidden_tests": 2.5},
    {"float_tolerance": -1e-6}, {"float_tolerance": float("nan")}, {"alpha": "1"},
    {"invalid_action_penalty": None}, {"sandbox_limits": "fast"},
    {"sandbox_limits": {"bogus": 1}}, {"prompt_style": "tiny"}, {"code_runner": 3},
    {"dataset": ""}, {"dataset": {"source": "humaneval", "format": "apps"}},
    {"dataset": {"source": "org/name", "format": "mbpp"}}, {"dataset": "./x.jsonl"},
    {"dataset": {"source": "org/name", "format": "apps", "split": 3}},
    {"dataset": {"test_fraction": 1.0}}, {"dataset": {"sauce": "humaneval"}},
    {"dataset": None}, {"dataset": {"source": "generated"}, "dataset_format": "apps"},
    {"dataset": "humaneval", "dataset_format": "apps"},
    {"problems": "HumanEval/0"}, {"problems": [1, 2]}, {"problems": []},
])
def test_constructor_validates_arguments(bad):
    with pytest.raises(ValueError):
        CodeEnv(**bad)


def test_a_missing_dataset_file_is_one_clear_error(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        CodeEnv(dataset={"source": str(tmp_path / "apps.jsonl"), "format": "apps"})


def test_old_flat_data_keywords_load_as_the_same_source(caplog):
    """Env configs written before ``dataset:`` became a mapping (an old checkpoint's)."""
    new = CodeEnv(dataset={"source": "generated", "test_fraction": 0.5}, code_runner=_fake_runner)
    with caplog.at_level("WARNING", logger="pettingllms_envs.code"):
        old = CodeEnv(dataset="generated", test_fraction=0.5, code_runner=_fake_runner)
    assert old.data == new.data == CodeData(source="generated", test_fraction=0.5)
    assert "this is dataset={'source': 'generated', 'test_fraction': 0.5}" in caplog.text
    assert ([p.id for p in old.problem_set.bucket("test")]
            == [p.id for p in new.problem_set.bucket("test")])
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['data_format'\]"):
        CodeEnv(data_format="apps")


def test_defaults():
    env = CodeEnv()
    assert len(env.problem_set) == 164 and env.workflow == [("coder", "tester")]
    assert env.max_turns == 3 and env.alpha == 1.0 and env.invalid_action_penalty == -1.0
    assert env.reward_config.max_tests_per_answer == 5
    assert env.reward_config.max_hidden_tests is None and env.reward_config.float_tolerance is None
    assert env.sandbox_limits.wall_time_s == 3 and env.prompt_style == "full"
    assert env.test_fraction == 0.2 and env.data == CodeData()


# ------------------------------------------------------------------------------ instances
def test_seeds_reproduce_instances_and_different_seeds_differ():
    tasks = []
    for seed in range(32):
        first, second = CodeEnv(), CodeEnv()
        obs_a, _ = first.reset(seed=seed)
        obs_b, _ = second.reset(seed=seed)
        assert first.task is second.task and obs_a == obs_b
        tasks.append(first.task.id)
    assert len(set(tasks)) == 32


def test_training_seeds_never_reach_evaluation_problems():
    env = CodeEnv()
    train = {p.id for p in env.problem_set.bucket("train")}
    test = {p.id for p in env.problem_set.bucket("test")}
    assert train and test and not train & test and len(train | test) == 164
    assert all(problem_split(i, 0.2) == "test" for i in test)

    def task_id(seed):
        env.reset(seed=seed)
        return env.task.id

    assert {task_id(s) for s in range(0, 400, 3)} <= train
    assert {task_id(TRAIN_SEED_LIMIT + s) for s in range(len(test))} == test
    for _ in range(5):
        env.reset()
        assert env.task.id in train  # seed=None draws a training problem


def test_a_given_task_by_problem_record_or_id():
    env = CodeEnv(problems=[DOUBLE, THIRD], code_runner=_fake_runner)
    for task in (DOUBLE, DOUBLE.to_record(), "hand/double"):
        env.reset(seed=5, options={"task": task})
        assert env.task == DOUBLE
    for bad in ("no/such-id", {"id": "x"}, 42):
        with pytest.raises(ValueError):
            env.reset(options={"task": bad})


def test_an_empty_bucket_is_a_clear_error():
    env = CodeEnv(problems=[DOUBLE], dataset={"test_fraction": 0.0}, code_runner=_fake_runner)
    env.reset(seed=7)
    with pytest.raises(ValueError, match="no test problems"):
        env.reset(seed=TRAIN_SEED_LIMIT)


# ------------------------------------------------------------------------------ tester format
@pytest.mark.parametrize("text, expected", [
    ("Input:\n1 2\nOutput:\n3", [("1 2", "3")]),
    ("input: 5\noutput: 10\n\nINPUT: 6\nOUTPUT: 12", [("5", "10"), ("6", "12")]),
    ("**Test 1:**\n**Input:**\n```\n3\n1 2 3\n```\n**Expected Output:**\n```\n6\n```",
     [("3\n1 2 3", "6")]),
    ("Test case 2: Input: `f(1)` -> Output: 2", [("f(1)", "2")]),
    ("Input:\n```\na\n\nb\n```\nOutput:\n```\nx\n\ny\n```", [("a\n\nb", "x\n\ny")]),
    ("Input:\n4\nOutput:\n8\nBecause 4 doubled is 8.\n\nMore prose.",  # up to a blank line
     [("4", "8\nBecause 4 doubled is 8.")]),
    ("Input:\n4\n\nSome words.\nOutput:\n8\n\nExplanation", [("4", "8")]),
    ("stdin: 1\nstdout: 1\nexpected: 2", [("1", "1")]),  # a second output is ignored
    ("Input: add(1, 2)\nOutput: 3", [("add(1, 2)", "3")]),
    ("Sample Input 1:\n1 1\nSample Output 1:\n2\n\n## Example 2\nInput #2: 2 2\nOutput #2: 4",
     [("1 1", "2"), ("2 2", "4")]),
    ("```python\nassert add(1, 2) == 3\nassert add('==', 'x') == '==x'\n```",
     [("add(1, 2)", "3"), ("add('==', 'x')", "'==x'")]),
    ('Tests:\n```json\n[{"input": "1 2", "output": "3"}, {"input": [1], "expected": true}]\n```',
     [("1 2", "3"), ("[1]", "true")]),
    ("Input:\n\nOutput:\n0", [("", "0")]),  # an empty input is a valid stdin
])
def test_tester_answers_that_parse(text, expected):
    result = parse_tester_answer(text)
    assert result.ok and [(t.input, t.output) for t in result.value] == expected


@pytest.mark.parametrize("text", [
    "", "I would test with small numbers.", "Input:\n1 2", "Output:\n3", "Input:\n1\nOutput:\n\n",
    '[{"input": "1"', "assert add(1, 2)", "assert add(1, 2) != 3", '[{"in": 1, "out": 2}]',
])
def test_tester_answers_that_do_not_parse(text):
    result = parse_tester_answer(text)
    assert not result.ok and result.value is None and result.error


# ------------------------------------------------------------------------------ rewards
def test_oracle_pair_solves_a_seeded_instance():
    env = CodeEnv(dataset="generated", code_runner=_fake_runner)
    env.reset(seed=11)
    tests = [(t.input.strip(), t.output.strip()) for t in env.task.tests]
    _, rewards, terms, truncs, infos = env.step(
        {"coder": _python(env.task.reference), "tester": _tests(*tests)})
    for agent in ("coder", "tester"):
        assert infos[agent]["success"] and infos[agent]["reward_team"] == 1.0
        assert infos[agent]["reward_local"] == 1.0 and rewards[agent] == 2.0
    assert all(terms.values()) and not any(truncs.values()) and env.agents == []
    assert "passed 6 of 6 hidden tests" in infos["coder"]["feedback"]


def test_coder_local_reward_is_the_hidden_pass_ratio():
    env = _env()
    code = _python(_table_code({"1\n": "2\n", "2\n": "4\n", "3\n": "7\n"}))
    _, rewards, terms, _, infos = env.step({"coder": code, "tester": "Input:\n3\nOutput:\n6"})
    assert infos["coder"]["reward_local"] == pytest.approx(2 / 4)
    assert infos["coder"]["reward_team"] == 0.0 and not infos["coder"]["success"]
    assert rewards["coder"] == pytest.approx(0.5) and not any(terms.values())


def test_tester_local_reward_is_the_share_the_reference_agrees_with():
    env = _env(alpha=0.5)
    answer = _tests(("1", "2"), ("2", "4"), ("3", "7"))  # 3 -> 6, so the last is wrong
    _, rewards, _, _, infos = env.step({"coder": _python(DOUBLE.reference), "tester": answer})
    assert infos["tester"]["reward_local"] == pytest.approx(2 / 3)
    assert rewards["tester"] == pytest.approx(0.5 * 1.0 + 2 / 3)
    assert "agrees with 2 of your 3 tests" in infos["tester"]["feedback"]


def test_without_a_reference_the_tester_scores_zero_and_is_told_why():
    env = _env(NO_REFERENCE)
    _, _, _, _, infos = env.step({"coder": "none", "tester": _tests(("1", "1"))})
    assert infos["tester"]["reward_local"] == 0.0 and infos["tester"]["parse_error"] is None
    assert "no reference solution" in infos["tester"]["feedback"]


def test_unparsable_answers_get_the_penalty_and_are_flagged():
    env = _env(invalid_action_penalty=-2.0)
    _, rewards, terms, _, infos = env.step({"coder": "print(2 * n)", "tester": "test big n"})
    for agent in ("coder", "tester"):
        assert infos[agent]["parse_error"] and rewards[agent] == -2.0
    assert not any(terms.values()) and not infos["coder"]["success"]


def test_passing_every_tester_test_ends_the_episode_even_if_hidden_tests_fail():
    env = _env()
    code = _python(_table_code({"1\n": "2\n"}))
    _, rewards, terms, truncs, infos = env.step({"coder": code, "tester": _tests(("1", "2"))})
    assert all(terms.values()) and not any(truncs.values())
    assert infos["coder"]["reward_local"] == 0.25 and not infos["coder"]["success"]


def test_episode_truncates_after_max_turns():
    env = _env(max_turns=2)
    for turn in range(2):
        _, _, terms, truncs, _ = env.step({"coder": "no", "tester": _tests(("1", "2"))})
        assert not any(terms.values()) and all(truncs.values()) == (turn == 1)
    assert env.agents == []


def test_only_the_first_tests_of_an_answer_count():
    env = _env(max_tests_per_answer=2)
    answer = _tests(("1", "2"), ("2", "4"), ("3", "999"))
    _, _, terms, _, infos = env.step({"coder": _python(DOUBLE.reference), "tester": answer})
    assert infos["tester"]["reward_local"] == 1.0 and all(terms.values())
    assert "1 beyond the first 2 ignored" in infos["tester"]["feedback"]


def test_max_hidden_tests_limits_the_tests_behind_the_ratio():
    env = _env(max_hidden_tests=2)
    code = _python(_table_code({"1\n": "2\n", "2\n": "4\n"}))
    _, _, _, _, infos = env.step({"coder": code, "tester": ""})
    assert infos["coder"]["reward_local"] == 1.0 and infos["coder"]["success"]


def test_float_tolerance_decides_numeric_matches():
    code = _python(_table_code({"": "0.3333333\n"}))
    strict, loose = _env(THIRD), _env(THIRD, float_tolerance=1e-6)
    assert strict.step({"coder": code, "tester": ""})[4]["coder"]["reward_local"] == 0.0
    assert loose.step({"coder": code, "tester": ""})[4]["coder"]["reward_local"] == 1.0


# ------------------------------------------------------------------------------ prompts
def test_both_agents_see_the_others_last_output_and_the_mismatches():
    env = _env()
    code = _python(_table_code({"1\n": "2\n", "3\n": "7\n"}))
    obs, *_ = env.step({"coder": code, "tester": _tests(("1", "2"), ("3", "6"))})
    coder, tester = obs["coder"], obs["tester"]
    assert "turn 2 of 3" in coder and "turn 2 of 3" in tester
    assert "Test 1: passed" in coder and "Test 2: FAILED" in coder
    assert ("Input:\n```\n3\n```\nExpected output:\n```\n6\n```\nCode output:\n```\n7\n```"
            in coder)
    assert 'ANSWERS = {"1\\n": "2\\n"' in coder  # its own previous code
    assert 'ANSWERS = {"1\\n": "2\\n"' in tester and "Test 2: the coder's code disagrees" in tester
    assert DOUBLE.prompt in coder and DOUBLE.prompt in tester
    obs, *_ = env.step({"coder": "no code", "tester": "no tests"})
    assert "no readable tests" in obs["coder"] and "no usable code" in obs["tester"]


def test_function_problems_show_the_signature_and_the_call_format():
    env = CodeEnv(code_runner=_fake_runner)
    obs, _ = env.reset(seed=0, options={"task": "HumanEval/0"})
    assert "def has_close_elements(numbers: List[float], threshold: float) -> bool:" in obs["coder"]
    assert "Define `has_close_elements`" in obs["coder"]
    assert "Input: has_close_elements(<arguments>)" in obs["tester"]


def test_compact_prompt_keeps_the_state_and_the_answer_format():
    env = _env(prompt_style="compact")
    obs, _ = env.reset(seed=0, options={"task": DOUBLE})
    assert "```python\na, b = map(int, input().split())" in obs["coder"]
    assert "Input:\n3 4\nOutput:\n7" in obs["tester"]
    obs, *_ = env.step({"coder": _python(_table_code({"1\n": "2\n"})),
                        "tester": _tests(("1", "2"), ("2", "4"))})
    assert "Turn 2 of 3" in obs["coder"] and "failed 1 of 2 tests" in obs["coder"]
    assert 'Input: "2" | expected: "4" | got: ""' in obs["coder"]
    assert "ANSWERS" in obs["tester"] and "failed 1 of your 2 tests" in obs["tester"]
    assert all(len(text) < 700 for text in obs.values())
    with pytest.raises(ValueError, match="accepted: \\('full', 'compact'\\)"):
        CodeEnv(prompt_style="tiny")


# ------------------------------------------------------------------------------ real sandbox
def test_real_sandbox_partial_ratio_and_a_wrong_test_lowers_the_tester_reward():
    env = CodeEnv(sandbox_limits=FAST)
    env.reset(seed=0, options={"task": "HumanEval/0"})
    coder = _python("def has_close_elements(numbers, threshold):\n    return True\n")
    tester = ("Input: has_close_elements([1.0, 2.0], 0.5)\nOutput: False\n\n"
              "Input: has_close_elements([1.0, 1.1], 0.5)\nOutput: False\n")  # wrong: True
    _, rewards, terms, _, infos = env.step({"coder": coder, "tester": tester})
    assert infos["coder"]["reward_local"] == pytest.approx(4 / 7) and not infos["coder"]["success"]
    assert infos["tester"]["reward_local"] == pytest.approx(1 / 2)
    assert "disagreed with 2 of them" in infos["tester"]["feedback"] and not any(terms.values())


def test_real_sandbox_correct_stdio_solution_of_a_generated_problem():
    env = CodeEnv(dataset="generated", sandbox_limits=FAST)
    env.reset(seed=2)
    first = env.task.tests[0]
    _, rewards, terms, _, infos = env.step(
        {"coder": _python(env.task.reference),
         "tester": _tests((first.input.strip(), first.output.strip()))})
    assert infos["coder"]["success"] and rewards == {"coder": 2.0, "tester": 2.0}
    assert all(terms.values())


# ------------------------------------------------------------------------------ hostile input
_STDIO_ENV = CodeEnv(dataset="generated", code_runner=_echo_runner)
_FUNCTION_ENV = CodeEnv(code_runner=_echo_runner)
_ECHOES = []
for _env_ in (_STDIO_ENV, _FUNCTION_ENV,
              CodeEnv(dataset="generated", code_runner=_echo_runner, prompt_style="compact")):
    _ECHOES += list(_env_.reset(seed=1)[0].values())
    _ECHOES += list(_env_.step({"coder": _python("print(1)\n"),
                                "tester": _tests(("1", "2"))})[0].values())
_PIECES = ["Input:", "Output:", "input: ", "**Expected Output:**", "Test 1:", "```", "```\n",
           "```python\n", "```json\n", "\n", "\n\n", " ", "1 2", "assert f(1) == 2",
           "assert ((((", '[{"input": ', '"output": ', "}", "]", "[", "{", '"', "`", "->",
           "\x00", "\ufffd", "é", "🙂", "\r\n", "Input: f(1) Output: 2", "x" * 50]
_hostile = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    st.sampled_from(_ECHOES),
    st.tuples(st.sampled_from(_ECHOES), st.text(max_size=20)).map("".join),
    st.tuples(st.text(max_size=12), st.integers(50, 1000)).map(lambda p: p[0] * p[1]),
    st.sampled_from(["", " ", "\n" * 1000, "```" * 2000, "Input:\n" * 3000,
                     "Input: 1\nOutput: 2\n" * 500, "[" * 5000, "assert " + "(" * 1500,
                     "```python\n" * 500 + "print(1)\n" + "```\n" * 500,
                     '[{"input": "1", "output": "2"}' * 300]),
)


@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_hostile)
def test_parsers_never_raise_on_hostile_text(text):
    for parser in (extract_python_code, parse_tester_answer):
        result = parser(text)
        assert isinstance(result, ParseResult) and result.ok == (result.error is None)
    tests = parse_tester_answer(text)
    if tests.ok:
        assert 0 < len(tests.value) <= 100
        assert all(isinstance(t, TestCase) and t.output.strip() for t in tests.value)


# 500, not the 2000 of the parser tests: every example that parses runs in the sandbox.
@settings(max_examples=500, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_hostile, st.sampled_from([_STDIO_ENV, _FUNCTION_ENV]))
def test_env_step_never_raises_on_hostile_text(text, env):
    env.reset(seed=3)
    obs, rewards, _, _, infos = env.step({"coder": text, "tester": text})
    assert all(math.isfinite(r) for r in rewards.values())
    for agent, observation in obs.items():
        assert env.observation_space(agent).contains(observation)


_NO_CODE, _NO_TESTS = "no complete ```python code block", "no test cases found"


@pytest.mark.parametrize("text,code,tests", [
    ("x" * 5_000_000, _NO_CODE, _NO_TESTS),
    ("Input:\n" * 200_000, _NO_CODE, _NO_TESTS),
    ("Input: 1\nOutput: 2\n" * 250_000, _NO_CODE,
     ParseResult(value=(TestCase(input="1", output="2"),) * MAX_PARSED_TESTS)),
    ("```\n" * 300_000, _NO_CODE, _NO_TESTS),
    ("[" * 2_000_000, _NO_CODE, _NO_TESTS),
    ("assert f(1) == 2\n" * 200_000, _NO_CODE,
     ParseResult(value=(TestCase(input="f(1)", output="2"),) * MAX_PARSED_TESTS)),
    # five megabytes of junk, then a real block: found
    ("x" * 5_000_000 + "\n```python\nprint(1)\n```\n", ParseResult(value="print(1)"), _NO_TESTS),
    ("x" * 5_000_000 + "\nInput: 3\nOutput: 4\n", _NO_CODE,
     ParseResult(value=(TestCase(input="3", output="4"),))),
], ids=["x", "inputs", "pairs", "fences", "brackets", "asserts", "junk_then_code",
        "junk_then_test"])
def test_parsers_handle_megabytes_of_text(text, code, tests):
    for parser, expected in ((extract_python_code, code), (parse_tester_answer, tests)):
        parse_within_bound(parser, text, expected)


def test_load_humaneval_is_the_default_problem_list():
    assert CodeEnv().problem_set.problems == load_humaneval()
