"""``LLMEnvRunner``: an RLlib EnvRunner that owns a text env, the LLM modules and an engine.

RLlib's stock ``MultiAgentEnvRunner`` steps one action per agent per step through connector
pipelines built for tensors; AT-GRPO instead branches K candidates per acting agent from one
state and needs token ids and behaviour log-probs. So this runner plugs in through
``config.env_runners(env_runner_cls=...)`` (set by default in ``ATGRPOConfig``), runs the
:class:`~pettingllms_rllib.core.tree_sampler.TreeSampler` and returns its records (the
``EnvRunner.sample`` contract allows experiences of any form).

Weights reach the runner through ``set_state`` (RLlib's ``sync_weights``) or, with
``vllm_weight_sync_dir``, through ``load_published_weights`` (files learner 0 wrote); both end
in the same engine update, and the runner records the learner's weights version it received so
the algorithm can fail loudly if a runner lags.

Engines: with ``engine="hf"`` the runner holds inference copies of the modules (on its GPU when
``num_gpus_per_env_runner > 0``) and generates with them. With ``engine="vllm"`` it holds no
torch module at all: vLLM serves the weights (one engine with one LoRA adapter per module, or,
for full fine-tuning, one engine per module sharing the runner's GPU), ``set_state`` pushes every
update into it, and sampling refuses to start unless every engine serves the version the learner
sent.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

import numpy as np
import torch
from ray.rllib.core import COMPONENT_RL_MODULE
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO

from pettingllms_rllib.core.timing import TimedCall
from pettingllms_rllib.core.trajectory_sampler import TrajectorySampler
from pettingllms_rllib.core.tree_sampler import EpisodeSummary, TreeSampler
from pettingllms_rllib.engines.base import SamplingConfig
from pettingllms_rllib.engines.weight_sync import check_engine_version
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT, task_name
from pettingllms_rllib.envs.registry import make_text_env

logger = logging.getLogger(__name__)


def task_seed_rng(seed: int | None, worker_index: int) -> np.random.Generator:
    """The RNG a runner draws its training task seeds from: one stream per (seed, runner), so a
    run's training instances are a function of its seed (``bench/seen_instances.py`` replays
    them to tell which evaluation instances a run trained on)."""
    return np.random.default_rng([int(seed or 0), int(worker_index)])


def draw_training_seeds(rng: np.random.Generator, num_tasks: int) -> list[int]:
    """``num_tasks`` training task seeds, all below ``TRAIN_SEED_LIMIT``."""
    return [int(s) for s in rng.integers(0, TRAIN_SEED_LIMIT, size=num_tasks)]


class HeldOutPlay(NamedTuple):
    """What :meth:`LLMEnvRunner.evaluate` played: the episodes and their transcript."""

    episodes: list[EpisodeSummary]
    transcript: list[dict[str, Any]]


class LLMEnvRunner(EnvRunner, Checkpointable):
    """Samples AT-GRPO trees with the LLM modules of a MultiRLModule."""

    def __init__(self, *, config, **kwargs):
        from pettingllms_rllib.quiet import silence_known_noise

        silence_known_noise()
        super().__init__(config=config, **kwargs)
        self.spaces = kwargs.get("spaces") or {}
        self.env = None
        #: The torch inference copies of the modules (None when the engine holds the weights).
        self.module = None
        #: What generates for every module (``engines/base.py: ModuleEngine``).
        self.engine = None
        self.weights_version = 0
        self.num_env_steps_sampled_lifetime = 0
        index = self.worker_index or 0
        self._task_rng = task_seed_rng(config.seed, index)
        if index > 0:  # a remote runner uses the CPUs Ray reserved for it
            torch.set_num_threads(max(1, int(config.num_cpus_per_env_runner or 1)))
        # As RLlib's own runners: the driver-local runner only needs a model when there are no
        # remote runners (otherwise it would hold a useless copy of every LLM).
        if index > 0 or config.num_env_runners == 0:
            self.make_env()
            self.make_module()

    # ------------------------------------------------------------------ construction
    @override(EnvRunner)
    def make_env(self) -> None:
        self.env = make_text_env(self.config.env, self.config.env_config)

    @override(EnvRunner)
    def make_module(self) -> None:
        from pettingllms_rllib.engines import start_module_engine
        from pettingllms_rllib.models.loading import ModelSpec, load_tokenizer

        cfg = self.config
        tokenizer = load_tokenizer(ModelSpec.coerce(cfg.model_spec_dict))
        seed = None if cfg.seed is None else int(cfg.seed) * 1009 + (self.worker_index or 0)
        sampling = SamplingConfig(max_new_tokens=int(cfg.max_new_tokens),
                                  temperature=float(cfg.temperature), seed=seed)

        def build_modules():
            self.module = cfg.get_multi_rl_module_spec(spaces=self.get_spaces(),
                                                       inference_only=True).build()
            return self.module

        self.engine = start_module_engine(cfg.engine_spec, tokenizer, sampling, build_modules)

    @override(EnvRunner)
    def get_spaces(self) -> dict[str, Any]:
        if self.env is None:
            return self.spaces
        agents = self.env.possible_agents
        obs_space, act_space = self.env.observation_space(agents[0]), self.env.action_space(agents[0])
        spaces = {INPUT_ENV_SPACES: (obs_space, act_space),
                  INPUT_ENV_SINGLE_SPACES: (obs_space, act_space)}
        for agent in agents:
            spaces[self.module_for_agent(agent)] = (self.env.observation_space(agent),
                                                    self.env.action_space(agent))
        return spaces

    @override(EnvRunner)
    def assert_healthy(self) -> None:
        assert self.env is None or self.engine is not None, "env runner has an env but no engine"

    def module_for_agent(self, agent_id: str) -> str:
        return self.config.policy_mapping_fn(agent_id, None)

    # ------------------------------------------------------------------ sampling
    def _roots(self, seeds) -> dict[str, Any]:
        """Task id -> a clone of the runner's env reset to that seed's instance."""
        roots = {}
        for seed in seeds:
            env = self.env.clone()
            env.reset(seed=int(seed))
            roots[task_name(self.config.env, seed)] = env
        return roots

    def _generate(self, module_id: str, prompts, num_samples: int):
        return self.engine.generate(module_id, prompts, num_samples)

    @property
    def served_weights_version(self) -> int:
        """The oldest weights version the engine generates with."""
        return self.engine.served_weights_version

    def draw_task_seeds(self, num_tasks: int) -> list[int]:
        return draw_training_seeds(self._task_rng, num_tasks)

    def evaluate(self, task_seeds: list[int]) -> HeldOutPlay:
        """Play ``task_seeds`` once each with greedy decoding and no branching (K = 1): the
        held-out evaluation during training. Returns the episode summaries and one transcript
        entry per response, in ``pettingllms-rllib eval``'s ``transcripts.jsonl`` format, so a
        held-out score that moves can be read, not only seen."""
        from pettingllms_rllib.evaluation.evaluate import transcript_entry

        if self.env is None:
            raise RuntimeError("this env runner holds no env/model")

        def generate(module_id, prompts, num_samples):
            return self.engine.generate(module_id, prompts, num_samples, greedy=True)

        with torch.no_grad():
            result = TreeSampler(generate, self.module_for_agent, num_branches=1).run(
                self._roots(task_seeds))
        return HeldOutPlay(result.episodes,
                           [transcript_entry(record, 0, self.env) for record in result.records])

    @override(EnvRunner)
    def sample(self, *, num_tasks: int | None = None, task_seeds: list[int] | None = None,
               **kwargs) -> dict[str, Any]:
        """Run one tree per task; returns records, episode summaries, the weights version and
        the seconds spent sampling (``sample_s``), of which ``generate_s`` in the engines."""
        if self.env is None:
            raise RuntimeError("this env runner holds no env/model (a driver-local runner "
                               "next to remote runners); sample on the remote runners")
        check_engine_version(self.served_weights_version, self.weights_version,
                             where=f"env runner {self.worker_index or 0}")
        start = time.perf_counter()
        seeds = task_seeds if task_seeds is not None else self.draw_task_seeds(
            num_tasks or int(self.config.num_tasks_per_iteration))
        roots = self._roots(seeds)
        generate = TimedCall(self._generate)
        if self.config.rollout == "trajectories":  # the vanilla-GRPO baseline
            sampler = TrajectorySampler(generate, self.module_for_agent,
                                        num_trajectories=int(self.config.num_branches))
        else:
            sampler = TreeSampler(generate, self.module_for_agent,
                                  num_branches=int(self.config.num_branches),
                                  stage_credit=self.config.stage_credit)
        with torch.no_grad():
            result = sampler.run(roots, weights_version=self.served_weights_version)
        steps = sum(e.num_stages for e in result.episodes)
        self.num_env_steps_sampled_lifetime += steps
        return {"records": result.records, "episodes": result.episodes,
                "weights_version": self.served_weights_version,
                "worker_index": self.worker_index or 0, "env_steps": steps,
                "tasks_dropped": len(result.dropped_tasks),
                "failed_groups": dict(result.failed_groups),
                "play_on_tokens": result.num_play_on_tokens,
                "generate_s": generate.seconds, "sample_s": time.perf_counter() - start}

    @override(EnvRunner)
    def get_metrics(self) -> dict:
        # Rollout metrics are computed on the driver from the returned records (see ATGRPO).
        return {}

    # ------------------------------------------------------------------ state / weight sync
    @override(Checkpointable)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        state = {NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime,
                 WEIGHTS_SEQ_NO: self.weights_version}
        if self.module is not None and self._check_component(
                COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state(
                components=self._get_subcomponents(COMPONENT_RL_MODULE, components),
                not_components=self._get_subcomponents(COMPONENT_RL_MODULE, not_components))
        return state

    @override(Checkpointable)
    def set_state(self, state: dict) -> None:
        """Receive weights (the single place where the engine's weights change)."""
        version = int(state.get(WEIGHTS_SEQ_NO, 0))
        if self.engine is not None and (version == 0 or version >= self.weights_version):
            module_state = state.get(COMPONENT_RL_MODULE) or {}
            if not isinstance(module_state, dict):  # an ObjectRef from sync_weights
                import ray

                module_state = ray.get(module_state)
            self.engine.load_weights(module_state, version)
        # Only forward: an older state (ignored above) must not make the runner look older.
        self.weights_version = max(self.weights_version, version)
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = int(state[NUM_ENV_STEPS_SAMPLED_LIFETIME])

    def load_published_weights(self, folders: dict[str, str], version: int) -> int:
        """Full fine-tuning with ``vllm_weight_sync_dir``: load each module's new model from the
        folder the learner published, instead of a state sent through Ray's object store."""
        from pettingllms_rllib.engines.weight_sync import read_full_weights

        if self.engine is None or version < self.weights_version:
            return self.served_weights_version if self.engine is not None else 0
        self.engine.load_weights({module_id: read_full_weights(folder)
                                  for module_id, folder in folders.items()}, version)
        self.weights_version = version
        return self.served_weights_version

    @override(Checkpointable)
    def get_ctor_args_and_kwargs(self):
        return (), {"config": self.config}

    @override(Checkpointable)
    def get_checkpointable_components(self):
        return []  # module weights are checkpointed once, by the LearnerGroup

    @override(EnvRunner)
    def stop(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.module = None
