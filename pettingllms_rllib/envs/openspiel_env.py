"""Any OpenSpiel game as a text env: a plain PettingZoo ``ParallelEnv`` with ``Text`` spaces.

OpenSpiel (``pip install 'pettingllms-rllib[openspiel]'``) ships more than a hundred games,
turn-based and simultaneous-move, with chance nodes, hidden information and text renderings
of observations and moves. :class:`OpenSpielTextEnv` plays one of them in text, one agent per
OpenSpiel player; :func:`openspiel_text_env` builds it wrapped as a text env (the
:func:`~pettingllms_rllib.envs.wrappers.wrap_parallel_env` view) and
:func:`openspiel_env_creator` gives a creator for
:func:`~pettingllms_rllib.envs.registry.register_text_env`. ``pyspiel`` is imported only when
an env is built, so importing this module needs no OpenSpiel (and never loads torch).

**Prompts.** Each agent sees ``prompt_template`` filled with the game's long name, its role,
its player number, its observation (``state.observation_string(player)``, else
``information_state_string(player)`` when the game has no observation string, else the full
state for a perfect-information game), its legal moves one per line as
``state.action_to_string(player, action)`` writes them (``(none: ...)`` while another player
moves) and ``instructions`` (default: answer with one legal move exactly as written). Text
outside printable ASCII is spelled out (``"<black spade suit>"``), as the ``Text`` spaces
hold printable ASCII only.

**Parsing.** Moves are shown without numbers (a move's own text, e.g. ``x(1,1)`` or
``Offer: Book: 1, Hat: 0, Basketball: 2``, says what it does; a number would only say where
it stands in a list). An answer is read as:

1. the legal move whose text equals the answer with surrounding whitespace stripped; else
2. the legal move whose text occurs *last* in the answer (latest end; at equal ends the
   longest text), counting an occurrence only where it is not glued to further letters or
   digits (``Bet`` is not read in ``Better``, ``1`` not in ``10``). Matching is
   case-sensitive (chess tells ``b4`` from ``B4``). Two legal moves with the same text are
   one move: the lowest action id.

An answer with no legal move (or a non-text action) still advances the game, as OpenSpiel
cannot take an illegal action: the env plays the **lowest-id legal action** for that agent,
pays it ``invalid_action_penalty`` (default -1.0, as
:class:`~pettingllms_rllib.envs.base.TextParallelEnv`) as local reward, and sets
``infos[agent]["parse_error"]`` to a short reason (``None`` after a good answer).

**Who acts.** ``infos[agent]["acting"]`` is True for ``state.current_player()`` at a
turn-based node and for every player with legal actions at a simultaneous node; only their
actions are read. Chance nodes are resolved inside ``reset``/``step`` by sampling
``chance_outcomes()`` with ``self.np_random`` (seeded by ``reset(seed)``), so a seed fixes the
instance and a clone replays the same chance. The env reports no ``turn``/``stage``: the
wrapper counts one step as one turn.

**Rewards.** At each step every player is paid what OpenSpiel pays it for the transitions of
that step: the sum of ``state.rewards()`` after the players' move(s) and after each chance
outcome resolved before the next decision (for terminal-reward games, the returns at the end;
summed over an episode this equals ``state.returns()``). Players that did not act are paid
too: a reward to an idle agent belongs to its most recent action (the sampler's contract).
Rewards paid while resolving chance nodes at reset belong to no action and are dropped (no
game in OpenSpiel 2.0.2 pays any). ``payoffs`` maps them to the protocol's parts:

========  =====================================  ===================================
payoffs   ``infos[agent]["reward_team"]``        ``infos[agent]["reward_local"]``
========  =====================================  ===================================
"own"     0                                      own payoff (+ penalty)
"team"    mean payoff of all players, to all     penalty only (0 after a good answer)
========  =====================================  ===================================

and ``rewards[agent] = alpha * reward_team + reward_local``. ``infos[agent]["success"]`` is
False until the game ends; at a terminal state it is ``returns[player] >= success_threshold``
("own") or ``mean(returns) >= success_threshold`` ("team"), the threshold defaulting to the
game's ``max_utility()`` (so: the best outcome the game can pay). A truncated episode
(``max_steps`` env steps, chance nodes not counted) is never a success.

**Held-out instances.** Task seeds >= ``TRAIN_SEED_LIMIT`` are evaluation instances. An
instance is what the agents are shown at reset, i.e. the outcome of the chance nodes before
the first decision (a deal). The env enumerates those chance outcomes once (when there are at
most :data:`MAX_ENUMERATED_DEALS`), hashes each deal's reset prompts (SHA-256, first 8 bytes
as a number in [0, 1), ``< test_fraction`` = test) and deals a seed only from its split's
deals, with their chance probabilities renormalised. Games with more deals are redrawn until
the deal's bucket matches the seed's split (``test_fraction`` defaults to 0.2). A game with
a single instance (no chance before the first move: tic-tac-toe, chess, matrix games) or
whose every deal hashes to one split (``lewis_signaling``: its 3 deals all land in train)
cannot be split: both ranges then play the same instances,
:attr:`OpenSpielTextEnv.splits_disjoint` is False and a warning is logged.
:attr:`OpenSpielTextEnv.instance_counts` gives each split's number of distinct instances
when the deals were enumerated. Few deals split disjointly but thinly: ``kuhn_poker`` 5 / 1,
``tiny_hanabi`` 2 / 2, where the test deals are exactly those in which the second player holds
card 0, which training never shows it (``split_instances=False`` plays all four everywhere,
then evaluation is not held out). ``bargaining`` has 1,000 deals (804 / 196).

Games whose chance events OpenSpiel samples itself (chance mode ``SAMPLED_STOCHASTIC``, e.g.
``negotiation``) are refused: no seed or clone could reproduce them.

**Clones.** :meth:`OpenSpielTextEnv.clone` copies the state with ``State.clone()`` and the
RNG with its state; the (immutable) game object and the enumerated deals are shared.
"""

