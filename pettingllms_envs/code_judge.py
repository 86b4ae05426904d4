"""Judging code against tests: output comparison, the function-call harness, and test runs.

Two kinds of problems (see :mod:`pettingllms_envs.code_data`):

* **stdio**: the program reads a test's ``input`` on stdin; its stdout must match the test's
  ``output`` under :func:`compare_outputs`.
* **function**: the program defines a function (``entry_point``, e.g. ``"add"`` or
  ``"Solution.add"`` for a LeetCode-style class). It is run inside a *harness* program (the
  solution is embedded as a string and ``exec``-ed **inside the sandbox**) that runs ONE test
  unit read from stdin and reports a result line. A unit is either

  - a *call* test: ``input`` is the call (``add(1, 2)``, ``Solution().add(1, 2)``) or just its
    argument list (``1, 2``); ``output`` is the expected return value as a Python literal
    (JSON's ``true``/``false``/``null`` are accepted too). The value is read with
    ``ast.literal_eval``, never evaluated against the solution, so a test cannot make the
    expected value agree with the code by calling it. The returned value must be made of
    built-in types only (numbers, strings, bytes, None, lists, tuples, dicts, sets): an object
    with a custom ``__eq__`` fails instead of matching everything. Comparison: Python ``==`` on
    those types, except that lists and tuples compare as sequences (JSON has no tuples) and,
    with ``float_tolerance``, numbers compare within the tolerance of :func:`numbers_close`;
  - a *script* test (HumanEval's split ``check`` asserts): statements run with ``candidate``
    bound to the function and the solution's globals in scope; it passes if nothing raises.

Where the verdict comes from (reward integrity)
------------------------------------------------
The submission is optimised to raise its reward, so nothing it can write decides a verdict.
Its process (stage 1, :func:`harness_program`, one sandboxed run per test) is never given an
expected value, a nonce or anything else to forge: a call test's stdin holds the call's
arguments only, and the process reports nothing but what the function *returned*, encoded as
plain data (:mod:`pettingllms_envs.code_values`). The verdict is computed outside it:

* call tests: on the host, by :func:`same_value` between the decoded value and the expected
  literal, which never enters the sandbox;
* script tests (HumanEval's asserts): stage 1 runs the unit with ``candidate`` recording each
  call's arguments and returned value (an assert failing there decides nothing); then a second
  sandboxed run (stage 2, :func:`judge_program`) that contains no submitted code replays the
  unit with ``candidate`` answering from those records in call order (a call with other
  arguments than in the run fails) and the unit's own asserts decide; both stages seed
  ``random`` with 0, so tests that draw their inputs agree.

A submission that writes fake reports, exits early or fills its output can at worst be read as
having returned some plain value, which it could have returned honestly; it cannot be read as
having passed. What this does not stop: in a script test the unit's text (its expected values
included) is in stage 1's memory, so a program that searches its own process for the test and
returns what the assert wants passes it (see docs/sandbox.md, "not defended").
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import logging
import math
import re
import warnings
from pathlib import Path
from typing import Callable, Sequence

from pettingllms_envs.code_data import CodeProblem, TestCase
from pettingllms_envs.code_values import decode as decode_value
from pettingllms_envs.common import clip_text
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult, run_python_batch

logger = logging.getLogger(__name__)

#: ``(program, stdins) -> one SandboxResult per stdin``: what runs programs on test inputs
#: (the sandbox by default; a remote executor or a fake in tests).
BatchRunner = Callable[[str, Sequence[str]], Sequence[SandboxResult]]
#: Characters of a program's output (or returned value's repr) kept in a :class:`TestOutcome`.
GOT_CHARS = 1_000
RESULT_MARKER = "__pettingllms_harness_result__"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


# ------------------------------------------------------------------------------ comparison
def numbers_close(expected: float, got: float, tolerance: float) -> bool:
    """``|got - expected| <= tolerance * max(1, |expected|)``: absolute error for expected
    values up to 1 in magnitude, relative error above (the usual judge rule). Non-finite
    values must be equal."""
    if not (math.isfinite(expected) and math.isfinite(got)):
        return expected == got
    return abs(got - expected) <= tolerance * max(1.0, abs(expected))


def _tokens_match(expected: str, got: str, tolerance: float | None) -> bool:
    if expected == got:
        return True
    if tolerance is None or not (_NUMBER.fullmatch(expected) and _NUMBER.fullmatch(got)):
        return False
    return numbers_close(float(expected), float(got), tolerance)


def _significant_lines(text: str) -> list[str]:
    lines = _LINE_BREAK.split(text)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def compare_outputs(expected: str, got: str, *, float_tolerance: float | None = None) -> bool:
    """Whether a program's stdout ``got`` matches the ``expected`` output. Exactly:

    1. Both texts are split into lines at ``\\n``, ``\\r\\n`` and ``\\r``.
    2. Trailing lines that are empty or whitespace-only are dropped from both, so a missing or
       extra final newline (or trailing blank lines) does not matter; leading and inner blank
       lines do.
    3. Both must then have the same number of lines, and each pair of lines the same tokens,
       where a line's tokens are ``line.split()`` (any run of whitespace separates tokens, and
       leading/trailing whitespace on a line is ignored).
    4. Two tokens match when they are equal strings. With ``float_tolerance=t`` (a number
       >= 0), two tokens that are both decimal numbers (``[+-]digits[.digits][e[+-]digits]``,
       no ``nan``/``inf`` words) also match when :func:`numbers_close` holds, e.g. ``0.3333333``
       vs ``0.33333333`` for ``t=1e-6``, and ``3`` vs ``3.0``.
    """
    expected_lines, got_lines = _significant_lines(expected), _significant_lines(got)
    if len(expected_lines) != len(got_lines):
        return False
    for want, have in zip(expected_lines, got_lines):
        want_tokens, have_tokens = want.split(), have.split()
        if len(want_tokens) != len(have_tokens):
            return False
        if not all(_tokens_match(w, h, float_tolerance) for w, h in zip(want_tokens, have_tokens)):
            return False
    return True


# ------------------------------------------------------------------------------ programs
@functools.lru_cache(maxsize=1024)
def _is_complete_python(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source)
    except Exception:  # SyntaxError, or a recursion/memory error on pathological text
        return False
    return True


def solution_program(problem: CodeProblem, code: str) -> str:
    """The program a submission ``code`` stands for.

    stdio problems: ``code`` itself. Function problems: the starter code followed by ``code``
    when the starter code is valid Python on its own (HumanEval prompts: imports, helpers and a
    signature with its docstring), so both a full redefinition of the function and an indented
    body-only completion work and the prompt's helpers stay defined; otherwise (e.g. a
    LeetCode ``class Solution:`` header without a body) ``code`` alone.
    """
    if problem.kind == "function" and problem.starter_code.strip() \
            and _is_complete_python(problem.starter_code):
        return problem.starter_code.rstrip("\n") + "\n" + code
    return code


#: The shared value codec, embedded as source into both sandboxed programs below.
CODEC_SOURCE = (Path(__file__).parent / "code_values.py").read_text(encoding="utf-8")

_HARNESS = r"""
def _build(ast, json, os, sys, builtins, codec):
    # Stage 1, with the submission: run ONE test's calls and report only what the function
    # returned, encoded as data. No expected value, no nonce and no verdict exist in this
    # process; everything used after the solution ran is bound before it runs.
    parse, fix_locations = ast.parse, ast.fix_missing_locations
    Call, Name, Attribute, Load, Expression = ast.Call, ast.Name, ast.Attribute, ast.Load, \
        ast.Expression
    loads, dumps = json.loads, json.dumps
    write, exit_now, dup, dup2, open_fd = os.write, os._exit, os.dup, os.dup2, os.open
    devnull, write_only, read_stdin = os.devnull, os.O_WRONLY, sys.stdin.read
    encode = codec["encode"]
    type_, str_, isinstance_, getattr_, dict_, exec_, compile_, eval_, list_ = (
        type, str, isinstance, getattr, dict, exec, compile, eval, list)
    base_exception, assertion_error = BaseException, AssertionError
    import random
    seed = random.seed
    prelude = ("from typing import *\n"
               "import bisect, collections, functools, heapq, itertools, math, re, string\n")

    def describe(exc):
        text = str_(exc)
        return (type_(exc).__name__ + (": " + text if text else ""))[:300]

    def arguments(text, scope, name):
        call = None
        try:
            tree = parse(text.strip(), mode="eval").body
            if isinstance_(tree, Call) and (
                    (isinstance_(tree.func, Name) and tree.func.id == name)
                    or (isinstance_(tree.func, Attribute) and tree.func.attr == name)):
                call = tree
        except Exception:
            pass
        if call is None:
            try:
                call = parse("_pettingllms_args(" + text + "\n)", mode="eval").body
            except Exception:
                raise ValueError("the test input is not a call or an argument list") from None
        call.func = Name(id="_pettingllms_args", ctx=Load())
        scope = dict_(scope)
        scope["_pettingllms_args"] = lambda *args, **kwargs: (args, kwargs)
        return eval_(compile_(fix_locations(Expression(call)), "<test input>", "eval"), scope)

    def key(args, kwargs):
        try:
            return encode([list_(args), dict_(kwargs)])
        except base_exception:
            return None

    def main(solution, entry):
        unit = loads(read_stdin())
        out = dup(1)
        dup2(open_fd(devnull, write_only), 1)
        calls = []
        report = {"calls": calls, "error": ""}

        def recorded(function):
            def candidate(*args, **kwargs):
                entry_ = [key(args, kwargs), None]
                calls.append(entry_)
                try:
                    value = function(*args, **kwargs)
                except base_exception as exc:
                    entry_[1] = {"raised": describe(exc)}
                    raise
                try:
                    entry_[1] = {"value": encode(value)}
                except base_exception as exc:
                    entry_[1] = {"refused": describe(exc)}
                return value
            return candidate

        try:
            scope = {"__name__": "solution", "__builtins__": builtins}
            exec_(prelude, scope)
            exec_(compile_(solution, "solution.py", "exec"), scope)
            owner, _, method = entry.rpartition(".")
            function = getattr_(scope[owner](), method) if owner else scope[method]
            candidate = recorded(function)
            if unit["mode"] == "script":
                scope["candidate"] = candidate
                if not owner:  # a test may call the function by its own name (HumanEval/33)
                    scope[method] = candidate
                seed(0)  # stage 2 replays with the same seed: tests that draw inputs agree
                try:
                    exec_(compile_(unit["script"], "test.py", "exec"), scope)
                except assertion_error:
                    pass  # the verdict is not this process's to give
            else:
                args, kwargs = arguments(unit["input"], scope, method)
                candidate(*args, **kwargs)
        except base_exception as exc:
            report["error"] = describe(exc)
        try:
            line = dumps(report)
        except base_exception:
            line = dumps({"calls": [], "error": "unreportable result"})
        write(out, ("\n" + MARKER + line + "\n").encode("utf-8", "replace"))
        exit_now(0)

    return main


