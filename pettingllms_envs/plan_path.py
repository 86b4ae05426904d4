"""Plan-Path (``plan_path_v1``): a tool agent and a planner move an agent to a goal on a grid.

The paper's Plan-Path task (PettingLLMs / AT-GRPO, arXiv 2510.11062): the *tool* agent writes a
Python program (e.g. a BFS) that prints a move list, the program runs in the sandbox, and the
*planner* reads the program's output and commits the moves. Everything that decides a reward is
a pure function here (grid generation, BFS, parsing, move simulation), so it is unit-testable
without the env and the tool's score is exactly "what the planner would get for these moves".

Versions: ``plan_path_v1`` splits instances by their content (:func:`task_split`), so no
evaluation seed produces a training instance. ``plan_path_v0`` drew both from one pool: on small
grids most evaluation instances were training instances too (52 of the first 64 on a 4x4 open
grid). It is kept, unchanged, so that the results measured on it reproduce.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
from typing import Any, Mapping, Sequence

import numpy as np

from pettingllms_envs.common import (
    CodeRunner, check_float, check_int, check_prompt_style, clip_text, hash_split,
    move_examples, named_variant, planner_role, reward_coefficients, tool_role)
from pettingllms_envs.moves import MOVES, MoveListEnv, MoveListOutcome, parse_planner_answer
from pettingllms_envs.sandbox import SandboxLimits
from pettingllms_rllib.envs import split_of_seed

#: Packages a program of this task may never import (``sandbox: {packages: ...}`` naming one
#: is refused at start): its generator is the project's own (always refused).
SANDBOX_DATA_PACKAGES: tuple[str, ...] = ()

logger = logging.getLogger(__name__)

Position = tuple[int, int]
WALL, OPEN, AGENT, GOAL = "#", ".", "A", "G"
#: Draws of :func:`generate_split_task` before it gives up on finding an instance of a split.
MAX_SPLIT_DRAWS = 1_000


# ------------------------------------------------------------------------------ task instances
@dataclasses.dataclass(frozen=True)
class GridTask:
    """One instance: ``grid`` rows of ``#``/``.``, ``start`` and ``goal`` as (row, col)."""

    grid: tuple[str, ...]
    start: Position
    goal: Position

    @property
    def size(self) -> int:
        return len(self.grid)


def is_open(grid: Sequence[str], pos: Position) -> bool:
    """True if ``pos`` is on the grid and not a wall."""
    row, col = pos
    return 0 <= row < len(grid) and 0 <= col < len(grid[row]) and grid[row][col] != WALL


def bfs_distances(grid: Sequence[str], source: Position) -> dict[Position, int]:
    """Shortest move counts from ``source`` to every open cell reachable from it (4-neighbour)."""
    if not is_open(grid, source):
        return {}
    dist = {source: 0}
    queue = collections.deque([source])
    while queue:
        row, col = queue.popleft()
        for d_row, d_col in MOVES.values():
            nxt = (row + d_row, col + d_col)
            if nxt not in dist and is_open(grid, nxt):
                dist[nxt] = dist[(row, col)] + 1
                queue.append(nxt)
    return dist


def shortest_path(grid: Sequence[str], start: Position, goal: Position) -> list[str] | None:
    """One shortest move list from ``start`` to ``goal`` (``[]`` if equal, None if unreachable).

    Ties are broken in the fixed order U, D, L, R so the answer is deterministic.
    """
    dist = bfs_distances(grid, goal)
    if start not in dist:
        return None
    path, pos = [], start
    while pos != goal:
        for letter, (d_row, d_col) in MOVES.items():
            nxt = (pos[0] + d_row, pos[1] + d_col)
            if dist.get(nxt) == dist[pos] - 1:
                path.append(letter)
                pos = nxt
                break
    return path


