"""Plain PettingZoo envs as text envs, without a rewrite.

A user who already has a PettingZoo env with text observations and actions should not have to
port it to :class:`~pettingllms_rllib.envs.base.TextParallelEnv`'s hooks. The wrappers here
read the protocol's pieces from what a plain env already returns:

* **who acts**: ``infos[agent]["acting"]`` when the env sets it, else every live agent acts
  (a parallel stage); for an AEC env, ``agent_selection`` (one agent per stage);
* **reward parts**: ``infos[agent]["reward_team"]`` / ``["reward_local"]`` when present, else
  the whole reward counts as local (team 0), so ``alpha * team + local`` is the env's reward;
* **parse errors**: ``infos[agent]["parse_error"]`` when present: None, False or "" (it
  parsed), True or a reason string (it did not); else none is known;
* **success**: ``infos[agent]["success"]`` when present (else False);
* **turn and stage** (AT-GRPO's group key is (task, agent, turn, stage)): ``infos[agent]
  ["turn"]`` and ``["stage"]`` when the env reports them; else inferred from who acts: a
  stage is one step, and a new turn starts when an agent that already acted in this turn
  acts again (so roles acting one after another share a turn, and agents that all act on
  every step make every step a turn); with ``turn`` reported alone, the stage counts the
  steps since the turn changed;
* **rewards paid to idle agents**: kept, with their team/local parts (the reward contract in
  docs/custom_env.md: they belong to the agent's most recent action);
* **clones** (tree sampling scores each of K candidates on its own copy): the env's
  ``clone()`` when it defines one, else a deep copy, checked when the wrapper is built.

``wrap_parallel_env(creator)`` and ``wrap_aec_env(creator)`` return creators for
:func:`~pettingllms_rllib.envs.registry.register_text_env`. PettingZoo's ``aec_to_parallel``
is not used for AEC envs: it takes every agent's action for a cycle up front, so a later
agent would answer before seeing what an earlier one said; here one AEC step is one stage.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping

import gymnasium
import numpy as np
from pettingzoo import AECEnv, ParallelEnv

from pettingllms_rllib.envs.base import (INFO_ACTING, INFO_PARSE_ERROR, INFO_REWARD_LOCAL,
                                         INFO_REWARD_TEAM, INFO_STAGE, INFO_SUCCESS, INFO_TURN,
                                         check_step_output, mixed_reward, parse_error_text)

#: What the sampler and the conformance checks use of a text env, beyond PettingZoo's API.
PROTOCOL_ATTRIBUTES = ("acting_agents", "clone", "current_observations", "prompt_examples",
                       "turn", "stage_index", "alpha")


class NotATextEnvError(TypeError):
    """An env that cannot be seen as a text env; the message says what is missing and how to
    supply it."""


def missing_protocol_attributes(env: Any) -> list[str]:
    """The names of :data:`PROTOCOL_ATTRIBUTES` that ``env`` lacks (empty for a text env)."""
    return [name for name in PROTOCOL_ATTRIBUTES if not hasattr(env, name)]


def require_text_env(env: Any) -> None:
    """Raise :class:`NotATextEnvError` unless ``env`` honours the text-env protocol; for a
    plain PettingZoo env the message names the wrapper that makes it one."""
    missing = missing_protocol_attributes(env)
    if not missing:
        return
    cls = env if isinstance(env, type) else type(env)
    wrapper = "wrap_aec_env" if issubclass(cls, AECEnv) else "wrap_parallel_env"
    raise NotATextEnvError(
        f"{cls.__name__} is not a text env: it lacks {', '.join(missing)} (the text-env "
        f"protocol). A plain PettingZoo env needs no rewrite: use {wrapper}({cls.__name__}) "
        "(pettingllms_rllib.envs; docs/custom_env.md)")


def _check_text_spaces(env: Any, agents, kind: str) -> None:
    for agent in agents:
        for what in ("observation_space", "action_space"):
            space = getattr(env, what)(agent)
            if not isinstance(space, gymnasium.spaces.Text):
                raise NotATextEnvError(
                    f"{kind} {type(env).__name__}: {what}({agent!r}) is "
                    f"{type(space).__name__}, not gymnasium.spaces.Text; AT-GRPO agents read "
                    "and write text")


def _check_text_observations(env: Any, observations: Mapping[str, Any]) -> None:
    wrong = {agent: type(obs).__name__ for agent, obs in observations.items()
             if not isinstance(obs, str)}
    if wrong:
        raise NotATextEnvError(f"{type(env).__name__} returned non-text observations {wrong}; "
                               "observations must be str prompts")


class _TextEnvView(ParallelEnv):
    """What both wrappers share: the protocol's bookkeeping over the inner env's infos."""

    #: A plain env may pay any agent on any step (a team outcome on the last role's step).
    #: An inner env that never does can say so with ``pays_idle_agents = False``, which
    #: spares the tree sampler's play-on (docs/custom_env.md, "The reward contract").
    @property
    def pays_idle_agents(self) -> bool:
        return bool(getattr(self.env, "pays_idle_agents", True))

    def __init__(self, env: Any, *, alpha: float | None):
        self.env = env
        self.alpha = float(alpha if alpha is not None else getattr(env, "alpha", 1.0))
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.metadata.setdefault("name", type(env).__name__)
        self.possible_agents = list(env.possible_agents)
        self.agents: list[str] = []
        self.turn = 0
        self.stage_index = 0
        self.task_seed: int | None = None
        self._observations: dict[str, str] = {}
        self._acting: tuple[str, ...] = ()
        self._acted_this_turn: set[str] = set()
        self._steps = 0

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str):
        return self.env.observation_space(agent)

    def action_space(self, agent: str):
        return self.env.action_space(agent)

    @property
    def np_random(self):
        """The inner env's generator, so the clone check compares the state that matters."""
        rng = getattr(self.env, "np_random", None)
        return rng if isinstance(rng, np.random.Generator) else None

    # ------------------------------------------------------------------ protocol
    def acting_agents(self) -> tuple[str, ...]:
        return self._acting if self.agents else ()

    def current_observations(self) -> dict[str, str]:
        return {agent: self._observations[agent] for agent in self.agents
                if agent in self._observations}

    def prompt_examples(self) -> dict[str, str]:
        examples = getattr(self.env, "prompt_examples", None)
        return dict(examples()) if callable(examples) else {}

    def clone(self) -> "_TextEnvView":
        inner_clone = getattr(self.env, "clone", None)
        if not callable(inner_clone):
            return copy.deepcopy(self)
        twin = copy.copy(self)
        twin.env = inner_clone()
        twin.agents, twin.metadata = list(self.agents), dict(self.metadata)
        twin._observations = dict(self._observations)
        twin._acted_this_turn = set(self._acted_this_turn)
        return twin

    def check_clonable(self) -> None:
        """Raise :class:`NotATextEnvError` unless this env can be cloned (tree sampling needs
        K independent copies of a state)."""
        try:
            self.clone()
        except Exception as exc:
            raise NotATextEnvError(
                f"{type(self.env).__name__} cannot be cloned: copy.deepcopy raised "
                f"{type(exc).__name__}: {exc}. Define clone() on the env (an independent copy "
                "in the same state, RNG included)") from exc

    # ------------------------------------------------------------------ helpers
    def _observations_of(self, agents) -> dict[str, str]:
        """What a step returns: an observation for every agent live before it (PettingZoo's
        API test expects one for an agent that has just finished too)."""
        return {agent: self._observations[agent] for agent in agents
                if agent in self._observations}

    def _protocol_info(self, agent: str, info: Mapping[str, Any], *, reward: float | None,
                       acted: bool, done: bool) -> dict[str, Any]:
        """``info`` with every key the protocol promises, read from the env where it says."""
        out = dict(info)
        out[INFO_ACTING] = False if done else agent in self._acting
        out.setdefault("role", agent)
        out[INFO_TURN], out[INFO_STAGE], out["task_seed"] = (self.turn, self.stage_index,
                                                             self.task_seed)
        if reward is None:
            return out
        if INFO_REWARD_TEAM in info and INFO_REWARD_LOCAL not in info:
            out[INFO_REWARD_LOCAL] = float(reward) - mixed_reward(
                self.alpha, info[INFO_REWARD_TEAM], 0.0)
        elif INFO_REWARD_TEAM not in info:
            out[INFO_REWARD_TEAM], out[INFO_REWARD_LOCAL] = 0.0, float(reward)
        out[INFO_SUCCESS] = bool(info.get(INFO_SUCCESS, False))
        out["acted"] = acted
        out[INFO_PARSE_ERROR] = parse_error_text(info.get(INFO_PARSE_ERROR), agent=agent,
                                                 where=self._where())
        return out

    def _where(self) -> str:
        return f"{type(self.env).__name__} (step {self._steps}): "

    def _check_step(self, observations: Mapping[str, Any], rewards: Mapping[str, Any]) -> None:
        check_step_output(self._where(), self.possible_agents, observations, rewards)

    def _position(self, infos: Mapping[str, Mapping[str, Any]], acted: tuple[str, ...] = (),
                  *, reset: bool = False) -> None:
        """Turn and stage after a step (module docstring): as the env reports them, else
        inferred from who acted and who acts next."""
        reported = [int(info[INFO_TURN]) for info in infos.values() if INFO_TURN in info]
        staged = [int(info[INFO_STAGE]) for info in infos.values() if INFO_STAGE in info]
        if reset:
            self.turn, self.stage_index = (reported[0] if reported else 0), 0
            self._acted_this_turn = set()
        elif reported:
            self.stage_index = 0 if reported[0] != self.turn else self.stage_index + 1
            self.turn = reported[0]
        else:
            self._acted_this_turn |= set(acted)
            if self._acted_this_turn & set(self._acting):
                self.turn, self.stage_index = self.turn + 1, 0
                self._acted_this_turn = set()
            else:
                self.stage_index += 1
        if staged:
            self.stage_index = staged[0]


