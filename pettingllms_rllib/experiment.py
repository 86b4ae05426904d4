"""Experiment files: YAML -> validated ``ATGRPOConfig`` + Ray Tune ``param_space``.

A file names the ``ATGRPOConfig`` fluent sections to call (``environment``, ``llm``,
``training``, ``env_runners``, ...) with their keyword arguments, the agent -> module
``mapping``, Tune's ``stop`` criteria and checkpointing, and an optional ``grid`` over dotted
keys. Every key is checked against the real method signatures, so a typo fails with the list
of accepted keys before Ray starts. See ``tune_configs/plan_path_cpu.yaml``.

One file holds one setting and the arms compared in it. ``arms`` names each arm's
overrides; ``every_arm`` holds what all of them share (the comparison's budget, its seeds) and
does not apply to the setting run as it is::

    # tune_configs/math_cpu.yaml (pettingllms-rllib train tune_configs/math_cpu.yaml --arm atgrpo_shared)
    every_arm:
      stop: {env_runners/num_generated_tokens_lifetime: 12000, training_iteration: 30}
    arms:
      atgrpo_per_role: {}
      atgrpo_shared: {mapping: shared}

An arm is the file, then ``every_arm``, then the arm's own keys, each deep-merged over the
last; it is named ``<name>_<arm>`` unless it sets ``name``. An unknown arm is refused, naming
the file's arms.

``extends: <path>`` (relative to the file that names it) builds a file on another one (a
setting that differs from another in a few keys). The file's keys are deep-merged over its
base's: a mapping (``algorithm``, a section, ``env_config``, ``stop``, ``grid``, a dict
``mapping``) is merged key by key, recursively; anything else (a number, a string, a list,
``null``) replaces the base's value. A base may extend another (a chain, resolved base first)
and may itself be a runnable experiment; a cycle or a missing base is refused. ``name``,
``description``, ``arms`` and ``every_arm`` describe one file and are not inherited (``name``
defaults to the file's stem). ``--set`` overrides apply to the merged document, last.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import itertools
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from pettingllms_rllib.algorithms.config import GRID_KEY, ATGRPOConfig
from pettingllms_rllib.algorithms.config_fields import (TUNE_FIELDS, check_value, field_for,
                                                        lora_problems, stop_field)

TOP_LEVEL_KEYS = ("extends", "name", "description", "imports", "algorithm", "mapping", "stop", "grid",
                  "checkpoint_frequency", "max_concurrent_trials", "num_samples", "arms",
                  "every_arm")
#: Keys resolved when the file is read (``load_document``): not in an arm, not in ``--set``.
RESOLVED_WHEN_READ = ("extends", "arms", "every_arm")
#: The keys an arm (or ``every_arm``) may set: those of one runnable experiment.
ARM_KEYS = tuple(key for key in TOP_LEVEL_KEYS if key not in RESOLVED_WHEN_READ)
SECTIONS = ("environment", "llm", "training", "env_runners", "learners", "resources",
            "debugging", "reporting", "rl_module", "fault_tolerance", "checkpointing",
            "evaluation", "resource_pools")
NAMED_MAPPINGS = ("shared", "per_role")
#: Top-level keys that describe one file and are not inherited through ``extends``.
NOT_INHERITED = ("name", "description", "arms", "every_arm")


class ExperimentError(ValueError):
    """A bad experiment file or override; the message names the bad value and the options."""


class _Loader(yaml.SafeLoader):
    """YAML as users write it: ``1e-4`` is a number (PyYAML follows YAML 1.1, which wants
    ``1.0e-4`` and would read ``1e-4`` as text, then refused as "not a number"), and a key
    given twice in one mapping is an error (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<:``, overridden on purpose
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the constructor's own error names it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first given on line "
                                    f"{first.line + 1}); accepted: each key once per mapping",
                        key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _load_yaml(text: str, source: str = "<text>") -> Any:
    """Parse YAML; a syntax error or a duplicate key is one :class:`ExperimentError` line,
    ``source:line:column: what``, not a traceback."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        what = " ".join(part for part in (exc.problem, f"({exc.context})" if exc.context
                                          else None) if part)
        if "'\\t'" in what:
            what += "; YAML indents with spaces, not tabs"
        raise ExperimentError(f"{where}: {what}") from None
    except yaml.YAMLError as exc:  # unmarked (rare): still one line
        raise ExperimentError(f"{source}: {' '.join(str(exc).split())}") from None


class AgentModuleMap:
    """A picklable ``policy_mapping_fn`` from a fixed agent -> module table."""

    def __init__(self, table: Mapping[str, str]):
        self.table = dict(table)

    def __call__(self, agent_id, episode=None, **kwargs) -> str:
        if agent_id not in self.table:
            raise KeyError(f"agent {agent_id!r} has no module; mapping: {self.table}")
        return self.table[agent_id]

    def __repr__(self) -> str:
        return f"AgentModuleMap({self.table})"


def mapping_table(mapping: str | Mapping[str, str], agents: list[str]) -> dict[str, str]:
    """``"shared"`` (one module for all), ``"per_role"`` (one per agent) or an explicit dict."""
    if mapping == "shared":
        return {agent: "shared" for agent in agents}
    if mapping == "per_role":
        return {agent: agent for agent in agents}
    if isinstance(mapping, Mapping):
        missing = [a for a in agents if a not in mapping]
        if missing:
            raise ExperimentError(f"mapping {dict(mapping)} misses agents {missing}; "
                                  f"env agents: {agents}")
        return {agent: str(mapping[agent]) for agent in agents}
    raise ExperimentError(f"unknown mapping {mapping!r}; accepted: {NAMED_MAPPINGS} "
                          f"or a dict agent -> module id")


def multi_agent_kwargs(mapping, agents: list[str]) -> dict[str, Any]:
    table = mapping_table(mapping, agents)
    return {"policies": set(table.values()), "policy_mapping_fn": AgentModuleMap(table)}


def _accepted_kwargs(section: str) -> set[str]:
    method = getattr(ATGRPOConfig, section)
    names = {n for n, p in inspect.signature(method).parameters.items()
             if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}
    if section == "training":  # ATGRPOConfig.training forwards **kwargs to RLlib's
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        names |= {n for n in inspect.signature(AlgorithmConfig.training).parameters
                  if n != "self"}
    return names


@dataclasses.dataclass
class Experiment:
    """A parsed experiment: one validated config per grid point, and the Tune settings."""

    name: str
    configs: list[ATGRPOConfig]
    stop: dict[str, Any]
    checkpoint_frequency: int
    max_concurrent_trials: int
    num_samples: int
    variants: list[dict[str, Any]]
    imports: list[str] = dataclasses.field(default_factory=list)

    @property
    def config(self) -> ATGRPOConfig:
        """The first grid point's config (the only one without a grid)."""
        return self.configs[0]

    def param_space(self) -> dict[str, Any]:
        """Tune's param space: a grid over whole configs (one per grid point)."""
        from ray import tune

        configs = [config.to_dict() for config in self.configs]
        if len(configs) == 1:
            return configs[0]
        base = {key: value for key, value in configs[0].items()
                if all(_same(c.get(key), value) for c in configs)}
        varying = sorted({key for c in configs for key in c if key not in base})
        base[GRID_KEY] = tune.grid_search([{k: c[k] for k in varying} for c in configs])
        return base


def _same(a, b) -> bool:
    try:
        return a == b and type(a) is type(b)
    except Exception:
        return False


def set_dotted(document: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``training.lr`` -> document["algorithm"]["training"]["lr"]; ``mapping`` top-level."""
    parts = dotted.split(".")
    if parts[0] in SECTIONS:
        parts = ["algorithm", *parts]
    target = document
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ExperimentError(f"cannot set {dotted!r}: {part!r} is not a mapping")
    target[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ExperimentError(f"--set expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    return key.strip(), _load_yaml(raw, source=f"--set {text!r}")


def build_config(document: Mapping[str, Any], variant: Mapping[str, Any] | None = None
                 ) -> ATGRPOConfig:
    """Turn a validated document (plus one grid variant) into an ``ATGRPOConfig``."""
    from pettingllms_rllib.envs.registry import make_text_env

    document = copy.deepcopy(dict(document))
    for dotted, value in (variant or {}).items():
        set_dotted(document, dotted, value)
    config = ATGRPOConfig()
    for section, kwargs in (document.get("algorithm") or {}).items():
        getattr(config, section)(**kwargs)
    try:
        agents = list(make_text_env(config.env, config.env_config).possible_agents)
    except KeyError as exc:
        raise ExperimentError(str(exc.args[0])) from exc
    config.multi_agent(**multi_agent_kwargs(document.get("mapping", "shared"), agents))
    return config


def _check_document(document: Any, source: str) -> None:
    if not isinstance(document, dict):
        raise ExperimentError(f"{source}: expected a mapping at the top level")
    unknown = sorted(set(document) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ExperimentError(f"{source}: unknown keys {unknown}; accepted: {list(TOP_LEVEL_KEYS)}")
    sections = document.get("algorithm") or {}
    if not isinstance(sections, dict):
        raise ExperimentError(f"{source}: 'algorithm' must map section names to kwargs")
    for section, kwargs in sections.items():
        if section not in SECTIONS:
            raise ExperimentError(f"{source}: unknown section algorithm.{section}; "
                                  f"accepted: {list(SECTIONS)}")
        if not isinstance(kwargs, dict):
            raise ExperimentError(f"{source}: algorithm.{section} must be a mapping")
        _refuse_unknown_keys(kwargs, sorted(_accepted_kwargs(section)), f"algorithm.{section}",
                             source)
    _check_arms(document, source)
    _check_values(document, source)
    imports = document.get("imports") or []
    if not isinstance(imports, list) or not all(isinstance(m, str) and m for m in imports):
        raise ExperimentError(f"{source}: 'imports' must be a list of module names")
    for dotted in (document.get("grid") or {}):
        parts = dotted.split(".")
        if dotted != "mapping" and not (len(parts) >= 2 and parts[0] in SECTIONS and (
                parts[1] in _accepted_kwargs(parts[0]))):
            raise ExperimentError(f"{source}: grid key {dotted!r} is not 'mapping' or "
                                  f"'<section>.<key>' with section in {list(SECTIONS)}")


def _check_arms(document: Mapping[str, Any], source: str) -> None:
    """``arms`` maps names to partial experiments, ``every_arm`` is one, and neither nests
    arms; each arm's merged document is checked when that arm is loaded."""
    arms = document.get("arms")
    if arms is not None and (not isinstance(arms, dict) or not arms):
        raise ExperimentError(f"{source}: 'arms' must map arm names to overrides")
    for name in arms or {}:
        if not re.fullmatch(r"[A-Za-z0-9_]+", str(name)):
            raise ExperimentError(f"{source}: arm name {name!r}; accepted: letters, digits "
                                  f"and _")
    parts = {f"arms.{name}": over for name, over in (arms or {}).items()}
    if "every_arm" in document:
        parts["every_arm"] = document["every_arm"]
    for where, over in parts.items():
        if not isinstance(over, dict):
            raise ExperimentError(f"{source}: {where} must be a mapping of experiment keys")
        _refuse_unknown_keys(over, list(ARM_KEYS), where, source)


def _refuse_unknown_keys(given: Mapping[str, Any], accepted: list[str], where: str,
                         source: str) -> None:
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ExperimentError(f"{source}: unknown keys {unknown} in {where}; accepted: "
                              f"{accepted}")


def _check_values(document: Mapping[str, Any], source: str) -> None:
    """Every value's type and range (``algorithm_fields``), Tune's keys, the grid's values."""
    problems = []
    for key, field in TUNE_FIELDS.items():
        if key in document:
            problems.append(check_value(key, document[key], field))
    stop = document.get("stop")
    if isinstance(stop, dict):
        for metric, limit in stop.items():
            problems.append(check_value(f"stop.{metric}", limit, stop_field(metric)))
    for section, kwargs in (document.get("algorithm") or {}).items():
        for key, value in (kwargs or {}).items():
            problems.extend(_problems(f"{section}.{key}", section, key, value))
    for dotted, values in (document.get("grid") or {}).items():
        parts = dotted.split(".")
        if len(parts) == 2 and isinstance(values, list):
            for value in values:
                problems.extend(_problems(f"grid.{dotted}", parts[0], parts[1], value))
    problems = [p for p in problems if p]
    if problems:
        raise ExperimentError(f"{source}: " + "; ".join(problems))


def _problems(dotted: str, section: str, key: str, value: Any) -> list[str | None]:
    field = field_for(section, key)
    found = [check_value(dotted, value, field)] if field is not None else []
    if (section, key) == ("llm", "lora"):
        found += lora_problems(dotted, value)
    return found


#: ``llm`` keys that may name a local path, made absolute on the driver: Ray runs trials in
#: a working directory of its own, where a relative path would not be found.
PATH_KEYS = ("model", "vllm_weight_sync_dir")


def _make_paths_absolute(document: dict[str, Any]) -> None:
    from pettingllms_rllib.models.loading import looks_like_path

    llm = (document.get("algorithm") or {}).get("llm") or {}
    for key in PATH_KEYS:
        value = llm.get(key)
        if isinstance(value, str) and value and (
                looks_like_path(value) or Path(value).expanduser().exists()):
            llm[key] = str(Path(value).expanduser().resolve())


def import_env_modules(modules: list[str], *, source: str) -> None:
    """Import the modules an experiment lists under ``imports`` (they register user envs with
    ``register_text_env``). They must be importable from the current directory or the Python
    path; the CLI passes both on to Ray workers."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ExperimentError(f"{source}: imports: cannot import {name!r} ({exc}); put it "
                                  "on PYTHONPATH or run from the folder that holds it") from exc


def merge_documents(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` deep-merged onto ``base`` (neither changed): mappings merged key by key,
    recursively; any other value of ``over`` (scalar, list, null) replaces the base's."""
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_documents(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_document(path: str | Path, arm: str | None = None) -> dict[str, Any]:
    """The experiment file's document with its ``extends`` chain resolved (no ``extends`` key
    left), every file of the chain checked on its own and the result checked as a whole;
    with ``arm``, that arm of the file (see the module docstring), without ``arms`` and
    ``every_arm``. Raises :class:`ExperimentError` for a missing file or base, a cycle, a bad
    key or an unknown arm."""
    path = Path(path)
    document = _resolve_document(path, ())
    arms = document.pop("arms", None) or {}
    every_arm = document.pop("every_arm", None) or {}
    if arm is None:
        return document
    if arm not in arms:
        raise ExperimentError(f"{path}: unknown arm {arm!r}; accepted: {sorted(arms)}"
                              if arms else f"{path}: --arm {arm!r}, but the file has no arms")
    merged = merge_documents(merge_documents(document, every_arm), arms[arm])
    if "name" not in arms[arm]:
        merged["name"] = f"{experiment_name(document, path)}_{arm}"
    _check_document(merged, f"{path}, arm {arm}")
    return merged


def experiment_name(document: Mapping[str, Any], path: Path) -> str:
    """The document's ``name``, else the file's stem."""
    return str(document.get("name") or path.stem)


def arm_names(path: str | Path) -> list[str]:
    """The arms the experiment file declares, in file order (empty: none)."""
    return list(_resolve_document(Path(path), ()).get("arms") or {})


def _resolve_document(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    if not path.is_file():
        raise ExperimentError(f"experiment file {str(path)!r} does not exist")
    document = _load_yaml(path.read_text(), source=str(path)) or {}
    _check_document(document, str(path))
    if "extends" not in document:
        return document
    base_name = document.pop("extends")
    if not isinstance(base_name, str) or not base_name.strip():
        raise ExperimentError(f"{path}: extends: expected the relative path of a base "
                              f"experiment file, got {base_name!r}")
    base_path = path.parent / base_name
    here = path.resolve()
    seen = (*chain, here)
    if base_path.resolve() in seen:
        loop = " -> ".join(str(p) for p in (*seen[seen.index(base_path.resolve()):],
                                              base_path.resolve()))
        raise ExperimentError(f"{path}: extends: {base_name!r} makes a cycle ({loop}); "
                              f"accepted: a chain of bases that ends in a file without extends")
    if not base_path.is_file():
        raise ExperimentError(f"{path}: extends: base file {base_name!r} does not exist "
                              f"(looked for {str(base_path)!r}, relative to {str(path.parent)!r})")
    base = _resolve_document(base_path, seen)
    for key in NOT_INHERITED:
        base.pop(key, None)
    merged = merge_documents(base, document)
    _check_document(merged, f"{path} (extends {base_name})")
    return merged


def load_experiment(path: str | Path, overrides: list[str] = (), *, arm: str | None = None,
                    resources: Mapping[str, float] | None = None) -> Experiment:
    """Read, override, validate. Raises :class:`ExperimentError` before any Ray work.

    Args:
        path: the experiment YAML.
        overrides: ``key=value`` texts (the CLI's ``--set``).
        arm: one of the file's ``arms`` (the CLI's ``--arm``); None: the file as it is.
        resources: what one trial's placement group must fit in, ``{"CPU": n, "GPU": m}``
            (the CLI passes the local Ray it starts); a trial asking for more would wait for
            Ray forever. None: not checked (a GPU config validated on a CPU head node).
    """
    path = Path(path)
    document = load_document(path, arm)
    for text in overrides:
        key, value = parse_override(text)
        if key in RESOLVED_WHEN_READ:
            raise ExperimentError(f"--set {text!r}: {key} is resolved when the file is read; "
                                  f"accepted: {key} inside an experiment file")
        set_dotted(document, key, value)
    _check_document(document, f"{path} with --set overrides")
    _make_paths_absolute(document)
    import_env_modules(document.get("imports") or [], source=str(path))
    grid = document.get("grid") or {}
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ExperimentError(f"grid.{key} must be a non-empty list")
    variants = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())] or [{}]
    configs = []
    for variant in variants:
        try:
            config = build_config(document, variant)
            config.validate()
            if resources is not None:
                config.check_resources(dict(resources), where="the local Ray of this machine")
        except ExperimentError:
            raise
        except (ValueError, KeyError, TypeError, FileNotFoundError, ImportError) as exc:
            raise ExperimentError(f"{path}: {variant or 'config'}: {exc}") from exc
        configs.append(config)
    return Experiment(
        name=experiment_name(document, path), configs=configs,
        stop=dict(document.get("stop") or {"training_iteration": 10}),
        checkpoint_frequency=int(document.get("checkpoint_frequency", 1)),
        max_concurrent_trials=int(document.get("max_concurrent_trials", 1)),
        num_samples=int(document.get("num_samples", 1)), variants=variants,
        imports=list(document.get("imports") or []))
