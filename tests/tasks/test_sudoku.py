"""Sudoku: conformance, unique-solution generation, train/test disjointness, parsing, reward
arithmetic, the tool/planner workflow and hostile input."""

import hashlib
import itertools
import math
import re

import numpy as np
import pytest
from hang_guard import MEGABYTE_PARSE_BOUND_S, finishes_within
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test
from reward_keywords import check_old_reward_keywords_load_as_rewards

from pettingllms_envs.common import extract_python_code
from pettingllms_envs.sudoku import (
    RewardConfig,
    SudokuEnv,
    SudokuTask,
    count_solutions,
    generate_puzzle,
    is_valid_placement,
    parse_answer,
    parse_answer_body,
    parse_program_output,
    random_full_grid,
    render_grid,
    solve,
    split_of_puzzle,
    split_of_solution,
)
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, check_clone_contract, check_text_env)

FAST = SandboxLimits(wall_time_s=3, cpu_time_s=3, memory_mb=256)
# A hand-made 4x4 puzzle with a unique solution (6 holes).
SOLUTION = ((1, 2, 3, 4),
            (3, 4, 1, 2),
            (2, 1, 4, 3),
            (4, 3, 2, 1))
PUZZLE = ((1, 0, 0, 4),
          (0, 4, 1, 0),
          (2, 0, 4, 3),
          (4, 3, 0, 1))
TASK = SudokuTask(PUZZLE, SOLUTION)
HOLES = 6
SOLVER_PROGRAM = '''Backtracking it is.
```python
grid = {grid}
n = len(grid)
b = int(n ** 0.5)

def ok(r, c, v):
    if v in grid[r] or any(grid[i][c] == v for i in range(n)):
        return False
    top, left = r - r % b, c - c % b
    return all(grid[top + i][left + j] != v for i in range(b) for j in range(b))

def fill():
    for r in range(n):
        for c in range(n):
            if grid[r][c] == 0:
                for v in range(1, n + 1):
                    if ok(r, c, v):
                        grid[r][c] = v
                        if fill():
                            return True
                        grid[r][c] = 0
                return False
    return True

fill()
for row in grid:
    print(" ".join(map(str, row)))
```
'''


def _env(**kwargs) -> SudokuEnv:
    env = SudokuEnv(sandbox_limits=FAST, **kwargs)
    env.reset(seed=0, options={"task": TASK})
    return env


def _echo_runner(code: str) -> SandboxResult:
    """Stand-in for the sandbox: the program 'prints' its own source, so hostile text also
    reaches the program-output parser, without paying an interpreter start per example."""
    return SandboxResult(stdout=code, stderr="", exit_code=0, timed_out=False,
                         killed_by_signal=None, output_truncated=False, network_isolated=True,
                         wall_time_s=0.0)


def _printing_program(text: str) -> str:
    """A program whose output is ``text``, and whose source also reads as ``text`` (so it
    works with the real sandbox and with :func:`_echo_runner` alike)."""
    return f"```python\nANSWER = '''\n{text}\n'''\nprint(ANSWER)\n```"


def _grid_text(grid) -> str:
    return "\n".join(" ".join(map(str, row)) for row in grid)


def _one_cell_actions(env: SudokuEnv, step: int) -> dict[str, str]:
    """Real moves: the tool prints one correct cell, the planner answers it (one per turn), so
    episodes last several steps and the board changes."""
    row, col = next((r, c) for r in range(env.size) for c in range(env.size)
                    if env.board[r][c] == 0)
    cell = f"{row + 1} {col + 1} {env.task.solution[row][col]}"
    return {"tool": _printing_program(cell), "planner": f"Answer:\n{cell}"}


# ------------------------------------------------------------------------------ conformance
def test_pettingzoo_parallel_api():
    parallel_api_test(SudokuEnv(sandbox_limits=FAST), num_cycles=30)


def test_text_env_conformance_suite():
    check_text_env(lambda: SudokuEnv(code_runner=_echo_runner), seeds=(0, 1, 2))
    check_text_env(lambda: SudokuEnv(box_size=3, code_runner=_echo_runner), seeds=(3,))


