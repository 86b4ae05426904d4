"""Sokoban (``sokoban_v0``): a tool agent and a planner push every box onto a goal.

The paper's Sokoban task (PettingLLMs / AT-GRPO, arXiv 2510.11062; 6x6 room, one box): the
*tool* agent writes a Python program (e.g. a breadth-first search over (player, boxes) states)
that prints a move list, the program runs in the sandbox, and the *planner* reads the program's
output and commits the moves. As in :mod:`pettingllms_envs.plan_path`, everything that decides
a reward is a pure function here (level generation, the solver, move simulation), and the
move parsing is plan_path's, so both grid tasks read answers by the same rules.

Levels come from *reverse play*: boxes start on their goals and the player pulls them
backwards at random, so every generated level is solvable by construction (the play undone is
a solution); :func:`solve` checks that independently in the tests.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from pettingllms_envs.common import (
    CodeRunner, check_int, move_examples, planner_role, refuse_unexpected_keywords,
    reward_coefficients, tool_role)
from pettingllms_envs.moves import MOVES, MoveListEnv, MoveListOutcome, parse_planner_answer
from pettingllms_envs.sandbox import SandboxLimits
from pettingllms_rllib.envs import split_of_seed

logger = logging.getLogger(__name__)

#: Packages a program of this task may never import (``sandbox: {packages: ...}`` naming one
#: is refused at start): its generator is the project's own (always refused).
SANDBOX_DATA_PACKAGES: tuple[str, ...] = ()

Position = tuple[int, int]
#: The ASCII legend shown to the agents (and accepted by :func:`level_from_ascii`).
WALL, FLOOR, GOAL, BOX, BOX_ON_GOAL, PLAYER, PLAYER_ON_GOAL = "#", "_", "O", "X", "V", "P", "S"
LEGEND = (f"'{WALL}' wall, '{FLOOR}' floor, '{GOAL}' goal, '{BOX}' box, "
          f"'{BOX_ON_GOAL}' box on a goal, '{PLAYER}' player, '{PLAYER_ON_GOAL}' player on a goal")
MIN_ROOM_SIZE = 5
#: One in TEST_BUCKETS levels (by a stable hash of the level) belongs to the test split.
TEST_BUCKETS = 10
MAX_GENERATION_ATTEMPTS = 2_000
#: Moves of the episode shown in a prompt (the most recent ones; the count is always shown).
SHOWN_MOVES = 200


# ------------------------------------------------------------------------------ levels
@dataclasses.dataclass(frozen=True)
class SokobanLevel:
    """A level *and* a state: ``grid`` rows of ``#`` (wall) and ``_`` (floor), the ``player``,
    the ``boxes`` and the ``goals`` as (row, col), boxes and goals as sorted tuples (so equal
    states compare, hash and pickle identically). Cells outside the grid count as walls."""

    grid: tuple[str, ...]
    player: Position
    boxes: tuple[Position, ...]
    goals: tuple[Position, ...]

    @property
    def solved(self) -> bool:
        return set(self.boxes) == set(self.goals)

    def with_state(self, player: Position, boxes: Iterable[Position]) -> "SokobanLevel":
        """The same map and goals with the player and boxes moved."""
        return dataclasses.replace(self, player=player, boxes=tuple(sorted(boxes)))


def is_floor(grid: Sequence[str], pos: Position) -> bool:
    """True if ``pos`` is inside the grid and not a wall (boxes are not considered)."""
    row, col = pos
    return 0 <= row < len(grid) and 0 <= col < len(grid[row]) and grid[row][col] != WALL


def _step(pos: Position, letter: str) -> Position:
    d_row, d_col = MOVES[letter]
    return pos[0] + d_row, pos[1] + d_col


def render_level(level: SokobanLevel) -> str:
    """ASCII picture in the :data:`LEGEND` (the inverse of :func:`level_from_ascii`)."""
    rows = [list(row) for row in level.grid]
    for row, col in level.goals:
        rows[row][col] = GOAL
    goals = set(level.goals)
    for row, col in level.boxes:
        rows[row][col] = BOX_ON_GOAL if (row, col) in goals else BOX
    row, col = level.player
    rows[row][col] = PLAYER_ON_GOAL if level.player in goals else PLAYER
    return "\n".join("".join(r) for r in rows)


def level_from_ascii(picture: str | Sequence[str]) -> SokobanLevel:
    """Read a picture in the :data:`LEGEND` (a string with newlines or a list of rows).

    Raises ``ValueError`` unless it is well-formed: only legend characters, exactly one player,
    and what :func:`check_level` asks. Solvability is not required. Leading and trailing blank
    lines of a string are ignored (YAML block scalars end with one).
    """
    rows = picture.strip("\n").split("\n") if isinstance(picture, str) \
        else [str(r) for r in picture]
    player, boxes, goals, grid = [], [], [], []
    for r, row in enumerate(rows):
        cells = []
        for c, char in enumerate(row):
            if char not in (WALL, FLOOR, GOAL, BOX, BOX_ON_GOAL, PLAYER, PLAYER_ON_GOAL):
                raise ValueError(f"level picture: {char!r} at ({r}, {c}) is not in the legend "
                                 f"({LEGEND})")
            if char in (PLAYER, PLAYER_ON_GOAL):
                player.append((r, c))
            if char in (BOX, BOX_ON_GOAL):
                boxes.append((r, c))
            if char in (GOAL, BOX_ON_GOAL, PLAYER_ON_GOAL):
                goals.append((r, c))
            cells.append(WALL if char == WALL else FLOOR)
        grid.append("".join(cells))
    if len(player) != 1:
        raise ValueError(f"level picture: needs exactly one player, found {len(player)}")
    return check_level(SokobanLevel(tuple(grid), player[0], tuple(boxes), tuple(goals)))


def check_level(level: SokobanLevel) -> SokobanLevel:
    """``level`` normalised (sorted boxes/goals), or a ``ValueError`` if it is malformed:
    a non-rectangular grid or one with characters other than ``#``/``_``; a player, box or goal
    off the floor; boxes on the player or on each other; ``len(boxes) != len(goals)``; no box;
    or every box already on a goal (nothing to do)."""
    grid = tuple(str(row) for row in level.grid)
    if not grid or not grid[0] or any(len(row) != len(grid[0]) for row in grid) \
            or any(set(row) - {WALL, FLOOR} for row in grid):
        raise ValueError("level grid must be non-empty, rectangular rows of '#' and '_'")

    def position(value: Any, what: str) -> Position:
        if isinstance(value, (str, bytes)):
            raise ValueError(f"level {what} must be a (row, col) pair, got {value!r}")
        try:
            row, col = (int(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(f"level {what} must be a (row, col) pair, got {value!r}") from None
        if not is_floor(grid, (row, col)):
            raise ValueError(f"level {what} {(row, col)} is not on a floor cell")
        return row, col

    player = position(level.player, "player")
    boxes = [position(b, "box") for b in level.boxes]
    goals = [position(g, "goal") for g in level.goals]
    if not boxes or len(boxes) != len(goals):
        raise ValueError(f"level needs as many boxes as goals (>= 1); got {len(boxes)} boxes, "
                         f"{len(goals)} goals")
    if len(set(boxes)) != len(boxes) or len(set(goals)) != len(goals) or player in boxes:
        raise ValueError("level boxes, goals and the player must not share cells "
                         "(a box and a goal may)")
    normalised = SokobanLevel(grid, player, tuple(sorted(boxes)), tuple(sorted(goals)))
    if normalised.solved:
        raise ValueError("level is already solved (every box is on a goal)")
    return normalised


def level_split(level: SokobanLevel) -> str:
    """``"test"`` for one in :data:`TEST_BUCKETS` levels, else ``"train"``: a stable hash of the
    picture, so the split is a property of the level itself, whatever seed produced it."""
    digest = hashlib.sha256(render_level(level).encode("ascii")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_BUCKETS == 0 else "train"


def _reachable(grid: Sequence[str], start: Position, boxes: Iterable[Position]) -> set[Position]:
    """Floor cells the player can walk to from ``start`` without pushing a box."""
    blocked = set(boxes)
    seen = {start}
    queue = collections.deque([start])
    while queue:
        cell = queue.popleft()
        for letter in MOVES:
            nxt = _step(cell, letter)
            if nxt not in seen and nxt not in blocked and is_floor(grid, nxt):
                seen.add(nxt)
                queue.append(nxt)
    return seen


def generate_level(rng: np.random.Generator, room_size: int, num_boxes: int,
                   reverse_pulls: int, *, split: str = "train",
                   max_attempts: int = MAX_GENERATION_ATTEMPTS) -> SokobanLevel:
    """A solvable level by reverse play in an open ``room_size`` x ``room_size`` room (the
    outer wall included, so the floor is ``room_size - 2`` square).

    Each attempt puts ``num_boxes`` boxes on random goal cells and the player on another free
    cell, then makes a random number of pulls between ``num_boxes`` and ``reverse_pulls`` (a
    fixed count would fix the parity of each box's distance to its goal and halve the reachable
    levels): the player walks to a cell next to a box and steps directly away from it, dragging
    the box one cell. Each pull is drawn at random among the possible ones that do not drag a
    box onto a goal, preferring boxes still on a goal. Last, the player walks to a random cell it can reach. Undoing the play (walk back, push
    instead of pull) solves the level, so it is solvable by construction. Attempts leaving any
    box on a goal (trivial), or whose :func:`level_split` is not ``split``, are discarded; the
    level is a deterministic function of the RNG state.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 1 <= num_boxes <= reverse_pulls:
        raise ValueError(f"need 1 <= num_boxes <= reverse_pulls, got {num_boxes}, {reverse_pulls}")
    inner = room_size - 2
    grid = tuple(WALL * room_size if r in (0, room_size - 1) else WALL + FLOOR * inner + WALL
                 for r in range(room_size))
    for _ in range(max_attempts):
        cells = rng.choice(inner * inner, size=num_boxes + 1, replace=False)
        spots = [(1 + int(i) // inner, 1 + int(i) % inner) for i in cells]
        goals, player = frozenset(spots[:-1]), spots[-1]
        boxes = set(goals)
        for _ in range(int(rng.integers(num_boxes, reverse_pulls + 1))):
            region = _reachable(grid, player, boxes)
            pulls = []  # (box, its new cell = where the player stands, where the player goes)
            for box in sorted(boxes):
                for d_row, d_col in MOVES.values():
                    stand = (box[0] + d_row, box[1] + d_col)
                    away = (stand[0] + d_row, stand[1] + d_col)
                    if stand in region and stand not in goals and away not in boxes \
                            and is_floor(grid, away):
                        pulls.append((box, stand, away))
            pulls = [p for p in pulls if p[0] in goals] or pulls
            if not pulls:
                break
            box, stand, player = pulls[int(rng.integers(len(pulls)))]
            boxes.remove(box)
            boxes.add(stand)
        region = sorted(_reachable(grid, player, boxes))
        player = region[int(rng.integers(len(region)))]
        if boxes.isdisjoint(goals):
            level = SokobanLevel(grid, player, tuple(sorted(boxes)), tuple(sorted(goals)))
            if level_split(level) == split:
                return level
    raise RuntimeError(f"no non-trivial {split} level with {num_boxes} box(es) in a "
                       f"{room_size}x{room_size} room after {max_attempts} attempts; use fewer "
                       "boxes or a bigger room")


# ------------------------------------------------------------------------------ solver
def _live_cells(grid: Sequence[str], goals: Iterable[Position]) -> set[Position]:
    """Cells from which a lone box can still be pushed onto some goal (others are dead ends)."""
    live = set(goals)
    queue = collections.deque(live)
    while queue:
        cell = queue.popleft()
        for d_row, d_col in MOVES.values():  # a box at `before` pushed this way lands on `cell`
            before = (cell[0] - d_row, cell[1] - d_col)
            stand = (before[0] - d_row, before[1] - d_col)
            if before not in live and is_floor(grid, before) and is_floor(grid, stand):
                live.add(before)
                queue.append(before)
    return live


def solve(level: SokobanLevel, *, max_states: int = 200_000) -> list[str] | None:
    """A shortest move list solving ``level`` from its current state, by breadth-first search
    over states ``(player, frozenset(boxes))``; ``[]`` if already solved, ``None`` if there is
    no solution or none was found within ``max_states`` visited states.

    Pushes onto cells from which a box can never reach a goal are pruned (they cannot be part
    of a solution). Ties are broken in the fixed order U, D, L, R, so the answer is
    deterministic.
    """
    goals = frozenset(level.goals)
    start = (level.player, frozenset(level.boxes))
    if start[1] == goals:
        return []
    live = _live_cells(level.grid, goals)
    parents: dict[tuple[Position, frozenset], tuple[Any, str] | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        for letter in MOVES:
            nxt = _step(player, letter)
            if not is_floor(level.grid, nxt):
                continue
            if nxt in boxes:
                beyond = _step(nxt, letter)
                if beyond not in live or beyond in boxes or not is_floor(level.grid, beyond):
                    continue
                moved = (boxes - {nxt}) | {beyond}
            else:
                moved = boxes
            new = (nxt, moved)
            if new in parents:
                continue
            parents[new] = (state, letter)
            if moved == goals:
                path = []
                while parents[new] is not None:
                    new, letter = parents[new]
                    path.append(letter)
                return path[::-1]
            if len(parents) >= max_states:
                return None
            queue.append(new)
    return None


# ------------------------------------------------------------------------------ scoring
@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Coefficients of the per-move reward (see :func:`simulate_moves`); defaults follow the
    common Sokoban RL scale (step -0.1, box on/off goal +-1, +10 solved; the paper's +10)."""

    step_cost: float = 0.1
    invalid_move_penalty: float = 0.5
    box_on_goal_bonus: float = 1.0
    box_off_goal_penalty: float = 1.0
    shaping_coef: float = 0.2
    solve_bonus: float = 10.0


def box_distance(boxes: Iterable[Position], goals: Sequence[Position]) -> int:
    """Sum over boxes of the Manhattan distance to the nearest goal (0 when solved)."""
    return sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in goals) for b in boxes)


@dataclasses.dataclass(frozen=True)
class MoveOutcome(MoveListOutcome):
    """Result of applying a move list: the new state, the reward and what happened."""

    level: SokobanLevel
    solved: bool

    def _where(self) -> str:
        on_goal = len(set(self.level.boxes) & set(self.level.goals))
        return (f"player now at {self.level.player}, {on_goal} of {len(self.level.goals)} "
                f"box(es) on goals")

    def _done(self) -> str | None:
        return "solved" if self.solved else None


def simulate_moves(level: SokobanLevel, moves: Sequence[str], *, rewards: RewardConfig,
                   max_moves: int | None = None) -> MoveOutcome:
    """Apply ``moves`` (letters of :data:`MOVES`) to the state ``level`` and score them (pure;
    the env's planner and the tool's simulated score share it).

    Per move: ``-step_cost``. A walk into a wall (or off the map), or a push of a box into a
    wall or another box, also costs ``invalid_move_penalty``, changes nothing and stops the
    list. A push adds ``box_on_goal_bonus`` if the box lands on a goal from a non-goal cell,
    ``-box_off_goal_penalty`` if it leaves a goal for a non-goal cell, and
    ``shaping_coef * (D_before - D_after)`` with ``D`` = :func:`box_distance`. When every box is
    on a goal, ``solve_bonus`` is added and the list stops. Moves beyond ``max_moves`` are
    ignored (counted in ``ignored``, like the moves after a stop).
    """
    limit = len(moves) if max_moves is None else max(0, min(len(moves), max_moves))
    goals = set(level.goals)
    player, boxes = level.player, set(level.boxes)
    reward, applied, invalid, solved, used = 0.0, [], None, False, 0
    for index, letter in enumerate(moves[:limit]):
        used = index + 1
        reward -= rewards.step_cost
        nxt = _step(player, letter)
        problem = None
        if not is_floor(level.grid, nxt):
            on_map = 0 <= nxt[0] < len(level.grid) and 0 <= nxt[1] < len(level.grid[0])
            problem = "walks into a wall" if on_map else "walks off the map"
        elif nxt in boxes:
            beyond = _step(nxt, letter)
            if not is_floor(level.grid, beyond):
                problem = "pushes a box into a wall"
            elif beyond in boxes:
                problem = "pushes a box into another box"
            else:
                before = box_distance(boxes, level.goals)
                boxes.remove(nxt)
                boxes.add(beyond)
                reward += rewards.shaping_coef * (before - box_distance(boxes, level.goals))
                if beyond in goals and nxt not in goals:
                    reward += rewards.box_on_goal_bonus
                elif nxt in goals and beyond not in goals:
                    reward -= rewards.box_off_goal_penalty
        if problem:
            reward -= rewards.invalid_move_penalty
            invalid = f"move {index + 1} ({letter}) from {player} {problem}; stopped there"
            break
        player = nxt
        applied.append(letter)
        if boxes == goals:
            solved = True
            reward += rewards.solve_bonus
            break
    return MoveOutcome(reward=reward, applied=tuple(applied), invalid_move=invalid,
                       ignored=len(moves) - used, level=level.with_state(player, boxes),
                       solved=solved)


# ------------------------------------------------------------------------------ the env
_TOOL = tool_role("solves the level and prints the move list")
_PLANNER = planner_role("the moves as 'Moves: U L ...'", parse_planner_answer)


class SokobanEnv(MoveListEnv):
    """Env card: ``sokoban_v0``.

    Roles and workflow: those of :class:`~pettingllms_envs.moves.MoveListEnv` (``tool`` then
    ``planner``, one turn = both stages). The tool's program solves the level from the current
    state and prints the moves (e.g. ``print("U L L D")``). A planner answer is scored by
    :func:`simulate_moves`:
    ``-step_cost`` per move; ``-invalid_move_penalty`` for a walk into a wall or a push into a
    wall/box (that move does nothing and ends the answer); ``+box_on_goal_bonus`` /
    ``-box_off_goal_penalty`` when a push puts a box on / takes it off a goal;
    ``shaping_coef * (D_before - D_after)`` per push, ``D`` = sum over boxes of the Manhattan
    distance to the nearest goal; ``+solve_bonus`` when every box is on a goal (then the
    answer ends). Equal on/off coefficients and the potential-style shaping mean that pushing
    a box back and forth earns nothing but step costs.

    Spaces: ``gymnasium.spaces.Text`` for both; observations are prompts showing the ASCII map
    (``#`` wall, ``_`` floor, ``O`` goal, ``X`` box, ``V`` box on a goal, ``P`` player, ``S``
    player on a goal), the player, box and goal positions as (row, col), the turn, the moves so
    far, the rules and the role's instruction (``prompt_style="compact"``: map and answer format
    only).

    Reward: ``alpha * team + local``; team = 1.0 if every box is on a goal, else 0.0 (given to
    the acting agent of each stage); ``success`` = every box on a goal.

    Termination: terminated when solved; truncated after ``max_turns`` turns. A box pushed into
    a dead end (e.g. a corner without a goal) is not detected: the episode runs to truncation.

    Instances: ``reset(seed=s)`` generates a level by reverse play (:func:`generate_level`) from
    ``np.random.default_rng(s)``: same seed, same level; solvable by construction; no box starts
    on a goal. Train and test levels are disjoint: a level's split is a stable hash of the level
    (:func:`level_split`, one in ten is "test") and seeds >= ``TRAIN_SEED_LIMIT`` draw test
    levels, lower seeds train levels. The paper's setting is a small world: 1260 solvable
    one-box 6x6 levels, 115 of them test levels. ``reset(options={"task": level})`` plays a given
    :class:`SokobanLevel`, a dict of its fields, or ``{"rows": picture}`` in the legend
    (:func:`level_from_ascii`); it must be well-formed (:func:`check_level`), not necessarily
    solvable.

    Args (keyword-only, defaults = the paper's setting):
        room_size: side of the square room *including* its outer wall (6, i.e. a 4x4 floor;
            >= 5).
        num_boxes: boxes (= goals) per level (1; at most ``(room_size - 2) ** 2 // 5``, one
            box per five floor cells, so generation stays fast).
        reverse_pulls: most pulls of the reverse play (default ``num_boxes * room_size``;
            >= ``num_boxes``, as every box must leave its goal); each level draws its count
            between ``num_boxes`` and this.
        max_turns: turns T (3). alpha: team-reward weight (1.0).
        invalid_action_penalty: local reward of an unusable response (-1.0).
        max_moves_per_turn: moves applied per answer (default ``8 * room_size``).
        sandbox_limits: :class:`SandboxLimits` or a dict of its fields (default 3 s wall and CPU,
            256 MB).
        sandbox: ``{launcher: ..., packages: [...]}`` (None): the sandbox launcher
            (``unshare`` chooses the weaker one explicitly; see docs/sandbox.md) and the
            installed packages its programs may import besides the standard library;
            ``SANDBOX_DATA_PACKAGES`` and the project are refused at construction.
        rewards: the reward coefficients, a mapping of some of :class:`RewardConfig`'s fields
            (step_cost 0.1, invalid_move_penalty 0.5, box_on_goal_bonus 1.0,
            box_off_goal_penalty 1.0, shaping_coef 0.2, solve_bonus 10.0; all >= 0:
            magnitudes, the signs are fixed as above), e.g. ``{solve_bonus: 5.0}``.
        prompt_style: "full" (paper-style prompt with legend, rules, positions, turn and move
            history) or "compact" (a few lines: map, legend, answer format), for very small
            models.
        code_runner: advanced; ``code -> SandboxResult`` replacing the sandbox (a remote
            executor, or a fake in tests).
        single_agent: the single-agent baseline: the planner alone, no tool role, same turn
            budget and feedback.
        prefill_answers: start each answer for the model, which only continues it: the
            planner's with ``Moves:``, the tool's with its code fence (plus ``print('`` in
            the compact prompt). The action the env receives is still the whole answer
            (False).
    """

    metadata = {"name": "sokoban_v0"}
    roles = {"tool": _TOOL, "planner": _PLANNER}
    answer_kind = "a move list"

    def __init__(self, *, room_size: int = 6, num_boxes: int = 1,
                 reverse_pulls: int | None = None, max_turns: int = 3, alpha: float = 1.0,
                 invalid_action_penalty: float = -1.0, max_moves_per_turn: int | None = None,
                 sandbox_limits: SandboxLimits | Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None,
                 rewards: RewardConfig | Mapping[str, float] | None = None,
                 prompt_style: str = "full", code_runner: CodeRunner | None = None,
                 single_agent: bool = False, prefill_answers: bool = False,
                 **retired_keywords: Any):
        self.room_size = check_int("room_size", room_size, minimum=MIN_ROOM_SIZE)
        self.num_boxes = check_int("num_boxes", num_boxes, minimum=1)
        most = (self.room_size - 2) ** 2 // 5
        if self.num_boxes > most:
            raise ValueError(f"num_boxes={num_boxes} does not fit a {room_size}x{room_size} "
                             f"room (at most (room_size - 2) ** 2 // 5 = {most})")
        self.reverse_pulls = check_int(
            "reverse_pulls",
            self.num_boxes * self.room_size if reverse_pulls is None else reverse_pulls,
            minimum=self.num_boxes)
        self.reward_config = reward_coefficients(RewardConfig, rewards, retired_keywords,
                                                 env_class=type(self).__name__, log=logger)
        refuse_unexpected_keywords(type(self).__name__, retired_keywords)
        super().__init__(
            alpha=alpha, max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
            max_moves_per_turn=8 * self.room_size if max_moves_per_turn is None
            else max_moves_per_turn,
            sandbox_limits=sandbox_limits, sandbox=sandbox,
            data_packages=SANDBOX_DATA_PACKAGES, prompt_style=prompt_style, code_runner=code_runner,
            single_agent=single_agent, prefill_answers=prefill_answers,
            max_observation_chars=max(16_384, 4 * self.room_size ** 2 + 40 * self.num_boxes
                                      + 4_096))
        self.level: SokobanLevel | None = None
        self.state: SokobanLevel | None = None

    # ------------------------------------------------------------------ hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        """A seeded level of the seed's split, or a given one (``options["task"]``)."""
        given = options.get("task")
        if given is None:
            self.level = generate_level(self.np_random, self.room_size, self.num_boxes,
                                        self.reverse_pulls, split=split_of_seed(seed))
        else:
            self.level = _check_task(given)
        self.state = self.level
        self.moves_taken = []
        self._reset_tool_report()

    def _observe(self, agent: str) -> str:
        if self.prompt_style == "compact":
            return self._observe_compact(agent)
        state = self.state
        height, width = len(state.grid), len(state.grid[0])
        on_goal = len(set(state.boxes) & set(state.goals))
        lines = [
            f"Sokoban: push every box onto a goal in this {height}x{width} room.",
            f"Legend: {LEGEND}. Positions are (row, col), 0-based, row 0 at the top.",
            render_level(state),
            f"Player: {state.player}. Boxes: {_positions(state.boxes)}. "
            f"Goals: {_positions(state.goals)}. Boxes on goals: {on_goal} of {len(state.goals)}.",
            f"Turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}. "
            f"Moves taken so far ({len(self.moves_taken)}): {self._moves_so_far()}.",
            "Rules: U = up (row-1), D = down (row+1), L = left (col-1), R = right (col+1). "
            "The player walks on floor and goal cells. Walking into a box pushes it one cell the "
            "same way if that cell is free (not a wall or another box); boxes cannot be pulled. "
            "A walk into a wall, or a push into a wall or another box, is invalid and ends the "
            "answer. A box pushed into a corner without a goal is stuck for good.",
        ]
        lines += self._role_lines(
            agent, program="solves this level from the current state (e.g. breadth-first "
                           "search over (player position, box positions) states; embed the map "
                           "in the program, it gets no input) and ",
            goal="that put every box on a goal from the current state")
        return "\n".join(lines)

    def _observe_compact(self, agent: str) -> str:
        """A short prompt for ~100M-parameter models, which lose the format in long prompts."""
        lines = ["Push each box X onto a goal O. # wall, _ floor, P you, V box on goal, "
                 "S you on goal.",
                 render_level(self.state),
                 "U=up, D=down, L=left, R=right."]
        return "\n".join(lines + self._compact_role_lines(agent))

    # ------------------------------------------------------------------ stages
    def _moves_so_far(self) -> str:
        if not self.moves_taken:
            return "none"
        shown = " ".join(self.moves_taken[-SHOWN_MOVES:])
        return shown if len(self.moves_taken) <= SHOWN_MOVES else "... " + shown

    def _example_candidates(self) -> list[tuple[str, str]]:
        return move_examples(("U L", "D R", "L U", "R D", "U U", "D D", "L L", "R R"))

    def _solved(self) -> bool:
        return self.state.solved

    def _simulate(self, moves: Sequence[str]) -> MoveOutcome:
        return simulate_moves(self.state, moves, rewards=self.reward_config,
                              max_moves=self.max_moves_per_turn)

    def _take_outcome(self, outcome: MoveOutcome) -> None:
        self.state = outcome.level


# ------------------------------------------------------------------------------ validation
def _positions(cells: Sequence[Position]) -> str:
    return ", ".join(str(cell) for cell in cells)


def _check_task(task: SokobanLevel | Mapping[str, Any]) -> SokobanLevel:
    if isinstance(task, Mapping):
        if "rows" in task:
            return level_from_ascii(task["rows"])
        fields = ("grid", "player", "boxes", "goals")
        missing = [f for f in fields if f not in task]
        if missing:
            raise ValueError(f"options['task'] dict needs 'rows' or the fields {fields}; "
                             f"missing {missing}")
        grid, boxes, goals = task["grid"], task["boxes"], task["goals"]
        if isinstance(grid, str) or isinstance(boxes, str) or isinstance(goals, str):
            raise ValueError("options['task']: grid, boxes and goals must be sequences")
        task = SokobanLevel(tuple(grid), task["player"], tuple(boxes), tuple(goals))
    if not isinstance(task, SokobanLevel):
        raise ValueError(f"options['task'] must be a SokobanLevel or a dict, got "
                         f"{type(task).__name__}")
    return check_level(task)
