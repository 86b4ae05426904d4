"""Versioned ids for text envs: ``register_text_env(id, creator)`` and ``make_text_env``.

Registering also makes the env known to Ray (``ray.tune.register_env``), wrapped as RLlib's
``ParallelPettingZooEnv``, so the same id works in any RLlib config. Unknown ids raise and list
the known ones.

Installed packages declare envs as entry points of the group :data:`ENTRY_POINT_GROUP`
(``env_id = "module:Creator"``); they are registered on first use, so this protocol never
imports a plugin by name. The built-in task suite (``pettingllms_envs``) is found the same way.
An id registered in code wins over an entry point of the same name.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from pettingllms_rllib.envs.base import TextParallelEnv
from pettingllms_rllib.envs.wrappers import (PROTOCOL_ATTRIBUTES, NotATextEnvError,
                                             missing_protocol_attributes)

EnvCreator = Callable[..., TextParallelEnv]
#: The entry-point group under which installed packages declare their text envs.
ENTRY_POINT_GROUP = "pettingllms_rllib.envs"
_ENV_ID = re.compile(r"^[a-z][a-z0-9_]*_v\d+$")
_REGISTRY: dict[str, EnvCreator] = {}


def register_text_env(env_id: str, creator: EnvCreator, *, with_ray: bool = True) -> None:
    """Register ``creator(**env_config) -> TextParallelEnv`` under a versioned id like ``maze_v0``."""
    if not _ENV_ID.match(env_id):
        raise ValueError(f"env id {env_id!r} must look like 'name_v0' (lowercase, versioned)")
    if not callable(creator):
        raise TypeError(f"creator for {env_id!r} must be callable, got {type(creator).__name__}")
    if isinstance(creator, type):  # a class: its methods can be checked before any instance
        _check_protocol(creator, [name for name in PROTOCOL_ATTRIBUTES
                                  if callable(getattr(TextParallelEnv, name, None))
                                  and not hasattr(creator, name)])
    _REGISTRY[env_id] = creator
    if with_ray:
        from ray.tune.registry import register_env

        register_env(env_id, _RayEnvCreator(creator))


class _RayEnvCreator:
    """Picklable creator for ``ray.tune.register_env`` (RLlib passes an ``EnvContext``)."""

    def __init__(self, creator: EnvCreator):
        self.creator = creator

    def __call__(self, env_config: Mapping[str, Any] | None = None):
        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

        return ParallelPettingZooEnv(self.creator(**dict(env_config or {})))


def _check_protocol(env_or_class: Any, missing: list[str]) -> None:
    """Raise :class:`NotATextEnvError` naming ``missing`` and the wrapper that supplies them."""
    if not missing:
        return
    cls = env_or_class if isinstance(env_or_class, type) else type(env_or_class)
    from pettingzoo import AECEnv

    wrapper = "wrap_aec_env" if issubclass(cls, AECEnv) else "wrap_parallel_env"
    raise NotATextEnvError(
        f"{cls.__name__} is not a text env: it lacks {', '.join(missing)} (the text-env "
        f"protocol). A plain PettingZoo env needs no rewrite: register "
        f"{wrapper}({cls.__name__}) instead (pettingllms_rllib.envs; docs/custom_env.md)")


_entry_points_loaded = False


def _load_entry_point_envs() -> None:
    """Register every env declared under :data:`ENTRY_POINT_GROUP` (once per process). A
    declared env that cannot be loaded raises, naming the entry point and its package."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    from importlib.metadata import entry_points

    declared = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    for entry_point in declared:
        if entry_point.name in _REGISTRY:
            continue
        try:
            creator = entry_point.load()
        except Exception as exc:
            package = entry_point.dist.name if entry_point.dist else "an installed package"
            raise ImportError(f"text env {entry_point.name!r} ({entry_point.value}, declared "
                              f"by {package} under {ENTRY_POINT_GROUP!r}) could not be "
                              f"loaded: {type(exc).__name__}: {exc}") from exc
        register_text_env(entry_point.name, creator)
    _entry_points_loaded = True


def registered_env_ids() -> list[str]:
    _load_entry_point_envs()
    return sorted(_REGISTRY)


def _from_ray_registry(env_id: str) -> EnvCreator | None:
    """Envs registered in another process (e.g. the driver) reach Ray workers through Ray's
    global registry; recover our creator from there."""
    try:
        import ray
        from ray.tune.registry import ENV_CREATOR, _global_registry
    except ImportError:
        return None
    if not ray.is_initialized() or not _global_registry.contains(ENV_CREATOR, env_id):
        return None
    creator = _global_registry.get(ENV_CREATOR, env_id)
    return creator.creator if isinstance(creator, _RayEnvCreator) else None


def get_env_creator(env_id: str) -> EnvCreator:
    _load_entry_point_envs()
    if env_id not in _REGISTRY and (creator := _from_ray_registry(env_id)) is not None:
        _REGISTRY[env_id] = creator
    if env_id not in _REGISTRY:
        raise KeyError(f"unknown text env {env_id!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[env_id]


def make_text_env(env_id: str, env_config: Mapping[str, Any] | None = None) -> TextParallelEnv:
    """Build a registered env. Bad ``env_config`` keys raise a ``ValueError`` naming them."""
    creator = get_env_creator(env_id)
    try:
        env = creator(**dict(env_config or {}))
    except NotATextEnvError:
        raise
    except TypeError as exc:
        raise ValueError(f"bad env_config for {env_id!r}: {exc}") from exc
    _check_protocol(env, missing_protocol_attributes(env))
    return env
