"""What generates for a team's modules, as data: the one description every generating part of
the library starts its engine from.

An :class:`EngineSpec` is read from a run's config (an ``ATGRPOConfig``'s attributes, or the
config dict a checkpoint stores: both have the same keys), written beside every checkpoint
(``checkpoints.ENGINE_SPEC_FILE``) and read back from it. The env runner, ``eval`` and
``serve`` start their engines from it (``engines.start_module_engine``,
``engines.checkpoint_engine.start_checkpoint_engine``), so none of them takes the whole
config, and an engine kind is chosen by its name in the spec, never compared outside
``engines/``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from pettingllms_rllib.models.memory import lora_kwargs

__all__ = ["EngineSpec", "SPEC_VERSION"]

#: Bumped when a field changes meaning; :meth:`EngineSpec.from_json` refuses other versions.
SPEC_VERSION = 1


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """The model, its numerics, the engine kind, sampling and adapters of one team.

    Attributes:
        engine: the engine kind's name (``engines.ENGINE_KINDS``).
        policies: the module ids, sorted.
        model: the model's ``ModelSpec`` fields (``models/loading.py``).
        model_dtype: ``"auto"`` or a dtype name (``models/precision.py``).
        lora: the full peft ``LoraConfig`` kwargs of every module's adapter (library defaults
            under the run's ``lora``), or None for full models.
        system_prompt: the system message before every prompt, or None.
        max_new_tokens: the run's cap on tokens per response.
        temperature: the run's sampling temperature.
        generation_batch_size: most sequences per generate call (None: no split).
        num_gpus_per_env_runner: GPUs of an env runner (0: the HF engine stays on the CPU).
        vllm_gpu_memory_utilization, vllm_kv_cache_gib, vllm_max_model_len,
        vllm_enforce_eager, vllm_engine_kwargs, vllm_weight_sync_dir: the run's vLLM
            settings (their meaning: ``ATGRPOConfig.llm``); None where the config had none.
    """

    engine: str
    policies: tuple[str, ...]
    model: dict[str, Any]
    model_dtype: str
    lora: dict[str, Any] | None
    system_prompt: str | None
    max_new_tokens: int
    temperature: float
    generation_batch_size: int | None
    num_gpus_per_env_runner: float
    vllm_gpu_memory_utilization: float | None
    vllm_kv_cache_gib: float | None
    vllm_max_model_len: int | None
    vllm_enforce_eager: bool | None
    vllm_engine_kwargs: dict[str, Any] | None
    vllm_weight_sync_dir: str | None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "EngineSpec":
        """The spec of a run config: ``vars(ATGRPOConfig)`` or a checkpoint's config dict."""
        from pettingllms_rllib.models.loading import ModelSpec

        return cls(
            engine=str(config.get("engine") or "hf"),
            policies=tuple(sorted(config.get("policies") or ())),
            model=ModelSpec.fields_of_config(config),
            model_dtype=str(config["model_dtype"]),
            lora=lora_kwargs(config.get("lora")),
            system_prompt=config.get("system_prompt"),
            max_new_tokens=int(config["max_new_tokens"]),
            temperature=float(config["temperature"]),
            generation_batch_size=config.get("generation_batch_size"),
            num_gpus_per_env_runner=float(config.get("num_gpus_per_env_runner") or 0),
            **{field.name: config.get(field.name) for field in dataclasses.fields(cls)
               if field.name.startswith("vllm_")})

    @classmethod
    def for_base_model(cls, model: Mapping[str, Any], policies) -> "EngineSpec":
        """An untrained model acting for ``policies`` on the HF engine: no adapters, no system
        prompt, :class:`~pettingllms_rllib.engines.base.SamplingConfig`'s default sampling,
        each engine's own defaults for its settings."""
        from pettingllms_rllib.engines.base import SamplingConfig

        default = SamplingConfig()
        return cls(engine="hf", policies=tuple(sorted(policies)), model=dict(model),
                   model_dtype=str(model.get("dtype", "float32")), lora=None,
                   system_prompt=None, max_new_tokens=default.max_new_tokens,
                   temperature=default.temperature, generation_batch_size=None,
                   num_gpus_per_env_runner=0.0, vllm_gpu_memory_utilization=None,
                   vllm_kv_cache_gib=None, vllm_max_model_len=None, vllm_enforce_eager=None,
                   vllm_engine_kwargs=None, vllm_weight_sync_dir=None)

    @classmethod
    def of_checkpoint(cls, spec_json: str | None, config: Mapping[str, Any]) -> "EngineSpec":
        """A checkpoint's spec: the one it carries (``checkpoints.read_engine_spec``), else,
        for a checkpoint written before specs were saved, the one its config describes."""
        return cls.from_config(config) if spec_json is None else cls.from_json(spec_json)

    def with_engine(self, engine: str | None) -> "EngineSpec":
        """The same team on another engine kind (None: unchanged)."""
        return self if engine is None else dataclasses.replace(self, engine=engine)

    # The names engines read settings by (the run config's names), so an engine started by a
    # runner from an ``ATGRPOConfig`` reads a spec the same way.
    @property
    def lora_kwargs(self) -> dict[str, Any] | None:
        return None if self.lora is None else dict(self.lora)

    @property
    def model_spec_dict(self) -> dict[str, Any]:
        return dict(self.model)

    # ------------------------------------------------------------------ files
    def to_json(self) -> str:
        return json.dumps({"version": SPEC_VERSION, **dataclasses.asdict(self)}, indent=2,
                          sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> "EngineSpec":
        """The spec written by :meth:`to_json`; another version raises, naming both."""
        values = json.loads(text)
        version = values.pop("version", None)
        if version != SPEC_VERSION:
            raise ValueError(f"engine spec version {version!r} is not readable by this "
                             f"library (it reads version {SPEC_VERSION})")
        values["policies"] = tuple(values["policies"])
        return cls(**values)
