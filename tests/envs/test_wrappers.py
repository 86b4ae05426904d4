"""Plain PettingZoo envs, written here exactly as a user would (no pettingllms_rllib base
class), become text envs through ``wrap_parallel_env`` / ``wrap_aec_env`` without a rewrite:
they pass ``check_text_env``, the protocol's pieces are read from their infos where they give
them, and an env that cannot be used fails when it is built, naming what is missing."""

import copy
import threading

import gymnasium
import pytest
from plain_envs import ClueGame, RelayAEC, VoteGame

from pettingllms_rllib.envs import (NotATextEnvError, check_text_env, make_text_env,
                                    register_text_env, wrap_aec_env, wrap_parallel_env)

def test_a_sequential_parallel_env_passes_the_conformance_suite_once_wrapped():
    check_text_env(lambda: wrap_parallel_env(ClueGame)())


def test_a_parallel_env_with_no_protocol_infos_passes_once_wrapped():
    check_text_env(lambda: wrap_parallel_env(VoteGame)())


def test_an_aec_env_passes_once_wrapped():
    check_text_env(lambda: wrap_aec_env(RelayAEC)())


def test_who_acts_comes_from_the_infos_and_idle_agents_send_nothing():
    env = wrap_parallel_env(ClueGame)()
    env.reset(seed=3)
    assert env.acting_agents() == ("describer",)
    env.step({"describer": "Clue: red fruit", "guesser": "Guess: ignored"})
    assert env.env.seen[-1] == {"describer": "Clue: red fruit", "guesser": ""}
    assert env.acting_agents() == ("guesser",)


def test_reward_parts_come_from_the_infos_else_the_whole_reward_is_local():
    clue = wrap_parallel_env(ClueGame)()
    clue.reset(seed=0)
    clue.step({"describer": f"Clue: {clue.env.word}"})
    _, rewards, terminations, _, infos = clue.step({"guesser": f"Guess: {clue.env.word}"})
    assert rewards["guesser"] == 1.0 and terminations["guesser"]
    assert (infos["guesser"]["reward_team"], infos["guesser"]["reward_local"]) == (1.0, 0.0)
    assert infos["guesser"]["success"] and not clue.agents
    vote = wrap_parallel_env(VoteGame)()
    vote.reset(seed=0)
    _, rewards, _, _, infos = vote.step({"left": str(vote.env.number), "right": "no"})
    assert rewards == {"left": 1.0, "right": 0.0}
    assert [(infos[a]["reward_team"], infos[a]["reward_local"]) for a in ("left", "right")] \
        == [(0.0, 1.0), (0.0, 0.0)]
    assert vote.acting_agents() == ("left", "right")


def test_without_reported_turns_each_step_is_its_own_turn_for_the_group_key():
    env = wrap_parallel_env(VoteGame)()
    env.reset(seed=0)
    assert env.turn == 0
    env.step({"left": "1", "right": "2"})
    assert env.turn == 1


def test_an_aec_step_is_one_stage_and_everyone_observes_after_it():
    env = wrap_aec_env(RelayAEC)()
    observations, _ = env.reset(seed=0)
    assert env.acting_agents() == ("first",) and set(observations) == {"first", "second"}
    observations, *_ = env.step({"first": "banana", "second": "too early"})
    assert env.acting_agents() == ("second",)
    assert observations["second"] == "second: the word is banana."
    _, rewards, terminations, _, infos = env.step({"second": "banana"})
    assert rewards["second"] == 1.0 and all(terminations.values()) and not env.agents
    assert infos["second"]["success"] and not env.acting_agents()


def test_a_clone_is_independent_and_in_the_same_state():
    env = wrap_parallel_env(ClueGame)()
    env.reset(seed=5)
    twin = env.clone()
    twin.step({"describer": "Clue: elsewhere"})
    assert env.acting_agents() == ("describer",) and env.env.clue == "(none)"
    assert twin.env.word == env.env.word


class _Unclonable(ClueGame):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


def test_an_env_that_cannot_be_copied_fails_when_built_and_says_to_define_clone():
    with pytest.raises(NotATextEnvError, match=r"_Unclonable cannot be cloned.*Define clone"):
        wrap_parallel_env(_Unclonable)()


class _WithClone(_Unclonable):
    def clone(self):
        twin = copy.copy(self)
        twin.np_random = copy.deepcopy(self.np_random)
        twin.seen = list(self.seen)
        return twin


def test_an_env_with_its_own_clone_is_cloned_by_it():
    env = wrap_parallel_env(_WithClone)()
    env.reset(seed=1)
    twin = env.clone()
    assert twin.env is not env.env and twin.env.lock is env.env.lock


class _NumberObservations(VoteGame):
    def reset(self, seed=None, options=None):
        observations, infos = super().reset(seed, options)
        return {a: 7 for a in observations}, infos


class _BoxSpaces(VoteGame):
    def observation_space(self, agent):
        return gymnasium.spaces.Box(0, 1, (3,))


@pytest.mark.parametrize("creator,message", [
    (_NumberObservations, r"non-text observations \{'left': 'int', 'right': 'int'\}"),
    (_BoxSpaces, r"observation_space\('left'\) is Box, not gymnasium.spaces.Text"),
])
def test_non_text_observations_or_spaces_fail_when_built(creator, message):
    with pytest.raises(NotATextEnvError, match=message):
        wrap_parallel_env(creator)()


def test_a_creator_of_the_wrong_kind_of_env_is_named():
    with pytest.raises(NotATextEnvError, match=r"RelayAEC\(...\) returned RelayAEC, not a "
                                               r"pettingzoo.ParallelEnv"):
        wrap_parallel_env(RelayAEC)()


def test_registering_a_plain_env_unwrapped_names_what_is_missing_and_the_wrapper():
    with pytest.raises(NotATextEnvError, match=r"(?s)ClueGame.*acting_agents.*"
                                               r"wrap_parallel_env\(ClueGame\)"):
        register_text_env("clue_game_v0", ClueGame, with_ray=False)


def test_a_factory_returning_a_plain_env_is_refused_when_made():
    register_text_env("clue_factory_v0", lambda **config: ClueGame(**config), with_ray=False)
    with pytest.raises(NotATextEnvError, match=r"(?s)ClueGame.*acting_agents.*wrap_parallel_env"):
        make_text_env("clue_factory_v0")


def test_a_wrapped_env_registers_and_is_made_with_its_config():
    register_text_env("clue_game_v0", wrap_parallel_env(ClueGame), with_ray=False)
    env = make_text_env("clue_game_v0", {"max_rounds": 1})
    assert env.env.max_rounds == 1 and env.metadata["name"] == "clue_game_v0"


class _Endless(VoteGame):
    def step(self, actions):
        self.steps = 0  # never reaches its end
        return super().step(actions)


def test_an_env_whose_episode_never_ends_fails_the_conformance_suite():
    with pytest.raises(AssertionError, match="did not end within 50 steps"):
        check_text_env(lambda: wrap_parallel_env(_Endless)(), max_episode_steps=50)