@pytest.mark.parametrize("box_size", [2, 3])
def test_clone_contract_with_cell_by_cell_moves(box_size):
    env = SudokuEnv(box_size=box_size, max_turns=4, code_runner=_echo_runner)
    check_clone_contract(env, seed=7, action_fn=_one_cell_actions, clone_after_steps=(0, 1, 3))


def test_clone_contract_with_real_sandbox_runs():
    env = SudokuEnv(sandbox_limits=FAST, max_turns=2)
    check_clone_contract(env, seed=5, action_fn=_one_cell_actions, clone_after_steps=(1,))


@pytest.mark.parametrize("bad", [
    {"box_size": 1}, {"box_size": 4}, {"box_size": 2.0}, {"box_size": True},
    {"num_holes": 0}, {"num_holes": 17}, {"num_holes": 3.5}, {"max_turns": 0},
    {"rewards": {"progress_coef": -1.0}}, {"rewards": {"violation_penalty": float("nan")}},
    {"rewards": {"wrong_penalty": "0.5"}}, {"rewards": {"solve_bonus": float("inf")}},
    {"rewards": {"bonus": 1.0}}, {"rewards": 2.0}, {"progress_coef": -1.0},
    {"alpha": None}, {"invalid_action_penalty": "x"},
    {"sandbox_limits": "fast"}, {"sandbox_limits": {"bogus": 1}}, {"code_runner": 3},
    {"prompt_style": "tiny"},
])
def test_constructor_validates_arguments(bad):
    with pytest.raises(ValueError):
        SudokuEnv(**bad)


def test_rewards_and_the_keywords_they_replaced(caplog):
    """``rewards`` overrides the coefficients it names; one given as its own keyword (env
    configs before ``rewards:``) loads as a rewards entry, logged; giving it both ways, or any
    other keyword, is refused."""
    assert SudokuEnv(rewards={"solve_bonus": 5.0}).reward_config == RewardConfig(solve_bonus=5.0)
    check_old_reward_keywords_load_as_rewards(SudokuEnv, RewardConfig,
                                              {"solve_bonus": 5.0, "wrong_penalty": 0.25}, caplog)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['holes'\]"):
        SudokuEnv(holes=4)


def test_defaults_match_the_paper():
    env = SudokuEnv()
    assert env.size == 4 and env.num_holes == 8 and env.max_turns == 3 and env.alpha == 1.0
    assert env.workflow == [("tool",), ("planner",)] and env.reward_config.solve_bonus == 2.0
    assert env.sandbox_limits.wall_time_s == 3 and env.prompt_style == "full"
    assert SudokuEnv(box_size=3).num_holes == 40


# ------------------------------------------------------------------------------ pure helpers
def test_solver_counts_and_solves_known_grids():
    assert count_solutions(PUZZLE) == 1 and solve(PUZZLE) == SOLUTION
    assert count_solutions(SOLUTION) == 1 and solve(SOLUTION) == SOLUTION
    forced = ((1, 2, 3, 4), (3, 4, 1, 2), (0, 0, 4, 3), (0, 0, 2, 1))  # r3: 2 1, r4: 4 3
    assert count_solutions(forced) == 1 and solve(forced) == SOLUTION
    open_rows = ((1, 2, 3, 4), (3, 4, 1, 2), (0, 0, 0, 0), (0, 0, 0, 0))
    assert count_solutions(open_rows, limit=10) == 4 and count_solutions(open_rows) == 2
    assert count_solutions(((0,) * 4,) * 4, limit=1000) == 288  # all 4x4 Sudoku grids
    broken = ((1, 1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0))
    assert count_solutions(broken) == 0 and solve(broken) is None
    with pytest.raises(ValueError):
        count_solutions(((1, 2, 3), (2, 3, 1), (3, 1, 2)))
    for bad in (((5, 0, 0, 0),) * 4, ((1.0, 0, 0, 0),) * 4, ((None, 0, 0, 0),) * 4, [1, 2, 3, 4]):
        with pytest.raises(ValueError):
            solve(bad)
    with pytest.raises(ValueError):
        random_full_grid(np.random.default_rng(0), 4)


