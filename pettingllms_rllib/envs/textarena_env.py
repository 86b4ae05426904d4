"""TextArena games as text envs: a plain PettingZoo ``ParallelEnv`` over a TextArena game.

`TextArena <https://github.com/LeonGuertler/TextArena>`_ (``pip install
'pettingllms-rllib[textarena]'``, written against textarena 0.7.4) ships turn-based text games
with one loop for all of them: ``env.reset(num_players, seed)``, then while not done
``player_id, observation = env.get_observation()`` and ``done, info = env.step(action)``, then
``rewards, game_info = env.close()``. :class:`TextArenaParallelEnv` runs that loop behind the
PettingZoo parallel API, so :func:`~pettingllms_rllib.envs.wrappers.wrap_parallel_env` turns it
into a text env with no rewrite (``textarena_creator`` builds the creator to wrap):

* **Who acts**: the player TextArena names; ``infos[agent]["acting"]`` is True only for it,
  and the actions of the other agents are ignored. Turn and stage are not reported (the
  wrapper infers them from who acts).
* **Observations**: every live agent gets one each step. The acting player gets exactly what
  TextArena's ``get_observation()`` returns (rendered by the game's own observation wrappers,
  e.g. ``LLMObservationWrapper``: the whole history, one ``[SENDER] message`` line each). An
  idle player gets the view TextArena last gave it followed by the messages TextArena has queued
  for it since, in that same ``[SENDER] message`` layout; with the default
  ``LLMObservationWrapper`` that is exactly what it will be shown when it next acts (before
  its first turn: the messages queued for it, its prompt first). Reading those queued messages
  does not consume them. Text outside printable ASCII is transliterated where it has an ASCII
  form ("->" for an arrow) and otherwise shown as "?"; a view longer than
  ``max_observation_chars`` keeps its first quarter (the rules) and its end (the current
  state).
* **Rewards**: TextArena pays only when the game ends (``close()``); every player is paid its
  payoff at the step the game ends, including the players that did not act on it (the
  library's reward contract: a reward paid to an idle agent belongs to its most recent action).
  ``payoffs="own"``: the player's payoff is its local reward (team 0); ``payoffs="team"``: the
  mean payoff of all players is every player's team reward (local 0). ``rewards[agent] =
  alpha * team + local``. ``payoff_source="outcome"`` pays TextArena's rewards (most games:
  win 1, draw 0, loss -1); ``"score"`` pays the points the game keeps in
  ``game_state["scores"]`` (e.g. the Prisoner's Dilemma's payoff-matrix points). A truncated
  game (``max_steps``) pays nothing.
* **Success**: at the step the game ends, True iff the payoff the agent's reward is built from
  (its own payoff, or the team mean) is ``>= success_threshold`` (default 1.0: a TextArena
  win); False on every other step.
* **Invalid moves**: TextArena judges a move itself (``State.set_invalid_move``). The adapter
  records each reason TextArena gives and reports it as ``infos[agent]["parse_error"]``
  (``"invalid move: <reason>"``), else None. What follows is TextArena's rule: in most games
  the same player gets one more try (it stays the acting agent; the step counts against
  ``max_steps``), and a second invalid move in a row is punished: two-player games end, -1 for
  that player and +1 for the opponent; multi-player games decide themselves (Liar's Dice
  eliminates the player; once every player is eliminated the adapter ends the game, -1 each,
  where textarena 0.7.4 would loop forever). A game that reads any text as a move (the
  Prisoner's Dilemma: free chat, and anything without ``[Defect]`` cooperates) never flags one.
* **Seeds**: ``reset(seed)`` fixes the instance. TextArena games draw from Python's global
  ``random`` module (``State`` seeds it); the adapter gives each env its own copy of that state
  and swaps it in around every TextArena call (under a process-wide lock), so games are
  reproducible, do not disturb or get disturbed by other users of ``random``, and a clone
  carries the game's RNG. Where the reset observations vary with the seed, evaluation seeds
  (``>= TRAIN_SEED_LIMIT``) never produce a training instance: the game is redrawn until a
  stable SHA-256 bucket of the reset observations matches :func:`split_of_seed`. A game whose
  reset observations never vary (the Prisoner's Dilemma, Tic Tac Toe) has one instance: every
  seed shows it, and a held-out score is a score on the same game. A game with few starting
  positions splits them unevenly (Kuhn Poker: 6 deals); ``split_instances=False`` turns the
  redraw off.
* **Clones**: ``clone()`` is a deep copy of the TextArena env, the views and the RNG state.
  The env has no ``np_random``: its RNG is that ``random`` state.
* **Downloads**: some TextArena games call ``nltk.download`` when imported or built (Hangman,
  Wordle, WordChains, WordLadder, WordSearch, LetterAuction, Codenames, DontSayIt and games
  using its ``EnglishDictionary``). The adapter never downloads: during ``make``/``reset`` a
  request for NLTK data already on disk succeeds, one for missing data raises an error naming
  it (install it yourself with ``python -m nltk.downloader <id>``, or pass
  ``allow_downloads=True``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import hashlib
import inspect
import json
import math
import random
import sys
import threading
import unicodedata
from typing import Any, Callable, Iterator, Mapping, Sequence

import gymnasium
from pettingzoo import ParallelEnv

from pettingllms_rllib.envs.base import (DEFAULT_MAX_ACTION_CHARS,
                                         DEFAULT_MAX_OBSERVATION_CHARS, INFO_ACTING,
                                         INFO_PARSE_ERROR, INFO_REWARD_LOCAL, INFO_REWARD_TEAM,
                                         INFO_SUCCESS, TEXT_CHARSET, TRAIN_SEED_LIMIT,
                                         mixed_reward, reset_seed, split_of_seed)
from pettingllms_rllib.envs.instances import hash_split

INSTALL_HINT = "pip install 'pettingllms-rllib[textarena]'"
#: How payoffs become team and local rewards (see the module docstring).
PAYOFF_MAPPINGS = ("own", "team")
#: Where payoffs come from: TextArena's end-of-game rewards, or the game's own points.
PAYOFF_SOURCES = ("outcome", "score")
#: Game seeds a test-split seed may try before the split is declared too small.
MAX_REDRAWS = 256
#: Game seeds read to decide whether a game's reset observations depend on the seed at all.
RANDOMNESS_PROBES = 8
#: TextArena's sender id of game messages (``textarena.core.GAME_ID``).
_GAME_ID = -1
#: TextArena games share Python's global ``random``; every swap of its state holds this lock.
_RANDOM_LOCK = threading.RLock()
_ASCII_FORMS = {"\u2192": "->", "\u279c": "->", "\u2190": "<-", "\u2194": "<->", "\u2018": "'",
                "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
                "\u2026": "...", "\u2022": "*", "\u00d7": "x", "\u2264": "<=", "\u2265": ">=",
                "\u2260": "!=", "\u00a0": " "}
#: Whether a game's reset observations vary with the seed, per (game, kwargs, players).
_VISIBLY_RANDOM: dict[tuple, bool] = {}


def import_textarena():
    """The ``textarena`` module, or an ImportError saying how to install it."""
    try:
        import textarena
    except ImportError as exc:
        raise ImportError(f"TextArena games need the textarena package, which is not "
                          f"installed: {INSTALL_HINT} (tested with textarena 0.7.4)") from exc
    return textarena


def observations_fingerprint(observations: Sequence[str]) -> str:
    """The text an instance is hashed by: every player's reset observation, in player order
    (what :func:`~pettingllms_rllib.envs.instances.instance_fingerprint` compares, without the
    agents' names, so renaming the agents moves no instance to the other split)."""
    return json.dumps([str(text) for text in observations])


def _game_seed(seed: int, attempt: int) -> int:
    """The TextArena seed of the ``attempt``-th draw for task seed ``seed``."""
    if attempt == 0:
        return int(seed)
    digest = hashlib.sha256(f"textarena/{int(seed)}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def to_text(text: str, max_chars: int) -> str:
    """``text`` in printable ASCII (ASCII forms where known, else "?"), at most ``max_chars``
    long: a longer text keeps its first quarter and its end."""
    out = []
    for char in text:
        if char in TEXT_CHARSET:
            out.append(char)
            continue
        form = _ASCII_FORMS.get(char)
        if form is None:
            decomposed = unicodedata.normalize("NFKD", char)
            form = "".join(c for c in decomposed if c in TEXT_CHARSET) or "?"
        out.append(form)
    text = "".join(out)
    if len(text) <= max_chars:
        return text
    marker = "\n...\n"
    head = max(0, (max_chars - len(marker)) // 4)
    tail = max(0, max_chars - len(marker) - head)
    return text[:head] + marker + (text[-tail:] if tail else "")


def _render_messages(messages: Sequence[Any], role_mapping: Mapping[int, str]) -> str:
    """TextArena messages ``(sender, text, type)`` as ``"\\n[SENDER] text"`` lines, the layout
    of TextArena's ``LLMObservationWrapper``."""
    lines = []
    for message in messages:
        sender, text = message[0], message[1]
        name = "GAME" if sender == _GAME_ID else role_mapping.get(sender, f"Player {sender}")
        lines.append(f"\n[{name}] {text}")
    return "".join(lines)


def _score(game_id: str, game_state: Any, pid: int) -> float:
    """Player ``pid``'s points in ``game_state["scores"]``: a mapping or a list by player id,
    each entry a number or a one-entry mapping holding one (MemoryGame's ``{"Score": n}``)."""
    scores = game_state.get("scores") if isinstance(game_state, Mapping) else None
    try:
        entry = scores[pid]
        if isinstance(entry, Mapping) and len(entry) == 1:
            entry = next(iter(entry.values()))
        if isinstance(entry, bool) or not isinstance(entry, (int, float)):
            raise TypeError(type(entry).__name__)
        return float(entry)
    except (TypeError, KeyError, IndexError) as exc:
        kept = "no game_state['scores']" if scores is None else f"scores {scores!r:.120}"
        raise ValueError(
            f"payoff_source='score' needs each player's points in game_state['scores']; "
            f"TextArena game {game_id!r} keeps {kept}; use payoff_source='outcome'") from exc


class _InvalidMoveTap:
    """Stands in for a TextArena state's ``set_invalid_move``: records the reason, then runs
    the state's own method. A plain object (not a closure) so a deep copy of the state copies
    it with the state.

    It also ends a free-for-all game once every player is eliminated for invalid moves (all
    lose: -1 each): textarena 0.7.4's ``FFAMultiPlayerState.step`` then looks for the next
    live player forever (two-player MarketEntryGame and PublicGoodsGame reach it)."""

    def __init__(self, state: Any):
        self.state = state
        self.reasons: list[str] = []

    def __call__(self, *args, **kwargs):
        reason = kwargs.get("reason", args[0] if args else None)
        self.reasons.append(" ".join(str(reason).split()) if reason else "no reason given")
        result = type(self.state).set_invalid_move(self.state, *args, **kwargs)
        state = self.state
        out = getattr(state, "elimination_order", None)
        players = range(int(getattr(state, "num_players", 0)))
        if isinstance(out, list) and players and all(pid in out for pid in players) \
                and not getattr(state, "done", False) and hasattr(state, "set_game_outcome"):
            state.set_game_outcome({pid: -1 for pid in players},
                                   reason="Every player was eliminated for invalid moves.")
        return result


class _NoDownload:
    """Stands in for ``nltk.download`` while a game is built: data already on disk is
    reported present, missing data raises instead of being fetched."""

    def __init__(self, game_id: str):
        self.game_id = game_id

    def __call__(self, info_or_id: Any = None, *args, **kwargs) -> bool:
        import nltk

        ids = [info_or_id] if isinstance(info_or_id, str) else list(info_or_id or [])
        missing = []
        for item in ids:
            places = [f"{kind}/{item}" for kind in ("corpora", "taggers", "tokenizers",
                                                      "chunkers", "models", "misc")]
            found = False
            for place in places + [str(item)]:
                try:
                    nltk.data.find(place)
                    found = True
                    break
                except LookupError:
                    continue
            if not found:
                missing.append(str(item))
        if missing:
            raise RuntimeError(
                f"TextArena game {self.game_id!r} asks to download NLTK data {missing}; this "
                f"adapter does not download. Install it first (python -m nltk.downloader "
                f"{' '.join(missing)}; NLTK_DATA sets where NLTK looks) or pass "
                f"allow_downloads=True")
        return True


@dataclasses.dataclass(frozen=True)
class _Options:
    """The checked arguments of :class:`TextArenaParallelEnv`."""

    game_id: str
    num_players: int
    agent_names: tuple[str, ...]
    game_kwargs: dict[str, Any]
    payoffs: str
    payoff_source: str
    alpha: float
    max_steps: int
    success_threshold: float
    split_instances: bool
    test_fraction: float
    max_observation_chars: int
    allow_downloads: bool


def _check_options(game_id: Any, num_players: Any, agent_names: Any, game_kwargs: Any,
                   payoffs: Any, payoff_source: Any, alpha: Any, max_steps: Any,
                   success_threshold: Any, split_instances: Any, test_fraction: Any,
                   max_observation_chars: Any, allow_downloads: Any) -> _Options:
    def whole(name: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        return int(value)

    def real(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        return float(value)

    if not isinstance(game_id, str) or not game_id:
        raise ValueError(f"game_id must be a TextArena env id such as "
                         f"'IteratedPrisonersDilemma-v0', got {game_id!r}")
    num_players = whole("num_players", num_players, 1)
    if agent_names is None:
        names = tuple(f"player_{i}" for i in range(num_players))
    else:
        if isinstance(agent_names, str):
            raise ValueError(f"agent_names must be a list of {num_players} names, got the "
                             f"string {agent_names!r}")
        names = tuple(agent_names)
        if len(names) != num_players or not all(isinstance(n, str) and n for n in names) \
                or len(set(names)) != len(names):
            raise ValueError(f"agent_names must be {num_players} distinct non-empty strings "
                             f"(one per player, in TextArena's player order), got "
                             f"{list(names)!r}")
    if game_kwargs is not None and not isinstance(game_kwargs, Mapping):
        raise ValueError(f"game_kwargs must be a mapping of TextArena env arguments, got "
                         f"{type(game_kwargs).__name__}")
    if payoffs not in PAYOFF_MAPPINGS:
        raise ValueError(f"payoffs must be one of {list(PAYOFF_MAPPINGS)}, got {payoffs!r}")
    if payoff_source not in PAYOFF_SOURCES:
        raise ValueError(f"payoff_source must be one of {list(PAYOFF_SOURCES)}, got "
                         f"{payoff_source!r}")
    test_fraction = real("test_fraction", test_fraction)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    return _Options(
        game_id=game_id, num_players=num_players, agent_names=names,
        game_kwargs=dict(game_kwargs or {}), payoffs=payoffs, payoff_source=payoff_source,
        alpha=real("alpha", alpha), max_steps=whole("max_steps", max_steps, 1),
        success_threshold=real("success_threshold", success_threshold),
        split_instances=bool(split_instances), test_fraction=test_fraction,
        max_observation_chars=whole("max_observation_chars", max_observation_chars, 16),
        allow_downloads=bool(allow_downloads))


class TextArenaParallelEnv(ParallelEnv):
    """One TextArena game as a PettingZoo ``ParallelEnv`` with text spaces (module docstring).

    Args:
        game_id: a TextArena env id (``"IteratedPrisonersDilemma-v0"``, ``"KuhnPoker-v0"``);
            its registered wrappers render the observations.
        num_players: players in the game (TextArena checks the game's range at reset).
        agent_names: the agents' names in TextArena's player order (default
            ``player_0``, ``player_1``, ...).
        game_kwargs: arguments of the TextArena env, overriding the id's defaults (e.g.
            ``{"num_rounds": 3}`` for the Prisoner's Dilemma).
        payoffs: ``"own"`` (own payoff as local reward) or ``"team"`` (mean payoff as every
            player's team reward).
        payoff_source: ``"outcome"`` (TextArena's end-of-game rewards) or ``"score"`` (the
            game's ``game_state["scores"]`` points at the end).
        alpha: weight of the team reward: ``rewards[agent] = alpha * team + local``.
        max_steps: moves (invalid ones included) after which the episode is truncated.
        success_threshold: the payoff from which an ended game counts as a success.
        split_instances: keep evaluation seeds' instances out of training (module docstring).
        test_fraction: the share of instances the evaluation split holds.
        max_observation_chars: longest observation; longer views are cut in the middle.
        allow_downloads: let games call ``nltk.download`` (default: never download).
    """

    metadata: dict[str, Any] = {"name": "textarena_v0"}

    def __init__(self, game_id: str = "IteratedPrisonersDilemma-v0", *, num_players: int = 2,
                 agent_names: Sequence[str] | None = None,
                 game_kwargs: Mapping[str, Any] | None = None, payoffs: str = "own",
                 payoff_source: str = "outcome", alpha: float = 1.0, max_steps: int = 256,
                 success_threshold: float = 1.0, split_instances: bool = True,
                 test_fraction: float = 0.5,
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
                 allow_downloads: bool = False):
        self.options = _check_options(game_id, num_players, agent_names, game_kwargs, payoffs,
                                      payoff_source, alpha, max_steps, success_threshold,
                                      split_instances, test_fraction, max_observation_chars,
                                      allow_downloads)
        import_textarena()
        self.metadata = {"name": "textarena_v0", "textarena_game": self.options.game_id}
        self.possible_agents = list(self.options.agent_names)
        self.agents: list[str] = []
        self.alpha = self.options.alpha
        self.max_steps = self.options.max_steps
        charset = "".join(sorted(TEXT_CHARSET))
        self._observation_space = gymnasium.spaces.Text(
            max_length=self.options.max_observation_chars, min_length=0, charset=charset)
        self._action_space = gymnasium.spaces.Text(
            max_length=DEFAULT_MAX_ACTION_CHARS, min_length=0, charset=charset)
        self.game: Any = None
        self._tap: _InvalidMoveTap | None = None
        self._random_state: Any = random.Random(0).getstate()
        self._views: dict[int, str] = {}
        self._acting: int | None = None
        self.steps = 0
        self.task_seed: int | None = None
        self.game_seed: int | None = None
        self._new_game(0)  # fails here, not at the first reset, on a bad id or player count
        self.agents = []

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str) -> gymnasium.spaces.Text:
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Text:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        seed = reset_seed(seed, options)
        if seed is None:  # PettingZoo: no seed, a fresh instance (a training one)
            seed = random.SystemRandom().randrange(TRAIN_SEED_LIMIT)
        self.task_seed = int(seed)
        self._draw_instance(self.task_seed)
        infos = {agent: {INFO_ACTING: pid == self._acting, "textarena_player": pid}
                 for pid, agent in enumerate(self.possible_agents)}
        return self._observations(), infos

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        mover = self._acting
        action = actions.get(self.possible_agents[mover])
        self._tap.reasons.clear()
        with self._game_context():
            done, _ = self.game.step(action=action if isinstance(action, str) else "")
        self.steps += 1
        reasons = list(self._tap.reasons)
        parse_error = f"invalid move: {reasons[-1]}"[:300] if reasons else None
        payoffs: dict[int, float] | None = None
        if done:
            payoffs = self._final_payoffs()
            self._acting = None
        else:
            self._read_acting_view()
        truncated = not done and self.steps >= self.max_steps
        observations = self._observations()
        rewards, infos = {}, {}
        team = (sum(payoffs.values()) / len(payoffs)
                if payoffs and self.options.payoffs == "team" else 0.0)
        for pid, agent in enumerate(self.possible_agents):
            local = payoffs.get(pid, 0.0) if payoffs and self.options.payoffs == "own" else 0.0
            judged = team if self.options.payoffs == "team" else local
            success = payoffs is not None and judged >= self.options.success_threshold
            rewards[agent] = mixed_reward(self.alpha, team, local)
            infos[agent] = self._info(pid, team=team, local=local, success=success,
                                      parse_error=parse_error if pid == mover else None,
                                      payoff=payoffs.get(pid, 0.0) if payoffs else None,
                                      done=bool(done or truncated))
        terminations = {agent: bool(done) for agent in self.possible_agents}
        truncations = {agent: bool(truncated) for agent in self.possible_agents}
        if done or truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        """Nothing to release (the TextArena game holds no resources)."""

    # ------------------------------------------------------------------ protocol helpers
    def clone(self) -> "TextArenaParallelEnv":
        """An independent env in the same state: the TextArena game, the views and the game's
        RNG state are deep-copied."""
        return copy.deepcopy(self)

    def acting_player(self) -> int | None:
        """TextArena's id of the player who acts next (None once the game is over)."""
        return self._acting if self.agents else None

    # ------------------------------------------------------------------ internals
    @contextlib.contextmanager
    def _game_context(self, *, guard_downloads: bool = False) -> Iterator[None]:
        """Run TextArena code with this env's own ``random`` state (and, while a game is
        built, no NLTK downloads unless allowed)."""
        with _RANDOM_LOCK:
            outer = random.getstate()
            random.setstate(self._random_state)
            nltk = None
            if guard_downloads and not self.options.allow_downloads:
                try:
                    import nltk
                except ImportError:  # a game that needs NLTK then fails on its own import
                    nltk = None
            saved_download = getattr(nltk, "download", None)
            if nltk is not None:
                nltk.download = _NoDownload(self.options.game_id)
            try:
                yield
            finally:
                if nltk is not None:
                    nltk.download = saved_download
                self._random_state = random.getstate()
                random.setstate(outer)

    def _make_game(self) -> Any:
        textarena = import_textarena()
        from textarena.envs.registration import ENV_REGISTRY

        game_id = self.options.game_id
        if game_id not in ENV_REGISTRY:
            close = difflib.get_close_matches(game_id, list(ENV_REGISTRY), n=5)
            raise ValueError(f"unknown TextArena game {game_id!r}"
                             + (f"; did you mean {close}?" if close else "")
                             + " (textarena.envs.registration.ENV_REGISTRY lists them)")
        try:
            return textarena.make(game_id, **self.options.game_kwargs)
        except SyntaxError as exc:
            raise ImportError(
                f"TextArena game {game_id!r} does not import on Python "
                f"{sys.version_info.major}.{sys.version_info.minor}: {exc.msg} "
                f"({exc.filename}:{exc.lineno}); textarena 0.7.4 writes some games in newer "
                f"Python syntax") from exc
        except LookupError as exc:
            raise RuntimeError(f"TextArena game {game_id!r} needs NLTK data that is not "
                               f"installed: {str(exc).strip()[:300]}") from exc
        except TypeError as exc:
            raise ValueError(f"bad game_kwargs for TextArena game {game_id!r}: {exc}") from exc

    def _new_game(self, game_seed: int) -> None:
        """A fresh TextArena game (its observation wrappers keep history, so one per episode),
        reset with ``game_seed``; the first acting player's view is read."""
        self._random_state = random.Random(game_seed).getstate()
        with self._game_context(guard_downloads=True):
            game = self._make_game()
            try:
                game.reset(num_players=self.options.num_players, seed=game_seed)
            except AssertionError as exc:
                raise ValueError(f"TextArena game {self.options.game_id!r} refused "
                                 f"num_players={self.options.num_players}: {exc}") from exc
        self.game, self.game_seed = game, int(game_seed)
        state = game.state
        if self.options.payoff_source == "score":  # refused now, not when the game ends
            for pid in range(self.options.num_players):
                _score(self.options.game_id, state.game_state, pid)
        self._tap = _InvalidMoveTap(state)
        state.set_invalid_move = self._tap
        self._views = {}
        self.steps = 0
        self.agents = list(self.possible_agents)
        self._read_acting_view()

    def _read_acting_view(self) -> None:
        with self._game_context():
            player_id, view = self.game.get_observation()
        player_id = int(player_id)
        if not 0 <= player_id < self.options.num_players:
            raise RuntimeError(f"TextArena game {self.options.game_id!r} named player "
                               f"{player_id}, outside 0..{self.options.num_players - 1}")
        if not isinstance(view, str):  # an unwrapped game: new messages only, kept here
            view = self._views.get(player_id, "") + _render_messages(
                view or [], self.game.state.role_mapping)
        self._views[player_id] = view
        self._acting = player_id

    def _pending_text(self, player_id: int) -> str:
        state = self.game.state
        return _render_messages(state.observations.get(player_id, []), state.role_mapping)

    def _observations(self) -> dict[str, str]:
        limit = self.options.max_observation_chars
        return {agent: to_text(self._views.get(pid, "") + self._pending_text(pid), limit)
                for pid, agent in enumerate(self.possible_agents)}

    def _draw_instance(self, seed: int) -> None:
        """Start the game for task seed ``seed``, redrawn until its split matches the seed's
        when the game's reset observations vary (module docstring)."""
        wanted = split_of_seed(seed)
        if not self.options.split_instances or not self._visibly_random():
            self._new_game(_game_seed(seed, 0))
            return
        for attempt in range(MAX_REDRAWS):
            self._new_game(_game_seed(seed, attempt))
            shown = observations_fingerprint(list(self._observations().values()))
            if hash_split(shown, self.options.test_fraction) == wanted:
                return
        raise RuntimeError(
            f"TextArena game {self.options.game_id!r}: {MAX_REDRAWS} draws for seed {seed} "
            f"gave no {wanted}-split instance; the game has too few distinct starting "
            f"positions to split; pass split_instances=False (every seed then shares them)")

    def _visibly_random(self) -> bool:
        """Whether the reset observations depend on the game seed (read once per game)."""
        key = (self.options.game_id, repr(sorted(self.options.game_kwargs.items())),
               self.options.num_players)
        if key not in _VISIBLY_RANDOM:
            seen = set()
            for probe in range(RANDOMNESS_PROBES):
                self._new_game(_game_seed(probe, 0))
                seen.add(observations_fingerprint(list(self._observations().values())))
            _VISIBLY_RANDOM[key] = len(seen) > 1
        return _VISIBLY_RANDOM[key]

    def _final_payoffs(self) -> dict[int, float]:
        with self._game_context():
            closed = self.game.close()
        players = range(self.options.num_players)
        if self.options.payoff_source == "score":
            return {pid: _score(self.options.game_id, self.game.state.game_state, pid)
                    for pid in players}
        raw = (closed[0] if isinstance(closed, tuple) else closed) or {}
        # A game that ended without setting rewards pays nothing.
        return {pid: float(raw.get(pid, 0.0)) for pid in players}

    def _info(self, pid: int, *, team: float, local: float, success: bool,
              parse_error: str | None, payoff: float | None, done: bool) -> dict[str, Any]:
        info = {INFO_ACTING: (not done) and pid == self._acting, INFO_REWARD_TEAM: float(team),
                INFO_REWARD_LOCAL: float(local), INFO_SUCCESS: bool(success),
                INFO_PARSE_ERROR: parse_error, "textarena_player": pid}
        if payoff is not None:
            info["payoff"] = float(payoff)
            reason = (getattr(self.game.state, "game_info", None) or {}).get(pid, {})
            if isinstance(reason, Mapping) and reason.get("reason"):
                info["game_over_reason"] = str(reason["reason"])[:300]
        return info


class TextArenaCreator:
    """``creator(**env_config) -> TextArenaParallelEnv`` for one game, with default arguments
    that ``env_config`` keys override; picklable (Ray ships creators to workers)."""

    def __init__(self, game_id: str, defaults: Mapping[str, Any]):
        self.game_id = game_id
        self.defaults = dict(defaults)
        self.__name__ = f"textarena_{''.join(c if c.isalnum() else '_' for c in game_id)}"

    def __call__(self, **env_config) -> TextArenaParallelEnv:
        return TextArenaParallelEnv(self.game_id, **{**self.defaults, **env_config})

    def __repr__(self) -> str:
        return f"textarena_creator({self.game_id!r}, **{self.defaults!r})"


def textarena_creator(game_id: str, **defaults: Any) -> Callable[..., TextArenaParallelEnv]:
    """A creator of ``game_id`` for :func:`~pettingllms_rllib.envs.wrappers.wrap_parallel_env`
    (then :func:`~pettingllms_rllib.envs.registry.register_text_env`); ``defaults`` are
    :class:`TextArenaParallelEnv` arguments, which ``env_config`` keys override. Unknown
    argument names and bad values fail here, before any game is built::

        register_text_env("prisoners_dilemma_v0", wrap_parallel_env(textarena_creator(
            "IteratedPrisonersDilemma-v0", game_kwargs={"num_rounds": 3})), with_ray=False)
    """
    parameters = inspect.signature(TextArenaParallelEnv.__init__).parameters
    accepted = [name for name in parameters if name not in ("self", "game_id")]
    unknown = sorted(set(defaults) - set(accepted))
    if unknown:
        raise TypeError(f"textarena_creator got unknown arguments {unknown}; accepted: "
                        f"{accepted}")
    arguments = {name: parameters[name].default for name in accepted}
    _check_options(game_id=game_id, **{**arguments, **defaults})
    return TextArenaCreator(game_id, defaults)
