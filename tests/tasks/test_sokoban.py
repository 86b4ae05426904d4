"""Sokoban: conformance, level generation and solving, move rewards, the tool/planner stages and
hostile input."""

import hashlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test
from reward_keywords import check_old_reward_keywords_load_as_rewards

from pettingllms_envs.common import extract_python_code
from pettingllms_envs.moves import parse_planner_answer, parse_program_output
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult
from pettingllms_envs.sokoban import (
    RewardConfig,
    SokobanEnv,
    SokobanLevel,
    box_distance,
    check_level,
    generate_level,
    level_from_ascii,
    level_split,
    render_level,
    simulate_moves,
    solve,
)
from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, ParseResult, check_clone_contract, check_text_env, split_of_seed)

FAST = SandboxLimits(wall_time_s=2, cpu_time_s=2, memory_mb=256)
DEFAULT = RewardConfig()
# Push the box right twice onto the goal: "R R" solves it (the shortest solution).
PUSH_RIGHT = level_from_ascii(["#######",
                               "#_____#",
                               "#_PX_O#",
                               "#_____#",
                               "#######"])
# The box can be pushed right twice, then the wall stops it; "D R U" then pushes it up the goal.
GOAL_ABOVE = level_from_ascii(["#######",
                               "#____O#",
                               "#_PX__#",
                               "#_____#",
                               "#######"])
# Two boxes: the left one starts on its goal (V); pushing it right takes it off the goal.
TWO_BOXES = level_from_ascii(["########",
                              "#______#",
                              "#PV__XO#",
                              "#______#",
                              "########"])


def _echo_runner(code: str) -> SandboxResult:
    """Stand-in for the sandbox: the program 'prints' its own source, so a program whose source
    contains ``Moves: ...`` is read as printing those moves, without paying an interpreter start;
    hostile text also reaches the program-output parser this way."""
    return SandboxResult(stdout=code, stderr="", exit_code=0, timed_out=False,
                         killed_by_signal=None, output_truncated=False, network_isolated=True,
                         wall_time_s=0.0)


def _failing_runner(code: str) -> SandboxResult:
    return SandboxResult(stdout="", stderr="Traceback: ZeroDivisionError", exit_code=1,
                         timed_out=False, killed_by_signal=None, output_truncated=False,
                         network_isolated=True, wall_time_s=0.0)


def _env(level: SokobanLevel = PUSH_RIGHT, **kwargs) -> SokobanEnv:
    kwargs.setdefault("code_runner", _echo_runner)
    env = SokobanEnv(sandbox_limits=FAST, **kwargs)
    env.reset(seed=0, options={"task": level})
    return env


def _program(moves: str) -> str:
    return f'Here is my solver.\n```python\nprint("Moves: {moves}")\n```\n'


def _oracle_actions(env: SokobanEnv, step: int) -> dict[str, str]:
    """The tool prints the full BFS solution; the planner plays only its first two moves, so
    episodes last several turns and exercise real pushes."""
    path = solve(env.state)
    return {"tool": _program(" ".join(path)), "planner": "Moves: " + " ".join(path[:2])}


# ------------------------------------------------------------------------------ conformance
def test_pettingzoo_parallel_api():
    parallel_api_test(SokobanEnv(sandbox_limits=FAST, code_runner=_echo_runner), num_cycles=30)


def test_text_env_conformance_suite():
    check_text_env(lambda: SokobanEnv(sandbox_limits=FAST, code_runner=_echo_runner),
                   seeds=(0, 1, 2))


def test_clone_contract_with_real_moves():
    env = SokobanEnv(room_size=7, num_boxes=2, max_turns=4, code_runner=_echo_runner)
    check_clone_contract(env, seed=4, action_fn=_oracle_actions, clone_after_steps=(0, 1, 2, 3))


def test_clone_contract_with_real_sandbox_runs():
    env = SokobanEnv(sandbox_limits=FAST, max_turns=2)
    check_clone_contract(env, seed=5, action_fn=_oracle_actions, clone_after_steps=(1,))