from __future__ import annotations

import collections
import copy
import difflib
import functools
import json
import logging
import unicodedata
from typing import Any, Callable, Mapping, Sequence

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

from pettingllms_rllib.envs.base import (DEFAULT_MAX_ACTION_CHARS,
                                         DEFAULT_MAX_OBSERVATION_CHARS, INFO_ACTING,
                                         INFO_PARSE_ERROR, INFO_REWARD_LOCAL, INFO_REWARD_TEAM,
                                         INFO_SUCCESS, TEXT_CHARSET, mixed_reward, reset_seed,
                                         split_of_seed)
from pettingllms_rllib.envs.instances import hash_split

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'pettingllms-rllib[openspiel]'"
PAYOFF_MODES = ("own", "team")
DEFAULT_INSTRUCTIONS = "Answer with one of the legal moves, exactly as written."
#: Fields a ``prompt_template`` may use.
PROMPT_FIELDS = ("game", "role", "player", "observation", "moves", "instructions")
DEFAULT_PROMPT_TEMPLATE = ("Game: {game}. You are {role} (player {player}).\n"
                           "Observation:\n{observation}\n"
                           "Legal moves:\n{moves}\n"
                           "{instructions}")
NOT_YOUR_TURN = "(none: another player moves now)"
GAME_OVER = "(none: the game is over)"
#: Deals (outcomes of the chance nodes before the first decision) enumerated at most; a game
#: with more is split by redrawing its deal instead.
MAX_ENUMERATED_DEALS = 20_000
#: Redraws of a deal before a game with too many deals to enumerate gives up on a split.
MAX_REDRAWS = 10_000

_DEALS_CACHE: dict[tuple, "_Deals"] = {}
_DEALS_CACHE_SIZE = 32
_WARNED_UNSPLIT: set[str] = set()


