"""Resource pools on the CPU with a tiny random llama: two pools, one per role, each with its
own learner process. Each pool's learner holds only its modules, training changes every
trainable parameter of each, the runners hold every pool's latest weights, a checkpoint
restores and trains on, and one pool holding the shared model is today's algorithm exactly."""

import pytest
import torch

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPO, ATGRPOConfig  # noqa: E402
from pettingllms_rllib.algorithms.resource_pools import PooledLearnerGroup  # noqa: E402
from pettingllms_rllib.evaluation.evaluate import checkpoint_policies  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

TWO_POOLS = {"writer_pool": {"modules": ["writer"], "num_learners": 1, "num_cpus_per_learner": 0.5},
             "reviewer_pool": {"modules": ["reviewer"], "num_learners": 1,
                               "num_cpus_per_learner": 0.5}}


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=4)


def tiny_config(mapping: str = "per_role", pools=None, runners: int = 0) -> ATGRPOConfig:
    config = (ATGRPOConfig()
              .environment("toy_score_v0", env_config={"max_turns": 1})
              .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6)
              .training(num_branches=4, num_tasks_per_iteration=3, lr=1e-2)
              .env_runners(num_env_runners=runners)
              .multi_agent(**multi_agent_kwargs(mapping, AGENTS))
              .debugging(seed=0))
    return config.resource_pools(pools=pools) if pools is not None else config


def pool_learner_states(algo) -> dict[str, list[dict]]:
    """Pool name -> each of its learners' module states (module id -> tensors)."""
    return {name: [result.get() for result in algo.learner_group.foreach_learner_of_pool(
        name, lambda learner: {mid: {k: v.clone() for k, v in learner.module[mid].get_state()
                                     .items()} for mid in learner.module.keys()})]
            for name in algo.learner_group.pools}


def test_each_pool_trains_only_its_own_module_and_the_runners_get_both():
    algo = tiny_config(pools=TWO_POOLS, runners=1).build_algo()
    try:
        assert isinstance(algo.learner_group, PooledLearnerGroup)
        before = pool_learner_states(algo)
        assert {name: [sorted(state) for state in states] for name, states in before.items()} \
            == {"writer_pool": [["writer"]], "reviewer_pool": [["reviewer"]]}
        counts = algo.learner_group.foreach_learner(lambda learner: {
            mid: sum(p.numel() for p in learner.module[mid].parameters())
            for mid in learner.module.keys()})
        sizes = [result.get() for result in counts]
        assert len(sizes) == 2 and all(len(size) == 1 for size in sizes)
        assert {mid for size in sizes for mid in size} == set(AGENTS)
        for _ in range(2):
            result = algo.train()
        after = pool_learner_states(algo)
        for name, (state,) in after.items():
            (mid,) = state
            unchanged = [k for k in state[mid] if torch.equal(state[mid][k], before[name][0][mid][k])]
            assert not unchanged, f"{name}/{mid}: parameters did not change: {unchanged[:5]}"
        runner = algo.env_runner_group.foreach_env_runner(lambda r: r.module.get_state(),
                                                          local_env_runner=False)[0]
        for name, (state,) in after.items():
            for mid, weights in state.items():
                for key, value in weights.items():
                    copy = torch.as_tensor(runner[mid][key])  # auto: bf16 runner, fp32 learner
                    assert torch.equal(copy, value.to(copy.dtype)), (mid, key)
        assert set(result["at_grpo"]["pool_update_s"]) == set(TWO_POOLS)
        assert result["env_runners"]["weights_version_min"] == 1
        assert set(result["learners"]) >= set(AGENTS)
    finally:
        algo.stop()


def test_a_pooled_checkpoint_restores_and_trains_on(tmp_path):
    algo = tiny_config(pools=TWO_POOLS).build_algo()
    algo.train()
    algo.train()
    saved = pool_learner_states(algo)
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    algo.stop()
    assert sorted(p.name for p in (tmp_path / "ckpt" / "learner_group" / "pools").iterdir()) \
        == sorted(TWO_POOLS)

    restored = ATGRPO.from_checkpoint(path)
    try:
        assert restored.iteration == 2
        state = pool_learner_states(restored)
        for name in saved:
            for mid, weights in saved[name][0].items():
                assert all(torch.equal(state[name][0][mid][k], v) for k, v in weights.items())
                runner = restored.env_runner_group.local_env_runner.module[mid].get_state()
                assert all(torch.equal(runner[k], v.to(runner[k].dtype))
                           for k, v in weights.items()), mid
        result = restored.train()
        assert result["env_runners"]["weights_version_min"] == 2  # the restored weights
        assert restored.learner_group.weights_seq_no == 3
    finally:
        restored.stop()
    policies = checkpoint_policies(path)  # evaluation reads the pooled layout
    assert sorted(policies.modules) == sorted(AGENTS)


def test_one_pool_holding_the_shared_model_is_todays_algorithm():
    def run(config):
        algo = config.build_algo()
        try:
            results = [algo.train() for _ in range(2)]
            learner = (algo.learner_group.pools["all"]._learner
                       if isinstance(algo.learner_group, PooledLearnerGroup)
                       else algo.learner_group._learner)
            return results, learner.module["shared"].get_state()
        finally:
            algo.stop()

    plain_results, plain_weights = run(tiny_config("shared"))
    pooled_results, pooled_weights = run(tiny_config("shared", pools={"all": {
        "modules": ["shared"]}}))
    for plain, pooled in zip(plain_results, pooled_results):
        assert pooled["learners"]["shared"]["policy_loss"] == plain["learners"]["shared"][
            "policy_loss"]
        assert pooled["env_runners"]["agent"] == plain["env_runners"]["agent"]
    assert all(torch.equal(pooled_weights[k], plain_weights[k]) for k in plain_weights)
