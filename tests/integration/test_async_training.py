"""Asynchronous training (``async_rollout``, one-step off-policy) on the CPU with a tiny random
llama and one remote env runner: the runner samples the next iteration while the learners train
(with resource pools, each pool on its own schedule). Responses never lag more than ``max_staleness`` versions, the importance weight
is exactly 1 where they do not lag, and ``max_staleness=0`` is the synchronous algorithm."""

import math

import pytest

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=4)


def tiny_config(**training) -> ATGRPOConfig:
    """fp32: these tests check the exact path, where on-policy rows keep the engine's
    log-probs (under a bf16 ``auto`` every row is recomputed: tests/models/test_precision.py)."""
    return (ATGRPOConfig()
            .environment("toy_score_v0", env_config={"max_turns": 1})
            .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
                 model_dtype="float32")
            .training(num_branches=4, num_tasks_per_iteration=3, lr=1e-2, **training)
            .env_runners(num_env_runners=1)
            .multi_agent(**multi_agent_kwargs("per_role", AGENTS))
            .debugging(seed=0))


def test_with_pools_staleness_stays_within_the_bound_and_on_policy_weights_are_one():
    """Two pools, each on its own schedule (``pool_schedule.py``): an update may span
    iterations, so an iteration reports the updates that finished in it (NaN otherwise)."""
    pools = {f"{agent}_pool": {"modules": [agent], "num_learners": 1, "num_cpus_per_learner": 0.5}
             for agent in AGENTS}
    algo = tiny_config(async_rollout=True).resource_pools(pools=pools).build_algo()
    try:
        results = [algo.train() for _ in range(6)]
        # Every pool's latest update reached the runner: the runner's engine serves the
        # version the group published last.
        published = algo.learner_group.weights_seq_no
        served = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.weights_version, local_env_runner=False)
    finally:
        algo.stop()
    for agent in AGENTS:
        lags = [r["at_grpo"]["staleness_max"][agent] for r in results]
        assert lags[0] == 0  # the first sample trains with the weights it was sampled with
        started = [lag for lag in lags if not math.isnan(lag)]
        assert max(started) <= 1 and len(started) >= 3, lags
        assert 1 in started  # later samples were drawn during an update, with the weights before
        # An iteration in which only the other pool finished an update has no row for this
        # module under "learners" (which pools finish in an iteration depends on timing).
        weights = [r["learners"][agent]["importance_weight_mean"] for r in results
                   if not math.isnan(r.get("learners", {}).get(agent, {}).get(
                       "importance_weight_mean", math.nan))]
        # The first update trained on-policy rows only: weight exactly 1; every later one
        # trained rows sampled before the previous publication: truncated IS weights.
        assert weights[0] == 1.0, weights
        assert len(weights) >= 2 and all(math.isfinite(w) and w != 1.0 for w in weights[1:])
    assert published >= 2 and served == [published]


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


def test_with_pools_a_checkpoint_taken_while_the_pools_update_holds_their_finished_update(
        tmp_path):
    """Saving waits for the pools' background updates (a state is never read mid-update): the
    checkpoint holds the weights those updates end with, restores, and trains on."""
    import torch

    from pettingllms_rllib.algorithms import ATGRPO

    pools = {f"{agent}_pool": {"modules": [agent], "num_learners": 0}
             for agent in AGENTS}
    algo = tiny_config(async_rollout=True).resource_pools(pools=pools).build_algo()
    try:
        algo.train()  # started both pools' first update; collected next iteration
        group = algo.learner_group
        assert all(group.is_updating(name) for name in group.pools)
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        assert all(group._in_flight[name].done() for name in group.pools)
        after_update = {name: {mid: {k: v.clone() for k, v in learner.module[mid].get_state()
                                     .items()} for mid in learner.module.keys()}
                        for name, pool in group.pools.items() for learner in [pool._learner]}
    finally:
        algo.stop()
    restored = ATGRPO.from_checkpoint(path)
    try:
        for name, modules in after_update.items():
            learner = restored.learner_group.pools[name]._learner
            for mid, weights in modules.items():
                state = learner.module[mid].get_state()
                assert all(torch.equal(state[k], v) for k, v in weights.items()), mid
        result = restored.train()
        assert all(r <= 1 for r in result["at_grpo"]["staleness_max"].values()
                   if not math.isnan(r))
    finally:
        restored.stop()
