"""What the team server generates with: the checkpoint's torch modules (``hf``) or vLLM holding
the same weights (``vllm``), behind one call that takes each request's own sampling settings.

Both take prompts already encoded (``engines/base.encode_chat_prompt`` for env prompts, the chat
template for longer chats), so the two agree on every prompt token.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import Any, Callable, Protocol, Sequence

from pettingllms_rllib.engines import ENGINE_KINDS, engine_kind
from pettingllms_rllib.engines.base import Completion, SamplingConfig

logger = logging.getLogger(__name__)

#: ``serve --engine`` names: the engines whose kind names a class of this module.
SERVING_ENGINES = tuple(name for name, kind in ENGINE_KINDS.items() if kind.serving_engine)


#: ``generate(module_id, prompt_ids, num_samples)``: ``len(prompt_ids)`` lists of
#: ``num_samples`` completions, in prompt order.
GenerateIds = Callable[[str, Sequence[Sequence[int]], int], list[list[Completion]]]


class ServingEngine(Protocol):
    """Generates for the checkpoint's modules."""

    def session(self, sampling: SamplingConfig) -> GenerateIds:
        """A generate function for one batch of requests with the same ``sampling``: its
        calls (an episode's stages, one after another) continue one random stream from
        ``sampling.seed``, so a sampled request sent alone replays exactly."""
        ...


class HFServingEngine:
    """The checkpoint's modules generate themselves (``HFEngine``: CPU, or the replica's GPU);
    this is what ``eval`` generates with, so served greedy episodes are the evaluated ones."""

    def __init__(self, policies, config: Any = None):
        self.policies = policies

    def session(self, sampling: SamplingConfig) -> GenerateIds:
        from pettingllms_rllib.engines.hf_engine import HFEngine
        from pettingllms_rllib.evaluation.evaluate import causal_lm_of

        engine = HFEngine(self.policies.tokenizer, sampling)  # one generator for the session

        def generate(module_id, prompt_ids, num_samples):
            return engine.generate_from_ids(causal_lm_of(self.policies.modules[module_id]),
                                            prompt_ids, num_samples)
        return generate


class VLLMServingEngine:
    """vLLM serves the checkpoint's weights, started as a training run's runner starts it
    (``start_vllm_engines``): one engine with one LoRA adapter per module, or one engine per
    module's full model. The modules' states are loaded once, as weights version 1.

    Args:
        policies: the checkpoint's modules (their states are what vLLM loads).
        config: the run's ``ATGRPOConfig`` (model, LoRA and vLLM settings).
    """

    def __init__(self, policies, config):
        from pettingllms_rllib.engines.vllm_engine import (VLLMModuleEngine, require_vllm,
                                                           start_vllm_engines)

        require_vllm()
        sampling = SamplingConfig(max_new_tokens=int(config.max_new_tokens),
                                  temperature=float(config.temperature), seed=0)
        self.module_engine = VLLMModuleEngine(
            start_vllm_engines(config, policies.tokenizer, sampling), config.lora_kwargs)
        self.module_engine.load_weights(
            {module_id: module.rl_module.get_state(inference_only=True)
             for module_id, module in policies.modules.items()}, version=1)
        logger.info("vLLM serves modules %s", sorted(policies.modules))

    def session(self, sampling: SamplingConfig) -> GenerateIds:
        calls = itertools.count()
        lora = self.module_engine.lora_kwargs is not None

        def generate(module_id, prompt_ids, num_samples):
            # vLLM seeds each request: the session's n-th call draws with seed + n.
            call = dataclasses.replace(sampling, seed=None if sampling.seed is None
                                       else int(sampling.seed) + next(calls))
            return self.module_engine.engines[module_id].generate_from_ids(
                module_id if lora else None, prompt_ids, num_samples, call)
        return generate


def start_serving_engine(name: str, policies, config: Any) -> ServingEngine:
    """The engine called ``name`` (one of :data:`SERVING_ENGINES`) over ``policies``: the class
    its kind names (``engines/__init__.py``), given the run's config where it needs one."""
    if name not in SERVING_ENGINES:
        raise ValueError(f"unknown serving engine {name!r}; known: {list(SERVING_ENGINES)}")
    return globals()[engine_kind(name).serving_engine](policies, config)