def _import_pyspiel():
    """``pyspiel``, or an ImportError that says how to install it."""
    try:
        import pyspiel
    except ImportError as exc:
        raise ImportError("the OpenSpiel text env needs OpenSpiel (the open_spiel package): "
                          f"{INSTALL_HINT}") from exc
    return pyspiel


def to_ascii(text: str) -> str:
    """``text`` in printable ASCII: other characters lose their accents (``é`` -> ``e``) or
    are spelled by their Unicode name (``♠`` -> ``<black spade suit>``), else become ``?``."""
    if all(c in TEXT_CHARSET for c in text):
        return text
    out = []
    for char in text:
        if char in TEXT_CHARSET:
            out.append(char)
            continue
        plain = "".join(c for c in unicodedata.normalize("NFKD", char) if c in TEXT_CHARSET)
        if plain:
            out.append(plain)
        else:
            name = unicodedata.name(char, "")
            out.append(f"<{name.lower()}>" if name else "?")
    return "".join(out)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def match_legal_move(answer: str, moves: Sequence[str]) -> int | None:
    """The index in ``moves`` that ``answer`` names (module docstring, "Parsing"), or None."""
    stripped = answer.strip()
    for index, move in enumerate(moves):
        if move == stripped:
            return index
    best: tuple[int, int, int] | None = None  # (end, length, -index), largest wins
    for index, move in enumerate(moves):
        if not move:
            continue
        start = answer.rfind(move)
        while start >= 0:
            end = start + len(move)
            glued_before = move[0].isalnum() and start > 0 and answer[start - 1].isalnum()
            glued_after = move[-1].isalnum() and end < len(answer) and answer[end].isalnum()
            if not (glued_before or glued_after):
                key = (end, len(move), -index)
                if best is None or key > best:
                    best = key
                break
            start = answer.rfind(move, 0, end - 1)
    return None if best is None else -best[2]


class _Deals:
    """The outcomes of the chance nodes before the first decision, with each deal's split."""

    def __init__(self, enumerated: bool, paths: list[tuple[int, ...]] = (),
                 probs: Sequence[float] = (), splits: Sequence[str] = (),
                 fingerprints: Sequence[str] = ()):
        self.enumerated = enumerated
        self.paths = list(paths)
        self.probs = np.asarray(probs, dtype=float)
        self.splits = list(splits)
        self.counts = {split: len({f for f, s in zip(fingerprints, splits) if s == split})
                       for split in ("train", "test")} if enumerated else None

    def splittable(self) -> bool:
        return not self.enumerated or all(self.counts.values())


