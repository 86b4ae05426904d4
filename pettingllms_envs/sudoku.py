"""Sudoku (``sudoku_v0``): a tool agent and a planner fill an n x n Sudoku with a unique solution.

The paper's Sudoku task (PettingLLMs / AT-GRPO, arXiv 2510.11062; 4x4 by default there): the
*tool* agent writes a Python program (e.g. backtracking) that prints the solved grid, the program
runs in the sandbox, and the *planner* reads its output and answers the grid (or some cells).
Everything that decides a reward is a pure function here (generation, solution counting,
parsing, scoring), so the tool's score is exactly "what the planner would get for this answer".

Train/test disjointness holds by construction on the instance itself: a seeded instance's
split is decided by a stable hash (SHA-256) of its solution grid (:func:`split_of_solution`),
and the generator keeps drawing full grids until that bucket matches the seed's split
(:func:`~pettingllms_rllib.envs.split_of_seed`). Since every generated puzzle has exactly one
solution, a train puzzle and a test puzzle never coincide, and they do not even share a
solution (stricter than hashing the givens, and the bucket is known before any cell is removed,
so test instances cost no extra uniqueness checks).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import re
from typing import Any, Mapping, Sequence

import numpy as np

from pettingllms_envs.common import (
    CodeRunner, ToolPlannerEnv, check_code_runner, check_float, check_int, check_prompt_style,
    check_sandbox_limits, clip_text, planner_role, refuse_unexpected_keywords,
    reward_coefficients, tool_role)
from pettingllms_envs.sandbox import SandboxLimits
from pettingllms_rllib.envs import ParseResult, quote_inline, split_of_seed

#: Packages a program of this task may never import (``sandbox: {packages: ...}`` naming one
#: is refused at start): its generator is the project's own (always refused).
SANDBOX_DATA_PACKAGES: tuple[str, ...] = ()

logger = logging.getLogger(__name__)

#: Rows of digits, ``EMPTY`` (0) for an empty cell; row 0 is the top row.
Grid = tuple[tuple[int, ...], ...]
#: ``(row, col, digit)``: rows and columns 0-based here, 1-based in prompts and answers.
Placement = tuple[int, int, int]
EMPTY = 0
SUPPORTED_BOX_SIZES = (2, 3)
#: A solution grid whose hash is 0 modulo this is a test instance (about 1 in 10).
TEST_BUCKETS = 10
MAX_PARSED_PLACEMENTS = 1_000
#: Lines of an answer that are read, and the longest line read (an answer needs far less).
MAX_ANSWER_LINES = 2_000
MAX_LINE_CHARS = 20_000
MAX_GENERATION_ATTEMPTS = 10_000

_ANSWER_LABEL = re.compile(r"answer\s*:", re.IGNORECASE)
#: ``_ANSWER_LABEL`` spelled backwards: searching the reversed text finds the LAST label in one
#: pass, however many labels a hostile response repeats.
_LABEL_REVERSED = re.compile(r":\s*rewsna", re.IGNORECASE)
_EMPTY_MARKS = "._0"
_ROW_CHARS = frozenset("123456789" + _EMPTY_MARKS)
#: Characters dropped from a line before reading it as a grid row ("1 2 | 3 4", "[1, 2, 3, 4],").
_ROW_JUNK = str.maketrans("", "", " \t\r\v\f|,[]'\"`*")
_SEPARATOR = re.compile(r"[-+=|\s]+")
_ALPHA = re.compile(r"[a-z]+")
_NUMBER = re.compile(r"\d+")
_PLACEMENT_CHARS = re.compile(r"[\d\s,;:=()\[\]{}<>.-]*")
_PLACEMENT_WORDS = frozenset({"r", "c", "v", "row", "col", "column", "value", "digit"})


# ------------------------------------------------------------------------------ task instances
@dataclasses.dataclass(frozen=True)
class SudokuTask:
    """One instance: the ``puzzle`` (givens, ``EMPTY`` elsewhere) and its unique ``solution``."""

    puzzle: Grid
    solution: Grid

    @property
    def size(self) -> int:
        return len(self.puzzle)

    @property
    def box_size(self) -> int:
        return box_size_of(self.size)

    @property
    def holes(self) -> int:
        return sum(value == EMPTY for row in self.puzzle for value in row)


def box_size_of(size: int) -> int:
    """The box side of an ``size`` x ``size`` grid (2 for 4x4, 3 for 9x9); ValueError otherwise."""
    for box_size in SUPPORTED_BOX_SIZES:
        if box_size * box_size == size:
            return box_size
    sizes = [b * b for b in SUPPORTED_BOX_SIZES]
    raise ValueError(f"a Sudoku grid must be {' or '.join(f'{n}x{n}' for n in sizes)}, "
                     f"got {size} rows")


def _grid_side(box_size: int) -> int:
    """The grid side for ``box_size`` (4 or 9); ValueError for an unsupported box size."""
    if isinstance(box_size, bool) or box_size not in SUPPORTED_BOX_SIZES:
        raise ValueError(f"box_size must be one of {SUPPORTED_BOX_SIZES} (4x4 or 9x9 grids), "
                         f"got {box_size!r}")
    return int(box_size) ** 2


def _as_grid(grid: Sequence[Sequence[int]]) -> Grid:
    """``grid`` as a tuple grid, checked: square, a supported size, integer digits 0..n."""
    try:
        rows = tuple(tuple(row) for row in grid)
    except TypeError as exc:
        raise ValueError(f"a grid must be a sequence of rows of integers: {exc}") from exc
    size = len(rows)
    box_size_of(size)
    for index, row in enumerate(rows):
        if len(row) != size:
            raise ValueError(f"row {index + 1} has {len(row)} cells, expected {size}")
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= size
               for v in row):
            raise ValueError(f"row {index + 1} must hold integers 0..{size}, got {row!r}")
    return tuple(tuple(int(v) for v in row) for row in rows)


def is_valid_placement(grid: Sequence[Sequence[int]], row: int, col: int, value: int) -> bool:
    """True if ``value`` at (``row``, ``col``) repeats no digit of that row, column or box.

    The cell's own content is ignored (so it also checks a filled cell); rows and columns are
    0-based. A value outside 1..n or a cell off the grid is not a valid placement.
    """
    size = len(grid)
    if not (0 <= row < size and 0 <= col < size and 1 <= value <= size):
        return False
    box = box_size_of(size)
    top, left = row - row % box, col - col % box
    for index in range(size):
        if index != col and grid[row][index] == value:
            return False
        if index != row and grid[index][col] == value:
            return False
        r, c = top + index // box, left + index % box
        if (r, c) != (row, col) and grid[r][c] == value:
            return False
    return True


def _search(cells: list[int], box_size: int, limit: int,
            rng: np.random.Generator | None = None) -> list[tuple[int, ...]]:
    """Up to ``limit`` completions of the flat grid ``cells`` (0 = empty), by backtracking.

    Bitmasks of used digits per row, column and box; the next cell is always one with the
    fewest candidates, so forced cells are filled first and proving uniqueness of a 9x9 puzzle
    takes milliseconds. With ``rng`` the candidates are tried in a random order (used to draw
    random full grids). Givens that already conflict have no completion.
    """
    size = box_size * box_size
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    empties = []
    for index, value in enumerate(cells):
        row, col = divmod(index, size)
        box = (row // box_size) * box_size + col // box_size
        if value == EMPTY:
            empties.append((index, row, col, box))
            continue
        bit = 1 << value
        if (rows[row] | cols[col] | boxes[box]) & bit:
            return []
        rows[row] |= bit
        cols[col] |= bit
        boxes[box] |= bit
    all_digits = ((1 << size) - 1) << 1
    found: list[tuple[int, ...]] = []

    def descend() -> None:
        best, best_mask, best_count = None, 0, size + 1
        for cell in empties:
            if cells[cell[0]] != EMPTY:
                continue
            mask = all_digits & ~(rows[cell[1]] | cols[cell[2]] | boxes[cell[3]])
            count = mask.bit_count()
            if count < best_count:
                best, best_mask, best_count = cell, mask, count
                if count <= 1:
                    break
        if best is None:
            found.append(tuple(cells))
            return
        digits = [d for d in range(1, size + 1) if best_mask >> d & 1]
        if rng is not None and len(digits) > 1:
            digits = [digits[k] for k in rng.permutation(len(digits))]
        index, row, col, box = best
        for digit in digits:
            bit = 1 << digit
            cells[index] = digit
            rows[row] |= bit
            cols[col] |= bit
            boxes[box] |= bit
            descend()
            cells[index] = EMPTY
            rows[row] ^= bit
            cols[col] ^= bit
            boxes[box] ^= bit
            if len(found) >= limit:
                return

    descend()
    return found


def _flat(grid: Grid) -> list[int]:
    return [value for row in grid for value in row]


def _unflat(cells: Sequence[int], size: int) -> Grid:
    return tuple(tuple(cells[r * size:(r + 1) * size]) for r in range(size))


def count_solutions(grid: Sequence[Sequence[int]], limit: int = 2) -> int:
    """How many solutions ``grid`` (0 = empty) has, counting no further than ``limit``.

    ``count_solutions(puzzle) == 1`` is the uniqueness test (it stops at the second solution).
    Givens that break a rule give 0.
    """
    rows = _as_grid(grid)
    return len(_search(_flat(rows), box_size_of(len(rows)), max(1, int(limit))))


def solve(grid: Sequence[Sequence[int]]) -> Grid | None:
    """A solution of ``grid`` (the solution, for a puzzle with a unique one), or None."""
    rows = _as_grid(grid)
    found = _search(_flat(rows), box_size_of(len(rows)), 1)
    return _unflat(found[0], len(rows)) if found else None


def random_full_grid(rng: np.random.Generator, box_size: int) -> Grid:
    """A random complete grid: backtracking from an empty grid with candidates in random order
    (every complete grid can come out, unlike shuffles of one base pattern)."""
    size = _grid_side(box_size)
    found = _search([EMPTY] * (size * size), box_size, 1, rng)
    return _unflat(found[0], size)


def split_of_solution(solution: Sequence[Sequence[int]]) -> str:
    """``"test"`` or ``"train"``: the split a puzzle with this solution belongs to.

    A stable hash (SHA-256, not Python's salted ``hash``) of the grid's size and digits, so the
    answer is the same on every machine and run; ``"test"`` for 1 grid in ``TEST_BUCKETS``.
    """
    rows = _as_grid(solution)
    key = f"sudoku-{len(rows)}x{len(rows)}:" + "".join(str(v) for row in rows for v in row)
    digest = hashlib.sha256(key.encode("ascii")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_BUCKETS == 0 else "train"


def split_of_puzzle(puzzle: Sequence[Sequence[int]]) -> str:
    """The split of a puzzle with a unique solution (that of its solution); ValueError if the
    puzzle does not have exactly one."""
    rows = _as_grid(puzzle)
    found = _search(_flat(rows), box_size_of(len(rows)), 2)
    if len(found) != 1:
        raise ValueError(f"the puzzle has {'no' if not found else 'more than one'} solution")
    return split_of_solution(_unflat(found[0], len(rows)))


def generate_puzzle(rng: np.random.Generator, box_size: int, num_holes: int,
                    *, split: str = "train") -> SudokuTask:
    """A puzzle with a unique solution from ``split`` ("train" or "test"), drawn from ``rng``.

    Full grids are drawn (:func:`random_full_grid`) until :func:`split_of_solution` says
    ``split``; then cells are emptied in a random order, each kept empty only if the puzzle
    still has exactly one solution, until ``num_holes`` are empty or no cell is left to try
    (a 4x4 puzzle cannot have more than 12 holes, a 9x9 one more than 64, and the greedy
    order usually stops before that).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    size = _grid_side(box_size)
    num_holes = check_int("num_holes", num_holes, minimum=1)
    for _ in range(MAX_GENERATION_ATTEMPTS):
        solution = random_full_grid(rng, box_size)
        if split_of_solution(solution) == split:
            break
    else:  # probability (1 - 1/TEST_BUCKETS) ** MAX_GENERATION_ATTEMPTS: never in practice
        raise RuntimeError(f"no {split} grid in {MAX_GENERATION_ATTEMPTS} draws")
    cells = _flat(solution)
    removed = 0
    for index in rng.permutation(size * size):
        if removed >= num_holes:
            break
        value, cells[index] = cells[index], EMPTY
        if len(_search(list(cells), box_size, 2)) == 1:
            removed += 1
        else:
            cells[index] = value
    if removed < num_holes:
        logger.debug("sudoku: stopped at %d of %d holes (uniqueness)", removed, num_holes)
    return SudokuTask(_unflat(cells, size), solution)


def render_grid(grid: Sequence[Sequence[int]], *, boxes: bool = True) -> str:
    """ASCII picture, one row per line, ``.`` for an empty cell; with ``boxes``, ``|`` and
    ``-`` lines mark the boxes (``1 . | 3 4``)."""
    size = len(grid)
    box = box_size_of(size)
    lines = []
    for r, row in enumerate(grid):
        if boxes and r and r % box == 0:
            lines.append("-+-".join("-" * (2 * box - 1) for _ in range(box)))
        cells = [str(v) if v else "." for v in row]
        groups = [" ".join(cells[c:c + box]) for c in range(0, size, box)]
        lines.append((" | " if boxes else " ").join(groups))
    return "\n".join(lines)


def grid_literal(grid: Sequence[Sequence[int]]) -> str:
    """The grid as a Python list literal, 0 for empty (for the tool agent to embed)."""
    return "[" + ", ".join("[" + ", ".join(str(v) for v in row) + "]" for row in grid) + "]"


def example_grid(box_size: int) -> Grid:
    """A fixed complete grid used only to show the answer format in prompts."""
    size = box_size * box_size
    return tuple(tuple((box_size * (r % box_size) + r // box_size + c) % size + 1
                       for c in range(size)) for r in range(size))


# ------------------------------------------------------------------------------ parsing
def _grid_cells(text: str, size: int) -> tuple[int, ...] | str | None:
    """A line read as grid cells: a tuple (``size`` cells, or ``size * size`` for a whole grid
    on one line), an error string (shaped like a row but a digit is too large), or None."""
    cleaned = text.translate(_ROW_JUNK)
    if len(cleaned) not in (size, size * size) or not _ROW_CHARS.issuperset(cleaned):
        return None
    cells = tuple(EMPTY if ch in _EMPTY_MARKS else int(ch) for ch in cleaned)
    if max(cells) > size:
        return f"digit {max(cells)} in a {size}x{size} grid (digits are 1-{size})"
    return cells


def _placements_in(text: str, size: int) -> list[Placement] | str | None:
    """A line read as placements ``row col digit`` (1-based; ``r1c2=3``, ``(1, 2, 3)``, several
    per line allowed): the list, an error string (a number out of range), or None."""
    lowered = text.lower()
    if any(word.group() not in _PLACEMENT_WORDS for word in _ALPHA.finditer(lowered)):
        return None
    if not _PLACEMENT_CHARS.fullmatch(_ALPHA.sub(" ", lowered)):
        return None
    numbers = []
    for match in _NUMBER.finditer(lowered):
        token = match.group()
        if len(token) > 2 or not 1 <= int(token) <= size:
            return f"number {token[:8]} out of range in placement line (rows, columns and " \
                   f"digits are 1-{size})"
        numbers.append(int(token))
        if len(numbers) > 3 * MAX_PARSED_PLACEMENTS:
            return f"more than {MAX_PARSED_PLACEMENTS} placements"
    if not numbers or len(numbers) % 3:
        return None
    return [(numbers[k] - 1, numbers[k + 1] - 1, numbers[k + 2])
            for k in range(0, len(numbers), 3)]


def _grid_placements(rows: Sequence[Sequence[int]]) -> tuple[Placement, ...]:
    return tuple((r, c, v) for r, row in enumerate(rows) for c, v in enumerate(row) if v)


def parse_answer_body(body: str, size: int) -> ParseResult:
    """Read a ``size`` x ``size`` Sudoku answer from ``body`` (the text after ``Answer:``).

    Two forms, decided by the first line that reads as either (prose lines before it, blank
    lines, code fences, ``---+---`` separators and lines over ``MAX_LINE_CHARS`` are skipped;
    only the first ``MAX_ANSWER_LINES`` lines are read):

    * a grid: ``size`` rows of ``size`` cells (digits; ``.``, ``_`` or ``0`` for a cell left
      empty; spaces, ``|``, commas, brackets and quotes ignored), or the whole grid on one line
      (``size * size`` cells, e.g. a printed Python list of lists); text after the grid is
      ignored;
    * placements: lines of ``row col digit`` triples, 1-based (``2 3 4``, ``r2c3=4``,
      ``(2, 3, 4)``, ``row 2 col 3 digit 4``), several per line or separated by ``;``; reading
      stops at the first line that is not placements.

    The value is a tuple of placements ``(row, col, digit)`` with 0-based row and column (for a
    grid, one per digit, row-major); a grid of only empty cells gives ``()``. Never raises.
    """
    rows: list[tuple[int, ...]] = []
    placements: list[Placement] = []
    mode = None
    lines = body.split("\n", MAX_ANSWER_LINES)[:MAX_ANSWER_LINES]
    for line in lines:
        text = line.strip().strip("*>").strip()
        if not text or len(text) > MAX_LINE_CHARS or text.startswith("```") \
                or _SEPARATOR.fullmatch(text):
            continue
        if mode != "placements":
            cells = _grid_cells(text, size)
            if isinstance(cells, str):
                return ParseResult(error=cells)
            if cells is not None and mode is None and len(cells) == size * size:
                return ParseResult(value=_grid_placements(
                    [cells[r * size:(r + 1) * size] for r in range(size)]))
            if cells is not None and len(cells) == size:
                mode = "grid"
                rows.append(cells)
                if len(rows) == size:
                    return ParseResult(value=_grid_placements(rows))
                continue
            if mode == "grid":
                return ParseResult(error=f"the grid has {len(rows)} of {size} rows, then "
                                         f"{quote_inline(text, 40)}")
        found = _placements_in(text, size)
        if isinstance(found, str):
            return ParseResult(error=found)
        if found is None:
            if mode == "placements":
                break
            continue
        mode = "placements"
        placements.extend(found)
        if len(placements) > MAX_PARSED_PLACEMENTS:
            return ParseResult(error=f"more than {MAX_PARSED_PLACEMENTS} placements")
    if mode == "placements":
        return ParseResult(value=tuple(placements))
    if mode == "grid":
        return ParseResult(error=f"the grid has {len(rows)} of {size} rows")
    return ParseResult(error=f"no {size}x{size} grid rows or 'row col digit' placements")


def parse_answer(text: str, size: int) -> ParseResult:
    """The planner's answer: what follows the LAST ``Answer:`` label (any case), read by
    :func:`parse_answer_body`. No label: a parse error."""
    last = _LABEL_REVERSED.search(text[::-1])
    if last is None:
        return ParseResult(error="no 'Answer:' line")
    return parse_answer_body(text[len(text) - last.start():], size)


def parse_program_output(stdout: str, size: int) -> ParseResult:
    """The tool program's stdout: after its last ``Answer:`` label if it prints one, else all
    of stdout, read by :func:`parse_answer_body`."""
    if not stdout.strip():
        return ParseResult(error="the program printed nothing")
    if _ANSWER_LABEL.search(stdout):
        return parse_answer(stdout, size)
    return parse_answer_body(stdout, size)


# ------------------------------------------------------------------------------ scoring
@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Coefficients of the answer score (see :func:`score_answer`)."""

    progress_coef: float = 1.0
    violation_penalty: float = 1.0
    wrong_penalty: float = 0.5
    solve_bonus: float = 2.0


@dataclasses.dataclass(frozen=True)
class AnswerOutcome:
    """Result of applying an answer: the new board, its score and what happened to each cell."""

    board: Grid
    reward: float
    filled: tuple[Placement, ...]
    violations: tuple[str, ...]
    wrong: tuple[Placement, ...]
    unchanged: int
    ignored: int
    solved: bool

    def describe(self, max_items: int = 6) -> str:
        parts = [f"{len(self.filled)} cell(s) filled correctly"]
        if self.violations:
            shown = "; ".join(self.violations[:max_items])
            more = len(self.violations) - max_items
            parts.append(f"{len(self.violations)} rejected as rule violations ({shown}"
                         + (f"; {more} more" if more > 0 else "") + ")")
        if self.wrong:
            shown = ", ".join(_cell_name(p) for p in self.wrong[:max_items])
            more = len(self.wrong) - max_items
            parts.append(f"{len(self.wrong)} rejected as not the solution ({shown}"
                         + (f", {more} more" if more > 0 else "") + ")")
        if self.unchanged:
            parts.append(f"{self.unchanged} digit(s) already on the grid")
        if self.ignored:
            parts.append(f"{self.ignored} repeated placement(s) of one cell ignored")
        if self.solved:
            parts.append("the Sudoku is solved")
        return "; ".join(parts)


def _cell_name(placement: Placement) -> str:
    row, col, digit = placement
    return f"r{row + 1}c{col + 1}={digit}"


def _conflict(board: Sequence[Sequence[int]], row: int, col: int, digit: int) -> str:
    """Which rule a digit breaks at (row, col) (for feedback)."""
    size = len(board)
    box = box_size_of(size)
    if any(board[row][c] == digit for c in range(size) if c != col):
        return f"{digit} is already in row {row + 1}"
    if any(board[r][col] == digit for r in range(size) if r != row):
        return f"{digit} is already in column {col + 1}"
    return f"{digit} is already in its {box}x{box} box"


def score_answer(task: SudokuTask, board: Grid, placements: Sequence[Placement],
                 rewards: RewardConfig) -> AnswerOutcome:
    """Apply ``placements`` (in range, as the parsers return them) to ``board`` in order and
    score them (pure; the env and the tool share it). With n the grid side and H the puzzle's
    number of holes:

    * a second placement on a cell this answer already placed is ignored (so listing every
      digit for a cell cannot find its value by trial);
    * a digit equal to the cell's current digit changes nothing and scores nothing;
    * a *violation*, ``-violation_penalty / n^2``, not applied: a different digit on a filled
      cell (a given, or a cell solved earlier), or a digit that repeats in its row, column or
      box (checked against the board as this answer has updated it so far);
    * a *wrong* digit, ``-wrong_penalty / n^2``, not applied: it breaks no rule yet but differs
      from the unique solution. Applying it would leave a board that cannot be completed
      without an erase action, making the rest of the episode unwinnable; rejecting it keeps
      every filled cell correct, so "full board" means "solved";
    * a correct digit, ``+progress_coef / H``, applied: solving the whole puzzle earns
      ``progress_coef`` in total over the episode;
    * ``+solve_bonus`` when this answer completes the board (+2 by default).

    At most n^2 placements count per answer, so one answer's penalties total at most
    ``max(violation_penalty, wrong_penalty)`` (with the defaults, never below an unusable
    answer's -1).
    """
    size = len(board)
    cells = size * size
    work = [list(row) for row in board]
    seen: set[tuple[int, int]] = set()
    filled, violations, wrong = [], [], []
    unchanged = ignored = 0
    for row, col, digit in placements:
        if (row, col) in seen:
            ignored += 1
            continue
        seen.add((row, col))
        current = work[row][col]
        if current == digit:
            unchanged += 1
        elif current != EMPTY:
            kind = "a given" if task.puzzle[row][col] != EMPTY else "a filled cell"
            violations.append(f"{_cell_name((row, col, digit))} overwrites {kind}")
        elif not is_valid_placement(work, row, col, digit):
            violations.append(f"{_cell_name((row, col, digit))}: "
                              f"{_conflict(work, row, col, digit)}")
        elif task.solution[row][col] != digit:
            wrong.append((row, col, digit))
        else:
            work[row][col] = digit
            filled.append((row, col, digit))
    solved = all(v != EMPTY for row in work for v in row)
    reward = (rewards.progress_coef * len(filled) / max(1, task.holes)
              - rewards.violation_penalty * len(violations) / cells
              - rewards.wrong_penalty * len(wrong) / cells
              + (rewards.solve_bonus if solved and filled else 0.0))
    return AnswerOutcome(tuple(tuple(row) for row in work), reward, tuple(filled),
                         tuple(violations), tuple(wrong), unchanged, ignored, solved)


# ------------------------------------------------------------------------------ the env
class SudokuEnv(ToolPlannerEnv):
    """Env card: ``sudoku_v0``.

    Roles and workflow (sequential, one turn = both stages): ``tool`` then ``planner``
    (``workflow = [("tool",), ("planner",)]``).

    * ``tool``: writes a program in a ```python fenced block that solves the Sudoku and prints
      the solved grid, one row per line (any answer form below works, with or without an
      ``Answer:`` label). It runs in :mod:`~pettingllms_envs.sandbox` with ``sandbox_limits``.
      Local reward: the score the printed answer *would* earn if the planner gave it now
      (simulated; the grid does not change), or ``invalid_action_penalty`` if there is no code
      block, the program fails or times out, or its output is not a Sudoku answer.
    * ``planner``: sees the tool's latest output (or error) and ends with ``Answer:`` followed
      by the completed grid (n rows of n digits, spaces optional, ``.``/``0`` for a cell left
      open) or by placements ``row col digit`` (1-based), one per line (see
      :func:`parse_answer_body`). No label, or nothing readable after it: parse error,
      ``invalid_action_penalty``, grid unchanged. Otherwise local reward = :func:`score_answer`.

    Spaces: ``gymnasium.spaces.Text`` for both; observations are prompts showing the rules, the
    current grid (``.`` empty; ``|``/``-`` box lines in the full style; the tool also gets it as
    a Python list with 0 for empty), the turn and the cells left, and the role's instruction.

    Reward: ``alpha * team + local``; team = 1.0 once the grid is solved, else 0.0 (given to the
    acting agent of each stage); ``success`` = solved. Local (:func:`score_answer`, H = holes of
    the puzzle, n = grid side): ``+progress_coef / H`` per newly filled correct cell;
    ``-violation_penalty / n^2`` per digit that repeats in its row, column or box or overwrites
    a filled cell; ``-wrong_penalty / n^2`` per digit that breaks no rule but is not the
    solution; neither of these is applied; ``+solve_bonus`` when the grid gets complete.

    Termination: terminated when the grid is solved; truncated after ``max_turns`` turns.

    Instances: ``reset(seed=s)`` draws from ``np.random.default_rng(s)`` a puzzle with a unique
    solution (:func:`generate_puzzle`) from the split of the seed (``split_of_seed``: seeds
    >= ``TRAIN_SEED_LIMIT`` are test instances); the split of an instance is a SHA-256 bucket of
    its solution (:func:`split_of_solution`), so train and test puzzles never coincide.
    ``reset(options={"task": ...})`` plays a given puzzle instead (a :class:`SudokuTask`, a
    grid as rows of ints or strings like ``"1.3."``, or ``{"puzzle": grid}``); it must be of
    this env's size, break no rule and have exactly one solution (its split is not checked:
    :func:`split_of_puzzle` tells it).

    Args (keyword-only; the default grid is the paper's 4x4):
        box_size: side of a box, 2 (4x4 grid, the paper's) or 3 (9x9).
        num_holes: empty cells wanted (default n^2 // 2: 8 for 4x4, 40 for 9x9; 1..n^2). It is
            a cap: removal stops earlier if no further cell can go without losing uniqueness.
        max_turns: turns T (3). alpha: team-reward weight (1.0).
        invalid_action_penalty: local reward of an unusable response (-1.0).
        rewards: the reward coefficients, a mapping of some of :class:`RewardConfig`'s fields
            (progress_coef 1.0, violation_penalty 1.0, wrong_penalty 0.5, solve_bonus 2.0; all
            >= 0), as in Plan-Path and Sokoban. A coefficient given as its own keyword (an env
            config written before ``rewards:``) loads as a ``rewards`` entry, logged.
        sandbox_limits: :class:`SandboxLimits` or a dict of its fields (default 3 s wall and CPU,
            256 MB).
        sandbox: ``{launcher: ..., packages: [...]}`` (None): the sandbox launcher
            (``unshare`` chooses the weaker one explicitly; see docs/sandbox.md) and the
            installed packages its programs may import besides the standard library;
            ``SANDBOX_DATA_PACKAGES`` and the project are refused at construction.
        prompt_style: "full" (the paper-style prompt with rules, box lines, turn, last result)
            or "compact" (a few lines: grid, rule, answer format), for very small models.
        code_runner: advanced; ``code -> SandboxResult`` replacing the sandbox (a remote
            executor, or a fake in tests).
        single_agent: the single-agent baseline: the planner alone, no tool role, same turn
            budget and feedback.
    """

    metadata = {"name": "sudoku_v0"}
    answer_kind = "a Sudoku answer"
    simulated_as = "If answered now"

    def __init__(self, *, box_size: int = 2, num_holes: int | None = None, max_turns: int = 3,
                 alpha: float = 1.0, invalid_action_penalty: float = -1.0,
                 sandbox_limits: SandboxLimits | Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None,
                 rewards: RewardConfig | Mapping[str, float] | None = None,
                 prompt_style: str = "full", code_runner: CodeRunner | None = None,
                 single_agent: bool = False, **retired_keywords: Any):
        self.size = _grid_side(check_int("box_size", box_size, minimum=2))
        self.box_size = int(box_size)
        self.num_holes = check_int(
            "num_holes", self.size ** 2 // 2 if num_holes is None else num_holes, minimum=1)
        if self.num_holes > self.size ** 2:
            raise ValueError(f"num_holes must be <= {self.size ** 2} for a {self.size}x{self.size} "
                             f"grid, got {num_holes!r}")
        check_int("max_turns", max_turns, minimum=1)
        self.reward_config = reward_coefficients(RewardConfig, rewards, retired_keywords,
                                                 env_class=type(self).__name__, log=logger)
        refuse_unexpected_keywords(type(self).__name__, retired_keywords)
        self.sandbox_limits = check_sandbox_limits(
            sandbox_limits, sandbox=sandbox, data_packages=SANDBOX_DATA_PACKAGES,
            runner=code_runner)
        self.prompt_style = check_prompt_style(prompt_style)
        self.code_runner = check_code_runner(code_runner)
        # Per instance: the planner's parser needs the grid size.
        self.roles = {
            "tool": tool_role("solves the Sudoku and prints the solved grid"),
            "planner": planner_role("'Answer:' followed by the completed grid or 'row col "
                                    "digit' placements",
                                    functools.partial(parse_answer, size=self.size)),
        }
        self._choose_team(single_agent)
        super().__init__(alpha=check_float("alpha", alpha), max_turns=max_turns,
                         invalid_action_penalty=check_float("invalid_action_penalty",
                                                             invalid_action_penalty))
        self.task: SudokuTask | None = None
        self.board: Grid = ()
        self._reset_tool_report()
        self.last_result = ""

    # ------------------------------------------------------------------ hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        """A seeded instance of the seed's split, or a given one (``options["task"]``)."""
        given = options.get("task")
        if given is None:
            self.task = generate_puzzle(self.np_random, self.box_size, self.num_holes,
                                        split=split_of_seed(seed))
        else:
            self.task = _check_task(given, self.size)
        self.board = self.task.puzzle
        self._reset_tool_report()
        self.last_result = ""

    def _observe(self, agent: str) -> str:
        if self.prompt_style == "compact":
            return self._observe_compact(agent)
        n, box = self.size, self.box_size
        left = sum(v == EMPTY for row in self.board for v in row)
        lines = [
            f"Sudoku {n}x{n}: fill every empty cell ('.') with a digit 1-{n} so that every row, "
            f"every column and every {box}x{box} box contains each digit 1-{n} exactly once. "
            "Given digits cannot be changed.",
            f"Current grid (rows 1-{n} from the top, columns 1-{n} from the left; '|' and '-' "
            f"lines mark the {box}x{box} boxes):",
            render_grid(self.board),
            f"Turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}. "
            f"Empty cells left: {left} of {self.task.holes}.",
        ]
        if self.last_result:
            lines.append(f"Result of the last answer: {self.last_result}")
        if agent == "tool":
            lines.append(
                "You are the tool agent. Write a Python program in a ```python fenced block that "
                "solves this Sudoku (e.g. by backtracking) and prints the solved grid, one row "
                f"of {n} digits per line. Embed the grid in the program (it gets no input); here "
                f"it is as a Python list, 0 = empty:\ngrid = {grid_literal(self.board)}\n"
                f"It runs in a sandbox with a {self.sandbox_limits.wall_time_s:g} s limit.")
        else:
            lines += [
                f"Tool agent's latest result:\n{self.tool_report}",
                "You are the planner. Work out the missing digits and end your reply with a line "
                f"'Answer:' followed by the completed grid, one row of {n} digits per line, e.g."
                f"\nAnswer:\n{render_grid(self._example_grid(), boxes=False)}\n"
                "or fill only some cells, one 'row col digit' (1-based) per line, e.g."
                "\nAnswer:\n1 3 2\n"
                "A digit that repeats in its row, column or box, overwrites a filled cell or is "
                "not the solution is rejected and penalised.",
            ]
        return "\n".join(lines)

    def compact_report_chars(self) -> int:
        """Room for a whole printed grid (its digits, separators and line ends)."""
        n = self.size
        return max(120, 2 * n * n + n)

    def _observe_compact(self, agent: str) -> str:
        """A short prompt for ~100M-parameter models, which lose the format in long prompts."""
        n, box = self.size, self.box_size
        rule = f"Sudoku {n}x{n}: digits 1-{n}, no repeats in a row, column or {box}x{box} box."
        if agent == "tool":
            return "\n".join([
                f"{rule} 0 = empty.", f"grid = {grid_literal(self.board)}",
                "Write a ```python block that solves it and prints the grid, "
                f"like: print('{self.example_answer()[0]}')"])
        return "\n".join([f"{rule} . = empty.", render_grid(self.board, boxes=False),
                          f"Tool: {self.tool_report_compact}",
                          "Answer with the full grid on one line, like: "
                          f"{self.example_answer()[1]}"])

    # ------------------------------------------------------------------ stages
    def _example_candidates(self) -> list[tuple[str, str]]:
        """The fixed example grid, then the same grid with every digit d shifted to d + 1
        (mod n): both are complete sudokus, and at most one can be this puzzle's solution."""
        n = self.size
        grid = example_grid(self.box_size)
        shifted = tuple(tuple(v % n + 1 for v in row) for row in grid)
        return [(_one_line(g), f"Answer: {_one_line(g)}") for g in (grid, shifted)]

    def _example_grid(self) -> Grid:
        """The grid of :meth:`example_answer`, for the full prompt's multi-line example."""
        return tuple(tuple(int(c) for c in row) for row in self.example_answer()[0].split())

    def _parse_tool_output(self, stdout: str) -> ParseResult:
        return parse_program_output(stdout, self.size)

    def _solved(self) -> bool:
        return self.board == self.task.solution

    def _simulate(self, placements: Sequence[Placement]) -> AnswerOutcome:
        return score_answer(self.task, self.board, placements, self.reward_config)

    def _apply_planner(self, parsed: ParseResult) -> tuple[float, str]:
        if not parsed.ok:
            self.last_result = f"not understood ({parsed.error})."
            return self.invalid_action_penalty, f"Answer not understood: {parsed.error}."
        outcome = self._simulate(parsed.value)
        self.board = outcome.board
        self.last_result = clip_text(outcome.describe() + ".")
        return outcome.reward, outcome.describe() + "."


# ------------------------------------------------------------------------------ validation
def _one_line(grid: Grid) -> str:
    """A grid as one line of rows (``1234 3412 ...``): the compact prompt's answer example,
    which ~100M models copy more reliably than a multi-line block."""
    return " ".join("".join(map(str, row)) for row in grid)


def _read_task_rows(rows: Sequence[Any], size: int) -> Grid:
    if isinstance(rows, str) or not isinstance(rows, Sequence):
        raise ValueError("options['task'] must be a SudokuTask, a grid (rows of ints or "
                         f"strings) or {{'puzzle': grid}}, got {type(rows).__name__}")
    grid = []
    for index, row in enumerate(rows):
        if isinstance(row, str):
            cells = _grid_cells(row, size)
            if not isinstance(cells, tuple) or len(cells) != size:
                raise ValueError(f"options['task'] row {index + 1} {row!r} is not {size} cells "
                                 f"(digits 1-{size}, '.' or 0 for empty)")
            grid.append(cells)
        else:
            grid.append(tuple(row))
    return _as_grid(grid)


def _check_task(task: SudokuTask | Mapping[str, Any] | Sequence[Any], size: int) -> SudokuTask:
    """A hand-made puzzle, checked: this env's size, no broken rule, exactly one solution."""
    if isinstance(task, Mapping):
        if "puzzle" not in task:
            raise ValueError("options['task'] as a dict needs a 'puzzle' grid")
        task = task["puzzle"]
    given_solution = None
    if isinstance(task, SudokuTask):
        given_solution = _as_grid(task.solution)
        task = task.puzzle
    puzzle = _read_task_rows(task, size)
    if len(puzzle) != size:
        raise ValueError(f"options['task'] is {len(puzzle)}x{len(puzzle)}; this env plays "
                         f"{size}x{size} (box_size={box_size_of(size)})")
    if all(v != EMPTY for row in puzzle for v in row):
        raise ValueError("options['task'] has no empty cell")
    found = _search(_flat(puzzle), box_size_of(size), 2)
    if len(found) != 1:
        raise ValueError("options['task'] " + (
            "breaks a rule or has no solution" if not found else "has more than one solution"))
    solution = _unflat(found[0], size)
    if given_solution is not None and given_solution != solution:
        raise ValueError("options['task'].solution is not the puzzle's solution")
    return SudokuTask(puzzle, solution)
