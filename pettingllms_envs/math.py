"""Math (``math_v0``): a reasoning agent and a Python tool agent solve the same problem in parallel.

The paper's math setting (PettingLLMs / AT-GRPO, arXiv 2510.11062): the *reasoner* answers in
natural language with the final answer in ``\\boxed{...}``, the *tool* agent writes a Python
program that prints the answer; both act at once each turn, see each other's latest answer on
the next turn, and the episode ends as soon as their answers agree. Answers are checked with
`math-verify` (``from math_verify import parse, verify``), so ``1/2``, ``0.5`` and
``\\frac{1}{2}`` are the same answer.

math-verify caveats handled here (see :func:`parse_math` and :func:`answers_equivalent`):

* its timeouts use ``signal.alarm``, which raises off the main thread (Ray may call
  ``env.step`` from a worker thread), so every parse and comparison runs in a helper process
  (:class:`~pettingllms_envs.bounded_worker.BoundedWorker`) that is killed after
  :data:`MATH_VERIFY_WALL_S` seconds, whichever thread asked;
* without a timeout, a short answer such as ``\\boxed{3^{3^{3^{3}}}}`` or
  ``\\boxed{{{{{{{{{1}}}}}}}}}`` would run for minutes (a huge integer power, exponential
  backtracking in the LaTeX grammar), so every candidate answer is at most
  :data:`MAX_ANSWER_CHARS` characters, at most :data:`MAX_NESTING` brackets deep, and its parsed
  expression must pass a cost bound (:func:`expression_too_costly`) before it is compared;
* any exception from math-verify means "not equal", never a crash.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import math
import re
import threading
import unicodedata
from typing import Any, Mapping, Sequence

import sympy
from math_verify import parse as mv_parse
from math_verify import verify as mv_verify

from pettingllms_envs.bounded_worker import BoundedWorker
from pettingllms_envs.common import (
    CodeRunner, check_code_runner, check_float, check_hub_location, check_prompt_style,
    check_sandbox_limits, data_source, extract_python_code, failure_headline, named_variant,
    quote_inline, reward_coefficients, run_tool_program, tool_role)
from pettingllms_envs.data import LoadReport
from pettingllms_envs.math_data import (
    DATASET_FORMATS, KINDS, MAX_ANSWER_CHARS, MathProblem, check_generator_args,
    generate_problem, load_problems, problem_from_record, split_of_id)
from pettingllms_envs.sandbox import SandboxLimits
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, Role, StageOutcome, TextParallelEnv, split_of_seed)

#: Packages a program of this task may never import (``sandbox: {packages: ...}`` naming one
#: is refused at start): its generator is the project's own (always refused); loaded sets live
#: outside any package.
SANDBOX_DATA_PACKAGES: tuple[str, ...] = ()

logger = logging.getLogger(__name__)

#: Deepest bracket nesting ((), [], {}) of an answer that is sent to math-verify: its LaTeX
#: grammar backtracks exponentially in the depth (10 nested braces take seconds).
MAX_NESTING = 5
#: Seconds math-verify may spend per parse/comparison, enforced only on the main thread.
VERIFY_TIMEOUT_S = 5
#: Cost bounds of a parsed candidate answer (:func:`expression_too_costly`): decimal digits of
#: any intermediate number, and monomials after expanding powers of sums.
MAX_DIGITS = 10_000
MAX_TERMS = 300
_BOX_TOKEN = re.compile(r"\\boxed\s*\{|\\boxed[ \t]+((?:\\(?!boxed)|[^\s${}\\])+)|[{}]")
_ASCII_MATH = {"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": "*", "\u00f7": "/",
               "\u2264": "<=", "\u2265": ">=", "\u2260": "!=", "\u00b7": "*", "\u22c5": "*",
               "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u03c0": "pi",
               "\u221a": "sqrt", "\u00b0": " degrees", "\u2026": "...", "\u221e": "infinity"}


# ------------------------------------------------------------------------------ parsing responses
def extract_boxed(text: str) -> str | None:
    """The content of the LAST complete ``\\boxed{...}`` of ``text`` (None if there is none).

    Braces nest (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``; ``\\{``/``\\}`` count as
    braces too, a set answer has them in pairs); an unclosed box does not count; ``\\boxed 5``
    (a space, then one token up to whitespace, ``$``, a brace or the next ``\\boxed``) is a box
    too. "Last" is by start position, so the inner box of a nested ``\\boxed{\\boxed{1}}``
    wins. One regex pass over the braces and a stack: linear time on any input.
    """
    best_start, best = -1, None
    stack: list[int] = []  # content start of a \boxed{ brace, -1 for a plain brace
    for match in _BOX_TOKEN.finditer(text):
        token = match.group()
        if token == "{":
            stack.append(-1)
        elif token == "}":
            if stack:
                start = stack.pop()
                if start > best_start:
                    best_start, best = start, text[start: match.start()]
        elif match.group(1) is not None:
            if match.start(1) > best_start:
                best_start, best = match.start(1), match.group(1)
        else:
            stack.append(match.end())
    return best


def _clean_candidate(answer: str) -> str:
    return answer.strip().strip("$").strip()


def parse_reasoner_answer(text: str) -> ParseResult:
    """The reasoner's final answer: the content of its last complete ``\\boxed{...}``
    (:func:`extract_boxed`), stripped. No box, an empty box or a box longer than
    :data:`MAX_ANSWER_CHARS` characters is a parse error."""
    content = extract_boxed(text)
    if content is None:
        return ParseResult(error="no \\boxed{...} answer")
    answer = _clean_candidate(content)
    if not answer:
        return ParseResult(error="empty \\boxed{} answer")
    if len(answer) > MAX_ANSWER_CHARS:
        return ParseResult(error=f"boxed answer longer than {MAX_ANSWER_CHARS} characters")
    return ParseResult(value=answer)


_ANSWER_SENTENCE = re.compile(r"\banswer\s*(?:is|:|=)\s*:?\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[,;\n]|\.(?=\s|$)")
_DIGIT = re.compile(r"\d")
#: Answer formats of the reasoner: ``\boxed{...}`` (the paper's) or a closing sentence "The
#: answer is 12." that ~100M-parameter instruct models already write unprompted.
ANSWER_FORMATS = ("boxed", "sentence")
#: What the compact prompt's tool instruction shows: the placeholder line, or a concrete
#: ``print(<number>)`` with a number that is never the answer.
TOOL_EXAMPLES = ("placeholder", "number")
#: The compact prompt's tool instruction: a placeholder (a syntax error if copied), not an
#: example answer. With ``print(42)`` instead, the untrained 135M tool's programs were right on
#: 8 of 32 held-out problems (greedy), against 19 of 32 with this line.
TOOL_PLACEHOLDER = "print(<the expression>)"
#: The ``sentence`` format as the prompts show it: a placeholder, never a correct answer.
SENTENCE_PLACEHOLDER = "The answer is <number>."


def parse_answer_sentence(text: str) -> ParseResult:
    """The reasoner's answer in the ``sentence`` format: its last complete ``\\boxed{...}`` if
    it has one, else what follows the LAST "answer is" / "answer:" / "answer =" (any case) up
    to the end of that clause (a comma, semicolon, line end or sentence-ending period), with
    ``$``, ``*`` and backquotes stripped. The answer must contain a digit, so a copied
    placeholder such as ``<number>`` is a parse error, not a wrong answer."""
    if extract_boxed(text) is not None:
        return parse_reasoner_answer(text)
    last = None
    for last in _ANSWER_SENTENCE.finditer(text):
        pass
    if last is None:
        return ParseResult(error="no 'The answer is ...' sentence")
    rest = text[last.end(): last.end() + 4 * MAX_ANSWER_CHARS]
    end = _SENTENCE_END.search(rest)
    answer = _clean_candidate(rest[:end.start() if end else len(rest)].strip().strip("*`"))
    if not _DIGIT.search(answer):
        return ParseResult(error=f"no number after 'answer is': {quote_inline(answer, 40)}")
    if len(answer) > MAX_ANSWER_CHARS:
        return ParseResult(error=f"answer longer than {MAX_ANSWER_CHARS} characters")
    return ParseResult(value=answer)


def parse_program_output(stdout: str) -> ParseResult:
    """The tool program's answer: the last non-empty line of its stdout, stripped (a line of
    more than :data:`MAX_ANSWER_CHARS` characters, or no output at all, is an error)."""
    tail = stdout.rstrip()
    line = _clean_candidate(tail[max(tail.rfind("\n"), tail.rfind("\r")) + 1:])
    if not line:
        return ParseResult(error="the program printed nothing")
    if len(line) > MAX_ANSWER_CHARS:
        return ParseResult(error=f"last output line longer than {MAX_ANSWER_CHARS} characters")
    return ParseResult(value=line)


# ------------------------------------------------------------------------------ answer checking
#: Wall-clock bound on one math-verify parse or comparison, on any thread (the call runs in a
#: helper process that is killed past it; see :mod:`pettingllms_envs.bounded_worker`).
MATH_VERIFY_WALL_S = 2.0
_WORKER = BoundedWorker("pettingllms_envs.math", MATH_VERIFY_WALL_S, warm_up="_warm_up")


def _timeout() -> int | None:
    """math-verify's signal-based timeout only works on the main thread."""
    return VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def bracket_depth(text: str) -> int:
    """Deepest nesting of (), [] and {} in ``text`` (unbalanced closers are ignored)."""
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}" and depth:
            depth -= 1
    return deepest


