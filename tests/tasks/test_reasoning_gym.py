"""reasoning_gym_v0: any reasoning-gym dataset as reasoner || tool. The dataset's own checker
scores every answer, training and evaluation seeds never share a question, and bad names or
settings are refused naming what is accepted."""

import pytest

from pettingllms_envs.reasoning_gym_task import (ANSWER_PLACEHOLDER, ReasoningGymEnv,
                                                 available_datasets, parse_answer_line,
                                                 split_of_question)
from pettingllms_envs.sandbox import SandboxResult
from pettingllms_rllib.envs import TRAIN_SEED_LIMIT, check_text_env, make_text_env

DATASETS = ["basic_arithmetic", "chain_sum", "letter_counting", "gcd"]


def _printing(text: str):
    """A fake sandbox: every program 'prints' ``text``."""
    return lambda code: SandboxResult(stdout=f"{text}\n", stderr="", exit_code=0,
                                      timed_out=False, killed_by_signal=None,
                                      output_truncated=False, network_isolated=True,
                                      wall_time_s=0.0)


def _code(text: str) -> str:
    return f"```python\nprint({text!r})\n```"


@pytest.mark.parametrize("dataset", DATASETS)
def test_each_dataset_passes_the_conformance_suite(dataset):
    check_text_env(lambda: ReasoningGymEnv(dataset=dataset, code_runner=_printing("1")))


def test_the_env_is_registered_under_its_versioned_id():
    env = make_text_env("reasoning_gym_v0", {"dataset": "gcd"})
    assert isinstance(env, ReasoningGymEnv) and env.dataset == "gcd"


def test_the_checker_scores_each_answer_and_agreement_on_the_right_one_ends_the_episode():
    env = ReasoningGymEnv(dataset="basic_arithmetic", code_runner=_printing("999999"))
    env.reset(seed=4)
    right = env.entry["answer"]
    _, rewards, terminations, _, infos = env.step({"reasoner": f"So the answer is {right}.",
                                                  "tool": _code("ignored")})
    assert infos["reasoner"]["reward_local"] == 1.0 and infos["reasoner"]["success"]
    assert infos["tool"]["reward_local"] == 0.0 and not terminations["reasoner"]
    assert rewards["tool"] == env.alpha * 1.0  # the team reward is the reasoner's score
    env.code_runner = _printing(right)
    env.reset(seed=4)
    _, _, terminations, _, infos = env.step({"reasoner": f"Answer: {right}",
                                            "tool": _code("ignored")})
    assert all(terminations.values()) and infos["tool"]["reward_local"] == 1.0


def test_from_turn_two_each_agent_sees_the_others_answer():
    env = ReasoningGymEnv(dataset="basic_arithmetic", code_runner=_printing("41"))
    env.reset(seed=1)
    observations, *_ = env.step({"reasoner": "Answer: 40", "tool": _code("41")})
    assert 'The tool\'s program printed: "41".' in observations["reasoner"]
    assert 'The reasoner answered: "40".' in observations["tool"]


@pytest.mark.parametrize("text,error", [
    ("no label", "no 'The answer is ...' or 'Answer: ...' line"),
    (f"Answer: {ANSWER_PLACEHOLDER}", "empty answer line"),
    (f"The answer is {ANSWER_PLACEHOLDER}.", "empty answer line"),
    ("Answer:   ", "empty answer line"),
    ("Answer: " + "9" * 201, "longer than 200"),
])
def test_unusable_answers_are_parse_errors(text, error):
    assert error in parse_answer_line(text).error


@pytest.mark.parametrize("text,answer", [
    ("Answer: 1\nthen Answer: 12\nbecause", "12"),
    ("First 3. So the answer is 42.", "42"),
    ("The answer is x = 7.\nDone.", "x = 7"),
    ("The answer is 5, Answer: 6", "6"),  # a label wins over an earlier sentence
])
def test_the_last_answer_line_counts_up_to_its_end(text, answer):
    assert parse_answer_line(text).value == answer


def test_training_and_evaluation_seeds_never_share_a_question():
    env = ReasoningGymEnv(dataset="gcd")
    train, test = set(), set()
    for seed in range(40):
        env.reset(seed=seed)
        train.add(env.entry["question"])
        env.reset(seed=TRAIN_SEED_LIMIT + seed)
        test.add(env.entry["question"])
    assert not train & test
    assert {split_of_question(q) for q in train} == {"train"}
    assert {split_of_question(q) for q in test} == {"test"}


def test_the_same_seed_gives_the_same_instance():
    first, second = ReasoningGymEnv(dataset="chain_sum"), ReasoningGymEnv(dataset="chain_sum")
    assert first.reset(seed=9)[0] == second.reset(seed=9)[0]


def test_dataset_settings_reach_the_generator():
    env = ReasoningGymEnv(dataset="chain_sum", dataset_config={"min_terms": 5, "max_terms": 5})
    env.reset(seed=0)
    assert env.entry["metadata"]["num_terms"] == 5


def test_the_single_agent_is_the_reasoner_alone():
    env = ReasoningGymEnv(dataset="gcd", single_agent=True)
    observations, _ = env.reset(seed=0)
    assert list(observations) == ["reasoner"] and env.acting_agents() == ("reasoner",)


def test_an_unknown_dataset_is_refused_listing_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown reasoning-gym dataset 'no_such'.*'gcd'"):
        ReasoningGymEnv(dataset="no_such")
    assert len(available_datasets()) > 50


def test_an_unknown_setting_is_refused_naming_the_accepted_ones():
    with pytest.raises(ValueError, match=r"\['level'\] are not settings of 'chain_sum'.*"
                                         r"max_terms"):
        ReasoningGymEnv(dataset="chain_sum", dataset_config={"level": 3})


def test_a_bad_setting_value_is_refused_naming_the_dataset():
    with pytest.raises(ValueError, match="reasoning-gym 'chain_sum' refused dataset_config"):
        ReasoningGymEnv(dataset="chain_sum", dataset_config={"min_terms": 5, "max_terms": 2})
