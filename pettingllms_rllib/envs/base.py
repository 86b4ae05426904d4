"""The text-env protocol: a PettingZoo ``ParallelEnv`` whose agents talk in text.

Why a base class and not just a convention: AT-GRPO needs three things every task must get
right in the same way, and that are easy to get subtly wrong by hand:

* **Workflow stages.** Roles act sequentially (tool -> planner) or in parallel (coder ||
  tester). Every live agent receives an observation every step, ``infos[agent]["acting"]``
  says who acts in the *next* step, and actions of agents that are not acting are ignored.
  This keeps the plain PettingZoo contract (``parallel_api_test`` passes) while the sampler
  makes no LLM call for idle agents.
* **Parsing as part of the role.** An LLM response is parsed by the agent's role. A response
  that does not parse is still a legal action: it is penalised and flagged in
  ``infos[agent]["parse_error"]``; it never raises.
* **Reward mixing.** ``rewards[agent] = alpha * team + local`` (PettingLLMs, arXiv 2510.11062,
  Sec. 3), with both components in ``infos`` so metrics and ablations can recombine them.

A task subclasses :class:`TextParallelEnv` and implements :meth:`_new_task`,
:meth:`_observe` and :meth:`_apply_stage`. Cloning (``clone()``) defaults to a deep copy,
which also copies the RNG state; tasks holding unpicklable resources override it.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import string
from typing import Any, Callable, Mapping, Sequence

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

logger = logging.getLogger(__name__)

#: Characters allowed in observations and actions: printable ASCII plus whitespace. Prompts
#: are built from these only; LLM actions outside it are still accepted by ``step``.
TEXT_CHARSET = frozenset(string.printable)
DEFAULT_MAX_OBSERVATION_CHARS = 16_384
DEFAULT_MAX_ACTION_CHARS = 16_384
#: Task seeds in [0, TRAIN_SEED_LIMIT) are training instances, seeds >= it evaluation instances
#: (the env runner draws training seeds below it). Tasks whose instances could coincide across
#: seeds (small puzzles, finite datasets) use :func:`split_of_seed` to keep the splits disjoint.
TRAIN_SEED_LIMIT = 1_000_000_000
SPLITS = ("train", "test")

# Keys of ``infos[agent]`` that the text-env protocol defines (module docstring).
#: Whether the agent acts in the next ``step`` (False for everyone once the episode is over).
INFO_ACTING = "acting"
#: The turn the env is in (a turn runs every workflow stage once).
INFO_TURN = "turn"
#: The index of the workflow stage within the turn.
INFO_STAGE = "stage"
#: Why the agent's answer did not parse (None when it parsed; see :func:`parse_error_text`).
INFO_PARSE_ERROR = "parse_error"
#: Whether the task is solved.
INFO_SUCCESS = "success"
#: The team part of the agent's reward (``reward = alpha * team + local``).
INFO_REWARD_TEAM = "reward_team"
#: The agent's own (local) part of its reward.
INFO_REWARD_LOCAL = "reward_local"



def mixed_reward(alpha: float, team: float, local: float) -> float:
    """An agent's reward from its parts, ``alpha * team + local`` (PettingLLMs, arXiv
    2510.11062, Sec. 3): the one place the mixing is written; envs, wrappers, the conformance
    check and stage credit all call it."""
    return float(alpha) * float(team) + float(local)

class EnvContractError(ValueError):
    """An env broke the text-env contract (a reward for an agent it does not have, a NaN
    reward, a non-text observation, a parse error of the wrong type). Raised at the step
    where it happens, naming the agent, the step and the fix; the samplers never retry or
    skip it, since training on it would train on a wrong number."""


def parse_error_text(value: Any, *, agent: str = "?", where: str = "") -> str | None:
    """``infos[agent]["parse_error"]`` as the library reads it: ``None`` when the answer
    parsed (None, False or ""), else the reason (a string as given; True becomes a generic
    reason). Any other type raises :class:`EnvContractError`."""
    if value is None or value is False or value == "":
        return None
    if value is True:
        return "the env reported a parse error"
    if isinstance(value, str):
        return value
    raise EnvContractError(
        f"{where}infos[{agent!r}]['parse_error'] is {type(value).__name__} {value!r}; report "
        "None or False when the answer parsed, a string (the reason) or True when it did not")


def check_step_output(where: str, possible_agents: Sequence[str],
                      observations: Mapping[str, Any], rewards: Mapping[str, Any]) -> None:
    """Raise :class:`EnvContractError` for a reward to an agent the env does not have, a
    reward that is not a finite number, or an observation that is not text. ``where`` names
    the env and the step in the message."""
    known = set(possible_agents)
    for agent, reward in rewards.items():
        if agent not in known:
            raise EnvContractError(
                f"{where}paid a reward to {agent!r}, which is not one of possible_agents "
                f"{sorted(known)}; pay rewards only to the env's agents")
        try:
            value = float(reward)
        except (TypeError, ValueError):
            value = None
        if value is None or not np.isfinite(value):
            raise EnvContractError(
                f"{where}paid {agent!r} the reward {reward!r}; rewards must be finite numbers "
                "(a NaN or inf reward would turn every advantage of its group into NaN)")
    for agent, observation in observations.items():
        if not isinstance(observation, str):
            raise EnvContractError(
                f"{where}returned a {type(observation).__name__} observation for {agent!r}; "
                "observations must be str prompts (render the state as text)")


def task_name(env_id: str, seed: int) -> str:
    """The name of one task instance (a tree root) in records, episodes and transcripts."""
    return f"{env_id}/seed={int(seed)}"


def reset_seed(seed: int | None, options: Mapping[str, Any] | None) -> int | None:
    """The task seed a ``reset(seed, options)`` asks for: ``seed``, else ``options
    ["task_seed"]`` (how RLlib's env runners pass it), else None."""
    if seed is None and options and "task_seed" in options:
        return int(options["task_seed"])
    return seed


def split_of_seed(seed: int | None) -> str:
    """``"train"`` for seeds below :data:`TRAIN_SEED_LIMIT` (and None), else ``"test"``."""
    return "test" if seed is not None and int(seed) >= TRAIN_SEED_LIMIT else "train"


class Prompt(str):
    """An observation text that also carries the start of the answer (``answer_prefix``).

    Why: a ~100M-parameter model learns an answer's fixed start ("Moves:", a code fence) and
    its content together, and the first content it produces in the right format wins every
    group before the content is compared (docs/design.md, "Answer prefixes"). With a prefix,
    every engine puts the prefix's tokens after the chat template's generation prompt, the
    model writes only the rest, and the completion's text is the prefix plus what it wrote:
    the env parses the whole answer, the learner trains only the tokens the model chose.

    A ``Prompt`` is a ``str`` (PettingZoo's ``Text`` space holds it, every caller that only
    reads the text is unchanged); string operations return plain ``str`` without the prefix.
    """

    answer_prefix: str

    def __new__(cls, text: str, answer_prefix: str = ""):
        if not isinstance(answer_prefix, str):
            raise TypeError(f"answer_prefix must be text, got {type(answer_prefix).__name__}")
        prompt = super().__new__(cls, text)
        prompt.answer_prefix = answer_prefix
        return prompt

    def __repr__(self) -> str:
        return f"Prompt({str.__repr__(self)}, answer_prefix={self.answer_prefix!r})"


def answer_prefix_of(prompt: str) -> str:
    """The answer prefix a prompt carries ("" for a plain ``str``)."""
    return getattr(prompt, "answer_prefix", "")


@dataclasses.dataclass(frozen=True)
class ParseResult:
    """A role's reading of one raw LLM response.

    ``value`` is the structured action (task-specific); ``error`` is a short human-readable
    reason when the response could not be parsed (then ``value`` is ``None``).
    """

    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclasses.dataclass(frozen=True)
class Role:
    """One agent's job in a task: its name, what it is asked to do and how to read its answer.

    ``parse`` must never raise on any string; :meth:`safe_parse` enforces that by turning an
    unexpected exception into a flagged parse error (and logging it as a bug in the parser).
    """

    name: str
    description: str
    parse: Callable[[str], ParseResult]

    def safe_parse(self, response: Any) -> ParseResult:
        if not isinstance(response, str):
            return ParseResult(error=f"action is {type(response).__name__}, not text")
        try:
            result = self.parse(response)
        except Exception as exc:  # a parser bug must not crash a training run
            logger.warning("parser of role %r raised %r; scored as a parse error", self.name, exc)
            return ParseResult(error=f"parser raised {type(exc).__name__}")
        if not isinstance(result, ParseResult):
            return ParseResult(error=f"parser returned {type(result).__name__}")
        return result


@dataclasses.dataclass
class StageOutcome:
    """What one workflow stage did, as computed by the task.

    ``local`` holds each *acting* agent's own reward; ``team`` is the shared team reward after
    the stage; ``success`` says whether the task is solved; ``terminated`` ends the episode.
    ``feedback`` is optional per-agent text the task wants to surface in ``infos``.
    """

    local: dict[str, float]
    team: float
    success: bool
    terminated: bool = False
    feedback: dict[str, str] = dataclasses.field(default_factory=dict)


class TextParallelEnv(ParallelEnv):
    """Base class of every text task (see the module docstring for the protocol).

    Subclasses set ``metadata = {"name": "<id>_v<N>"}``, ``possible_agents``, ``roles`` (agent
    -> :class:`Role`) and ``workflow`` (a list of stages, each a tuple of agent ids acting
    together), then implement the three abstract hooks.

    Args:
        alpha: weight of the team reward in each agent's reward (paper: alpha * team + local).
        max_turns: turn budget T; one turn runs every workflow stage once.
        invalid_action_penalty: local reward of a response that does not parse.
    """

    metadata: dict[str, Any] = {"name": "text_env_v0"}
    roles: Mapping[str, Role] = {}
    workflow: Sequence[tuple[str, ...]] = ()
    #: Whether a step can pay an agent that did not act in it (docs/custom_env.md, "The
    #: reward contract"). This base class pays only the acting agents, so the tree sampler
    #: plays candidates on only where stage credit asks for the turn's team outcome.
    pays_idle_agents: bool = False

    def __init__(self, *, alpha: float = 1.0, max_turns: int = 3,
                 invalid_action_penalty: float = -1.0,
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS):
        if int(max_turns) < 1:
            raise ValueError(f"max_turns (T) must be >= 1, got {max_turns!r}")
        self.alpha = float(alpha)
        self.max_turns = int(max_turns)
        self.invalid_action_penalty = float(invalid_action_penalty)
        self._check_declaration()
        self._observation_space = gymnasium.spaces.Text(
            max_length=max_observation_chars, min_length=0, charset="".join(sorted(TEXT_CHARSET)))
        self._action_space = gymnasium.spaces.Text(
            max_length=DEFAULT_MAX_ACTION_CHARS, min_length=0,
            charset="".join(sorted(TEXT_CHARSET)))
        self.agents: list[str] = []
        self.turn = 0
        self.stage_index = 0
        self.task_seed: int | None = None
        self.np_random = np.random.default_rng(0)
        self.last_responses: dict[str, str] = {}

    # ------------------------------------------------------------------ task hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        """Build a fresh task instance (deterministic given ``seed``)."""
        raise NotImplementedError

    def _observe(self, agent: str) -> str:
        """The prompt ``agent`` sees in the current state (include the current state)."""
        raise NotImplementedError

    def _apply_stage(self, stage: tuple[str, ...], parsed: Mapping[str, ParseResult],
                     raw: Mapping[str, str]) -> StageOutcome:
        """Apply the acting agents' parsed actions and score them."""
        raise NotImplementedError

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str) -> gymnasium.spaces.Text:
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Text:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        options = dict(options or {})
        seed = reset_seed(seed, options)
        self.np_random = np.random.default_rng(seed)
        self.task_seed = seed
        self.agents = list(self.possible_agents)
        self.turn = 0
        self.stage_index = 0
        self.last_responses = {}
        self._new_task(seed, options)
        infos = {a: self._base_info(a) for a in self.agents}
        return self.current_observations(), infos

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        stage = self.current_stage
        raw = {a: actions.get(a) for a in stage}
        parsed = {a: self.roles[a].safe_parse(raw[a]) for a in stage}
        raw_text = {a: r if isinstance(r, str) else "" for a, r in raw.items()}
        for agent, result in parsed.items():
            if not result.ok:
                logger.debug("invalid action from %s: %s", agent, result.error)
        outcome = self._apply_stage(stage, parsed, raw_text)
        where = f"{type(self).__name__} (turn {self.turn}, stage {self.stage_index}): "
        strangers = set(outcome.local) - set(stage)
        if strangers:
            raise EnvContractError(
                f"{where}_apply_stage paid local rewards to {sorted(strangers)}, who did not "
                f"act in stage {stage}; a stage pays only its acting agents")
        check_step_output(where, self.possible_agents, {},
                          {**outcome.local, **{a: outcome.team for a in stage}})
        self.last_responses.update(raw_text)

        self.stage_index += 1
        if self.stage_index >= len(self.workflow):
            self.stage_index = 0
            self.turn += 1
        truncated = not outcome.terminated and self.turn >= self.max_turns
        done = outcome.terminated or truncated

        rewards, infos = {}, {}
        for agent in self.agents:
            local = float(outcome.local.get(agent, 0.0)) if agent in stage else 0.0
            team = float(outcome.team) if agent in stage else 0.0
            rewards[agent] = mixed_reward(self.alpha, team, local)
            info = self._base_info(agent)
            info.update({INFO_REWARD_TEAM: team, INFO_REWARD_LOCAL: local,
                         INFO_SUCCESS: bool(outcome.success), "acted": agent in stage,
                         INFO_PARSE_ERROR: parsed[agent].error if agent in stage else None})
            if agent in outcome.feedback:
                info["feedback"] = outcome.feedback[agent]
            if done:
                info[INFO_ACTING] = False
            infos[agent] = info
        observations = self.current_observations()
        terminations = {a: bool(outcome.terminated) for a in self.agents}
        truncations = {a: bool(truncated) for a in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    # ------------------------------------------------------------------ helpers
    @property
    def current_stage(self) -> tuple[str, ...]:
        return tuple(self.workflow[self.stage_index])

    def acting_agents(self) -> tuple[str, ...]:
        """Agents that act in the next ``step`` (empty once the episode is over)."""
        return self.current_stage if self.agents else ()

    def clone(self) -> "TextParallelEnv":
        """An independent env in the same state, RNG included (the AT-GRPO branch contract)."""
        return copy.deepcopy(self)

    def prompt_examples(self) -> dict[str, str]:
        """Agent -> the example answer its current prompt shows ("answer like: ..."), as the
        agent would write it; {} when the prompts show none.

        An example must never solve the instance it is shown with: a policy that copies it
        would otherwise be rewarded for copying instead of for the skill (the trained 135M
        model learned exactly that). ``tests/envs/test_prompt_examples.py`` plays every
        shipped CPU config's examples as the whole team's answers on 200 training seeds.
        """
        return {}

    def answer_prefix(self, agent: str) -> str:
        """The fixed start of ``agent``'s answer, written for the model, which continues it
        ("" = none, the default). Observations carry it as :class:`Prompt`; the action the
        env then receives is the whole answer, prefix included."""
        return ""

    def current_observations(self) -> dict[str, str]:
        """Every live agent's prompt in the current state (what ``reset``/``step`` return):
        a :class:`Prompt` where the agent's answer has a prefix, else a plain ``str``."""
        observations = {}
        for agent in self.agents:
            text = self._observe(agent)
            if not isinstance(text, str):
                raise EnvContractError(
                    f"{type(self).__name__}._observe({agent!r}) returned a "
                    f"{type(text).__name__} (turn {self.turn}, stage {self.stage_index}); "
                    "observations must be str prompts")
            text, prefix = self._clip_observation(text), self.answer_prefix(agent)
            observations[agent] = Prompt(text, prefix) if prefix else text
        return observations

    def _clip_observation(self, text: str) -> str:
        text = "".join(c if c in TEXT_CHARSET else "?" for c in text)
        limit = self._observation_space.max_length
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def _base_info(self, agent: str) -> dict[str, Any]:
        return {INFO_ACTING: agent in self.current_stage, INFO_TURN: self.turn,
                INFO_STAGE: self.stage_index, "role": self.roles[agent].name,
                "task_seed": self.task_seed}

    def _check_declaration(self) -> None:
        name = type(self).__name__
        agents = list(getattr(self, "possible_agents", []))
        if not agents:
            raise TypeError(f"{name} must declare possible_agents")
        missing = [a for a in agents if a not in self.roles]
        if missing:
            raise TypeError(f"{name}: agents {missing} have no Role in `roles`")
        if not self.workflow:
            raise TypeError(f"{name} must declare a non-empty workflow of stages")
        for stage in self.workflow:
            unknown = [a for a in stage if a not in agents]
            if not stage or unknown:
                raise TypeError(f"{name}: workflow stage {stage!r} names unknown agents "
                                f"{unknown}; known: {agents}")
