"""Data-parallel learners (num_learners=2, gloo on CPU): every learner starts from and keeps the
same trainable weights, training moves them, and a module missing from one learner's shard does
not hang the update (one explicit gradient all-reduce instead of one DDP wrapper per module)."""

import pytest
import torch

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=3)


def learner_states(algo) -> list[dict]:
    results = algo.learner_group.foreach_learner(lambda learner: {
        mid: {k: v.clone() for k, v in learner.module[mid].get_state().items()}
        for mid in learner.module.keys()})
    return [result.get() for result in sorted(results, key=lambda r: r.actor_id)]


@pytest.mark.parametrize("lora", [True, False], ids=["lora_adapter_per_role", "model_per_role"])
def test_two_learners_stay_identical_and_train(lora):
    config = (ATGRPOConfig()
              .environment("toy_score_v0", env_config={"max_turns": 1})
              .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
                   lora={"r": 4, "lora_alpha": 8} if lora else None)
              .training(num_branches=4, num_tasks_per_iteration=3, lr=1e-2)
              .env_runners(num_env_runners=0)
              .learners(num_learners=2, num_cpus_per_learner=1)
              .multi_agent(**multi_agent_kwargs("per_role", AGENTS))
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        first, second = learner_states(algo)
        for mid in first:  # rank 0's trainable weights were broadcast at build
            assert all(torch.equal(first[mid][k], second[mid][k]) for k in first[mid])
        initial = first
        for _ in range(2):
            algo.train()
        first, second = learner_states(algo)
        for mid in first:
            for key in first[mid]:
                assert torch.equal(first[mid][key], second[mid][key]), (mid, key)
            changed = [k for k in first[mid] if not torch.equal(first[mid][k], initial[mid][k])]
            assert changed, f"{mid}: no weight changed"
    finally:
        algo.stop()
