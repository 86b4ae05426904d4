"""Shared-prefix training: one packed row per prompt gives the per-row loss and gradients.

Each prompt group's K responses are packed behind one copy of the prompt
(``core.batching.pack_records``); the learner's loss and the gradient of every trainable
parameter must equal the one-row-per-sample computation within 1e-5 (fp32), for full
fine-tuning and LoRA, with padding, unequal response lengths and gradient checkpointing.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from toy_ray import TINY as TINY_LLAMA

from pettingllms_rllib.core.batching import pack_records, pad_records
from pettingllms_rllib.core.loss import clipped_token_loss
from pettingllms_rllib.core.records import GroupKey, SampleRecord
from pettingllms_rllib.models.logprobs import shared_prefix_attention_mask
from pettingllms_rllib.models.rl_modules import (
    TOKEN_ENTROPY,
    TOKEN_LOGP,
    CausalLMRLModule,
    LoRAAdapterRLModule,
    SharedBaseLoRAMultiRLModule,
)

TINY = {"name_or_path": "tiny-random", "tiny_config": TINY_LLAMA}
SPACE = gymnasium.spaces.Text(8)
#: (prompt length, response lengths) per group: unequal responses, one group smaller than K.
GROUPS = [(6, [3, 7, 1, 4]), (11, [2, 2, 9, 5]), (4, [5, 8])]


def make_records(seed: int = 0) -> list[SampleRecord]:
    rng = np.random.default_rng(seed)
    records = []
    for g, (prompt_len, response_lens) in enumerate(GROUPS):
        prompt = tuple(int(t) for t in rng.integers(3, 5000, prompt_len))
        for k, length in enumerate(response_lens):
            records.append(SampleRecord(
                group_key=GroupKey(f"task{g}", "planner", 0), module_id="m", branch=k,
                prompt_text=f"prompt {g}", prompt_ids=prompt,
                response_ids=tuple(int(t) for t in rng.integers(3, 5000, length)),
                # far enough from the policy that some ratios are clipped
                behaviour_logprobs=tuple(float(x) for x in rng.uniform(-12.0, -6.0, length)),
                response_text="", reward=0.0, reward_team=0.0, reward_local=0.0,
                success=False, parse_error=None, advantage=float(rng.normal())))
    return records


def tensors(batch: dict) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(value) for key, value in batch.items()}


def loss_and_grads(module, batch, params, entropy_coef: float = 0.0):
    for param in params:
        param.grad = None
    out = module.forward_train(batch)
    loss, stats = clipped_token_loss(out[TOKEN_LOGP], batch["old_logp"], batch["advantages"],
                                     batch["response_mask"], entropy=out[TOKEN_ENTROPY],
                                     entropy_coef=entropy_coef)
    loss.backward()
    return loss.detach(), stats, [param.grad.clone() for param in params]


def full_model(checkpointing: bool, entropy_gradient: bool = False):
    return RLModuleSpec(module_class=CausalLMRLModule, observation_space=SPACE,
                        action_space=SPACE, model_config={
                            "model": TINY, "gradient_checkpointing": checkpointing,
                            "entropy_gradient": entropy_gradient}).build()


def lora_module(checkpointing: bool, entropy_gradient: bool = False):
    # ATGRPOConfig gives the adapters and the multi-module the same model_config
    config = {"model": TINY, "gradient_checkpointing": checkpointing,
              "entropy_gradient": entropy_gradient,
              # random B matrices, so every adapter weight gets a non-zero gradient
              "lora": {"r": 2, "lora_alpha": 4, "init_lora_weights": False}}
    specs = {"m": RLModuleSpec(module_class=LoRAAdapterRLModule, observation_space=SPACE,
                               action_space=SPACE, model_config=config)}
    multi = MultiRLModuleSpec(multi_rl_module_class=SharedBaseLoRAMultiRLModule,
                              rl_module_specs=specs, model_config=config).build()
    return multi["m"]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "grad_checkpointing"])
@pytest.mark.parametrize("make_module", [full_model, lora_module], ids=["full", "lora"])
def test_packed_rows_give_the_per_row_loss_and_every_gradient(make_module, checkpointing,
                                                              attention):
    module = make_module(checkpointing)
    module.causal_lm.set_attn_implementation(attention)
    module.causal_lm.train()
    params = module.trainable_parameters()
    records = make_records()
    per_row = tensors(pad_records(records))
    packed = tensors(pack_records(records))
    assert packed["input_ids"].shape[0] == len(GROUPS)  # one row per prompt
    assert packed["input_ids"].numel() < per_row["input_ids"].numel()

    loss_a, stats_a, grads_a = loss_and_grads(module, per_row, params)
    loss_b, stats_b, grads_b = loss_and_grads(module, packed, params)
    torch.testing.assert_close(loss_b, loss_a, atol=1e-5, rtol=0)
    assert stats_a.num_tokens == stats_b.num_tokens
    assert stats_a.clip_fraction == pytest.approx(stats_b.clip_fraction)
    assert 0 < stats_a.clip_fraction < 1  # the clipped and the unclipped branch both ran
    assert all(grad.abs().sum() > 0 for grad in grads_a)
    for grad_a, grad_b in zip(grads_a, grads_b):
        torch.testing.assert_close(grad_b, grad_a, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("make_module", [full_model, lora_module], ids=["full", "lora"])
def test_with_an_entropy_bonus_packed_rows_give_the_per_row_loss_and_every_gradient(
        make_module):
    module = make_module(True, entropy_gradient=True)
    module.causal_lm.train()
    params = module.trainable_parameters()
    records = make_records(seed=5)
    per_row, packed = tensors(pad_records(records)), tensors(pack_records(records))
    plain, _, plain_grads = loss_and_grads(module, per_row, params)
    loss_a, _, grads_a = loss_and_grads(module, per_row, params, entropy_coef=0.5)
    loss_b, _, grads_b = loss_and_grads(module, packed, params, entropy_coef=0.5)
    torch.testing.assert_close(loss_b, loss_a, atol=1e-5, rtol=0)
    assert loss_a < plain  # the bonus lowers the loss by 0.5 x the mean entropy
    # the bonus's gradient reaches every trainable parameter
    assert all(not torch.allclose(a, p) for a, p in zip(grads_a, plain_grads))
    for grad_a, grad_b in zip(grads_a, grads_b):
        torch.testing.assert_close(grad_b, grad_a, atol=1e-5, rtol=1e-5)


def test_packed_log_probs_equal_per_row_log_probs_token_by_token():
    module = full_model(False)
    records = make_records(seed=3)
    per_row, packed = tensors(pad_records(records)), tensors(pack_records(records))
    with torch.no_grad():
        a = module.forward_train(per_row)[TOKEN_LOGP]
        b = module.forward_train(packed)[TOKEN_LOGP]
    # both layouts list response tokens in record order
    torch.testing.assert_close(b[packed["response_mask"].bool()],
                               a[per_row["response_mask"].bool()], atol=1e-5, rtol=0)
    torch.testing.assert_close(packed["old_logp"][packed["response_mask"].bool()],
                               per_row["old_logp"][per_row["response_mask"].bool()])


def test_packed_layout_holds_each_prompt_once_with_its_responses_after_it():
    records = make_records()
    packed = pack_records(records)
    prompt_len, response_lens = GROUPS[0]
    row_segments = packed["segment_ids"][0]
    assert (row_segments[:prompt_len] == 0).all()
    expected = np.concatenate([np.full(n, k + 1) for k, n in enumerate(response_lens)])
    np.testing.assert_array_equal(row_segments[prompt_len:prompt_len + len(expected)], expected)
    assert (row_segments[prompt_len + len(expected):] == -1).all()
    # every response restarts at the position right after the prompt
    starts = np.flatnonzero(np.diff(row_segments[:prompt_len + len(expected)]) > 0) + 1
    assert (packed["position_ids"][0][starts] == prompt_len).all()
    np.testing.assert_array_equal(packed["num_samples"], [len(r) for _, r in GROUPS])
    assert packed["advantages"][0][prompt_len] == pytest.approx(records[0].advantage)


def test_a_response_sees_the_prompt_and_itself_never_another_response():
    segments = torch.tensor([[0, 0, 1, 1, 2, 2, -1]])
    allowed = shared_prefix_attention_mask(segments, boolean=True)[0, 0]
    assert allowed[3].tolist() == [True, True, True, True, False, False, False]
    assert allowed[5].tolist() == [True, True, False, False, True, True, False]
    assert allowed[1].tolist() == [True, True, False, False, False, False, False]
    assert allowed[6].tolist() == [False] * 6 + [True]  # padding sees only itself: no NaN row
    additive = shared_prefix_attention_mask(segments, boolean=False)[0, 0]
    assert (additive[allowed] == 0).all() and (additive[~allowed] < -1e30).all()