def test_is_valid_placement_checks_row_column_and_box():
    assert is_valid_placement(PUZZLE, 0, 1, 2)
    assert not is_valid_placement(PUZZLE, 0, 1, 4)  # row 1 has a 4
    assert not is_valid_placement(PUZZLE, 0, 1, 3)  # column 2 has a 3
    assert not is_valid_placement(PUZZLE, 1, 0, 4)  # the top-left box has a 4 (row 2 too)
    assert not is_valid_placement(PUZZLE, 1, 3, 3)  # column 4 and the top-right box: 3 at r3c4
    assert not is_valid_placement(PUZZLE, 0, 2, 1)  # the top-right box has a 1 (r2c3)
    assert is_valid_placement(SOLUTION, 2, 2, 4)  # a filled cell's own digit does not count
    assert not is_valid_placement(PUZZLE, 4, 0, 1) and not is_valid_placement(PUZZLE, 0, 1, 5)


def test_render_grid_marks_empty_cells_and_boxes():
    assert render_grid(PUZZLE) == "1 . | . 4\n. 4 | 1 .\n----+----\n2 . | 4 3\n4 3 | . 1"
    assert render_grid(PUZZLE, boxes=False).splitlines()[0] == "1 . . 4"


# ------------------------------------------------------------------------------ instances
@pytest.mark.parametrize("box_size, num_holes, seeds", [(2, 8, 60), (2, 16, 30), (3, 40, 6),
                                                         (3, 81, 2)])
def test_generated_puzzles_have_a_unique_solution(box_size, num_holes, seeds):
    size = box_size ** 2
    for seed in range(seeds):
        for split in ("train", "test"):
            task = generate_puzzle(np.random.default_rng(seed), box_size, num_holes, split=split)
            assert task.size == size and count_solutions(task.puzzle) == 1
            assert solve(task.puzzle) == task.solution and count_solutions(task.solution) == 1
            assert all(p in (0, s) for pr, sr in zip(task.puzzle, task.solution)
                       for p, s in zip(pr, sr))
            assert 1 <= task.holes <= min(num_holes, 12 if size == 4 else 64)  # >= 4 / 17 givens
            assert split_of_solution(task.solution) == split
            if num_holes <= size * size // 2:  # the default caps are reached on these seeds
                assert task.holes == num_holes


def test_random_full_grids_are_complete_valid_and_varied():
    grids = {random_full_grid(np.random.default_rng(seed), 2) for seed in range(400)}
    assert len(grids) > 200  # of the 288 4x4 grids: not a few shuffles of one pattern
    big = random_full_grid(np.random.default_rng(0), 3)
    assert all(sorted(row) == list(range(1, 10)) for row in big) and count_solutions(big) == 1


def test_seeds_reproduce_identical_instances_and_differ_across_seeds():
    for box_size, seeds in ((2, 20), (3, 5)):
        tasks = []
        for seed in list(range(seeds)) + [TRAIN_SEED_LIMIT + s for s in range(3)]:
            first, second = SudokuEnv(box_size=box_size), SudokuEnv(box_size=box_size)
            obs_a, _ = first.reset(seed=seed)
            obs_b, _ = second.reset(seed=seed)
            assert first.task == second.task and obs_a == obs_b
            tasks.append(first.task.puzzle)
        assert len(set(tasks)) == len(tasks)


def _all_4x4_grids():
    """Every complete 4x4 grid, enumerated row by row independently of the library."""
    rows = list(itertools.permutations(range(1, 5)))
    grids = [()]
    for _ in range(4):
        grids = [g + (row,) for g in grids for row in rows
                 if all(is_valid_placement(g + (row,) + ((0,) * 4,) * (3 - len(g)), len(g), c, v)
                        for c, v in enumerate(row))]
    return grids


def test_split_bucket_is_a_stable_sha256_of_the_solution():
    key = "sudoku-4x4:" + "".join(str(v) for row in SOLUTION for v in row)
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10
    assert split_of_solution(SOLUTION) == ("test" if bucket == 0 else "train")
    every_grid = _all_4x4_grids()
    splits = [split_of_solution(g) for g in every_grid]
    assert len(every_grid) == 288 and 10 <= splits.count("test") <= 50  # about 1 in 10
    assert [split_of_solution(g) for g in every_grid] == splits  # deterministic
    assert split_of_puzzle(PUZZLE) == split_of_solution(SOLUTION)
    with pytest.raises(ValueError, match="more than one"):
        split_of_puzzle(((0,) * 4,) * 4)