@pytest.mark.parametrize("bad", [
    {"room_size": 4}, {"room_size": 6.0}, {"room_size": True}, {"num_boxes": 0},
    {"num_boxes": 4}, {"room_size": 7, "num_boxes": 6}, {"reverse_pulls": 0},
    {"num_boxes": 2, "reverse_pulls": 1}, {"max_turns": 0}, {"max_moves_per_turn": 0},
    {"rewards": {"step_cost": -0.1}}, {"rewards": {"solve_bonus": float("nan")}},
    {"rewards": {"shaping_coef": "0.2"}}, {"rewards": {"box_off_goal_penalty": -1}},
    {"rewards": {"bonus": 1.0}}, {"alpha": None}, {"invalid_action_penalty": float("inf")},
    {"sandbox_limits": "fast"}, {"sandbox_limits": {"bogus": 1}}, {"prompt_style": "tiny"},
    {"code_runner": 3},
])
def test_constructor_validates_arguments(bad):
    with pytest.raises(ValueError):
        SokobanEnv(**bad)


def test_rewards_and_the_keywords_they_replaced(caplog):
    """``rewards`` overrides the coefficients it names; one given as its own keyword (env
    configs before ``rewards:``) loads as a rewards entry, logged; any other keyword is refused."""
    assert SokobanEnv(rewards={"solve_bonus": 5.0}).reward_config == RewardConfig(solve_bonus=5.0)
    check_old_reward_keywords_load_as_rewards(SokobanEnv, RewardConfig, {"solve_bonus": 5.0},
                                              caplog)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['room'\]"):
        SokobanEnv(room=6)


def test_defaults_match_the_paper():
    env = SokobanEnv()
    assert env.room_size == 6 and env.num_boxes == 1 and env.max_turns == 3
    assert env.reverse_pulls == 6 and env.max_moves_per_turn == 48
    assert env.alpha == 1.0 and env.invalid_action_penalty == -1.0
    assert env.reward_config == RewardConfig(step_cost=0.1, invalid_move_penalty=0.5,
                                             box_on_goal_bonus=1.0, box_off_goal_penalty=1.0,
                                             shaping_coef=0.2, solve_bonus=10.0)
    assert env.workflow == [("tool",), ("planner",)] and env.prompt_style == "full"
    assert env.sandbox_limits.wall_time_s == 3 and env.sandbox_limits.memory_mb == 256
    env.reset(seed=0)
    assert len(env.state.grid) == 6 and env.state.grid[0] == "######"  # 6x6 with its wall


# ------------------------------------------------------------------------------ instances
def test_same_seed_same_level_and_prompts_different_seeds_different_levels():
    levels = []
    for seed in range(30):
        first, second = SokobanEnv(), SokobanEnv()
        obs_a, _ = first.reset(seed=seed)
        obs_b, _ = second.reset(seed=seed)
        assert first.level == second.level and obs_a == obs_b
        levels.append(first.level)
    # A 4x4 floor holds a few thousand one-box levels, so a rare repeat is allowed.
    assert len(set(levels)) >= 27