def _pow10(log10_value: float) -> float:
    return math.inf if log10_value > 300 else 10.0 ** log10_value


_FACTORIALS = (sympy.factorial, sympy.factorial2, sympy.subfactorial, sympy.gamma,
               sympy.RisingFactorial, sympy.FallingFactorial, sympy.binomial)
_UNEVALUATED = (sympy.Sum, sympy.Product, sympy.Integral, sympy.Limit, sympy.Derivative)


def _cost(expr: Any) -> tuple[float, float]:
    """Upper bounds ``(log10 of the magnitude, monomials after expansion)`` of ``expr``;
    symbols count as magnitude 10. ``inf`` marks something too costly to evaluate."""
    if isinstance(expr, sympy.MatrixBase):
        costs = [_cost(item) for item in expr]
        return max((c[0] for c in costs), default=0.0), sum(c[1] for c in costs)
    if not isinstance(expr, sympy.Basic):
        return 0.0, 1.0
    if isinstance(expr, _UNEVALUATED):
        return math.inf, math.inf
    if isinstance(expr, sympy.Rational):
        return 0.30103 * max(abs(expr.p).bit_length(), expr.q.bit_length()), 1.0
    if isinstance(expr, sympy.Float):
        value = abs(float(expr))
        return (math.log10(value + 1.0) if math.isfinite(value) else math.inf), 1.0
    if not expr.args:
        return 1.0, 1.0
    costs = [_cost(arg) for arg in expr.args]
    mags, terms = [c[0] for c in costs], [c[1] for c in costs]
    if isinstance(expr, sympy.Mul):
        return sum(mags), math.prod(terms)
    if isinstance(expr, sympy.Add):
        return max(mags) + math.log10(len(mags)), sum(terms)
    if isinstance(expr, sympy.Pow):
        exponent = _pow10(mags[1])
        expansion = terms[0]
        if terms[0] > 1 and isinstance(expr.exp, sympy.Integer) and expr.exp > 0:
            power = int(expr.exp)
            expansion = (math.comb(power + int(terms[0]) - 1, int(terms[0]) - 1)
                         if power <= MAX_TERMS and terms[0] <= MAX_TERMS else math.inf)
        return exponent * max(mags[0], 1.0), expansion
    if isinstance(expr, sympy.exp):
        return _pow10(mags[0]) * 0.4343, terms[0]
    if isinstance(expr, _FACTORIALS):
        size = _pow10(max(mags))
        return size * max(max(mags), 1.0), 1.0
    return max(mags) + 1.0, sum(terms)


