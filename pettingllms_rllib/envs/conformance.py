"""Conformance checks users run on their own text envs, as PettingZoo ships ``parallel_api_test``.

:func:`check_clone_contract` verifies what AT-GRPO's tree sampler relies on: a clone is an
independent env in the *same* state (RNG included), so K branches scored on K clones see
exactly what the original would have seen, and stepping a clone never leaks into the original.
:func:`check_text_env` runs PettingZoo's API test plus the clone contract plus the text-env
specifics (``acting`` flags, reward decomposition, parse errors instead of exceptions).
:func:`check_splits_disjoint` verifies that evaluation seeds never produce a training instance,
which is what makes a held-out score held out.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pettingllms_rllib.envs.base import (INFO_ACTING, INFO_PARSE_ERROR, INFO_REWARD_LOCAL,
                                         INFO_REWARD_TEAM, TRAIN_SEED_LIMIT, TextParallelEnv,
                                         mixed_reward)
from pettingllms_rllib.envs.instances import shared_instances
from pettingllms_rllib.envs.wrappers import require_text_env

ActionFn = Callable[[TextParallelEnv, int], Mapping[str, str]]


def _garbage_actions(env: TextParallelEnv, step: int) -> dict[str, str]:
    texts = ["", "???", "Moves: R D", "```python\nprint('R')\n```", "\x00\uffff" * 3]
    return {a: texts[(step + i) % len(texts)] for i, a in enumerate(env.agents)}


def _same(a: Any, b: Any) -> bool:
    try:
        return pickle.dumps(a) == pickle.dumps(b)
    except Exception:
        return a == b


def _rng_state(env: TextParallelEnv) -> Any:
    rng = getattr(env, "np_random", None)
    return rng.bit_generator.state if isinstance(rng, np.random.Generator) else None


def check_clone_contract(env: TextParallelEnv, *, seed: int = 0, max_steps: int = 20,
                         action_fn: ActionFn | None = None,
                         clone_after_steps: Sequence[int] = (0, 1)) -> None:
    """Raise ``AssertionError`` unless ``env.clone()`` honours the AT-GRPO clone contract.

    For each number of warm-up steps in ``clone_after_steps``: reset with ``seed``, step that
    many times, clone, then step original and clone with identical actions until the episode
    ends, comparing observations, rewards, terminations, truncations, infos and RNG state at
    every step. Independence is checked by stepping a second clone first and verifying the
    original's next step is unaffected.
    """
    require_text_env(env)
    action_fn = action_fn or _garbage_actions
    for warmup in clone_after_steps:
        env.reset(seed=seed)
        for step in range(warmup):
            if not env.agents:
                break
            env.step(action_fn(env, step))
        if not env.agents:
            continue
        twin = env.clone()
        assert twin is not env, "clone() returned the same object"
        assert _rng_state(twin) == _rng_state(env), "clone() did not copy the RNG state"
        # A throw-away clone stepped first must not change what the original does next.
        decoy = env.clone()
        decoy.step(action_fn(decoy, 999))
        for step in range(warmup, warmup + max_steps):
            if not env.agents:
                assert not twin.agents, "clone still running after the original finished"
                break
            assert env.agents == twin.agents, f"step {step}: agents differ"
            assert env.acting_agents() == twin.acting_agents(), f"step {step}: acting differ"
            actions = action_fn(env, step)
            out_a = env.step(dict(actions))
            out_b = twin.step(dict(actions))
            names = ("observations", "rewards", "terminations", "truncations", "infos")
            for name, a, b in zip(names, out_a, out_b):
                assert _same(a, b), f"step {step}: {name} of clone differ: {a!r} != {b!r}"
            assert _rng_state(twin) == _rng_state(env), f"step {step}: RNG states diverged"


def check_text_env(env_factory: Callable[[], TextParallelEnv], *, seeds: Sequence[int] = (0, 1),
                   num_cycles: int = 20, expect_parse_errors: bool | None = None,
                   max_episode_steps: int = 1_000) -> None:
    """The full conformance suite for a text env (PettingZoo API + text-env protocol).

    Args:
        env_factory: builds a fresh env.
        seeds: task seeds the clone contract and reproducibility are checked on.
        num_cycles: steps of PettingZoo's ``parallel_api_test``.
        expect_parse_errors: whether the answer ``"\x00 not an answer \x00"`` must come back
            flagged in ``infos[agent]["parse_error"]`` (a role that parses answers must flag
            it rather than raise or accept it). Default: True for a ``TextParallelEnv``,
            whose roles parse; False for a wrapped plain env, which may accept any text
            (then only the key's presence is checked).
        max_episode_steps: an episode of unusable answers must end within this many steps
            (the sampler drops a task whose episode never ends, after many model calls).
    """
    from pettingzoo.test import parallel_api_test

    env = env_factory()
    require_text_env(env)
    parallel_api_test(env, num_cycles=num_cycles)
    for seed in seeds:
        env = env_factory()
        check_clone_contract(env, seed=seed)
        # Seeds reproduce identical instances.
        obs_a, _ = env.reset(seed=seed)
        obs_b, _ = env_factory().reset(seed=seed)
        assert obs_a == obs_b, f"reset(seed={seed}) is not reproducible"
        # Protocol: infos say who acts, garbage is a flagged parse error, rewards decompose.
        _, infos = env.reset(seed=seed)
        acting = [a for a in env.agents if infos[a][INFO_ACTING]]
        assert acting == list(env.acting_agents()), "infos['acting'] disagrees with the stage"
        _, rewards, _, _, infos = env.step({a: "\x00 not an answer \x00" for a in env.agents})
        strict = (isinstance(env, TextParallelEnv) if expect_parse_errors is None
                  else expect_parse_errors)
        for agent in acting:
            info = infos[agent]
            assert INFO_PARSE_ERROR in info, f"{agent}: infos have no 'parse_error' key"
            if strict:
                assert info[INFO_PARSE_ERROR], f"{agent}: garbage was not flagged as a parse error"
            mixed = mixed_reward(env.alpha, info[INFO_REWARD_TEAM], info[INFO_REWARD_LOCAL])
            assert np.isclose(rewards[agent], mixed), (
                f"{agent}: reward {rewards[agent]} != alpha*team + local = {mixed}")
        _check_episode_ends(env_factory(), seed, max_episode_steps)


def _check_episode_ends(env: TextParallelEnv, seed: int, max_steps: int) -> None:
    env.reset(seed=seed)
    for step in range(max_steps):
        if not env.agents:
            return
        env.step(_garbage_actions(env, step))
    assert not env.agents, (f"reset(seed={seed}): the episode did not end within {max_steps} "
                            "steps of unusable answers; the env must terminate or truncate "
                            "(e.g. after a turn budget)")


def check_splits_disjoint(env_factory: Callable[[], TextParallelEnv], *,
                          num_train_seeds: int = 200, num_test_seeds: int = 64) -> None:
    """Raise ``AssertionError`` if an evaluation seed produces a training instance.

    Training draws seeds below ``TRAIN_SEED_LIMIT`` and evaluation plays seeds from it on; an
    instance is what the agents are shown at reset
    (:func:`~pettingllms_rllib.envs.instances.instance_fingerprint`). Compares the first
    ``num_test_seeds`` evaluation seeds with training seeds ``0 .. num_train_seeds - 1``, a
    sample of what training draws: an env passes for sure only if it splits its instances by
    their content (:func:`~pettingllms_rllib.envs.base.split_of_seed` plus a stable hash of
    the instance, as the bundled tasks do).
    """
    env = env_factory()
    test_seeds = range(TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + num_test_seeds)
    shared = shared_instances(env, range(num_train_seeds), test_seeds)
    if shared:
        test_seed, train_seed = next(iter(shared.items()))
        raise AssertionError(
            f"{len(shared)} of the first {num_test_seeds} evaluation instances are also "
            f"training instances (e.g. evaluation seed {test_seed} shows what training seed "
            f"{train_seed} shows); split instances by their content so that evaluation seeds "
            f"never produce a training instance (docs/custom_env.md, 'Held-out instances')")
