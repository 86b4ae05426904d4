"""Asynchronous training (``async_rollout``, one-step off-policy) on the CPU with a tiny random
llama and one remote env runner: the runner samples iteration n+1 while the learners train on
iteration n. Responses never lag more than ``max_staleness`` versions, the importance weight
is exactly 1 where they do not lag, and ``max_staleness=0`` is the synchronous algorithm."""

import math

import pytest

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=4)


def tiny_config(**training) -> ATGRPOConfig:
    return (ATGRPOConfig()
            .environment("toy_score_v0", env_config={"max_turns": 1})
            .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6)
            .training(num_branches=4, num_tasks_per_iteration=3, lr=1e-2, **training)
            .env_runners(num_env_runners=1)
            .multi_agent(**multi_agent_kwargs("per_role", AGENTS))
            .debugging(seed=0))


def test_staleness_stays_within_the_bound_and_on_policy_weights_are_one():
    pools = {f"{agent}_pool": {"modules": [agent], "num_learners": 1, "num_cpus_per_learner": 0.5}
             for agent in AGENTS}
    algo = tiny_config(async_rollout=True).resource_pools(pools=pools).build_algo()
    try:
        results = [algo.train() for _ in range(6)]
    finally:
        algo.stop()
    for iteration, result in enumerate(results, start=1):
        for agent in AGENTS:
            lag = result["at_grpo"]["staleness_max"][agent]
            assert lag <= 1, (iteration, agent, lag)
            weight = result["learners"][agent]["importance_weight_mean"]
            if iteration == 1:  # sampled with the weights the learner starts from
                assert lag == 0 and weight == 1.0
            else:  # sampled during the previous update, with the weights before it
                assert lag == 1 and math.isfinite(weight) and weight != 1.0
        assert result["env_runners"]["weights_version_min"] == max(0, iteration - 2)


def test_max_staleness_zero_reproduces_the_synchronous_run():
    def run(config):
        algo = config.build_algo()
        try:
            return [algo.train() for _ in range(2)]
        finally:
            algo.stop()

    synchronous = run(tiny_config())
    bounded = run(tiny_config(async_rollout=True, max_staleness=0))
    for plain, zero in zip(synchronous, bounded):
        assert zero["env_runners"]["agent"] == plain["env_runners"]["agent"]
        for agent in AGENTS:
            assert zero["learners"][agent]["policy_loss"] == plain["learners"][agent][
                "policy_loss"]
            assert zero["at_grpo"]["staleness_max"][agent] == 0
