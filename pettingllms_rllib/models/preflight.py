"""The memory preflight of a run: refuse, before any Ray work, a model that cannot fit the
learners' and engines' devices, with the estimate in the error instead of an out-of-memory
crash mid-run.

It reads a run config by attribute (an ``ATGRPOConfig``: model, LoRA, dtype, GPUs per learner
and env runner, ``vllm_max_model_len``, ``gpu_memory_gib``, ...), so ``validate`` runs it on
the driver and each GPU learner runs :func:`check_learner_memory` on its own device. The
estimates are lower bounds (``models/memory.py``): they catch configs that cannot fit whatever
the batch.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from pettingllms_rllib.models import memory
from pettingllms_rllib.models.precision import learner_dtypes, resolve_model_dtype

__all__ = ["ASSUMED_SEQUENCE_TOKENS", "check_learner_memory", "check_run_memory",
           "engine_memory_estimate", "learner_memory_estimate"]

logger = logging.getLogger(__name__)

#: Tokens of one sequence assumed when the config sets no maximum length.
ASSUMED_SEQUENCE_TOKENS = 2048


def _gpu_dtype_choice(config):
    """``model_dtype`` on a GPU (the preflight may run on a CPU head node): ``auto`` is taken
    as bf16, what every GPU since Ampere computes."""
    return resolve_model_dtype(config.model_dtype, "cuda", cuda_bf16=True)


def _sequence_tokens(config) -> int:
    return int(config.vllm_max_model_len or ASSUMED_SEQUENCE_TOKENS)


def learner_memory_estimate(config, shape, num_modules: int):
    """A lower bound of one learner's GPU memory: weights, gradients and optimizer states of
    every module plus the activations of ONE sequence per module."""
    lora = config.lora_kwargs
    weights, autocast = learner_dtypes(_gpu_dtype_choice(config),
                                       trains_all_weights=lora is None)
    return memory.learner_memory(
        shape, dtype=weights, lora_rank=None if lora is None else int(lora["r"]),
        lora_target_modules=None if lora is None else lora["target_modules"],
        num_adapters=num_modules, num_models=1 if lora is not None else num_modules,
        tokens_per_microbatch=_sequence_tokens(config) * num_modules,
        gradient_checkpointing=bool(config.gradient_checkpointing),
        logits_chunk_tokens=int(config.logprob_chunk_size),
        activation_dtype=config.autocast_dtype or autocast,
        num_reference_models=num_modules if lora is None and config.uses_kl_penalty else 0)


def engine_memory_estimate(config, shape, num_modules: int):
    """A lower bound of one runner's engine memory: weights, adapters and the KV cache of the
    K branches of one prompt at full length."""
    lora = config.lora_kwargs
    return memory.engine_memory(
        shape, dtype=_gpu_dtype_choice(config).dtype, max_model_len=_sequence_tokens(config),
        max_num_seqs=int(config.num_branches),
        num_adapters=num_modules if lora is not None else 1,
        lora_rank=None if lora is None else int(lora["r"]),
        lora_target_modules=None if lora is None else lora["target_modules"])


def check_learner_memory(config, shape, available_bytes: int, *, what: str,
                         device: str = "GPU", hint: str) -> None:
    """Raise :class:`~pettingllms_rllib.models.memory.InsufficientGPUMemoryError` with the
    estimate when :func:`learner_memory_estimate` exceeds ``available_bytes``."""
    memory.check_fits(learner_memory_estimate(config, shape, config.num_modules),
                      available_bytes, what=what, device=device, hint=hint)


def check_run_memory(config, pools: Sequence[Any] | None) -> None:
    """The run's preflight: on GPUs, every learner (each pool's, with ``pools``) and every env
    runner's engine; on a CPU, the learner against this machine's RAM. Skipped, with a log
    line, where the model's shape or the GPU's memory cannot be known here."""
    from pettingllms_rllib.engines import find_engine_kind

    learner_gpus = float(config.num_gpus_per_learner or 0)
    if pools is not None:
        learner_gpus = max(float(pool.num_gpus_per_learner) for pool in pools)
    runner_gpus = float(config.num_gpus_per_env_runner or 0)
    if learner_gpus <= 0 and runner_gpus <= 0:
        _check_host_memory(config)
        return
    gpu_bytes = (int(float(config.gpu_memory_gib) * memory.GIB) if config.gpu_memory_gib
                 else memory.available_gpu_bytes())
    if gpu_bytes is None:
        logger.info("no GPU here and no gpu_memory_gib: the memory check runs on the learners")
        return
    try:
        shape = memory.model_shape(config.model_spec_dict)
    except ValueError as exc:  # an architecture the estimator does not know
        logger.warning("GPU memory check skipped: %s", exc)
        return
    if shape is None:
        logger.info("model config not available offline: GPU memory check skipped")
        return
    num_modules = config.num_modules
    hint = ("use LoRA (.llm(lora={...})), gradient_checkpointing, a smaller model, "
            "bf16 weights, or more/larger GPUs (docs/gpu.md)")
    if pools is not None:  # each pool's learners hold only that pool's modules
        for pool in pools:
            if float(pool.num_gpus_per_learner) > 0:
                memory.check_fits(
                    learner_memory_estimate(config, shape, len(pool.modules)),
                    int(gpu_bytes * min(1.0, float(pool.num_gpus_per_learner))),
                    what=f"a learner of pool {pool.name!r} ({len(pool.modules)} modules of "
                         f"{config.llm_model!r})", device="GPU", hint=hint)
    elif learner_gpus > 0:
        check_learner_memory(config, shape, int(gpu_bytes * min(1.0, learner_gpus)),
                             what=f"a learner of {config.llm_model!r}", hint=hint)
    if runner_gpus > 0:
        # Full fine-tuning serves one model per module (one vLLM engine each), LoRA one base.
        num_served_models = 1 if config.lora is not None else num_modules
        engine = find_engine_kind(config.engine)
        share = 1.0 if engine is None else engine.runner_gpu_share(config)
        memory.check_fits(engine_memory_estimate(config, shape, num_modules),
                          int(gpu_bytes * min(1.0, runner_gpus) * share / num_served_models),
                          what=f"each {config.engine} engine of an env runner", hint=hint)


def _check_host_memory(config) -> None:
    """A CPU run: the learner's lower-bound estimate against this machine's RAM."""
    ram = memory.host_memory_bytes()
    try:
        shape = memory.model_shape(config.model_spec_dict)
    except ValueError:
        return
    if ram is None or shape is None:
        return
    check_learner_memory(config, shape, ram, what=f"a CPU learner of {config.llm_model!r}",
                         device="host", hint="use LoRA (.llm(lora={...})), "
                                             "gradient_checkpointing or a smaller model")
