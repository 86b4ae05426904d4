"""Every config knob's declaration, and its types and ranges, checked before Ray starts.

:data:`KNOBS` declares each setting of this library's own setters (``.llm``, ``.training``,
``.resource_pools``) once: its section, key, default, doc and field. ``ATGRPOConfig`` takes its
defaults from there and builds its setters' keywords and ``Args:`` docs from it
(``setter_docstring``); docs/config.md is generated from it (``config_reference.py``).
:data:`RLLIB_DEFAULTS` lists the RLlib settings whose default this library changes.

One generic check (:func:`check_value`) runs over declared fields instead of an ``if`` per
key. A key's field comes from, in order:

1. :data:`FIELDS`: the knobs' fields, and those of the RLlib keys whose range matters (``lr >
   0``, ``num_env_runners >= 0``, ...);
2. otherwise the type of the key's default (:func:`default_values`): a number default (int or
   float) makes a number field, a ``bool`` default a flag, so every RLlib knob with such a
   default is type-checked too. Text defaults are not turned into fields, because RLlib mixes
   them with numbers (``num_cpus_per_learner="auto"`` or ``2``).

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
import functools
import math
from typing import Any, Callable, Mapping

from pettingllms_rllib.core.advantages import NORMALIZATIONS, SCALE_SCOPES
from pettingllms_rllib.engines import ENGINE_KINDS, find_engine_kind
from pettingllms_rllib.models.precision import MODEL_DTYPES

__all__ = ["ATTRIBUTES", "AUTOCAST_DTYPES", "Bound", "Field", "FIELDS", "KNOBS", "Knob",
           "LORA_FIELDS", "MAX_BRANCHES", "MAX_SANDBOX_SECONDS", "MAX_TASKS_PER_ITERATION",
           "RLLIB_DEFAULTS", "ROLLOUTS", "SANDBOX_LIMIT_FIELDS", "attribute_of", "check_fields",
           "check_value", "default_values", "field_for", "lora_problems", "sandbox_problems",
           "section_knobs", "setter_docstring", "setter_signature", "stop_field",
           "TUNE_FIELDS"]

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


@dataclasses.dataclass(frozen=True)
class Knob:
    """One setting of this library's own setters (``.llm``, ``.training``, ``.resource_pools``),
    declared once: ``ATGRPOConfig`` takes its default from here, its setter its keyword and
    the ``Args:`` entry of its docstring, the YAML check its field, and docs/config.md all of it
    (``config_reference.py``).

    Attributes:
        section: the setter and the experiment file's section.
        key: the setter's keyword and the YAML key.
        default: the value on a fresh config (copied, so mutable defaults are not shared).
        doc: what it does and why, without its default (added where it is shown).
        field: what it accepts; None: read from the default's type (:func:`field_for`).
        attribute: where the config stores it, when not under ``key`` (RLlib's own ``model``
            is the old stack's dict, so ``llm.model`` is stored as ``llm_model``).
    """

    section: str
    key: str
    default: Any
    doc: str
    field: Field | None = None
    attribute: str | None = None

    @property
    def stored_as(self) -> str:
        return self.attribute or self.key

    @property
    def annotation(self) -> str:
        """The setter parameter's annotation, read from the field (else the default's type)."""
        if self.field is not None:
            name = self.field.kind.__name__
            return f"{name} | None" if self.field.optional else name
        return "Any" if self.default is None else type(self.default).__name__


#: ``training.rollout``: AT-GRPO's tree sampling, or the vanilla multi-agent GRPO baseline.
ROLLOUTS = ("tree", "trajectories")
#: ``llm.autocast_dtype``: the learner's autocast dtypes (None: off).
AUTOCAST_DTYPES = ("bfloat16", "float16")


def _knobs(section: str, *entries: tuple) -> tuple[Knob, ...]:
    """``(key, default, doc[, field[, attribute]])`` entries of one section."""
    return tuple(Knob(section, *entry) for entry in entries)


#: Every knob of this library's own setters, in the order the setters take them.
KNOBS: tuple[Knob, ...] = _knobs(
    "llm",
    ("model", "smollm2-135m-instruct",
     '"smollm2-135m-instruct" (bundled), "tiny-random", a local folder (or ``.gguf`` file) or '
     "a hub id.", Field(str), "llm_model"),
    ("tiny_model_config", None,
     'Overrides of the tiny random llama config (only with ``model="tiny-random"``).',
     Field(dict, optional=True)),
    ("model_dtype", "auto",
     '"auto": bf16 generation and a bf16 LoRA base where the device computes bf16 fast (a CPU '
     "reporting ``amx_bf16`` or ``avx512_bf16``, or a GPU with bf16), fp32 elsewhere; trained "
     "weights, adapters and optimizer states stay fp32 (``models/precision.py``). "
     '"float32", "bfloat16" or "float16" are used as given everywhere.',
     Field(str, choices=MODEL_DTYPES)),
    ("lora", None,
     "peft ``LoraConfig`` keyword arguments; None = full fine-tuning. With LoRA all modules "
     "share one base model and each ModuleID gets its own adapter.", Field(dict, optional=True)),
    ("max_new_tokens", 64,
     "Cap on tokens per response; at most the model's context length "
     "(``max_position_embeddings`` of its config).",
     Field(int, minimum=1, bound=RESPONSE_CONTEXT)),
    ("temperature", 1.0,
     "Sampling temperature; the learner's log-probs use the same one, so the "
     "policy/behaviour ratio starts at 1.", Field(float, above=0)),
    ("system_prompt", None, "Optional system prompt prepended to every agent's chat.",
     Field(str, optional=True)),
    ("engine", "hf",
     '"hf" (HF transformers, on the CPU or the runner\'s GPU when '
     '``num_gpus_per_env_runner > 0``) or "vllm" (one engine per env runner, weights synced '
     "into it after every update; docs/gpu.md).", Field(str, choices=tuple(ENGINE_KINDS))),
    ("generation_batch_size", None,
     "Split generation into chunks of at most this many sequences (None = no split).",
     _INT_OPTIONAL),
    ("logprob_chunk_size", 1024,
     "Response tokens per chunk of the learner's LM-head pass; bounds the logits' memory.",
     _INT_POSITIVE),
    ("gradient_checkpointing", False,
     "Recompute decoder activations in the learner's backward pass instead of storing them: "
     "on SmolLM2, 16 x 256 tokens took 3.5 GB instead of 7.6 GB for ~13% more time "
     "(bench/RESULTS.md). Never applies to the runners' inference-only copies."),
    ("autocast_dtype", None,
     "Run learner forward passes under ``torch.autocast`` with this dtype (\"bfloat16\" on GPUs "
     "keeps fp32 master weights and optimizer states while computing in bf16); None = off.",
     Field(str, choices=AUTOCAST_DTYPES, optional=True)),
    ("gpu_memory_gib", None,
     "Memory of each GPU for the pre-run memory check when the machine that validates the "
     "config has no GPU (a CPU head node); None = ask CUDA, or leave the check to each GPU "
     "learner.", Field(float, above=0, optional=True)),
    ("vllm_gpu_memory_utilization", 0.5,
     "vLLM only: share of the runner's GPU the engine may take for weights and KV cache.",
     Field(float, above=0, maximum=1)),
    ("vllm_kv_cache_gib", None,
     "vLLM only: KV-cache GiB per engine, overriding the utilization-based sizing (None = "
     "vLLM's sizing on GPUs, 1 GiB on CPUs, where vLLM would take half the RAM).",
     Field(float, above=0, optional=True)),
    ("vllm_weight_sync_dir", None,
     "vLLM with full fine-tuning: a directory every learner and env runner can read; after "
     "each update learner 0 writes the trained models there as safetensors and the runners "
     "load them, instead of sending gigabytes through Ray's object store. None = the object "
     "store. Ignored with LoRA.", Field(str, optional=True)),
    ("vllm_max_model_len", None,
     "vLLM only: longest prompt + response in tokens (None = the model's maximum).",
     Field(int, minimum=1, optional=True, bound=MODEL_CONTEXT)),
    ("vllm_enforce_eager", False,
     "vLLM only: skip CUDA-graph capture (starts faster, decodes slower)."),
    ("vllm_engine_kwargs", None,
     "vLLM only: further ``vllm.LLM`` keyword arguments, passed through unchanged.",
     Field(dict, optional=True)),
) + _knobs(
    "training",
    ("num_branches", 4,
     "K, candidates branched per (task, agent, turn) (with ``rollout=\"trajectories\"``: K "
     "independent trajectories per task); >= 2, so a group has a baseline, and at most "
     "``config_fields.MAX_BRANCHES``.", Field(int, minimum=2, maximum=MAX_BRANCHES)),
    ("rollout", "tree",
     '"tree" (AT-GRPO\'s tree sampling, groups keyed by (task, agent, turn)) or "trajectories" '
     "(the vanilla multi-agent GRPO baseline: K independent trajectories per task, each "
     "response rewarded with its agent's trajectory return, ONE group per task; "
     "``core/trajectory_sampler.py``).", Field(str, choices=ROLLOUTS)),
    ("num_tasks_per_iteration", 8,
     "Task instances (tree roots) per training iteration, split across env runners; at most "
     "``config_fields.MAX_TASKS_PER_ITERATION``.",
     Field(int, minimum=1, maximum=MAX_TASKS_PER_ITERATION)),
    ("frozen_modules", None,
     "Modules that act but are never trained (ablation: train one role alone against the "
     "other's frozen base); None = train every module.", Field(list, optional=True)),
    ("advantage_normalization", "std", '"std" (GRPO) or "mean" (Dr. GRPO).',
     Field(str, choices=NORMALIZATIONS)),
    ("advantage_scale_scope", "group",
     '"group" or "agent" (a Dr. MAS-style scale: the std of all that agent\'s rewards in the '
     "batch).", Field(str, choices=SCALE_SCOPES)),
    ("drop_zero_variance_groups", False,
     "Drop groups whose K rewards are equal from the batch (DAPO) instead of training them "
     "with advantage 0."),
    ("advantage_eps", 1e-6, "Added to the std in the advantage.", _NONNEGATIVE),
    ("clip_eps_low", 0.2,
     "The ratio is clipped to ``[1 - clip_eps_low, 1 + clip_eps_high]``.",
     Field(float, minimum=0, maximum=1)),
    ("clip_eps_high", 0.28, "See ``clip_eps_low`` (the default is DAPO's clip-higher).",
     _NONNEGATIVE),
    ("dual_clip", 3.0, "Dual-clip constant c > 1 for negative advantages; None disables.",
     Field(float, above=1, optional=True)),
    ("kl_coef", 0.0,
     "Weight of the KL penalty to the starting model (TRL's ``beta``; the k3 estimator per "
     "response token, ``core/loss.py``). The reference is, for LoRA, the base with the "
     "adapters switched off (no copy); for full fine-tuning a frozen copy per module, loaded "
     "on learners only when this is > 0. 0 = no penalty (as in the paper).", _NONNEGATIVE),
    ("entropy_coef", 0.0,
     "Weight of an entropy bonus: each response token's loss is lowered by this times the "
     "policy's entropy at that position (at the sampling temperature; PPO's entropy term, "
     "``core/loss.py``), meant to hold off a collapse onto one answer (not yet tried on a "
     "task). 0 = no bonus (as in the paper). With a bonus the learner keeps the entropy's "
     "gradient through the LM head's chunks (one more ``chunk x vocab`` backward per chunk).",
     _NONNEGATIVE),
    ("mask_truncated_responses", False,
     "Leave responses cut off at ``max_new_tokens`` out of the loss (DAPO's overlong "
     "filtering, arXiv 2503.14476 Sec. 3.4): they still count in their group's reward "
     "statistics, but a half-written answer is neither rewarded nor punished for how it was "
     "cut. The share of truncated responses is logged either way "
     "(``env_runners/agent/<agent>/truncated_fraction``)."),
    ("shared_prefix_training", True,
     "Learner batches hold each distinct prompt once with its K responses after it, so the "
     "prompt's forward and backward run once per group instead of once per candidate (same "
     "loss and gradients; 3x learner throughput on the main job, bench/RESULTS.md). False = "
     "one row per sample (needed for attention kernels without custom masks, e.g. "
     "flash-attention)."),
    ("async_rollout", False,
     "Overlap rollout and training (one-step off-policy): the env runners sample iteration "
     "n+1 while the learners train on iteration n, with the weights of update n-1. With "
     "``.resource_pools``, each pool updates on its own schedule and staleness is per module "
     "(``pool_schedule.py``). Needs remote env runners (``num_env_runners >= 1``). Off = the "
     "synchronous algorithm."),
    ("max_staleness", None,
     "The most weights versions a trained response may lag the learner (0 = on-policy, the "
     "synchronous algorithm; 1 = one-step off-policy, the only depth ``async_rollout`` "
     "builds). None = 1 with ``async_rollout``, else 0. A batch that lags more (a runner that "
     "kept old weights) fails the iteration.", Field(int, minimum=0, maximum=1, optional=True)),
    ("importance_sampling_cap", 2.0,
     "C of the token-level truncated importance weight ``min(pi_learner_before_update / "
     "pi_behaviour, C)`` applied where the behaviour log-probs are not the learner's (older "
     "weights, bf16 or vLLM; ``core/loss.py``).", Field(float, above=0)),
    ("stage_credit", "auto",
     '"auto", "turn" or "none" (``core/tree_sampler.py``). With stage credit (beyond the '
     "paper), a candidate of a stage that does not end its turn (the tool before the planner, "
     "a hint before the answer) is played on from its clone to the turn's end, one sampled "
     "answer per later stage, and its team part is the team reward the turn reached (``alpha "
     "* team``); it costs one extra answer per candidate and later stage, and nothing where "
     'agents act in parallel. "auto" applies it wherever a stage does not end its turn (tree '
     'rollouts; ignored by trajectories); "turn" also warns once when it never applies; '
     '"none" is the paper\'s immediate reward. Rewards an env pays to idle agents reach '
     'training under every setting (docs/custom_env.md, "The reward contract").',
     Field(str, choices=("auto", "none", "turn"))),
    ("start_from_checkpoint", None,
     "A checkpoint of an earlier AT-GRPO run (a trial's ``checkpoint_N`` folder) to start "
     "from instead of the base model: its modules, optimiser states, iteration count and "
     "lifetime counters (generated tokens, env steps) are restored once the algorithm is "
     "built, so a finished run can go on as a new experiment under a larger budget (Tune's "
     "``--resume`` keeps the old stop criterion). Its modules must be this config's. The "
     "held-out evaluation of the untrained team is skipped (the first run measured it) and "
     "``evaluation/untrained_success_rate`` is NaN. None = the base model.",
     Field(str, optional=True)),
) + _knobs(
    "resource_pools",
    ("pools", None,
     'Pool name -> ``{"modules": [module ids], "num_learners": n, "num_cpus_per_learner": c, '
     '"num_gpus_per_learner": g, "lr": lr}`` (only ``modules`` is required; defaults 0 '
     "learners = inside the driver, 1 CPU, 0 GPUs, the config's ``lr``). Every module belongs "
     "to exactly one pool; each module's batch goes only to its pool, the pools update "
     "concurrently, and each pool's learners hold only its modules (with a shared LoRA base, "
     "each pool loads its own copy of the base). ``.learners(...)`` settings are then unused. "
     "None = one learner group holding every module.",
     Field(dict, optional=True), "resource_pool_specs"),
)

#: RLlib settings whose default ``ATGRPOConfig`` changes, and why (their meaning is RLlib's).
RLLIB_DEFAULTS: dict[str, Any] = {
    "lr": 1e-5,
    #: Passes over each module's rows per update; every row is used exactly this often
    #: (``core/minibatching.py``, not RLlib's cyclic iterator).
    "num_epochs": 1,
    #: Samples (responses) per learner step and module; a minibatch is whole prompt groups.
    #: 8, so a config that does not think about memory still fits a CPU machine (a SmolLM2
    #: learner took 9.5 GB with the whole batch in one step). None = a module's whole batch
    #: in one step.
    "minibatch_size": 8,
    "grad_clip": 1.0,
    "grad_clip_by": "global_norm",
    "num_env_runners": 0,
}


def section_knobs(section: str) -> tuple[Knob, ...]:
    """The knobs of one of this library's setters, in its keyword order."""
    return tuple(knob for knob in KNOBS if knob.section == section)


