"""TextArena games (textarena 0.7.4, an optional extra) as text envs through the plain
``ParallelEnv`` adapter in ``pettingllms_rllib.envs.textarena_env`` and ``wrap_parallel_env``.

Games used: the Iterated Prisoner's Dilemma (no randomness, free text: no invalid moves), Liar's
Dice (random dice every round, invalid moves flagged, many starting positions) and Tic Tac Toe
(deterministic, for scripted invalid moves). None of them downloads anything."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

textarena = pytest.importorskip("textarena")

from pettingllms_rllib.envs import (TRAIN_SEED_LIMIT, check_clone_contract,  # noqa: E402
                                    check_splits_disjoint, check_text_env, make_text_env,
                                    register_text_env, wrap_parallel_env)
from pettingllms_rllib.envs.textarena_env import (  # noqa: E402
    PAYOFF_MAPPINGS, TextArenaParallelEnv, _score, import_textarena, textarena_creator, to_text)

REPO = Path(__file__).resolve().parents[2]
PD = textarena_creator("IteratedPrisonersDilemma-v0", game_kwargs={"num_rounds": 2})
DICE = textarena_creator("LiarsDice-v0-small")
TTT = textarena_creator("TicTacToe-v0")


def _play(env, moves):
    """Step ``env`` with ``moves[i]`` as the acting agent's answer at step ``i``."""
    out = None
    for move in moves:
        (acting,) = env.acting_agents()
        out = env.step({acting: move})
    return out


# ---------------------------------------------------------------------- conformance
def test_the_prisoners_dilemma_passes_the_conformance_suite():
    check_text_env(wrap_parallel_env(PD), expect_parse_errors=False)


def test_liars_dice_passes_the_conformance_suite_and_flags_garbage():
    check_text_env(wrap_parallel_env(DICE), expect_parse_errors=True)


def test_the_wrapped_env_registers_and_builds_by_id():
    register_text_env("textarena_pd_test_v0", wrap_parallel_env(PD), with_ray=False)
    env = make_text_env("textarena_pd_test_v0", {"payoffs": "team"})
    observations, infos = env.reset(seed=0)
    assert env.acting_agents() == ("player_0",) and infos["player_0"]["acting"]
    assert not infos["player_1"]["acting"] and set(observations) == {"player_0", "player_1"}
    assert env.env.options.payoffs == "team"


# ---------------------------------------------------------------------- rewards
def test_the_payoff_at_game_end_reaches_the_player_who_did_not_make_the_last_move():
    env = wrap_parallel_env(PD)()
    env.reset(seed=0)
    # Per round: player_0 chats, player_1 chats, player_0 decides, player_1 decides.
    moves = ["hi", "hello", "[Defect]", "[Cooperate]"] * 2
    for move in moves[:-1]:
        _, rewards, terminations, _, _ = _play(env, [move])
        assert rewards == {"player_0": 0.0, "player_1": 0.0} and not any(terminations.values())
    assert env.acting_agents() == ("player_1",)
    _, rewards, terminations, truncations, infos = _play(env, moves[-1:])
    # TextArena: player_0 scored 10 to 0, so it wins (+1) and player_1 loses (-1).
    assert rewards == {"player_0": 1.0, "player_1": -1.0}
    assert all(terminations.values()) and not any(truncations.values()) and not env.agents
    idle = infos["player_0"]
    assert not idle["acted"] and idle["payoff"] == 1.0 and idle["success"]
    assert (idle["reward_team"], idle["reward_local"]) == (0.0, 1.0)
    assert not infos["player_1"]["success"] and infos["player_1"]["acted"]
    assert not any(info["acting"] for info in infos.values())


def test_team_payoffs_from_the_game_score_pay_everyone_the_mean():
    env = wrap_parallel_env(textarena_creator(
        "IteratedPrisonersDilemma-v0", game_kwargs={"num_rounds": 2}, payoffs="team",
        payoff_source="score", alpha=0.5, success_threshold=6.0))()
    env.reset(seed=0)
    _, rewards, _, _, infos = _play(env, ["hi", "hello", "[Cooperate]", "[Cooperate]"] * 2)
    # Both cooperated twice: 3 + 3 points each, mean 6; reward = alpha * team.
    assert rewards == {"player_0": 3.0, "player_1": 3.0} and not env.agents
    for agent in ("player_0", "player_1"):
        assert (infos[agent]["reward_team"], infos[agent]["reward_local"]) == (6.0, 0.0)
        assert infos[agent]["payoff"] == 6.0 and infos[agent]["success"]


def test_score_payoffs_need_a_game_that_keeps_scores():
    with pytest.raises(ValueError, match=r"game_state\['scores'\].*payoff_source='outcome'"):
        textarena_creator("TicTacToe-v0", payoff_source="score")()


