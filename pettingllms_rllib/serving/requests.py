"""What the team server accepts: JSON bodies checked field by field into typed requests.

Pure functions (no Ray, no model), so every refusal is tested on its own. A refusal is a
:class:`RequestError`: the HTTP status, the field at fault and what it accepts, so a client
fixes its request from the message alone. The error body follows the OpenAI API's shape
(``{"error": {"message", "type", "param", "code"}}``), which clients of
``/v1/chat/completions`` already parse.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Sequence

DECODINGS = ("greedy", "sample")
CHAT_ROLES = ("system", "user", "assistant")
#: Most candidates per turn a request may ask for (``search``) or choices per chat (``n``):
#: each is a decoded sequence, so this bounds one request's share of a batch.
MAX_BRANCHES = 16


class RequestError(ValueError):
    """A request the server refuses: ``status`` (4xx), the ``field`` at fault, a message."""

    def __init__(self, field: str, message: str, *, status: int = 400):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status

    def body(self) -> dict[str, Any]:
        """The JSON error body (OpenAI's shape; ``param`` names the field)."""
        kind = "not_found_error" if self.status == 404 else "invalid_request_error"
        return {"error": {"message": str(self), "type": kind, "param": self.field,
                          "code": self.status}}


@dataclasses.dataclass(frozen=True)
class EpisodeRequest:
    """One team episode to play (``POST /v1/episodes``).

    Attributes:
        env: registered text env id.
        env_config: the env's keyword arguments.
        seed: the task instance (``reset(seed=...)``); the same seed gives the same instance
            as in ``pettingllms-rllib eval`` (``--first-seed``).
        options: passed to ``reset(options=...)`` (a task instance the env accepts that way).
        search: K candidates per agent and turn, the best (scored by the env) continues;
            1 is a plain rollout (``eval --search --num-branches K``).
        decoding: "greedy" or "sample"; search needs "sample".
        temperature: sampling temperature.
        max_new_tokens: response cap per turn.
        sampling_seed: seed of the sampler (sampled episodes sent alone replay exactly).
    """

    env: str
    env_config: Mapping[str, Any]
    seed: int
    options: Mapping[str, Any] | None
    search: int
    decoding: str
    temperature: float
    max_new_tokens: int
    sampling_seed: int

    @property
    def sampling_key(self) -> tuple:
        """Requests with equal keys share one batched tree sampler."""
        return (self.search, self.decoding, self.temperature, self.max_new_tokens,
                self.sampling_seed)


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """One OpenAI-style chat completion for one trained agent (``POST /v1/chat/completions``).

    Attributes:
        model: the name the client used (an agent id or ``<base>:<agent>``).
        agent: the agent it names; ``module_id`` is the module that agent was trained as.
        messages: the chat, ``[{"role", "content"}]``.
        max_tokens: response cap.
        temperature: 0 decodes greedily.
        n: choices to return.
        seed: sampler seed.
    """

    model: str
    agent: str
    module_id: str
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int
    temperature: float
    n: int
    seed: int

    @property
    def sampling_key(self) -> tuple:
        """Requests with equal keys share one batched engine call."""
        return (self.module_id, self.max_tokens, self.temperature, self.n, self.seed)


@dataclasses.dataclass(frozen=True)
class ServedTeam:
    """What the server knows of the team it serves, for checking requests against it.

    Attributes:
        base_model: the base model's name (``<base>:<agent>`` model names use it).
        mapping: agent id -> module id, as trained.
        env / env_config: the task the team was trained on (the defaults of an episode).
        known_envs: every registered env id.
        temperature / max_new_tokens: the training run's sampling settings (defaults).
        max_positions: the model's context length (prompt + response tokens).
    """

    base_model: str
    mapping: Mapping[str, str]
    env: str
    env_config: Mapping[str, Any]
    known_envs: Sequence[str]
    temperature: float
    max_new_tokens: int
    max_positions: int

    def model_names(self) -> dict[str, str]:
        """Every name ``model`` may take -> the agent it names."""
        names = {agent: agent for agent in self.mapping}
        names.update({f"{self.base_model}:{agent}": agent for agent in self.mapping})
        return names


def decode_json(raw: bytes) -> Any:
    """The request body as JSON; malformed JSON is a 400 naming the body."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError("body", f"not valid JSON ({exc})") from exc


def parse_episode_request(body: Any, team: ServedTeam) -> EpisodeRequest:
    """Check ``body`` of ``POST /v1/episodes``; the env defaults to the trained one, and its
    ``env_config`` to the trained config updated by the request's keys."""
    fields = _object(body, ("env", "env_config", "seed", "options", "search", "decoding",
                            "temperature", "max_new_tokens", "sampling_seed"))
    env = fields.get("env", team.env)
    if not isinstance(env, str) or env not in team.known_envs:
        raise RequestError("env", f"unknown env {env!r}; accepted: {sorted(team.known_envs)}")
    env_config = fields.get("env_config", {})
    if not isinstance(env_config, dict):
        raise RequestError("env_config", f"must be an object of the env's keyword arguments, "
                                         f"got {type(env_config).__name__}")
    if env == team.env:
        env_config = {**team.env_config, **env_config}
    if "seed" not in fields:
        raise RequestError("seed", "required: the task instance to play (an integer >= 0)")
    seed = _integer(fields, "seed", minimum=0)
    options = fields.get("options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("options", f"must be an object (reset options), got "
                                      f"{type(options).__name__}")
    search = _integer(fields, "search", minimum=1, maximum=MAX_BRANCHES, default=1)
    decoding = fields.get("decoding", "greedy" if search == 1 else "sample")
    if decoding not in DECODINGS:
        raise RequestError("decoding", f"{decoding!r}; accepted: {list(DECODINGS)}")
    if search > 1 and decoding == "greedy":
        raise RequestError("search", f"search={search} compares {search} different "
                                     "candidates: use decoding='sample' (or search=1)")
    return EpisodeRequest(
        env=env, env_config=env_config, seed=seed, options=options, search=search,
        decoding=decoding,
        temperature=_positive_number(fields, "temperature", team.temperature),
        max_new_tokens=_integer(fields, "max_new_tokens", minimum=1,
                                maximum=team.max_positions - 1, default=team.max_new_tokens),
        sampling_seed=_integer(fields, "sampling_seed", minimum=0, default=0))


def parse_chat_request(body: Any, team: ServedTeam) -> ChatRequest:
    """Check ``body`` of ``POST /v1/chat/completions``. ``model`` names a trained agent; a
    ``temperature`` of 0 decodes greedily; the defaults are the training run's."""
    fields = _object(body, ("model", "messages", "max_tokens", "max_completion_tokens",
                            "temperature", "n", "seed", "stream", "user"))
    names = team.model_names()
    model = fields.get("model")
    if model not in names:
        raise RequestError("model", f"unknown model {model!r}; accepted: {sorted(names)}",
                           status=404 if isinstance(model, str) else 400)
    if fields.get("stream"):
        raise RequestError("stream", "streaming is not supported; send stream=false")
    messages = fields.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages", "must be a non-empty list of {role, content} objects")
    for index, message in enumerate(messages):
        if (not isinstance(message, dict) or message.get("role") not in CHAT_ROLES
                or not isinstance(message.get("content"), str)):
            raise RequestError(f"messages[{index}]", f"must be {{role, content}} with role in "
                                                     f"{list(CHAT_ROLES)} and text content")
    cap_field = "max_completion_tokens" if "max_completion_tokens" in fields else "max_tokens"
    temperature = fields.get("temperature", team.temperature)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not 0 <= temperature <= 100:
        raise RequestError("temperature", f"must be a number in [0, 100] (0 = greedy), got "
                                          f"{temperature!r}")
    agent = names[model]
    return ChatRequest(
        model=model, agent=agent, module_id=team.mapping[agent],
        messages=tuple({"role": m["role"], "content": m["content"]} for m in messages),
        max_tokens=_integer(fields, cap_field, minimum=1, maximum=team.max_positions - 1,
                            default=team.max_new_tokens),
        temperature=float(temperature),
        n=_integer(fields, "n", minimum=1, maximum=MAX_BRANCHES, default=1),
        seed=_integer(fields, "seed", minimum=0, default=0))


def check_length(prompt_tokens: int, max_new_tokens: int, max_positions: int, *,
                 field: str) -> None:
    """A prompt plus its response cap must fit the model's context."""
    if prompt_tokens + max_new_tokens > max_positions:
        raise RequestError(field, f"{prompt_tokens} prompt tokens + {max_new_tokens} new tokens "
                                  f"exceed the model's context of {max_positions} tokens")


def _object(body: Any, accepted: Sequence[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError("body", f"must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(accepted))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; accepted: {sorted(accepted)}")
    return body


def _integer(fields: Mapping[str, Any], name: str, *, minimum: int,
             maximum: int | None = None, default: int | None = None) -> int:
    value = fields.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum \
            or (maximum is not None and value > maximum):
        bound = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
        raise RequestError(name, f"must be {bound}, got {value!r}")
    return value


def _positive_number(fields: Mapping[str, Any], name: str, default: float) -> float:
    value = fields.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
        raise RequestError(name, f"must be a number in (0, 100], got {value!r}")
    return float(value)