class ParallelTextEnv(_TextEnvView):
    """A plain PettingZoo ``ParallelEnv`` with text spaces, seen as a text env (module
    docstring). Actions of agents that do not act are replaced by ``""`` before the env sees
    them, so the env never reads an LLM answer it did not ask for."""

    def __init__(self, env: ParallelEnv, *, alpha: float | None = None):
        super().__init__(env, alpha=alpha)
        _check_text_spaces(env, self.possible_agents, "ParallelEnv")

    def _who_acts(self, infos: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
        if any(INFO_ACTING in infos.get(agent, {}) for agent in self.agents):
            return tuple(a for a in self.agents if infos.get(a, {}).get(INFO_ACTING))
        return tuple(self.agents)

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        _check_text_observations(self.env, observations)
        self.task_seed, self._steps = seed, 0
        self.agents = list(self.env.agents)
        self._observations = dict(observations)
        self._acting = self._who_acts(infos)
        self._position(infos, reset=True)
        infos = {a: self._protocol_info(a, infos.get(a, {}), reward=None, acted=False,
                                        done=False) for a in self.agents}
        return self.current_observations(), infos

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        acting = self._acting
        sent = {a: (actions.get(a) if a in acting and isinstance(actions.get(a), str) else "")
                for a in self.agents}
        observations, rewards, terminations, truncations, infos = self.env.step(sent)
        self._steps += 1
        self._check_step(observations, rewards)
        self._observations.update(observations)
        before = list(self.agents)
        self.agents = [a for a in self.env.agents
                       if not (terminations.get(a) or truncations.get(a))]
        self._acting = self._who_acts(infos)
        self._position(infos, acting)
        out_infos = {a: self._protocol_info(a, infos.get(a, {}), reward=rewards.get(a, 0.0),
                                            acted=a in acting, done=a not in self.agents)
                     for a in before}
        return (self._observations_of(before), {a: float(rewards.get(a, 0.0)) for a in before},
                {a: bool(terminations.get(a, False)) for a in before},
                {a: bool(truncations.get(a, False)) for a in before}, out_infos)


class AECTextEnv(_TextEnvView):
    """A plain PettingZoo ``AECEnv`` with text spaces, seen as a text env: one AEC step (the
    agent in ``agent_selection``) is one stage, and every live agent observes after it."""

    def __init__(self, env: AECEnv, *, alpha: float | None = None):
        super().__init__(env, alpha=alpha)
        _check_text_spaces(env, self.possible_agents, "AECEnv")

    def _observe_all(self) -> dict[str, str]:
        observations = {agent: self.env.observe(agent) for agent in self.env.agents}
        _check_text_observations(self.env, observations)
        return observations

    def _skip_finished(self) -> None:
        """AEC envs take a ``None`` step from each finished agent before they leave."""
        while self.env.agents and (self.env.terminations.get(self.env.agent_selection)
                                   or self.env.truncations.get(self.env.agent_selection)):
            self.env.step(None)

    def _sync(self, acted: tuple[str, ...] = (), *, reset: bool = False) -> None:
        self.agents = list(self.env.agents)
        self._acting = (self.env.agent_selection,) if self.agents else ()
        self._observations = self._observe_all()
        self._position(dict(self.env.infos), acted, reset=reset)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.env.reset(seed=seed, options=options)
        self.task_seed, self._steps = seed, 0
        self._sync(reset=True)
        infos = {a: self._protocol_info(a, self.env.infos.get(a, {}), reward=None, acted=False,
                                        done=False) for a in self.agents}
        return self.current_observations(), infos

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        agent = self.env.agent_selection
        action = actions.get(agent)
        self.env.step(action if isinstance(action, str) else "")
        self._steps += 1
        before = list(self.agents)
        self._check_step({}, dict(self.env.rewards))
        rewards = {a: float(self.env.rewards.get(a, 0.0)) for a in before}
        terminations = {a: bool(self.env.terminations.get(a, False)) for a in before}
        truncations = {a: bool(self.env.truncations.get(a, False)) for a in before}
        infos = {a: dict(self.env.infos.get(a, {})) for a in before}
        self._observations.update(self._observe_all())  # before finished agents leave
        self._skip_finished()
        finished = all(terminations[a] or truncations[a] for a in before)
        if finished or not self.env.agents:
            self.agents, self._acting = [], ()
        else:
            self._sync((agent,))
        out_infos = {a: self._protocol_info(a, infos[a], reward=rewards[a], acted=a == agent,
                                            done=a not in self.agents) for a in before}
        return self._observations_of(before), rewards, terminations, truncations, out_infos


def _wrapping(kind: type, view: type, creator: Callable[..., Any], alpha: float | None):
    name = getattr(creator, "__name__", type(creator).__name__)
    if not callable(creator):
        raise TypeError(f"wrap_{'aec' if kind is AECEnv else 'parallel'}_env needs a creator "
                        f"(a class or a function returning the env), got {name}")

    def make(**env_config) -> _TextEnvView:
        env = creator(**env_config)
        if not isinstance(env, kind):
            raise NotATextEnvError(f"{name}(...) returned {type(env).__name__}, not a "
                                   f"pettingzoo.{kind.__name__}")
        wrapped = view(env, alpha=alpha)
        wrapped.reset(seed=0)
        wrapped.check_clonable()
        return wrapped

    make.__name__ = f"text_{name}"
    make.__doc__ = f"{name} wrapped as a text env ({view.__name__})."
    return make


def wrap_parallel_env(creator: Callable[..., ParallelEnv], *, alpha: float | None = None
                      ) -> Callable[..., ParallelTextEnv]:
    """A text-env creator for :func:`register_text_env` from a plain PettingZoo ``ParallelEnv``
    creator (its class, or a function taking the ``env_config`` keys).

    Args:
        creator: builds the plain env from ``env_config``.
        alpha: the team-reward weight the env's rewards were mixed with, used only to split a
            reward into team and local parts when the env reports ``reward_team`` alone
            (default: the env's ``alpha`` attribute, else 1.0).

    Each built env is reset once and cloned once, so an env with non-text spaces or
    observations, or one that cannot be copied, fails here with :class:`NotATextEnvError`
    naming the problem, not later inside a training run.
    """
    return _wrapping(ParallelEnv, ParallelTextEnv, creator, alpha)


def wrap_aec_env(creator: Callable[..., AECEnv], *, alpha: float | None = None
                 ) -> Callable[..., AECTextEnv]:
    """As :func:`wrap_parallel_env`, for a plain PettingZoo ``AECEnv`` (one agent acts per
    step, in ``agent_selection`` order)."""
    return _wrapping(AECEnv, AECTextEnv, creator, alpha)
