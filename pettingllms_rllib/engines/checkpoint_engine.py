"""Generating with a loaded team (a checkpoint's trained modules, or a base model): the one
factory ``eval`` and ``serve`` start their engine from.

A team (:class:`Team`, e.g. ``evaluation.Policies``) carries its :class:`~pettingllms_rllib.
engines.spec.EngineSpec`; :func:`start_checkpoint_engine` starts the engine its kind names
(``EngineKind.checkpoint_function``: HF generates with the team's torch modules, vLLM loads
their weights once). Both take prompts already encoded, so every engine sees the same prompt
tokens, and each :meth:`CheckpointEngine.session` takes its own sampling settings.
:func:`prompt_generator` turns a session into the tree sampler's ``generate(module_id,
prompts, num_samples)``: env prompts encoded as the runner's engines encode them (the run's
system prompt first), answers with their prompt's answer prefix.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, Sequence

from pettingllms_rllib.engines import CHECKPOINT_ENGINES, engine_kind
from pettingllms_rllib.engines.base import (Completion, SamplingConfig, encode_requests,
                                            with_answer_prefixes)
from pettingllms_rllib.engines.spec import EngineSpec

__all__ = ["CHECKPOINT_ENGINES", "CheckpointEngine", "GenerateIds", "Team", "prompt_generator",
           "start_checkpoint_engine"]

#: ``generate(module_id, prompt_ids, num_samples)``: ``len(prompt_ids)`` lists of
#: ``num_samples`` completions, in prompt order.
GenerateIds = Callable[[str, Sequence[Sequence[int]], int], list[list[Completion]]]


class Team(Protocol):
    """What an engine needs of a loaded team."""

    tokenizer: Any
    engine_spec: EngineSpec

    def causal_lm(self, module_id: str) -> Any:
        """The module's causal LM, ready to generate (its adapter switched on)."""
        ...

    def module_states(self) -> Mapping[str, Any]:
        """Module id -> its inference-only RLModule state, for engines that hold their own
        copy of the weights; empty for a base model (the weights the engine loads)."""
        ...


class CheckpointEngine(Protocol):
    """Generates for a team's modules."""

    def session(self, sampling: SamplingConfig) -> GenerateIds:
        """A generate function for one batch of requests with the same ``sampling``: its
        calls (an episode's stages, one after another) continue one random stream from
        ``sampling.seed``, so a sampled request sent alone replays exactly."""
        ...


def start_checkpoint_engine(team: Team, engine: str | None = None) -> CheckpointEngine:
    """The engine for ``team``: the kind its spec names, or ``engine`` instead (an unknown or
    non-serving name raises, listing the known ones)."""
    spec = team.engine_spec.with_engine(engine)
    kind = engine_kind(spec.engine)
    if kind.checkpoint_function is None:
        raise ValueError(f"engine {spec.engine!r} does not generate for loaded teams; "
                         f"known: {list(CHECKPOINT_ENGINES)}")
    return kind.function(kind.checkpoint_function)(team, spec)


def prompt_generator(engine: CheckpointEngine, team: Team, sampling: SamplingConfig):
    """The tree sampler's ``generate(module_id, prompts, num_samples)`` over one session."""
    generate_ids = engine.session(sampling)

    def generate(module_id: str, prompts: Sequence[str], num_samples: int):
        return with_answer_prefixes(prompts, generate_ids(module_id, encode_requests(
            team.tokenizer, prompts, num_samples, team.engine_spec.system_prompt),
            num_samples))
    return generate

