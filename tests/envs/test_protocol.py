"""The text-env protocol: PettingZoo conformance, workflow, reward mixing, answer prefixes,
registry."""

import copy
import pickle

import pytest
from toy_env import ToyCounterEnv

from pettingllms_rllib.envs import (
    Prompt,
    Role,
    answer_prefix_of,
    TextParallelEnv,
    check_clone_contract,
    check_text_env,
    make_text_env,
    register_text_env,
    registered_env_ids,
)


def test_toy_env_passes_the_conformance_suite():
    check_text_env(lambda: ToyCounterEnv(target=100, max_turns=3))


def test_stages_alternate_and_only_acting_agents_are_applied():
    env = ToyCounterEnv(target=100, max_turns=2)
    _, infos = env.reset(seed=0)
    start = env.counter
    assert infos["adder"]["acting"] and not infos["checker"]["acting"]
    _, rewards, _, _, infos = env.step({"adder": "2", "checker": "not acting: ignored"})
    assert env.counter == start + 2
    assert rewards["checker"] == 0.0 and infos["checker"]["acting"]
    assert infos["checker"]["parse_error"] is None


def test_reward_is_alpha_team_plus_local_with_components_in_infos():
    env = ToyCounterEnv(target=3, alpha=0.5)
    env.reset(seed=0)
    env.counter = 0
    _, rewards, terms, _, infos = env.step({"adder": "3"})
    assert infos["adder"]["reward_team"] == 1.0 and infos["adder"]["reward_local"] == 3.0
    assert rewards["adder"] == pytest.approx(0.5 * 1.0 + 3.0)
    assert all(terms.values()) and env.agents == []


def test_turn_budget_truncates():
    env = ToyCounterEnv(target=100, max_turns=1)
    env.reset(seed=0)
    env.step({"adder": "0"})
    _, _, terms, truncs, _ = env.step({"checker": "0"})
    assert all(truncs.values()) and not any(terms.values())


def test_non_string_and_garbage_actions_are_flagged_not_raised():
    env = ToyCounterEnv(target=100, invalid_action_penalty=-2.0)
    env.reset(seed=0)
    _, rewards, _, _, infos = env.step({"adder": None})
    assert infos["adder"]["parse_error"] and rewards["adder"] == -2.0


def test_a_parser_that_raises_is_contained():
    def broken(text):
        raise ZeroDivisionError

    role = Role("broken", "", broken)
    assert role.safe_parse("x").error == "parser raised ZeroDivisionError"


class _PrefilledCounter(ToyCounterEnv):
    def answer_prefix(self, agent):
        return "Add: " if agent == "adder" else ""


def test_an_answer_prefix_rides_on_the_observation_and_survives_copies():
    env = _PrefilledCounter(target=100, max_turns=2)
    observations, _ = env.reset(seed=0)
    adder, checker = observations["adder"], observations["checker"]
    assert isinstance(adder, Prompt) and adder.answer_prefix == "Add: "
    assert type(checker) is str and answer_prefix_of(checker) == ""
    assert adder == ToyCounterEnv(target=100, max_turns=2).reset(seed=0)[0]["adder"]
    for copied in (pickle.loads(pickle.dumps(adder)), copy.deepcopy(adder),
                   env.clone().current_observations()["adder"]):
        assert copied == adder and copied.answer_prefix == "Add: "
    assert answer_prefix_of(adder.strip()) == ""  # string operations give plain text
    check_text_env(lambda: _PrefilledCounter(target=100, max_turns=3))


def test_an_answer_prefix_must_be_text():
    with pytest.raises(TypeError, match="answer_prefix must be text"):
        Prompt("Go.", answer_prefix=None)


def test_max_turns_below_one_is_a_clear_error():
    with pytest.raises(ValueError, match="max_turns"):
        ToyCounterEnv(max_turns=0)


def test_declaration_errors_name_the_problem():
    class NoRoles(TextParallelEnv):
        possible_agents = ["a"]
        workflow = [("a",)]

    with pytest.raises(TypeError, match="no Role"):
        NoRoles()


def test_clone_checker_catches_an_env_whose_clone_shares_state():
    class Aliased(ToyCounterEnv):
        def clone(self):
            return self

    with pytest.raises(AssertionError, match="same object"):
        check_clone_contract(Aliased(target=100))


def test_registry_raises_on_unknown_ids_and_lists_known_ones():
    register_text_env("toy_counter_v0", ToyCounterEnv, with_ray=False)
    assert "toy_counter_v0" in registered_env_ids()
    assert make_text_env("toy_counter_v0", {"target": 7}).target == 7
    with pytest.raises(KeyError, match="toy_counter_v0"):
        make_text_env("nope_v0")
    with pytest.raises(ValueError, match="bad env_config"):
        make_text_env("toy_counter_v0", {"no_such_arg": 1})
    with pytest.raises(ValueError, match="name_v0"):
        register_text_env("NoVersion", ToyCounterEnv, with_ray=False)
