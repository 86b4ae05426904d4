"""GPU-memory estimates: exact parameter counts, LoRA counts, and the go/no-go check's verdicts."""

from __future__ import annotations

import pytest
import torch
from transformers import (AutoModelForCausalLM, GPT2Config, LlamaConfig, MistralConfig,
                          Qwen2Config, Qwen3Config, Qwen3MoeConfig)

from pettingllms_rllib.models import loading, memory
from pettingllms_rllib.models.memory import (
    GIB, QWEN3_1_7B, QWEN3_8B, InsufficientGPUMemoryError, MemoryEstimate, ModelShape,
    available_gpu_bytes, check_fits, engine_memory, kv_cache_bytes, layer_activation_elements,
    learner_memory, lora_parameter_count, model_shape)

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}


def meta_model(config):
    """The real transformers model for a config, on the meta device: exact shapes, no memory."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def real_count(config) -> int:
    return sum(p.numel() for p in meta_model(config).parameters())


@pytest.mark.parametrize("config", [
    LlamaConfig(**SMALL, tie_word_embeddings=True),
    LlamaConfig(**SMALL, tie_word_embeddings=False),
    LlamaConfig(**SMALL, attention_bias=True, mlp_bias=True),
    LlamaConfig(**SMALL, head_dim=32),
    MistralConfig(**SMALL),
    Qwen2Config(**SMALL, tie_word_embeddings=True),
    Qwen2Config(**SMALL, tie_word_embeddings=False),
    Qwen3Config(**SMALL, tie_word_embeddings=True),
    Qwen3Config(**SMALL, tie_word_embeddings=False, head_dim=8),
    Qwen3Config(**SMALL, attention_bias=True),
], ids=lambda c: f"{c.model_type}-tied{c.tie_word_embeddings}-hd{getattr(c, 'head_dim', None)}"
                 f"-bias{getattr(c, 'attention_bias', None)}")
def test_parameter_count_equals_the_real_transformers_model(config):
    shape = ModelShape.from_hf_config(config)
    assert shape.num_parameters == real_count(config)
    assert shape.tie_word_embeddings == config.tie_word_embeddings
    assert shape.num_kv_heads == 2 and shape.num_layers == 2


def test_head_dim_falls_back_to_hidden_over_heads_and_qwen3_keeps_its_own():
    assert ModelShape.from_hf_config(LlamaConfig(**SMALL)).head_dim == 16
    assert ModelShape.from_hf_config(Qwen3Config(**SMALL, head_dim=24)).head_dim == 24


def test_qwen3_reference_shapes_have_the_published_sizes_and_match_transformers():
    assert 1.6e9 <= QWEN3_1_7B.num_parameters <= 2.1e9  # model card: 1.7B total
    assert 7.9e9 <= QWEN3_8B.num_parameters <= 8.4e9  # model card: 8.2B total
    published = {
        QWEN3_1_7B: Qwen3Config(hidden_size=2048, num_hidden_layers=28, intermediate_size=6144,
                                num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                vocab_size=151936, tie_word_embeddings=True),
        QWEN3_8B: Qwen3Config(hidden_size=4096, num_hidden_layers=36, intermediate_size=12288,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                              vocab_size=151936, tie_word_embeddings=False),
    }
    for shape, config in published.items():
        assert ModelShape.from_hf_config(config) == shape
        assert shape.num_parameters == real_count(config)


@pytest.mark.parametrize("config", [
    Qwen3MoeConfig(**SMALL, num_experts=4), GPT2Config(n_embd=32, n_layer=1, n_head=2)])
def test_unsupported_architectures_are_refused_naming_what_is_supported(config):
    with pytest.raises(ValueError, match="llama, mistral, qwen2, qwen3"):
        ModelShape.from_hf_config(config)


@pytest.mark.parametrize("config", [Qwen3Config(**SMALL, head_dim=24), LlamaConfig(**SMALL)],
                         ids=["qwen3", "llama"])
@pytest.mark.parametrize("targets", [list(memory.DEFAULT_LORA_TARGETS), "all-linear",
                                     ["gate_proj", "down_proj", "o_proj"]], ids=str)
def test_lora_parameter_count_equals_what_peft_creates(config, targets):
    from peft import LoraConfig, get_peft_model

    model = AutoModelForCausalLM.from_config(config)  # tiny; peft does not build on meta
    lora = LoraConfig(r=4, target_modules=targets)
    peft_model = get_peft_model(model, lora, adapter_name="first")
    peft_model.add_adapter("second", lora)
    peft_model.add_adapter("third", lora)
    created = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    shape = ModelShape.from_hf_config(config)
    assert lora_parameter_count(shape, rank=4, target_modules=targets, num_adapters=3) == created


def test_lora_defaults_are_the_modules_defaults_and_unknown_targets_are_refused():
    rl_modules = pytest.importorskip("pettingllms_rllib.models.rl_modules")  # needs Ray
    assert rl_modules.DEFAULT_LORA is memory.DEFAULT_LORA  # declared once
    assert memory.DEFAULT_LORA_RANK == memory.DEFAULT_LORA["r"]
    with pytest.raises(ValueError, match="lm_head"):
        lora_parameter_count(QWEN3_8B, rank=8, target_modules=["lm_head"])


def test_full_fine_tuning_qwen3_8b_in_bf16_does_not_fit_an_80_gib_gpu():
    estimate = learner_memory(QWEN3_8B, dtype="bfloat16", lora_rank=None, num_adapters=1,
                              tokens_per_microbatch=4096, gradient_checkpointing=True,
                              logits_chunk_tokens=1024)
    b = estimate.breakdown
    assert b["weights"] == b["gradients"] == QWEN3_8B.num_parameters * 2
    assert b["optimizer"] == 3 * QWEN3_8B.num_parameters * 2  # AdamW keeps bf16 states for bf16
    assert b["weights"] + b["gradients"] + b["optimizer"] > 75 * GIB
    with pytest.raises(InsufficientGPUMemoryError, match=r"80\.0 GiB") as error:
        check_fits(estimate, 80 * GIB, what="the learner (full fine-tuning of Qwen3-8B)",
                   hint="use lora=..., gradient_checkpointing or more GPUs")
    message = str(error.value)
    assert f"{estimate.total_bytes / GIB:.1f} GiB" in message
    assert "weights 15.3 GiB" in message and "optimizer 45.8 GiB" in message
    assert "use lora=" in message and "Qwen3-8B" in message
    assert isinstance(error.value, ValueError)
    # fp32 master states, as mixed-precision trainers keep them, need more still.
    fp32_states = learner_memory(QWEN3_8B, dtype="bfloat16", lora_rank=None,
                                 tokens_per_microbatch=0, gradient_checkpointing=True,
                                 optimizer_state_dtype="float32")
    assert fp32_states.breakdown["optimizer"] == 3 * QWEN3_8B.num_parameters * 4


def test_a_kl_reference_copy_adds_its_weights_and_nothing_else():
    common = dict(dtype="bfloat16", lora_rank=None, tokens_per_microbatch=0,
                  gradient_checkpointing=True, num_models=2)
    plain = learner_memory(QWEN3_8B, **common)
    with_reference = learner_memory(QWEN3_8B, num_reference_models=2, **common)
    assert with_reference.total_bytes - plain.total_bytes == 2 * QWEN3_8B.num_parameters * 2
    assert with_reference.breakdown["reference_weights"] == 2 * QWEN3_8B.num_parameters * 2


def test_lora_learner_of_qwen3_1_7b_fits_an_80_gib_gpu_and_trains_only_adapters():
    estimate = learner_memory(QWEN3_1_7B, dtype="bfloat16", lora_rank=16,
                              lora_target_modules=None, num_adapters=2,
                              tokens_per_microbatch=8192, gradient_checkpointing=False)
    adapter_params = lora_parameter_count(QWEN3_1_7B, rank=16, num_adapters=2)
    b = estimate.breakdown
    assert b["adapters"] == b["gradients"] == adapter_params * 4  # peft keeps adapters in fp32
    assert b["optimizer"] == 3 * adapter_params * 4
    assert b["weights"] == QWEN3_1_7B.num_parameters * 2
    assert check_fits(estimate, 80 * GIB, what="the learner", hint="") is None


def saved_activation_bytes_per_token_and_layer(config, dtype, tokens=64) -> float:
    """What autograd really keeps for backward (parameters excluded), per token and layer."""
    model = AutoModelForCausalLM.from_config(config).to(dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.model(input_ids=torch.randint(0, config.vocab_size, (1, tokens)))
    return sum(saved.values()) / tokens / config.num_hidden_layers


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("config", [
    Qwen3Config(**{**SMALL, "head_dim": 32}, attn_implementation="sdpa"),  # q_dim = 2 x hidden
    LlamaConfig(**SMALL, attn_implementation="sdpa")], ids=["qwen3", "llama"])
def test_activation_estimate_is_above_what_autograd_saves_but_not_absurdly(config, dtype):
    measured = saved_activation_bytes_per_token_and_layer(config, dtype)
    estimated = layer_activation_elements(ModelShape.from_hf_config(config)) * dtype.itemsize
    assert measured <= estimated <= 1.7 * measured


def test_activations_shrink_with_checkpointing_and_logits_with_chunking():
    def estimate(**kwargs):
        args = dict(dtype="bfloat16", lora_rank=16, tokens_per_microbatch=4096,
                    gradient_checkpointing=False)
        return learner_memory(QWEN3_8B, **{**args, **kwargs}).breakdown

    full, checkpointed = estimate(), estimate(gradient_checkpointing=True)
    assert checkpointed["activations"] * 5 < full["activations"]
    assert full["activations"] == estimate(tokens_per_microbatch=2048)["activations"] * 2
    assert full["logits"] == 4096 * 151936 * memory.LOGIT_BYTES
    assert estimate(logits_chunk_tokens=512)["logits"] == full["logits"] // 8
    assert estimate(tokens_per_microbatch=0)["activations"] == 0


def test_full_fine_tuning_of_several_modules_holds_one_model_each():
    one, two = (learner_memory(QWEN3_1_7B, dtype="float32", lora_rank=None, num_models=n,
                               tokens_per_microbatch=0, gradient_checkpointing=True).breakdown
                for n in (1, 2))
    assert two["weights"] == 2 * one["weights"] and two["optimizer"] == 2 * one["optimizer"]


def test_autocast_keeps_fp32_weights_and_states_with_bf16_activations_and_weight_copies():
    def estimate(**kwargs):
        return learner_memory(QWEN3_1_7B, dtype="float32", lora_rank=None,
                              gradient_checkpointing=True, tokens_per_microbatch=1024,
                              **kwargs).breakdown

    plain, autocast = estimate(), estimate(activation_dtype="bfloat16")
    assert autocast["weights"] == plain["weights"] == QWEN3_1_7B.num_parameters * 4
    assert autocast["optimizer"] == plain["optimizer"]
    assert autocast["activations"] * 2 == plain["activations"]
    assert autocast["autocast_weights"] == QWEN3_1_7B.num_parameters * 2  # autocast's cast cache
    assert "autocast_weights" not in plain


def test_kv_cache_bytes_follow_the_hand_computed_formula():
    # Qwen3-8B in bf16: 2 (K and V) x 36 layers x 8 kv heads x 128 dims x 2 bytes = 144 KiB/token.
    assert kv_cache_bytes(QWEN3_8B, dtype="bfloat16", tokens=1) == 147456
    engine = engine_memory(QWEN3_8B, dtype="bfloat16", max_model_len=4096, max_num_seqs=8,
                           num_adapters=0, lora_rank=None, lora_target_modules=None)
    assert engine.breakdown["kv_cache"] == 147456 * 4096 * 8 == 4.5 * GIB
    assert engine.breakdown["weights"] == QWEN3_8B.num_parameters * 2
    assert engine.breakdown["adapters"] == 0
    with_adapters = engine_memory(QWEN3_8B, dtype="bfloat16", max_model_len=4096, max_num_seqs=8,
                                  num_adapters=2, lora_rank=8, lora_target_modules="all-linear")
    assert with_adapters.breakdown["adapters"] == 4 * lora_parameter_count(
        QWEN3_8B, rank=8, target_modules="all-linear", num_adapters=2)


def test_check_fits_passes_when_the_estimate_fits_up_to_the_last_byte():
    estimate = MemoryEstimate({"weights": 3 * GIB, "kv_cache": GIB})
    assert estimate.total_bytes == 4 * GIB
    assert check_fits(estimate, 4 * GIB, what="the engine", hint="") is None
    with pytest.raises(InsufficientGPUMemoryError, match="more GPUs"):
        check_fits(estimate, 4 * GIB - 1, what="the engine", hint="use more GPUs")


def test_describe_is_one_line_of_gib_parts_and_their_sum():
    estimate = MemoryEstimate({"weights": int(3.4 * GIB), "gradients": int(3.4 * GIB)})
    assert estimate.describe() == "weights 3.4 GiB + gradients 3.4 GiB = 6.8 GiB"


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="float13"):
        engine_memory(QWEN3_8B, dtype="float13", max_model_len=1, max_num_seqs=1)


def test_model_shape_of_tiny_random_matches_the_model_the_library_builds():
    spec = loading.ModelSpec("tiny-random", tiny_config={"hidden_size": 32, "num_hidden_layers": 1})
    shape = model_shape(spec)
    assert shape.num_parameters == sum(p.numel() for p in loading.load_causal_lm(spec).parameters())
    assert shape.hidden_size == 32 and shape.num_layers == 1


def test_model_shape_reads_a_local_folder_and_the_bundled_model_via_its_folder(tmp_path,
                                                                               monkeypatch):
    config = Qwen3Config(**SMALL)
    config.save_pretrained(tmp_path)
    assert model_shape(str(tmp_path)) == ModelShape.from_hf_config(config)
    monkeypatch.setattr(loading, "resolve_model_path", lambda name: str(tmp_path))
    assert model_shape(loading.BUNDLED_MODEL_NAME).num_parameters == real_count(config)


def test_model_shape_of_an_uncached_hub_id_is_none_without_network():
    assert model_shape("pettingllms-test/no-such-model-anywhere") is None


def test_available_gpu_bytes_is_none_on_cpu_and_the_device_total_with_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert available_gpu_bytes() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (GIB, 80 * GIB + index))
    assert available_gpu_bytes(1) == 80 * GIB + 1


@pytest.mark.slow
def test_model_shape_of_the_bundled_smollm2_counts_its_parameters():
    shape = model_shape(loading.BUNDLED_MODEL_NAME)
    assert shape.num_parameters == sum(p.numel() for p in loading.load_causal_lm().parameters())