def setter_signature(section: str, *, var_keyword: bool = False):
    """The signature of the setter of ``section``: ``self`` and one keyword per knob, each
    defaulting to RLlib's ``NotProvided`` (keep the current value); ``**kwargs`` when the
    setter passes other keys on to RLlib's."""
    import inspect

    from ray.rllib.algorithms.algorithm_config import NotProvided

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(knob.key, keyword, default=NotProvided,
                                     annotation=knob.annotation)
                   for knob in section_knobs(section)]
    if var_keyword:
        parameters.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(parameters, return_annotation="ATGRPOConfig")


def setter_docstring(section: str, summary: str, *, kwargs_doc: str | None = None) -> str:
    """A setter's docstring: ``summary``, then ``Args:`` with each knob's doc and default."""
    import textwrap

    def entry(text: str) -> list[str]:
        return textwrap.wrap(text, width=92, initial_indent="    ", subsequent_indent="        ",
                             break_on_hyphens=False, break_long_words=False)

    lines = [summary.strip(), "", "Args:"]
    for knob in section_knobs(section):
        lines += entry(f"{knob.key}: {knob.doc} Default: ``{knob.default!r}``.")
    if kwargs_doc is not None:
        lines += entry(f"**kwargs: {kwargs_doc}")
    return "\n".join(lines + ["", "Returns:", "    This updated config."])


