"""Generation engines behind one protocol (``engines/base.py``): the HF engine on any torch
device, vLLM where it is installed (imported only when chosen)."""

from __future__ import annotations

from typing import Any, Callable

#: Engine name (``ATGRPOConfig.llm(engine=...)``) -> "module:function" that starts a runner's
#: :class:`~pettingllms_rllib.engines.base.ModuleEngine`.
MODULE_ENGINES = {
    "hf": "pettingllms_rllib.engines.hf_engine:start_hf_module_engine",
    "vllm": "pettingllms_rllib.engines.vllm_engine:start_vllm_module_engine",
}


#: Engines that generate with the learner's own torch modules and code, so that in fp32 their
#: log-probs are the learner's up to summation order (~1e-5); any other (vLLM's kernels) is a
#: different numeric path whose log-probs the learner recomputes (``algorithms/learner.py``).
ENGINES_SHARING_THE_LEARNERS_NUMERICS = frozenset({"hf"})


def behaviour_logprobs_are_exact(engine: str, model_dtype: str,
                                 autocast_dtype: str | None) -> bool:
    """Whether the engine's log-probs can stand as the PPO ratio's denominator: the engine
    shares the learner's numerics and everything computes in fp32 (``model_dtype`` resolved
    on this process's device)."""
    from pettingllms_rllib.models.precision import resolve_model_dtype

    return (engine in ENGINES_SHARING_THE_LEARNERS_NUMERICS and autocast_dtype is None
            and resolve_model_dtype(model_dtype).exact)


def start_module_engine(name: str, config, tokenizer, sampling,
                        build_modules: Callable[[], Any]):
    """Start the engine called ``name`` for one env runner. ``build_modules()`` returns the
    torch inference copies of the modules, for engines that generate with them."""
    import importlib

    if name not in MODULE_ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(MODULE_ENGINES)}")
    module_name, _, function = MODULE_ENGINES[name].partition(":")
    start = getattr(importlib.import_module(module_name), function)
    return start(config, tokenizer, sampling, build_modules)
