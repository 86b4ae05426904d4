"""Versioned ids for text envs: ``register_text_env(id, creator)`` and ``make_text_env``.

Registering also makes the env known to Ray (``ray.tune.register_env``), wrapped as RLlib's
``ParallelPettingZooEnv``, so the same id works in any RLlib config. Unknown ids raise and list
the known ones.

Installed packages declare envs as entry points of the group :data:`ENTRY_POINT_GROUP`
(``env_id = "module:Creator"``); they are registered on first use, so this protocol never
imports a plugin by name. The built-in task suite (``pettingllms_envs``) is found the same way.
An id registered in code wins over an entry point of the same name.

PettingZoo's own registry (``pettingzoo.register`` / ``pettingzoo.make``, PettingZoo >= 1.27),
both ways:

* every text env id (registered in code, or declared as an entry point) is also registered in
  PettingZoo's ``parallel`` registry, so ``pettingzoo.make("parallel", "plan_path_v1", **cfg)``
  returns ``make_text_env("plan_path_v1", cfg)``. PettingZoo stores it as ``plan_path-v1``
  and accepts either spelling. Only the id is registered: nothing is imported or built until
  the env is made. An id PettingZoo already holds for someone else's env is left to it.
* an id that only PettingZoo's registry knows (``pettingzoo.register("aec" | "parallel", ...)``)
  is accepted by :func:`make_text_env` and :func:`get_env_creator`: a plain env is wrapped
  with ``wrap_aec_env`` / ``wrap_parallel_env`` when made (the AEC registration is used when an
  id is in both). Ids registered here win over PettingZoo's.

A creator that a process cannot load (a Ray worker that cannot import the module defining the
env) raises :class:`EnvImportError`, naming the env, the module, the process's ``sys.path`` and
the fix.
"""

from __future__ import annotations

import difflib
import os
import pickle
import re
import sys
import warnings
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

import pettingzoo
from pettingzoo import AECEnv, ParallelEnv

from pettingllms_rllib.envs.base import TextParallelEnv
from pettingllms_rllib.envs.wrappers import (PROTOCOL_ATTRIBUTES, NotATextEnvError,
                                             missing_protocol_attributes, wrap_aec_env,
                                             wrap_parallel_env)

try:  # PettingZoo >= 1.27 has a registry; its lookups raise PettingZooRegistryError
    from pettingzoo import EnvSpec
    from pettingzoo.env_registry.exceptions import PettingZooRegistryError
except ImportError:  # pragma: no cover - an older PettingZoo: neither direction applies
    EnvSpec = None  # type: ignore[assignment,misc]
    PettingZooRegistryError = LookupError  # type: ignore[assignment,misc]

EnvCreator = Callable[..., TextParallelEnv]
#: The entry-point group under which installed packages declare their text envs.
ENTRY_POINT_GROUP = "pettingllms_rllib.envs"
_ENV_ID = re.compile(r"^[a-z][a-z0-9_]*_v\d+$")
_REGISTRY: dict[str, EnvCreator] = {}
#: What makes a module importable on Ray workers (the message of :class:`EnvImportError`).
_IMPORT_FIX = (
    "list the module under `imports:` in the experiment YAML (the CLI imports it before "
    "training and puts the working folder on the workers' PYTHONPATH); or make it importable "
    "on every worker: put its folder on PYTHONPATH, or start Ray with "
    "ray.init(runtime_env={'working_dir': '<folder holding it>'}) or "
    "runtime_env={'py_modules': [<the module>]}")


class EnvImportError(ImportError):
    """A text env whose creator this process cannot load, typically a Ray worker that cannot
    import the module the env is defined in. ``name`` is that module (when known), ``env_id``
    the env; the message also gives this process's ``sys.path`` and the fix."""

    def __init__(self, message: str, *, env_id: str | None = None, module: str | None = None):
        super().__init__(message, name=module)
        self.env_id = env_id


def register_text_env(env_id: str, creator: EnvCreator, *, with_ray: bool = True) -> None:
    """Register ``creator(**env_config) -> TextParallelEnv`` under a versioned id like ``maze_v0``.

    Nothing is built or imported: the id also becomes known to Ray (``with_ray``) and to
    ``pettingzoo.make("parallel", env_id)`` (unless PettingZoo already holds that id)."""
    if not _ENV_ID.match(env_id):
        raise ValueError(f"env id {env_id!r} must look like 'name_v0' (lowercase, versioned)")
    if isinstance(creator, (ParallelEnv, AECEnv)):
        _refuse_env_instance(env_id, creator)
    if not callable(creator):
        raise TypeError(f"creator for {env_id!r} must be callable, got {type(creator).__name__}")
    if isinstance(creator, type):  # a class: its methods can be checked before any instance
        _check_protocol(creator, [name for name in PROTOCOL_ATTRIBUTES
                                  if callable(getattr(TextParallelEnv, name, None))
                                  and not hasattr(creator, name)])
    _REGISTRY[env_id] = creator
    _share_with_pettingzoo(env_id)
    if with_ray:
        from ray.tune.registry import register_env

        register_env(env_id, _RayEnvCreator(creator, env_id))


