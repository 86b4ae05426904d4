"""``ATGRPOConfig``: the fluent, validated configuration of AT-GRPO.

Knobs are documented by topic:

* ``.llm(...)``: which model, LoRA or full fine-tuning, how responses are sampled.
* ``.training(...)``: AT-GRPO itself (K branches, tasks per iteration, advantages, clipping)
  plus RLlib's usual ``lr``, ``grad_clip``, ``num_epochs``, ``minibatch_size``.
* ``.environment(env=<text env id>, env_config={...})``: the task (``alpha`` and ``max_turns``
  are env arguments).
* ``.multi_agent(policies=..., policy_mapping_fn=...)``: shared model vs one model (or one LoRA
  adapter, with ``.llm(lora=...)``) per role is only this mapping.
* ``.evaluation(evaluation_interval=N, evaluation_duration=M)``: every N iterations the first M
  distinct evaluation instances (seeds from ``TRAIN_SEED_LIMIT`` on, never trained on; a seed
  repeating an earlier seed's instance is skipped, ``envs.instances``) are played
  greedily without branching and logged under ``evaluation/`` (success rate with its 95%
  interval, per-agent parse-error rate and return), beside the untrained team's success
  (``evaluation/untrained_success_rate``, measured once before the first update).

``validate()`` checks everything that can be checked without Ray or a model (unknown env id,
mapping targets, K, T, model availability) so a bad config fails before any Ray work starts.
"""

from __future__ import annotations

import copy
import inspect
import logging
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from pettingllms_rllib.algorithms.config_fields import (KNOBS, RLLIB_DEFAULTS, section_knobs,
                                                        setter_docstring, setter_signature)
from pettingllms_rllib.core.advantages import AdvantageConfig
from pettingllms_rllib.engines import find_engine_kind
from pettingllms_rllib.engines.base import SamplingConfig

logger = logging.getLogger(__name__)

#: ``.training``'s own keys; it passes the others on to RLlib's.
_TRAINING_KEYS = frozenset(knob.key for knob in section_knobs("training"))
#: The keys ``.training`` hands to RLlib's setter (read once, not on every call).
_RLLIB_TRAINING_KEYS = frozenset(inspect.signature(AlgorithmConfig.training).parameters) - {"self"}
#: Key under which a Tune grid over whole configs is resolved (see ``experiment.py``).
GRID_KEY = "__grid__"


