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