import ast, builtins, json, os, sys
_codec = {}
exec(CODEC, _codec)
_build(ast, json, os, sys, builtins, _codec)(_SOLUTION, _ENTRY)
"""

_JUDGE = r"""
# Stage 2, without the submission: replay a script test with `candidate` answering from the
# values stage 1 recorded, in call order, and let the test's own asserts decide. Exit 0: passed;
# exit 1: an assert failed; exit 2: the test could not run (message on stderr).
import json, random, sys
_codec = {}
exec(CODEC, _codec)
unit = json.loads(sys.stdin.read())
calls = [(c[0], c[1]) for c in unit["calls"]]
position = [0]


def candidate(*args, **kwargs):
    if position[0] >= len(calls):
        raise AssertionError("the test called the function more often than the run did")
    recorded_key, outcome = calls[position[0]]
    position[0] += 1
    try:
        key = _codec["encode"]([list(args), dict(kwargs)])
    except TypeError:
        key = None
    if recorded_key is None or key != recorded_key:
        raise AssertionError("the function was called with other arguments in the run")
    if "value" not in outcome:
        raise AssertionError("the function " + ("raised " + outcome["raised"]
                             if "raised" in outcome else outcome.get("refused", "failed")))
    return _codec["decode"](outcome["value"])


scope = {"__name__": "solution", "candidate": candidate}
exec(unit["starter"], scope)
scope["candidate"] = candidate
if unit["entry"] and "." not in unit["entry"]:
    scope[unit["entry"]] = candidate
