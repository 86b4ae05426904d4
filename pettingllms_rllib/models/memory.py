"""GPU-memory estimates for a go/no-go check before a run starts; not a profiler.

A model too large for its GPUs should fail at config validation with the estimate in the message,
not with an out-of-memory crash mid-run. Everything is arithmetic on a :class:`ModelShape` (no Ray,
no weights, no GPU). Parameter counts are exact for llama/mistral/qwen2/qwen3-style decoders;
activations are a deliberately conservative rough model (see :func:`learner_memory`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Iterable

import os

import torch

from pettingllms_rllib.models import loading

GIB = 1 << 30
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: peft ``LoraConfig`` defaults of every LoRA module (``rl_modules``), declared here, Ray-free,
#: so the memory estimates, the config and the device check read the same values.
DEFAULT_LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
DEFAULT_LORA_RANK = DEFAULT_LORA["r"]


def lora_kwargs(lora) -> dict | None:
    """The full peft ``LoraConfig`` kwargs of a run's ``lora`` (these defaults under it), or
    None for full fine-tuning: the one place they are merged."""
    return None if lora is None else {**DEFAULT_LORA, **dict(lora)}


DEFAULT_LORA_TARGETS = tuple(DEFAULT_LORA["target_modules"])
#: peft up-casts bf16/fp16 adapters to fp32 (``autocast_adapter_dtype``), so adapters and their
#: gradients and AdamW states are fp32 whatever the base dtype.
ADAPTER_BYTES = 4
#: Activation elements saved for backward per token in one decoder layer without checkpointing:
#: ``HIDDEN * hidden + ATTENTION * (q_dim + kv_dim) + INTERMEDIATE * intermediate``. Counted
#: with saved-tensor hooks on a bf16 Qwen3 layer (sdpa): each RMSNorm keeps its fp32 input, its
#: output and the linear's input (8 x hidden for two); q and k keep their fp32 and bf16 q/k-norm
#: tensors, rotary outputs and, with v, the attention output (5 x each); the SwiGLU keeps gate,
#: up, silu(gate) and their product (4 x intermediate). The constants add one hidden-sized
#: margin per term for the residual stream, embeddings and final norm: conservative, not absurd.
ACTIVATION_HIDDEN_TERMS = 10
ACTIVATION_ATTENTION_TERMS = 6
ACTIVATION_INTERMEDIATE_TERMS = 4
#: With per-layer checkpointing each layer keeps its input (1 x hidden per token); the second copy
#: covers the residual gradient and allocator rounding. One layer recomputed in backward is added.
CHECKPOINT_HIDDEN_TERMS = 2
#: fp32 bytes per logit during the log-prob pass: the up-cast logits that logsumexp keeps for
#: backward, then their gradient (models/logprobs.py recomputes one chunk at a time).
LOGIT_BYTES = 2 * 4
#: Per sequence and vocabulary entry in one decoding step of the HF engine's sampler: fp32
#: scaled logits, fp32 probabilities and a float64 CDF (engines/hf_engine.py sample_tokens).
SAMPLING_BYTES = 4 + 4 + 8
#: CUDA context, cuBLAS workspaces and caching-allocator fragmentation, per process.
CUDA_OVERHEAD_BYTES = 1 * GIB


class InsufficientGPUMemoryError(ValueError):
    """A learner's or engine's estimated memory exceeds its GPU's; the message has the numbers."""


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only LM that memory depends on; ``num_parameters`` is exact."""

    num_parameters: int
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool

    @classmethod
    def build(cls, *, hidden_size, num_layers, num_attention_heads, num_kv_heads, head_dim,
              intermediate_size, vocab_size, tie_word_embeddings, qkv_bias=False, o_bias=False,
              mlp_bias=False, qk_norm=False) -> "ModelShape":
        """A shape with its parameter count computed layer by layer, as transformers builds it."""
        q_dim, kv_dim = num_attention_heads * head_dim, num_kv_heads * head_dim
        attention = 2 * hidden_size * q_dim + 2 * hidden_size * kv_dim
        attention += (q_dim + 2 * kv_dim) * qkv_bias + hidden_size * o_bias + 2 * head_dim * qk_norm
        mlp = 3 * hidden_size * intermediate_size + (2 * intermediate_size + hidden_size) * mlp_bias
        layer = attention + mlp + 2 * hidden_size  # + input and post-attention RMSNorm
        embeddings = vocab_size * hidden_size * (1 if tie_word_embeddings else 2)
        return cls(embeddings + num_layers * layer + hidden_size,  # + final norm
                   hidden_size, num_layers, num_attention_heads, num_kv_heads, head_dim,
                   intermediate_size, vocab_size, bool(tie_word_embeddings))

    @classmethod
    def from_hf_config(cls, config) -> "ModelShape":
        """Shape of the config of a dense llama/mistral/qwen2/qwen3-style decoder. ValueError for
        anything else (MoE, other layouts): refused, not guessed, as a wrong count misleads."""
        model_type = getattr(config, "model_type", None)
        experts = [a for a in ("num_experts", "num_local_experts", "n_routed_experts")
                   if getattr(config, a, None)]
        if experts or model_type not in SUPPORTED_MODEL_TYPES:
            what = f"mixture-of-experts ({experts[0]})" if experts else f"model_type {model_type!r}"
            raise ValueError(f"cannot estimate memory for {what}; supported are dense decoders "
                             f"of model_type {', '.join(SUPPORTED_MODEL_TYPES)}")
        heads, get = config.num_attention_heads, functools.partial(getattr, config)
        bias = bool(get("attention_bias", False)) and model_type != "mistral"
        return cls.build(
            hidden_size=config.hidden_size, num_layers=config.num_hidden_layers,
            num_attention_heads=heads, num_kv_heads=get("num_key_value_heads", 0) or heads,
            head_dim=get("head_dim", None) or config.hidden_size // heads,
            intermediate_size=config.intermediate_size, vocab_size=config.vocab_size,
            tie_word_embeddings=bool(get("tie_word_embeddings", False)),
            qkv_bias=bias or model_type == "qwen2", o_bias=bias and model_type != "qwen2",
            mlp_bias=model_type == "llama" and bool(get("mlp_bias", False)),
            qk_norm=model_type == "qwen3")


#: Published configs (huggingface.co/Qwen/Qwen3-1.7B and Qwen3-8B, config.json).
QWEN3_1_7B = ModelShape.build(hidden_size=2048, num_layers=28, num_attention_heads=16,
                              num_kv_heads=8, head_dim=128, intermediate_size=6144,
                              vocab_size=151936, tie_word_embeddings=True, qk_norm=True)
QWEN3_8B = ModelShape.build(hidden_size=4096, num_layers=36, num_attention_heads=32,
                            num_kv_heads=8, head_dim=128, intermediate_size=12288,
                            vocab_size=151936, tie_word_embeddings=False, qk_norm=True)


def model_config(spec):
    """The transformers config of a ModelSpec (or name), never touching the network or the
    weights; None for a hub id whose config is not in the local HF cache."""
    from transformers import AutoConfig

    spec = loading.ModelSpec.coerce(spec)
    if spec.name_or_path == loading.TINY_RANDOM_NAME:
        return loading.tiny_random_config(spec.tiny_config)
    path = loading.resolve_model_path(spec.name_or_path)
    if Path(path).is_dir():
        return AutoConfig.from_pretrained(path)
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return None


def model_shape(spec) -> ModelShape | None:
    """Shape of a ModelSpec (or name) from its config alone, never touching the network; None
    for a hub id whose config is not in the local HF cache (the check is skipped, not failed)."""
    config = model_config(spec)
    return None if config is None else ModelShape.from_hf_config(config)


#: Config attributes that hold a model's context length (positions), by architecture family.
CONTEXT_LENGTH_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length",
                             "seq_length")


def model_context_length(spec) -> int | None:
    """The longest sequence (prompt + response, in tokens) a ModelSpec's model has positions
    for, read from its config alone (``max_position_embeddings`` and the like); None where the
    config is not available offline or names none."""
    config = model_config(spec)
    for attribute in CONTEXT_LENGTH_ATTRIBUTES:
        value = getattr(config, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def lora_parameter_count(shape: ModelShape, *, rank: int,
                         target_modules: Iterable[str] | str = DEFAULT_LORA_TARGETS,
                         num_adapters: int = 1) -> int:
    """Exact number of LoRA A and B parameters: ``rank * (in + out)`` per targeted linear."""
    if rank < 1 or num_adapters < 0:
        raise ValueError(f"need rank >= 1 and num_adapters >= 0, got {rank}, {num_adapters}")
    h, i = shape.hidden_size, shape.intermediate_size
    q, kv = shape.num_attention_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    sizes = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
             "gate_proj": h + i, "up_proj": h + i, "down_proj": i + h}
    if target_modules == "all-linear":  # peft's shorthand; it leaves out the LM head
        target_modules = LORA_TARGETS
    names = {target_modules} if isinstance(target_modules, str) else set(target_modules)
    if names - set(sizes):
        raise ValueError(f"unknown LoRA target modules {sorted(names - set(sizes))}; known are "
                         f"{list(LORA_TARGETS)} or 'all-linear'")
    per_layer = sum(sizes[name] for name in names)
    return rank * per_layer * shape.num_layers * num_adapters


@dataclasses.dataclass
class MemoryEstimate:
    """Estimated bytes by component (insertion order is the order :meth:`describe` prints)."""

    breakdown: dict[str, int]

    @property
    def total_bytes(self) -> int:
        return sum(self.breakdown.values())

    def describe(self) -> str:
        """One line such as ``weights 3.2 GiB + kv_cache 4.0 GiB = 7.2 GiB``; zero parts left
        out, parts under 0.1 GiB with two decimals so that they do not read as 0."""
        parts = " + ".join(f"{name} {size / GIB:.{2 if size < GIB / 10 else 1}f} GiB"
                           for name, size in self.breakdown.items() if size)
        return f"{parts} = {self.total_bytes / GIB:.1f} GiB"


def _dtype_bytes(dtype: str) -> int:
    torch_dtype = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    return torch_dtype.itemsize


def _adapter_bytes(shape, lora_rank, lora_target_modules, num_adapters) -> int:
    if lora_rank is None:
        return 0
    targets = DEFAULT_LORA_TARGETS if lora_target_modules is None else lora_target_modules
    return ADAPTER_BYTES * lora_parameter_count(shape, rank=lora_rank, target_modules=targets,
                                                num_adapters=num_adapters)


def layer_activation_elements(shape: ModelShape) -> int:
    """Elements one decoder layer saves for backward per token (see ``ACTIVATION_*``)."""
    attention = (shape.num_attention_heads + shape.num_kv_heads) * shape.head_dim
    return (ACTIVATION_HIDDEN_TERMS * shape.hidden_size + ACTIVATION_ATTENTION_TERMS * attention
            + ACTIVATION_INTERMEDIATE_TERMS * shape.intermediate_size)


def learner_memory(shape: ModelShape, *, dtype: str, lora_rank: int | None,
                   lora_target_modules: Iterable[str] | str | None = None, num_adapters: int = 1,
                   tokens_per_microbatch: int, gradient_checkpointing: bool,
                   logits_chunk_tokens: int | None = None, num_models: int = 1,
                   optimizer_state_dtype: str | None = None,
                   activation_dtype: str | None = None,
                   num_reference_models: int = 0) -> MemoryEstimate:
    """Estimated peak GPU memory of one learner process; an estimate for a go/no-go check.

    Full fine-tuning (``lora_rank=None``): ``num_models`` models (one per ModuleID), gradients in
    the weights' dtype, AdamW's two states plus one state-sized temporary of its foreach step.
    ``torch.optim.AdamW`` (used by ``algorithms/learner.py``) keeps states in the parameter dtype,
    the default; ``optimizer_state_dtype="float32"`` models fp32 master states. LoRA: one frozen
    base plus ``num_adapters`` fp32 adapters; gradients and AdamW only for adapter parameters.
    ``tokens_per_microbatch``: every token whose activations live at once (RLlib runs all modules'
    forwards before one backward, so sum them). Activations: see the ``ACTIVATION_*`` and
    ``CHECKPOINT_HIDDEN_TERMS`` constants (LoRA needs the same: gradients flow through every frozen
    layer). Logits: ``LOGIT_BYTES`` per logit for ``logits_chunk_tokens`` tokens (the learner's
    ``logprob_chunk_size``; None = all tokens). ``activation_dtype``: the learner's
    ``autocast_dtype`` (None = ``dtype``); autocast also caches a cast copy of trainable weights.
    ``num_reference_models``: frozen copies kept for the KL penalty of full fine-tuning
    (weights only; LoRA's reference is its base with the adapters off, no copy).
    """
    if tokens_per_microbatch < 0 or num_models < 1:
        raise ValueError("need tokens_per_microbatch >= 0 and num_models >= 1")
    size = _dtype_bytes(dtype)
    act_size = size if activation_dtype is None else _dtype_bytes(activation_dtype)
    if lora_rank is None:
        trainable = shape.num_parameters * num_models
        state_size = size if optimizer_state_dtype is None else _dtype_bytes(optimizer_state_dtype)
        breakdown = {"weights": trainable * size, "gradients": trainable * size,
                     "optimizer": 3 * trainable * state_size}
        if activation_dtype is not None and activation_dtype != dtype:
            breakdown["autocast_weights"] = trainable * act_size
    else:
        adapters = _adapter_bytes(shape, lora_rank, lora_target_modules, num_adapters)
        breakdown = {"weights": shape.num_parameters * size, "adapters": adapters,
                     "gradients": adapters, "optimizer": 3 * adapters}
    if num_reference_models:
        breakdown["reference_weights"] = shape.num_parameters * num_reference_models * size
    h, layers = shape.hidden_size, shape.num_layers
    layer = layer_activation_elements(shape)
    per_token = CHECKPOINT_HIDDEN_TERMS * h * layers + layer if gradient_checkpointing \
        else layer * layers
    breakdown["activations"] = tokens_per_microbatch * per_token * act_size
    logit_tokens = min(tokens_per_microbatch, logits_chunk_tokens or tokens_per_microbatch)
    breakdown["logits"] = logit_tokens * shape.vocab_size * LOGIT_BYTES
    breakdown["overhead"] = CUDA_OVERHEAD_BYTES
    return MemoryEstimate(breakdown)


def kv_cache_bytes(shape: ModelShape, *, dtype: str, tokens: int) -> int:
    """Keys and values of every layer for ``tokens`` cached tokens."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * _dtype_bytes(dtype) * tokens


def engine_memory(shape: ModelShape, *, dtype: str, max_model_len: int, max_num_seqs: int,
                  num_adapters: int = 1, lora_rank: int | None = None,
                  lora_target_modules: Iterable[str] | str | None = None) -> MemoryEstimate:
    """Estimated GPU memory of one rollout engine, for a go/no-go check: weights, fp32 LoRA
    adapters (an upper bound for vLLM, which keeps them in the model dtype), a KV cache for
    ``max_num_seqs`` sequences of ``max_model_len`` tokens, one decoding step's sampling buffers
    and the per-process CUDA overhead."""
    return MemoryEstimate({
        "weights": shape.num_parameters * _dtype_bytes(dtype),
        "adapters": _adapter_bytes(shape, lora_rank, lora_target_modules, num_adapters),
        "kv_cache": kv_cache_bytes(shape, dtype=dtype, tokens=max_model_len * max_num_seqs),
        "sampling": max_num_seqs * shape.vocab_size * SAMPLING_BYTES,
        "overhead": CUDA_OVERHEAD_BYTES,
    })


def check_fits(estimate: MemoryEstimate, available_bytes: int, *, what: str, hint: str,
               device: str = "GPU") -> None:
    """Raise :class:`InsufficientGPUMemoryError` when ``estimate`` exceeds ``available_bytes``
    of ``device`` ("GPU", or "host" for a CPU run's RAM)."""
    if estimate.total_bytes <= available_bytes:
        return None
    memory_word = "GPU memory" if device == "GPU" else "memory"
    raise InsufficientGPUMemoryError(
        f"{what} needs an estimated {estimate.total_bytes / GIB:.1f} GiB of {memory_word} but "
        f"the {device} has {available_bytes / GIB:.1f} GiB ({estimate.describe()})"
        + (f"; {hint}" if hint else ""))


def host_memory_bytes() -> int | None:
    """This machine's total RAM (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def available_gpu_bytes(device_index: int = 0) -> int | None:
    """Total (not free) memory of a CUDA device, or None without CUDA (CPU runs skip the check).
    Other processes of the same run may hold part of it; their own estimates count that share."""
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(device_index)[1])
