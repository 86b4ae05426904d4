"""``model_dtype: auto``: bf16 where the device computes it fast, read from the device (faked
CPU flags here), with everything that is trained kept fp32; a forced dtype is used as given."""

import gymnasium
import numpy as np
import pytest
import torch
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from toy_env import ToyScoreEnv
from toy_ray import AGENTS, TINY

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.learner import PROXIMAL_FROM_FORWARD, ATGRPOTorchLearner
from pettingllms_rllib.envs import register_text_env
from pettingllms_rllib.experiment import multi_agent_kwargs
from pettingllms_rllib.metric_keys import LOGP_MISMATCH_KL, LOGP_MISMATCH_MAX, LOGP_MISMATCH_MEAN
from pettingllms_rllib.models import precision
from pettingllms_rllib.models.precision import cpu_flags, learner_dtypes, resolve_model_dtype

AMX = frozenset({"fpu", "avx512f", "amx_tile", "amx_bf16", "avx512_bf16"})
AVX512_BF16 = frozenset({"avx512f", "avx512_bf16"})
PLAIN = frozenset({"fpu", "sse4_2", "avx2", "avx512f"})  # AVX-512 without BF16: emulated


@pytest.mark.parametrize("flags,expected", [(AMX, "bfloat16"), (AVX512_BF16, "bfloat16"),
                                            (PLAIN, "float32"), (frozenset(), "float32")])
def test_auto_on_a_cpu_follows_its_flags(flags, expected):
    choice = resolve_model_dtype("auto", "cpu", flags=flags)
    assert choice.dtype == expected and choice.requested == "auto"
    if expected == "float32":
        assert choice.reason.startswith("the CPU reports none of") and "slower" in choice.reason
    else:
        assert choice.reason.startswith("the CPU reports avx512_bf16" if "amx_bf16" not in flags
                                        else "the CPU reports amx_bf16")


@pytest.mark.parametrize("supported,expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_on_a_gpu_follows_its_bf16_support(supported, expected):
    assert resolve_model_dtype("auto", "cuda", cuda_bf16=supported).dtype == expected


@pytest.mark.parametrize("forced", ["float32", "bfloat16", "float16"])
def test_a_forced_dtype_is_used_as_given(forced):
    for flags in (AMX, PLAIN):
        choice = resolve_model_dtype(forced, "cpu", flags=flags)
        assert choice.dtype == forced and choice.reason == "chosen in the config"


def test_an_unknown_dtype_is_refused_listing_the_accepted_ones():
    with pytest.raises(ValueError, match=r"'bf16' is not accepted; accepted: \['auto', "):
        resolve_model_dtype("bf16", "cpu", flags=AMX)
    with pytest.raises(ValueError, match="model_dtype"):
        ATGRPOConfig().llm(model_dtype="bf16").validate()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                       "flags\t\t: fpu avx512f amx_bf16 amx_tile\n\nprocessor\t: 1\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx512f", "amx_bf16", "amx_tile"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_only_full_fine_tuning_under_auto_keeps_fp32_master_weights():
    bf16 = resolve_model_dtype("auto", "cpu", flags=AMX)
    assert learner_dtypes(bf16, trains_all_weights=True) == ("float32", "bfloat16")
    assert learner_dtypes(bf16, trains_all_weights=False) == ("bfloat16", None)
    forced = resolve_model_dtype("bfloat16", "cpu", flags=AMX)
    assert learner_dtypes(forced, trains_all_weights=True) == ("bfloat16", None)
    fp32 = resolve_model_dtype("auto", "cpu", flags=PLAIN)
    assert learner_dtypes(fp32, trains_all_weights=True) == ("float32", None)


# ------------------------------------------------------------------------ built modules
@pytest.fixture
def cpu_with(monkeypatch):
    def fake(flags):
        monkeypatch.setattr(precision, "_this_cpus_flags", lambda: flags)
    return fake


def _learner(lora: bool, model_dtype: str = "auto"):
    register_text_env("toy_score_v0", ToyScoreEnv)
    config = (ATGRPOConfig().environment("toy_score_v0", env_config={"max_turns": 1})
              .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
                   model_dtype=model_dtype, lora={"r": 2, "lora_alpha": 4} if lora else None)
              .training(minibatch_size=8)
              .multi_agent(**multi_agent_kwargs("per_role", AGENTS)))
    space = gymnasium.spaces.Text(8)
    return config, config.build_learner(env=None,
                                        spaces={agent: (space, space) for agent in AGENTS})


def _batch(rows: int = 4, width: int = 6, behaviour: float = -5.0) -> MultiAgentBatch:
    ids = np.full((rows, width), 5)
    ids[:, 0] = np.arange(rows) + 7
    mask = np.tile(np.array([0, 0, 0, 1, 1, 1], dtype=np.float32), (rows, 1))
    batch = SampleBatch({"input_ids": ids, "attention_mask": np.ones_like(ids),
                         "response_mask": mask,
                         "old_logp": np.full((rows, width), behaviour, dtype=np.float32),
                         "advantages": np.linspace(-1, 1, rows).astype(np.float32)})
    return MultiAgentBatch({agent: batch.copy() for agent in AGENTS}, env_steps=rows)