def _wrapper_for(env_or_class: Any) -> str:
    cls = env_or_class if isinstance(env_or_class, type) else type(env_or_class)
    return "wrap_aec_env" if issubclass(cls, AECEnv) else "wrap_parallel_env"


def _refuse_env_instance(env_id: str, env: Any) -> None:
    """``register_text_env`` takes a creator: each rollout builds its own env."""
    name = type(env).__name__
    if missing_protocol_attributes(env):
        raise NotATextEnvError(
            f"register_text_env({env_id!r}, ...) got a {name} instance, a plain PettingZoo env: "
            f"pass a creator and wrap it: register_text_env({env_id!r}, "
            f"{_wrapper_for(env)}({name})) (pettingllms_rllib.envs; docs/custom_env.md)")
    raise TypeError(f"register_text_env({env_id!r}, ...) got a {name} instance: pass a creator "
                    f"(the class {name}, or a function building it from env_config), since "
                    f"every rollout builds its own env")


class _RayEnvCreator:
    """Picklable creator for ``ray.tune.register_env`` (RLlib passes an ``EnvContext``).

    It pickles as the env id plus the cloudpickled creator, rebuilt by
    :func:`_rebuild_ray_env_creator`: a process that cannot import the creator's module (a Ray
    worker without the user's module on its path) gets :class:`EnvImportError` naming it."""

    def __init__(self, creator: EnvCreator, env_id: str | None = None):
        self.creator = creator
        self.env_id = env_id

    def __call__(self, env_config: Mapping[str, Any] | None = None):
        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

        return ParallelPettingZooEnv(self.creator(**dict(env_config or {})))

    def __reduce__(self):
        return _rebuild_ray_env_creator, (self.env_id, _cloudpickle_dumps(self.creator))


def _cloudpickle_dumps(obj: Any) -> bytes:
    """Pickle ``obj`` by value where it must be (a lambda, a class from ``__main__``)."""
    try:
        from ray import cloudpickle
    except ImportError:
        try:
            import cloudpickle
        except ImportError:
            return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


def _rebuild_ray_env_creator(env_id: str | None, payload: bytes) -> _RayEnvCreator:
    """Unpickle a :class:`_RayEnvCreator`; a creator whose module cannot be imported here
    raises :class:`EnvImportError` instead of a bare ``ModuleNotFoundError``."""
    try:
        creator = pickle.loads(payload)
    except (ImportError, AttributeError) as exc:
        raise _env_import_error(env_id, exc) from exc
    return _RayEnvCreator(creator, env_id)


_MODULE_IN_MESSAGE = re.compile(r"on <module '([^']+)'")


def _env_import_error(env_id: str | None, exc: BaseException) -> EnvImportError:
    """The :class:`EnvImportError` for a creator of ``env_id`` that failed to load with ``exc``."""
    if isinstance(exc, EnvImportError):
        return exc
    env = f"text env {env_id!r}" if env_id else "a text env"
    where = f"this process (pid {os.getpid()}, e.g. a Ray worker)"
    fix = _IMPORT_FIX
    if isinstance(exc, ImportError):
        module = exc.name
        what = (f"its creator needs module {module!r}, which {where} cannot import"
                if module else f"its creator needs a module that {where} cannot import")
    else:  # pickle: "Can't get attribute 'X' on <module 'm' from ...>"
        found = _MODULE_IN_MESSAGE.search(str(exc))
        module = found.group(1) if found else None
        what = (f"its creator is defined in module {module!r}, but the copy of {module!r} "
                f"that {where} imports lacks it (another file or version than the driver's)"
                if module else f"its creator cannot be found in {where}")
        fix = "make every process import the driver's copy of the module: " + fix
    return EnvImportError(
        f"{env} cannot be loaded: {what} ({type(exc).__name__}: {exc}). Fix: {fix}. "
        f"This process's sys.path: {sys.path}", env_id=env_id, module=module)