def expression_too_costly(expr: Any) -> bool:
    """True if comparing ``expr`` could take very long: an unevaluated sum/product/integral/
    limit, a number with more than :data:`MAX_DIGITS` digits (``3^{3^{3^3}}``, ``(10^{100})!``)
    or an expansion with more than :data:`MAX_TERMS` monomials (``(x+y+z)^{40}``)."""
    try:
        magnitude, terms = _cost(expr)
    except Exception:  # an exotic sympy object: do not risk comparing it
        return True
    return not (magnitude <= MAX_DIGITS and terms <= MAX_TERMS)


@functools.lru_cache(maxsize=4096)
def parse_math(answer: str, *, trusted: bool = False) -> tuple:
    """math-verify's reading of an answer string (``()`` when unusable), cached.

    The answer is parsed as inline LaTeX (``$answer$``), which reads ``1/2``, ``0.5``,
    ``\\frac{1}{2}``, ``x = 3`` and ``The answer is 5`` alike. Untrusted answers (predictions,
    not ``trusted`` gold answers) must be at most :data:`MAX_ANSWER_CHARS` characters and
    :data:`MAX_NESTING` brackets deep, and every parsed expression must pass
    :func:`expression_too_costly`; otherwise the result is ``()``. The parse runs in a helper
    process bounded by :data:`MATH_VERIFY_WALL_S` on any thread; a parse cut short is ``()``.
    """
    answer = _clean_candidate(answer)
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return ()
    if not trusted and bracket_depth(answer) > MAX_NESTING:
        return ()
    return tuple(_WORKER.call("_parse_here", (answer, trusted), ()))


def _parse_here(answer: str, trusted: bool) -> tuple:
    """The parse itself (in the bounded worker, where it is the main thread, so math-verify's
    own signal timeout works too)."""
    try:
        parsed = tuple(mv_parse(f"${answer}$", parsing_timeout=_timeout()))
    except Exception as exc:  # math-verify promises not to raise; do not rely on it
        logger.debug("math-verify parse raised %r on %r", exc, answer)
        return ()
    if not trusted and any(expression_too_costly(item) for item in parsed):
        return ()
    return parsed


def _verify_here(gold: tuple, target: tuple) -> bool:
    try:
        return bool(mv_verify(list(gold), list(target), timeout_seconds=_timeout()))
    except Exception as exc:
        logger.debug("math-verify verify raised %r", exc)
        return False


def _warm_up() -> None:
    """math-verify loads its grammars on first use: do it before the first bounded call."""
    _verify_here(_parse_here("1/2", True), _parse_here("0.5", True))


def _verify(gold: tuple, target: tuple) -> bool:
    if not gold or not target:
        return False
    return bool(_WORKER.call("_verify_here", (gold, target), False))


def is_correct(gold: tuple, prediction: tuple) -> bool:
    """math-verify's ``verify(gold, prediction)`` on parsed answers (:func:`parse_math`);
    False on an empty side or any error."""
    return _verify(gold, prediction)


def answers_equivalent(first: tuple, second: tuple) -> bool:
    """Whether two parsed predictions are the same answer (math-verify either way round, as
    its ``verify`` is not symmetric for e.g. ``x = 3`` against ``3``)."""
    return _verify(first, second) or _verify(second, first)


#: A number as an answer states it: an integer or decimal (thousands commas allowed), a
#: fraction ``a/b`` or ``\frac{a}{b}``, optionally signed and inside ``$...$``, alone or after
#: the last ``=`` (``x = 3``, ``4 - 2 * 6 = -8``). Anything else (``10 - 10 * 2``) is a
#: computation, not its value.
_NUMBER = r"[-+]?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_FRACTION_PART = r"(?:\{\s*\d+\s*\}|\d)"
_VALUE = re.compile(rf"^(?:{_NUMBER}(?:\s*/\s*\d+)?"
                    rf"|[-+]?\s*\\[dt]?frac\s*{_FRACTION_PART}\s*{_FRACTION_PART})$")


def states_a_value(text: str) -> bool:
    """Whether ``text`` states a number (:data:`_VALUE`) rather than a computation of one.

    A problem whose answer is a number asks for that number: math-verify alone would also
    accept ``10 - 10 * 2`` for -10 (it evaluates both), and a trained reasoner that answered
    with the problem's own expression was scored right on 54 of 64 held-out problems."""
    stated = text.strip().strip("$").strip().rstrip(".").rsplit("=", 1)[-1]
    return bool(_VALUE.match(stated.strip().strip("$").strip()))


def math_equal(gold: str, prediction: str) -> bool:
    """Convenience: is the answer string ``prediction`` correct for the answer ``gold``?"""
    return is_correct(parse_math(gold, trusted=True), parse_math(prediction))


def to_ascii(text: str) -> str:
    """Prompt text in ASCII: common math symbols spelled out (a less-or-equal sign as ``<=``,
    a minus sign as ``-``), accents dropped, any other non-ASCII character shown as ``?``."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKD", "".join(_ASCII_MATH.get(char, char) for char in text))
    return "".join(char if char.isascii() else "?" for char in text
                   if not unicodedata.combining(char))


# ------------------------------------------------------------------------------ scoring
@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Local reward of an answer that parsed: ``correct_reward`` if math-verify accepts it,
    else ``wrong_reward`` (an unusable response gets ``invalid_action_penalty`` instead)."""

    correct_reward: float = 1.0
    wrong_reward: float = 0.0


@dataclasses.dataclass(frozen=True)
class AgentAnswer:
    """One agent's latest answer: the text it gave (None if unusable), its math-verify
    reading and what the other agent is told about it (the answer quoted, or a note)."""

    text: str | None
    parsed: tuple
    report: str


