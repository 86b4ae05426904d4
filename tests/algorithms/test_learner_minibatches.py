"""The learner trains each module on its own rows exactly num_epochs times.

RLlib's cyclic iterator would re-train the module with fewer rows until the larger module has
finished its epochs; here a module with 4 rows next to one with 28 (minibatch 8) sees each row
exactly ``num_epochs`` times, and the gradient steps per module are logged.
"""

from collections import Counter

import gymnasium
import numpy as np
import pytest
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from toy_env import ToyScoreEnv
from toy_ray import AGENTS, TINY

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.learner import (NUM_GRADIENT_STEPS, NUM_SAMPLES_TRAINED,
                                                  ATGRPOTorchLearner)
from pettingllms_rllib.envs import register_text_env
from pettingllms_rllib.experiment import multi_agent_kwargs

WIDTH = 6


@pytest.fixture(scope="module")
def learner():
    register_text_env("toy_score_v0", ToyScoreEnv)
    config = (ATGRPOConfig().environment("toy_score_v0", env_config={"max_turns": 1})
              .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
                   lora={"r": 2, "lora_alpha": 4})
              .multi_agent(**multi_agent_kwargs("per_role", AGENTS)))
    space = gymnasium.spaces.Text(8)
    return config.build_learner(env=None, spaces={agent: (space, space) for agent in AGENTS})


def per_row_batch(num_rows: int, first_id: int) -> SampleBatch:
    """Rows whose first token id names the row."""
    ids = np.full((num_rows, WIDTH), 5)
    ids[:, 0] = np.arange(num_rows) + first_id
    response = np.tile(np.array([0, 0, 0, 1, 1, 1], dtype=np.float32), (num_rows, 1))
    return SampleBatch({"input_ids": ids, "attention_mask": np.ones_like(ids),
                        "response_mask": response,
                        "old_logp": np.full((num_rows, WIDTH), -5.0, dtype=np.float32),
                        "advantages": np.ones(num_rows, dtype=np.float32)})


def packed_batch(group_sizes, first_id: int) -> SampleBatch:
    """Shared-prefix rows: a 3-token prompt (first token names the row), then one 2-token
    response per sample."""
    rows, width = len(group_sizes), 3 + 2 * max(group_sizes)
    ids, segments = np.full((rows, width), 5), np.full((rows, width), -1)
    positions, response = np.zeros((rows, width), dtype=np.int64), np.zeros((rows, width),
                                                                            dtype=np.float32)
    for row, size in enumerate(group_sizes):
        ids[row, 0] = first_id + row
        segments[row, :3], positions[row, :3] = 0, np.arange(3)
        for k in range(size):
            span = slice(3 + 2 * k, 5 + 2 * k)
            segments[row, span], positions[row, span], response[row, span] = k + 1, [3, 4], 1
    return SampleBatch({"input_ids": ids, "position_ids": positions, "segment_ids": segments,
                        "response_mask": response,
                        "old_logp": np.full((rows, width), -5.0, dtype=np.float32),
                        "advantages": response.copy(),
                        "num_samples": np.asarray(group_sizes, dtype=np.int64)})


def rows_seen_by_loss(learner, batch, **update_kwargs):
    seen: dict[str, list[int]] = {}
    original = ATGRPOTorchLearner.compute_loss_for_module

    def spy(self, *, module_id, config, batch, fwd_out):
        seen.setdefault(module_id, []).extend(batch["input_ids"][:, 0].tolist())
        return original(self, module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)

    learner.compute_loss_for_module = spy.__get__(learner)
    try:
        results = learner.update(batch=batch, **update_kwargs)
    finally:
        del learner.compute_loss_for_module
    return {module: Counter(rows) for module, rows in seen.items()}, results