def _check_protocol(env_or_class: Any, missing: list[str]) -> None:
    """Raise :class:`NotATextEnvError` naming ``missing`` and the wrapper that supplies them."""
    if not missing:
        return
    cls = env_or_class if isinstance(env_or_class, type) else type(env_or_class)
    wrapper = _wrapper_for(cls)
    raise NotATextEnvError(
        f"{cls.__name__} is not a text env: it lacks {', '.join(missing)} (the text-env "
        f"protocol). A plain PettingZoo env needs no rewrite: register "
        f"{wrapper}({cls.__name__}) instead (pettingllms_rllib.envs; docs/custom_env.md)")


def _check_made_env(env_id: str, creator: Any, env: Any) -> None:
    """What ``creator`` built for ``env_id`` must be a text env; a plain PettingZoo env is
    refused naming the wrapper to register instead."""
    missing = missing_protocol_attributes(env)
    if not missing:
        return
    if isinstance(creator, type):  # registered as a class: the class was checked, say so again
        _check_protocol(env, missing)
    name = getattr(creator, "__name__", type(creator).__name__)
    shown = name if name.isidentifier() else "<creator>"
    cls = type(env).__name__
    if not isinstance(env, (ParallelEnv, AECEnv)):
        raise NotATextEnvError(
            f"the creator of {env_id!r} ({name}) returned {cls}, which is not a text env nor "
            f"a PettingZoo env: it lacks {', '.join(missing)} (the text-env protocol). Return a "
            f"TextParallelEnv, or a plain ParallelEnv / AECEnv and register the creator "
            f"wrapped with wrap_parallel_env / wrap_aec_env (docs/custom_env.md)")
    kind = "AECEnv" if isinstance(env, AECEnv) else "ParallelEnv"
    raise NotATextEnvError(
        f"the creator of {env_id!r} ({name}) returned {cls}, a plain PettingZoo {kind}, which "
        f"is not a text env: it lacks {', '.join(missing)} (the text-env protocol). It needs "
        f"no rewrite: wrap it with {_wrapper_for(env)}(...): register_text_env({env_id!r}, "
        f"{_wrapper_for(env)}({shown})) (pettingllms_rllib.envs; docs/custom_env.md)")


# ---------------------------------------------------------------------- PettingZoo's registry
class _TextEnvEntryPoint:
    """PettingZoo's entry point for a text env id: ``pettingzoo.make("parallel", id, **cfg)``
    is ``make_text_env(id, cfg)``, looked up when made (registering builds nothing)."""

    def __init__(self, env_id: str):
        self.env_id = env_id
        self.__name__ = f"make_text_env[{env_id}]"

    def __call__(self, **env_config) -> TextParallelEnv:
        return make_text_env(self.env_id, env_config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _TextEnvEntryPoint) and other.env_id == self.env_id

    def __hash__(self) -> int:  # PettingZoo caches entry points by value
        return hash((_TextEnvEntryPoint, self.env_id))

    def __repr__(self) -> str:
        return f"_TextEnvEntryPoint({self.env_id!r})"


def _share_with_pettingzoo(env_id: str) -> None:
    """Register ``env_id`` in PettingZoo's parallel registry, unless PettingZoo holds it."""
    if EnvSpec is None:
        return
    try:
        key = EnvSpec(id=env_id).id  # PettingZoo's spelling: name-vN
    except PettingZooRegistryError:
        return
    if key not in pettingzoo.parallel_registry:
        pettingzoo.register("parallel", env_id, entry_point=_TextEnvEntryPoint(env_id))


def _share_declared_ids_with_pettingzoo() -> None:
    """At import: PettingZoo learns the ids declared as entry points (names only; nothing is
    imported until one is made)."""
    try:
        names = sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})
    except Exception:  # pragma: no cover - broken metadata must not break the import
        return
    for name in names:
        if _ENV_ID.match(name):
            _share_with_pettingzoo(name)


def _is_ours(spec: Any) -> bool:
    return isinstance(spec.entry_point, _TextEnvEntryPoint)


class _PettingZooCreator:
    """A text-env creator for an env in PettingZoo's registry: ``pettingzoo.make`` with the
    spec (its ``kwargs`` and ``max_cycles`` under ``env_config``), wrapped unless the env is
    a text env already. It carries the spec, so it works where PettingZoo lacks the id (a Ray
    worker that never imported the module that registered it)."""

    def __init__(self, env_type: str, spec: Any):
        self.env_type, self.spec = env_type, spec
        entry = spec.entry_point
        self.__name__ = entry if isinstance(entry, str) else getattr(
            entry, "__name__", type(entry).__name__)

    def __call__(self, **env_config):
        with warnings.catch_warnings():  # the kind of env is checked (and wrapped) below
            warnings.filterwarnings("ignore", message=r"Environment .* was expected to be")
            try:
                env = pettingzoo.make(self.env_type, self.spec, **env_config)
            except PettingZooRegistryError as exc:  # FailedToImport: name the module and fix
                if isinstance(exc.__cause__, ImportError):
                    raise _env_import_error(self.spec.id, exc.__cause__) from exc
                raise
        if not missing_protocol_attributes(env):
            return env

        def built(**_):
            return env

        built.__name__ = self.__name__
        return (wrap_aec_env if isinstance(env, AECEnv) else wrap_parallel_env)(built)()

    def __repr__(self) -> str:
        return f"<PettingZoo {self.env_type} env {self.spec.id!r}>"