@pytest.mark.parametrize("scores", [{0: 4, 1: 7}, [4, 7], {0: {"Score": 4}, 1: {"Score": 7}}])
def test_game_scores_are_read_in_the_shapes_textarena_games_keep_them(scores):
    # Prisoner's Dilemma and Snake: by player id; Pig Dice: a list; Memory Game: nested.
    assert [_score("g", {"scores": scores}, pid) for pid in (0, 1)] == [4.0, 7.0]


# ---------------------------------------------------------------------- invalid moves
def test_an_invalid_move_is_flagged_retried_then_punished_by_textarena_rules():
    env = wrap_parallel_env(TTT)()
    env.reset(seed=0)
    _, rewards, _, _, infos = _play(env, ["[4]"])
    assert infos["player_0"]["parse_error"] is None and rewards["player_0"] == 0.0
    _, rewards, terminations, _, infos = _play(env, ["I pass"])
    assert infos["player_1"]["parse_error"].startswith("invalid move: ")
    assert "format" in infos["player_1"]["parse_error"] and infos["player_0"]["parse_error"] is None
    assert env.acting_agents() == ("player_1",) and not any(terminations.values())  # a retry
    observations, rewards, terminations, _, infos = _play(env, ["[4]"])  # occupied: invalid again
    assert "occupied" in infos["player_1"]["parse_error"] and all(terminations.values())
    assert rewards == {"player_0": 1.0, "player_1": -1.0} and not env.agents
    assert "attempted an invalid move" in observations["player_1"]


def test_a_game_where_every_player_is_eliminated_ends_instead_of_hanging():
    # textarena 0.7.4 (error allowance 2 here): the third invalid decision eliminates a player,
    # who still moves next; once both are out, TextArena's next rotation would never return.
    env = textarena_creator("MarketEntryGame-v0", num_players=2)()
    env.reset(seed=0)
    script = ["{hi}"] * 6 + ["x", "x", "x", "[E]", "x", "x"]
    for move in script:
        _, rewards, terminations, _, _ = env.step({env.possible_agents[env.acting_player()]: move})
        assert not any(terminations.values())
    assert env.acting_player() == 1
    _, rewards, terminations, _, infos = env.step({"player_1": "x"})
    assert all(terminations.values()) and rewards == {"player_0": -1.0, "player_1": -1.0}
    assert infos["player_1"]["parse_error"] and infos["player_0"]["parse_error"] is None


# ---------------------------------------------------------------------- observations
def test_the_acting_view_is_what_textarena_shows_and_idle_views_preview_it():
    env = PD()
    observations, infos = env.reset(seed=0)
    game = textarena.make("IteratedPrisonersDilemma-v0", num_rounds=2)
    game.reset(num_players=2, seed=0)
    previous = dict(observations)
    for move in ["let us cooperate", "agreed", "[Cooperate]", "[Defect] sorry"]:
        player, view = game.get_observation()
        agent = f"player_{player}"
        assert infos[agent]["acting"] and observations[agent] == to_text(view, 10 ** 6)
        assert all(observations[a].startswith(previous[a]) for a in observations)  # views grow
        previous = dict(observations)
        game.step(move)
        observations, _, _, _, infos = env.step({agent: move})
    assert "Player 0 cooperated, Player 1 defected" in observations["player_0"]
    assert observations["player_0"].isascii() and "->" in observations["player_0"]


def test_role_names_replace_player_ids():
    env = textarena_creator("TicTacToe-v0", agent_names=["noughts", "crosses"])()
    _, infos = env.reset(seed=0)
    assert env.possible_agents == ["noughts", "crosses"] and infos["noughts"]["acting"]


# ---------------------------------------------------------------------- clones and seeds
def test_a_clone_is_independent_and_carries_the_games_random_state():
    env = DICE()
    env.reset(seed=5)
    twin = env.clone()
    acting = env.possible_agents[env.acting_player()]
    twin.step({acting: "nonsense"})
    assert twin._tap.reasons and not env._tap.reasons
    assert twin.acting_player() == env.acting_player() and twin.steps == 1 and env.steps == 0
    # Same actions on both from here on: identical games, rerolled dice included.
    wrapped = wrap_parallel_env(DICE)
    bids = lambda env, step: {a: ("[Call]" if step % 2 else f"[Bid: {step + 1}, 6]")  # noqa: E731
                              for a in env.agents}
    check_clone_contract(wrapped(), seed=7, action_fn=bids, clone_after_steps=(0, 1, 2))


def test_the_game_random_state_is_private_to_the_env():
    random.seed(123)
    expected = [random.random() for _ in range(3)]
    random.seed(123)
    env = DICE()
    env.reset(seed=1)
    env.step({env.possible_agents[env.acting_player()]: "[Call]"})
    assert [random.random() for _ in range(3)] == expected
    other = DICE()
    first = other.reset(seed=1)[0]
    random.seed(999)  # whatever else uses `random` does not change the game
    assert DICE().reset(seed=1)[0] == first


