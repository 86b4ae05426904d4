"""Math data: the generated set (exact answers, difficulty, disjoint splits) and the loaders."""

import json
import logging
import re
from fractions import Fraction

import numpy as np
import pytest
import sympy
from sympy.parsing.sympy_parser import (
    convert_xor, implicit_multiplication_application, parse_expr, standard_transformations)

from pettingllms_envs.data import DatasetUnavailableError
from pettingllms_envs.math_data import (
    DIFFICULTIES,
    KINDS,
    MAX_ANSWER_CHARS,
    MathProblem,
    check_generator_args,
    generate_problem,
    generate_problems,
    load_problems,
    problem_from_aime,
    problem_from_olympiadbench,
    split_of_id,
    split_of_question,
    write_problems_jsonl,
)

_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)
X, Y = sympy.symbols("x y")


def _sym(text: str) -> sympy.Expr:
    return parse_expr(text, transformations=_TRANSFORMS, local_dict={"x": X, "y": Y})


def _oracle(problem: MathProblem) -> sympy.Expr:
    """Solve a generated question independently of the generator, with sympy."""
    q = problem.question
    if q.startswith("Compute"):
        expr = re.match(r"Compute (?:the value of )?(.*?)\.(?: Give|$)", q).group(1)
        return sympy.nsimplify(sympy.sympify(expr, rational=True))
    if q.startswith("Solve for x:"):
        left, right = q[len("Solve for x:"):].rstrip(".").split("=")
        (root,) = sympy.solve(sympy.Eq(_sym(left), _sym(right)), X)
        return root
    if q.startswith("Solve the system"):
        m = re.match(r"Solve the system of equations (.*) = (\S+) and (.*) = (\S+)\. "
                     r"What is (.*)\?", q)
        solution = sympy.solve([sympy.Eq(_sym(m.group(1)), int(m.group(2))),
                                sympy.Eq(_sym(m.group(3)), int(m.group(4)))], [X, Y])
        return _sym(m.group(5)).subs(solution)
    m = re.match(r"The equation (.*) = 0 has two distinct integer roots\. What is (.*)\?", q)
    roots = sympy.solve(_sym(m.group(1)), X)
    assert len(roots) == 2 and all(r.is_integer for r in roots)
    return {"the sum of its roots": roots[0] + roots[1],
            "the product of its roots": roots[0] * roots[1],
            "its larger root": max(roots), "its smaller root": min(roots)}[m.group(2)]


# ------------------------------------------------------------------------------ generator
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("kind", KINDS)
def test_generated_answers_are_exact_and_match_an_independent_solver(kind, difficulty):
    rng = np.random.default_rng(difficulty)
    for split in ("train", "test") * 6:
        problem = generate_problem(rng, difficulty=difficulty, kinds=[kind], split=split)
        assert problem.question.isascii() and problem.question.isprintable()
        assert problem.source == "generated" and problem.level == str(difficulty)
        assert problem.id.startswith(f"gen-{kind}-{difficulty}-")
        assert re.fullmatch(r"-?\d+(/\d+)?", problem.answer), problem.answer
        assert _oracle(problem) == sympy.Rational(Fraction(problem.answer)), problem


def test_generated_split_is_a_function_of_the_question_and_splits_never_share_one():
    questions = {}
    for split in ("train", "test"):
        rng = np.random.default_rng(7)
        drawn = [generate_problem(rng, difficulty=1, split=split) for _ in range(400)]
        assert all(split_of_question(p.question) == split for p in drawn)
        questions[split] = {p.question for p in drawn}
    assert questions["train"] and questions["test"]
    assert not questions["train"] & questions["test"]


def test_generator_is_deterministic_given_the_rng_and_varies_across_seeds():
    first = [generate_problem(np.random.default_rng(s)) for s in range(30)]
    again = [generate_problem(np.random.default_rng(s)) for s in range(30)]
    assert first == again and len({p.question for p in first}) == 30


def test_difficulty_grows_the_numbers():
    def mean_abs_answer(level):
        problems = generate_problems(60, seed=1, difficulty=level, kinds=["arithmetic"])
        return np.mean([abs(Fraction(p.answer)) for p in problems])

    assert mean_abs_answer(1) < mean_abs_answer(3)


def test_fraction_answers_appear_at_difficulty_3_only_for_linear_equations():
    hard = generate_problems(80, seed=2, difficulty=3, kinds=["linear"])
    easy = generate_problems(80, seed=2, difficulty=1, kinds=["linear"])
    assert any("/" in p.answer for p in hard) and not any("/" in p.answer for p in easy)


def test_generate_problems_returns_distinct_problems_of_the_split():
    problems = generate_problems(50, seed=3, split="test")
    assert len({p.question for p in problems}) == 50
    assert all(split_of_question(p.question) == "test" for p in problems)
    assert generate_problems(0) == []


@pytest.mark.parametrize("difficulty, kinds", [
    (0, KINDS), (4, KINDS), (True, KINDS), ("2", KINDS), (2, []), (2, "linear"),
    (2, ["linear", "calculus"]), (2, 5)])
def test_generator_arguments_are_validated(difficulty, kinds):
    with pytest.raises(ValueError):
        check_generator_args(difficulty, kinds)
    with pytest.raises(ValueError):
        generate_problem(np.random.default_rng(0), difficulty=difficulty, kinds=kinds)


def test_generate_rejects_unknown_split_and_bad_counts():
    with pytest.raises(ValueError):
        generate_problem(np.random.default_rng(0), split="validation")
    with pytest.raises(ValueError):
        generate_problems(-1)