@pytest.mark.parametrize("room_size, num_boxes, seeds", [
    (6, 1, 60), (5, 1, 30), (6, 2, 30), (7, 1, 20), (7, 2, 30), (6, 3, 10),
])
def test_generated_levels_are_solvable_and_not_trivial(room_size, num_boxes, seeds):
    env = SokobanEnv(room_size=room_size, num_boxes=num_boxes)
    for seed in list(range(seeds)) + [TRAIN_SEED_LIMIT + s for s in range(seeds // 5)]:
        env.reset(seed=seed)
        level = env.state
        assert len(level.grid) == room_size and all(len(r) == room_size for r in level.grid)
        assert level.grid[0] == level.grid[-1] == "#" * room_size
        assert len(level.boxes) == len(level.goals) == num_boxes
        assert not set(level.boxes) & set(level.goals), "a box starts on a goal"
        assert check_level(level) == level
        path = solve(level)
        assert path, f"seed {seed}: generated level has no solution:\n{render_level(level)}"
        outcome = simulate_moves(level, path, rewards=DEFAULT)
        assert outcome.solved and outcome.applied == tuple(path) and outcome.invalid_move is None


def test_densest_allowed_configurations_still_generate():
    for room_size, num_boxes in ((5, 1), (6, 3), (7, 5), (8, 7)):
        env = SokobanEnv(room_size=room_size, num_boxes=num_boxes, reverse_pulls=num_boxes)
        for seed in (0, 1, TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 1):
            env.reset(seed=seed)
            assert len(env.state.boxes) == num_boxes
            assert not set(env.state.boxes) & set(env.state.goals)


def test_generation_that_cannot_succeed_raises_a_clear_error():
    # A 2x2 floor: every cell is a corner, so no box can ever be pulled off its goal.
    with pytest.raises(RuntimeError, match="no non-trivial train level"):
        generate_level(np.random.default_rng(0), 4, 1, 3, max_attempts=20)
    with pytest.raises(ValueError, match="split"):
        generate_level(np.random.default_rng(0), 6, 1, 6, split="validation")
    with pytest.raises(ValueError, match="num_boxes <= reverse_pulls"):
        generate_level(np.random.default_rng(0), 6, 2, 1)


def test_train_and_test_levels_are_disjoint_and_follow_the_seed_split():
    env = SokobanEnv()
    seen = {"train": set(), "test": set()}
    for offset in range(150):
        for seed in (offset, TRAIN_SEED_LIMIT + offset):
            env.reset(seed=seed)
            assert level_split(env.level) == split_of_seed(seed)
            seen[split_of_seed(seed)].add(env.level)
    assert not seen["train"] & seen["test"]
    # 115 of the 1260 solvable one-box 6x6 levels are test levels: most of them show up.
    assert len(seen["test"]) > 50


def test_level_split_is_a_stable_hash_of_the_picture():
    for seed in range(40):
        level = generate_level(np.random.default_rng(seed), 6, 1, 6,
                               split="test" if seed % 2 else "train")
        digest = hashlib.sha256(render_level(level).encode("ascii")).digest()
        expected = "test" if int.from_bytes(digest[:8], "big") % 10 == 0 else "train"
        assert level_split(level) == expected == ("test" if seed % 2 else "train")


# ------------------------------------------------------------------------------ levels and solver
def test_level_pictures_round_trip_through_the_legend():
    picture = "######\n#_SX_#\n#_XO_#\n#_V__#\n######"
    level = level_from_ascii(picture)
    assert level.player == (1, 2) and level.boxes == ((1, 3), (2, 2), (3, 2))
    assert level.goals == ((1, 2), (2, 3), (3, 2)) and level.grid[1] == "#____#"
    assert render_level(level) == picture
    assert level_from_ascii(picture.split("\n")) == level == level_from_ascii(picture + "\n")


@pytest.mark.parametrize("picture, reason", [
    ("#####\n#PXO#\n####", "rectangular"),
    ("#####\n#PXO#\n#P__#\n#####", "exactly one player"),
    ("#####\n#_XO#\n#####", "exactly one player"),
    ("#####\n#PXX#\n#_O_#\n#####", "as many boxes as goals"),
    ("#####\n#P_O#\n#####", "as many boxes as goals"),
    ("#####\n#PV_#\n#####", "already solved"),
    ("#####\n#P$.#\n#####", "not in the legend"),
    ("", "exactly one player"),
    ("#####\n#PXO#\n#\t__#\n#####", "not in the legend"),
])
def test_malformed_level_pictures_are_rejected(picture, reason):
    with pytest.raises(ValueError, match=reason):
        level_from_ascii(picture)


def test_solver_finds_shortest_solutions_and_reports_none_otherwise():
    assert solve(PUSH_RIGHT) == ["R", "R"]
    assert solve(GOAL_ABOVE) == ["R", "R", "D", "R", "U"]
    # Walk round the box on its goal and push the other one: "R R R" would jam the boxes.
    assert solve(TWO_BOXES) == ["U", "R", "R", "D", "R", "R"]
    stuck = level_from_ascii(["#####", "#X__#", "#_P_#", "#__O#", "#####"])
    assert solve(stuck) is None  # the box is in a corner without a goal
    assert solve(GOAL_ABOVE, max_states=3) is None  # budget exhausted
    solved = GOAL_ABOVE.with_state((3, 1), [(1, 5)])
    assert solve(solved) == []


# ------------------------------------------------------------------------------ reward arithmetic
def _only(**coefficients) -> RewardConfig:
    """A RewardConfig with every coefficient 0 except the given ones."""
    zero = dict(step_cost=0.0, invalid_move_penalty=0.0, box_on_goal_bonus=0.0,
                box_off_goal_penalty=0.0, shaping_coef=0.0, solve_bonus=0.0)
    return RewardConfig(**{**zero, **coefficients})


@pytest.mark.parametrize("level, moves, rewards, expected", [
    (PUSH_RIGHT, "UR", _only(step_cost=0.1), -0.2),              # walking costs the step cost
    (PUSH_RIGHT, "RR", _only(solve_bonus=10.0), 10.0),
    (PUSH_RIGHT, "RR", _only(box_on_goal_bonus=1.0), 1.0),
    (PUSH_RIGHT, "R", _only(box_on_goal_bonus=1.0, solve_bonus=10.0), 0.0),  # not there yet
    (TWO_BOXES, "R", _only(box_off_goal_penalty=1.0), -1.0),     # V pushed off its goal
    (TWO_BOXES, "RURRDL", _only(box_on_goal_bonus=1.0, box_off_goal_penalty=1.0), 0.0),
    (PUSH_RIGHT, "UU", _only(invalid_move_penalty=0.5), -0.5),   # 2nd move hits the wall
    (GOAL_ABOVE, "RRR", _only(invalid_move_penalty=0.5), -0.5),  # 3rd pushes into the wall
    (TWO_BOXES, "RRR", _only(invalid_move_penalty=0.5), -0.5),   # box pushed into a box
])
def test_each_reward_component_on_hand_made_states(level, moves, rewards, expected):
    assert simulate_moves(level, list(moves), rewards=rewards).reward == pytest.approx(expected)


def test_distance_shaping_is_the_decrease_of_the_summed_box_to_nearest_goal_distance():
    # GOAL_ABOVE: the box (2, 3) is 1 + 2 = 3 from the goal (1, 5).
    assert box_distance(GOAL_ABOVE.boxes, GOAL_ABOVE.goals) == 3
    # TWO_BOXES: V (2, 2) is on a goal (0); X (2, 5) is 1 from (2, 6).
    assert box_distance(TWO_BOXES.boxes, TWO_BOXES.goals) == 1
    shaping = _only(shaping_coef=0.5)
    assert simulate_moves(GOAL_ABOVE, ["R"], rewards=shaping).reward == pytest.approx(0.5)
    assert simulate_moves(GOAL_ABOVE, list("RR"), rewards=shaping).reward == pytest.approx(1.0)
    assert simulate_moves(GOAL_ABOVE, list("UL"), rewards=shaping).reward == 0.0  # no push
    # Pushing V right: it is now 1 from its goal, X still 1: D goes 1 -> 2.
    assert simulate_moves(TWO_BOXES, ["R"], rewards=shaping).reward == pytest.approx(-0.5)
    # A solution's total shaping is coef * the initial distance (a potential difference).
    full = simulate_moves(GOAL_ABOVE, solve(GOAL_ABOVE), rewards=shaping)
    assert full.solved and full.reward == pytest.approx(0.5 * 3)


def test_default_rewards_of_a_known_solution_and_of_a_stopped_answer():
    solved = simulate_moves(PUSH_RIGHT, ["R", "R", "L"], rewards=DEFAULT)
    # 2 moves x -0.1, 2 pushes x 0.2 shaping, +1 box on goal, +10 solved; the L is ignored.
    assert solved.reward == pytest.approx(-0.2 + 0.4 + 1.0 + 10.0)
    assert solved.solved and solved.applied == ("R", "R") and solved.ignored == 1
    stopped = simulate_moves(GOAL_ABOVE, list("RRRD"), rewards=DEFAULT)
    assert stopped.reward == pytest.approx(2 * (-0.1 + 0.2) + (-0.1 - 0.5))
    assert stopped.level.player == (2, 4) and stopped.level.boxes == ((2, 5),)
    assert stopped.applied == ("R", "R") and stopped.ignored == 1
    assert "move 3 (R) from (2, 4) pushes a box into a wall" in stopped.invalid_move
    capped = simulate_moves(PUSH_RIGHT, ["U", "D", "R", "R"], rewards=DEFAULT, max_moves=2)
    assert capped.applied == ("U", "D") and capped.ignored == 2 and not capped.solved


def test_walking_off_a_map_without_outer_wall_is_an_invalid_move():
    open_level = level_from_ascii(["PXO"])
    outcome = simulate_moves(open_level, ["L"], rewards=DEFAULT)
    assert outcome.invalid_move and "off the map" in outcome.invalid_move
    assert outcome.level == open_level and outcome.reward == pytest.approx(-0.6)


# ------------------------------------------------------------------------------ the env
def test_known_solution_gets_the_solve_bonus_team_reward_and_terminates():
    env = _env()
    env.step({"tool": "no code here"})
    _, rewards, terms, truncs, infos = env.step({"planner": "Thinking...\nMoves: R R"})
    local = -0.2 + 0.4 + 1.0 + 10.0
    assert infos["planner"]["reward_local"] == pytest.approx(local)
    assert infos["planner"]["reward_team"] == 1.0 and infos["planner"]["success"]
    assert rewards["planner"] == pytest.approx(1.0 + local)
    assert rewards["tool"] == 0.0 and not infos["tool"]["acted"]
    assert all(terms.values()) and not any(truncs.values()) and env.agents == []
    assert "solved" in infos["planner"]["feedback"] and env.moves_taken == ["R", "R"]


def test_invalid_move_is_penalised_and_stops_the_answer():
    env = _env(GOAL_ABOVE)
    env.step({"tool": ""})
    _, rewards, terms, _, infos = env.step({"planner": "Moves: R R R D R U"})
    assert env.state.player == (2, 4) and env.state.boxes == ((2, 5),)
    assert env.moves_taken == ["R", "R"] and not any(terms.values())
    assert infos["planner"]["reward_local"] == pytest.approx(2 * 0.1 - 0.6)
    assert "pushes a box into a wall" in infos["planner"]["feedback"]
    assert "3 move(s) ignored" in infos["planner"]["feedback"]
    env.step({"tool": ""})
    _, rewards, terms, _, infos = env.step({"planner": "Moves: U U"})  # (1, 4), then the wall
    assert env.state.player == (1, 4) and "walks into a wall" in infos["planner"]["feedback"]
    assert infos["planner"]["reward_local"] == pytest.approx(-0.1 - 0.6)


def test_pushing_a_box_off_its_goal_and_back_costs_only_the_steps():
    env = _env(TWO_BOXES, max_turns=2)
    env.step({"tool": ""})
    _, _, _, _, infos = env.step({"planner": "Moves: R"})
    assert infos["planner"]["reward_local"] == pytest.approx(-0.1 - 1.0 - 0.2)
    env.step({"tool": ""})
    _, _, _, _, infos = env.step({"planner": "Moves: U R R D L"})
    assert infos["planner"]["reward_local"] == pytest.approx(-0.5 + 1.0 + 0.2)
    assert env.state.boxes == TWO_BOXES.boxes


def test_garbage_answer_is_a_flagged_parse_error_with_the_penalty():
    env = _env(invalid_action_penalty=-2.0)
    env.step({"tool": ""})
    _, rewards, _, _, infos = env.step({"planner": "I would push the box right twice."})
    assert infos["planner"]["parse_error"] and rewards["planner"] == -2.0
    assert env.state == PUSH_RIGHT and env.moves_taken == []


def test_moves_beyond_the_per_turn_cap_are_ignored():
    env = _env(max_moves_per_turn=1)
    env.step({"tool": ""})
    _, _, terms, _, infos = env.step({"planner": "Moves: R R"})
    assert env.state.boxes == ((2, 4),) and not any(terms.values())
    assert "1 move(s) ignored" in infos["planner"]["feedback"]


def test_episode_truncates_after_max_turns():
    env = _env(max_turns=1)
    env.step({"tool": ""})
    _, _, terms, truncs, infos = env.step({"planner": "Moves: U"})
    assert all(truncs.values()) and not any(terms.values()) and not infos["planner"]["success"]
    assert infos["planner"]["reward_team"] == 0.0 and env.agents == []


def test_scripted_oracle_pair_solves_a_seeded_level():
    env = SokobanEnv(room_size=7, num_boxes=2, code_runner=_echo_runner)
    env.reset(seed=12)
    path = " ".join(solve(env.state))
    _, _, _, _, tool_infos = env.step({"tool": _program(path)})
    assert tool_infos["tool"]["parse_error"] is None and "solved" in tool_infos["tool"]["feedback"]
    assert env.state == env.level  # the tool's moves are only simulated
    _, rewards, terms, truncs, infos = env.step({"planner": f"Moves: {path}"})
    assert infos["planner"]["success"] and infos["planner"]["reward_team"] == 1.0
    assert infos["planner"]["reward_local"] == pytest.approx(tool_infos["tool"]["reward_local"])
    assert rewards["planner"] == pytest.approx(1.0 + infos["planner"]["reward_local"])
    assert all(terms.values()) and not any(truncs.values()) and env.state.solved


def test_reset_accepts_hand_made_levels_in_three_forms_and_rejects_bad_ones():
    env = SokobanEnv()
    rows = render_level(PUSH_RIGHT).split("\n")
    fields = {"grid": list(PUSH_RIGHT.grid), "player": [2, 2], "boxes": [[2, 3]],
              "goals": [[2, 5]]}
    for task in (PUSH_RIGHT, {"rows": rows}, fields):
        env.reset(seed=9, options={"task": task})
        assert env.level == env.state == PUSH_RIGHT
    for bad in ({"rows": ["#P#"]}, {"grid": ["###"]}, "######", {"grid": "#_#", "player": (0, 1),
                "boxes": [], "goals": []}, {**fields, "player": (0, 0)},
                {**fields, "player": "x"}, {**fields, "boxes": [[2, 5]]}):
        with pytest.raises(ValueError):
            env.reset(seed=9, options={"task": bad})


# ------------------------------------------------------------------------------ the tool
def test_tool_score_is_what_the_planner_would_get_and_the_planner_sees_the_output():
    env = _env(GOAL_ABOVE)
    obs, rewards, _, _, infos = env.step({"tool": _program("R R D R U")})
    assert env.state == GOAL_ABOVE  # simulated only
    tool_local = infos["tool"]["reward_local"]
    assert tool_local == pytest.approx(-0.5 + 3 * 0.2 + 1.0 + 10.0) and rewards["tool"] > 11
    assert "Moves: R R D R U" in obs["planner"] and "If played now" in infos["tool"]["feedback"]
    _, _, _, _, infos = env.step({"planner": "Moves: R R D R U"})
    assert infos["planner"]["reward_local"] == pytest.approx(tool_local)


@pytest.mark.parametrize("response, runner, reason", [
    ("I'd use BFS.", _echo_runner, "no program ran"),
    ("```python\n\n```", _echo_runner, "empty"),
    ("```python\nprint('the box goes up')\n```", _echo_runner, "not a move list"),
    ("```python\n1/0\n```", _failing_runner, "exit code 1"),
])
def test_tool_failures_get_the_penalty_and_are_reported_to_the_planner(response, runner, reason):
    env = _env(code_runner=runner)
    obs, rewards, _, _, infos = env.step({"tool": response})
    assert rewards["tool"] == env.invalid_action_penalty
    assert reason in obs["planner"].lower() and reason in infos["tool"]["feedback"].lower()


def test_code_runner_exceptions_are_contained():
    def broken(code):
        raise RuntimeError("executor down")

    env = _env(code_runner=broken)
    _, rewards, _, _, infos = env.step({"tool": _program("R")})
    assert rewards["tool"] == env.invalid_action_penalty
    assert "RuntimeError" in infos["tool"]["feedback"]


BFS_PROGRAM = '''```python
from collections import deque
MAP = {picture!r}.split("\\n")
walls, boxes, goals = set(), set(), set()
for r, row in enumerate(MAP):
    for c, ch in enumerate(row):
        if ch == "#": walls.add((r, c))
        if ch in "XV": boxes.add((r, c))
        if ch in "OVS": goals.add((r, c))
        if ch in "PS": player = (r, c)
D = {{"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}}
start = (player, frozenset(boxes))
prev = {{start: None}}
queue = deque([start])
while queue:
    state = queue.popleft()
    (r, c), bs = state
    if bs == goals:
        break
    for m, (dr, dc) in D.items():
        n = (r + dr, c + dc)
        if n in walls: continue
        if n in bs:
            b = (n[0] + dr, n[1] + dc)
            if b in walls or b in bs: continue
            bs2 = (bs - {{n}}) | {{b}}
        else:
            bs2 = bs
        if (n, bs2) not in prev:
            prev[(n, bs2)] = (state, m)
            queue.append((n, bs2))
moves = []
while prev[state] is not None:
    state, m = prev[state]
    moves.append(m)
print(" ".join(reversed(moves)))
```'''


def test_a_real_bfs_program_in_the_sandbox_lets_the_planner_solve():
    env = SokobanEnv(sandbox_limits=FAST)
    env.reset(seed=21)
    obs, rewards, _, _, infos = env.step(
        {"tool": BFS_PROGRAM.format(picture=render_level(env.state))})
    assert infos["tool"]["parse_error"] is None, infos["tool"]["feedback"]
    assert rewards["tool"] > 10.0, infos["tool"]["feedback"]
    printed = obs["planner"].split("The program printed:\n```\n")[1].split("\n")[0]
    assert printed.split() == solve(env.state)
    _, _, terms, _, infos = env.step({"planner": f"Moves: {printed}"})
    assert infos["planner"]["success"] and all(terms.values())


# ------------------------------------------------------------------------------ prompts
def test_current_state_turn_and_moves_appear_in_every_prompt():
    env = SokobanEnv(max_turns=3, code_runner=_echo_runner)
    obs, _ = env.reset(seed=11)
    answers = iter(["Moves: U", "Moves: L L", "Moves: D R"])
    turn = 1
    while env.agents:
        for agent, text in obs.items():
            assert render_level(env.state) in text, agent
            assert f"Player: {env.state.player}." in text and "Legend: '#' wall" in text
            assert f"Turn {turn} of 3." in text and "You are the" in text
            taken = " ".join(env.moves_taken) or "none"
            assert f"Moves taken so far ({len(env.moves_taken)}): {taken}." in text
            assert set(text) <= set("\n" + "".join(map(chr, range(32, 127)))), "not ASCII"
        agent = env.acting_agents()[0]
        obs, *_ = env.step({agent: _program("R") if agent == "tool" else next(answers)})
        turn += agent == "planner"


def test_compact_prompt_keeps_the_current_state_and_answer_format():
    env = SokobanEnv(prompt_style="compact", code_runner=_echo_runner)
    obs, _ = env.reset(seed=0, options={"task": PUSH_RIGHT})
    for text in obs.values():
        assert render_level(PUSH_RIGHT) in text and len(text.splitlines()) <= 10
    assert "Moves: U L" in obs["planner"] and "```python" in obs["tool"]
    env.step({"tool": _program("R")})
    obs, *_ = env.step({"planner": "Moves: R"})
    assert render_level(env.state) in obs["tool"] and env.state != PUSH_RIGHT


# ------------------------------------------------------------------------------ hostile input
_PROMPT_ECHO = SokobanEnv().reset(seed=0)[0]["planner"]
_PIECES = ["```python\n", "```py\n", "```", "```\n", "\n", "Moves:", "moves :", "U", "r", "left",
           "DOWN", ",", " ", 'print("Moves: U L")', "while True: pass", "\x00", "\ufffd", "é",
           "🙂", "\r\n", "[", "]", "{", "}", '{"moves": ["U", ', '"L"', ":", "null", "'", "**",
           "MOVES: ", "x" * 50, "######\n#_PXO#\n######", _PROMPT_ECHO[:200],
           "```python\n```python\nprint('U')\n```\n```"]
_hostile = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    st.tuples(st.text(max_size=12), st.integers(50, 1000)).map(lambda p: p[0] * p[1]),
    st.sampled_from(["", " ", "\n" * 1000, "```" * 2000, "Moves:" * 3000, "Moves: " + "U " * 20000,
                     "```python\n" * 500 + "print(1)\n" + "```\n" * 500, _PROMPT_ECHO,
                     '{"moves": ["U", "L"', "Moves: [\"U\", \"L\"", _PROMPT_ECHO * 20]),
)
_HOSTILE_SETTINGS = settings(max_examples=2000, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow,
                                                    HealthCheck.data_too_large])