class OpenSpielTextEnv(ParallelEnv):
    """An OpenSpiel game played in text by one agent per player (module docstring).

    Args:
        game_name: an OpenSpiel game's short name (``"tiny_hanabi"``) or a game string with
            parameters (``"kuhn_poker(players=3)"``).
        game_params: parameters passed to ``pyspiel.load_game`` (with a plain short name).
        roles: agent names, one per player (default ``player_0``, ``player_1``, ...).
        payoffs: ``"own"`` (each player's payoff is its local reward) or ``"team"`` (the
            players' mean payoff is every player's team reward); see the module docstring.
        alpha: weight of the team reward: ``rewards = alpha * team + local``.
        invalid_action_penalty: local reward of an answer naming no legal move (-1.0).
        success_threshold: the return (own, or the team's mean) that counts as a success at
            the end of the game (default: the game's ``max_utility()``).
        max_steps: truncate the episode after this many env steps (None: the game's length).
        prompt_template: the prompt, a ``str.format`` template over :data:`PROMPT_FIELDS`.
        instructions: the ``{instructions}`` text (how to answer; rules of the game).
        test_fraction: share of deals reserved for evaluation seeds (0.2).
        split_instances: split deals between training and evaluation seeds (True).
        max_observation_chars / max_action_chars: lengths of the ``Text`` spaces.
    """

    def __init__(self, game_name: str, *, game_params: Mapping[str, Any] | None = None,
                 roles: Sequence[str] | None = None, payoffs: str = "own",
                 alpha: float = 1.0, invalid_action_penalty: float = -1.0,
                 success_threshold: float | None = None, max_steps: int | None = None,
                 prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
                 instructions: str = DEFAULT_INSTRUCTIONS, test_fraction: float = 0.2,
                 split_instances: bool = True,
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
                 max_action_chars: int = DEFAULT_MAX_ACTION_CHARS):
        pyspiel = _import_pyspiel()
        if payoffs not in PAYOFF_MODES:
            raise ValueError(f"payoffs={payoffs!r} is not a payoff mode; accepted: "
                             f"{', '.join(map(repr, PAYOFF_MODES))}")
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps!r}")
        if not 0.0 <= float(test_fraction) <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction!r}")
        self.game = _load_game(pyspiel, game_name, game_params)
        game_type = self.game.get_type()
        if game_type.dynamics not in (pyspiel.GameType.Dynamics.SEQUENTIAL,
                                      pyspiel.GameType.Dynamics.SIMULTANEOUS):
            raise ValueError(f"OpenSpiel game {game_name!r} has {game_type.dynamics} dynamics; "
                             "only turn-based and simultaneous-move games can be played")
        if game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
            raise ValueError(f"OpenSpiel game {game_name!r} samples its chance events inside "
                             "OpenSpiel (SAMPLED_STOCHASTIC), so neither a seed nor a clone "
                             "could reproduce them; only games with explicit chance "
                             "outcomes (or none) can be played")
        self._observe_with = _observation_kind(pyspiel, game_type, game_name)
        self.num_players = self.game.num_players()
        if roles is None:
            agents = [f"player_{p}" for p in range(self.num_players)]
        else:
            agents = [str(r) for r in roles] if not isinstance(roles, str) else [roles]
            if len(agents) != self.num_players or len(set(agents)) != len(agents) \
                    or not all(agents):
                raise ValueError(f"roles must be {self.num_players} distinct non-empty names, "
                                 f"one per player of {game_name!r}; got {list(roles)!r}")
        self.possible_agents = agents
        self.agents: list[str] = []
        self.payoffs = payoffs
        self.alpha = float(alpha)
        self.invalid_action_penalty = float(invalid_action_penalty)
        if success_threshold is None:
            try:
                success_threshold = float(self.game.max_utility())
            except Exception:  # some games do not declare their utility range
                success_threshold = float("inf")
        self.success_threshold = float(success_threshold)
        self.max_steps = None if max_steps is None else int(max_steps)
        self.prompt_template = str(prompt_template)
        self.instructions = str(instructions)
        _check_template(self.prompt_template)
        self.test_fraction = float(test_fraction)
        self.split_instances = bool(split_instances)
        self.game_label = to_ascii(game_type.long_name or game_type.short_name)
        self.metadata = {"name": f"openspiel_{game_type.short_name}_v0", "render_modes": []}
        self._text = gymnasium.spaces.Text(max_length=int(max_observation_chars), min_length=0,
                                           charset="".join(sorted(TEXT_CHARSET)))
        self._action_text = gymnasium.spaces.Text(max_length=int(max_action_chars),
                                                  min_length=0,
                                                  charset="".join(sorted(TEXT_CHARSET)))
        self.np_random = np.random.default_rng(0)
        self.spiel_state = None
        self.task_seed: int | None = None
        self.steps = 0
        self._deals = self._enumerate_deals() if self.split_instances else None
        if self._deals is not None and not self._deals.splittable() \
                and str(self.game) not in _WARNED_UNSPLIT:
            _WARNED_UNSPLIT.add(str(self.game))
            logger.warning("OpenSpiel %s: its %s cannot be split between training and "
                           "evaluation seeds (instances per split: %s); both play the same "
                           "instances", self.game, "single instance" if sum(
                               self._deals.counts.values()) <= 1 else "instances",
                           self._deals.counts)

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str) -> gymnasium.spaces.Text:
        return self._text

    def action_space(self, agent: str) -> gymnasium.spaces.Text:
        return self._action_text

    def reset(self, seed: int | None = None, options: dict | None = None):
        seed = reset_seed(seed, options)
        self.np_random = np.random.default_rng(seed)
        self.task_seed = seed
        self.steps = 0
        self.spiel_state = self._deal(split_of_seed(seed))
        self.agents = list(self.possible_agents)
        acting = self._acting_players(self.spiel_state)
        infos = {agent: {INFO_ACTING: player in acting, "role": agent}
                 for player, agent in enumerate(self.possible_agents)}
        return self._observations(self.spiel_state), infos

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        state = self.spiel_state
        acting = self._acting_players(state)
        chosen, errors, moves = {}, {}, {}
        for player in acting:
            agent = self.possible_agents[player]
            legal, texts = self._legal_moves(state, player)
            answer = actions.get(agent)
            if not isinstance(answer, str):
                index, errors[player] = None, f"action is {type(answer).__name__}, not text"
            else:
                index = match_legal_move(answer, texts)
                errors[player] = None if index is not None else "no legal move in the answer"
            if index is None:
                index = int(np.argmin(legal))  # the documented fallback: lowest action id
            chosen[player], moves[player] = int(legal[index]), texts[index]

        paid = np.zeros(self.num_players)
        if state.is_simultaneous_node():
            pyspiel = _import_pyspiel()
            state.apply_actions([chosen.get(p, pyspiel.INVALID_ACTION)
                                 for p in range(self.num_players)])
        else:
            state.apply_action(chosen[acting[0]])
        paid += np.asarray(state.rewards(), dtype=float)
        paid += self._resolve_chance(state)
        self.steps += 1

        terminated = state.is_terminal()
        truncated = not terminated and self.max_steps is not None and self.steps >= self.max_steps
        done = terminated or truncated
        returns = np.asarray(state.returns(), dtype=float) if terminated else None
        next_acting = () if done else self._acting_players(state)
        rewards, infos = {}, {}
        for player, agent in enumerate(self.possible_agents):
            penalty = self.invalid_action_penalty if errors.get(player) else 0.0
            if self.payoffs == "own":
                team, local = 0.0, float(paid[player]) + penalty
                success = returns is not None and returns[player] >= self.success_threshold
            else:
                team, local = float(paid.mean()), penalty
                success = returns is not None and returns.mean() >= self.success_threshold
            rewards[agent] = mixed_reward(self.alpha, team, local)
            info = {INFO_ACTING: player in next_acting, "role": agent, INFO_REWARD_TEAM: team,
                    INFO_REWARD_LOCAL: local, INFO_SUCCESS: bool(success),
                    INFO_PARSE_ERROR: errors.get(player)}
            if player in moves:
                info["move"] = moves[player]
            infos[agent] = info
        before = list(self.agents)
        observations = self._observations(state, before)
        terminations = {a: bool(terminated) for a in before}
        truncations = {a: bool(truncated) for a in before}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    # ------------------------------------------------------------------ protocol helpers
    def clone(self) -> "OpenSpielTextEnv":
        """An independent env in the same state: ``State.clone()`` and a copy of the RNG."""
        twin = copy.copy(self)
        twin.spiel_state = None if self.spiel_state is None else self.spiel_state.clone()
        twin.np_random = copy.deepcopy(self.np_random)
        twin.agents = list(self.agents)
        twin.metadata = dict(self.metadata)
        return twin

    @property
    def splits_disjoint(self) -> bool:
        """Whether training and evaluation seeds deal disjoint instances (module docstring)."""
        return self._deals is not None and self._deals.splittable()

    @property
    def instance_counts(self) -> dict[str, int] | None:
        """Distinct instances per split (``{"train": n, "test": m}``; when a split is empty,
        both splits play all of them), or None when the deals were too many to enumerate or
        splitting is off."""
        return None if self._deals is None else self._deals.counts

    def acting_agent_names(self) -> list[str]:
        """The agents that act in the next step (empty once the episode is over)."""
        if not self.agents:
            return []
        return [self.possible_agents[p] for p in self._acting_players(self.spiel_state)]

    def legal_moves(self, agent: str) -> list[str]:
        """``agent``'s legal moves as shown in its prompt ([] when it does not act now)."""
        player = self.possible_agents.index(agent)
        if not self.agents or player not in self._acting_players(self.spiel_state):
            return []
        return self._legal_moves(self.spiel_state, player)[1]

    # ------------------------------------------------------------------ internals
    def _acting_players(self, state) -> tuple[int, ...]:
        if state.is_terminal():
            return ()
        if state.is_simultaneous_node():
            return tuple(p for p in range(self.num_players) if state.legal_actions(p))
        return (int(state.current_player()),)

    def _legal_moves(self, state, player: int) -> tuple[list[int], list[str]]:
        legal = list(state.legal_actions(player))
        return legal, [to_ascii(state.action_to_string(player, a)) for a in legal]

    def _observation_text(self, state, player: int) -> str:
        if self._observe_with == "observation":
            text = state.observation_string(player)
        elif self._observe_with == "information_state":
            text = state.information_state_string(player)
        else:
            text = str(state)
        return to_ascii(text).strip("\n") or "(nothing)"

    def _prompt(self, state, player: int) -> str:
        if state.is_terminal():
            moves = GAME_OVER
        elif player in self._acting_players(state):
            moves = "\n".join(self._legal_moves(state, player)[1])
        else:
            moves = NOT_YOUR_TURN
        text = self.prompt_template.format(
            game=self.game_label, role=self.possible_agents[player], player=player,
            observation=self._observation_text(state, player), moves=moves,
            instructions=self.instructions)
        return _clip(to_ascii(text), self._text.max_length)

    def _observations(self, state, agents: Sequence[str] | None = None) -> dict[str, str]:
        agents = self.agents if agents is None else agents
        return {agent: self._prompt(state, self.possible_agents.index(agent))
                for agent in agents}

    def _sample_chance(self, state) -> int:
        outcomes = state.chance_outcomes()
        probs = np.asarray([p for _, p in outcomes], dtype=float)
        index = int(self.np_random.choice(len(outcomes), p=probs / probs.sum()))
        return int(outcomes[index][0])

    def _resolve_chance(self, state) -> np.ndarray:
        """Sample chance nodes until a decision (or the end); what they paid each player."""
        paid = np.zeros(self.num_players)
        while state.is_chance_node():
            state.apply_action(self._sample_chance(state))
            paid += np.asarray(state.rewards(), dtype=float)
        return paid

    def _fingerprint(self, state) -> str:
        shown = {agent: self._prompt(state, p) for p, agent in enumerate(self.possible_agents)}
        return json.dumps(shown, sort_keys=True)

    def _deal(self, split: str):
        """A new game's state after the chance nodes before the first decision, dealt from
        ``split``'s instances where the game can be split (module docstring)."""
        state = self.game.new_initial_state()
        deals = self._deals
        if deals is None or not deals.splittable():
            self._resolve_chance(state)
            return state
        if deals.enumerated:
            mask = np.asarray([s == split for s in deals.splits])
            probs = np.where(mask, deals.probs, 0.0)
            path = deals.paths[int(self.np_random.choice(len(probs), p=probs / probs.sum()))]
            for action in path:
                state.apply_action(action)
            return state
        for _ in range(MAX_REDRAWS):
            candidate = state.clone()
            self._resolve_chance(candidate)
            if hash_split(self._fingerprint(candidate), self.test_fraction) == split:
                return candidate
        raise RuntimeError(f"OpenSpiel {self.game}: no deal of the {split!r} split in "
                           f"{MAX_REDRAWS} draws (test_fraction={self.test_fraction}); use "
                           "another test_fraction or split_instances=False")

    def _enumerate_deals(self) -> _Deals:
        key = (str(self.game), tuple(self.possible_agents), self.prompt_template,
               self.instructions, self.test_fraction, self._text.max_length)
        cached = _DEALS_CACHE.get(key)
        if cached is not None:
            return cached
        # Breadth first, so a game with a huge deal (bridge) overflows after a few levels.
        frontier = collections.deque([((), 1.0, self.game.new_initial_state())])
        done: list[tuple[tuple[int, ...], float, Any]] = []
        enumerated = True
        while frontier:
            if len(frontier) + len(done) > MAX_ENUMERATED_DEALS:
                enumerated = False
                break
            path, prob, state = frontier.popleft()
            if not state.is_chance_node():
                done.append((path, prob, state))
                continue
            for action, p in state.chance_outcomes():
                child = state.clone()
                child.apply_action(action)
                frontier.append((path + (int(action),), prob * p, child))
        if enumerated:
            done.sort(key=lambda item: item[0])
            fingerprints = [self._fingerprint(state) for _, _, state in done]
            deals = _Deals(True, [p for p, _, _ in done], [q for _, q, _ in done],
                           [hash_split(f, self.test_fraction) for f in fingerprints],
                           fingerprints)
        else:
            deals = _Deals(False)
        if len(_DEALS_CACHE) >= _DEALS_CACHE_SIZE:
            _DEALS_CACHE.pop(next(iter(_DEALS_CACHE)))
        _DEALS_CACHE[key] = deals
        return deals