#: Keys per section whose range matters, or whose default (None) says nothing of their type:
#: this library's knobs' fields (:data:`KNOBS`) and those of the RLlib keys it checks.
FIELDS: dict[str, dict[str, Field]] = {
    "llm": {}, "training": {}, "resource_pools": {},
    "env_runners": {"num_env_runners": Field(int, minimum=0),
                    "num_cpus_per_env_runner": _NONNEGATIVE,
                    "num_gpus_per_env_runner": _NONNEGATIVE},
    "learners": {"num_learners": Field(int, minimum=0), "num_gpus_per_learner": _NONNEGATIVE},
    "debugging": {"seed": Field(int, minimum=0, optional=True)},
    "evaluation": {"evaluation_interval": Field(int, minimum=0, optional=True),
                   "evaluation_duration": _INT_POSITIVE},
    "environment": {"env": Field(str), "env_config": Field(dict, optional=True)},
}
for _knob in KNOBS:
    if _knob.field is not None:
        FIELDS[_knob.section][_knob.key] = _knob.field
FIELDS["training"].update({
    "lr": Field(float, above=0), "num_epochs": _INT_POSITIVE, "minibatch_size": _INT_OPTIONAL,
    "grad_clip": Field(float, above=0, optional=True)})
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
#: ``(section, key)`` -> the attribute a knob is stored under, where that is not its key.
ATTRIBUTES: dict[tuple[str, str], str] = {
    (knob.section, knob.key): knob.attribute for knob in KNOBS if knob.attribute}


def attribute_of(section: str, key: str) -> str:
    """The ``ATGRPOConfig`` attribute that holds ``section.key``."""
    return ATTRIBUTES.get((section, key), key)


@functools.lru_cache(maxsize=1)
def default_values() -> dict[str, Any]:
    """Attribute -> default of a fresh ``ATGRPOConfig``: RLlib's own, then the ones it changes
    (:data:`RLLIB_DEFAULTS`), then this library's knobs; read without building one."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    return {**vars(AlgorithmConfig()), **RLLIB_DEFAULTS,
            **{knob.stored_as: knob.default for knob in KNOBS}}


def field_for(section: str, key: str) -> Field | None:
    """The field of ``section.key``: declared, or read from the default's type (None: no
    type to check, e.g. a default of None that is not declared)."""
    declared = FIELDS.get(section, {}).get(key)
    if declared is not None:
        return declared
    default = default_values().get(attribute_of(section, key))
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
            attribute = attribute_of(section, key)
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
