"""Problems for ``math_v0``: the record type, a seeded offline generator and benchmark loaders.

* :class:`MathProblem` is one problem: ``id``, ``question``, ``answer`` (a string math-verify
  can parse: ``42``, ``7/12``, ``\\frac{\\sqrt{3}}{2}``) and optional ``source``/``level``.
* The generated set (:func:`generate_problem`) needs no download: integer arithmetic, fraction
  arithmetic, linear equations, 2x2 linear systems with integer solutions and quadratics with
  integer roots, at three difficulty levels, with exact answers (``fractions.Fraction``).
  Train and test instances are disjoint by construction: the split of a generated problem is a
  SHA-256 bucket of its question text (:func:`split_of_question`), and the generator redraws
  until the bucket matches the requested split, so no question can appear in both.
* Loaders (:func:`load_problems`) read AIME 2024 / AIME 2025, OlympiadBench, Polaris-style
  records and our own normalised JSONL (:func:`write_problems_jsonl` writes it) from a local
  ``.jsonl``/``.json``/``.parquet`` file or a ``datasets`` hub name, through
  :mod:`pettingllms_envs.data` (a missing file or unreachable hub name is one
  :class:`~pettingllms_envs.data.DatasetUnavailableError`; malformed rows are skipped and
  counted in the log). Loaded problems are split by a stable hash of their id
  (:func:`split_of_id`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from pettingllms_envs.data import LoadReport, convert_rows, read_rows, write_jsonl

logger = logging.getLogger(__name__)

KINDS = ("arithmetic", "fractions", "linear", "system", "quadratic")
DIFFICULTIES = (1, 2, 3)
DATASET_FORMATS = ("aime", "olympiadbench", "polaris", "records")
#: Longest answer string that is ever parsed (gold or predicted); longer gold answers are
#: malformed rows, longer predictions are invalid (math-verify's cost grows with the input).
MAX_ANSWER_CHARS = 200
MAX_GENERATION_ATTEMPTS = 1_000


# ------------------------------------------------------------------------------ records
@dataclasses.dataclass(frozen=True)
class MathProblem:
    """One problem. ``answer`` is the reference final answer as text; ``level`` is a free-form
    difficulty label (``"2"`` for a generated level-2 problem, ``"7/8"`` in Polaris)."""

    id: str
    question: str
    answer: str
    source: str | None = None
    level: str | None = None

    def to_record(self) -> dict[str, Any]:
        """The normalised JSON object (the ``"records"`` format)."""
        return dataclasses.asdict(self)


def _hash_fraction(key: str) -> float:
    """A stable number in [0, 1) from SHA-256 (Python's ``hash`` is salted per process)."""
    digest = hashlib.sha256(key.encode("utf-8", errors="replace")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def split_of_question(question: str) -> str:
    """The split ("train" or "test", half each) a generated question belongs to."""
    return "test" if _hash_fraction("question:" + question) < 0.5 else "train"


def split_of_id(problem_id: str, test_fraction: float) -> str:
    """The split of a loaded problem: "test" for a ``test_fraction`` share of ids (by hash)."""
    return "test" if _hash_fraction("id:" + problem_id) < test_fraction else "train"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()[:12]


# ------------------------------------------------------------------------------ generator
def _int(rng: np.random.Generator, low: int, high: int) -> int:
    """A uniform integer in [low, high] as a plain ``int``."""
    return int(rng.integers(low, high + 1))


def _nonzero(rng: np.random.Generator, bound: int) -> int:
    value = _int(rng, 1, bound)
    return value if rng.random() < 0.5 else -value


def format_fraction(value: Fraction) -> str:
    """``7/12``, ``-3/4`` or ``5`` (an integer when the denominator is 1)."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


def _precedence(node: Any) -> int:
    if isinstance(node, tuple):
        return _PRECEDENCE[node[0]]
    return 2 if isinstance(node, Fraction) and node.denominator != 1 else 3


def _render(node: Any) -> str:
    """Infix text with only the parentheses the usual precedence needs (a fraction leaf
    ``a/b`` counts as a product, so it is parenthesised right of ``*`` or ``-``)."""
    if not isinstance(node, tuple):
        return format_fraction(Fraction(node))
    op, left, right = node
    left_text, right_text = _render(left), _render(right)
    if _precedence(left) < _PRECEDENCE[op]:
        left_text = f"({left_text})"
    if _precedence(right) < _PRECEDENCE[op] or (
            _precedence(right) == _PRECEDENCE[op] and op in "-*"):
        right_text = f"({right_text})"
    return f"{left_text} {op} {right_text}"


def _evaluate(node: Any) -> Fraction:
    if not isinstance(node, tuple):
        return Fraction(node)
    op, left, right = node
    a, b = _evaluate(left), _evaluate(right)
    return a + b if op == "+" else a - b if op == "-" else a * b


def _random_tree(rng: np.random.Generator, leaves: list[Any], ops: Sequence[str]) -> Any:
    """Join random adjacent pairs until one expression tree is left (random shapes)."""
    nodes = list(leaves)
    while len(nodes) > 1:
        at = _int(rng, 0, len(nodes) - 2)
        nodes[at: at + 2] = [(ops[_int(rng, 0, len(ops) - 1)], nodes[at], nodes[at + 1])]
    return nodes[0]


def _arithmetic(rng: np.random.Generator, level: int) -> tuple[str, str]:
    bound = (10, 20, 50)[level - 1]
    leaves = [_int(rng, 1, bound) for _ in range(level + 2)]
    tree = _random_tree(rng, leaves, ("+", "-", "*"))
    return (f"Compute the value of {_render(tree)}.", format_fraction(_evaluate(tree)))


def _fractions(rng: np.random.Generator, level: int) -> tuple[str, str]:
    max_den = 3 + 3 * level
    leaves = []
    for _ in range(level + 1):
        den = _int(rng, 2, max_den)
        leaves.append(Fraction(_int(rng, 1, den - 1), den))
    ops = ("+", "-") if level == 1 else ("+", "-", "*")
    tree = _random_tree(rng, leaves, ops)
    return (f"Compute {_render(tree)}. Give the answer as a fraction in lowest terms "
            "(or an integer).", format_fraction(_evaluate(tree)))


def _linear_expr(coef_x: int, const: int) -> str:
    """``3x - 7``, ``-x + 2``, ``x``, ``5`` (ASCII, no ``+ -``)."""
    parts = []
    if coef_x:
        head = {1: "x", -1: "-x"}.get(coef_x, f"{coef_x}x")
        parts.append(head)
    if const or not parts:
        if parts:
            parts.append(f"{'+' if const > 0 else '-'} {abs(const)}")
        else:
            parts.append(str(const))
    return " ".join(parts)


def _linear(rng: np.random.Generator, level: int) -> tuple[str, str]:
    if level == 1:
        x, a, b = _int(rng, -10, 10), _nonzero(rng, 9), _int(rng, -20, 20)
        left, right = _linear_expr(a, b), str(a * x + b)
    else:
        a, d = _nonzero(rng, 9), _nonzero(rng, 9)
        while d == a:
            d = _nonzero(rng, 9)
        b = _int(rng, -30, 30)
        if level == 2:
            x = _int(rng, -12, 12)
            e = (a - d) * x + b
        else:
            e = _int(rng, -30, 30)
            x = Fraction(e - b, a - d)
        left, right = _linear_expr(a, b), _linear_expr(d, e)
    return f"Solve for x: {left} = {right}.", format_fraction(Fraction(x))


def _pair_expr(a: int, b: int) -> str:
    """``2x + 3y``, ``x - y``, ``-4x + y``."""
    head = {1: "x", -1: "-x"}.get(a, f"{a}x")
    tail = {1: "y", -1: "y"}.get(b, f"{abs(b)}y")
    return f"{head} {'+' if b > 0 else '-'} {tail}"


def _system(rng: np.random.Generator, level: int) -> tuple[str, str]:
    span, coef = 3 * level + 2, 2 + 2 * level
    x, y = _int(rng, -span, span), _int(rng, -span, span)
    while True:
        a1, b1, a2, b2 = (_nonzero(rng, coef) for _ in range(4))
        if a1 * b2 - a2 * b1 != 0:
            break
    targets = {"x": x, "y": y, "x + y": x + y, "x * y": x * y}
    name = list(targets)[_int(rng, 0, len(targets) - 1)]
    question = (f"Solve the system of equations {_pair_expr(a1, b1)} = {a1 * x + b1 * y} and "
                f"{_pair_expr(a2, b2)} = {a2 * x + b2 * y}. What is {name}?")
    return question, str(targets[name])


def _quadratic(rng: np.random.Generator, level: int) -> tuple[str, str]:
    span = 3 + 3 * level
    r1 = _int(rng, -span, span)
    r2 = _int(rng, -span, span)
    while r2 == r1:
        r2 = _int(rng, -span, span)
    lead = 1 if level == 1 else _int(rng, 1, 3) if level == 2 else _nonzero(rng, 5)
    b, c = -lead * (r1 + r2), lead * r1 * r2
    terms = [{1: "x^2", -1: "-x^2"}.get(lead, f"{lead}x^2")]
    if b:
        terms.append(f"{'+' if b > 0 else '-'} {'' if abs(b) == 1 else abs(b)}x")
    if c:
        terms.append(f"{'+' if c > 0 else '-'} {abs(c)}")
    asks = {"the sum of its roots": r1 + r2, "the product of its roots": r1 * r2,
            "its larger root": max(r1, r2), "its smaller root": min(r1, r2)}
    ask = list(asks)[_int(rng, 0, len(asks) - 1)]
    return (f"The equation {' '.join(terms)} = 0 has two distinct integer roots. "
            f"What is {ask}?", str(asks[ask]))


_GENERATORS: dict[str, Callable[[np.random.Generator, int], tuple[str, str]]] = {
    "arithmetic": _arithmetic, "fractions": _fractions, "linear": _linear,
    "system": _system, "quadratic": _quadratic}


def check_generator_args(difficulty: Any, kinds: Any) -> tuple[int, tuple[str, ...]]:
    """Validated ``(difficulty, kinds)``: a level in :data:`DIFFICULTIES` and a non-empty
    subset of :data:`KINDS` (order kept, duplicates removed)."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, (int, np.integer)) \
            or difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    if isinstance(kinds, str) or not isinstance(kinds, Iterable):
        raise ValueError(f"kinds must be a list of problem kinds from {KINDS}, got {kinds!r}")
    kinds = tuple(dict.fromkeys(kinds))
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds or unknown:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    return int(difficulty), kinds


def generate_problem(rng: np.random.Generator, *, difficulty: int = 2,
                     kinds: Sequence[str] = KINDS, split: str = "train") -> MathProblem:
    """A random problem of ``split`` drawn from ``rng`` (deterministic given its state).

    Each draw picks a kind uniformly from ``kinds`` and an instance at ``difficulty`` (1-3:
    more operands, larger numbers, fraction answers at 3); draws repeat until
    :func:`split_of_question` of the question equals ``split``.
    """
    difficulty, kinds = check_generator_args(difficulty, kinds)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    for _ in range(MAX_GENERATION_ATTEMPTS):
        kind = kinds[_int(rng, 0, len(kinds) - 1)]
        question, answer = _GENERATORS[kind](rng, difficulty)
        if split_of_question(question) == split:
            return MathProblem(id=f"gen-{kind}-{difficulty}-{_short_hash(question)}",
                               question=question, answer=answer, source="generated",
                               level=str(difficulty))
    raise RuntimeError(f"no {split} problem in {MAX_GENERATION_ATTEMPTS} draws")


def generate_problems(count: int, *, seed: int = 0, difficulty: int = 2,
                      kinds: Sequence[str] = KINDS, split: str = "train") -> list[MathProblem]:
    """``count`` distinct generated problems of ``split`` from one seed (a fixed offline set,
    e.g. to write with :func:`write_problems_jsonl`)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got {count!r}")
    rng = np.random.default_rng(seed)
    found: dict[str, MathProblem] = {}
    for _ in range(count * MAX_GENERATION_ATTEMPTS):
        if len(found) >= count:
            break
        problem = generate_problem(rng, difficulty=difficulty, kinds=kinds, split=split)
        found.setdefault(problem.question, problem)
    if len(found) < count:
        raise ValueError(f"only {len(found)} distinct problems exist for kinds={tuple(kinds)}, "
                         f"difficulty={difficulty}; asked for {count}")
    return list(found.values())


# ------------------------------------------------------------------------------ row converters
def _pick(row: Mapping[str, Any], names: Sequence[str]) -> Any:
    """The first of ``names`` present in ``row`` with a non-None value (else None)."""
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def _text(value: Any, what: str) -> str:
    """A non-empty stripped string from a string or a number (an int answer like AIME's)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"missing {what}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        value = str(value)
    if not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not text")
    value = value.strip()
    if not value:
        raise ValueError(f"empty {what}")
    return value


def clean_answer(value: Any) -> str:
    """A reference answer as stored: stripped, surrounding ``$`` removed, at most
    :data:`MAX_ANSWER_CHARS` characters (ValueError otherwise: the row is malformed)."""
    answer = _text(value, "answer").strip("$").strip()
    if not answer:
        raise ValueError("empty answer")
    if len(answer) > MAX_ANSWER_CHARS:
        raise ValueError(f"answer longer than {MAX_ANSWER_CHARS} characters")
    return answer


def _problem(row: Mapping[str, Any], *, question: str, answer: str, source: str) -> MathProblem:
    raw_id = _pick(row, ("id", "ID", "problem_id", "unique_id", "idx"))
    problem_id = f"{source}-{_short_hash(question)}" if raw_id is None else _text(raw_id, "id")
    level = _pick(row, ("level", "difficulty"))
    return MathProblem(id=problem_id, question=question, answer=answer, source=source,
                       level=None if level is None else _text(level, "level"))


def problem_from_aime(row: Mapping[str, Any]) -> MathProblem:
    """AIME 2024/2025 rows: ``problem``/``question`` (any case), ``answer``, optional id."""
    question = _text(_pick(row, ("problem", "question", "Problem", "Question")), "problem")
    answer = clean_answer(_pick(row, ("answer", "Answer")))
    return _problem(row, question=question, answer=answer, source="aime")


def problem_from_olympiadbench(row: Mapping[str, Any]) -> MathProblem:
    """OlympiadBench rows: ``question`` (after an optional ``context``), ``final_answer`` as a
    list of strings (several answers are joined with ", "), optional ``id``."""
    question = _text(row.get("question"), "question")
    context = row.get("context")
    if isinstance(context, str) and context.strip():
        question = f"{context.strip()}\n\n{question}"
    final = row.get("final_answer")
    if isinstance(final, (list, tuple, np.ndarray)):
        parts = [_text(part, "final_answer").strip("$").strip() for part in final]
        if not parts:
            raise ValueError("empty final_answer list")
        final = ", ".join(parts)
    return _problem(row, question=question, answer=clean_answer(final), source="olympiadbench")


def problem_from_polaris(row: Mapping[str, Any]) -> MathProblem:
    """Polaris-style rows: ``problem``, ``answer``, optional ``difficulty`` and id."""
    question = _text(row.get("problem"), "problem")
    return _problem(row, question=question, answer=clean_answer(row.get("answer")),
                    source="polaris")


def problem_from_record(row: Mapping[str, Any]) -> MathProblem:
    """Our normalised records: ``id``, ``question``, ``answer`` required; ``source``,
    ``level`` optional (what :meth:`MathProblem.to_record` writes)."""
    if not isinstance(row, Mapping):
        raise TypeError(f"a problem record must be an object, got {type(row).__name__}")
    optional = {name: None if row.get(name) is None else _text(row[name], name)
                for name in ("source", "level")}
    return MathProblem(id=_text(row.get("id"), "id"),
                       question=_text(row.get("question"), "question"),
                       answer=clean_answer(row.get("answer")), **optional)


CONVERTERS: dict[str, Callable[[Mapping[str, Any]], MathProblem]] = {
    "aime": problem_from_aime, "olympiadbench": problem_from_olympiadbench,
    "polaris": problem_from_polaris, "records": problem_from_record}


# ------------------------------------------------------------------------------ loading / writing
def load_problems(source: str, *, dataset_format: str, split: str = "train",
                  config: str | None = None,
                  limit: int | None = None) -> tuple[list[MathProblem], LoadReport]:
    """Problems from a local file or a hub dataset (see :mod:`pettingllms_envs.data`).

    ``dataset_format`` picks the row converter (:data:`DATASET_FORMATS`); ``split``/``config``
    are the hub dataset's split and config names (ignored for local files). Malformed rows are
    skipped and counted in the returned :class:`LoadReport` (and the log); a source that cannot
    be read, or has no usable row, raises ``DatasetUnavailableError``.
    """
    if dataset_format not in CONVERTERS:
        raise ValueError(f"dataset_format={dataset_format!r}; accepted: {DATASET_FORMATS}")
    rows = read_rows(source, split=split, name=config)
    return convert_rows(rows, CONVERTERS[dataset_format], source=source, limit=limit)


def write_problems_jsonl(problems: Iterable[MathProblem], path: str) -> int:
    """Write ``problems`` as normalised JSONL (the ``"records"`` format); returns the count."""
    return write_jsonl(path, (problem.to_record() for problem in problems), sort_keys=True)
