"""Instance identity: what a policy is shown at reset decides whether two seeds are one task,
whether an evaluation instance is held out, and which seeds an evaluation set plays."""

import pytest

from pettingllms_rllib.envs import (
    TRAIN_SEED_LIMIT, TooFewInstancesError, check_splits_disjoint, distinct_instance_seeds,
    instance_fingerprint, shared_instances)
from toy_env import ToyCounterEnv, ToyScoreEnv


class LeakyEnv(ToyScoreEnv):
    """Seeds of both ranges draw from the same 100 topics: evaluation instances leak."""


class SplitEnv(ToyScoreEnv):
    """Evaluation seeds draw topics 100-199, training seeds 0-99: disjoint by content."""

    def _new_task(self, seed, options):
        offset = 100 if seed is not None and seed >= TRAIN_SEED_LIMIT else 0
        self.topic = offset + int(self.np_random.integers(0, 100))


def test_the_fingerprint_is_what_the_agents_are_shown():
    env = ToyCounterEnv(max_turns=2)
    by_counter = {}
    for seed in range(30):
        fingerprint = instance_fingerprint(env, seed)
        by_counter.setdefault(env.counter, set()).add(fingerprint)
    assert sorted(by_counter) == [0, 1, 2]
    assert all(len(prints) == 1 for prints in by_counter.values())
    assert len(set.union(*by_counter.values())) == 3


def test_shared_instances_names_a_training_seed_for_each_leaked_evaluation_seed():
    env = LeakyEnv(max_turns=2)
    shared = shared_instances(env, range(200), range(TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 20))
    assert shared  # 200 draws of 100 topics cover most of them
    for test_seed, train_seed in shared.items():
        assert instance_fingerprint(env, test_seed) == instance_fingerprint(env, train_seed)
    assert not shared_instances(SplitEnv(max_turns=2), range(200),
                                range(TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 20))


def test_the_conformance_check_fails_a_leaking_env_and_passes_a_split_one():
    with pytest.raises(AssertionError, match="evaluation instances are also training"):
        check_splits_disjoint(lambda: LeakyEnv(max_turns=2))
    check_splits_disjoint(lambda: SplitEnv(max_turns=2))


def test_distinct_seeds_skip_repeats_and_keep_the_first_seed_of_each_instance():
    env = LeakyEnv(max_turns=2)
    seeds = distinct_instance_seeds(env, 30)
    prints = [instance_fingerprint(env, seed) for seed in seeds]
    assert len(set(prints)) == 30 and seeds == sorted(seeds) and seeds[0] == TRAIN_SEED_LIMIT
    every = range(TRAIN_SEED_LIMIT, seeds[-1] + 1)
    first_of = {}
    for seed in every:
        first_of.setdefault(instance_fingerprint(env, seed), seed)
    assert seeds == sorted(first_of.values())


def test_too_few_distinct_instances_is_an_error_that_says_how_many_there_are():
    with pytest.raises(TooFewInstancesError, match="only 3 distinct instances, fewer than the 4"):
        distinct_instance_seeds(ToyCounterEnv(max_turns=2), 4)
    with pytest.raises(ValueError, match="num_instances must be >= 1"):
        distinct_instance_seeds(ToyCounterEnv(max_turns=2), 0)
