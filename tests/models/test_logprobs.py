"""response_logprobs equals the full-logits definition, values and gradients, also under LoRA."""

from __future__ import annotations

import copy

import pytest
import torch

from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm
from pettingllms_rllib.models.logprobs import reference_response_logprobs, response_logprobs

TINY = ModelSpec("tiny-random", tiny_config={"hidden_size": 32, "intermediate_size": 64})


@pytest.fixture(scope="module")
def tiny_model():
    return load_causal_lm(TINY)


def make_batch(lengths, padding="right", seed=0):
    """Rows of (prompt_len, response_len); padding 'right', 'left' or 'both' (alternating)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(p + r for p, r in lengths) + 2
    input_ids = torch.full((len(lengths), width), 2, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    for row, (prompt_len, response_len) in enumerate(lengths):
        total = prompt_len + response_len
        left = padding == "left" or (padding == "both" and row % 2 == 1)
        start = width - total if left else 0
        input_ids[row, start:start + total] = torch.randint(3, 5000, (total,), generator=generator)
        attention_mask[row, start:start + total] = 1
        response_mask[row, start + prompt_len:start + total] = 1
    return input_ids, attention_mask, response_mask


LENGTHS = [(5, 7), (9, 3), (3, 10), (12, 1)]


@pytest.mark.parametrize("padding", ["right", "left", "both"])
@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk_size", [1024, 4])
def test_matches_full_logits_reference(tiny_model, padding, temperature, chunk_size):
    batch = make_batch(LENGTHS, padding)
    with torch.no_grad():
        fast = response_logprobs(tiny_model, *batch, temperature=temperature,
                                 chunk_size=chunk_size)
        slow = reference_response_logprobs(tiny_model, *batch, temperature=temperature)
    assert fast.shape == batch[0].shape and fast.dtype == torch.float32
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
    assert torch.all(fast[batch[2] == 0] == 0)
    assert torch.all(fast[batch[2] == 1] < 0)


def test_lm_head_only_sees_response_positions_in_chunks(tiny_model):
    batch = make_batch(LENGTHS)
    seen = []
    handle = tiny_model.get_output_embeddings().register_forward_hook(
        lambda module, inputs, output: seen.append(inputs[0].shape[0]))
    try:
        with torch.no_grad():
            response_logprobs(tiny_model, *batch, chunk_size=6)
    finally:
        handle.remove()
    assert sum(seen) == int(batch[2].sum())
    assert max(seen) <= 6


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gradients_match_full_logits_reference(temperature):
    model = load_causal_lm(TINY)
    batch = make_batch(LENGTHS, "both", seed=1)
    weights = torch.randn(batch[0].shape, generator=torch.Generator().manual_seed(2))

    def grads(fn, **kwargs):
        model.zero_grad()
        (fn(model, *batch, temperature=temperature, **kwargs) * weights).sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    fast = grads(response_logprobs, chunk_size=5)
    slow = grads(reference_response_logprobs)
    assert fast.keys() == slow.keys()
    for name in fast:
        torch.testing.assert_close(fast[name], slow[name], atol=1e-5, rtol=1e-4, msg=name)
    assert any(g.abs().sum() > 0 for g in fast.values())


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_entropy_and_its_gradient_match_full_logits_when_a_bonus_asks_for_it(temperature):
    from pettingllms_rllib.models.logprobs import position_ids_from_mask

    model = load_causal_lm(TINY)
    batch = make_batch(LENGTHS, "both", seed=3)
    input_ids, attention_mask, response_mask = batch
    weights = torch.randn(input_ids.shape, generator=torch.Generator().manual_seed(4))

    def full_logits_entropy():
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=position_ids_from_mask(attention_mask)).logits.float()
        log_probs = torch.log_softmax(logits[:, :-1] / temperature, -1)
        entropy = -(log_probs.exp() * log_probs).sum(-1) * response_mask[:, 1:]
        return torch.nn.functional.pad(entropy, (1, 0))

    def entropy_and_grads(compute):
        model.zero_grad()
        entropy = compute()
        (entropy * weights).sum().backward()
        return entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    def chunked():
        out = {}
        response_logprobs(model, *batch, temperature=temperature, chunk_size=5,
                          entropy_out=out, entropy_grad=True)
        return out["entropy"]

    fast, fast_grads = entropy_and_grads(chunked)
    slow, slow_grads = entropy_and_grads(full_logits_entropy)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-4)
    for name in fast_grads:
        torch.testing.assert_close(fast_grads[name], slow_grads[name], atol=1e-5, rtol=1e-4,
                                   msg=name)
    assert any(g.abs().sum() > 0 for g in fast_grads.values())
    detached = {}
    response_logprobs(model, *batch, temperature=temperature, entropy_out=detached)
    assert not detached["entropy"].requires_grad  # the default: a diagnostic only


def test_lora_adapter_is_applied_and_trained():
    peft = pytest.importorskip("peft")
    base = load_causal_lm(TINY)
    model = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    batch = make_batch(LENGTHS, "both")
    with torch.no_grad():
        before = response_logprobs(model, *batch)
        torch.testing.assert_close(before, response_logprobs(base, *batch))  # B = 0 at init
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
        after = response_logprobs(model, *batch)
        assert (after - before).abs().max() > 1e-3
        torch.testing.assert_close(after, reference_response_logprobs(model, *batch), atol=1e-5,
                                   rtol=0)
        with model.disable_adapter():
            torch.testing.assert_close(response_logprobs(model, *batch), before)

    response_logprobs(model, *batch, chunk_size=4).sum().backward()
    lora_grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert lora_grads and all(g is not None and g.abs().sum() > 0 for g in lora_grads)
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)


def test_rejects_inconsistent_masks(tiny_model):
    input_ids, attention_mask, response_mask = make_batch([(4, 4)])
    bad = response_mask.clone()
    bad[0, 0] = 1
    with pytest.raises(ValueError, match="position 0"):
        response_logprobs(tiny_model, input_ids, attention_mask, bad)
    bad = response_mask.clone()
    bad[0, -1] = 1  # a padding position
    with pytest.raises(ValueError, match="attention_mask"):
        response_logprobs(tiny_model, input_ids, attention_mask, bad)
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(tiny_model, input_ids, attention_mask, response_mask, temperature=0)


def test_no_response_tokens_gives_zeros(tiny_model):
    input_ids, attention_mask, _ = make_batch([(4, 4)])
    out = response_logprobs(tiny_model, input_ids, attention_mask, torch.zeros_like(input_ids))
    assert torch.equal(out, torch.zeros(input_ids.shape))