def test_train_and_test_seeds_never_share_a_puzzle_or_a_solution():
    train, test = [], []
    for index in range(250):
        env = SudokuEnv()
        env.reset(seed=index)
        train.append(env.task)
        env.reset(seed=TRAIN_SEED_LIMIT + index)
        test.append(env.task)
    assert all(split_of_puzzle(t.puzzle) == "train" for t in train)
    assert all(split_of_puzzle(t.puzzle) == "test" for t in test)
    assert not {t.puzzle for t in train} & {t.puzzle for t in test}
    assert not {t.solution for t in train} & {t.solution for t in test}
    assert len({t.puzzle for t in test}) > 200  # the test split is not a handful of puzzles


def test_hand_made_tasks_are_accepted_in_several_forms_and_validated():
    env = SudokuEnv()
    for form in (TASK, PUZZLE, {"puzzle": PUZZLE}, ["1..4", ".41.", "2.43", "43.1"],
                 ["1 0 0 4", "0 4 1 0", "2 0 4 3", "4 3 0 1"]):
        obs, _ = env.reset(seed=0, options={"task": form})
        assert env.task == TASK and env.board == PUZZLE and "1 . | . 4" in obs["planner"]
    bad = [
        ((1, 1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),  # breaks a rule
        ((1, 2, 3, 4), (3, 4, 1, 2), (0, 0, 0, 0), (0, 0, 0, 0)),  # two solutions
        SOLUTION,  # nothing to fill
        SudokuTask(PUZZLE, ((9,) * 4,) * 4),  # not its solution
        ["1..4", ".41."],  # not square
        ["1..5", ".41.", "2.43", "43.1"],  # digit 5 in a 4x4
        solve(((0,) * 9,) * 9),  # a 9x9 grid for a 4x4 env
        "1..4.41.2.4343.1", 42, {"grid": PUZZLE},
    ]
    for form in bad:
        with pytest.raises(ValueError):
            env.reset(seed=0, options={"task": form})


# ------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text, cells", [
    ("Answer:\n1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1", SOLUTION),
    ("answer: 1234\n3412\n2143\n4321\nDone!", SOLUTION),
    ("**Answer:**\n```\n1 2 | 3 4\n3 4 | 1 2\n----+----\n2 1 | 4 3\n4 3 | 2 1\n```", SOLUTION),
    ("Answer: [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]", SOLUTION),
    ("Answer:\nHere is the grid:\n[1, 2, 3, 4],\n[3, 4, 1, 2],\n[2, 1, 4, 3],\n[4, 3, 2, 1]",
     SOLUTION),
    ("Answer:\n1 . . 4\n. 4 1 _\n2 0 4 3\n4 3 . 1", PUZZLE),
    ("Answer: 1 2 9 9\nno wait.\nFinal Answer:\n1234\n3412\n2143\n4321", SOLUTION),
])
def test_grid_answers_that_parse(text, cells):
    expected = tuple((r, c, v) for r, row in enumerate(cells) for c, v in enumerate(row) if v)
    assert parse_answer(text, 4) == ParseResult(value=expected)


@pytest.mark.parametrize("text, placements", [
    ("Answer: 1 2 2", [(0, 1, 2)]),
    ("Answer:\n1 2 2\n1 3 3\n", [(0, 1, 2), (0, 2, 3)]),
    ("Answer: r1c2=2; R1C3=3", [(0, 1, 2), (0, 2, 3)]),
    ("ANSWER:\n(1, 2, 2), (1, 3, 3)\nThat is all.", [(0, 1, 2), (0, 2, 3)]),
    ("Answer:\nrow 1 col 2 digit 2\n- 1 3 3\n4 3 3 extra words", [(0, 1, 2), (0, 2, 3)]),
])
def test_placement_answers_that_parse(text, placements):
    assert parse_answer(text, 4) == ParseResult(value=tuple(placements))


def test_nine_by_nine_answers_parse():
    grid = solve(((0,) * 9,) * 9)
    flat = tuple((r, c, v) for r, row in enumerate(grid) for c, v in enumerate(row))
    assert parse_answer("Answer:\n" + render_grid(grid), 9).value == flat
    assert parse_answer("Answer:\n" + render_grid(grid, boxes=False), 9).value == flat
    assert parse_answer(f"Answer: {[list(row) for row in grid]}", 9).value == flat
    assert parse_answer("Answer:\n9 9 1\nr5c5=5", 9).value == ((8, 8, 1), (4, 4, 5))


