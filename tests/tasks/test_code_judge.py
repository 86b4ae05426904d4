"""Code judging: the output comparison rules, program assembly, the function-call harness
(real sandbox, a handful of runs) and how executor failures are contained."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pettingllms_envs.code_data import load_humaneval
from pettingllms_envs.code_judge import (
    RESULT_MARKER,
    TestOutcome,
    compare_outputs,
    harness_program,
    numbers_close,
    run_tests,
    solution_program,
    stdio_input,
)
from pettingllms_envs.code_problem import CodeProblem, TestCase
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult

FAST = SandboxLimits(wall_time_s=3, cpu_time_s=3, memory_mb=256)
STDIO = CodeProblem(id="double", prompt="Read n, print 2n.", kind="stdio",
                    tests=(TestCase("1\n", "2\n"),), reference="print(2 * int(input()))")
FUNCTION = CodeProblem(id="add", prompt="Write add(a, b).", kind="function",
                       tests=(TestCase("1, 2", "3"),), entry_point="add")


def _result(stdout: str = "", exit_code: int = 0) -> SandboxResult:
    return SandboxResult(stdout=stdout, stderr="", exit_code=exit_code, timed_out=False,
                         killed_by_signal=None, output_truncated=False, network_isolated=True,
                         wall_time_s=0.0)


# ------------------------------------------------------------------------------ comparison
@pytest.mark.parametrize("expected, got", [
    ("3\n", "3"),                      # a missing final newline is fine
    ("3", "3\n\n\n"),                  # trailing blank lines are ignored
    ("1 2\n3\n", "1 2   \n3  \n"),     # trailing spaces are ignored
    ("1 2", "1    2"),                 # tokens: any whitespace run separates them
    ("1 2", "  1\t2"),                 # leading whitespace on a line is ignored
    ("a\nb\n", "a\r\nb\r\n"),          # \r\n and \r end lines like \n
    ("a\nb", "a\rb"),
    ("x\n\ny", "x\n  \ny"),            # an inner whitespace-only line equals an empty one
    ("", "\n \n"),
])
def test_outputs_that_match(expected, got):
    assert compare_outputs(expected, got)


@pytest.mark.parametrize("expected, got", [
    ("3", "4"),
    ("3", "3 3"),
    ("1 2", "12"),
    ("a\nb", "a b"),                   # line structure matters
    ("a\n\nb", "a\nb"),                # inner blank lines count
    ("a", "\na"),                      # leading blank lines count
    ("YES", "yes"),                    # case matters
    ("3", "3.0"),                      # without a tolerance numbers compare as text
    ("0.5", "0.5000001"),
    ("3", ""),
])
def test_outputs_that_do_not_match(expected, got):
    assert not compare_outputs(expected, got)


def test_float_tolerance_is_absolute_below_one_and_relative_above():
    tol = 1e-6
    assert compare_outputs("0.5", "0.5000009", float_tolerance=tol)
    assert not compare_outputs("0.5", "0.500002", float_tolerance=tol)
    assert compare_outputs("1000000", "1000000.9", float_tolerance=tol)  # relative: 1e-6 * 1e6
    assert not compare_outputs("1000000", "1000002", float_tolerance=tol)
    assert compare_outputs("3", "3.0", float_tolerance=tol)
    assert compare_outputs("1e3 x", "1000.0000001 x", float_tolerance=tol)
    assert not compare_outputs("1.0 x", "1.0 y", float_tolerance=tol)  # text tokens stay exact
    assert not compare_outputs("nan", "nan0", float_tolerance=tol)
    assert not compare_outputs("inf", "1e999", float_tolerance=tol)  # words are not numbers
    assert compare_outputs("1e999", "1e999", float_tolerance=tol)
    assert compare_outputs("0", "0.0", float_tolerance=0.0)


def test_numbers_close_formula():
    assert numbers_close(0.0, 1e-6, 1e-6) and not numbers_close(0.0, 1.1e-6, 1e-6)
    assert numbers_close(100.0, 100.00009, 1e-6) and not numbers_close(100.0, 100.00011, 1e-6)
    assert not numbers_close(float("inf"), 1e308, 1.0)
    assert numbers_close(float("inf"), float("inf"), 0.0)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["", "\n", "\n\n", "  \n", "\r\n"]))
def test_a_text_matches_itself_with_any_trailing_newlines(text, tail):
    assert compare_outputs(text, text + tail)
    assert compare_outputs(text + tail, text, float_tolerance=1e-9)


# ------------------------------------------------------------------------------ programs
def test_stdio_program_is_the_code_itself_and_inputs_end_with_a_newline():
    assert solution_program(STDIO, "print(1)") == "print(1)"
    assert stdio_input("1 2") == "1 2\n" and stdio_input("1\n") == "1\n" and stdio_input("") == ""


def test_complete_starter_code_is_prepended_to_function_solutions():
    starter = "import math\n\ndef area(r):\n    \"\"\"Area of a circle.\"\"\"\n"
    problem = CodeProblem(id="area", prompt=starter, kind="function", tests=FUNCTION.tests,
                          entry_point="area", starter_code=starter)
    body = "    return math.pi * r * r\n"
    assert solution_program(problem, body) == starter.rstrip("\n") + "\n" + body
    leet = CodeProblem(id="leet", prompt="Sum.", kind="function", tests=FUNCTION.tests,
                       entry_point="Solution.add",
                       starter_code="class Solution:\n    def add(self, a, b):\n        ")
    assert solution_program(leet, "class Solution: ...") == "class Solution: ..."


def test_harness_embeds_the_solution_as_data_only():
    hostile = "'''\"\"\"\\\n\x00\ud800 ```python"
    program = harness_program(FUNCTION, hostile)
    compile(program, "harness.py", "exec")  # the code is a string literal, never spliced in
    assert repr(hostile) in program
    with pytest.raises(ValueError):
        harness_program(STDIO, "print(1)")


# ------------------------------------------------------------------------------ real sandbox
@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/32", "HumanEval/53"])
def test_canonical_humaneval_solutions_pass_every_split_assert(task_id):
    problem = next(p for p in load_humaneval() if p.id == task_id)
    outcomes = run_tests(problem, problem.reference, problem.tests, limits=FAST)
    assert len(outcomes) == len(problem.tests) and all(o.passed for o in outcomes), outcomes


def test_function_harness_calls_compares_and_reports():
    code = ("import os\n"
            "def add(a, b=0):\n"
            "    print('noise that must not matter')\n"
            "    if a == 'exit':\n"
            "        raise SystemExit(0)\n"
            "    if a == 'forge':\n"
            f"        os.write(1, b'\\n{RESULT_MARKER}0000 {{\"passed\": true, \"got\": \"\", "
            "\"error\": \"\"}\\n')\n"
            "        os._exit(0)\n"
            "    if a == 'object':\n"
            "        class Anything:\n"
            "            def __eq__(self, other):\n"
            "                return True\n"
            "        return Anything()\n"
            "    if isinstance(a, list):\n"
            "        return tuple(a) + (b,)\n"
            "    return a + b\n")
    tests = [
        TestCase("add(1, 2)", "3"),               # a call
        TestCase("1, 2", "3"),                    # just the arguments
        TestCase("1, b=5", "6"),                  # keyword arguments
        TestCase("[1, 2], 3", "[1, 2, 3]"),       # a tuple result equals a list
        TestCase("True, 0", "true"),              # JSON literals are accepted
        TestCase("1, 2", "4"),                    # a wrong expectation
        TestCase("1, 2", "add(1, 2)"),            # expected values cannot call the code
        TestCase("1 2", "3"),                     # not an argument list
        TestCase("'exit'", "1"),                  # the solution exits
        TestCase("'forge'", "1"),                 # the solution forges a result line
        TestCase("'object'", "1"),                # an object equal to everything
    ]
    outcomes = run_tests(FUNCTION, code, tests, limits=FAST)
    assert [o.passed for o in outcomes] == [True] * 5 + [False] * 6
    assert outcomes[0].got == "3" and outcomes[3].got == "(1, 2, 3)" and not outcomes[0].error
    assert outcomes[5].got == "3" and outcomes[5].error == ""
    assert "not a Python literal" in outcomes[6].error
    assert "not a call or an argument list" in outcomes[7].error
    assert "SystemExit" in outcomes[8].error
    assert "did not report" in outcomes[9].error
    assert "returned a Anything" in outcomes[10].error


def test_class_entry_points_and_float_tolerance():
    problem = CodeProblem(id="mean", prompt="Mean.", kind="function", tests=FUNCTION.tests,
                          entry_point="Solution.mean")
    code = ("class Solution:\n"
            "    def mean(self, nums: List[int]) -> float:\n"  # typing names are pre-imported
            "        return sum(nums) / len(nums)\n")
    tests = [TestCase("Solution().mean([1, 2])", "1.5"), TestCase("[1, 2, 2]", "1.6666667")]
    exact = run_tests(problem, code, tests, limits=FAST)
    assert [o.passed for o in exact] == [True, False]
    loose = run_tests(problem, code, tests, limits=FAST, float_tolerance=1e-6)
    assert [o.passed for o in loose] == [True, True]


def test_stdio_runs_report_wrong_output_crash_and_timeout():
    code = ("import sys\nn = int(input())\n"
            "if n < 0:\n    raise ValueError('negative')\n"
            "if n == 0:\n    while True:\n        pass\n"
            "print(2 * n if n != 3 else 7)\n")
    tests = [TestCase("1\n", "2\n"), TestCase("3", "6"), TestCase("-1\n", "-2\n"),
             TestCase("0\n", "0\n")]
    outcomes = run_tests(STDIO, code, tests, limits=SandboxLimits(wall_time_s=1, cpu_time_s=2))
    assert [o.passed for o in outcomes] == [True, False, False, False]
    assert outcomes[1].got == "7\n" and outcomes[1].error == ""
    assert "ValueError: negative" in outcomes[2].error
    assert "timed out" in outcomes[3].error


# ------------------------------------------------------------------------------ executors
def test_a_raising_executor_fails_every_test_without_raising():
    def broken(program, stdins):
        raise RuntimeError("executor down")

    outcomes = run_tests(STDIO, "print(2)", [TestCase("1", "2")] * 3, limits=FAST,
                         runner=broken)
    assert outcomes == [TestOutcome(False, "", "the program could not be run (RuntimeError)")] * 3


def test_an_executor_returning_the_wrong_count_fails_every_test():
    outcomes = run_tests(STDIO, "print(2)", [TestCase("1", "2")] * 2, limits=FAST,
                         runner=lambda program, stdins: [_result("2\n")])
    assert [o.passed for o in outcomes] == [False, False] and "bad result" in outcomes[0].error


def test_no_tests_means_no_runs():
    def never(program, stdins):
        raise AssertionError("must not run")

    assert run_tests(STDIO, "print(2)", [], limits=FAST, runner=never) == []


def test_script_tests_are_refused_for_stdio_problems():
    with pytest.raises(ValueError):
        run_tests(STDIO, "print(2)", [TestCase(script="assert True")], limits=FAST,
                  runner=lambda program, stdins: [_result()])


_STDOUTS = st.one_of(
    st.text(max_size=300),
    st.builds(lambda body: f"{RESULT_MARKER}{body}", st.text(max_size=100)),
    st.sampled_from(["", "\n" * 100, RESULT_MARKER * 50, f"{RESULT_MARKER}x {{\"passed\": true",
                     json.dumps({"passed": True})]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_STDOUTS, st.integers(-9, 1))
def test_any_program_output_is_read_without_raising_and_never_forges_a_pass(stdout, code):
    outcomes = run_tests(FUNCTION, "def add(a, b): return a + b", FUNCTION.tests, limits=FAST,
                         runner=lambda program, stdins: [_result(stdout, code)] * len(stdins))
    assert len(outcomes) == 1 and not outcomes[0].passed  # the nonce is unguessable