def _quoted_answer(text: str) -> str:
    """An answer as other prompts show it: quoted, so its text cannot pose as the env's."""
    return quote_inline(to_ascii(text), 80)


#: Example final answers shown in the prompts, in order of preference; the first that is not
#: this problem's answer is shown (copying the example must never be correct).
EXAMPLE_NUMBERS = ("42", "17", "8")


def _boxed_instruction(number: str) -> str:
    return (f"Reason step by step, then give the final answer in \\boxed{{}}, e.g. "
            f"\\boxed{{{number}}}.")
_NO_ANSWER = AgentAnswer(text=None, parsed=(), report="(no answer yet)")
_NO_PROGRAM = AgentAnswer(text=None, parsed=(), report="(no program)")


# ------------------------------------------------------------------------------ named variants
@dataclasses.dataclass(frozen=True)
class MathVariant:
    """What one named math setting shows its agents and how the reasoner answers
    (``variant:`` in the env config; the shipped ones are :data:`VARIANTS`). Each field is
    one change measured in docs/RESULTS.md; configs name a variant, never the fields, so a
    setting's prompts are the ones its numbers were measured with. In Python a
    :class:`MathVariant` may combine the fields otherwise, for an experiment.

    Fields:
        prompt_style: "full" (the paper-style prompt with the roles explained) or "compact" (a
            few lines: problem, the other agent's answer, answer format), for very small models.
        answer_format: how the reasoner gives its final answer: "boxed" (the paper's
            ``\\boxed{...}``) or "sentence" (a closing "The answer is 12.", read by
            :func:`parse_answer_sentence`; a box still counts). ~100M-parameter instruct
            models write the sentence unprompted but almost never a box.
        tool_example: what the compact prompt shows the tool: "placeholder" (the line
            :data:`TOOL_PLACEHOLDER`) or "number" (``print(42)``, a number that is never the
            answer). The full prompt always shows a number, so "number" needs the compact one.
    """

    prompt_style: str = "full"
    answer_format: str = "boxed"
    tool_example: str = "placeholder"

    def __post_init__(self):
        check_prompt_style(self.prompt_style)
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format={self.answer_format!r}; accepted: {ANSWER_FORMATS}")
        if self.tool_example not in TOOL_EXAMPLES:
            raise ValueError(f"tool_example={self.tool_example!r}; accepted: {TOOL_EXAMPLES}")
        if self.tool_example != "placeholder" and self.prompt_style != "compact":
            raise ValueError(f"tool_example={self.tool_example!r} changes the compact prompt: it "
                             f"needs prompt_style='compact', got {self.prompt_style!r}")


_COMPACT_SENTENCE = MathVariant(prompt_style="compact", answer_format="sentence")
#: The shipped math settings by name; docs/tasks.md lists each with the config that runs it.
#: A name spells each change from the paper's prompt (prompt style, answer format, the tool's
#: example), so a config says what its agents are shown without a look-up, and the example
#: number variant reads as what it is: the main job's prompt with one line changed.
VARIANTS: dict[str, MathVariant] = {
    "paper": MathVariant(),
    "compact_sentence": _COMPACT_SENTENCE,
    "compact_sentence_number_example": dataclasses.replace(_COMPACT_SENTENCE,
                                                           tool_example="number"),
}
#: Prompt flags of env configs written before the named variants (2026-12-07), each a field of
#: :class:`MathVariant`. The combinations no variant names (e.g. the compact prompt with a
#: boxed answer) were pilots; their numbers are in docs/RESULTS.md and docs/results_log.md.
RETIRED_FLAGS = frozenset(field.name for field in dataclasses.fields(MathVariant))


def math_variant(variant: str | MathVariant,
                 retired_flags: Mapping[str, Any] | None = None) -> MathVariant:
    """The named variant, or the one an old env config's prompt flags spell exactly
    (:func:`~pettingllms_envs.common.named_variant`)."""
    return named_variant(variant, retired_flags, variants=VARIANTS, env_name="math",
                         env_class="MathEnv", env_id="math_v0", log=logger)


# ------------------------------------------------------------------------------ data source
@dataclasses.dataclass(frozen=True)
class MathData:
    """Where the problems come from (``dataset:`` in the env config: "generated", or a
    mapping of these fields). One argument instead of seven because the fields only mean
    something together: a format, split or config belongs to a loaded source, a difficulty
    and kinds to the generated one, so they are checked together.

    Fields:
        source: "generated" (default, offline) or a local .jsonl/.json/.parquet path or a
            ``datasets`` hub name, read once at construction.
        format: row format of a loaded source, one of :data:`DATASET_FORMATS` ("aime",
            "olympiadbench", "polaris", "records"); required with a path or hub name, refused
            with "generated".
        split ("train"), config (None): split and config name of a hub dataset.
        test_fraction: share of a loaded (or given) set's problems reserved for test seeds
            (0.5; in [0, 1]; 1.0 = an evaluation-only set, 0.0 = a training-only set). A
            generated question's split is a hash of its text instead.
        difficulty (2; 1, 2 or 3) and kinds (all of :data:`KINDS`): the generated set's level
            and problem kinds.
    """

    source: str = "generated"
    format: str | None = None
    split: str = "train"
    config: str | None = None
    test_fraction: float = 0.5
    difficulty: int = 2
    kinds: tuple[str, ...] = KINDS

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"dataset source must be 'generated', a file path or a hub name, "
                             f"got {self.source!r}")
        if self.source == "generated" and self.format is not None:
            raise ValueError(f"dataset format={self.format!r} applies to a loaded dataset, "
                             "not source 'generated'")
        if self.source != "generated" and self.format not in DATASET_FORMATS:
            raise ValueError(f"dataset source {self.source!r} needs format, one of "
                             f"{DATASET_FORMATS}; got {self.format!r}")
        check_hub_location(self.split, self.config)
        fraction = check_float("dataset test_fraction", self.test_fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"dataset test_fraction must be in [0, 1], got "
                             f"{self.test_fraction!r}")
        difficulty, kinds = check_generator_args(self.difficulty, self.kinds)
        object.__setattr__(self, "test_fraction", fraction)
        object.__setattr__(self, "difficulty", difficulty)
        object.__setattr__(self, "kinds", kinds)