def generate_task(rng: np.random.Generator, size: int, wall_prob: float,
                  *, max_attempts: int = 200, goal_off_axis: bool = False) -> GridTask:
    """Sample walls with probability ``wall_prob``, then distinct open start/goal cells joined by
    a path; resample until one exists. After ``max_attempts`` (only reachable with extreme wall
    densities) the last sample gets an L-shaped corridor carved from start to goal, so generation
    always terminates and stays a deterministic function of the RNG.

    ``goal_off_axis`` also resamples pairs that share a row or a column, so every solution needs
    a vertical and a horizontal move: an answer that repeats one letter never solves one."""
    if size < 2:
        raise ValueError(f"grid size must be >= 2, got {size}")
    for attempt in range(max_attempts):
        walls = rng.random((size, size)) < wall_prob
        open_cells = np.argwhere(~walls)
        if len(open_cells) < 2 and attempt < max_attempts - 1:
            continue
        if len(open_cells) >= 2:
            first, second = rng.choice(len(open_cells), size=2, replace=False)
            start, goal = tuple(map(int, open_cells[first])), tuple(map(int, open_cells[second]))
        else:
            start, goal = (0, 0), (size - 1, size - 1)
        aligned = start[0] == goal[0] or start[1] == goal[1]
        if goal_off_axis and aligned:
            if attempt < max_attempts - 1:
                continue
            start, goal = (0, 0), (size - 1, size - 1)
        grid = tuple("".join(WALL if w else OPEN for w in row) for row in walls)
        if start in bfs_distances(grid, goal):
            return GridTask(grid, start, goal)
    rows = [list(row) for row in grid]
    (r0, c0), (r1, c1) = start, goal
    for col in range(min(c0, c1), max(c0, c1) + 1):
        rows[r0][col] = OPEN
    for row in range(min(r0, r1), max(r0, r1) + 1):
        rows[row][c1] = OPEN
    logger.debug("plan_path: carved a corridor after %d attempts", max_attempts)
    return GridTask(tuple("".join(r) for r in rows), start, goal)


def task_split(task: GridTask, test_fraction: float) -> str:
    """``"test"`` for a stable ``test_fraction`` share of instances, else ``"train"``
    (:func:`~pettingllms_envs.common.hash_split` of the grid, start and goal). The split is a
    property of the instance, whatever seed produced it."""
    return hash_split(repr((task.grid, task.start, task.goal)), test_fraction)


def generate_split_task(rng: np.random.Generator, size: int, wall_prob: float, *,
                        split: str, test_fraction: float, goal_off_axis: bool = False,
                        max_draws: int = MAX_SPLIT_DRAWS) -> GridTask:
    """:func:`generate_task` drawn again until :func:`task_split` says ``split``: train and
    test instances never coincide, and the instance stays a deterministic function of ``rng``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    for _ in range(max_draws):
        task = generate_task(rng, size, wall_prob, goal_off_axis=goal_off_axis)
        if task_split(task, test_fraction) == split:
            return task
    raise RuntimeError(f"plan_path: no {split} instance in {max_draws} draws (grid_size={size}, "
                       f"test_fraction={test_fraction}); use a larger grid or another "
                       f"test_fraction")


def offset_text(position: Position, goal: Position, *, letters: bool = False) -> str:
    """Where ``goal`` lies from ``position``: "G is 2 rows down and 1 column right of A", or with
    ``letters`` "G is 2 rows down (D) and 1 column right (R) of A"."""
    parts = []
    for delta, positive, negative, unit in ((goal[0] - position[0], "down", "up", "row"),
                                            (goal[1] - position[1], "right", "left", "column")):
        if delta:
            direction = positive if delta > 0 else negative
            parts.append(f"{abs(delta)} {unit}{'s' if abs(delta) > 1 else ''} {direction}"
                         + (f" ({direction[0].upper()})" if letters else ""))
    return "G is " + (" and ".join(parts) if parts else "where A is") + " of A."


def render_grid(grid: Sequence[str], position: Position, goal: Position) -> str:
    """ASCII picture: ``#`` wall, ``.`` open, ``A`` the agent, ``G`` the goal."""
    rows = [list(row) for row in grid]
    rows[goal[0]][goal[1]] = GOAL
    rows[position[0]][position[1]] = AGENT
    return "\n".join("".join(r) for r in rows)