def _load_game(pyspiel, game_name: str, game_params: Mapping[str, Any] | None):
    if not isinstance(game_name, str) or not game_name:
        raise ValueError(f"game_name must be an OpenSpiel game name, got {game_name!r}")
    short = game_name.split("(", 1)[0].strip()
    known = list(pyspiel.registered_names())
    if short not in known:
        close = difflib.get_close_matches(short, known, n=5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown OpenSpiel game {short!r}{hint} (pyspiel.registered_names() "
                         f"lists the {len(known)} known games)")
    try:
        if game_params:
            if "(" in game_name:
                raise ValueError("give parameters either in the game string or in "
                                 "game_params, not both")
            return pyspiel.load_game(short, dict(game_params))
        return pyspiel.load_game(game_name)
    except pyspiel.SpielError as exc:
        raise ValueError(f"OpenSpiel could not load {game_name!r} with game_params="
                         f"{dict(game_params or {})!r}: {exc}") from exc


def _observation_kind(pyspiel, game_type, game_name: str) -> str:
    if game_type.provides_observation_string:
        return "observation"
    if game_type.provides_information_state_string:
        return "information_state"
    if game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION:
        return "state"
    raise ValueError(f"OpenSpiel game {game_name!r} has hidden information but provides no "
                     "observation or information-state string to show its players")


def _check_template(template: str) -> None:
    try:
        template.format(**{field: "" for field in PROMPT_FIELDS})
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"prompt_template {template!r} is not a str.format template over "
                         f"the fields {', '.join(PROMPT_FIELDS)}: {exc!r}") from exc


def openspiel_text_env(game_name: str, **kwargs: Any):
    """An OpenSpiel game as a text env: :class:`OpenSpielTextEnv` (``kwargs`` are its
    arguments) wrapped by :func:`~pettingllms_rllib.envs.wrappers.wrap_parallel_env`, so it
    has the protocol's ``acting_agents()``, ``clone()``, turn and stage (the wrapper's
    ``alpha`` is the env's)."""
    from pettingllms_rllib.envs.wrappers import wrap_parallel_env

    creator = functools.partial(OpenSpielTextEnv, game_name)
    creator.__name__ = "OpenSpielTextEnv"  # type: ignore[attr-defined]
    return wrap_parallel_env(creator)(**kwargs)


def openspiel_env_creator(game_name: str, **defaults: Any) -> Callable[..., Any]:
    """A creator for :func:`~pettingllms_rllib.envs.registry.register_text_env`:
    ``creator(**env_config)`` is :func:`openspiel_text_env` with ``defaults`` overridden by
    ``env_config``. A ``functools.partial`` of module functions, so it pickles (Ray)."""
    return functools.partial(openspiel_text_env, game_name, **defaults)
