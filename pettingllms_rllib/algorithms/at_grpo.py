"""``ATGRPO``: the RLlib Algorithm whose ``training_step`` runs one AT-GRPO iteration.

The iteration, its schedules (synchronous, ``async_rollout`` one step off-policy, and with
resource pools each pool on its own schedule: ``pool_schedule.py``) and why each step is where
it is are described once, in docs/design.md, "One iteration, step by step"; the steps are the
calls of :meth:`ATGRPO.training_step`. The held-out evaluation lives in ``held_out.py``, the
recovery of lost env runners in ``runner_recovery.py``; this class calls them.
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EVALUATION_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    EPISODE_RETURN_MEAN,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)

from pettingllms_rllib import checkpoints
from pettingllms_rllib.algorithms.config import ATGRPOConfig
from pettingllms_rllib.algorithms.held_out import HeldOutEvaluation
from pettingllms_rllib.algorithms.pool_schedule import PoolSchedule, WeightsLagError
from pettingllms_rllib.algorithms.resource_pools import PooledLearnerGroup
from pettingllms_rllib.algorithms.runner_recovery import (RunnerRecovery, sampling_failures,
                                                          weight_sync_failures)
from pettingllms_rllib.core.advantages import group_advantages, mean_group_reward_std
from pettingllms_rllib.core.batching import batches_per_module, records_to_train
from pettingllms_rllib.core.records import SampleRecord
from pettingllms_rllib.core.timing import (TIME_PARTS, Stopwatch, rollout_seconds_waited,
                                           time_shares)
from pettingllms_rllib.core.tree_sampler import EpisodeSummary
# This library's result keys, defined in metric_keys. AT_GRPO_RESULTS, ITERATION_SECONDS,
# TIME_SECONDS, TIME_SHARE, RUNNERS_LOST, TASKS_DROPPED and HELD_OUT_SUCCESS are also
# importable from here.
from pettingllms_rllib.metric_keys import (
    ADVANTAGE_STD,
    AGENT,
    AGENT_EPISODE_RETURN_MEAN,
    AGENT_PARSE_ERROR_RATE,
    AGENT_RESPONSE_TOKENS_MEAN,
    AGENT_SAMPLE_REWARD_MEAN,
    AGENT_ROLLOUT_ERRORS,
    AGENT_TRUNCATED_FRACTION,
    AT_GRPO_RESULTS,
    EPISODE_TURNS_MEAN,
    EVALUATION_SUCCESS_RATE,
    HELD_OUT_SUCCESS,
    ITERATION_SECONDS,
    NUM_GENERATED_TOKENS,
    NUM_PLAY_ON_TOKENS,
    NUM_GENERATED_TOKENS_LIFETIME,
    NUM_GROUPS,
    NUM_SAMPLES,
    NUM_TRAINED_SAMPLES,
    POOL_UPDATE_SECONDS,
    REWARD_STD, STAGE_CREDIT_MEAN,
    RUNNERS_LOST,
    STALENESS_MAX,
    STALENESS_MEAN,
    SUCCESS_RATE,
    TASKS_DROPPED,
    TIME_SECONDS,
    TIME_SHARE,
    WEIGHTS_VERSION_MIN,
    ZERO_VARIANCE_GROUP_FRACTION,
)

logger = logging.getLogger(__name__)


def split_tasks(total: int, num_runners: int) -> list[int]:
    """Spread ``total`` task instances over runners as evenly as possible (all >= 1)."""
    num_runners = max(1, num_runners)
    base, extra = divmod(max(total, num_runners), num_runners)
    return [base + (1 if i < extra else 0) for i in range(num_runners)]


def share_sampler(total: int, num_runners: int):
    """The function each remote runner is called with: sample its share of ``total`` tasks
    (a closure over the counts only, so nothing else travels to the runners)."""
    counts = split_tasks(total, num_runners)

    def sample(runner):
        return runner.sample(num_tasks=counts[(runner.worker_index or 1) - 1])

    return sample


class ATGRPO(Algorithm):
    """Agent- and turn-wise grouped GRPO (arXiv 2510.11062) on RLlib's new API stack."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> ATGRPOConfig:
        return ATGRPOConfig()

    @override(Algorithm)
    def save_to_path(self, path=None, **kwargs) -> str:
        """RLlib's checkpoint, plus the run's engine spec (``checkpoints.ENGINE_SPEC_FILE``),
        which ``eval`` and ``serve`` start their engine from."""
        path = super().save_to_path(path, **kwargs)
        checkpoints.write_engine_spec(path, self.config.engine_spec.to_json())
        return path

    @classmethod
    @override(Algorithm)
    def default_resource_request(cls, config):
        """RLlib's bundles (main process, one per env runner, one per learner, each with its
        GPUs), plus the GPU of a driver-local env runner: with ``num_env_runners=0`` the runner
        generates inside the main process, which RLlib would give only the learner's GPU.

        When the learner is local too (``num_learners=0``), runner and learner are *colocated*
        in the main process and share its GPU: the bundle holds the larger of the two requests,
        not their sum (with vLLM, ``vllm_gpu_memory_utilization`` leaves the learner its room).
        """
        from ray.tune import PlacementGroupFactory

        factory = super().default_resource_request(config)
        if isinstance(config, dict):
            config = cls.get_default_config().update_from_dict(config)
        bundles = [dict(bundle) for bundle in factory.bundles]
        pools = config.parsed_resource_pools
        if pools is not None:  # each pool's learners instead of .learners(...)'s
            bundles = cls._pooled_bundles(config, bundles, pools)
        runner_gpus = float(config.num_gpus_per_env_runner or 0)
        if config.num_env_runners == 0 and runner_gpus > 0:
            bundles[0]["GPU"] = max(float(bundles[0].get("GPU", 0)), runner_gpus)
        return PlacementGroupFactory(bundles=bundles, strategy=factory.strategy)

    @staticmethod
    def _pooled_bundles(config, bundles: list[dict], pools) -> list[dict]:
        """The main bundle (with the GPUs of pools whose learner runs in it), the env
        runners' bundles, and one bundle per remote learner of every pool."""
        num_learner_bundles = int(config.num_learners)
        kept = bundles[:len(bundles) - num_learner_bundles] if num_learner_bundles else bundles
        main = dict(kept[0])
        local = [pool for pool in pools if int(pool.num_learners) == 0]
        main["GPU"] = sum(float(pool.num_gpus_per_learner) for pool in local)
        main["CPU"] = max(float(config.num_cpus_for_main_process),
                          max((float(pool.num_cpus_per_learner) for pool in local), default=0.0))
        return [main] + kept[1:] + [bundle for pool in pools for bundle in pool.bundles()]

    @override(Algorithm)
    def setup(self, config) -> None:
        import torch

        from pettingllms_rllib.quiet import show_library_info, silence_known_noise

        silence_known_noise()
        show_library_info()
        # Ray starts workers with one intra-op thread; a trial's driver-local runner and
        # learner should use the CPUs the trial reserved for its main process.
        torch.set_num_threads(max(1, int(config.num_cpus_for_main_process or 1)))
        super().setup(config)
        self._synced_weights_version: int | None = None
        #: With ``async_rollout`` and resource pools: each pool's own update schedule.
        pooled = self.pooled_learner_group
        self._pool_schedule = PoolSchedule(pooled, config.effective_max_staleness) \
            if pooled is not None and self.overlaps_sampling else None
        #: With ``async_rollout``: whether the runners are sampling the next iteration.
        self._sample_in_flight = False
        if config.start_from_checkpoint is not None:
            logger.info("starting from the checkpoint %s", config.start_from_checkpoint)
            self.restore_from_path(config.start_from_checkpoint)
        #: The held-out instances, the untrained team's baseline and the transcripts.
        self._held_out = HeldOutEvaluation(self.config)
        self._held_out.start(self._evaluation_group_with_learner_weights, self.logdir,
                             measure_untrained=config.start_from_checkpoint is None)

    @override(Algorithm)
    def training_step(self) -> None:
        """One iteration (docs/design.md, "One iteration, step by step"): sample, check the
        runners' weights, advantages, update, publish the new weights, log the time shares.
        With ``async_rollout`` and resource pools, each pool on its own schedule instead."""
        if self._pool_schedule is not None:
            self._pooled_async_training_step()
            return
        clock = Stopwatch()
        with self._timed(clock, "sample", ENV_RUNNER_SAMPLING_TIMER):
            outputs = self._sample_overlapped() if self.overlaps_sampling else self._sample()
        self._check_weights_versions(outputs)
        with clock("advantages"):
            batch = self._training_batch(outputs)
        if batch is not None:
            with self._timed(clock, "learner", LEARNER_UPDATE_TIMER):
                learner_results = self.learner_group.update(batch=batch, **self._update_options())
            pooled = self.pooled_learner_group
            self._log_update(learner_results,
                             pooled.last_update_seconds if pooled is not None else {})
            self._sync_trained_weights(clock, list(batch.policy_batches))
        self._log_time_shares(clock, outputs)

    def _pooled_async_training_step(self) -> None:
        """``async_rollout`` with resource pools: every pool updates on its own schedule and
        its weights reach the runners as soon as its update is in (``pool_schedule.py``)."""
        schedule = self._pool_schedule
        clock = Stopwatch()
        with self._timed(clock, "sample", ENV_RUNNER_SAMPLING_TIMER):
            outputs = self._sample_overlapped(start_next=False)
        self._check_weights_versions(outputs)
        with self._timed(clock, "learner", LEARNER_UPDATE_TIMER):
            finished = schedule.collect()
        self._log_update([r for results, _ in finished.values() for r in results],
                         {pool: seconds for pool, (_, seconds) in finished.items()})
        published = schedule.publish(finished)
        if published is not None:
            self._sync_trained_weights(clock, published[1])
        self._start_sample()
        with clock("advantages"):
            _, trained = self._advantaged_records(outputs)
            schedule.queue(trained)
        with clock("learner"):
            lags = schedule.start_idle(self._module_batches, **self._update_options())
        self._log_staleness(lags)
        self._log_time_shares(clock, outputs)

    @contextmanager
    def _timed(self, clock: Stopwatch, part: str, timer: str) -> Iterator[None]:
        """Time ``part`` of the iteration twice: on ``clock`` (the time shares) and as
        RLlib's ``timer`` (this iteration's value, not a running mean)."""
        with clock(part), self.metrics.log_time((TIMERS, timer), reduce="mean", window=1):
            yield

    def _update_options(self) -> dict[str, Any]:
        """The keyword arguments of every learner update, whichever mode starts it."""
        cfg: ATGRPOConfig = self.config
        return dict(timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)},
                    num_epochs=cfg.num_epochs, minibatch_size=cfg.minibatch_size,
                    shuffle_batch_per_epoch=cfg.shuffle_batch_per_epoch)

    def _log_update(self, learner_results: list[dict], pool_seconds: Mapping[str, float]
                    ) -> None:
        """The learners' results of the updates that finished (none: nothing logged) and, with
        resource pools, each finished pool's update seconds."""
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        for pool, seconds in pool_seconds.items():
            self.metrics.log_value((AT_GRPO_RESULTS, POOL_UPDATE_SECONDS, pool), seconds,
                                   window=1)

    def _training_batch(self, outputs: Sequence[dict[str, Any]]) -> MultiAgentBatch | None:
        """Advantages over all records, rollout metrics, and the per-module learner batch
        (None when every group was dropped)."""
        records, trained = self._advantaged_records(outputs)
        learner_version = self._learner_version(records)
        lags: dict[str, list[int]] = defaultdict(list)
        for record in trained:
            lags[record.module_id].append(learner_version - int(record.weights_version))
        self._log_staleness(lags)
        return self._learner_batch(trained) if trained else None

    def _advantaged_records(self, outputs: Sequence[dict[str, Any]]
                            ) -> tuple[list[SampleRecord], list[SampleRecord]]:
        """Every sampled record with its group advantage, and those the learner trains on;
        logs the rollout metrics and the per-module advantage and reward statistics."""
        cfg: ATGRPOConfig = self.config
        records = [r for out in outputs for r in out["records"]]
        episodes = [e for out in outputs for e in out["episodes"]]
        result = group_advantages([r.reward for r in records], [r.group_key for r in records],
                                  [r.agent for r in records], cfg.advantage_config)
        for record, advantage in zip(records, result.advantages):
            record.advantage = float(advantage)
        trained = records_to_train(records, result.keep,
                                   frozen_modules=cfg.frozen_modules or (),
                                   mask_truncated=bool(cfg.mask_truncated_responses))
        failed_groups: Counter = Counter()
        for out in outputs:
            failed_groups.update(out.get("failed_groups") or {})
        self._log_rollout_metrics(records, episodes, sum(o["env_steps"] for o in outputs),
                                  sum(int(o.get("tasks_dropped", 0)) for o in outputs),
                                  failed_groups)
        self.metrics.log_value((ENV_RUNNER_RESULTS, NUM_PLAY_ON_TOKENS),
                               sum(int(o.get("play_on_tokens", 0)) for o in outputs), window=1)
        by_module: dict[str, list[float]] = defaultdict(list)
        for record in trained:
            by_module[record.module_id].append(record.advantage)
        sampled_by_module: dict[str, list[SampleRecord]] = defaultdict(list)
        for record in records:
            sampled_by_module[record.module_id].append(record)
        for module_id in sorted(cfg.policies):  # every module, every iteration: fixed columns
            values = by_module.get(module_id, [])
            self.metrics.log_value((AT_GRPO_RESULTS, ADVANTAGE_STD, module_id),
                                   float(np.std(values)) if values else float("nan"), window=1)
            own = sampled_by_module.get(module_id, [])
            self.metrics.log_value((AT_GRPO_RESULTS, REWARD_STD, module_id),
                                   mean_group_reward_std([r.reward for r in own],
                                                         [r.group_key for r in own]), window=1)
            credited = [r.reward_credit for r in own if r.reward_credit is not None]
            self.metrics.log_value((AT_GRPO_RESULTS, STAGE_CREDIT_MEAN, module_id),
                                   float(np.mean(credited)) if credited else float("nan"),
                                   window=1)
        self.metrics.log_dict({
            (AT_GRPO_RESULTS, NUM_GROUPS): result.num_groups,
            (AT_GRPO_RESULTS, ZERO_VARIANCE_GROUP_FRACTION): result.zero_variance_fraction,
            (AT_GRPO_RESULTS, NUM_TRAINED_SAMPLES): len(trained),
        }, window=1)
        if not trained:
            logger.warning("no trainable samples this iteration (all groups dropped)")
        return records, trained

    def _log_staleness(self, lags: dict[str, list[int]]) -> None:
        """Per module, how many versions the rows an update starts on lag the weights it
        starts from (NaN for a module with no such rows this iteration)."""
        for module_id in sorted(self.config.policies):
            own = lags.get(module_id, [])
            self.metrics.log_dict({
                (AT_GRPO_RESULTS, STALENESS_MEAN, module_id):
                    float(np.mean(own)) if own else float("nan"),
                (AT_GRPO_RESULTS, STALENESS_MAX, module_id):
                    float(max(own)) if own else float("nan")}, window=1)

    def _module_batches(self, trained: Sequence[SampleRecord]) -> dict[str, SampleBatch]:
        """The learner's rows of each module (padded, or packed by shared prompt)."""
        return {mid: SampleBatch(cols) for mid, cols in batches_per_module(
            trained, self._pad_token_id(),
            shared_prefix=bool(self.config.shared_prefix_training)).items()}

    def _learner_batch(self, trained: Sequence[SampleRecord]) -> MultiAgentBatch:
        return MultiAgentBatch(self._module_batches(trained), env_steps=len(trained))

    def _learner_version(self, records: Sequence[SampleRecord]) -> int:
        """The weights version the coming update starts from: the last one synced to the
        runners (before any sync, e.g. just after a restore, the newest the runners used)."""
        if self._synced_weights_version is not None:
            return int(self._synced_weights_version)
        return max((int(r.weights_version) for r in records), default=0)

    @property
    def pooled_learner_group(self) -> PooledLearnerGroup | None:
        """The learner group when ``.resource_pools`` built one group per pool, else None (one
        RLlib LearnerGroup, whose version is in the learner results)."""
        group = self.learner_group
        return group if isinstance(group, PooledLearnerGroup) else None

    def _sync_trained_weights(self, clock: Stopwatch, trained_modules: list[str]) -> None:
        """The one path by which trained weights reach the runners, from every mode (timed as
        ``weight_sync``): the trained modules' new weights go to every runner in one request
        per runner (with resource pools, the pooled group gathers each module's weights from
        its pool: RLlib's fire-and-forget sync drops a request while the runner's previous one
        is in flight, so one request per pool could lose a pool's weights). With
        ``async_rollout`` the request waits for the previous one and then queues behind the
        runner's in-flight sample, so the runner's next sample uses these weights."""
        with self._timed(clock, "weight_sync", SYNCH_WORKER_WEIGHTS_TIMER), \
                weight_sync_failures():  # restarts off: a runner died while receiving them
            pooled = self.pooled_learner_group
            version = int(pooled.weights_seq_no if pooled is not None else self.metrics.peek(
                (LEARNER_RESULTS, trained_modules[0], WEIGHTS_SEQ_NO)))
            if self.config.syncs_full_weights_through_disk:
                self._sync_weights_through_disk(trained_modules, version)
            else:
                wait = {"timeout_seconds": None} if self.overlaps_sampling else {}
                self.env_runner_group.sync_weights(
                    from_worker_or_learner_group=self.learner_group, policies=trained_modules,
                    inference_only=True, **wait)
            self._synced_weights_version = version

    def _log_time_shares(self, clock: Stopwatch, outputs: Sequence[dict[str, Any]]) -> None:
        """This iteration's seconds per part (``core/timing.py``), each logged with window 1
        so the value is this iteration's, not a running average. Runners sample in parallel:
        the slowest runner's generate and env seconds count, as far as the driver waited for
        them (``core/timing.rollout_seconds_waited``)."""
        generate = max((float(o["generate_s"]) for o in outputs), default=0.0)
        env = max((float(o["sample_s"]) - float(o["generate_s"]) for o in outputs), default=0.0)
        generate, env = rollout_seconds_waited(generate, env, clock.seconds.get("sample", 0.0))
        total = clock.elapsed()
        parts = time_shares({"generate": generate, "env": env,
                             **{part: clock.seconds.get(part, 0.0)
                                for part in ("advantages", "learner", "weight_sync")}},
                            total=total)
        logged = {(AT_GRPO_RESULTS, ITERATION_SECONDS): total}
        for part in TIME_PARTS:
            logged[(AT_GRPO_RESULTS, TIME_SECONDS, part)] = parts["seconds"][part]
            logged[(AT_GRPO_RESULTS, TIME_SHARE, part)] = parts["share"][part]
        self.metrics.log_dict(logged, window=1)

    # ------------------------------------------------------------------ evaluation
    @override(Algorithm)
    def evaluate(self, parallel_train_future=None) -> dict[str, Any]:
        """Held-out evaluation the RLlib way (``evaluation_interval``, ``evaluation_duration``):
        the same fixed evaluation instances every time, greedy, no branching; with the
        untrained team's numbers beside them (``untrained_*``). RLlib calls it inside ``step``,
        after the iteration's update and before ``self.iteration`` counts it (``held_out.py``)."""
        group = self._evaluation_group_with_learner_weights()
        return {**self._held_out.play(group, self.logdir, after_iteration=self.iteration + 1),
                **self._held_out.untrained_columns()}

    def evaluation_seeds(self) -> list[int]:
        """The fixed held-out instances (``HeldOutEvaluation.seeds``)."""
        return self._held_out.seeds()

    def _evaluation_group(self):
        """The runners that play the held-out instances: the evaluation group, if any."""
        return self.eval_env_runner_group or self.env_runner_group

    def _evaluation_group_with_learner_weights(self):
        """:meth:`_evaluation_group` after a sync of the learner's current weights: every
        held-out evaluation, the untrained one included, plays what the learner holds (a vLLM
        runner's engine serves no adapter before its first sync)."""
        group = self._evaluation_group()
        group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
        return group

    @override(Algorithm)
    def _compile_iteration_results(self, *, train_results, eval_results):
        """Every iteration carries the evaluation columns (NaN where this iteration did not
        evaluate): Tune's progress.csv keeps only the columns of the first row."""
        if not self.config.evaluation_interval:
            return super()._compile_iteration_results(train_results=train_results,
                                                      eval_results=eval_results)
        if not eval_results:
            eval_results = {EVALUATION_RESULTS: self._held_out.columns_without_evaluation()}
        results = super()._compile_iteration_results(train_results=train_results,
                                                     eval_results=eval_results)
        results[HELD_OUT_SUCCESS] = (eval_results or {}).get(
            EVALUATION_RESULTS, {}).get(EVALUATION_SUCCESS_RATE, float("nan"))
        return results

    # ------------------------------------------------------------------ helpers
    def _sync_weights_through_disk(self, module_ids: list[str], version: int) -> None:
        """Learner 0 publishes the trained full models as files; every runner loads them."""
        root = self._weights_dir()
        results = self.learner_group.foreach_learner(
            lambda learner: learner.publish_full_weights(root, module_ids, version))
        folders = {}
        for result in results:
            folders.update(result.get())
        group = self.env_runner_group
        group.foreach_env_runner(lambda runner: runner.load_published_weights(folders, version),
                                 local_env_runner=group.num_remote_env_runners() == 0)

    def _weights_dir(self) -> str:
        """This algorithm's own folder under ``vllm_weight_sync_dir``, so trials sharing the
        directory (a Tune grid) never read each other's weights; removed in ``cleanup``."""
        if getattr(self, "_own_weights_dir", None) is None:
            import uuid

            name = f"{self.trial_id or 'algo'}-{uuid.uuid4().hex[:8]}"
            self._own_weights_dir = str(Path(self.config.vllm_weight_sync_dir) / name)
        return self._own_weights_dir

    @override(Algorithm)
    def cleanup(self) -> None:
        super().cleanup()
        if getattr(self, "_own_weights_dir", None) is not None:
            shutil.rmtree(self._own_weights_dir, ignore_errors=True)

    def _sample(self) -> list[dict[str, Any]]:
        group = self.env_runner_group
        remote = group.num_remote_env_runners()
        if remote == 0:
            self.metrics.log_value((ENV_RUNNER_RESULTS, RUNNERS_LOST), 0, window=1)
            return [group.local_env_runner.sample(
                num_tasks=int(self.config.num_tasks_per_iteration))]
        sample = share_sampler(int(self.config.num_tasks_per_iteration), remote)
        with sampling_failures():
            outputs = list(group.foreach_env_runner(sample, local_env_runner=False))
        return self._complete_sample(outputs, remote, sample)

    def _complete_sample(self, outputs: list[dict[str, Any]], remote: int,
                         sample) -> list[dict[str, Any]]:
        """The outputs of every runner, the lost and restarted runners' shares sampled again
        (``runner_recovery.py``; ``sample`` is the per-runner function)."""
        outputs, lost = self._recovery().complete(outputs, remote, sample,
                                                  self._oldest_allowed_version())
        # Every iteration, 0 included: a fixed set of result keys (see trial_results).
        self.metrics.log_value((ENV_RUNNER_RESULTS, RUNNERS_LOST), lost, window=1)
        return outputs

    @property
    def overlaps_sampling(self) -> bool:
        """Whether sampling overlaps training: ``async_rollout`` with ``max_staleness >= 1``
        (``max_staleness=0`` is the synchronous algorithm, exactly)."""
        return bool(self.config.async_rollout) and self.config.effective_max_staleness > 0

    #: Tag of the in-flight sample requests of ``async_rollout``.
    _SAMPLE_TAG = "at_grpo_sample"

    def _sample_overlapped(self, start_next: bool = True) -> list[dict[str, Any]]:
        """``async_rollout``: the outputs of the sample started last iteration (started now
        on the first), after starting the next one with the runners' current weights (unless
        ``start_next`` is False: the caller starts it after a weight sync)."""
        group = self.env_runner_group
        if not self._sample_in_flight:
            self._start_sample()
        with sampling_failures():
            outputs = [output for _, output in group.fetch_ready_async_reqs(
                tags=self._SAMPLE_TAG, timeout_seconds=None)]
        self._sample_in_flight = False
        remote = group.num_remote_env_runners()
        # A runner lost mid-sample has its share sampled again, synchronously.
        outputs = self._complete_sample(
            outputs, remote, share_sampler(int(self.config.num_tasks_per_iteration), remote))
        if start_next:
            self._start_sample()
        return outputs

    def _start_sample(self) -> None:
        group = self.env_runner_group
        group.foreach_env_runner_async(
            share_sampler(int(self.config.num_tasks_per_iteration),
                          group.num_remote_env_runners()), tag=self._SAMPLE_TAG)
        self._sample_in_flight = True

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group) -> list[int]:
        """Take back runners that Ray restarted, with the learner's current weights
        (``RunnerRecovery.restore``: RLlib's own copies the driver's empty local runner)."""
        return self._recovery().restore(env_runner_group)

    def _recovery(self) -> RunnerRecovery:
        return RunnerRecovery(self.env_runner_group, self.learner_group, self.config,
                              self._counters)

    def _oldest_allowed_version(self) -> int | None:
        """The oldest weights a sample may come from: the last synced version, less
        ``max_staleness`` (None before the first sync)."""
        if self._synced_weights_version is None:
            return None
        return self._synced_weights_version - self.config.effective_max_staleness

    def _check_weights_versions(self, outputs: Sequence[dict[str, Any]]) -> None:
        expected = self._oldest_allowed_version()
        versions = {o["worker_index"]: o["weights_version"] for o in outputs}
        self.metrics.log_value((ENV_RUNNER_RESULTS, WEIGHTS_VERSION_MIN),
                               min(versions.values()), window=1)
        if expected is None:
            return
        lagging = {w: v for w, v in versions.items() if v < expected}
        if lagging:
            raise WeightsLagError(
                f"env runners {sorted(lagging)} sampled with weights versions {lagging} but the "
                f"learner synced version {self._synced_weights_version} and max_staleness is "
                f"{self.config.effective_max_staleness}")

    def _pad_token_id(self) -> int:
        from pettingllms_rllib.models.loading import ModelSpec, load_tokenizer

        if not hasattr(self, "_pad_id"):
            tokenizer = load_tokenizer(ModelSpec.coerce(self.config.model_spec_dict))
            self._pad_id = int(tokenizer.pad_token_id or 0)
        return self._pad_id

    def _log_rollout_metrics(self, records: Sequence[SampleRecord],
                             episodes: Sequence[EpisodeSummary], env_steps: int,
                             tasks_dropped: int = 0,
                             failed_groups: Mapping[str, int] | None = None) -> None:
        log = self.metrics.log_value
        key = ENV_RUNNER_RESULTS
        log((key, NUM_ENV_STEPS_SAMPLED), env_steps, reduce="sum")
        log((key, NUM_ENV_STEPS_SAMPLED_LIFETIME), env_steps, reduce="lifetime_sum")
        log((key, NUM_EPISODES), len(episodes), reduce="sum")
        log((key, NUM_EPISODES_LIFETIME), len(episodes), reduce="lifetime_sum")
        log((key, SUCCESS_RATE), float(np.mean([e.success for e in episodes])), window=1)
        log((key, EPISODE_TURNS_MEAN), float(np.mean([e.num_turns for e in episodes])),
            window=1)
        log((key, EPISODE_RETURN_MEAN),
            float(np.mean([sum(e.agent_return.values()) for e in episodes])), window=1)
        log((key, NUM_SAMPLES), len(records), window=1)
        log((key, TASKS_DROPPED), tasks_dropped, window=1)
        generated = sum(r.num_response_tokens for r in records)
        log((key, NUM_GENERATED_TOKENS), generated, reduce="sum")
        # The training budget, for matching arms by generated tokens (a Tune stop criterion).
        log((key, NUM_GENERATED_TOKENS_LIFETIME), generated, reduce="lifetime_sum")
        by_agent: dict[str, list[SampleRecord]] = defaultdict(list)
        for record in records:
            by_agent[record.agent].append(record)
        for agent, rs in by_agent.items():
            log((key, AGENT, agent, AGENT_SAMPLE_REWARD_MEAN),
                float(np.mean([r.reward for r in rs])), window=1)
            log((key, AGENT, agent, AGENT_PARSE_ERROR_RATE),
                float(np.mean([r.parse_error is not None for r in rs])), window=1)
            log((key, AGENT, agent, AGENT_EPISODE_RETURN_MEAN),
                float(np.mean([e.agent_return.get(agent, 0.0) for e in episodes])), window=1)
            log((key, AGENT, agent, AGENT_RESPONSE_TOKENS_MEAN),
                float(np.mean([r.num_response_tokens for r in rs])), window=1)
            log((key, AGENT, agent, AGENT_TRUNCATED_FRACTION),
                float(np.mean([r.finish_reason == "length" for r in rs])), window=1)
        failed_groups = failed_groups or {}
        for agent in sorted(set(by_agent) | set(failed_groups)):
            log((key, AGENT, agent, AGENT_ROLLOUT_ERRORS), int(failed_groups.get(agent, 0)),
                window=1)
