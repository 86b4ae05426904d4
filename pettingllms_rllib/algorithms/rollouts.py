"""The env runners' side of ``ATGRPO``: each iteration's sample, and the weights the runners hold.

Two schedules sample differently (docs/design.md, "One iteration, step by step"):

* :class:`Rollouts`, the synchronous algorithm: each iteration the runners sample their share
  of ``num_tasks_per_iteration`` and the driver waits for them;
* :class:`OverlappedRollouts`, ``async_rollout`` (``max_staleness >= 1``): the driver collects
  the sample the runners started during the previous iteration and starts the next one, so
  the runners sample while the learners train (with resource pools the next one starts only
  after the finished pools' weights are published: ``pool_schedule.py``).

Either owns the weights version last synced to the runners (:attr:`Rollouts.synced_version`):
the one number the lag check, the staleness of the rows an update starts on and the restarted
runners' resampling read. The trained weights reach the runners only through
:meth:`Rollouts.receive_weights`, which records it. Lost and restarted runners are handled by
``runner_recovery.py``.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

from pettingllms_rllib.algorithms.pool_schedule import WeightsLagError
from pettingllms_rllib.algorithms.runner_recovery import (RunnerRecovery, sampling_failures,
                                                          weight_sync_failures)
from pettingllms_rllib.core.records import SampleRecord
from pettingllms_rllib.metric_keys import RUNNERS_LOST, WEIGHTS_VERSION_MIN


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


class Rollouts:
    """The synchronous schedule's sampling, and the weights version the runners hold.

    Built once, at the algorithm's setup, from its parts: ``config`` (``num_tasks_per_iteration``,
    ``effective_max_staleness``, ``syncs_full_weights_through_disk``,
    ``vllm_weight_sync_dir``), RLlib's ``metrics`` logger, ``recovery`` (called for each use:
    a :class:`RunnerRecovery` over the algorithm's current counters, which a restore replaces)
    and the ``trial_id`` that names the folder of weights synced through disk.
    """

    #: Keyword arguments of RLlib's ``sync_weights``: RLlib's default, fire and forget (the
    #: runners are idle between two samples, and the next sample checks the version).
    _SYNC_OPTIONS: dict[str, Any] = {}

    def __init__(self, env_runner_group, learner_group, config, metrics,
                 recovery: Callable[[], RunnerRecovery], trial_id: str | None = None) -> None:
        self._group = env_runner_group
        self._learner_group = learner_group
        self._config = config
        self._metrics = metrics
        self._recovery = recovery
        self._trial_id = trial_id
        self._weights_dir: str | None = None
        #: The weights version last synced to the runners (None before the first sync, e.g.
        #: just after a restore).
        self.synced_version: int | None = None

    def collect(self) -> list[dict[str, Any]]:
        """Every runner's sample of this iteration (the driver-local runner's when there are
        no remote ones), lost and restarted runners' shares sampled again."""
        group = self._group
        remote = group.num_remote_env_runners()
        if remote == 0:
            self._metrics.log_value((ENV_RUNNER_RESULTS, RUNNERS_LOST), 0, window=1)
            return [group.local_env_runner.sample(
                num_tasks=int(self._config.num_tasks_per_iteration))]
        sample = self._share_sampler(remote)
        with sampling_failures():
            outputs = list(group.foreach_env_runner(sample, local_env_runner=False))
        return self._complete(outputs, remote, sample)

    def _share_sampler(self, remote: int):
        return share_sampler(int(self._config.num_tasks_per_iteration), remote)

    def _complete(self, outputs: list[dict[str, Any]], remote: int,
                  sample) -> list[dict[str, Any]]:
        """The outputs of every runner, the lost and restarted runners' shares sampled again
        (``runner_recovery.py``; ``sample`` is the per-runner function)."""
        outputs, lost = self._recovery().complete(outputs, remote, sample,
                                                  self.oldest_allowed_version())
        # Every iteration, 0 included: a fixed set of result keys (see trial_results).
        self._metrics.log_value((ENV_RUNNER_RESULTS, RUNNERS_LOST), lost, window=1)
        return outputs

    # ------------------------------------------------------------------ weights versions
    def oldest_allowed_version(self) -> int | None:
        """The oldest weights a sample may come from: the last synced version, less
        ``max_staleness`` (None before the first sync)."""
        if self.synced_version is None:
            return None
        return self.synced_version - self._config.effective_max_staleness

    def check_weights_versions(self, outputs: Sequence[dict[str, Any]]) -> None:
        """Log the oldest version the runners sampled with; raise :class:`WeightsLagError`
        when a runner sampled with weights older than :meth:`oldest_allowed_version` (RLlib's
        ``sync_weights`` does not wait for delivery, so it is checked here)."""
        expected = self.oldest_allowed_version()
        versions = {o["worker_index"]: o["weights_version"] for o in outputs}
        self._metrics.log_value((ENV_RUNNER_RESULTS, WEIGHTS_VERSION_MIN),
                                min(versions.values()), window=1)
        if expected is None:
            return
        lagging = {w: v for w, v in versions.items() if v < expected}
        if lagging:
            raise WeightsLagError(
                f"env runners {sorted(lagging)} sampled with weights versions {lagging} but the "
                f"learner synced version {self.synced_version} and max_staleness is "
                f"{self._config.effective_max_staleness}")

    def learner_version(self, records: Sequence[SampleRecord]) -> int:
        """The weights version the coming update starts from: the last one synced to the
        runners (before any sync, e.g. just after a restore, the newest the runners used)."""
        if self.synced_version is not None:
            return int(self.synced_version)
        return max((int(r.weights_version) for r in records), default=0)

    def receive_weights(self, module_ids: list[str], version: int) -> None:
        """The trained modules' weights, as ``version``, to every runner in one request per
        runner (from a pooled learner group too: it gathers each module from its pool), or as
        files for vLLM full fine-tuning; the version is recorded for the next check."""
        with weight_sync_failures():  # restarts off: a runner died while receiving them
            if self._config.syncs_full_weights_through_disk:
                self._sync_through_disk(module_ids, version)
            else:
                self._group.sync_weights(
                    from_worker_or_learner_group=self._learner_group, policies=module_ids,
                    inference_only=True, **self._SYNC_OPTIONS)
            self.synced_version = version

    def _sync_through_disk(self, module_ids: list[str], version: int) -> None:
        """Learner 0 publishes the trained full models as files; every runner loads them."""
        root = self.weights_dir()
        results = self._learner_group.foreach_learner(
            lambda learner: learner.publish_full_weights(root, module_ids, version))
        folders = {}
        for result in results:
            folders.update(result.get())
        group = self._group
        group.foreach_env_runner(lambda runner: runner.load_published_weights(folders, version),
                                 local_env_runner=group.num_remote_env_runners() == 0)

    def weights_dir(self) -> str:
        """This algorithm's own folder under ``vllm_weight_sync_dir``, so trials sharing the
        directory (a Tune grid) never read each other's weights; see :meth:`remove_weights_dir`."""
        if self._weights_dir is None:
            name = f"{self._trial_id or 'algo'}-{uuid.uuid4().hex[:8]}"
            self._weights_dir = str(Path(self._config.vllm_weight_sync_dir) / name)
        return self._weights_dir

    def remove_weights_dir(self) -> None:
        """At the algorithm's cleanup: the folder of :meth:`weights_dir`, if one was made."""
        if self._weights_dir is not None:
            shutil.rmtree(self._weights_dir, ignore_errors=True)


