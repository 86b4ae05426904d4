"""The thin RLlib glue: task splitting and the loud failure of a lagging runner."""

import types

import pytest

from pettingllms_rllib.algorithms.at_grpo import ATGRPO, WeightsLagError, split_tasks


class _Metrics:
    def __init__(self):
        self.values = {}

    def log_value(self, key, value, **kwargs):
        self.values[key] = value


def _algo(synced, max_staleness=0):
    algo = types.SimpleNamespace(
        _synced_weights_version=synced, metrics=_Metrics(),
        config=types.SimpleNamespace(effective_max_staleness=max_staleness))
    algo._oldest_allowed_version = lambda: ATGRPO._oldest_allowed_version(algo)
    return algo


def test_tasks_are_spread_evenly_and_every_runner_gets_one():
    assert split_tasks(8, 3) == [3, 3, 2]
    assert split_tasks(2, 4) == [1, 1, 1, 1]
    assert split_tasks(5, 0) == [5]


def test_runner_behind_the_learner_fails_the_iteration_loudly():
    outputs = [{"worker_index": 1, "weights_version": 3}, {"worker_index": 2, "weights_version": 2}]
    with pytest.raises(WeightsLagError, match=r"env runners \[2\].*version 3"):
        ATGRPO._check_weights_versions(_algo(3), outputs)


def test_with_async_rollout_a_runner_may_lag_max_staleness_versions_and_no_more():
    one_behind = [{"worker_index": 1, "weights_version": 2}]
    ATGRPO._check_weights_versions(_algo(3, max_staleness=1), one_behind)
    two_behind = [{"worker_index": 1, "weights_version": 1}]
    with pytest.raises(WeightsLagError, match=r"version 3 and max_staleness is 1"):
        ATGRPO._check_weights_versions(_algo(3, max_staleness=1), two_behind)


def test_runners_in_step_pass_and_report_the_minimum_version():
    algo = _algo(3)
    ATGRPO._check_weights_versions(algo, [{"worker_index": 1, "weights_version": 3}])
    assert algo.metrics.values[("env_runners", "weights_version_min")] == 3


def test_before_the_first_sync_no_version_is_expected():
    algo = _algo(None, max_staleness=0)
    assert algo._oldest_allowed_version() is None
    ATGRPO._check_weights_versions(algo, [{"worker_index": 0, "weights_version": 0},
                                          {"worker_index": 1, "weights_version": 2}])
    assert algo.metrics.values == {("env_runners", "weights_version_min"): 0}


def test_a_remote_runners_env_failure_stops_the_run_as_itself_not_as_a_lost_runner():
    from ray.exceptions import RayTaskError

    from pettingllms_rllib.algorithms.runner_recovery import _raise_env_failure
    from pettingllms_rllib.core.tree_sampler import RolloutError

    failure = RolloutError("3 of 4 groups failed this iteration")
    wrapped = RayTaskError("sample", "traceback", failure)
    with pytest.raises(RolloutError, match="3 of 4 groups failed"):
        _raise_env_failure(wrapped)
    _raise_env_failure(RayTaskError("sample", "traceback", OSError("node died")))  # not ours