exec("from typing import *\nimport bisect, collections, functools, heapq, itertools, math, "
     "re, string\n", scope)
random.seed(0)
try:
    exec(compile(unit["script"], "test.py", "exec"), scope)
except AssertionError as exc:
    sys.stderr.write("assertion failed: " + str(exc)[:300])
    sys.exit(1)
except BaseException as exc:
    sys.stderr.write((type(exc).__name__ + ": " + str(exc))[:300])
    sys.exit(2)
"""


def harness_program(problem: CodeProblem, code: str) -> str:
    """Stage 1 of a function problem's test: the program that runs one test unit (JSON on
    stdin, without its expected values) against the solution ``code`` (assembled by
    :func:`solution_program`) and prints what the function returned, as data."""
    if problem.kind != "function" or not problem.entry_point:
        raise ValueError(f"{problem.id}: harness programs are for function problems")
    program = solution_program(problem, code)
    header = (f"_SOLUTION = {program!r}\n_ENTRY = {problem.entry_point!r}\n"
              f"MARKER = {RESULT_MARKER!r}\nCODEC = {CODEC_SOURCE!r}\n")
    return header + _HARNESS


def judge_program() -> str:
    """Stage 2 of a script test: trusted code only (the test and the problem's starter code),
    replaying the values stage 1 recorded (see the module docstring)."""
    return f"CODEC = {CODEC_SOURCE!r}\n" + _JUDGE


def _unit_stdin(test: TestCase) -> str:
    """What stage 1 reads: a call test's input only (never its expected output), or the
    script."""
    if test.script is not None:
        return json.dumps({"mode": "script", "script": test.script})
    return json.dumps({"mode": "call", "input": test.input})


def stdio_input(text: str) -> str:
    """A test input as fed to stdin: ends with a newline unless it is empty."""
    return text if not text or text.endswith("\n") else text + "\n"


# ------------------------------------------------------------------------------ running
@dataclasses.dataclass(frozen=True)
class TestOutcome:
    """One test's verdict: ``got`` is the program's stdout (stdio) or the returned value's repr
    (function), clipped; ``error`` says why the test could not pass (crash, timeout, a bad test)
    and is empty when the program ran and only the output differed or matched."""

    passed: bool
    got: str = ""
    error: str = ""

    __test__ = False  # not a pytest class


def _failure_everywhere(count: int, reason: str) -> list[TestOutcome]:
    return [TestOutcome(False, "", reason) for _ in range(count)]


def _run_batch(runner: BatchRunner, program: str, stdins: list[str],
               task_name: str) -> list[SandboxResult] | str:
    try:
        results = list(runner(program, stdins))
    except Exception as exc:  # an executor failure must not crash a training run
        logger.warning("%s: code runner raised %r", task_name, exc)
        return f"the program could not be run ({type(exc).__name__})"
    if len(results) != len(stdins) or not all(isinstance(r, SandboxResult) for r in results):
        logger.warning("%s: code runner returned %d results for %d inputs", task_name,
                       len(results), len(stdins))
        return "the program could not be run (executor returned a bad result)"
    return results


def _stdio_outcome(test: TestCase, result: SandboxResult,
                   float_tolerance: float | None) -> TestOutcome:
    got = clip_text(result.stdout, GOT_CHARS)
    if not result.ok:
        return TestOutcome(False, got, clip_text(result.describe_failure(), GOT_CHARS))
    return TestOutcome(compare_outputs(test.output, result.stdout,
                                       float_tolerance=float_tolerance), got)


def _literal(text: str):
    """An expected return value: a Python literal, or JSON (``true``/``null``)."""
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("the expected output is not a Python literal") from None


def same_value(expected, got, tolerance: float | None) -> bool:
    """The call-test rule: ``==`` on built-in values, lists and tuples compare as sequences
    (JSON has no tuples), and with ``tolerance`` numbers compare by :func:`numbers_close`."""
    numbers, sequences = (bool, int, float), (list, tuple)
    if type(expected) in numbers and type(got) in numbers:
        if tolerance is not None and float in (type(expected), type(got)):
            return numbers_close(float(expected), float(got), tolerance)
        return expected == got
    if type(expected) in sequences and type(got) in sequences:
        return len(expected) == len(got) and all(
            same_value(a, b, tolerance) for a, b in zip(expected, got))
    if type(expected) is dict and type(got) is dict:
        return expected.keys() == got.keys() and all(
            same_value(expected[k], got[k], tolerance) for k in expected)
    return expected == got


def _stage_one_report(result: SandboxResult) -> dict | str:
    """The last report line of a stage-1 run, or why there is none."""
    for line in reversed(result.stdout.split("\n")):
        if line.startswith(RESULT_MARKER):
            try:
                report = json.loads(line[len(RESULT_MARKER):])
            except (ValueError, RecursionError):
                break
            if isinstance(report, dict) and isinstance(report.get("calls"), list) \
                    and isinstance(report.get("error"), str):
                return report
            break
    reason = result.describe_failure() if not result.ok else ""
    return reason or "the test harness did not report a result (the program ended it)"


def _last_value(report: dict) -> tuple[str, str]:
    """``(repr of the last returned value, why there is none)`` from a stage-1 report."""
    if not report["calls"]:
        return "", report["error"] or "the function was never called"
    entry = report["calls"][-1]
    outcome = entry[1] if isinstance(entry, list) and len(entry) == 2 else None
    if not isinstance(outcome, dict):
        return "", report["error"] or "the function did not return"
    if "value" in outcome:
        try:
            return clip_text(repr(decode_value(outcome["value"])), GOT_CHARS), ""
        except (ValueError, RecursionError):
            return "", "the run reported a malformed value"
    if "refused" in outcome:
        return "", (f"{outcome['refused']}; only built-in values (numbers, strings, lists, "
                    f"tuples, dicts, sets, None) are compared")
    return "", str(outcome.get("raised", report["error"]))


def _call_outcome(test: TestCase, result: SandboxResult,
                  float_tolerance: float | None) -> TestOutcome:
    report = _stage_one_report(result)
    if isinstance(report, str):
        return TestOutcome(False, "", clip_text(report, GOT_CHARS))
    got, why = _last_value(report)
    if why:
        return TestOutcome(False, got, clip_text(report["error"] or why, GOT_CHARS))
    try:
        expected = _literal(test.output)
    except ValueError as exc:
        return TestOutcome(False, got, str(exc))
    value = decode_value(report["calls"][-1][1]["value"])
    return TestOutcome(same_value(expected, value, float_tolerance), got)


def _script_outcomes(problem: CodeProblem, tests: list[TestCase],
                     results: Sequence[SandboxResult], runner: BatchRunner,
                     task_name: str) -> list[TestOutcome]:
    """Stage 2 for script tests: one clean run per test replays the recorded values."""
    reports = [_stage_one_report(r) for r in results]
    starter = problem.starter_code if _is_complete_python(problem.starter_code) else ""
    pending = [i for i, report in enumerate(reports) if not isinstance(report, str)]
    stdins = [json.dumps({"script": tests[i].script, "calls": reports[i]["calls"],
                          "starter": starter, "entry": problem.entry_point or ""})
              for i in pending]
    verdicts = _run_batch(runner, judge_program(), stdins, task_name) if stdins else []
    outcomes: list[TestOutcome] = []
    by_index = dict(zip(pending, verdicts)) if not isinstance(verdicts, str) else {}
    for i, report in enumerate(reports):
        if isinstance(report, str):
            outcomes.append(TestOutcome(False, "", clip_text(report, GOT_CHARS)))
            continue
        got, _ = _last_value(report)
        verdict = by_index.get(i)
        if verdict is None:
            outcomes.append(TestOutcome(False, got, verdicts if isinstance(verdicts, str)
                                        else "the test could not be judged"))
        elif verdict.ok:
            outcomes.append(TestOutcome(True, got))
        elif verdict.exit_code == 1 and not report["error"]:
            outcomes.append(TestOutcome(False, got))
        else:
            reason = report["error"] or verdict.stderr.strip() or verdict.describe_failure()
            outcomes.append(TestOutcome(False, got, clip_text(reason, GOT_CHARS)))
    return outcomes


def run_tests(problem: CodeProblem, code: str, tests: Sequence[TestCase], *,
              limits: SandboxLimits, runner: BatchRunner | None = None,
              float_tolerance: float | None = None, task_name: str = "code") -> list[TestOutcome]:
    """Run submission ``code`` for ``problem`` on ``tests``: one outcome per test, in order.

    Never raises for anything the code or the tests do; an executor that raises or returns the
    wrong number of results fails every test (logged). ``runner`` replaces
    :func:`run_python_batch` (default, with ``limits``).
    """
    tests = list(tests)
    if not tests:
        return []
    if runner is None:
        runner = functools.partial(run_python_batch, limits=limits)
    if problem.kind == "stdio":
        if any(t.script is not None for t in tests):
            raise ValueError(f"{problem.id}: script tests need a function problem")
        results = _run_batch(runner, code, [stdio_input(t.input) for t in tests], task_name)
        if isinstance(results, str):
            return _failure_everywhere(len(tests), results)
        return [_stdio_outcome(t, r, float_tolerance) for t, r in zip(tests, results)]
    program = harness_program(problem, code)
    results = _run_batch(runner, program, [_unit_stdin(t) for t in tests], task_name)
    if isinstance(results, str):
        return _failure_everywhere(len(tests), results)
    if any(t.script is not None for t in tests):
        script_at = [i for i, t in enumerate(tests) if t.script is not None]
        judged = _script_outcomes(problem, [tests[i] for i in script_at],
                                  [results[i] for i in script_at], runner, task_name)
        by_index = dict(zip(script_at, judged))
        return [by_index[i] if i in by_index else _call_outcome(t, results[i], float_tolerance)
                for i, t in enumerate(tests)]
    return [_call_outcome(t, r, float_tolerance) for t, r in zip(tests, results)]