def _losses_see(learner):
    """The batches each module's loss received, by module."""
    seen: dict[str, list] = {}
    original = ATGRPOTorchLearner.compute_loss_for_module

    def spy(self, *, module_id, config, batch, fwd_out):
        seen.setdefault(module_id, []).append({k: batch[k].clone() for k in batch.keys()
                                               if isinstance(batch[k], torch.Tensor)})
        return original(self, module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)

    learner.compute_loss_for_module = spy.__get__(learner)
    return seen


def test_lora_under_auto_on_a_bf16_cpu_has_a_bf16_base_and_fp32_adapters_and_states(cpu_with):
    cpu_with(AMX)
    _, learner = _learner(lora=True)
    model = learner.module[AGENTS[0]].causal_lm
    base = [p for n, p in model.named_parameters() if "lora_" not in n]
    adapters = [p for n, p in model.named_parameters() if "lora_" in n]
    assert base and {p.dtype for p in base} == {torch.bfloat16}
    assert adapters and {p.dtype for p in adapters} == {torch.float32}
    # ... computing in bf16 in the learner's forward, as the runners' copies do (no fp32
    # round trip in each LoRA layer) ...
    assert all(learner.module[m].autocast_dtype == torch.bfloat16 for m in AGENTS)
    adapter_inputs = []
    lora_a = next(m for n, m in model.named_modules() if n.endswith("lora_A." + AGENTS[0]))
    hook = lora_a.register_forward_hook(lambda mod, args, out: adapter_inputs.append(
        (args[0].dtype, out.dtype)))
    learner.update(batch=_batch(), minibatch_size=8, num_epochs=1)
    assert adapter_inputs and set(adapter_inputs) == {(torch.bfloat16, torch.bfloat16)}
    # ... and outside it (eval generates with a checkpoint's learner modules) PEFT's casts
    # let the fp32 adapters run without autocast
    adapter_inputs.clear()
    with torch.no_grad():
        model(input_ids=torch.tensor([[5, 6, 7]]))
    hook.remove()
    assert set(adapter_inputs) == {(torch.float32, torch.float32)}
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in adapters)
    states = [value for optimizer in learner._named_optimizers.values()
              for state in optimizer.state.values() for value in state.values()
              if isinstance(value, torch.Tensor) and value.dim() > 0]
    assert states and {s.dtype for s in states} == {torch.float32}


def test_a_lora_runner_copy_under_auto_holds_its_adapters_in_bf16_and_loads_fp32_updates(
        cpu_with):
    """The runner only generates: adapters in the base's dtype spare every LoRA layer two
    casts (``models/rl_modules._adapters_in_base_dtype``); the learner's fp32 weights load."""
    cpu_with(AMX)
    config, learner = _learner(lora=True)
    spaces = {a: (gymnasium.spaces.Text(8),) * 2 for a in AGENTS}
    runner_copy = config.get_multi_rl_module_spec(spaces=spaces, inference_only=True).build()
    model = runner_copy[AGENTS[0]].causal_lm
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    learner.update(batch=_batch(), minibatch_size=8, num_epochs=1)
    trained = learner.module[AGENTS[0]].get_state(inference_only=True)
    runner_copy[AGENTS[0]].set_state(trained)
    loaded = runner_copy[AGENTS[0]].get_state(inference_only=True)
    assert loaded.keys() == trained.keys()
    for key, value in trained.items():
        assert torch.allclose(torch.as_tensor(loaded[key]).float(), torch.as_tensor(value),
                              atol=1e-2, rtol=1e-2), key
    fp32_config, fp32_learner = _learner(lora=True, model_dtype="float32")
    assert all(fp32_learner.module[m].autocast_dtype is None for m in AGENTS)
    exact_copy = fp32_config.get_multi_rl_module_spec(spaces=spaces, inference_only=True).build()
    assert {p.dtype for p in exact_copy[AGENTS[0]].causal_lm.parameters()} == {torch.float32}


def test_full_fine_tuning_under_auto_keeps_fp32_weights_and_computes_in_bf16(cpu_with):
    cpu_with(AMX)
    config, learner = _learner(lora=False)
    module = learner.module[AGENTS[0]]
    assert {p.dtype for p in module.causal_lm.parameters()} == {torch.float32}
    assert module.autocast_dtype == torch.bfloat16
    runner_copy = config.get_multi_rl_module_spec(
        spaces={a: (gymnasium.spaces.Text(8),) * 2 for a in AGENTS},
        inference_only=True).build()[AGENTS[0]]
    assert {p.dtype for p in runner_copy.causal_lm.parameters()} == {torch.bfloat16}
    assert runner_copy.autocast_dtype is None