#: The keys a ``dataset:`` mapping accepts, in the order of :class:`MathData`.
DATA_FIELDS = tuple(field.name for field in dataclasses.fields(MathData))
#: Data keywords of env configs written before :class:`MathData` (2026-12-07), each the
#: :class:`MathData` field it became (``dataset`` itself became ``source``).
RETIRED_DATA_KEYWORDS = {"dataset_format": "format", "hub_split": "split",
                         "hub_config": "config", "test_fraction": "test_fraction",
                         "difficulty": "difficulty", "kinds": "kinds"}


def math_data(dataset: str | Mapping[str, Any] | MathData,
              keywords: dict[str, Any] | None = None) -> MathData:
    """The data source ``dataset`` names: "generated", a mapping of :class:`MathData`'s
    fields, or a :class:`MathData`; an env config written before it (an old checkpoint:
    ``dataset`` a string beside flat data keywords, popped from ``keywords``) still loads, as
    the same source (:func:`~pettingllms_envs.common.data_source`). A file or hub name alone
    is refused: it needs its row format."""
    keywords = {} if keywords is None else keywords
    if (isinstance(dataset, str) and dataset.strip() and dataset != "generated"
            and not any(key in keywords for key in RETIRED_DATA_KEYWORDS)):
        raise ValueError(f"dataset={dataset!r} needs its row format: dataset: {{source: "
                         f"{dataset!r}, format: one of {DATASET_FORMATS}}}")
    return data_source(MathData, dataset, keywords, renamed=RETIRED_DATA_KEYWORDS,
                       env_class="MathEnv", log=logger)


# ------------------------------------------------------------------------------ the env
_REASONER = Role(
    name="reasoner",
    description="Solves the problem step by step and gives the final answer in \\boxed{...}.",
    parse=parse_reasoner_answer,
)
#: The single-agent baseline's only role: the same answer format, so a response with a program
#: but no box is still a parse error; the program is read from the raw response.
_SOLO_REASONER = Role(
    name="reasoner",
    description="Solves the problem alone and gives the final answer in \\boxed{...}; may "
                "check it with a Python program (in a ```python block) run in a sandbox.",
    parse=parse_reasoner_answer,
)
#: The reasoner of the ``sentence`` answer format (:func:`parse_answer_sentence`).
_SENTENCE_REASONER = Role(
    name="reasoner",
    description="Solves the problem and ends with the sentence 'The answer is <answer>.'.",
    parse=parse_answer_sentence,
)
_TOOL = tool_role("prints the final answer on its last line")


