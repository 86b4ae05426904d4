"""Types and ranges of every config key, checked before Ray starts.

One generic check (:func:`check_value`) runs over declared fields instead of an ``if`` per
key. A key's field comes from, in order:

1. :data:`FIELDS`, which declares the keys whose range matters (``lr > 0``, ``K >= 2``,
   ``temperature > 0``, LoRA ``r >= 1``, ...) and the keys whose default is ``None``, so their
   type cannot be read from it;
2. otherwise the type of the key's default on a fresh :class:`ATGRPOConfig`: a number
   default (int or float) makes a number field, a ``bool`` default a flag, so every RLlib
   knob with such a default is type-checked too. Text defaults are not turned into fields,
   because RLlib mixes them with numbers (``num_cpus_per_learner="auto"`` or ``2``).

The rules: an int field refuses ``4.5``, ``"4"`` and ``True``. A number field takes ints and
floats but refuses strings, booleans, ``nan`` and ``inf``. Optional fields also take
``None``. Every error names the dotted key, the value and what is accepted.

Upper bounds (issue 42: a size of ``10**9`` must not reach Ray, where it hangs or asks for
terabytes) are declared here too, once per key: fixed caps (:data:`MAX_BRANCHES`,
:data:`MAX_TASKS_PER_ITERATION`, :data:`MAX_SANDBOX_SECONDS`) in the field itself, and bounds
that depend on the model or the machine as a :class:`Bound`, read when a built config is
checked (:func:`check_fields`, run by ``ATGRPOConfig.validate``): ``llm.max_new_tokens``
within the model's context length, the sandbox's ``memory_mb`` and ``max_output_bytes``
within this host's memory.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from pettingllms_rllib.engines import find_engine_kind
from pettingllms_rllib.models.precision import MODEL_DTYPES

__all__ = ["Bound", "Field", "FIELDS", "LORA_FIELDS", "MAX_BRANCHES", "MAX_SANDBOX_SECONDS",
           "MAX_TASKS_PER_ITERATION", "SANDBOX_LIMIT_FIELDS", "check_fields", "check_value",
           "field_for", "lora_problems", "sandbox_problems", "stop_field", "TUNE_FIELDS"]

#: Most candidates per group (K, ``training.num_branches``). The paper and every shipped config
#: use 2 to 8; 256 is 32 times the largest, and beyond it one group's K answers per (task,
#: agent, turn) only make an iteration longer (``10**9`` hung the sampler). Raise it here if a
#: run really needs more.
MAX_BRANCHES = 256
#: Most task instances (tree roots) per training iteration (``training.num_tasks_per_iteration``):
#: 32 times the largest shipped config (128); ``10**12`` was accepted and never finished an
#: iteration. Raise it here if a run really needs more.
MAX_TASKS_PER_ITERATION = 4096
#: Longest wall-clock and CPU time of one sandboxed program run (``env_config.sandbox_limits``
#: ``wall_time_s`` and ``cpu_time_s``), in seconds: ten minutes, 120 times the shipped default
#: of 5 s. A program that needs longer is not a tool call inside one agent's turn (``1e308`` was
#: accepted and trained).
MAX_SANDBOX_SECONDS = 600.0


@dataclasses.dataclass(frozen=True)
class Bound:
    """An upper bound that depends on the model or the machine, read when a built config is
    checked (:func:`check_fields`); the YAML check before the config is built skips it.

    Attributes:
        what: the bound in words, for the error message ("the model's context length").
        read: config -> the bound, or None where it cannot be known here (a hub model not in
            the local cache, an OS that does not say its memory): the value is then not
            bounded.
    """

    what: str
    read: Callable[[Any], float | None]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _context_length(config) -> int | None:
    from pettingllms_rllib.models import memory

    try:
        return memory.model_context_length(config.model_spec_dict)
    except (ValueError, TypeError, OSError):  # a bad or missing model: its own check names it
        return None


def _response_length(config) -> int | None:
    context = _context_length(config)
    engine = find_engine_kind(getattr(config, "engine", None))
    engine_length = None if engine is None else engine.max_model_len(config)
    if engine_length is not None:
        return engine_length if context is None else min(context, engine_length)
    return context


def _host_memory_bytes(config) -> int | None:
    from pettingllms_rllib.models import memory

    return memory.host_memory_bytes()


def _host_memory_mib(config) -> int | None:
    total = _host_memory_bytes(config)
    return None if total is None else total // (1 << 20)


#: ``llm.vllm_max_model_len``: no longer than the model's positions.
MODEL_CONTEXT = Bound("the model's context length, max_position_embeddings of its config",
                      _context_length)
#: ``llm.max_new_tokens``: a response never outgrows the model's positions, nor vLLM's
#: ``vllm_max_model_len`` (``10**9`` made the engine ask for a 4 TB cache).
RESPONSE_CONTEXT = Bound("the model's context length, max_position_embeddings of its config; "
                         "with engine vllm, vllm_max_model_len where smaller", _response_length)
HOST_MEMORY_MIB = Bound("this host's memory in MiB", _host_memory_mib)
HOST_MEMORY_BYTES = Bound("this host's memory in bytes", _host_memory_bytes)


@dataclasses.dataclass(frozen=True)
class Field:
    """What a key accepts.

    Args:
        kind: ``int``, ``float`` (any finite number), ``bool``, ``str``, ``dict`` or ``list``.
        minimum: smallest allowed value (inclusive), for numbers.
        above: values must be greater than this (exclusive), for numbers.
        maximum: largest allowed value (inclusive), for numbers.
        choices: the allowed values, for text.
        optional: ``None`` is allowed too.
        bound: an upper bound read from the model or the machine when a built config is
            checked (inclusive, for numbers).
    """

    kind: type
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    optional: bool = False
    bound: Bound | None = None

    def describe(self, limit: str | None = None) -> str:
        """What the field accepts, in words (with ``limit``, the words of its :class:`Bound`
        as read for one config: "<= 2048 (the model's context length)")."""
        words = {int: "an integer", float: "a finite number", bool: "true or false",
                 str: "text", dict: "a mapping", list: "a list"}[self.kind]
        bounds = []
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        if self.minimum is not None:
            bounds.append(f">= {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"<= {_number(self.maximum)}")
        if limit is not None:
            bounds.append(limit)
        text = words + (" " + " and ".join(bounds) if bounds else "")
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        return text + (", or null" if self.optional else "")


_INT_POSITIVE = Field(int, minimum=1)
_INT_OPTIONAL = Field(int, minimum=1, optional=True)
_NONNEGATIVE = Field(float, minimum=0)

#: Keys per section whose range matters, or whose default (None) says nothing of their type.
FIELDS: dict[str, dict[str, Field]] = {
    "llm": {
        "model": Field(str), "max_new_tokens": Field(int, minimum=1, bound=RESPONSE_CONTEXT),
        "temperature": Field(float, above=0),
        "model_dtype": Field(str, choices=MODEL_DTYPES),
        "lora": Field(dict, optional=True), "tiny_model_config": Field(dict, optional=True),
        "system_prompt": Field(str, optional=True), "generation_batch_size": _INT_OPTIONAL,
        "logprob_chunk_size": _INT_POSITIVE, "gpu_memory_gib": Field(float, above=0,
                                                                     optional=True),
        "vllm_gpu_memory_utilization": Field(float, above=0, maximum=1),
        "vllm_kv_cache_gib": Field(float, above=0, optional=True),
        "vllm_max_model_len": Field(int, minimum=1, optional=True, bound=MODEL_CONTEXT),
        "vllm_engine_kwargs": Field(dict, optional=True),
        "vllm_weight_sync_dir": Field(str, optional=True),
        "autocast_dtype": Field(str, choices=("bfloat16", "float16"), optional=True),
    },
    "training": {
        "num_branches": Field(int, minimum=2, maximum=MAX_BRANCHES),
        "num_tasks_per_iteration": Field(int, minimum=1, maximum=MAX_TASKS_PER_ITERATION),
        "lr": Field(float, above=0), "num_epochs": _INT_POSITIVE,
        "minibatch_size": _INT_OPTIONAL, "grad_clip": Field(float, above=0, optional=True),
        "clip_eps_low": Field(float, minimum=0, maximum=1), "clip_eps_high": _NONNEGATIVE,
        "dual_clip": Field(float, above=1, optional=True), "advantage_eps": _NONNEGATIVE,
        "kl_coef": _NONNEGATIVE, "entropy_coef": _NONNEGATIVE,
        "frozen_modules": Field(list, optional=True),
        "max_staleness": Field(int, minimum=0, maximum=1, optional=True),
        "importance_sampling_cap": Field(float, above=0),
        "stage_credit": Field(str, choices=("auto", "none", "turn")),
        "start_from_checkpoint": Field(str, optional=True),
    },
    "resource_pools": {"pools": Field(dict, optional=True)},
    "env_runners": {"num_env_runners": Field(int, minimum=0),
                    "num_cpus_per_env_runner": _NONNEGATIVE,
                    "num_gpus_per_env_runner": _NONNEGATIVE},
    "learners": {"num_learners": Field(int, minimum=0), "num_gpus_per_learner": _NONNEGATIVE},
    "debugging": {"seed": Field(int, minimum=0, optional=True)},
    "evaluation": {"evaluation_interval": Field(int, minimum=0, optional=True),
                   "evaluation_duration": _INT_POSITIVE},
    "environment": {"env": Field(str), "env_config": Field(dict, optional=True)},
}
#: peft ``LoraConfig`` keys under ``llm.lora`` whose range matters.
LORA_FIELDS: dict[str, Field] = {
    "r": _INT_POSITIVE, "lora_alpha": Field(float, above=0),
    "lora_dropout": Field(float, minimum=0, maximum=1), "target_modules": Field(list,
                                                                               optional=True),
}
#: ``environment.env_config.sandbox_limits`` (``pettingllms_envs.sandbox.SandboxLimits``, of
#: every task that runs programs): the keys whose size the host must be able to give. The
#: dataclass itself checks the rest (positive, finite, whole numbers).
SANDBOX_LIMIT_FIELDS: dict[str, Field] = {
    "wall_time_s": Field(float, above=0, maximum=MAX_SANDBOX_SECONDS),
    "cpu_time_s": Field(float, above=0, maximum=MAX_SANDBOX_SECONDS),
    "memory_mb": Field(float, above=0, bound=HOST_MEMORY_MIB),
    "max_output_bytes": Field(float, above=0, bound=HOST_MEMORY_BYTES),
}
#: Tune ``stop`` criteria that count progress (the last part of the metric's name): a stop at a
#: value below 1 is no run at all (``training_iteration: -1`` trained, "iter 1/-1"). Metrics
#: ending in ``_lifetime`` (tokens, env steps, ...) count too. Other metrics (a success rate,
#: a return) take any finite number.
STOP_COUNTERS: dict[str, Field] = {
    "training_iteration": Field(int, minimum=1), "time_total_s": Field(float, minimum=1),
    "timesteps_total": Field(float, minimum=1), "episodes_total": Field(float, minimum=1),
}
_LIFETIME_COUNTER = Field(float, minimum=1)
#: The experiment file's own keys (Ray Tune's settings).
TUNE_FIELDS: dict[str, Field] = {
    "stop": Field(dict), "checkpoint_frequency": Field(int, minimum=0),
    "max_concurrent_trials": _INT_POSITIVE, "num_samples": _INT_POSITIVE,
    "grid": Field(dict), "name": Field(str), "description": Field(str),
}
_ATTRIBUTE = {("llm", "model"): "llm_model", ("resource_pools", "pools"): "resource_pool_specs"}  # a kwarg stored under another attribute name
_DEFAULTS: dict[str, Any] | None = None


def _defaults() -> dict[str, Any]:
    global _DEFAULTS
    if _DEFAULTS is None:
        from pettingllms_rllib.algorithms.config import ATGRPOConfig

        _DEFAULTS = dict(vars(ATGRPOConfig()))
    return _DEFAULTS


def field_for(section: str, key: str) -> Field | None:
    """The field of ``section.key``: declared, or read from the default's type (None: no
    type to check, e.g. a default of None that is not declared)."""
    declared = FIELDS.get(section, {}).get(key)
    if declared is not None:
        return declared
    default = _defaults().get(_ATTRIBUTE.get((section, key), key))
    if type(default) is bool:  # before the numbers: True is an int to Python
        return Field(bool)
    if type(default) in (int, float):
        return Field(float)
    return None


def stop_field(metric: str) -> Field:
    """The field of Tune's ``stop.<metric>``: >= 1 for counters (:data:`STOP_COUNTERS`, and
    names ending in ``_lifetime``), any finite number otherwise."""
    name = str(metric).rsplit("/", 1)[-1]
    if name in STOP_COUNTERS:
        return STOP_COUNTERS[name]
    return _LIFETIME_COUNTER if name.endswith("_lifetime") else Field(float)


def check_value(dotted: str, value: Any, field: Field, config: Any = None) -> str | None:
    """Why ``value`` does not fit ``field`` (a message naming ``dotted``), or None. With a
    built ``config``, the field's :class:`Bound` (read from its model or this machine) is
    checked too."""
    def refuse() -> str:
        return f"{dotted}: {value!r} is not accepted; expected {field.describe()}"

    if value is None:
        return None if field.optional else refuse()
    if field.kind is int:
        if type(value) is not int:
            return refuse()
    elif field.kind is float:
        if type(value) not in (int, float) or not math.isfinite(value):
            return refuse()
    elif field.kind is list:
        if not isinstance(value, (list, tuple)):
            return refuse()
    elif not isinstance(value, field.kind) or (field.kind is not bool and type(value) is bool):
        return refuse()
    if field.kind in (int, float):
        if field.minimum is not None and value < field.minimum:
            return refuse()
        if field.above is not None and value <= field.above:
            return refuse()
        if field.maximum is not None and value > field.maximum:
            return refuse()
    if field.choices is not None and value not in field.choices:
        return refuse()
    if field.bound is not None and config is not None and value is not None:
        limit = field.bound.read(config)
        if limit is not None and value > limit:
            return (f"{dotted}: {value!r} is not accepted; expected "
                    f"{field.describe(f'<= {_number(limit)} ({field.bound.what})')}")
    return None


def check_fields(config) -> list[str]:
    """Every declared field of a built config (Python users skip the YAML check): the
    messages of those that do not fit."""
    problems = []
    for section, fields in FIELDS.items():
        for key, field in fields.items():
            attribute = _ATTRIBUTE.get((section, key), key)
            if attribute in vars(config):
                problems.append(check_value(f"{section}.{key}", vars(config)[attribute], field,
                                            config))
    problems += lora_problems("llm.lora", vars(config).get("lora"))
    env_config = vars(config).get("env_config")
    if isinstance(env_config, Mapping):
        problems += sandbox_problems("environment.env_config.sandbox_limits",
                                     env_config.get("sandbox_limits"), config)
    return [p for p in problems if p]


def lora_problems(dotted: str, lora: Any) -> list[str | None]:
    """:func:`check_value` of each declared key of a peft ``LoraConfig`` dict under ``dotted``
    (nothing to check when ``lora`` is not a dict: its own field refuses that)."""
    if not isinstance(lora, dict):
        return []
    return [check_value(f"{dotted}.{name}", lora[name], field)
            for name, field in LORA_FIELDS.items() if name in lora]


def sandbox_problems(dotted: str, limits: Any, config: Any = None) -> list[str | None]:
    """:func:`check_value` of each key of :data:`SANDBOX_LIMIT_FIELDS` in an env's
    ``sandbox_limits`` (a dict, or a ``SandboxLimits``) under ``dotted``, with the host-memory
    bounds when ``config`` is given (anything else is the env's own check to refuse)."""
    if dataclasses.is_dataclass(limits) and not isinstance(limits, type):
        limits = {f.name: getattr(limits, f.name) for f in dataclasses.fields(limits)}
    if not isinstance(limits, Mapping):
        return []
    return [check_value(f"{dotted}.{name}", limits[name], field, config)
            for name, field in SANDBOX_LIMIT_FIELDS.items() if name in limits]