def test_a_forced_bfloat16_holds_full_fine_tuning_weights_in_bf16(cpu_with):
    cpu_with(PLAIN)
    _, learner = _learner(lora=False, model_dtype="bfloat16")
    module = learner.module[AGENTS[0]]
    assert {p.dtype for p in module.causal_lm.parameters()} == {torch.bfloat16}
    assert module.autocast_dtype is None


def test_in_bf16_the_ratio_denominator_is_the_learners_own_and_the_gap_is_weighted(cpu_with):
    cpu_with(AMX)
    _, learner = _learner(lora=True)
    assert not learner.behaviour_logprobs_are_exact
    seen = _losses_see(learner)
    # 4 rows of one sample, minibatches of 2: rows 0-1 are the first step, rows 2-3 the second
    results = learner.update(batch=_batch(behaviour=-5.0), minibatch_size=2, num_epochs=1)
    for module_id in AGENTS:
        first, second = seen[module_id]
        for batch in (first, second):
            assert torch.all(batch["behaviour_logp"][batch["response_mask"].bool()] == -5.0)
        # The first step trains on the pre-update weights: its forward is its denominator,
        # nothing is recomputed for it (the loss swaps the forward's log-probs in).
        assert torch.all(first[PROXIMAL_FROM_FORWARD])
        assert torch.all(first["old_logp"] == -5.0)
        # The second step's rows were recomputed before the update began.
        assert not torch.any(second[PROXIMAL_FROM_FORWARD])
        mask = second["response_mask"].bool()
        proximal = second["old_logp"][mask]
        assert torch.all(proximal != -5.0) and torch.all(proximal < 0)
        # The gap metrics: over the recomputed rows.
        gap = results[module_id][LOGP_MISMATCH_MEAN].peek()
        expected = float((proximal + 5.0).abs().mean())
        assert gap == pytest.approx(expected, rel=1e-4)
        r = proximal + 5.0  # learner - behaviour on every response token
        assert results[module_id][LOGP_MISMATCH_MAX].peek() == pytest.approx(
            float(r.abs().max()), rel=1e-4)
        assert results[module_id][LOGP_MISMATCH_KL].peek() == pytest.approx(
            float((torch.exp(r) - r - 1).mean()), rel=1e-4)


def test_in_bf16_one_step_recomputes_nothing_and_its_ratio_is_exactly_one(cpu_with):
    cpu_with(AMX)
    _, learner = _learner(lora=True)
    seen = _losses_see(learner)
    recomputed = []  # no-gradient passes with the module's own weights (not the KL's base)
    for module_id in AGENTS:
        module = learner.module[module_id]

        def counted(batch, causal_lm=None, _own=module.detached_logprobs):
            if causal_lm is None:
                recomputed.append(len(batch))
            return _own(batch, causal_lm)

        module.detached_logprobs = counted
    results = learner.update(batch=_batch(behaviour=-5.0), minibatch_size=8, num_epochs=1)
    assert recomputed == []
    for module_id in AGENTS:
        (batch,) = seen[module_id]
        assert torch.all(batch[PROXIMAL_FROM_FORWARD])
        assert results[module_id]["policy_behaviour_ratio"].peek() == 1.0
        # the gap, from the step's own forward against the engine's -5
        assert results[module_id][LOGP_MISMATCH_MEAN].peek() > 0


def test_in_bf16_a_second_epoch_keeps_every_recompute(cpu_with):
    """With two epochs every row is trained again on updated weights, so none can use its
    forward as the denominator."""
    cpu_with(AMX)
    _, learner = _learner(lora=True)
    seen = _losses_see(learner)
    learner.update(batch=_batch(behaviour=-5.0), minibatch_size=8, num_epochs=2)
    for module_id in AGENTS:
        first, again = seen[module_id]
        assert PROXIMAL_FROM_FORWARD not in first
        assert torch.equal(first["old_logp"], again["old_logp"])
        assert torch.all(first["old_logp"][first["response_mask"].bool()] != -5.0)


def test_fp32_on_policy_is_exactly_todays_algorithm(cpu_with):
    cpu_with(PLAIN)  # auto resolves to fp32: the engines' log-probs stand as the denominator
    _, learner = _learner(lora=True)
    assert learner.behaviour_logprobs_are_exact
    seen = _losses_see(learner)
    given = _batch(behaviour=-5.0)
    results = learner.update(batch=given, minibatch_size=8, num_epochs=1)
    for module_id in AGENTS:
        batch = seen[module_id][0]
        assert "behaviour_logp" not in batch
        assert torch.equal(batch["old_logp"], torch.full_like(batch["old_logp"], -5.0))
        # the gap is still reported, from the first minibatch's own forward pass
        assert results[module_id][LOGP_MISMATCH_MEAN].peek() > 0
