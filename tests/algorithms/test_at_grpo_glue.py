"""The thin RLlib glue, without Ray: task splitting, the runners' side of an iteration
(``rollouts.py``: the loud failure of a lagging runner, the overlapped sample, the one owner of
the synced weights version) and the per-iteration results (``iteration_metrics.py``)."""

import math
import types

import pytest

from pettingllms_rllib.algorithms.at_grpo import WeightsLagError, split_tasks
from pettingllms_rllib.algorithms.iteration_metrics import log_staleness
from pettingllms_rllib.algorithms.rollouts import OverlappedRollouts, Rollouts
from pettingllms_rllib.algorithms.runner_recovery import RunnerRecovery


class _Metrics:
    def __init__(self):
        self.values = {}

    def log_value(self, key, value, **kwargs):
        self.values[key] = value

    def log_dict(self, values, **kwargs):
        self.values.update(values)


class _Runner:
    def __init__(self, worker_index, weights_version):
        self.worker_index = worker_index
        self.weights_version = weights_version

    def sample(self, num_tasks):
        return {"worker_index": self.worker_index, "weights_version": self.weights_version,
                "num_tasks": num_tasks}


class _Runners:
    """A stand-in env runner group of two remote runners: a sample reports its share of the
    tasks and the runner's weights version; in-flight samples are counted, syncs recorded."""

    def __init__(self, weights_version=0):
        self.weights_version = weights_version
        self.started = 0
        self.syncs = []
        self._in_flight = []

    def num_remote_env_runners(self):
        return 2

    def _runners(self):
        return [_Runner(index, self.weights_version) for index in (1, 2)]

    def foreach_env_runner(self, func, local_env_runner=True, remote_worker_ids=None):
        return [func(runner) for runner in self._runners()]

    def foreach_env_runner_async(self, func, tag):
        self.started += 1
        self._in_flight = [func(runner) for runner in self._runners()]

    def fetch_ready_async_reqs(self, tags, timeout_seconds):
        ready, self._in_flight = self._in_flight, []
        return list(enumerate(ready))

    def sync_weights(self, **kwargs):
        self.syncs.append(kwargs)
        self.weights_version += 1


def _rollouts(synced=None, max_staleness=0, kind=Rollouts, group=None, **kwargs):
    config = types.SimpleNamespace(
        effective_max_staleness=max_staleness, num_tasks_per_iteration=5, is_online=True,
        restart_failed_env_runners=True, syncs_full_weights_through_disk=False)
    group = group or _Runners()
    rollouts = kind(group, "learners", config, _Metrics(),
                    lambda: RunnerRecovery(group, "learners", config, {}), **kwargs)
    rollouts.synced_version = synced
    return rollouts


def test_tasks_are_spread_evenly_and_every_runner_gets_one():
    assert split_tasks(8, 3) == [3, 3, 2]
    assert split_tasks(2, 4) == [1, 1, 1, 1]
    assert split_tasks(5, 0) == [5]


def test_runner_behind_the_learner_fails_the_iteration_loudly():
    outputs = [{"worker_index": 1, "weights_version": 3}, {"worker_index": 2, "weights_version": 2}]
    with pytest.raises(WeightsLagError, match=r"env runners \[2\].*version 3"):
        _rollouts(3).check_weights_versions(outputs)


def test_with_async_rollout_a_runner_may_lag_max_staleness_versions_and_no_more():
    one_behind = [{"worker_index": 1, "weights_version": 2}]
    _rollouts(3, max_staleness=1).check_weights_versions(one_behind)
    two_behind = [{"worker_index": 1, "weights_version": 1}]
    with pytest.raises(WeightsLagError, match=r"version 3 and max_staleness is 1"):
        _rollouts(3, max_staleness=1).check_weights_versions(two_behind)


def test_runners_in_step_pass_and_report_the_minimum_version():
    rollouts = _rollouts(3)
    rollouts.check_weights_versions([{"worker_index": 1, "weights_version": 3}])
    assert rollouts._metrics.values[("env_runners", "weights_version_min")] == 3


def test_before_the_first_sync_no_version_is_expected():
    rollouts = _rollouts(None, max_staleness=0)
    assert rollouts.oldest_allowed_version() is None
    rollouts.check_weights_versions([{"worker_index": 0, "weights_version": 0},
                                     {"worker_index": 1, "weights_version": 2}])
    assert rollouts._metrics.values == {("env_runners", "weights_version_min"): 0}


def test_the_synced_version_is_the_one_the_update_starts_from_and_the_runners_are_checked_by():
    records = [types.SimpleNamespace(weights_version=v) for v in (1, 4)]
    rollouts = _rollouts(None)
    assert rollouts.learner_version(records) == 4  # before any sync: the newest the runners used
    rollouts.receive_weights(["a"], 6)
    assert rollouts.synced_version == 6 and rollouts.learner_version(records) == 6
    assert rollouts.oldest_allowed_version() == 6
    assert rollouts._group.syncs == [{"from_worker_or_learner_group": "learners",
                                      "policies": ["a"], "inference_only": True}]


def test_the_synchronous_sample_splits_the_tasks_and_reports_no_lost_runner():
    rollouts = _rollouts()
    assert [o["num_tasks"] for o in rollouts.collect()] == [3, 2]
    assert rollouts._metrics.values[("env_runners", "num_runners_lost")] == 0
    assert rollouts._group.started == 0


def test_the_overlapped_sample_starts_the_next_one_unless_the_pools_start_it():
    rollouts = _rollouts(kind=OverlappedRollouts)
    assert [o["num_tasks"] for o in rollouts.collect()] == [3, 2]
    assert rollouts._group.started == 2  # the first sample now, and the next one at once
    rollouts.collect()
    assert rollouts._group.started == 3
    deferred = _rollouts(kind=OverlappedRollouts, start_next_on_collect=False)
    deferred.collect()
    assert deferred._group.started == 1
    deferred.start()  # after the finished pools' weights are published
    assert deferred._group.started == 2


def test_the_overlapped_weight_sync_waits_for_the_runners_previous_request():
    rollouts = _rollouts(kind=OverlappedRollouts)
    rollouts.receive_weights(["a", "b"], 2)
    assert rollouts._group.syncs[0]["timeout_seconds"] is None and rollouts.synced_version == 2


def test_staleness_is_logged_for_every_module_nan_without_rows():
    metrics = _Metrics()
    log_staleness(metrics, {"b": [0, 1, 1]}, {"a", "b"})
    assert math.isnan(metrics.values[("at_grpo", "staleness_mean", "a")])
    assert metrics.values[("at_grpo", "staleness_mean", "b")] == pytest.approx(2 / 3)
    assert metrics.values[("at_grpo", "staleness_max", "b")] == 1.0


def test_a_remote_runners_env_failure_stops_the_run_as_itself_not_as_a_lost_runner():
    from ray.exceptions import RayTaskError

    from pettingllms_rllib.algorithms.runner_recovery import _raise_env_failure
    from pettingllms_rllib.core.tree_sampler import RolloutError

    failure = RolloutError("3 of 4 groups failed this iteration")
    wrapped = RayTaskError("sample", "traceback", failure)
    with pytest.raises(RolloutError, match="3 of 4 groups failed"):
        _raise_env_failure(wrapped)
    _raise_env_failure(RayTaskError("sample", "traceback", OSError("node died")))  # not ours