@pytest.mark.parametrize("text, reason", [
    ("", "no 'Answer:'"), ("1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1", "no 'Answer:'"),
    ("Answer:", "no 4x4 grid"), ("Answer: I am not sure.", "no 4x4 grid"),
    ("Answer:\n1 2 3 4\n3 4 1 2\n", "2 of 4 rows"), ("Answer:\n1234\n3412\nfoo\n2143", "2 of 4"),
    ("Answer:\n1 2 3 5\n3 4 1 2\n2 1 4 3\n4 3 2 1", "digit 5"),
    ("Answer: 5 1 1", "out of range"), ("Answer: 1 1 0", "out of range"),
    ("Answer: 1 1 123456789", "out of range"), ("Answer: 1 2", "no 4x4 grid"),
    ("Answer:\n" + "1 1 1\n" * 1001, "more than 1000"),
    ("Answer: 1 2 3\nAnswer: nothing", "no 4x4 grid"),
])
def test_answers_that_do_not_parse(text, reason):
    result = parse_answer(text, 4)
    assert not result.ok and result.value is None and reason in result.error


@pytest.mark.parametrize("stdout, ok", [
    ("1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1\n", True), ("[[1, 2, 3, 4], [3, 4, 1, 2], "
                                                     "[2, 1, 4, 3], [4, 3, 2, 1]]", True),
    ("solving...\nAnswer:\n1 2 2", True), ("1 2 2\n", True), ("", False), ("  \n", False),
    ("None", False), ("no solution", False), ("[]", False),
])
def test_program_output_reads_as_an_answer(stdout, ok):
    assert parse_program_output(stdout, 4).ok is ok


def test_code_extraction_takes_the_last_complete_python_block():
    text = "```python\nprint(1)\n```\n```py\nprint(2)\n```\n```python\nprint('unclosed')\n"
    assert extract_python_code(text).value == "print(2)"
    assert not extract_python_code("print(1)").ok


# ------------------------------------------------------------------------------ rewards
def test_correct_cells_earn_progress_and_are_applied():
    env = _env()
    env.step({"tool": "no code"})
    _, rewards, terms, truncs, infos = env.step({"planner": "Answer:\n1 2 2\n1 3 3"})
    assert infos["planner"]["reward_local"] == pytest.approx(2 / HOLES)
    assert infos["planner"]["reward_team"] == 0.0 and not infos["planner"]["success"]
    assert env.board[0] == (1, 2, 3, 4) and not any(terms.values()) and not any(truncs.values())
    assert "2 cell(s) filled correctly" in infos["planner"]["feedback"]


def test_solving_earns_progress_bonus_and_team_reward_and_terminates():
    env = _env()
    env.step({"tool": ""})
    env.step({"planner": "Answer: 1 2 2"})
    env.step({"tool": ""})
    _, rewards, terms, truncs, infos = env.step({"planner": "Answer:\n" + _grid_text(SOLUTION)})
    local = 5 / HOLES + 2.0  # the 5 remaining holes, the solve bonus; 11 digits restated
    assert infos["planner"]["reward_local"] == pytest.approx(local)
    assert infos["planner"]["reward_team"] == 1.0 and infos["planner"]["success"]
    assert rewards["planner"] == pytest.approx(1.0 + local) and rewards["tool"] == 0.0
    assert all(terms.values()) and not any(truncs.values()) and env.agents == []
    assert "11 digit(s) already on the grid" in infos["planner"]["feedback"]


@pytest.mark.parametrize("answer, message", [
    ("1 2 4", "r1c2=4: 4 is already in row 1"),
    ("1 2 3", "r1c2=3: 3 is already in column 2"),
    ("2 1 4", "r2c1=4: 4 is already in row 2"),
    ("1 3 1", "r1c3=1: 1 is already in row 1"),
    ("2 4 3", "r2c4=3: 3 is already in column 4"),
    ("3 2 2", "r3c2=2: 2 is already in row 3"),
    ("1 1 2", "r1c1=2 overwrites a given"),
])
def test_rule_violations_are_penalised_and_not_applied(answer, message):
    env = _env(rewards={"violation_penalty": 2.0})
    env.step({"tool": ""})
    _, rewards, _, _, infos = env.step({"planner": f"Answer: {answer}"})
    assert infos["planner"]["reward_local"] == pytest.approx(-2.0 / 16)
    assert env.board == PUZZLE and message in infos["planner"]["feedback"]


