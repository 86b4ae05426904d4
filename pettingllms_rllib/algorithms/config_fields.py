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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["Field", "FIELDS", "LORA_FIELDS", "check_fields", "check_value", "field_for",
           "lora_problems", "TUNE_FIELDS"]


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
    """

    kind: type
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    optional: bool = False

    def describe(self) -> str:
        """What the field accepts, in words."""
        words = {int: "an integer", float: "a finite number", bool: "true or false",
                 str: "text", dict: "a mapping", list: "a list"}[self.kind]
        bounds = []
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        if self.minimum is not None:
            bounds.append(f">= {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"<= {self.maximum:g}")
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
        "model": Field(str), "max_new_tokens": _INT_POSITIVE, "temperature": Field(float, above=0),
        "model_dtype": Field(str),
        "lora": Field(dict, optional=True), "tiny_model_config": Field(dict, optional=True),
        "system_prompt": Field(str, optional=True), "generation_batch_size": _INT_OPTIONAL,
        "logprob_chunk_size": _INT_POSITIVE, "gpu_memory_gib": Field(float, above=0,
                                                                     optional=True),
        "vllm_gpu_memory_utilization": Field(float, above=0, maximum=1),
        "vllm_kv_cache_gib": Field(float, above=0, optional=True),
        "vllm_max_model_len": _INT_OPTIONAL, "vllm_engine_kwargs": Field(dict, optional=True),
        "vllm_weight_sync_dir": Field(str, optional=True),
        "autocast_dtype": Field(str, choices=("bfloat16", "float16"), optional=True),
    },
    "training": {
        "num_branches": Field(int, minimum=2), "num_tasks_per_iteration": _INT_POSITIVE,
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


def check_value(dotted: str, value: Any, field: Field) -> str | None:
    """Why ``value`` does not fit ``field`` (a message naming ``dotted``), or None."""
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
    return None


def check_fields(config) -> list[str]:
    """Every declared field of a built config (Python users skip the YAML check): the
    messages of those that do not fit."""
    problems = []
    for section, fields in FIELDS.items():
        for key, field in fields.items():
            attribute = _ATTRIBUTE.get((section, key), key)
            if attribute in vars(config):
                problems.append(check_value(f"{section}.{key}", vars(config)[attribute], field))
    problems += lora_problems("llm.lora", vars(config).get("lora"))
    return [p for p in problems if p]


def lora_problems(dotted: str, lora: Any) -> list[str | None]:
    """:func:`check_value` of each declared key of a peft ``LoraConfig`` dict under ``dotted``
    (nothing to check when ``lora`` is not a dict: its own field refuses that)."""
    if not isinstance(lora, dict):
        return []
    return [check_value(f"{dotted}.{name}", lora[name], field)
            for name, field in LORA_FIELDS.items() if name in lora]