def _from_pettingzoo_registry(env_id: str) -> _PettingZooCreator | None:
    """The creator for an id that PettingZoo's registry holds for someone else's env (any
    spelling PettingZoo resolves); the AEC registration first, as PettingZoo's parallel twin
    of an AEC env takes every agent's action of a cycle at once."""
    if EnvSpec is None:
        return None
    for env_type in ("aec", "parallel"):
        try:
            spec = pettingzoo.spec(env_type, env_id)
        except PettingZooRegistryError:
            continue
        if not _is_ours(spec):
            return _PettingZooCreator(env_type, spec)
    return None


def _pettingzoo_ids() -> dict[str, list[str]]:
    if EnvSpec is None:
        return {"parallel": [], "aec": []}
    return {env_type: sorted(key for key, spec in registry.items() if not _is_ours(spec))
            for env_type, registry in (("parallel", pettingzoo.parallel_registry),
                                       ("aec", pettingzoo.aec_registry))}


def _share_with_ray(env_id: str, creator: EnvCreator) -> None:
    """Put a creator found in PettingZoo's registry into Ray's, so Ray workers (which never
    imported the module that registered it) find it through :func:`_from_ray_registry`."""
    try:
        from ray.tune.registry import register_env
    except ImportError:
        return
    try:
        register_env(env_id, _RayEnvCreator(creator, env_id))
    except Exception as exc:  # only Ray workers need it; making the env here still works
        warnings.warn(f"PettingZoo env {env_id!r} could not be shared with Ray workers "
                      f"({type(exc).__name__}: {exc}); they find it only if they import the "
                      f"module that registers it", stacklevel=3)


# ---------------------------------------------------------------------- lookups
_entry_points_loaded = False


def _load_entry_point_envs() -> None:
    """Register every env declared under :data:`ENTRY_POINT_GROUP` (once per process). A
    declared env that cannot be loaded raises, naming the entry point and its package."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
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
    global registry; recover our creator from there. One whose module this process cannot
    import raises :class:`EnvImportError`."""
    try:
        import ray
        from ray.tune.registry import ENV_CREATOR, _global_registry
    except ImportError:
        return None
    if not ray.is_initialized() or not _global_registry.contains(ENV_CREATOR, env_id):
        return None
    try:
        creator = _global_registry.get(ENV_CREATOR, env_id)
    except EnvImportError:
        raise
    except (ImportError, AttributeError) as exc:
        raise _env_import_error(env_id, exc) from exc
    return creator.creator if isinstance(creator, _RayEnvCreator) else None


def _unknown_env_error(env_id: str) -> KeyError:
    known = sorted(_REGISTRY)
    foreign = _pettingzoo_ids()
    close = difflib.get_close_matches(env_id, known + foreign["parallel"] + foreign["aec"],
                                    n=3, cutoff=0.75)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    theirs = ("" if EnvSpec is None else f"; in PettingZoo's registry (wrapped as text envs "
              f"when made): parallel {foreign['parallel']}, aec {foreign['aec']}")
    return KeyError(f"unknown text env {env_id!r}; registered: {known}{theirs}.{hint}")


def get_env_creator(env_id: str) -> EnvCreator:
    """The creator for ``env_id``: registered here (in code or as an entry point), in Ray's
    registry (an env the driver registered), else in PettingZoo's registry (wrapped)."""
    _load_entry_point_envs()
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    if (creator := _from_ray_registry(env_id)) is not None:
        _REGISTRY[env_id] = creator
        return creator
    if (creator := _from_pettingzoo_registry(env_id)) is not None:
        _share_with_ray(env_id, creator)
        return creator
    raise _unknown_env_error(env_id)


def make_text_env(env_id: str, env_config: Mapping[str, Any] | None = None) -> TextParallelEnv:
    """Build a registered env. Bad ``env_config`` keys raise a ``ValueError`` naming them."""
    creator = get_env_creator(env_id)
    try:
        env = creator(**dict(env_config or {}))
    except NotATextEnvError:
        raise
    except TypeError as exc:
        raise ValueError(f"bad env_config for {env_id!r}: {exc}") from exc
    _check_made_env(env_id, creator, env)
    return env


_share_declared_ids_with_pettingzoo()