@_HOSTILE_SETTINGS
@given(_hostile)
def test_parsers_of_both_roles_never_raise_on_hostile_text(text):
    for parser in (extract_python_code, parse_planner_answer, parse_program_output):
        result = parser(text)
        assert isinstance(result, ParseResult) and result.ok == (result.error is None)
    for agent, role in SokobanEnv.roles.items():
        assert isinstance(role.parse(text), ParseResult), agent
    moves = parse_planner_answer(text)
    if moves.ok:
        assert moves.value and set(moves.value) <= set("UDLR")
    try:  # hand-made level pictures: well-formed or a ValueError, nothing else
        level_from_ascii(text)
    except ValueError:
        pass


_HOSTILE_ENV = SokobanEnv(room_size=7, num_boxes=2, code_runner=_echo_runner)
_HOSTILE_ENV.reset(seed=3)
_HOSTILE_LEVEL = _HOSTILE_ENV.level


@_HOSTILE_SETTINGS
@given(_hostile)
def test_env_step_never_raises_on_hostile_text(text):
    env = _HOSTILE_ENV
    env.reset(seed=3, options={"task": _HOSTILE_LEVEL})  # a generated level, minus generation
    for agent in ("tool", "planner"):  # the same text to both roles: half the generation cost
        obs, rewards, terms, truncs, infos = env.step({agent: text})
        assert math.isfinite(rewards[agent])
        for observation in obs.values():
            assert env.observation_space(agent).contains(observation)
        if not env.agents:
            break


def test_prefill_answers_starts_the_planners_and_the_tools_answers():
    env = SokobanEnv(sandbox_limits=FAST, code_runner=_echo_runner, prefill_answers=True)
    observations, _ = env.reset(seed=0)
    assert observations["planner"].answer_prefix == "Moves:"
    assert observations["tool"].answer_prefix == "```python\n"
    plain, _ = SokobanEnv(sandbox_limits=FAST, code_runner=_echo_runner).reset(seed=0)
    assert plain == observations and all(type(text) is str for text in plain.values())