def test_a_box_conflict_is_named_as_such():
    env = SudokuEnv()
    env.reset(seed=0, options={"task": ["1234", ".4..", ".143", "4321"]})
    env.step({"tool": ""})
    _, _, _, _, infos = env.step({"planner": "Answer: 2 1 2"})  # row 2 and column 1 lack a 2
    assert "r2c1=2: 2 is already in its 2x2 box" in infos["planner"]["feedback"]
    assert infos["planner"]["reward_local"] == pytest.approx(-1.0 / 16)


def test_consistent_but_wrong_digits_get_the_smaller_penalty_and_are_not_applied():
    env = _env()
    env.step({"tool": ""})
    _, _, _, _, infos = env.step({"planner": "Answer: 1 3 2"})  # r1c3=2 breaks no rule yet
    assert infos["planner"]["reward_local"] == pytest.approx(-0.5 / 16)
    assert env.board == PUZZLE and "not the solution (r1c3=2)" in infos["planner"]["feedback"]


def test_placements_are_judged_in_order_against_the_updated_grid():
    env = _env()
    env.step({"tool": ""})
    # r1c2=2 is correct and applied; r1c3=2 then repeats it in row 1; r1c2 again is ignored.
    _, _, _, _, infos = env.step({"planner": "Answer:\n1 2 2\n1 3 2\n1 2 3\n1 2 2"})
    expected = 1 / HOLES - 1.0 / 16
    assert infos["planner"]["reward_local"] == pytest.approx(expected)
    assert env.board[0] == (1, 2, 0, 4)
    assert "2 repeated placement(s) of one cell ignored" in infos["planner"]["feedback"]


def test_guessing_every_digit_of_a_cell_cannot_find_it():
    env = _env()
    env.step({"tool": ""})
    env.step({"planner": "Answer:\n1 2 3\n1 2 2"})  # the wrong guess first: the cell is spent
    assert env.board == PUZZLE


def test_garbage_answer_is_a_flagged_parse_error_with_the_penalty():
    env = _env(invalid_action_penalty=-2.0)
    env.step({"tool": ""})
    obs, rewards, _, _, infos = env.step({"planner": "The first row is 1 2 3 4."})
    assert infos["planner"]["parse_error"] and rewards["planner"] == -2.0 and env.board == PUZZLE
    assert "not understood" in obs["tool"]


def test_episode_truncates_after_max_turns():
    env = _env(max_turns=1)
    env.step({"tool": ""})
    _, _, terms, truncs, infos = env.step({"planner": "Answer: 1 2 2"})
    assert all(truncs.values()) and not any(terms.values()) and not infos["planner"]["success"]


# ------------------------------------------------------------------------------ the tool
def test_tool_output_scores_as_the_planner_would_without_changing_the_grid():
    env = _env(code_runner=_echo_runner)
    obs, rewards, _, _, infos = env.step({"tool": _printing_program(_grid_text(SOLUTION))})
    assert infos["tool"]["parse_error"] is None and env.board == PUZZLE  # simulated only
    tool_local = infos["tool"]["reward_local"]
    assert tool_local == pytest.approx(1.0 + 2.0) and rewards["tool"] == tool_local
    assert "4 3 2 1" in obs["planner"]  # the planner sees the program's output
    _, _, _, _, infos = env.step({"planner": "Answer:\n" + _grid_text(SOLUTION)})
    assert infos["planner"]["reward_local"] == pytest.approx(tool_local)