def test_seeds_reproduce_and_evaluation_seeds_hold_other_instances():
    shown = {seed: DICE().reset(seed=seed)[0] for seed in (0, 1, TRAIN_SEED_LIMIT)}
    assert DICE().reset(seed=1)[0] == shown[1] and shown[0] != shown[1]
    check_splits_disjoint(wrap_parallel_env(DICE), num_train_seeds=100, num_test_seeds=20)


def test_a_game_without_randomness_has_one_instance_for_every_seed():
    env = PD()
    first = env.reset(seed=0)[0]
    assert env.reset(seed=12345)[0] == first and env.reset(seed=TRAIN_SEED_LIMIT + 3)[0] == first


def test_max_steps_truncates_and_pays_nothing():
    env = textarena_creator("IteratedPrisonersDilemma-v0", max_steps=3)()
    env.reset(seed=0)
    for _ in range(2):
        env.step({a: "hi" for a in env.agents})
    _, rewards, terminations, truncations, infos = env.step({a: "hi" for a in env.agents})
    assert all(truncations.values()) and not any(terminations.values()) and not env.agents
    assert set(rewards.values()) == {0.0} and not any(i["acting"] for i in infos.values())


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs,error,match", [
    ({"payoffs": "mean"}, ValueError, re.escape(str(list(PAYOFF_MAPPINGS)))),
    ({"payoff_source": "points"}, ValueError, "'outcome', 'score'"),
    ({"max_steps": 0}, ValueError, "max_steps must be an integer >= 1"),
    ({"agent_names": ["a"]}, ValueError, "2 distinct non-empty strings"),
    ({"agent_names": ["a", "a"]}, ValueError, "distinct"),
    ({"test_fraction": 1.0}, ValueError, r"test_fraction must be in \(0, 1\)"),
    ({"colour": "red"}, TypeError, r"unknown arguments \['colour'\]"),
])
def test_bad_arguments_are_refused_when_the_creator_is_made(kwargs, error, match):
    with pytest.raises(error, match=match):
        textarena_creator("IteratedPrisonersDilemma-v0", **kwargs)


def test_bad_games_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"unknown TextArena game 'TicTacTo-v0'.*TicTacToe-v0"):
        TextArenaParallelEnv("TicTacTo-v0")
    with pytest.raises(ImportError, match=r"does not import on Python 3\.\d+"):
        TextArenaParallelEnv("Chess-v0")  # 0.7.4 writes it in newer Python syntax
    with pytest.raises(ValueError, match="refused num_players=3"):
        TextArenaParallelEnv("TicTacToe-v0", num_players=3)
    with pytest.raises(ValueError, match="bad game_kwargs"):
        TextArenaParallelEnv("TicTacToe-v0", game_kwargs={"size": 4})
    with pytest.raises(ValueError, match="bad env_config"):
        register_text_env("textarena_ttt_test_v0", wrap_parallel_env(TTT), with_ray=False)
        make_text_env("textarena_ttt_test_v0", {"payoff": "own"})


def test_games_that_want_nltk_data_fail_without_downloading(monkeypatch):
    nltk = pytest.importorskip("nltk")

    def no_network(*args, **kwargs):
        raise AssertionError("nltk.download reached")

    monkeypatch.setattr(nltk, "download", no_network)
    monkeypatch.setattr(nltk.data, "find", lambda *a, **k: (_ for _ in ()).throw(LookupError()))
    with pytest.raises(RuntimeError, match=r"asks to download NLTK data \['words'\]"):
        TextArenaParallelEnv("WordChains-v0")
    assert nltk.download is no_network  # restored


def test_a_missing_textarena_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'pettingllms-rllib[textarena]'")):
        import_textarena()
    with pytest.raises(ImportError, match="pettingllms-rllib"):
        TextArenaParallelEnv("TicTacToe-v0")


def test_importing_the_adapter_imports_no_textarena():
    probe = ("import json, sys, pettingllms_rllib.envs.textarena_env; "
             "print(json.dumps([m for m in ('textarena', 'nltk', 'torch', 'ray.rllib') "
             "if m in sys.modules]))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


# ---------------------------------------------------------------------- docs
def test_the_docs_textarena_section_runs():
    text = (REPO / "docs" / "env_libraries.md").read_text()
    section = text.split("## TextArena", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks and "register_text_env(\"prisoners_dilemma_v0\"" in blocks[0]
    namespace = {"__name__": "env_libraries_textarena"}
    for index, block in enumerate(blocks):
        exec(compile(block, f"env_libraries.md:textarena{index}", "exec"), namespace)
