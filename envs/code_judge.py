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

Everything untrusted (the solution, the test inputs, the reference) runs only in the sandbox
(:func:`pettingllms_envs.sandbox.run_python_batch`, one fresh process per test). The host only
parses text. The harness keeps a solution's prints, ``exit()`` calls and fake result lines from
being read as results (its result line carries a nonce drawn per batch and goes to a private
copy of stdout while the solution's stdout is /dev/null; everything it uses after the solution
ran is bound before); it resists accidents and naive reward hacks,
not code that deliberately inspects the harness's own frames.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import logging
import math
import re
import secrets
import warnings
from typing import Callable, Sequence

from pettingllms_envs.code_data import CodeProblem, TestCase
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


_HARNESS = r'''
def _build(ast, json, math, os, sys, builtins):
    # Everything the harness uses after the solution ran is bound here, before it runs, so a
    # solution that patches modules, builtins or this module's globals cannot change a verdict.
    parse, literal_eval, fix_locations = ast.parse, ast.literal_eval, ast.fix_missing_locations
    Call, Name, Attribute = ast.Call, ast.Name, ast.Attribute
    Load, Expression = ast.Load, ast.Expression
    loads, dumps, isfinite = json.loads, json.dumps, math.isfinite
    write, exit_now, dup, dup2 = os.write, os._exit, os.dup, os.dup2
    open_fd, devnull = os.open, os.devnull
    read_stdin, write_only = sys.stdin.read, os.O_WRONLY
    (type_, len_, all_, zip_, abs_, max_, float_, bool_, str_, repr_, isinstance_, getattr_, dict_,
     exec_, compile_, eval_) = (type, len, all, zip, abs, max, float, bool, str, repr,
                               isinstance, getattr, dict, exec, compile, eval)
    prelude = ("from typing import *\n"
               "import bisect, collections, functools, heapq, itertools, math, re, string\n")
    scalars = (bool, int, float, complex, str, bytes, type(None))
    containers = (list, tuple, dict, set, frozenset)
    numbers, sequences = (bool, int, float), (list, tuple)

    def plain(value, depth=0):
        kind = type_(value)
        if kind in scalars:
            return True
        if depth > 50 or kind not in containers:
            return False
        items = value.items() if kind is dict_ else ((item, None) for item in value)
        return all_(plain(a, depth + 1) and plain(b, depth + 1) for a, b in items)

    def same(expected, got, tolerance):
        if type_(expected) in numbers and type_(got) in numbers:
            if tolerance is not None and float_ in (type_(expected), type_(got)):
                expected, got = float_(expected), float_(got)
                if not (isfinite(expected) and isfinite(got)):
                    return expected == got
                return abs_(got - expected) <= tolerance * max_(1.0, abs_(expected))
            return expected == got
        if type_(expected) in sequences and type_(got) in sequences:
            return len_(expected) == len_(got) and all_(
                same(a, b, tolerance) for a, b in zip_(expected, got))
        if type_(expected) is dict_ and type_(got) is dict_:
            return expected.keys() == got.keys() and all_(
                same(expected[key], got[key], tolerance) for key in expected)
        return type_(expected) in scalars + containers and expected == got

    def describe(exc):
        text = str_(exc)
        return (type_(exc).__name__ + (": " + text if text else ""))[:300]

    def literal(text):
        text = text.strip()
        try:
            return literal_eval(text)
        except Exception:
            pass
        try:
            return loads(text)
        except Exception:
            raise ValueError("the expected output is not a Python literal") from None

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

    def run(unit, solution, entry, tolerance):
        expected = literal(unit["output"]) if unit["mode"] == "call" else None
        scope = {"__name__": "solution", "__builtins__": builtins}
        exec_(prelude, scope)
        exec_(compile_(solution, "solution.py", "exec"), scope)
        owner, _, method = entry.rpartition(".")
        candidate = getattr_(scope[owner](), method) if owner else scope[method]
        if unit["mode"] == "script":
            scope["candidate"] = candidate
            exec_(compile_(unit["script"], "test.py", "exec"), scope)
            return {"passed": True}
        args, kwargs = arguments(unit["input"], scope, method)
        got = candidate(*args, **kwargs)
        try:
            shown = repr_(got)[:1000]
        except Exception:
            shown = "<unprintable " + type_(got).__name__ + ">"
        if not plain(got):
            return {"got": shown, "error": "returned a " + type_(got).__name__
                    + "; only built-in values (numbers, strings, lists, tuples, dicts, sets, "
                    "None) are compared"}
        return {"passed": bool_(same(expected, got, tolerance)), "got": shown}

    def main(solution, entry, tolerance, marker):
        unit = loads(read_stdin())
        nonce = unit["nonce"]
        out = dup(1)
        dup2(open_fd(devnull, write_only), 1)
        result = {"passed": False, "got": "", "error": ""}
        try:
            result.update(run(unit, solution, entry, tolerance))
        except BaseException as exc:
            result["error"] = describe(exc)
        try:
            line = dumps({"passed": result["passed"] is True, "got": str_(result["got"]),
                          "error": str_(result["error"])})
        except BaseException:
            line = dumps({"passed": False, "got": "", "error": "unreportable result"})
        write(out, ("\n" + marker + nonce + " " + line + "\n").encode("utf-8", "replace"))
        exit_now(0)

    return main


import ast, builtins, json, math, os, sys
_build(ast, json, math, os, sys, builtins)(_SOLUTION, _ENTRY, _TOLERANCE, _MARKER)
'''


def harness_program(problem: CodeProblem, code: str, *,
                    float_tolerance: float | None = None) -> str:
    """The harness that runs one test unit (JSON on stdin) against a function problem's
    solution ``code`` (assembled by :func:`solution_program`)."""
    if problem.kind != "function" or not problem.entry_point:
        raise ValueError(f"{problem.id}: harness programs are for function problems")
    program = solution_program(problem, code)
    header = (f"_SOLUTION = {program!r}\n_ENTRY = {problem.entry_point!r}\n"
              f"_TOLERANCE = {float_tolerance!r}\n_MARKER = {RESULT_MARKER!r}\n")
    return header + _HARNESS


def _unit_stdin(test: TestCase, nonce: str) -> str:
    if test.script is not None:
        unit = {"mode": "script", "script": test.script}
    else:
        unit = {"mode": "call", "input": test.input, "output": test.output}
    unit["nonce"] = nonce
    return json.dumps(unit)


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


def _harness_outcome(result: SandboxResult, nonce: str) -> TestOutcome:
    prefix = RESULT_MARKER + nonce + " "
    for line in reversed(result.stdout.split("\n")):
        if line.startswith(prefix):
            try:
                report = json.loads(line[len(prefix):])
                return TestOutcome(report["passed"] is True,
                                   clip_text(str(report["got"]), GOT_CHARS),
                                   clip_text(str(report["error"]), GOT_CHARS))
            except (ValueError, KeyError, TypeError):
                break
    reason = result.describe_failure() if not result.ok else ""
    return TestOutcome(False, "", clip_text(reason or "the test harness did not report a "
                                            "result (the program ended it)", GOT_CHARS))


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
    nonce = secrets.token_hex(8)
    program = harness_program(problem, code, float_tolerance=float_tolerance)
    results = _run_batch(runner, program, [_unit_stdin(t, nonce) for t in tests], task_name)
    if isinstance(results, str):
        return _failure_everywhere(len(tests), results)
    return [_harness_outcome(r, nonce) for r in results]