@pytest.mark.parametrize("box_size, seed", [(2, 3), (3, 4)])
def test_oracle_pair_solves_a_seeded_instance_with_the_real_sandbox(box_size, seed):
    env = SudokuEnv(box_size=box_size, sandbox_limits=FAST)
    obs, _ = env.reset(seed=seed)
    grid = [list(row) for row in env.board]
    _, rewards, _, _, infos = env.step({"tool": SOLVER_PROGRAM.format(grid=grid)})
    assert infos["tool"]["parse_error"] is None and rewards["tool"] == pytest.approx(3.0)
    report = env.tool_report.split("\n", 1)[1]  # the planner copies the program's output
    _, rewards, terms, _, infos = env.step({"planner": f"I checked it.\nAnswer:\n{report}"})
    assert infos["planner"]["success"] and infos["planner"]["reward_team"] == 1.0
    assert rewards["planner"] == pytest.approx(1.0 + 1.0 + 2.0)
    assert all(terms.values()) and env.board == env.task.solution and env.agents == []


@pytest.mark.parametrize("response, reason", [
    ("I'd use backtracking.", "no program"),
    ("```python\nraise SystemExit(3)\n```", "exit code 3"),
    ("```python\nprint('no solution')\n```", "not a sudoku answer"),
    ("```python\npass\n```", "not a sudoku answer"),
])
def test_tool_failures_get_the_penalty_and_are_reported_to_the_planner(response, reason):
    env = _env()
    obs, rewards, _, _, infos = env.step({"tool": response})
    assert rewards["tool"] == env.invalid_action_penalty
    assert reason in obs["planner"].lower()


def test_code_runner_exceptions_are_contained():
    def broken(code):
        raise RuntimeError("executor down")

    env = _env(code_runner=broken)
    _, rewards, _, _, infos = env.step({"tool": _printing_program("1 2 2")})
    assert rewards["tool"] == env.invalid_action_penalty
    assert "RuntimeError" in infos["tool"]["feedback"]


# ------------------------------------------------------------------------------ prompts
@pytest.mark.parametrize("style", ["full", "compact"])
def test_current_grid_appears_in_every_prompt(style):
    env = SudokuEnv(prompt_style=style, code_runner=_echo_runner, max_turns=3)
    obs, _ = env.reset(seed=11)
    while True:
        for agent, text in obs.items():
            assert text.isascii()
            if agent == "planner" or style == "full":
                assert render_grid(env.board, boxes=style == "full") in text, agent
            if agent == "tool":
                assert str([list(row) for row in env.board]) in text
            assert "Answer:" in text or agent == "tool"
        if not env.agents:
            break
        actions = _one_cell_actions(env, 0)
        obs, *_ = env.step({a: actions[a] for a in env.acting_agents()})
    assert env.board != env.task.puzzle


def test_full_prompt_reports_the_last_result_and_compact_keeps_the_answer_format():
    env = _env()
    env.step({"tool": ""})
    obs, *_ = env.step({"planner": "Answer: 1 2 3"})
    assert "Result of the last answer: 0 cell(s) filled correctly" in obs["tool"]
    compact = SudokuEnv(prompt_style="compact")
    obs, _ = compact.reset(seed=0)
    example = "Answer: 1234 3412 2341 4123"
    assert example in obs["planner"] and "```python" in obs["tool"]
    assert parse_answer(example, 4).ok  # the example the model copies is a valid answer
    assert len(obs["planner"].splitlines()) <= 12


# ------------------------------------------------------------------------------ hostile input
_PIECES = ["```python\n", "```py\n", "```", "```\n", "\n", "Answer:", "answer :", "ANSWER:",
           "1", "2", "3", "4", "9", "0", ".", "_", " ", ",", ";", "|", "-", "+", "r1c2=3",
           "(1, 2, 3)", "1 2 3", "1234", "[", "]", "'", "**", "row", "col", "\x00", "\ufffd",
           "\u0663", "\u00b2", "\u0130", "é", "🙂", "\r\n", "x" * 50, "99999999999999999999",
           '{"answer": [[1, 2', "print('1234')",
           "```python\nprint('1234\\n3412\\n2143\\n4321')\n```"]
_ECHO = [SudokuEnv().reset(seed=0)[0][a] for a in ("tool", "planner")]
_hostile = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    st.tuples(st.text(max_size=12), st.integers(50, 1000)).map(lambda p: p[0] * p[1]),
    st.sampled_from(_ECHO).flatmap(lambda e: st.integers(0, len(e)).map(lambda k: e[:k])),
    st.sampled_from(["", " ", "\n" * 1000, "```" * 2000, "Answer:" * 3000,
                     "Answer: " + "1 " * 20000, "Answer:\n" + "1234\n" * 5000,
                     "Answer:\n" + "x\n" * 20000,
                     "```python\n" * 500 + "print(1)\n" + "```\n" * 500,
                     '{"answer": [[1, 2, 3, 4], [3, 4', "Answer: " + "9" * 5000]),
)
_ROLE_PARSERS = [(size, role.parse) for size in (4, 9)
                 for role in SudokuEnv(box_size=int(math.isqrt(size))).roles.values()]


