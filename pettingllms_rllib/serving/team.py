"""The trained team behind the server, without Ray: episodes and chat completions in batches.

The HTTP layer (``serving/app.py``) checks each request, prepares it here (an env reset to its
instance, a chat encoded and length-checked: a bad request fails alone, before any batch), and
hands whole batches of prepared requests to :meth:`TeamService.play` and
:meth:`TeamService.complete`. A batch costs what one request costs plus a little:

* episodes with the same sampling settings play in one :class:`TreeSampler` run, so every
  stage is one engine call per module over all of the batch's episodes (as ``eval`` batches
  its evaluation instances);
* chats for the same module and settings are one engine call over all of their prompts.

Episodes are played exactly as ``pettingllms-rllib eval`` plays them (same sampler, engine,
system prompt and transcript entries), so a greedy episode here is the one ``eval`` reports for
the same seed.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import torch

from pettingllms_rllib import checkpoints
from pettingllms_rllib.core.tree_sampler import TreeSampler
from pettingllms_rllib.engines.base import SamplingConfig, encode_chat, encode_chat_prompt
from pettingllms_rllib.engines.checkpoint_engine import (CheckpointEngine, prompt_generator,
                                                         start_checkpoint_engine)
from pettingllms_rllib.envs.base import task_name
from pettingllms_rllib.envs.registry import make_text_env, registered_env_ids
from pettingllms_rllib.evaluation import evaluate as ev
from pettingllms_rllib.serving.requests import (ChatRequest, EpisodeRequest, RequestError,
                                                ServedTeam, check_length)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class PreparedEpisode:
    """An episode request with its env reset to the requested instance."""

    request: EpisodeRequest
    root: Any


@dataclasses.dataclass
class PreparedChat:
    """A chat request with its prompt encoded as the trained module sees it."""

    request: ChatRequest
    prompt_ids: list[int]


class TeamService:
    """Plays episodes and completes chats with a checkpoint's modules.

    Args:
        policies: the trained modules and the agent -> module mapping (``evaluate.Policies``).
        team: what requests are checked against (``requests.ServedTeam``).
        engine: what generates (``engines/checkpoint_engine.py``); default: the one the
            policies' engine spec names, as ``eval`` generates.
    """

    def __init__(self, policies: ev.Policies, team: ServedTeam,
                 engine: CheckpointEngine | None = None):
        self.policies = policies
        self.team = team
        self.engine = engine or start_checkpoint_engine(policies)
        # One batch at a time touches the modules: a LoRA module switches the shared base's
        # active adapter, so an episode batch and a chat batch must not interleave.
        self._lock = threading.Lock()

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path, *, engine: str = "hf") -> "TeamService":
        """Load every module of a checkpoint (or the newest one of a trial or one-trial
        experiment folder) with the mapping it was trained with; ``engine`` names what
        generates (:data:`~pettingllms_rllib.engines.CHECKPOINT_ENGINES`)."""
        checkpoint = checkpoints.resolve(checkpoint)
        config = checkpoints.read_config(checkpoint)
        policies = ev.checkpoint_policies(checkpoint, config)
        causal_lm = ev.causal_lm_of(next(iter(policies.modules.values())))
        team = ServedTeam(
            base_model=str(config["llm_model"]), mapping=dict(policies.mapping),
            env=config["env"], env_config=dict(config["env_config"] or {}),
            known_envs=registered_env_ids(), temperature=float(config["temperature"]),
            max_new_tokens=int(config["max_new_tokens"]),
            max_positions=int(causal_lm.config.max_position_embeddings))
        logger.info("serving %s with engine %r: agents %s", policies.source, engine,
                    team.mapping)
        return cls(policies, team, start_checkpoint_engine(policies, engine))

    # ------------------------------------------------------------------ per request

    def prepare_episode(self, request: EpisodeRequest) -> PreparedEpisode:
        """Build the env and reset it to the request's instance; refusals name the field."""
        try:
            env = make_text_env(request.env, request.env_config)
        except Exception as exc:  # a bad key or value of the user's env_config
            raise RequestError("env_config", f"{type(exc).__name__}: {exc}") from exc
        try:
            self.policies.check_roles(env.possible_agents)
        except ev.RoleMismatchError as exc:
            raise RequestError("env", str(exc), status=422) from exc
        try:
            env.reset(seed=request.seed, options=dict(request.options or {}))
        except Exception as exc:
            field = "options" if request.options else "seed"
            raise RequestError(field, f"the env refused this instance: "
                                      f"{type(exc).__name__}: {exc}") from exc
        return PreparedEpisode(request, env)

    def prepare_chat(self, request: ChatRequest) -> PreparedChat:
        """Encode the chat as the trained module saw its prompts (the training run's system
        prompt first when the chat brings none) and check it fits the model's context."""
        messages = list(request.messages)
        tokenizer = self.policies.tokenizer
        system = [m["content"] for m in messages if m["role"] == "system"]
        rest = [m for m in messages if m["role"] != "system"]
        if len(system) <= 1 and len(rest) == 1 and rest[0]["role"] == "user":
            # Exactly what the engines encode for an env's prompt (``encode_chat_prompt``).
            ids = encode_chat_prompt(tokenizer, rest[0]["content"],
                                     system[0] if system else self.policies.system_prompt)
        elif getattr(tokenizer, "chat_template", None):
            if not system and self.policies.system_prompt is not None:
                messages.insert(0, {"role": "system", "content": self.policies.system_prompt})
            ids = encode_chat(tokenizer, messages)
        else:
            raise RequestError("messages", "this model has no chat template: send one user "
                                           "message (and at most one system message)")
        check_length(len(ids), request.max_tokens, self.team.max_positions, field="messages")
        return PreparedChat(request, ids)

    # ------------------------------------------------------------------ batches

    def play(self, batch: Sequence[PreparedEpisode]) -> list[dict[str, Any]]:
        """Play every episode of ``batch``; one result per episode, in order."""
        results: list[dict[str, Any] | None] = [None] * len(batch)
        for indices in _groups_by_sampling_key(batch):
            first = batch[indices[0]].request
            sampler = TreeSampler(self._generate_fn(first), self.policies.mapping.__getitem__,
                                  num_branches=first.search)
            roots = {str(index): batch[index].root for index in indices}
            with self._lock, torch.no_grad():
                played = sampler.run(roots)
            for index in indices:
                results[index] = self._episode_result(batch[index], str(index), played)
        return results

    def complete(self, batch: Sequence[PreparedChat]) -> list[dict[str, Any]]:
        """Complete every chat of ``batch``; one OpenAI chat completion per chat, in order."""
        results: list[dict[str, Any] | None] = [None] * len(batch)
        for indices in _groups_by_sampling_key(batch):
            first = batch[indices[0]].request
            generate = self.engine.session(SamplingConfig(
                max_new_tokens=first.max_tokens, temperature=first.temperature or 1.0,
                seed=first.seed, greedy=first.temperature == 0))
            with self._lock:
                completions = generate(first.module_id,
                                       [batch[index].prompt_ids for index in indices], first.n)
            for index, choices in zip(indices, completions):
                results[index] = _chat_completion(batch[index], choices)
        return results

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``: every name an agent answers to."""
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "pettingllms-rllib",
             "root": self.team.base_model, "agent": agent,
             "module": self.team.mapping[agent]}
            for name, agent in sorted(self.team.model_names().items())]}

    # ------------------------------------------------------------------ internals

    def _generate_fn(self, request: EpisodeRequest):
        """The tree sampler's generate function: env prompts encoded as every engine encodes
        them (the run's system prompt first), then the serving engine."""
        return prompt_generator(self.engine, self.policies, SamplingConfig(
            max_new_tokens=request.max_new_tokens, temperature=request.temperature,
            seed=request.sampling_seed, greedy=request.decoding == "greedy"))

    def _episode_result(self, prepared: PreparedEpisode, key: str, played) -> dict[str, Any]:
        request, root = prepared.request, prepared.root
        name = task_name(request.env, request.seed)
        if key in played.dropped_tasks:
            return {"error": {"message": f"the env raised while playing {name} (the server "
                                         "log has the traceback)", "type": "env_error",
                              "param": None, "code": 500}}
        (episode,) = [e for e in played.episodes if e.task == key]
        transcript = []
        for record in played.records:
            if record.group_key.task == key:
                entry = ev.transcript_entry(record, 0, root)
                entry["task"] = name
                transcript.append(entry)
        return {"env": request.env, "env_config": dict(request.env_config),
                "seed": request.seed, "task": name, "success": episode.success,
                "turns": episode.num_turns, "stages": episode.num_stages,
                "agent_return": episode.agent_return,
                "reward_team": episode.agent_reward_team,
                "reward_local": episode.agent_reward_local,
                "parse_errors": episode.parse_errors,
                "mapping": dict(self.policies.mapping), "search": request.search,
                "decoding": request.decoding, "transcript": transcript}


def _groups_by_sampling_key(batch: Sequence[PreparedEpisode | PreparedChat]) -> list[list[int]]:
    """Indices of ``batch`` that one sampler run or engine call serves together, in order."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for index, prepared in enumerate(batch):
        groups[prepared.request.sampling_key].append(index)
    return list(groups.values())


def _chat_completion(prepared: PreparedChat, choices) -> dict[str, Any]:
    completion_tokens = sum(len(c.response_ids) for c in choices)
    prompt_tokens = len(prepared.prompt_ids)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": prepared.request.model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                     "finish_reason": c.finish_reason} for i, c in enumerate(choices)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