#: With ``tool_helper``, the tool's program starts with this function: the move list from
#: position ``a`` to position ``g`` on an open grid (vertical moves first; walls ignored), so
#: the tool's skill is reading the two positions off its prompt, not writing a search, as the
#: math tool copies a sum and Python does the arithmetic.
TOOL_HELPER_SOURCE = (
    "def moves(a, g):\n"
    "    rows, cols = g[0] - a[0], g[1] - a[1]\n"
    "    return ' '.join(['D'] * rows + ['U'] * -rows + ['R'] * cols + ['L'] * -cols)\n")
#: The tool's format line with ``tool_helper``: a placeholder, so a copy does not run.
TOOL_HELPER_CALL = "print(moves(a=<position of A>, g=<position of G>))"
#: The tool's answer prefix with ``tool_helper`` and ``prefill_answers``.
TOOL_HELPER_PREFIX = "```python\nprint(moves(a=("


# ------------------------------------------------------------------------------ named variants
@dataclasses.dataclass(frozen=True)
class PlanPathVariant:
    """What one named Plan-Path setting shows its agents and how it asks (``variant:`` in the
    env config; the shipped ones are :data:`VARIANTS`). Each field is one change measured in
    docs/RESULTS.md; they are combined only as the named variants combine them.

    Fields:
        prompt_style: "full" (the paper-style prompt with legend, turn and move history) or
            "compact" (a few lines: grid, positions, answer format), for very small models.
        show_offsets: also state where G lies from A in rows and columns ("G is 2 rows down
            and 1 column right of A"): the state a small model needs, made explicit.
        offset_letters: name each offset's move letter too ("2 rows down (D)").
        offsets_for_tool_only: the offsets sentence goes into the tool's prompt only; the
            planner sees the grid, the coordinates and what the tool's program printed.
        placeholder_example: show the answer format as ``Moves: <moves>`` (``Moves: <U, D, L
            or R>`` with one move per turn) instead of a concrete move list.
        goal_off_axis: start and goal never share a row or a column, so every solution needs a
            vertical and a horizontal move (no answer repeating one letter solves it).
        prefill_answers: start each answer for the model (the planner's with ``Moves:``, the
            tool's with its code fence), which only continues it.
        tool_helper: the tool's program runs after :data:`TOOL_HELPER_SOURCE`, ``moves(a,
            g)``, so the tool only reads the two positions off its prompt.
        shuffle_positions: the compact prompt names A's and G's positions in an order drawn
            per state, so reading the labels is the skill.
        tool_output_example: the planner's format example is the move list the tool's program
            printed this turn (without a usable output, the usual example).
    """

    prompt_style: str = "full"
    show_offsets: bool = False
    offset_letters: bool = False
    offsets_for_tool_only: bool = False
    placeholder_example: bool = False
    goal_off_axis: bool = False
    prefill_answers: bool = False
    tool_helper: bool = False
    shuffle_positions: bool = False
    tool_output_example: bool = False

    def __post_init__(self):
        check_prompt_style(self.prompt_style)
        for field in dataclasses.fields(self)[1:]:
            if not isinstance(getattr(self, field.name), bool):
                raise ValueError(f"{field.name} must be true or false, got "
                                 f"{getattr(self, field.name)!r}")
        for needs_offsets in ("offset_letters", "offsets_for_tool_only"):
            if getattr(self, needs_offsets) and not self.show_offsets:
                raise ValueError(f"{needs_offsets} says how the offsets are shown: it needs "
                                 "show_offsets=true")
        for compact_only in ("tool_helper", "shuffle_positions", "tool_output_example"):
            if getattr(self, compact_only) and self.prompt_style != "compact":
                raise ValueError(f"{compact_only} changes the compact prompt: it needs "
                                 f"prompt_style='compact', got {self.prompt_style!r}")