@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_hostile)
def test_parsers_never_raise_on_hostile_text(text):
    for size, parser in _ROLE_PARSERS + [(4, lambda t: parse_program_output(t, 4)),
                                         (9, lambda t: parse_program_output(t, 9)),
                                         (9, lambda t: parse_answer_body(t, 9))]:
        result = parser(text)
        assert isinstance(result, ParseResult) and (result.ok == (result.error is None))
        if result.ok and isinstance(result.value, tuple):
            assert all(0 <= r < size and 0 <= c < size and 1 <= v <= size
                       for r, c, v in result.value)
    labels = list(re.finditer(r"answer\s*:", text, re.IGNORECASE))  # the LAST label counts
    expected = parse_answer_body(text[labels[-1].end():], 4) if labels else None
    assert parse_answer(text, 4) == (expected or ParseResult(error="no 'Answer:' line"))


_NO_LABEL, _NO_GRID = "no 'Answer:' line", "no {n}x{n} grid rows or 'row col digit' placements"
_SOLVED_4X4 = "1234\n3412\n2143\n4321\n"
_SOLVED_4X4_PLACEMENTS = ParseResult(value=tuple(
    (r, c, int(d)) for r, row in enumerate(_SOLVED_4X4.split()) for c, d in enumerate(row)))


@pytest.mark.parametrize("size", [4, 9])
@pytest.mark.parametrize("text,answer,program_output", [
    ("x" * 5_000_000, _NO_LABEL, _NO_GRID),
    ("Answer: " + "1" * 5_000_000, _NO_GRID, _NO_GRID),
    ("Answer: " + "1 " * 2_000_000, _NO_GRID, _NO_GRID),
    ("Answer:\n" + "r\n" * 2_000_000, _NO_GRID, _NO_GRID),
    ("```python\n" * 500_000, _NO_LABEL, _NO_GRID),
    ("answer:" * 800_000, _NO_GRID, _NO_GRID),
    # five megabytes of junk, then a real answer: found (a 4x4 grid is no 9x9 answer)
    ("x" * 5_000_000 + "\nAnswer:\n" + _SOLVED_4X4,
     {4: _SOLVED_4X4_PLACEMENTS, 9: "number 1234 out of range"},
     {4: _SOLVED_4X4_PLACEMENTS, 9: "number 1234 out of range"}),
], ids=["x", "long_digit_run", "spaced_digits", "letter_rows", "fences", "labels",
        "junk_then_answer"])
def test_parsers_handle_megabytes_of_text(text, answer, program_output, size):
    for parser, expected in ((parse_answer, answer), (parse_program_output, program_output)):
        if isinstance(expected, dict):
            expected = expected[size]
        with finishes_within(MEGABYTE_PARSE_BOUND_S, f"{parser.__name__}(..., {size}) on "
                                               f"{text[:12]!r}..."):
            result = parser(text, size)
        if isinstance(expected, ParseResult):
            assert result == expected
        else:
            assert not result.ok and result.value is None, result
            assert expected.format(n=size) in result.error


_HOSTILE_ENVS = [SudokuEnv(sandbox_limits=FAST, code_runner=_echo_runner),
                 SudokuEnv(box_size=3, sandbox_limits=FAST, code_runner=_echo_runner)]
for _env_base in _HOSTILE_ENVS:
    _env_base.reset(seed=3)


@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_hostile, st.sampled_from(_HOSTILE_ENVS))
def test_env_step_never_raises_on_hostile_text(text, base):
    env = base.clone()  # a fresh episode without regenerating the puzzle for every example
    for agent in ("tool", "planner"):  # the same text to both roles: half the generation cost
        obs, rewards, terms, truncs, infos = env.step({agent: text})
        assert math.isfinite(rewards[agent])
        for observation in obs.values():
            assert env.observation_space(agent).contains(observation)
        if not env.agents:
            break
