"""``ATGRPO``: the RLlib Algorithm whose ``training_step`` runs one AT-GRPO iteration.

The iteration, its schedules (synchronous, ``async_rollout`` one step off-policy, and with
resource pools each pool on its own schedule) and why each step is where it is are described
once, in docs/design.md, "One iteration, step by step"; the steps are the calls of
:meth:`ATGRPO.training_step`. This module holds the algorithm's steps; the objects it calls
hold the rest: the runners' sampling and the weights version they hold in ``rollouts.py``,
the pools' update schedule in ``pool_schedule.py``, the iteration's results in
``iteration_metrics.py``, the held-out evaluation in ``held_out.py``, the recovery of lost env
runners in ``runner_recovery.py`` and the trial's Ray resources in ``resources.py``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    EVALUATION_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)

from pettingllms_rllib import checkpoints
from pettingllms_rllib.algorithms.config import ATGRPOConfig
from pettingllms_rllib.algorithms.held_out import HeldOutEvaluation
from pettingllms_rllib.algorithms.iteration_metrics import (log_rollouts, log_staleness,
                                                            log_time_shares, log_update)
from pettingllms_rllib.algorithms.pool_schedule import PoolSchedule
from pettingllms_rllib.algorithms.resource_pools import PooledLearnerGroup
from pettingllms_rllib.algorithms.resources import trial_bundles
from pettingllms_rllib.algorithms.rollouts import OverlappedRollouts, Rollouts
from pettingllms_rllib.algorithms.runner_recovery import RunnerRecovery
from pettingllms_rllib.core.advantages import group_advantages
from pettingllms_rllib.core.batching import batches_per_module, records_to_train
from pettingllms_rllib.core.records import SampleRecord
from pettingllms_rllib.core.timing import Stopwatch
from pettingllms_rllib.metric_keys import EVALUATION_SUCCESS_RATE, HELD_OUT_SUCCESS

# Also importable from here, as before they moved: the error of a runner behind the learner,
# the task split, and these result keys (defined in metric_keys).
from pettingllms_rllib.algorithms.pool_schedule import WeightsLagError  # noqa: F401
from pettingllms_rllib.algorithms.rollouts import split_tasks  # noqa: F401
from pettingllms_rllib.metric_keys import (AT_GRPO_RESULTS, ITERATION_SECONDS,  # noqa: F401
                                           RUNNERS_LOST, TASKS_DROPPED, TIME_SECONDS,
                                           TIME_SHARE)

logger = logging.getLogger(__name__)


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
        """RLlib's placement group with this algorithm's bundles (``resources.trial_bundles``:
        a driver-local runner's GPU, each resource pool's learners)."""
        from ray.tune import PlacementGroupFactory

        if isinstance(config, dict):  # as RLlib's own accepts it; converted once, for both
            config = cls.get_default_config().update_from_dict(config)
        factory = super().default_resource_request(config)
        return PlacementGroupFactory(bundles=trial_bundles(config, factory.bundles),
                                     strategy=factory.strategy)

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
        #: With ``async_rollout`` and resource pools: each pool's own update schedule.
        pooled, overlaps = self.pooled_learner_group, self.config.overlaps_sampling
        self._pool_schedule = PoolSchedule(pooled, config.effective_max_staleness) \
            if pooled is not None and overlaps else None
        #: The runners' side: each iteration's sample and the weights version they hold.
        parts = (self.env_runner_group, self.learner_group, self.config, self.metrics,
                 self._recovery, self.trial_id)
        if overlaps:  # with resource pools, the next sample starts after publishing
            self.rollouts = OverlappedRollouts(
                *parts, start_next_on_collect=self._pool_schedule is None)
        else:
            self.rollouts = Rollouts(*parts)
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
        Synchronous and ``async_rollout`` differ in how ``self.rollouts`` samples; with
        ``async_rollout`` and resource pools each pool updates on its own schedule instead
        (``pool_schedule.py``), and the next sample starts once the finished pools' weights
        are published."""
        clock = Stopwatch()
        with self._timed(clock, "sample", ENV_RUNNER_SAMPLING_TIMER):
            outputs = self.rollouts.collect()
        self.rollouts.check_weights_versions(outputs)
        schedule = self._pool_schedule
        if schedule is None:  # one update of every module, waited for
            with clock("advantages"):
                batch = self._training_batch(outputs)
            if batch is not None:
                with self._timed(clock, "learner", LEARNER_UPDATE_TIMER):
                    learner_results = self.learner_group.update(
                        batch=batch, **self._update_options())
                pooled = self.pooled_learner_group
                log_update(self.metrics, learner_results,
                           pooled.last_update_seconds if pooled is not None else {})
                self._sync_trained_weights(clock, list(batch.policy_batches))
        else:  # every pool on its own schedule, in the background (pool_schedule.py)
            with self._timed(clock, "learner", LEARNER_UPDATE_TIMER):
                finished = schedule.collect()
            log_update(self.metrics, [r for results, _ in finished.values() for r in results],
                       {pool: seconds for pool, (_, seconds) in finished.items()})
            published = schedule.publish(finished)
            if published is not None:
                self._sync_trained_weights(clock, published[1])
            self.rollouts.start()
            with clock("advantages"):
                _, trained = self._advantaged_records(outputs)
                schedule.queue(trained)
            with clock("learner"):
                lags = schedule.start_idle(self._module_batches, **self._update_options())
            log_staleness(self.metrics, lags, self.config.policies)
        log_time_shares(self.metrics, clock, outputs)

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

    def _training_batch(self, outputs: Sequence[dict[str, Any]]) -> MultiAgentBatch | None:
        """Advantages over all records, rollout metrics, and the per-module learner batch
        (None when every group was dropped)."""
        records, trained = self._advantaged_records(outputs)
        learner_version = self.rollouts.learner_version(records)
        lags: dict[str, list[int]] = defaultdict(list)
        for record in trained:
            lags[record.module_id].append(learner_version - int(record.weights_version))
        log_staleness(self.metrics, lags, self.config.policies)
        return self._learner_batch(trained) if trained else None

    def _advantaged_records(self, outputs: Sequence[dict[str, Any]]
                            ) -> tuple[list[SampleRecord], list[SampleRecord]]:
        """Every sampled record with its group advantage, and those the learner trains on
        (dropped groups and ``frozen_modules`` left out); logs the rollout metrics."""
        cfg: ATGRPOConfig = self.config
        records = [r for out in outputs for r in out["records"]]
        result = group_advantages([r.reward for r in records], [r.group_key for r in records],
                                  [r.agent for r in records], cfg.advantage_config)
        for record, advantage in zip(records, result.advantages):
            record.advantage = float(advantage)
        trained = records_to_train(records, result.keep,
                                   frozen_modules=cfg.frozen_modules or (),
                                   mask_truncated=bool(cfg.mask_truncated_responses))
        log_rollouts(self.metrics, outputs, records, trained, result, cfg.policies)
        if not trained:
            logger.warning("no trainable samples this iteration (all groups dropped)")
        return records, trained

    def _module_batches(self, trained: Sequence[SampleRecord]) -> dict[str, SampleBatch]:
        """The learner's rows of each module (padded, or packed by shared prompt)."""
        return {mid: SampleBatch(cols) for mid, cols in batches_per_module(
            trained, self._pad_token_id(),
            shared_prefix=bool(self.config.shared_prefix_training)).items()}

    def _learner_batch(self, trained: Sequence[SampleRecord]) -> MultiAgentBatch:
        return MultiAgentBatch(self._module_batches(trained), env_steps=len(trained))

    def _pad_token_id(self) -> int:
        from pettingllms_rllib.models.loading import ModelSpec, load_tokenizer

        if not hasattr(self, "_pad_id"):
            tokenizer = load_tokenizer(ModelSpec.coerce(self.config.model_spec_dict))
            self._pad_id = int(tokenizer.pad_token_id or 0)
        return self._pad_id

    @property
    def pooled_learner_group(self) -> PooledLearnerGroup | None:
        """The learner group when ``.resource_pools`` built one group per pool, else None (one
        RLlib LearnerGroup, whose version is in the learner results)."""
        group = self.learner_group
        return group if isinstance(group, PooledLearnerGroup) else None

    def _sync_trained_weights(self, clock: Stopwatch, trained_modules: list[str]) -> None:
        """The one path by which trained weights reach the runners, from every mode (timed as
        ``weight_sync``): the learner side's new version (the pooled group's count of
        publications, else RLlib's ``WEIGHTS_SEQ_NO``) and the trained modules go to
        ``Rollouts.receive_weights``, which records the version the runners now hold. With
        resource pools, the pooled group gathers each module's weights from its pool in one
        request per runner: RLlib's fire-and-forget sync drops a request while the runner's
        previous one is in flight, so one request per pool could lose a pool's weights."""
        with self._timed(clock, "weight_sync", SYNCH_WORKER_WEIGHTS_TIMER):
            pooled = self.pooled_learner_group
            version = int(pooled.weights_seq_no if pooled is not None else self.metrics.peek(
                (LEARNER_RESULTS, trained_modules[0], WEIGHTS_SEQ_NO)))
            self.rollouts.receive_weights(trained_modules, version)

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group) -> list[int]:
        """Take back runners that Ray restarted, with the learner's current weights
        (``RunnerRecovery.restore``: RLlib's own copies the driver's empty local runner)."""
        return self._recovery().restore(env_runner_group)

    def _recovery(self) -> RunnerRecovery:
        """Built for each use: a restore replaces the algorithm's ``_counters``."""
        return RunnerRecovery(self.env_runner_group, self.learner_group, self.config,
                              self._counters)

    @override(Algorithm)
    def cleanup(self) -> None:
        super().cleanup()
        rollouts = getattr(self, "rollouts", None)  # None: setup failed before building it
        if rollouts is not None:
            rollouts.remove_weights_dir()

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


ATGRPOConfig.default_algo_class = ATGRPO  # what ATGRPOConfig() builds (see its docstring)