def test_split_of_id_respects_the_fraction_and_is_stable():
    ids = [f"p{i}" for i in range(2000)]
    share = np.mean([split_of_id(i, 0.25) == "test" for i in ids])
    assert 0.2 < share < 0.3
    assert all(split_of_id(i, 0.0) == "train" and split_of_id(i, 1.0) == "test" for i in ids)
    assert split_of_id("2024-I-1", 0.5) == split_of_id("2024-I-1", 0.5)


# ------------------------------------------------------------------------------ loaders
def _write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return str(path)


def test_aime_2024_rows_with_capitalised_fields_and_integer_answers(tmp_path):
    path = _write_jsonl(tmp_path / "aime24.jsonl", [
        {"ID": "2024-I-1", "Problem": "Find $x$.", "Solution": "...", "Answer": 204},
        {"ID": "2024-I-2", "Problem": "Find $y$.", "Answer": "025"},
    ])
    problems, report = load_problems(path, dataset_format="aime")
    assert [p.id for p in problems] == ["2024-I-1", "2024-I-2"]
    assert problems[0] == MathProblem(id="2024-I-1", question="Find $x$.", answer="204",
                                      source="aime")
    assert report.kept == 2 and report.skipped == 0


def test_aime_2025_rows_with_question_field_and_no_id_get_a_stable_id(tmp_path):
    path = _write_jsonl(tmp_path / "aime25.jsonl", [{"question": "Compute 1+1.", "answer": "2"}])
    (problem,), _ = load_problems(path, dataset_format="aime")
    (again,), _ = load_problems(path, dataset_format="aime")
    assert problem.id.startswith("aime-") and problem.id == again.id
    assert problem.question == "Compute 1+1." and problem.answer == "2"


def test_olympiadbench_json_with_final_answer_lists_and_context(tmp_path):
    rows = [
        {"id": 1606, "question": "Find $n$.", "final_answer": ["$12$"], "unit": None},
        {"id": 1607, "question": "Find all $n$.", "final_answer": ["$3$", "$5$"],
         "context": "Let $n$ be odd."},
        {"id": 1608, "question": "No answer.", "final_answer": []},
    ]
    path = tmp_path / "ob.json"
    path.write_text(json.dumps({"data": rows}), encoding="utf-8")
    problems, report = load_problems(str(path), dataset_format="olympiadbench")
    assert [(p.id, p.answer) for p in problems] == [("1606", "12"), ("1607", "3, 5")]
    assert problems[1].question == "Let $n$ be odd.\n\nFind all $n$."
    assert report.skipped == 1 and "final_answer" in report.reasons[0]


def test_polaris_parquet_rows_via_pyarrow(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"problem": ["What is 2+3?", "What is 1/2 + 1/4?", None],
                      "answer": ["5", "\\frac{3}{4}", "1"],
                      "difficulty": ["1/8", "7/8", "2/8"]})
    path = tmp_path / "polaris.parquet"
    pq.write_table(table, path)
    problems, report = load_problems(str(path), dataset_format="polaris")
    assert [(p.question, p.answer, p.level) for p in problems] == [
        ("What is 2+3?", "5", "1/8"), ("What is 1/2 + 1/4?", "\\frac{3}{4}", "7/8")]
    assert all(p.source == "polaris" for p in problems)
    assert report.total == 3 and report.skipped == 1


def test_records_round_trip_through_the_jsonl_writer(tmp_path):
    problems = generate_problems(5, seed=4) + [
        MathProblem(id="hand-1", question="Is it $\\pi$?", answer="\\pi")]
    path = str(tmp_path / "set.jsonl")
    assert write_problems_jsonl(problems, path) == 6
    loaded, report = load_problems(path, dataset_format="records")
    assert loaded == problems and report.skipped == 0


def test_malformed_rows_are_skipped_counted_and_logged(tmp_path, caplog):
    path = _write_jsonl(tmp_path / "mixed.jsonl", [
        {"id": "ok-1", "question": "Q1", "answer": "1"},
        "{not json",
        "[1, 2]",
        {"id": "no-answer", "question": "Q2"},
        {"id": "bad-type", "question": ["Q3"], "answer": "3"},
        {"id": "too-long", "question": "Q4", "answer": "9" * (MAX_ANSWER_CHARS + 1)},
        {"id": "bool", "question": "Q5", "answer": True},
        {"id": "ok-2", "question": "Q6", "answer": " $6$ "},
    ])
    with caplog.at_level(logging.WARNING, logger="pettingllms_envs.data"):
        problems, report = load_problems(path, dataset_format="records")
    assert [p.id for p in problems] == ["ok-1", "ok-2"] and problems[1].answer == "6"
    assert report.total == 8 and report.kept == 2 and report.skipped == 6
    assert "skipped 6 of 8" in caplog.text


def test_a_file_without_any_usable_row_is_unavailable(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"problem": "no answer"}])
    with pytest.raises(DatasetUnavailableError, match="no usable rows"):
        load_problems(path, dataset_format="aime")


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_problems(str(tmp_path / "nope.jsonl"), dataset_format="aime")


def test_unreachable_hub_name_is_one_clear_error():
    with pytest.raises(DatasetUnavailableError, match="could not load hub dataset"):
        load_problems("no-such-org-pettingllms/no-such-math-set", dataset_format="polaris")


def test_unknown_dataset_format_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="accepted"):
        load_problems(str(tmp_path / "x.jsonl"), dataset_format="gsm8k")


def test_single_row_converters_name_the_missing_field():
    with pytest.raises(ValueError, match="problem"):
        problem_from_aime({"answer": "3"})
    with pytest.raises(ValueError, match="answer"):
        problem_from_olympiadbench({"question": "Q", "final_answer": None})