_OFFSETS_SHOWN = PlanPathVariant(prompt_style="compact", show_offsets=True, offset_letters=True,
                                 placeholder_example=True, goal_off_axis=True)
#: The shipped Plan-Path settings by name; docs/tasks.md has a card for each.
VARIANTS: dict[str, PlanPathVariant] = {
    "paper": PlanPathVariant(),
    "compact": PlanPathVariant(prompt_style="compact"),
    "one_move": _OFFSETS_SHOWN,
    "prefill": dataclasses.replace(_OFFSETS_SHOWN, prefill_answers=True),
    "tool_offsets": dataclasses.replace(_OFFSETS_SHOWN, prefill_answers=True,
                                        offsets_for_tool_only=True),
    "tool_helper": PlanPathVariant(prompt_style="compact", placeholder_example=True,
                                   goal_off_axis=True, prefill_answers=True, tool_helper=True,
                                   shuffle_positions=True, tool_output_example=True),
}
#: Prompt flags of env configs written before the named variants (2026-12-06), each a field of
#: :class:`PlanPathVariant`; ``random_example`` was a pilot (docs/results_log.md) and is gone.
RETIRED_FLAGS = frozenset(field.name for field in dataclasses.fields(PlanPathVariant))


def plan_path_variant(variant: str | PlanPathVariant,
                      retired_flags: Mapping[str, Any] | None = None) -> PlanPathVariant:
    """The named variant, or the one an old env config's prompt flags spell exactly
    (:func:`~pettingllms_envs.common.named_variant`)."""
    return named_variant(variant, retired_flags, variants=VARIANTS, env_name="Plan-Path",
                         env_class="PlanPathEnv", env_id="plan_path_v1", log=logger)


