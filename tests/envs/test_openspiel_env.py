"""The OpenSpiel adapter (``pettingllms_rllib.envs.openspiel_env``) on real small games:
conformance, who acts, the reward contract, parse errors, clones, seeds and held-out splits.
Skipped where the optional extra (``pettingllms-rllib[openspiel]``) is not installed."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from pettingllms_rllib.envs import (TRAIN_SEED_LIMIT, check_clone_contract,  # noqa: E402
                                    check_splits_disjoint, check_text_env, make_text_env,
                                    register_text_env)
from pettingllms_rllib.envs.openspiel_env import (OpenSpielTextEnv,  # noqa: E402
                                                  match_legal_move, openspiel_env_creator,
                                                  openspiel_text_env, to_ascii)

GAMES = ["tiny_hanabi", "bargaining", "matrix_pd", "kuhn_poker", "tic_tac_toe"]


@pytest.mark.parametrize("payoffs", ["own", "team"])
@pytest.mark.parametrize("game", GAMES)
def test_each_game_passes_the_conformance_suite(game, payoffs):
    check_text_env(lambda: openspiel_text_env(game, payoffs=payoffs), expect_parse_errors=True)


@pytest.mark.parametrize("game", ["tiny_hanabi", "bargaining", "kuhn_poker"])
def test_clone_contract_holds_with_legal_answers(game):
    """The garbage answers of the conformance suite always take the fallback; legal answers
    (here: each acting agent's last legal move) walk other paths through the game."""
    env = openspiel_text_env(game)

    def last_move(env, step):
        return {a: env.env.legal_moves(a)[-1] for a in env.acting_agents()}

    for seed in (0, 7, TRAIN_SEED_LIMIT + 3):
        check_clone_contract(env, seed=seed, action_fn=last_move, clone_after_steps=(0, 1, 2))


def test_turn_based_acting_follows_the_current_player_and_idle_answers_are_ignored():
    env = openspiel_text_env("tic_tac_toe")
    _, infos = env.reset(seed=0)
    assert env.acting_agents() == ("player_0",) and infos["player_0"]["acting"]
    assert not infos["player_1"]["acting"]
    _, _, _, _, infos = env.step({"player_0": "x(1,1)", "player_1": "o(0,0)"})
    assert env.env.spiel_state.observation_string(0) == "...\n.x.\n..."
    assert infos["player_0"]["move"] == "x(1,1)" and "move" not in infos["player_1"]
    assert env.acting_agents() == ("player_1",)
    plain = OpenSpielTextEnv("tic_tac_toe")  # the wrapper infers turn and stage itself
    _, infos = plain.reset(seed=0)
    *_, step_infos = plain.step({"player_0": "x(0,0)"})
    for info in (*infos.values(), *step_infos.values()):
        assert not {"turn", "stage"} & set(info)


def test_simultaneous_node_lets_every_player_act_and_pays_both():
    env = openspiel_text_env("matrix_pd")
    obs, infos = env.reset(seed=0)
    assert env.acting_agents() == ("player_0", "player_1")
    assert "Cooperate\nDefect" in obs["player_0"]
    _, rewards, terminations, _, infos = env.step(
        {"player_0": "I will Defect", "player_1": "Cooperate"})
    payoff = pyspiel.load_game("matrix_pd").new_initial_state()
    payoff.apply_actions([1, 0])
    assert rewards == {"player_0": payoff.returns()[0], "player_1": payoff.returns()[1]}
    assert all(terminations.values()) and not env.agents
    assert infos["player_0"]["move"] == "Defect" and infos["player_0"]["parse_error"] is None


def test_a_reward_paid_at_a_step_where_a_player_was_idle_reaches_that_player():
    env = openspiel_text_env("kuhn_poker", payoffs="own")
    for seed in range(40):  # find a deal where player_0 holds the higher card
        env.reset(seed=seed)
        if int(env.env.spiel_state.observation_string(0)[0]) > int(
                env.env.spiel_state.observation_string(1)[0]):
            break
    _, rewards, _, _, _ = env.step({"player_0": "Pass"})
    assert rewards == {"player_0": 0.0, "player_1": 0.0}
    _, rewards, terminations, _, infos = env.step({"player_1": "Pass"})
    assert all(terminations.values())
    assert not infos["player_0"]["acted"] and infos["player_1"]["acted"]
    assert rewards == {"player_0": 1.0, "player_1": -1.0}  # player_0 was idle and is paid
    assert (infos["player_0"]["reward_team"], infos["player_0"]["reward_local"]) == (0.0, 1.0)
    assert infos["player_0"]["success"] is False  # 1 < max_utility 2 (a called bet)


def test_team_mode_pays_the_mean_to_everyone_and_penalties_stay_local():
    env = openspiel_text_env("tiny_hanabi", payoffs="team", alpha=0.5, roles=("hinter",
                                                                             "guesser"))
    obs, _ = env.reset(seed=0)
    assert env.possible_agents == ["hinter", "guesser"] and "You are hinter" in obs["hinter"]
    _, rewards, _, _, infos = env.step({"hinter": "???"})
    assert infos["hinter"]["parse_error"] and infos["hinter"]["move"] == "p0a0"
    assert rewards == {"hinter": -1.0, "guesser": 0.0}
    _, rewards, terminations, _, infos = env.step({"guesser": "p1a1"})
    returns = env.env.spiel_state.returns()
    assert all(terminations.values()) and returns[0] == returns[1]  # identical utilities
    for agent in ("hinter", "guesser"):
        assert infos[agent]["reward_team"] == returns[0]
        assert infos[agent]["reward_local"] == 0.0
        assert rewards[agent] == 0.5 * returns[0]
        assert infos[agent]["success"] == (returns[0] >= 10.0)


def test_success_threshold_is_an_argument():
    env = openspiel_text_env("tiny_hanabi", payoffs="team", success_threshold=0.0)
    env.reset(seed=0)
    env.step({"player_0": "p0a1"})
    *_, infos = env.step({"player_1": "p1a1"})  # tiny_hanabi pays 8 for (a1, a1)
    assert infos["player_0"]["success"] and infos["player_1"]["success"]


def test_garbage_or_illegal_answers_are_flagged_penalised_and_the_game_advances():
    env = openspiel_text_env("tic_tac_toe", payoffs="own", invalid_action_penalty=-0.25)
    env.reset(seed=0)
    _, rewards, _, _, infos = env.step({"player_0": "\x00 not a move"})
    assert infos["player_0"]["parse_error"] == "no legal move in the answer"
    assert rewards["player_0"] == -0.25 and infos["player_0"]["reward_local"] == -0.25
    assert infos["player_0"]["move"] == "x(0,0)"  # the lowest-id legal action
    assert env.env.spiel_state.observation_string(0).startswith("x..")
    _, _, _, _, infos = env.step({"player_1": "o(0,0)"})  # occupied: not a legal move
    assert infos["player_1"]["parse_error"] and infos["player_1"]["move"] == "o(0,1)"
    _, rewards, _, _, infos = env.step({"player_0": None})  # the wrapper sends ""
    assert infos["player_0"]["parse_error"] and rewards["player_0"] == -0.25
    _, _, _, _, infos = env.step({"player_1": "My move: o(2,2)."})
    assert infos["player_1"]["parse_error"] is None and infos["player_1"]["move"] == "o(2,2)"
    plain = OpenSpielTextEnv("tic_tac_toe")
    plain.reset(seed=0)
    *_, infos = plain.step({"player_0": None})
    assert infos["player_0"]["parse_error"] == "action is NoneType, not text"


def test_answers_are_matched_exactly_else_by_the_last_legal_move_they_name():
    moves = ["Pass", "Bet", "1", "10", "Offer: Book: 1", "Offer: Book: 10"]
    assert match_legal_move("  Bet\n", moves) == 1
    assert match_legal_move("I thought about Bet, but I Pass.", moves) == 0
    assert match_legal_move("Better not", moves) is None  # glued to more letters
    assert match_legal_move("I say 10", moves) == 3  # not the "1" or "0" inside it
    assert match_legal_move("x 1x", moves) is None
    assert match_legal_move("Offer: Book: 10", moves) == 5
    assert match_legal_move("my offer is Offer: Book: 1 then", moves) == 4
    assert match_legal_move("", moves) is None
    assert match_legal_move("o(1,1)", ["o(1,1)", "o(1,1)"]) == 0  # duplicates: lowest id
    assert to_ascii("\u2660 A") == "<black spade suit> A" and to_ascii("caf\u00e9") == "cafe"


def test_bargaining_prompts_show_the_pool_values_offers_and_agreement():
    env = openspiel_text_env("bargaining", payoffs="own")
    obs, _ = env.reset(seed=5)
    for agent in ("player_0", "player_1"):
        assert "Pool: Book:" in obs[agent] and "My values: Book:" in obs[agent]
    moves = env.env.legal_moves("player_0")
    assert moves[0] == "Offer: Book: 0, Hat: 0, Basketball: 0" and "Agree" not in moves
    offer = moves[-1]  # player_0 asks for the whole pool
    obs, *_ = env.step({"player_0": offer})
    assert f"P0 offers: {offer}" in obs["player_1"]
    assert env.env.legal_moves("player_1")[-1] == "Agree"
    _, rewards, terminations, _, _ = env.step({"player_1": "Agree"})
    values = [int(v) for v in obs["player_0"].split("My values: ")[1].split("\n")[0]
              .replace(",", " ").split() if v.isdigit()]
    pool = [int(v) for v in obs["player_0"].split("Pool: ")[1].split("\n")[0]
            .replace(",", " ").split() if v.isdigit()]
    assert all(terminations.values())
    assert rewards == {"player_0": float(np.dot(values, pool)), "player_1": 0.0}


def test_max_steps_truncates():
    env = openspiel_text_env("bargaining", max_steps=3)
    env.reset(seed=0)
    for _ in range(2):
        _, _, terminations, truncations, _ = env.step({a: "???" for a in env.agents})
        assert not any(truncations.values())
    _, _, terminations, truncations, infos = env.step({a: "???" for a in env.agents})
    assert all(truncations.values()) and not any(terminations.values()) and not env.agents
    assert not any(info["success"] for info in infos.values())


def test_a_clone_diverges_independently_and_replays_chance_identically():
    env = openspiel_text_env("kuhn_poker")
    env.reset(seed=3)
    twin = env.clone()
    assert twin.env.spiel_state is not env.env.spiel_state
    twin.step({"player_0": "Bet"})
    assert env.env.spiel_state.history() != twin.env.spiel_state.history()
    assert env.acting_agents() == ("player_0",) and twin.acting_agents() == ("player_1",)
    again = env.clone()
    out_a, out_b = env.step({"player_0": "Pass"}), again.step({"player_0": "Pass"})
    assert out_a[0] == out_b[0] and out_a[1] == out_b[1]
    assert env.env.np_random.bit_generator.state == again.env.np_random.bit_generator.state


def test_seeds_reproduce_and_differ():
    env = openspiel_text_env("bargaining")
    first = [env.reset(seed=s)[0] for s in range(6)]
    assert first == [openspiel_text_env("bargaining").reset(seed=s)[0] for s in range(6)]
    assert len({obs["player_0"] for obs in first}) > 3


@pytest.mark.parametrize("game", ["bargaining", "kuhn_poker", "tiny_hanabi"])
def test_training_and_evaluation_seeds_deal_disjoint_instances(game):
    env = OpenSpielTextEnv(game)
    assert env.splits_disjoint and all(env.instance_counts.values())
    check_splits_disjoint(lambda: openspiel_text_env(game))


def test_bargaining_has_a_thousand_instances_split_by_test_fraction():
    counts = OpenSpielTextEnv("bargaining").instance_counts
    assert sum(counts.values()) == 1000 and 150 < counts["test"] < 250
    assert sum(OpenSpielTextEnv("bargaining", test_fraction=0.5).instance_counts.values()) \
        == 1000
    assert OpenSpielTextEnv("bargaining", split_instances=False).instance_counts is None


@pytest.mark.parametrize("game", ["tic_tac_toe", "matrix_pd"])
def test_games_with_a_single_instance_say_they_cannot_be_split(game):
    env = OpenSpielTextEnv(game)
    assert not env.splits_disjoint and sum(env.instance_counts.values()) == 1


def test_game_parameters_pass_through():
    env = openspiel_text_env("kuhn_poker", game_params={"players": 3})
    assert env.possible_agents == ["player_0", "player_1", "player_2"]
    assert openspiel_text_env("kuhn_poker(players=3)").possible_agents == env.possible_agents
    small = OpenSpielTextEnv("bargaining", game_params={"max_turns": 2})
    small.reset(seed=0)
    small.step({"player_0": "???"})
    _, _, terminations, _, _ = small.step({"player_1": "???"})
    assert all(terminations.values()) and not small.agents


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown OpenSpiel game 'tic_tac_tow'.*tic_tac_toe"):
        OpenSpielTextEnv("tic_tac_tow")
    with pytest.raises(ValueError, match="accepted: 'own', 'team'"):
        OpenSpielTextEnv("tiny_hanabi", payoffs="shared")
    with pytest.raises(ValueError, match="2 distinct non-empty names"):
        OpenSpielTextEnv("tiny_hanabi", roles=("only_one",))
    with pytest.raises(ValueError, match="could not load 'kuhn_poker'.*Unknown parameter"):
        OpenSpielTextEnv("kuhn_poker", game_params={"no_such_param": 1})
    with pytest.raises(ValueError, match="prompt_template"):
        OpenSpielTextEnv("tiny_hanabi", prompt_template="{board}")
    with pytest.raises(ValueError, match="max_steps"):
        OpenSpielTextEnv("tiny_hanabi", max_steps=0)
    with pytest.raises(ValueError, match="dynamics"):
        OpenSpielTextEnv("mfg_crowd_modelling")
    with pytest.raises(ValueError, match="SAMPLED_STOCHASTIC"):
        OpenSpielTextEnv("negotiation")  # chance sampled inside OpenSpiel: not reproducible


def test_prompt_template_and_instructions_are_the_callers():
    env = OpenSpielTextEnv("kuhn_poker", prompt_template="{role}|{observation}|{moves}|"
                           "{instructions}", instructions="Reply Pass or Bet.")
    obs, _ = env.reset(seed=1)
    role, observation, moves, instructions = obs["player_0"].split("|")
    assert (role, moves, instructions) == ("player_0", "Pass\nBet", "Reply Pass or Bet.")


def test_registered_creator_takes_env_config_over_its_defaults():
    register_text_env("openspiel_test_tiny_hanabi_v0",
                      openspiel_env_creator("tiny_hanabi", payoffs="team"), with_ray=False)
    env = make_text_env("openspiel_test_tiny_hanabi_v0", {"alpha": 2.0})
    assert env.alpha == 2.0 and env.env.payoffs == "team"
    check_text_env(lambda: make_text_env("openspiel_test_tiny_hanabi_v0"))
    with pytest.raises(ValueError, match="bad env_config"):
        make_text_env("openspiel_test_tiny_hanabi_v0", {"no_such_argument": 1})


def test_importing_the_module_does_not_import_pyspiel_and_a_missing_one_says_how_to_install():
    probe = ("import sys, pettingllms_rllib.envs.openspiel_env; "
             "print('pyspiel' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr[-2000:]
    blocked = ("import sys; sys.modules['pyspiel'] = None\n"
               "from pettingllms_rllib.envs.openspiel_env import OpenSpielTextEnv\n"
               "try:\n    OpenSpielTextEnv('tiny_hanabi')\n"
               "except ImportError as exc:\n    print(exc)\n")
    run = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True,
                         timeout=120)
    assert "pip install 'pettingllms-rllib[openspiel]'" in run.stdout, run.stderr[-2000:]


def test_the_openspiel_section_of_the_env_libraries_guide_runs():
    guide = (Path(__file__).parents[2] / "docs" / "env_libraries.md").read_text()
    section = guide.split("\n## OpenSpiel\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert blocks
    run = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
