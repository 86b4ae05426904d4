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
The submission is optimised to raise its reward, so nothing it can write decides a verdict,
and no expected value ever enters its process.

* **call tests**: one sandboxed run per test (:func:`harness_program`) gets the call's
  arguments only and reports nothing but what the function *returned*, encoded as plain data
  (:mod:`pettingllms_envs.code_values`); the host compares it with the expected literal
  (:func:`same_value`).
* **script tests** (HumanEval's asserts): two sandboxes per test, talking only over pipes
  (:func:`~pettingllms_envs.sandbox.run_python_pair`). The judge (:func:`script_judge_program`)
  holds the trusted code only, the problem's starter code and the test, and runs the test with
  ``candidate`` asking the other sandbox for each call; the submission's side
  (:func:`answerer_program`) sees each call's arguments and answers with the returned value as
  data (or the exception it raised). The test's own asserts decide, and the verdict is the
  judge's exit status, which the submission cannot reach. ``random`` is seeded with 0 in the
  judge, so tests that draw their inputs are reproducible.

A submission that writes fake reports, exits early or fills its output can at worst be read as
having returned some plain value, which it could have returned honestly; it cannot be read as
having passed, and searching its own memory finds no test to copy.
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

from pettingllms_envs.code_problem import CodeProblem, TestCase
from pettingllms_envs.code_values import decode as decode_value
from pettingllms_envs.common import clip_text
from pettingllms_envs.sandbox import (PairResult, SandboxLimits, SandboxResult,
                                      SandboxUnavailableError, run_python_batch, run_python_pair)

logger = logging.getLogger(__name__)

#: ``(program, stdins) -> one SandboxResult per stdin``: what runs programs on test inputs
#: (the sandbox by default; a remote executor or a fake in tests).
BatchRunner = Callable[[str, Sequence[str]], Sequence[SandboxResult]]
#: ``(judge program, answerer program) -> PairResult``: what runs a script test's two sides,
#: connected by pipes (:func:`~pettingllms_envs.sandbox.run_python_pair` by default).
PairRunner = Callable[[str, str], PairResult]
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
def _build(ast, json, os, sys, builtins, codec, load):
    # A call test, with the submission: make ONE test's call and report only what the
    # function returned, encoded as data. No expected value, no nonce and no verdict exist in
    # this process; everything used after the solution ran is bound before it runs.
    parse, fix_locations = ast.parse, ast.fix_missing_locations
    Call, Name, Attribute, Load, Expression = ast.Call, ast.Name, ast.Attribute, ast.Load, \
        ast.Expression
    loads, dumps = json.loads, json.dumps
    write, exit_now, dup, dup2, open_fd = os.write, os._exit, os.dup, os.dup2, os.open
    devnull, write_only, read_stdin = os.devnull, os.O_WRONLY, sys.stdin.read
    encode = codec["encode"]
    type_, str_, isinstance_, dict_, compile_, eval_, list_ = (
        type, str, isinstance, dict, compile, eval, list)
    base_exception = BaseException

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
        try:
            scope, function, method = load(solution, entry)
            args, kwargs = arguments(unit["input"], scope, method)
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
_build(ast, json, os, sys, builtins, _codec, _loader(builtins))(_SOLUTION, _ENTRY)
"""

_ANSWERER = r"""
def _build(json, os, builtins, codec, load):
    # A script test, the submission's side: answer the judge's calls. The test never enters
    # this process: each request line holds one call's arguments, each answer line what the
    # function returned (as data), what it raised, or why the solution could not run.
    loads, dumps, write, exit_now = json.loads, json.dumps, os.write, os._exit
    encode, decode = codec["encode"], codec["decode"]
    type_, str_, list_, dict_ = type, str, list, dict
    base_exception = BaseException
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the solution's own reads and prints
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stay out of the conversation

    def describe(exc):
        text = str_(exc)
        return (type_(exc).__name__ + (": " + text if text else ""))[:300]

    def answer(document):
        try:
            data = (dumps(document) + "\n").encode("utf-8", "replace")
        except base_exception as exc:
            data = (dumps({"failed": "unreportable answer: " + describe(exc)}) + "\n").encode()
        while data:
            data = data[write(answers, data):]

    def main(solution, entry):
        # The submission runs only after the judge's first call: by then the judge has removed
        # its program file (the test's text), which matters where both sides share a uid.
        line = requests.readline(MAX_MESSAGE + 1)
        function, failure = None, ""
        try:
            function = load(solution, entry)[1]
        except base_exception as exc:
            failure = "the solution could not run: " + describe(exc)
        while True:
            if not line.endswith(b"\n"):
                exit_now(0)  # the judge is done (or sent too much)
            answer(respond(line, function, failure))
            line = requests.readline(MAX_MESSAGE + 1)

    def respond(line, function, failure):
        if failure:
            return {"failed": failure}
        try:
            args, kwargs = decode(loads(line)["args"])
            args, kwargs = list_(args), dict_(kwargs)
        except base_exception:
            return {"failed": "the judge sent a malformed call"}
        try:
            value = function(*args, **kwargs)
        except base_exception as exc:
            return {"raised": str_(exc)[:300], "type": type_(exc).__name__}
        try:
            return {"value": encode(value)}
        except base_exception as exc:
            return {"refused": describe(exc)}

    return main


import builtins, json, os
_codec = {}
exec(CODEC, _codec)
_build(json, os, builtins, _codec, _loader(builtins))(_SOLUTION, _ENTRY)
"""

_SCRIPT_JUDGE = r"""
# A script test, the judge's side: trusted code only (the problem's starter code and the
# test). `candidate` sends each call's arguments to the submission's sandbox (stdout) and reads
# its answer (stdin); the test's own asserts decide. Exit PASSED: passed; FAILED: an assert
# failed; UNJUDGEABLE: the test could not finish. A report line on stderr gives the last
# returned value and the reason.
import builtins, json, os, random, sys
try:
    os.unlink(__file__)  # the test's text lives on in this process only (see the answerer)
except OSError:
    pass
_codec = {}
exec(CODEC, _codec)
_requests = os.dup(1)
_answers = os.fdopen(os.dup(0), "rb")
os.dup2(2, 1)  # the test's own prints go to stderr, never into the conversation
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
_last = [""]


class _Unjudgeable(BaseException):
    # Not an Exception: a test's `except Exception` cannot swallow a broken conversation.
    pass


def _raised(answer):
    kind = getattr(builtins, str(answer.get("type", "")), None)
    message = str(answer.get("raised", ""))
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not AssertionError:
        return kind(message)
    return RuntimeError(message)


def candidate(*args, **kwargs):
    try:
        call = _codec["encode"]([list(args), dict(kwargs)])
        data = (json.dumps({"args": call}) + "\n").encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise _Unjudgeable("the test passes a value that cannot be sent to the program: "
                           + str(exc)[:200]) from None
    try:
        while data:
            data = data[os.write(_requests, data):]
    except OSError:
        raise _Unjudgeable("the program ended before it was called") from None
    line = _answers.readline(MAX_MESSAGE + 1)
    if not line.endswith(b"\n"):
        raise _Unjudgeable("the program's answer is too long" if len(line) > MAX_MESSAGE
                           else "the program ended without answering")
    try:
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError
        if "value" in answer:
            value = _codec["decode"](answer["value"])
            _last[0] = repr(value)[:GOT_CHARS]
            return value
    except (ValueError, TypeError, KeyError, RecursionError):
        raise _Unjudgeable("the program's answer is not a plain value") from None
    if "raised" in answer:
        raise _raised(answer)
    if "refused" in answer:
        raise _Unjudgeable(str(answer["refused"])[:300] + "; only built-in values (numbers, "
                           "strings, lists, tuples, dicts, sets, None) are compared")
    raise _Unjudgeable(str(answer.get("failed", "the program's answer is not a value"))[:300])


_code, _error = UNJUDGEABLE, ""
try:
    _scope = {"__name__": "solution"}
    exec(STARTER, _scope)  # the prompt's helpers (HumanEval/38's encode_cyclic)
    _scope["candidate"] = candidate
    if ENTRY and "." not in ENTRY:  # a test may call the function by its name (HumanEval/33)
        _scope[ENTRY] = candidate
    exec(PRELUDE, _scope)
    random.seed(0)
    exec(compile(SCRIPT, "test.py", "exec"), _scope)
    _code = PASSED
except AssertionError as exc:
    _code, _error = FAILED, ""
except BaseException as exc:
    _error = (type(exc).__name__ + ": " + str(exc))[:300] if not isinstance(exc, _Unjudgeable)         else str(exc)
sys.stderr.write("\n" + MARKER + json.dumps({"got": _last[0], "error": _error}) + "\n")
sys.stderr.flush()
os._exit(_code)
"""

#: Exit statuses of :func:`script_judge_program` (clear of the interpreter's own 1 and 2).
SCRIPT_PASSED, SCRIPT_FAILED, SCRIPT_UNJUDGEABLE = 0, 10, 11
#: Longest request or answer line (bytes) in a script test's conversation.
MAX_MESSAGE_BYTES = 1 << 20
#: Names every judged program sees, as HumanEval's prompts assume.
PRELUDE = ("from typing import *\n"
           "import bisect, collections, functools, heapq, itertools, math, re, string\n")


def harness_program(problem: CodeProblem, code: str) -> str:
    """A call test's program: runs one test's call (JSON on stdin, without its expected value)
    against the solution ``code`` (assembled by :func:`solution_program`) and prints what the
    function returned, as data."""
    return _with_solution(problem, code, _HARNESS)


def answerer_program(problem: CodeProblem, code: str) -> str:
    """A script test, the submission's side: answers the judge's calls, one line each, with
    what the solution ``code`` returned (see the module docstring)."""
    return _with_solution(problem, code, _ANSWERER)


def script_judge_program(problem: CodeProblem, test: TestCase) -> str:
    """A script test, the judge's side: trusted code only (``test``'s statements and the
    problem's starter code when it is valid Python), asking the submission's sandbox for each
    ``candidate`` call; its exit status is the verdict (:data:`SCRIPT_PASSED`, ...)."""
    if test.script is None:
        raise ValueError("script_judge_program needs a script test")
    starter = problem.starter_code if _is_complete_python(problem.starter_code) else ""
    return (f"CODEC = {CODEC_SOURCE!r}\nMARKER = {RESULT_MARKER!r}\nSCRIPT = {test.script!r}\n"
            f"STARTER = {starter!r}\nENTRY = {problem.entry_point or ''!r}\n"
            f"PRELUDE = {PRELUDE!r}\nMAX_MESSAGE = {MAX_MESSAGE_BYTES}\n"
            f"GOT_CHARS = {GOT_CHARS}\nPASSED, FAILED, UNJUDGEABLE = {SCRIPT_PASSED}, "
            f"{SCRIPT_FAILED}, {SCRIPT_UNJUDGEABLE}\n") + _SCRIPT_JUDGE


_LOADER = r"""
def _loader(builtins):
    # Runs the solution in a fresh scope (after the prelude HumanEval's prompts assume) and
    # returns (scope, function, method name); everything it uses is bound before.
    exec_, compile_, getattr_ = exec, compile, getattr

    def load(solution, entry):
        scope = {"__name__": "solution", "__builtins__": builtins}
        exec_(PRELUDE, scope)
        exec_(compile_(solution, "solution.py", "exec"), scope)
        owner, _, method = entry.rpartition(".")
        return scope, getattr_(scope[owner](), method) if owner else scope[method], method

    return load
"""


def _with_solution(problem: CodeProblem, code: str, body: str) -> str:
    if problem.kind != "function" or not problem.entry_point:
        raise ValueError(f"{problem.id}: harness programs are for function problems")
    program = solution_program(problem, code)
    return (f"_SOLUTION = {program!r}\n_ENTRY = {problem.entry_point!r}\n"
            f"MARKER = {RESULT_MARKER!r}\nCODEC = {CODEC_SOURCE!r}\nPRELUDE = {PRELUDE!r}\n"
            f"MAX_MESSAGE = {MAX_MESSAGE_BYTES}\n") + _LOADER + body


def _unit_stdin(test: TestCase) -> str:
    """What a call test's program reads: the call's input only, never its expected output."""
    return json.dumps({"input": test.input})


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
    except SandboxUnavailableError:
        raise  # no sandbox on this host: stop the run, never score it as the agent's failure
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


def _call_report(result: SandboxResult) -> dict | str:
    """The last report line of a call test's run, or why there is none."""
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
    """``(repr of the last returned value, why there is none)`` from a call test's report."""
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
    report = _call_report(result)
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


def _judge_report(result: SandboxResult) -> dict:
    """The last report line a script judge wrote on stderr (``got``, ``error``), or empty."""
    for line in reversed(result.stderr.split("\n")):
        if line.startswith(RESULT_MARKER):
            try:
                report = json.loads(line[len(RESULT_MARKER):])
            except (ValueError, RecursionError):
                return {}
            if isinstance(report, dict):
                return {k: v for k, v in report.items() if isinstance(v, str)}
            return {}
    return {}


def _script_outcome(pair: PairResult) -> TestOutcome:
    """A script test's verdict: the judge's exit status. The reason, if any: the program's
    side's failure when it failed (a limit, a crash: the judge then only saw it go quiet), else
    the judge's report."""
    judge, program = pair.judge, pair.program
    report = _judge_report(judge)
    got = clip_text(report.get("got", ""), GOT_CHARS)
    if judge.ok and judge.exit_code == SCRIPT_PASSED and not judge.timed_out:
        return TestOutcome(True, got)
    if judge.exit_code == SCRIPT_FAILED and not judge.timed_out:
        return TestOutcome(False, got)
    if not program.ok:  # killed, over a limit or exited: more telling than the judge's EOF
        reason = program.describe_failure()
    else:
        reason = report.get("error") or judge.describe_failure() or "the test could not be judged"
    return TestOutcome(False, got, clip_text(reason, GOT_CHARS))


def _script_outcomes(problem: CodeProblem, code: str, tests: list[TestCase],
                     pair_runner: PairRunner, task_name: str) -> list[TestOutcome]:
    """One judge/answerer pair per script test, one test after another."""
    answerer = answerer_program(problem, code)
    outcomes = []
    for test in tests:
        try:
            pair = pair_runner(script_judge_program(problem, test), answerer)
        except SandboxUnavailableError:
            raise  # no sandbox on this host: stop the run, never score it as the agent's failure
        except Exception as exc:  # an executor failure must not crash a training run
            logger.warning("%s: script-test runner raised %r", task_name, exc)
            outcomes.append(TestOutcome(False, "", f"the program could not be run "
                                                   f"({type(exc).__name__})"))
            continue
        if not isinstance(pair, PairResult):
            logger.warning("%s: script-test runner returned %r, not a PairResult", task_name,
                           type(pair).__name__)
            outcomes.append(TestOutcome(False, "", "the program could not be run (executor "
                                                   "returned a bad result)"))
            continue
        outcomes.append(_script_outcome(pair))
    return outcomes


def run_tests(problem: CodeProblem, code: str, tests: Sequence[TestCase], *,
              limits: SandboxLimits, runner: BatchRunner | None = None,
              pair_runner: PairRunner | None = None, float_tolerance: float | None = None,
              task_name: str = "code") -> list[TestOutcome]:
    """Run submission ``code`` for ``problem`` on ``tests``: one outcome per test, in order.

    Never raises for anything the code or the tests do; an executor that raises or returns the
    wrong number of results fails every test it was given (logged). ``runner`` replaces
    :func:`~pettingllms_envs.sandbox.run_python_batch` for stdio and call tests, and
    ``pair_runner`` replaces :func:`~pettingllms_envs.sandbox.run_python_pair` for script tests
    (both default to the sandbox with ``limits``).
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
    outcomes: dict[int, TestOutcome] = {}
    script_at = [i for i, t in enumerate(tests) if t.script is not None]
    if script_at:
        if pair_runner is None:
            pair_runner = functools.partial(run_python_pair, limits=limits)
        judged = _script_outcomes(problem, code, [tests[i] for i in script_at], pair_runner,
                                  task_name)
        outcomes.update(zip(script_at, judged))
    call_at = [i for i, t in enumerate(tests) if t.script is None]
    if call_at:
        program = harness_program(problem, code)
        results = _run_batch(runner, program, [_unit_stdin(tests[i]) for i in call_at],
                             task_name)
        if isinstance(results, str):
            outcomes.update(zip(call_at, _failure_everywhere(len(call_at), results)))
        else:
            outcomes.update((i, _call_outcome(tests[i], r, float_tolerance))
                            for i, r in zip(call_at, results))
    return [outcomes[i] for i in range(len(tests))]