class OverlappedRollouts(Rollouts):
    """``async_rollout``: :meth:`collect` returns the sample started during the previous
    iteration (started at once on the first) and starts the next one with the runners' current
    weights, unless ``start_next_on_collect`` is False (resource pools: the algorithm calls
    :meth:`start` after publishing the finished pools' weights)."""

    #: Tag of the in-flight sample requests.
    _SAMPLE_TAG = "at_grpo_sample"
    #: The sync waits for the runner's previous request, then queues behind its in-flight
    #: sample, so the runner's next sample uses these weights (RLlib's fire-and-forget sync
    #: drops a request while the previous one is in flight).
    _SYNC_OPTIONS = {"timeout_seconds": None}

    def __init__(self, *args, start_next_on_collect: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._start_next_on_collect = start_next_on_collect
        #: Whether the runners are sampling the next iteration.
        self._in_flight = False

    def collect(self) -> list[dict[str, Any]]:
        """The sample the runners started last (started now on the first call), lost
        runners' shares sampled again; then the next sample starts, unless deferred."""
        group = self._group
        if not self._in_flight:
            self.start()
        with sampling_failures():
            outputs = [output for _, output in group.fetch_ready_async_reqs(
                tags=self._SAMPLE_TAG, timeout_seconds=None)]
        self._in_flight = False
        remote = group.num_remote_env_runners()
        # A runner lost mid-sample has its share sampled again, synchronously.
        outputs = self._complete(outputs, remote, self._share_sampler(remote))
        if self._start_next_on_collect:
            self.start()
        return outputs

    def start(self) -> None:
        """Start the next sample on every remote runner, with the weights it holds now."""
        group = self._group
        group.foreach_env_runner_async(
            self._share_sampler(group.num_remote_env_runners()), tag=self._SAMPLE_TAG)
        self._in_flight = True