class ATGRPOConfig(AlgorithmConfig):
    """Configuration of :class:`~pettingllms_rllib.algorithms.at_grpo.ATGRPO`.

    Example::

        config = (
            ATGRPOConfig()
            .environment("plan_path_v1", env_config={"grid_size": 3, "max_turns": 2})
            .llm(model="smollm2-135m-instruct", lora={"r": 8}, max_new_tokens=32)
            .training(num_branches=4, num_tasks_per_iteration=8, lr=1e-5)
            .multi_agent(policies={"tool", "planner"},
                         policy_mapping_fn=lambda agent_id, *args, **kwargs: agent_id)
        )
        algo = config.build_algo()
        algo.train()
    """

    #: The algorithm a config builds unless told another: ``ATGRPO``, set by at_grpo.py where
    #: it defines it. RLlib keeps a config and its algorithm in one module (PPOConfig beside
    #: PPO); here they are two, and the algorithm imports its config, so the config learns its
    #: algorithm this way instead of importing it back. The package's ``__init__`` imports
    #: at_grpo, so it is set before any config can be made.
    default_algo_class: type | None = None

    def __init__(self, algo_class=None):
        from pettingllms_rllib.algorithms.env_runner import LLMEnvRunner
        from pettingllms_rllib.quiet import silence_known_noise

        silence_known_noise()  # before RLlib validates: its "new API stack" warning (quiet.py)

        super().__init__(algo_class=algo_class or type(self).default_algo_class)
        # --- .llm(), .training(), .resource_pools(): declared once, in config_fields.KNOBS
        for knob in KNOBS:
            setattr(self, knob.stored_as, copy.deepcopy(knob.default))

        # --- RLlib defaults we change
        self.env_runner_cls = LLMEnvRunner
        #: No ``perf/*`` CPU/RAM columns: they come and go between iterations (an unstable
        #: column set breaks Tune's progress.csv on resume) and pull in a GPU monitor that
        #: prints "Install gputil" on every trial.
        self.log_sys_usage = False
        #: No connector-state round trip to every runner after each iteration: LLM runners
        #: have no connectors, and weights travel with their version in ``training_step``. It
        #: was also the one call where a dead runner surfaced as Ray's raw actor error.
        self._dont_auto_sync_env_runner_states = True
        for name, value in RLLIB_DEFAULTS.items():  # their reasons are in config_fields
            setattr(self, name, value)

    # ------------------------------------------------------------------ fluent sections
    def _set_knobs(self, section: str, values: dict[str, Any],
                   passed_on: frozenset[str] = frozenset()) -> "ATGRPOConfig":
        """Store each given knob of ``section`` (RLlib's ``NotProvided`` = keep); an unknown
        keyword raises, listing the section's keys (and ``passed_on``, the keys the caller
        hands to RLlib's setter)."""
        knobs = {knob.key: knob for knob in section_knobs(section)}
        unknown = sorted(set(values) - set(knobs) - passed_on)
        if unknown:
            raise TypeError(f"ATGRPOConfig.{section}() got unknown keyword(s) {unknown}; "
                            f"accepted: {sorted(set(knobs) | passed_on)}")
        for key, value in values.items():
            if key in knobs and value is not NotProvided:
                setattr(self, knobs[key].stored_as, value)
        return self

    # The setters' keywords and Args: come from config_fields.KNOBS (one declaration a knob);
    # ``help(ATGRPOConfig.llm)`` and ``inspect.signature`` show them.
    def llm(self, **values) -> "ATGRPOConfig":
        return self._set_knobs("llm", values)

    llm.__signature__ = setter_signature("llm")
    llm.__doc__ = setter_docstring(
        "llm", "The model, LoRA or full fine-tuning, and how responses are sampled and scored.")

    @override(AlgorithmConfig)
    def training(self, **values) -> "ATGRPOConfig":
        self._set_knobs("training", values, passed_on=_RLLIB_TRAINING_KEYS)
        return super().training(**{key: value for key, value in values.items()
                                   if key not in _TRAINING_KEYS})

    training.__signature__ = setter_signature("training", var_keyword=True)
    training.__doc__ = setter_docstring(
        "training", "AT-GRPO itself (arXiv 2510.11062), plus RLlib's usual training settings.",
        kwargs_doc="RLlib's ``AlgorithmConfig.training`` arguments (``lr``, ``grad_clip``, "
        "``num_epochs``: passes over each module's rows per update, every row used exactly "
        "this often; ``minibatch_size``: samples per learner step and module, whole prompt "
        "groups, None = a module's whole batch in one step).")

    def resource_pools(self, **values) -> "ATGRPOConfig":
        return self._set_knobs("resource_pools", values)

    resource_pools.__signature__ = setter_signature("resource_pools")
    resource_pools.__doc__ = setter_docstring(
        "resource_pools", "Train modules in separate learner groups: one resource pool per "
        "model (PettingLLMs' specialised mode; ``algorithms/resource_pools.py``, docs/gpu.md).")

    @property
    def parsed_resource_pools(self):
        """The configured :class:`~pettingllms_rllib.algorithms.resource_pools.ResourcePool`
        list (None without ``.resource_pools``); raises ValueError on a malformed spec."""
        from pettingllms_rllib.algorithms.resource_pools import parse_pools

        if self.resource_pool_specs is None:
            return None
        pools, problems = parse_pools(self.resource_pool_specs)
        if problems:
            raise ValueError("; ".join(problems))
        return pools

    @property
    def effective_max_staleness(self) -> int:
        """The staleness bound in force: 0 unless ``async_rollout`` (then 1 by default)."""
        if not self.async_rollout:
            return 0
        return 1 if self.max_staleness is None else int(self.max_staleness)

    @property
    def overlaps_sampling(self) -> bool:
        """Whether sampling overlaps training: ``async_rollout`` with ``max_staleness >= 1``
        (``max_staleness=0`` is the synchronous algorithm, exactly)."""
        return bool(self.async_rollout) and self.effective_max_staleness > 0

    @override(AlgorithmConfig)
    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None,
                            placement_group=None):
        """RLlib's one LearnerGroup, or with ``.resource_pools`` one per pool behind a
        :class:`~pettingllms_rllib.algorithms.resource_pools.PooledLearnerGroup`."""
        pools = self.parsed_resource_pools
        if pools is None:
            return super().build_learner_group(env=env, spaces=spaces,
                                               rl_module_spec=rl_module_spec,
                                               placement_group=placement_group)
        from pettingllms_rllib.algorithms.resource_pools import PooledLearnerGroup

        spec = rl_module_spec or self.get_multi_rl_module_spec(env=env, spaces=spaces)
        return PooledLearnerGroup(config=self, module_spec=spec, pools=pools)

    @override(AlgorithmConfig)
    def update_from_dict(self, config_dict) -> "ATGRPOConfig":
        """Also accept a resolved Tune grid point stored under :data:`GRID_KEY`."""
        config_dict = dict(config_dict)
        config_dict.update(config_dict.pop(GRID_KEY, None) or {})
        return super().update_from_dict(config_dict)

    # ------------------------------------------------------------------ derived pieces
    @property
    def advantage_config(self) -> AdvantageConfig:
        return AdvantageConfig(normalization=self.advantage_normalization,
                               scale_scope=self.advantage_scale_scope,
                               drop_zero_variance=self.drop_zero_variance_groups,
                               eps=self.advantage_eps)

    @property
    def model_spec_dict(self) -> dict[str, Any]:
        from pettingllms_rllib.models.loading import ModelSpec

        return ModelSpec.fields_of_config(vars(self))

    def rl_module_model_config(self) -> dict[str, Any]:
        config = {"model": self.model_spec_dict, "temperature": self.temperature,
                  "logprob_chunk_size": self.logprob_chunk_size,
                  "gradient_checkpointing": bool(self.gradient_checkpointing),
                  "autocast_dtype": self.autocast_dtype,
                  "entropy_gradient": self.uses_entropy_bonus}
        if self.lora is not None:
            config["lora"] = dict(self.lora)
        elif self.uses_kl_penalty:
            config["reference_copy"] = True
        return config

    def _any_module_above_zero(self, key: str) -> bool:
        """Whether this training setting is > 0 for any module (per-module overrides too)."""
        overrides = self.algorithm_config_overrides_per_module or {}
        return float(getattr(self, key)) > 0 or any(
            float(o.get(key, 0.0)) > 0 for o in overrides.values())

    @property
    def uses_kl_penalty(self) -> bool:
        """Whether any module trains with ``kl_coef > 0``."""
        return self._any_module_above_zero("kl_coef")

    @property
    def uses_entropy_bonus(self) -> bool:
        """Whether any module trains with ``entropy_coef > 0``."""
        return self._any_module_above_zero("entropy_coef")

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from pettingllms_rllib.models.rl_modules import CausalLMRLModule, LoRAAdapterRLModule

        module_class = LoRAAdapterRLModule if self.lora is not None else CausalLMRLModule
        return RLModuleSpec(module_class=module_class, model_config=self.rl_module_model_config())

    @override(AlgorithmConfig)
    def get_multi_rl_module_spec(self, **kwargs) -> MultiRLModuleSpec:
        spec = super().get_multi_rl_module_spec(**kwargs)
        if self.lora is not None:
            from pettingllms_rllib.models.rl_modules import SharedBaseLoRAMultiRLModule

            spec.multi_rl_module_class = SharedBaseLoRAMultiRLModule
            spec.model_config = self.rl_module_model_config()
        return spec

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        from pettingllms_rllib.algorithms.learner import ATGRPOTorchLearner

        return ATGRPOTorchLearner

    # ------------------------------------------------------------------ validation
    @override(AlgorithmConfig)
    def _value_error(self, errmsg) -> None:
        """RLlib's, without its "set ``_validate_config=False``" hint: every message here
        names the key and what is accepted, and switching validation off is no fix for it."""
        if self._validate_config:
            raise ValueError(errmsg)
        logger.warning(errmsg)

    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        self.validate_at_grpo()

    def validate_at_grpo(self) -> None:
        """The AT-GRPO checks alone; cheap, no Ray needed (the CLI runs them before ray.init)."""
        from pettingllms_rllib.algorithms.config_fields import check_fields
        from pettingllms_rllib.envs.instances import TooFewInstancesError, distinct_instance_seeds
        from pettingllms_rllib.envs.registry import make_text_env

        # Types, ranges and upper bounds of every declared key (K and T within their caps,
        # max_new_tokens within the model's context, sandbox limits within this host).
        problems = check_fields(self)
        if problems:
            self._value_error("; ".join(problems))
        if self.stage_credit == "turn" and self.rollout != "tree":
            self._value_error(f"stage_credit={self.stage_credit!r} needs rollout='tree' (a "
                              f"trajectory's responses all get its return already), got "
                              f"rollout={self.rollout!r}")
        for field in ("num_gpus_per_env_runner", "num_gpus_per_learner"):
            if float(getattr(self, field) or 0) < 0:
                self._value_error(f"{field} must be >= 0, got {getattr(self, field)}")
        try:  # the option classes validate themselves and name the accepted values
            _ = self.advantage_config
            SamplingConfig(max_new_tokens=int(self.max_new_tokens),
                           temperature=float(self.temperature))
        except ValueError as exc:
            self._value_error(str(exc))
        if self.lora is not None and not isinstance(self.lora, dict):
            self._value_error(f"lora must be a dict of peft LoraConfig kwargs or None, "
                              f"got {type(self.lora).__name__}")
        if not isinstance(self.env, str):
            self._value_error("environment(env=...) must be a registered text env id")
        try:
            env = make_text_env(self.env, self.env_config)
        except KeyError as exc:
            self._value_error(str(exc.args[0]))
        except ValueError as exc:
            self._value_error(str(exc))
        policies = set(self.policies or {})
        frozen = set(self.frozen_modules or [])
        if not frozen <= policies:
            self._value_error(f"frozen_modules {sorted(frozen - policies)} are not among the "
                              f"policies {sorted(policies)}")
        if policies and frozen == policies:
            self._value_error("every module is frozen: nothing would train")
        for agent in env.possible_agents:
            module_id = self.policy_mapping_fn(agent, None)
            if module_id not in policies:
                self._value_error(f"policy_mapping_fn maps agent {agent!r} to {module_id!r}, "
                                  f"which is not among the policies {sorted(policies)}")
        self._check_resource_pools(policies)
        self._check_staleness()
        self._check_start_checkpoint()
        if self.evaluation_interval:
            if not isinstance(self.evaluation_duration, int) or self.evaluation_duration < 1:
                self._value_error("evaluation_duration must be the number of held-out tasks "
                                  f"(an int >= 1), got {self.evaluation_duration!r}")
            try:
                distinct_instance_seeds(env, self.evaluation_duration)
            except TooFewInstancesError as exc:
                self._value_error(f"evaluation_duration={self.evaluation_duration}: {exc}")
        self._check_model_available()
        engine = find_engine_kind(self.engine)  # None: unknown, refused above
        if engine is not None:
            self._check_engine_settings(engine)
        from pettingllms_rllib.models import preflight

        preflight.check_run_memory(self, self.parsed_resource_pools)

    # ------------------------------------------------------------------ Ray resources
    def resource_request(self) -> list[dict[str, float]]:
        """The bundles a Tune trial of this config reserves (``ATGRPO.default_resource_request``,
        that is RLlib's with ``resources.trial_bundles``: main process, env runners, evaluation
        runners, learners or each pool's learners). It validates the config first, so
        :meth:`validate` cannot call it."""
        return [dict(bundle) for bundle in self.algo_class.default_resource_request(self).bundles]

    def check_resources(self, available: dict[str, float] | None = None,
                        where: str | None = None) -> None:
        """Refuse, before Ray starts, a config whose trial asks for more CPUs or GPUs than
        ``available`` (None: the running Ray cluster's totals where Ray is initialised, else
        this machine's, :func:`~pettingllms_rllib.algorithms.resources.machine_resources`).
        Raises ValueError naming the settings."""
        from pettingllms_rllib.algorithms.resources import machine_resources, resource_problems

        if available is None:
            import ray

            if ray.is_initialized():
                available, where = dict(ray.cluster_resources()), where or "the Ray cluster"
            else:
                available, where = machine_resources(), where or "this machine"
        problems = resource_problems(self, available, where or "the Ray cluster")
        if problems:
            self._value_error("; ".join(problems))

    def _check_resource_pools(self, policies: set) -> None:
        from pettingllms_rllib.algorithms.resource_pools import assignment_problems

        try:
            pools = self.parsed_resource_pools
        except ValueError as malformed:
            self._value_error(str(malformed))
        problems = assignment_problems(pools, policies) if pools is not None else []
        if problems:
            self._value_error("; ".join(problems))

    def _check_staleness(self) -> None:
        # Its type and range (0 or 1: async_rollout overlaps one iteration, so responses lag
        # at most one version) are a declared field (config_fields.py), checked before this.
        if self.max_staleness and not self.async_rollout:
            self._value_error(f"max_staleness={self.max_staleness} needs async_rollout=True "
                              "(synchronous training is on-policy: 0 or None)")
        if self.async_rollout and not self.in_evaluation and int(self.num_env_runners) < 1:
            self._value_error("async_rollout=True needs remote env runners to overlap with the "
                              "learners, got num_env_runners=0; accepted: num_env_runners >= 1 "
                              "(.env_runners(num_env_runners=1))")

    # ------------------------------------------------------------------ memory
    @property
    def num_modules(self) -> int:
        """Modules every learner builds: one per policy (RLlib builds each one, mapped or not,
        frozen or not)."""
        return max(1, len(self.policies or {}))

    @property
    def lora_kwargs(self) -> dict[str, Any] | None:
        """The full peft LoraConfig kwargs every module's adapter is built with (library
        defaults under the user's ``lora``), or None for full fine-tuning."""
        from pettingllms_rllib.models.memory import lora_kwargs

        return lora_kwargs(self.lora)

    @property
    def engine_spec(self):
        """What generates for this run's modules (:class:`~pettingllms_rllib.engines.spec.
        EngineSpec`): the env runners start their engine from it, and every checkpoint
        carries it for ``eval`` and ``serve``."""
        from pettingllms_rllib.engines.spec import EngineSpec

        return EngineSpec.from_config(vars(self))

    def _check_engine_settings(self, engine) -> None:
        """The engine's package is there (e.g. vLLM's; its own error with the install hint
        otherwise), and its settings are in range."""
        engine.check_installed()
        for problem in engine.config_problems(self):
            self._value_error(problem)

    @property
    def syncs_full_weights_through_disk(self) -> bool:
        """Whether full-model updates reach the env runners' engine as files (vLLM's, in
        ``vllm_weight_sync_dir``)."""
        engine = find_engine_kind(self.engine)
        return engine is not None and engine.syncs_full_weights_through_files(self)

    def _check_start_checkpoint(self) -> None:
        """``start_from_checkpoint`` must be an RLlib checkpoint folder (a typo in the path
        would otherwise surface only after Ray started and the model loaded)."""
        from pettingllms_rllib import checkpoints

        if self.start_from_checkpoint is None:
            return
        path = self.start_from_checkpoint
        if not checkpoints.is_algorithm_checkpoint(path):
            self._value_error(f"start_from_checkpoint={str(path)!r} is not an RLlib algorithm "
                              f"checkpoint folder (a trial's {checkpoints.CHECKPOINT_PREFIX}N, "
                              f"with {checkpoints.CTOR_ARGS_FILE})")

    def _check_model_available(self) -> None:
        """Fail early, without loading weights, when the configured model cannot be found."""
        from pettingllms_rllib.models import loading

        try:
            loading.check_model_available(
                loading.ModelSpec.coerce(self.model_spec_dict).name_or_path)
        except loading.ModelNotFoundError as exc:
            self._value_error(str(exc))