# ------------------------------------------------------------------------------ scoring
@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Coefficients of the shaped move reward (see :func:`simulate_moves`)."""

    step_cost: float = 0.05
    invalid_move_penalty: float = 0.2
    shaping_coef: float = 0.1
    goal_bonus: float = 1.0
    optimal_bonus: float = 0.5


@dataclasses.dataclass(frozen=True)
class MoveOutcome(MoveListOutcome):
    """Result of applying a move list: where the agent ends, the shaped reward, what happened."""

    position: Position
    reached_goal: bool
    optimal: bool

    @property
    def solved(self) -> bool:
        return self.reached_goal

    def _where(self) -> str:
        return f"now at {self.position}"

    def _done(self) -> str | None:
        if not self.reached_goal:
            return None
        return "goal reached" + (" on a shortest path" if self.optimal else "")


def simulate_moves(grid: Sequence[str], position: Position, goal: Position,
                   moves: Sequence[str], *, distances: Mapping[Position, int],
                   rewards: RewardConfig, moves_before: int, optimal_length: int,
                   max_moves: int | None = None) -> MoveOutcome:
    """Apply ``moves`` from ``position`` and score them (pure; the env and the tool share it).

    Per move: ``-step_cost``; a move into a wall or off the grid also costs
    ``invalid_move_penalty``, leaves the position and stops the list; a valid move adds
    ``shaping_coef * (d_before - d_after)`` with ``d`` the BFS distance to the goal
    (``distances``). Reaching the goal adds ``goal_bonus``, plus ``optimal_bonus`` when the
    episode's valid moves (``moves_before`` + these) equal ``optimal_length``, and stops.
    Moves beyond ``max_moves`` are ignored (counted in ``ignored``).
    """
    limit = len(moves) if max_moves is None else max(0, min(len(moves), max_moves))
    pos, reward, applied = position, 0.0, []
    invalid, reached, optimal, used = None, False, False, 0
    for index, letter in enumerate(moves[:limit]):
        used = index + 1
        reward -= rewards.step_cost
        d_row, d_col = MOVES[letter]
        nxt = (pos[0] + d_row, pos[1] + d_col)
        if not is_open(grid, nxt):
            reward -= rewards.invalid_move_penalty
            on_grid = 0 <= nxt[0] < len(grid) and 0 <= nxt[1] < len(grid[0])
            where = "into a wall" if on_grid else "off the grid"
            invalid = f"move {index + 1} ({letter}) from {pos} goes {where}; stopped there"
            break
        before, after = distances.get(pos), distances.get(nxt)
        if before is not None and after is not None:
            reward += rewards.shaping_coef * (before - after)
        pos = nxt
        applied.append(letter)
        if pos == goal:
            reached = True
            reward += rewards.goal_bonus
            if moves_before + len(applied) == optimal_length:
                optimal = True
                reward += rewards.optimal_bonus
            break
    return MoveOutcome(reward=reward, applied=tuple(applied), invalid_move=invalid,
                       ignored=len(moves) - used, position=pos, reached_goal=reached,
                       optimal=optimal)


# ------------------------------------------------------------------------------ the env
_TOOL = tool_role("prints the shortest move list from the agent to the goal")
_PLANNER = planner_role("the moves as 'Moves: R D ...'", parse_planner_answer)


class PlanPathEnv(MoveListEnv):
    """Env card: ``plan_path_v1`` (``plan_path_v0``: the same without the instance split).

    Roles and workflow: those of :class:`~pettingllms_envs.moves.MoveListEnv` (``tool`` then
    ``planner``, one turn = both stages). The tool's program prints the shortest move list from
    the current position (e.g. ``print("R D D")``). A planner answer is scored by
    :func:`simulate_moves`: ``-step_cost`` per move, ``-invalid_move_penalty`` for a move into
    a wall/off the grid (which also stops the answer),
    ``shaping_coef * (d_before - d_after)`` per valid move (BFS distance to the goal),
    ``goal_bonus`` on reaching the goal plus ``optimal_bonus`` if the episode's valid moves
    equal the shortest path length from the start. At most ``max_moves_per_turn`` moves apply.

    Spaces: ``gymnasium.spaces.Text`` for both; observations are prompts showing the ASCII grid
    (``#`` wall, ``.`` open, ``A`` agent, ``G`` goal), the current position and goal as
    (row, col), the turn, the moves so far, the move letters and the role's instruction.

    Reward: ``alpha * team + local``; team = 1.0 if the agent stands on the goal, else 0.0
    (given to the acting agent of each stage); ``success`` = on the goal.

    Termination: terminated when the goal is reached; truncated after ``max_turns`` turns.

    Instances: ``reset(seed=s)`` draws walls (probability ``wall_prob``), then distinct open start
    and goal cells joined by a path, from ``np.random.default_rng(s)``; same seed, same grid.
    Training and evaluation instances are disjoint: an instance's split is a stable hash of its
    grid, start and goal (:func:`task_split`), and a seed draws until the instance is of the
    seed's split (``split_of_seed``: seeds >= ``TRAIN_SEED_LIMIT`` are evaluation seeds).

    Args (keyword-only, defaults = the paper's setting):
        grid_size: side of the square grid (10; >= 2).
        wall_prob: probability that a cell is a wall (0.22; in [0, 1)).
        max_turns: turns T (3). alpha: team-reward weight (1.0).
        invalid_action_penalty: local reward of an unusable response (-1.0).
        max_moves_per_turn: moves applied per answer (default 4 * grid_size).
        sandbox_limits: :class:`SandboxLimits` or a dict of its fields (default 3 s wall and CPU,
            256 MB).
        sandbox: ``{launcher: ..., packages: [...]}`` (None): the sandbox launcher
            (``unshare`` chooses the weaker one explicitly; see docs/sandbox.md) and the
            installed packages its programs may import besides the standard library;
            ``SANDBOX_DATA_PACKAGES`` and the project are refused at construction.
        rewards: the reward coefficients, a mapping of some of :class:`RewardConfig`'s fields
            (step_cost 0.05, invalid_move_penalty 0.2, shaping_coef 0.1, goal_bonus 1.0,
            optimal_bonus 0.5; all >= 0), e.g. ``{goal_bonus: 2.0}``.
        variant: the named prompt setting, one of :data:`VARIANTS` ("paper": the paper-style
            full prompt; "compact"; "one_move", "prefill", "tool_offsets", "tool_helper": the
            CPU settings of docs/tasks.md); what each shows is :class:`PlanPathVariant`.
        code_runner: advanced; ``code -> SandboxResult`` replacing the sandbox (a remote
            executor, or a fake in tests).
        single_agent: the single-agent baseline: the planner alone, no tool role, same turn
            budget and feedback. With ``offsets_for_tool_only`` the planner alone sees no
            offsets.
        test_fraction: the share of instances that are evaluation instances (0.2; in (0, 1)).
            A 4x4 open grid has 144 off-axis instances, so a small grid needs a larger share
            for a 64-instance evaluation set of distinct instances.
    """

    metadata = {"name": "plan_path_v1"}
    roles = {"tool": _TOOL, "planner": _PLANNER}
    answer_kind = "a move list"

    def __init__(self, *, grid_size: int = 10, wall_prob: float = 0.22, max_turns: int = 3,
                 alpha: float = 1.0, invalid_action_penalty: float = -1.0,
                 max_moves_per_turn: int | None = None,
                 sandbox_limits: SandboxLimits | Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None,
                 rewards: RewardConfig | Mapping[str, float] | None = None,
                 code_runner: CodeRunner | None = None,
                 variant: str | PlanPathVariant = "paper",
                 single_agent: bool = False, test_fraction: float = 0.2,
                 **retired_keywords: Any):
        self.grid_size = check_int("grid_size", grid_size, minimum=2)
        self.test_fraction: float | None = check_float("test_fraction", test_fraction)
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        self.reward_config = reward_coefficients(  # before the variant: it takes the rest
            RewardConfig, rewards, retired_keywords, env_class=type(self).__name__, log=logger)
        #: What the prompts show (:class:`PlanPathVariant`), read by the hooks below.
        self.variant = plan_path_variant(variant, retired_keywords)
        #: The moves the tool's program printed this turn (None: no usable output yet).
        self.tool_moves: tuple[str, ...] | None = None
        self.wall_prob = check_float("wall_prob", wall_prob)
        if not 0.0 <= self.wall_prob < 1.0:
            raise ValueError(f"wall_prob must be in [0, 1), got {wall_prob!r}")
        super().__init__(
            alpha=alpha, max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
            max_moves_per_turn=4 * self.grid_size if max_moves_per_turn is None
            else max_moves_per_turn,
            sandbox_limits=sandbox_limits, sandbox=sandbox,
            data_packages=SANDBOX_DATA_PACKAGES, prompt_style=self.variant.prompt_style,
            code_runner=code_runner, single_agent=single_agent,
            prefill_answers=self.variant.prefill_answers,
            max_observation_chars=max(16_384, 4 * self.grid_size ** 2 + 4_096))
        self.task: GridTask | None = None
        self.position: Position = (0, 0)
        self.distances: dict[Position, int] = {}
        self.optimal_length = 0

    # ------------------------------------------------------------------ hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        """A seeded random instance, or a given one: ``reset(options={"task": GridTask(...)})``
        (or a dict with ``grid``, ``start``, ``goal``) for evaluation sets and hand-made tests."""
        given = options.get("task")
        self.task = self._draw_task(seed) if given is None else _check_task(given)
        self.position = self.task.start
        self.moves_taken = []
        self.distances = bfs_distances(self.task.grid, self.task.goal)
        self.optimal_length = self.distances[self.task.start]
        self._reset_tool_report()
        self.tool_moves = None

    def _draw_task(self, seed: int | None) -> GridTask:
        """An instance of the seed's split (``None``: a training instance)."""
        return generate_split_task(
            self.np_random, self.grid_size, self.wall_prob, split=split_of_seed(seed),
            test_fraction=self.test_fraction, goal_off_axis=self.variant.goal_off_axis)

    def _observe(self, agent: str) -> str:
        if self.prompt_style == "compact":
            return self._observe_compact(agent)
        task = self.task
        taken = " ".join(self.moves_taken) if self.moves_taken else "none"
        lines = [
            f"Plan-Path: move the agent A to the goal G on this {task.size}x{task.size} grid.",
            "Legend: '#' wall, '.' open, 'A' agent (current position), 'G' goal. "
            "Positions are (row, col), 0-based, row 0 at the top.",
            render_grid(task.grid, self.position, task.goal),
            f"Current position: {self.position}. Goal: {task.goal}."
            f"{self._offset_sentence(agent)}",
            f"Turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}. "
            f"Moves taken so far ({len(self.moves_taken)}): {taken}.",
            "Move letters: U = up (row-1), D = down (row+1), L = left (col-1), "
            "R = right (col+1). "
            "Walls and the grid edge block moves.",
        ]
        lines += self._role_lines(
            agent, program="computes the shortest path (e.g. breadth-first search) from the "
                           "current position to the goal on this grid (embed the grid in the "
                           "program; it gets no input) and ",
            goal="from the current position to the goal")
        return "\n".join(lines)

    def _offset_sentence(self, agent: str) -> str:
        """The offsets sentence (" G is ... of A.") when ``agent`` is shown it, else ""."""
        if not self.variant.show_offsets or (self.variant.offsets_for_tool_only and agent != "tool"):
            return ""
        return " " + offset_text(self.position, self.task.goal, letters=self.variant.offset_letters)

    def _observe_compact(self, agent: str) -> str:
        """A short prompt for ~100M-parameter models, which lose the format in long prompts."""
        task = self.task
        positions = [f"A is at {self.position}", f"G is at {task.goal}"]
        if self.variant.shuffle_positions and random.Random(self._state_key()).random() < 0.5:
            positions.reverse()
        lines = ["Move A to G on this grid (# is a wall).",
                 render_grid(task.grid, self.position, task.goal),
                 f"{', '.join(positions)}.{self._offset_sentence(agent)}"
                 " U=up, D=down, L=left, R=right."]
        return "\n".join(lines + self._compact_role_lines(agent))

    def _compact_role_lines(self, agent: str) -> list[str]:
        if agent == "tool" and self.variant.tool_helper:
            # The wording measured in docs/RESULTS.md ("Plan-Path in the band"); strictly
            # moves() returns the list and print() prints it.
            return ["moves(a, g) prints the moves from position a to position g.",
                    f"Write a ```python block with one line: {TOOL_HELPER_CALL}"]
        if agent == "planner" and self.variant.tool_output_example and self.tool_moves:
            printed = self._printed_moves()
            return [f"The tool printed: {printed}", f"Answer with one line: Moves: {printed}"]
        return super()._compact_role_lines(agent)

    def _printed_moves(self) -> str:
        """The tool's moves as the planner's example shows them (clipped: a program may print
        thousands)."""
        return clip_text(" ".join(self.tool_moves), 120)

    def answer_prefix(self, agent: str) -> str:
        if agent == "tool" and self.variant.tool_helper and self.prefill_answers:
            return TOOL_HELPER_PREFIX
        return super().answer_prefix(agent)

    def prompt_examples(self) -> dict[str, str]:
        examples = super().prompt_examples()
        if self.variant.tool_helper and "tool" in examples:
            examples["tool"] = f"```python\n{TOOL_HELPER_CALL}\n```"
        if self.variant.tool_output_example and self.tool_moves and "planner" in examples:
            examples["planner"] = f"Moves: {self._printed_moves()}"
        return examples

    # ------------------------------------------------------------------ the tool's program
    def _program_preamble(self) -> str:
        return TOOL_HELPER_SOURCE if self.variant.tool_helper else ""

    def _run_tool(self, parsed):
        """Forget the last turn's printed moves first: a program that fails this turn must
        not leave them as the planner's example."""
        self.tool_moves = None
        return super()._run_tool(parsed)

    def _parse_tool_output(self, stdout: str):
        """Parse as every move task does, and keep the moves for ``tool_output_example``."""
        answer = super()._parse_tool_output(stdout)
        self.tool_moves = answer.value if answer.ok else None
        return answer

    # ------------------------------------------------------------------ stages
    def _example_candidates(self) -> list[tuple[str, str]]:
        return move_examples()

    def _state_key(self) -> str:
        """The current state as a string. Seeded with it, random.Random hashes it with
        SHA-512, so a draw is the same in every process and for every clone of this state
        (tree sampling's branches)."""
        return repr((self.task.grid, self.task.start, self.task.goal, self.position,
                     len(self.moves_taken)))

    def example_answer(self) -> tuple[str, str]:
        if self.variant.placeholder_example:
            placeholder = "<U, D, L or R>" if self.max_moves_per_turn == 1 else "<moves>"
            return placeholder, f"Moves: {placeholder}"
        return super().example_answer()

    def _solved(self) -> bool:
        return self.position == self.task.goal

    def _simulate(self, moves: Sequence[str]) -> MoveOutcome:
        return simulate_moves(self.task.grid, self.position, self.task.goal, moves,
                              distances=self.distances, rewards=self.reward_config,
                              moves_before=len(self.moves_taken),
                              optimal_length=self.optimal_length,
                              max_moves=self.max_moves_per_turn)

    def _take_outcome(self, outcome: MoveOutcome) -> None:
        self.position = outcome.position


class PlanPathV0Env(PlanPathEnv):
    """``plan_path_v0``: :class:`PlanPathEnv` without the instance split (``test_fraction`` is
    None).

    Deprecated, kept unchanged so that the results measured on it reproduce: training and
    evaluation seeds draw from one pool of instances, so on small grids its held-out scores
    are partly training scores. New runs use ``plan_path_v1``.
    """

    metadata = {"name": "plan_path_v0"}
    _deprecation_logged = False

    def __init__(self, **env_config: Any):
        if "test_fraction" in env_config:
            raise ValueError("plan_path_v0 has no instance split, so no test_fraction; "
                             "plan_path_v1 takes it")
        super().__init__(**env_config)
        self.test_fraction = None
        if not PlanPathV0Env._deprecation_logged:
            PlanPathV0Env._deprecation_logged = True
            logger.warning("plan_path_v0 is deprecated: its evaluation instances can be "
                           "training instances (on a 4x4 open grid, 52 of the first 64); use "
                           "plan_path_v1")

    def _draw_task(self, seed: int | None) -> GridTask:
        return generate_task(self.np_random, self.grid_size, self.wall_prob,
                             goal_off_axis=self.variant.goal_off_axis)


# ------------------------------------------------------------------------------ validation
def _check_task(task: GridTask | Mapping[str, Any]) -> GridTask:
    if isinstance(task, Mapping):
        task = GridTask(tuple(task["grid"]), tuple(task["start"]), tuple(task["goal"]))
    if not isinstance(task, GridTask):
        raise ValueError(f"options['task'] must be a GridTask or a dict, got {type(task).__name__}")
    grid = tuple(str(row) for row in task.grid)
    if len(grid) < 2 or any(len(row) != len(grid) or set(row) - {WALL, OPEN} for row in grid):
        raise ValueError("options['task'].grid must be a square of '#'/'.' rows, side >= 2")
    start, goal = (tuple(int(v) for v in task.start), tuple(int(v) for v in task.goal))
    if start == goal or start not in bfs_distances(grid, goal):
        raise ValueError(f"options['task']: no path from start {start} to a distinct goal {goal}")
    return GridTask(grid, start, goal)
