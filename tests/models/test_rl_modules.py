"""The LLM RLModules: full fine-tune and shared-base LoRA, with optional activation checkpointing."""

import gymnasium
import pytest
import torch
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from pettingllms_rllib.models.rl_modules import (
    TOKEN_LOGP,
    CausalLMRLModule,
    LoRAAdapterRLModule,
    SharedBaseLoRAMultiRLModule,
)

TINY = {"name_or_path": "tiny-random", "tiny_config": {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1}}
SPACE = gymnasium.spaces.Text(8)


def _batch():
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 10, 11, 12, 0]])
    return {"input_ids": ids, "attention_mask": (ids > 0).long(),
            "response_mask": torch.tensor([[0, 0, 0, 1, 1], [0, 1, 1, 1, 0.]])}


def _module(checkpointing, inference_only=False):
    return RLModuleSpec(module_class=CausalLMRLModule, observation_space=SPACE,
                        action_space=SPACE, inference_only=inference_only,
                        model_config={"model": TINY, "gradient_checkpointing": checkpointing}
                        ).build()


def test_gradient_checkpointing_gives_the_same_gradients_on_learner_copies_only():
    plain, checkpointed = _module(False), _module(True)
    assert checkpointed.causal_lm.is_gradient_checkpointing
    assert not _module(True, inference_only=True).causal_lm.is_gradient_checkpointing
    grads = []
    for module in (plain, checkpointed):
        module.causal_lm.train()
        module.forward_train(_batch())[TOKEN_LOGP].sum().backward()
        grads.append({n: p.grad.clone() for n, p in module.causal_lm.named_parameters()
                      if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_shared_base_lora_gives_each_module_only_its_own_adapter(checkpointing):
    specs = {mid: RLModuleSpec(module_class=LoRAAdapterRLModule, observation_space=SPACE,
                               action_space=SPACE) for mid in ("tool", "planner")}
    multi = MultiRLModuleSpec(
        multi_rl_module_class=SharedBaseLoRAMultiRLModule, rl_module_specs=specs,
        model_config={"model": TINY, "lora": {"r": 2, "lora_alpha": 4},
                      "gradient_checkpointing": checkpointing}).build()
    tool, planner = multi["tool"], multi["planner"]
    assert tool.causal_lm is planner.causal_lm  # one base model
    tool_params = {id(p) for p in tool.trainable_parameters()}
    assert tool_params and not tool_params & {id(p) for p in planner.trainable_parameters()}
    for param in planner.trainable_parameters():  # make the adapter non-trivial
        torch.nn.init.normal_(param, std=0.1)
    loss = (multi.forward_train({"tool": _batch(), "planner": _batch()})
            ["planner"][TOKEN_LOGP].sum())
    loss.backward()
    assert all(p.grad is not None for p in planner.trainable_parameters())
    assert all(p.grad is None for p in tool.trainable_parameters())
    assert set(tool.get_state()) == set(planner.get_state())


def test_autocast_computes_in_bf16_while_weights_and_outputs_stay_fp32():
    def build(autocast):
        return RLModuleSpec(module_class=CausalLMRLModule, observation_space=SPACE,
                            action_space=SPACE,
                            model_config={"model": TINY, "autocast_dtype": autocast}).build()

    plain, autocast = build(None), build("bfloat16")
    out = autocast.forward_train(_batch())[TOKEN_LOGP]
    reference = plain.forward_train(_batch())[TOKEN_LOGP]
    assert out.dtype == torch.float32
    assert not torch.equal(out, reference)  # really computed in bf16 ...
    torch.testing.assert_close(out, reference, atol=0.1, rtol=0)  # ... of the same model
    out.sum().backward()
    params = list(autocast.causal_lm.parameters())
    assert all(p.dtype == torch.float32 for p in params)
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in params)


def test_a_lora_module_recovers_its_starting_policy_and_full_fine_tuning_keeps_none():
    specs = {mid: RLModuleSpec(module_class=LoRAAdapterRLModule, observation_space=SPACE,
                               action_space=SPACE) for mid in ("tool", "planner")}
    multi = MultiRLModuleSpec(
        multi_rl_module_class=SharedBaseLoRAMultiRLModule, rl_module_specs=specs,
        model_config={"model": TINY, "lora": {"r": 2, "lora_alpha": 4}}).build()
    planner = multi["planner"]
    before = planner.forward_train(_batch())[TOKEN_LOGP].detach()
    for param in planner.trainable_parameters():  # the adapter moves away from its start
        torch.nn.init.normal_(param, std=0.5)
    moved = planner.forward_train(_batch())[TOKEN_LOGP].detach()
    start = planner.starting_logprobs(_batch())
    mask = _batch()["response_mask"].bool()
    assert not torch.allclose(moved[mask], before[mask])
    torch.testing.assert_close(start[mask], before[mask])
    assert not start.requires_grad
    # the adapter is active again afterwards
    torch.testing.assert_close(planner.forward_train(_batch())[TOKEN_LOGP].detach(), moved)
    assert _module(False).starting_logprobs(_batch()) is None


def test_detached_logprobs_are_forward_trains_without_gradient_or_entropy():
    """The learner's ratio denominator and KL reference: the same numbers as the training
    forward, with no graph and without the entropy's passes over the logits."""
    specs = {mid: RLModuleSpec(module_class=LoRAAdapterRLModule, observation_space=SPACE,
                               action_space=SPACE) for mid in ("tool", "planner")}
    multi = MultiRLModuleSpec(
        multi_rl_module_class=SharedBaseLoRAMultiRLModule, rl_module_specs=specs,
        model_config={"model": TINY, "lora": {"r": 2, "lora_alpha": 4}}).build()
    for param in multi["planner"].trainable_parameters():
        torch.nn.init.normal_(param, std=0.5)
    trained = multi["planner"].forward_train(_batch())[TOKEN_LOGP]
    multi["tool"].forward_train(_batch())  # another adapter active last
    detached = multi["planner"].detached_logprobs(_batch())  # activates its own adapter
    assert trained.requires_grad and not detached.requires_grad
    torch.testing.assert_close(detached, trained.detach(), rtol=0, atol=0)