@pytest.mark.parametrize("num_epochs", [1, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_row_is_seen_exactly_num_epochs_times_whatever_the_other_modules_size(
        learner, num_epochs, shuffle):
    batch = MultiAgentBatch({"writer": per_row_batch(28, 100),
                             "reviewer": per_row_batch(4, 1000)}, env_steps=32)
    seen, results = rows_seen_by_loss(learner, batch, num_epochs=num_epochs, minibatch_size=8,
                                      shuffle_batch_per_epoch=shuffle)
    assert seen["writer"] == {100 + r: num_epochs for r in range(28)}
    assert seen["reviewer"] == {1000 + r: num_epochs for r in range(4)}
    assert results["writer"][NUM_GRADIENT_STEPS].peek() == 4 * num_epochs
    assert results["reviewer"][NUM_GRADIENT_STEPS].peek() == num_epochs
    assert results["writer"][NUM_SAMPLES_TRAINED].peek() == 28 * num_epochs
    assert results["reviewer"][NUM_SAMPLES_TRAINED].peek() == 4 * num_epochs


def test_shared_prefix_minibatches_are_whole_groups_counted_in_samples(learner):
    batch = MultiAgentBatch({"writer": packed_batch([4, 4, 4, 4, 3, 4, 4], 100),
                             "reviewer": packed_batch([4], 1000)}, env_steps=31)
    seen, results = rows_seen_by_loss(learner, batch, num_epochs=1, minibatch_size=8)
    assert seen["writer"] == {100 + r: 1 for r in range(7)}
    assert seen["reviewer"] == {1000: 1}
    # groups of 4+4 | 4+4 | 3+4 | 4: no minibatch above 8 samples, no group split
    assert results["writer"][NUM_GRADIENT_STEPS].peek() == 4
    assert results["writer"][NUM_SAMPLES_TRAINED].peek() == 27


def test_a_module_absent_from_the_last_minibatch_keeps_its_real_gradient_norm(learner):
    # reviewer: 4 rows, one minibatch; writer: 28 rows, four; the last steps hold only writer
    batch = MultiAgentBatch({"writer": per_row_batch(28, 100),
                             "reviewer": per_row_batch(4, 1000)}, env_steps=32)
    import torch

    steps: dict[str, list[float | None]] = {"writer": [], "reviewer": []}
    original = ATGRPOTorchLearner.postprocess_gradients_for_module

    def spy(self, *, module_id, config=None, module_gradients_dict):
        # per step and module: the pre-clip norm of the gradients it got, None when absent
        grads = [g.detach().double() for g in module_gradients_dict.values()]
        steps[module_id].append(float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g) for g in grads]))) if grads else None)
        return original(self, module_id=module_id, config=config,
                        module_gradients_dict=module_gradients_dict)

    learner.postprocess_gradients_for_module = spy.__get__(learner)
    try:
        _, results = rows_seen_by_loss(learner, batch, num_epochs=1, minibatch_size=8,
                                       shuffle_batch_per_epoch=False)
    finally:
        del learner.postprocess_gradients_for_module
    # 28 writer rows in minibatches of 8: four steps; the reviewer's 4 rows ride the first
    assert [n is not None for n in steps["writer"]] == [True] * 4
    assert [n is not None for n in steps["reviewer"]] == [True, False, False, False]
    assert all(n > 0 for n in steps["writer"]) and steps["reviewer"][0] > 0
    # the logged norm is the one of the module's last step with gradients, not the 0 of an
    # empty set (nor another module's)
    norm = "gradients_default_optimizer_global_norm"
    assert results["reviewer"][norm].peek() == pytest.approx(steps["reviewer"][0], rel=1e-5)
    assert results["writer"][norm].peek() == pytest.approx(steps["writer"][-1], rel=1e-5)


@pytest.mark.parametrize("sizes", [(8, 8), (28, 4)])
def test_every_trainable_parameter_of_every_module_changes_in_an_update(learner, sizes):
    # Both modules share minibatches here; the kl_to_start forward with the adapters off
    # once left one of them without gradients (peft's set_adapter on leaving disable_adapter).
    import torch

    before = {m: [p.detach().clone() for p in learner.module[m].trainable_parameters()]
              for m in AGENTS}
    batch = MultiAgentBatch({"writer": per_row_batch(sizes[0], 100),
                             "reviewer": per_row_batch(sizes[1], 1000)}, env_steps=32)
    learner.update(batch=batch, num_epochs=1, minibatch_size=8)
    for module_id in AGENTS:
        after = learner.module[module_id].trainable_parameters()
        unchanged = [i for i, (old, new) in enumerate(zip(before[module_id], after))
                     if torch.equal(old, new)]
        assert after and not unchanged, f"{module_id}: parameters {unchanged} did not change"
