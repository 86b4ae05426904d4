"""The entropy bonus (``training(entropy_coef=...)``), end to end in RLlib.

Same seed, env and learning rate with and without the bonus. The tiny model is initialised
with large weights, so it starts peaked, far below the uniform distribution's entropy (a
default random model starts at ln(vocab), where no bonus can raise it).
"""

import pytest

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = pytest.mark.integration

PEAKED = {**TINY, "initializer_range": 0.5}


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=2)


def _train(mapping: str, *, lora: bool, entropy_coef: float, iterations: int):
    """The last iteration's ``learners`` results, and whether each learner module keeps the
    entropy's gradient."""
    algo = (ATGRPOConfig()
            .environment("toy_score_v0", env_config={"max_turns": 1})
            .llm(model="tiny-random", tiny_model_config=PEAKED, max_new_tokens=6,
                 lora={"r": 4, "lora_alpha": 8} if lora else None)
            .training(num_branches=4, num_tasks_per_iteration=4, lr=3e-2,
                      entropy_coef=entropy_coef)
            .multi_agent(**multi_agent_kwargs(mapping, AGENTS))
            .debugging(seed=0)).build_algo()
    try:
        for _ in range(iterations):
            result = algo.train()
        modules = algo.learner_group._learner.module
        return result["learners"], {mid: modules[mid].entropy_gradient for mid in modules.keys()}
    finally:
        algo.stop()


def test_with_full_fine_tuning_the_bonus_keeps_the_trained_policy_spread():
    free, free_flags = _train("shared", lora=False, entropy_coef=0.0, iterations=4)
    held, held_flags = _train("shared", lora=False, entropy_coef=1.0, iterations=4)
    assert free_flags == {"shared": False} and held_flags == {"shared": True}
    # measured: 6.4 without the bonus (it started near 6.7), 10.2 with it
    assert held["shared"]["entropy"] > free["shared"]["entropy"] + 1.0


def test_each_lora_adapters_loss_carries_the_bonus():
    """On this tiny model LoRA on the attention barely moves the entropy in a few iterations
    either way, so what is checked is the plumbing: each adapter keeps the entropy's gradient
    (its effect on the parameters is tests/models/test_shared_prefix.py's) and its logged loss
    is lowered by about the entropy (coef 1, entropy about 7 nats per token here)."""
    free, free_flags = _train("per_role", lora=True, entropy_coef=0.0, iterations=1)
    held, held_flags = _train("per_role", lora=True, entropy_coef=1.0, iterations=1)
    assert set(free_flags) == set(AGENTS) and not any(free_flags.values())
    assert set(held_flags) == set(AGENTS) and all(held_flags.values())
    for mid in AGENTS:
        assert held[mid]["policy_loss"] < free[mid]["policy_loss"] - 3.0, (mid, free, held)