class MathEnv(TextParallelEnv):
    """Env card: ``math_v0``.

    Roles and workflow (parallel, one turn = one step): ``reasoner`` || ``tool``
    (``workflow = [("reasoner", "tool")]``).

    * ``reasoner``: answers in text with the final answer in ``\\boxed{...}`` (the last
      complete box counts; nested braces are fine; :func:`extract_boxed`). No box, an empty box
      or one over 200 characters: parse error, ``invalid_action_penalty``. The ``compact_sentence``
      variants ask for a closing "The answer is 12." instead (:func:`parse_answer_sentence`;
      a box still counts).
    * ``tool``: writes a program in a ```python fenced block that prints the answer; it runs in
      :mod:`~pettingllms_envs.sandbox` with ``sandbox_limits``, and its answer is the last
      non-empty line of stdout. No code block, a failed or timed-out program, empty output or a
      last line over 200 characters: ``invalid_action_penalty``.
    * Local reward of an answer: ``correct_reward`` if math-verify accepts it against the
      reference answer (``1/2``, ``0.5`` and ``\\frac{1}{2}`` are equal), else
      ``wrong_reward``. Answers too deep or too costly to compare (see the module docstring)
      are wrong.

    Spaces: ``gymnasium.spaces.Text`` for both; observations are prompts with the problem, the
    turn, the agent's own latest answer and the other agent's latest answer (for the tool:
    what its program printed or why it failed), and the role's instruction with the answer
    format. Correctness is never shown.

    Reward: ``alpha * team + local``; team = 1.0 if the reasoner's answer of this turn is
    correct, else 0.0 (both agents get it);
    ``success`` = the reasoner's answer is correct.

    Termination: terminated when both agents gave an answer this turn and math-verify finds
    them equivalent (either way round), whether or not it is correct (the paper ends the
    episode on agreement); truncated after ``max_turns`` turns.

    Single-agent baseline (``single_agent=True``; the paper's single-agent rows, arXiv
    2510.11062, Table 1): the ``reasoner`` works alone (``workflow = [("reasoner",)]``) with the
    same turn budget. Its ``\\boxed{}`` answer is scored exactly as above (local, team,
    ``success``); the same response may also hold a ```python block (the last complete one
    counts), run like the tool's program. Next turn its prompt shows its own latest answer and
    its program's answer (or "(no program)") where the tool's answer would be. Terminated when
    the boxed answer and the program's answer are equivalent; with no program it runs to
    ``max_turns``.

    Instances: ``reset(seed=s)`` takes a problem of the seed's split (``split_of_seed``: seeds
    >= ``TRAIN_SEED_LIMIT`` are test). Generated set: drawn from ``np.random.default_rng(s)``;
    a question's split is a SHA-256 bucket of its text, so train and test never share a
    question. Loaded set: a problem is test if a SHA-256 hash of its id falls in the
    ``test_fraction`` share; seed ``s`` takes problem ``s % n`` of the train list (``n`` train
    problems), test seed ``s`` problem ``(s - TRAIN_SEED_LIMIT) % n`` of the test list, so
    consecutive test seeds walk the whole test list once. ``reset(options={"problem": ...})``
    (a :class:`MathProblem` or a dict with ``question``, ``answer`` and optional ``id``) plays
    a given problem.

    Args (keyword-only):
        dataset: where the problems come from: "generated" (default, offline; difficulty 2,
            all kinds) or a mapping of :class:`MathData`'s fields, ``{source, format, split,
            config, test_fraction, difficulty, kinds}``, e.g. ``{source: generated,
            difficulty: 1, kinds: [arithmetic]}`` or ``{source: aime.jsonl, format: aime,
            test_fraction: 1.0}`` (a :class:`MathData` in Python). A path or hub name alone
            is refused: its row format is part of the source.
        problems: a pre-loaded list of :class:`MathProblem` (or records) used instead of a
            loaded source (split by id like one, with ``dataset``'s ``test_fraction``).
            Clones share it, never copy it.
        variant: the named prompt setting, one of :data:`VARIANTS` ("paper": the paper's full
            prompt with a boxed answer, the default; "compact_sentence": the compact prompt
            with "The answer is ..." and the tool's placeholder line, the CPU main job;
            "compact_sentence_number_example": the same with ``print(42)`` as the tool's
            example); what each shows is :class:`MathVariant`.
        max_turns: turns T (3). alpha: team-reward weight (1.0).
        invalid_action_penalty: local reward of an unusable response (-1.0).
        rewards: the local rewards of an answer that parsed, a mapping of some of
            :class:`RewardConfig`'s fields (correct_reward 1.0, wrong_reward 0.0; any sign), as
            the other tasks' ``rewards:``. One given as its own keyword (an env config written
            before ``rewards:``) loads as a ``rewards`` entry, logged.
        sandbox_limits: :class:`SandboxLimits` or a dict of its fields (default 3 s wall and CPU,
            256 MB).
        sandbox: ``{launcher: ..., packages: [...]}`` (None): the sandbox launcher
            (``unshare`` chooses the weaker one explicitly; see docs/sandbox.md) and the
            installed packages its programs may import besides the standard library;
            ``SANDBOX_DATA_PACKAGES`` and the project are refused at construction.
        code_runner: advanced; ``code -> SandboxResult`` replacing the sandbox (a remote
            executor, or a fake in tests).
        single_agent: the single-agent baseline above: the reasoner alone, checking its answer
            with its own program (False).

    Env configs written before the variant and the data source (an old checkpoint) still
    load: their prompt flags (``prompt_style``, ``answer_format``, ``tool_example``) when they
    spell one variant exactly, and their flat data keywords (``dataset_format``,
    ``hub_split``, ``hub_config``, ``test_fraction``, ``difficulty``, ``kinds``) as the same
    source; each is logged with its new spelling, and any other combination is refused
    (:func:`math_variant`, :func:`math_data`).
    """

    metadata = {"name": "math_v0"}
    possible_agents = ["reasoner", "tool"]
    roles = {"reasoner": _REASONER, "tool": _TOOL}
    workflow = [("reasoner", "tool")]

    def __init__(self, *, dataset: str | Mapping[str, Any] | MathData = "generated",
                 problems: Sequence[MathProblem | Mapping[str, Any]] | None = None,
                 variant: str | MathVariant = "paper", max_turns: int = 3, alpha: float = 1.0,
                 invalid_action_penalty: float = -1.0,
                 rewards: RewardConfig | Mapping[str, float] | None = None,
                 sandbox_limits: SandboxLimits | Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None, code_runner: CodeRunner | None = None,
                 single_agent: bool = False, **retired_keywords: Any):
        # Each reader pops its old keywords; the variant takes what is left (prompt flags).
        self.reward_config = reward_coefficients(
            RewardConfig, rewards, retired_keywords, env_class=type(self).__name__, log=logger,
            signed=("correct_reward", "wrong_reward"))
        #: Where the problems come from (:class:`MathData`).
        self.data = math_data(dataset, retired_keywords)
        #: What the prompts show and how the reasoner answers (:class:`MathVariant`).
        self.variant = math_variant(variant, retired_keywords)
        self.sandbox_limits = check_sandbox_limits(
            sandbox_limits, sandbox=sandbox, data_packages=SANDBOX_DATA_PACKAGES,
            runner=code_runner)
        self.code_runner = check_code_runner(code_runner)
        self.load_report: LoadReport | None = None
        self.problems = self._resolve_problems(problems)
        self._splits = self._split_problems()
        self.single_agent = bool(single_agent)
        if self.single_agent:  # one role, no tool agent (arXiv 2510.11062, Table 1)
            self.possible_agents = ["reasoner"]
            self.workflow = [("reasoner",)]
            self.roles = {"reasoner": _SOLO_REASONER}
        if self.variant.answer_format == "sentence":
            self.roles = {**self.roles, "reasoner": dataclasses.replace(
                self.roles["reasoner"], parse=parse_answer_sentence,
                description=_SENTENCE_REASONER.description)}
        super().__init__(alpha=check_float("alpha", alpha), max_turns=max_turns,
                         invalid_action_penalty=check_float("invalid_action_penalty",
                                                             invalid_action_penalty))
        self.problem: MathProblem | None = None
        self.gold: tuple = ()
        self.answers: dict[str, AgentAnswer] = {}

    # ------------------------------------------------------------------ construction
    def _resolve_problems(self, problems: Any) -> tuple[MathProblem, ...] | None:
        """None for the generated set, else the immutable problem tuple (loaded or given)."""
        if problems is not None:
            if self.data.source != "generated":
                raise ValueError(f"give either problems or a loaded dataset (source "
                                 f"{self.data.source!r}), not both")
            if isinstance(problems, (str, Mapping)) or not isinstance(problems, Sequence):
                raise ValueError("problems must be a list of MathProblem or records")
            converted = []
            for index, item in enumerate(problems):
                try:
                    converted.append(item if isinstance(item, MathProblem)
                                     else problem_from_record(item))
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"problems[{index}] is not a valid problem: {exc}") from exc
            if not converted:
                raise ValueError("problems must not be empty")
            return tuple(converted)
        if self.data.source == "generated":
            return None
        data = self.data
        loaded, self.load_report = load_problems(data.source, dataset_format=data.format,
                                                 split=data.split, config=data.config)
        return tuple(loaded)

    def _split_problems(self) -> dict[str, tuple[int, ...]]:
        """Indices of the train and test problems of a loaded/given set (by id hash)."""
        if self.problems is None:
            return {}
        splits: dict[str, list[int]] = {"train": [], "test": []}
        for index, problem in enumerate(self.problems):
            splits[split_of_id(problem.id, self.data.test_fraction)].append(index)
        logger.info("math: %d train / %d test problems (test_fraction=%g)",
                    len(splits["train"]), len(splits["test"]), self.data.test_fraction)
        return {name: tuple(indices) for name, indices in splits.items()}

    def clone(self) -> "MathEnv":
        """An independent copy in the same state that SHARES the immutable problem list, split
        indices, current problem and parsed reference answer (a loaded dataset is never
        deep-copied per branch)."""
        shared = (self.problems, self._splits, self.problem, self.gold)
        return copy.deepcopy(self, {id(item): item for item in shared})

    # ------------------------------------------------------------------ hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        given = options.get("problem")
        self.problem = _check_problem(given) if given is not None else self._seeded_problem(seed)
        self.gold = parse_math(self.problem.answer, trusted=True)
        #: Whether the problem's answer is a number, so an answer must state one (not a
        #: computation of it: :func:`states_a_value`).
        self._gold_is_a_value = states_a_value(self.problem.answer)
        if not self.gold:
            logger.warning("math: the reference answer %r of problem %s does not parse; no "
                           "answer can score as correct", self.problem.answer, self.problem.id)
        # Alone, the reasoner's own program's answer is kept under "tool", in the tool's place.
        self.answers = {agent: _NO_ANSWER for agent in ("reasoner", "tool")}

    def _seeded_problem(self, seed: int | None) -> MathProblem:
        split = split_of_seed(seed)
        if self.problems is None:
            return generate_problem(self.np_random, difficulty=self.data.difficulty,
                                    kinds=self.data.kinds, split=split)
        indices = self._splits[split]
        if not indices:
            raise ValueError(f"math: the dataset has no {split} problems "
                             f"(test_fraction={self.data.test_fraction:g}); use seeds of the "
                             "other split or another test_fraction")
        if seed is None:
            position = int(self.np_random.integers(len(indices)))
        else:
            position = (int(seed) - (TRAIN_SEED_LIMIT if split == "test" else 0)) % len(indices)
        return self.problems[indices[position]]

    def _observe(self, agent: str) -> str:
        if self.single_agent:
            return self._observe_alone()
        other = "tool" if agent == "reasoner" else "reasoner"
        question = to_ascii(self.problem.question)
        number = self.example_number()
        own, theirs = self.answers[agent].report, self.answers[other].report
        if self.variant.prompt_style == "compact":
            lines = [f"Problem: {question}"]
            # Only the other agent's answer: shown its own wrong answer beside the tool's, the
            # untrained 135M reasoner copies the tool's right one half as often (9 vs 22 of 32).
            if self.turn and agent == "reasoner":
                lines.append(f"The tool's program printed: {theirs}.")
            elif self.turn:
                lines.append(f"The reasoner answered: {theirs}.")
            lines.append(self._compact_answer_line(number) if agent == "reasoner"
                         else self._compact_tool_instruction(number))
            return "\n".join(lines)
        lines = [f"Math problem (turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}):",
                 question, ""]
        if agent == "reasoner":
            lines.append("You are the reasoning agent. A tool agent solves the same problem "
                         "by writing Python code; the episode ends when your answers agree.")
        else:
            lines.append("You are the tool agent. A reasoning agent solves the same problem "
                         "step by step; the episode ends when your answers agree.")
        if self.turn:
            lines += [f"Your latest answer: {own}",
                      f"The {'tool' if agent == 'reasoner' else 'reasoning'} agent's latest "
                      f"answer: {theirs}",
                      "If the answers differ, check both and decide which is right."]
        if agent == "reasoner":
            lines.append(self._answer_instruction(number))
        else:
            lines.append("Write a Python program in a ```python fenced block that solves the "
                         "problem and prints only the final answer on its last line, e.g. "
                         f"print({number}). It gets no input and runs in a sandbox "
                         f"with a {self.sandbox_limits.wall_time_s:g} s limit.")
        return "\n".join(lines)

    def example_number(self) -> str:
        """The first of :data:`EXAMPLE_NUMBERS` that is not this problem's answer: the format
        example the prompts show."""
        for number in EXAMPLE_NUMBERS:
            if not math_equal(self.problem.answer, number):
                return number
        raise RuntimeError(f"every example number equals the answer {self.problem.answer!r}")

    def _compact_tool_line(self, number: str) -> str:
        """The program line the compact prompt shows the tool (the variant's ``tool_example``)."""
        if self.variant.tool_example == "placeholder":
            return TOOL_PLACEHOLDER
        return f"print({number})"

    def _compact_tool_instruction(self, number: str) -> str:
        """The compact prompt's tool line. The "number" wording is the one measured before the
        placeholder (docs/RESULTS.md: untrained team 0.19 on 32 held-out problems)."""
        if self.variant.tool_example == "placeholder":
            return f"Write a ```python block with one line: {TOOL_PLACEHOLDER}"
        return f"Write a ```python block that prints the answer, like: print({number})"

    def _answer_instruction(self, number: str) -> str:
        """The full prompt's answer-format line for the reasoner."""
        if self.variant.answer_format == "boxed":
            return _boxed_instruction(number)
        return f"Reason step by step, then end with one line: {SENTENCE_PLACEHOLDER}"

    def _compact_answer_line(self, number: str) -> str:
        """The compact prompt's answer-format line for the reasoner."""
        if self.variant.answer_format == "boxed":
            return f"End with your answer like \\boxed{{{number}}}."
        return f"End with one line: {SENTENCE_PLACEHOLDER}"

    def prompt_examples(self) -> dict[str, str]:
        number = self.example_number()
        reasoner = (f"\\boxed{{{number}}}" if self.variant.answer_format == "boxed"
                    else SENTENCE_PLACEHOLDER)
        tool = (self._compact_tool_line(number) if self.variant.prompt_style == "compact"
                else f"print({number})")
        examples = {"reasoner": reasoner, "tool": f"```python\n{tool}\n```"}
        return {agent: text for agent, text in examples.items() if agent in self.agents}

    def _observe_alone(self) -> str:
        """The single agent's prompt: what its own program printed stands where the tool
        agent's answer would be, so the feedback is of the same kind as in the team."""
        question = to_ascii(self.problem.question)
        number = self.example_number()
        own, program = self.answers["reasoner"].report, self.answers["tool"].report
        if self.variant.prompt_style == "compact":
            lines = [f"Problem: {question}"]
            if self.turn:
                lines.append(f"Your answer: {own}. Your program: {program}.")
            lines.append(f"You work alone. {self._compact_answer_line(number)} You may add a "
                         "```python block that prints it, to check it.")
            return "\n".join(lines)
        lines = [f"Math problem (turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}):",
                 question, "",
                 "You work alone: no other agent. You may check your answer with a Python "
                 "program in a ```python fenced block that prints only the answer on its last "
                 "line; it gets no input and runs in a sandbox with a "
                 f"{self.sandbox_limits.wall_time_s:g} s limit. The episode ends when your "
                 "answer and your program's answer agree."]
        if self.turn:
            lines += [f"Your latest answer: {own}",
                      f"What your latest program printed: {program}",
                      "If they differ, check both and decide which is right."]
        lines.append(self._answer_instruction(number))
        return "\n".join(lines)

    def _apply_stage(self, stage: tuple[str, ...], parsed: Mapping[str, ParseResult],
                     raw: Mapping[str, str]) -> StageOutcome:
        local, feedback, correct = {}, {}, {}
        for agent in stage:
            answer = (self._reasoner_answer(parsed[agent]) if agent == "reasoner"
                      else self._tool_answer(parsed[agent]))
            self.answers[agent] = answer
            if answer.text is None:
                correct[agent] = False
                local[agent] = self.invalid_action_penalty
                feedback[agent] = f"Unusable response: {answer.report}"
                continue
            unevaluated = self._gold_is_a_value and not states_a_value(answer.text)
            correct[agent] = not unevaluated and is_correct(self.gold, answer.parsed)
            local[agent] = (self.reward_config.correct_reward if correct[agent]
                            else self.reward_config.wrong_reward)
            verdict = ("correct" if correct[agent]
                       else "wrong (not a number: a computation is not its value)" if unevaluated
                       else "wrong" if answer.parsed
                       else "wrong (math-verify could not read it)")
            feedback[agent] = f"Answer {quote_inline(answer.text, 80)}: {verdict}"
        if self.single_agent:
            self.answers["tool"] = self._own_program(raw["reasoner"])
        success = correct.get("reasoner", False)
        first, second = self.answers["reasoner"], self.answers["tool"]
        # A restated computation is no value (see ``states_a_value``), so it cannot agree
        # either: else a reasoner restating the problem ends the episode on turn 1 against
        # the tool's printout, before it could read that printout (seen in a trained run).
        agree = (first.text is not None and second.text is not None
                 and not (self._gold_is_a_value and not (states_a_value(first.text)
                                                         and states_a_value(second.text)))
                 and answers_equivalent(first.parsed, second.parsed))
        if agree:
            for agent in stage:
                feedback[agent] += ("; its program agrees" if self.single_agent
                                    else "; both agents agree")
        return StageOutcome(local=local, team=1.0 if success else 0.0, success=success,
                            terminated=agree, feedback=feedback)

    # ------------------------------------------------------------------ stages
    @staticmethod
    def _reasoner_answer(parsed: ParseResult) -> AgentAnswer:
        if not parsed.ok:
            return AgentAnswer(text=None, parsed=(), report=f"none ({parsed.error})")
        return AgentAnswer(text=parsed.value, parsed=parse_math(parsed.value),
                           report=_quoted_answer(parsed.value))

    def _own_program(self, response: str) -> AgentAnswer:
        """The single agent's check: the last ```python block of its response, run exactly like
        the tool agent's program (even when the response has no box: the printout is still
        feedback); "(no program)" when there is none."""
        code = extract_python_code(response)
        return self._tool_answer(code) if code.ok else _NO_PROGRAM

    def _tool_answer(self, parsed: ParseResult) -> AgentAnswer:
        if not parsed.ok:
            return AgentAnswer(text=None, parsed=(), report=f"none (no program ran: "
                                                            f"{parsed.error})")
        result, failure = run_tool_program(parsed.value, limits=self.sandbox_limits,
                                           runner=self.code_runner, task_name="math")
        if failure:
            return AgentAnswer(text=None, parsed=(), report=f"none ({failure_headline(failure)})")
        output = parse_program_output(result.stdout)
        if not output.ok:
            return AgentAnswer(text=None, parsed=(), report=f"none ({output.error})")
        return AgentAnswer(text=output.value, parsed=parse_math(output.value),
                           report=_quoted_answer(output.value))


# ------------------------------------------------------------------------------ validation
def _check_problem(problem: MathProblem | Mapping[str, Any]) -> MathProblem:
    if isinstance(problem, MathProblem):
        return problem
    if not isinstance(problem, Mapping):
        raise ValueError(f"options['problem'] must be a MathProblem or a dict, "
                         f"got {type(problem).__name__}")
    record = dict(problem)
    record.setdefault("id", "custom")
    try:
        return problem_from_record(record)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"options['problem'] is not a valid problem: {exc}") from exc
