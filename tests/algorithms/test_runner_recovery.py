"""Env-runner recovery (``runner_recovery.py``) and the held-out evaluation's columns
(``held_out.py``), against small fakes of a runner group: no Ray cluster."""

import math
import types
from collections import defaultdict

import pytest
from ray.exceptions import RayError

from pettingllms_rllib.algorithms.held_out import HeldOutEvaluation
from pettingllms_rllib.algorithms.runner_recovery import (EnvRunnerLostError, RunnerRecovery,
                                                          sampling_failures,
                                                          weight_sync_failures)
from pettingllms_rllib.metric_keys import (EVALUATION_SUCCESS_RATE,
                                           EVALUATION_UNTRAINED_SUCCESS_RATE as UNTRAINED)


class _Group:
    """Remote runners 1..n; ``unhealthy`` ones come back at the first probe."""

    def __init__(self, unhealthy=()):
        self.unhealthy = list(unhealthy)
        self.synced: list[list[int]] = []

    def probe_unhealthy_env_runners(self):
        restored, self.unhealthy = self.unhealthy, []
        return restored

    def sync_weights(self, *, from_worker_or_learner_group, to_worker_indices, inference_only):
        self.synced.append(list(to_worker_indices))

    def foreach_env_runner(self, func, *, local_env_runner, remote_worker_ids):
        return [func(types.SimpleNamespace(worker_index=i)) for i in remote_worker_ids]


def _sample(runner):
    return {"worker_index": runner.worker_index, "weights_version": 3}


def _recovery(group, restart=True):
    config = types.SimpleNamespace(is_online=True, restart_failed_env_runners=restart,
                                   env_runner_restore_timeout_s=0)
    counters = defaultdict(int)
    return RunnerRecovery(group, object(), config, counters), counters


def test_a_runner_lost_mid_sample_is_restored_with_weights_and_samples_its_share_again():
    group = _Group(unhealthy=[2])
    recovery, counters = _recovery(group)
    outputs, lost = recovery.complete([{"worker_index": 1, "weights_version": 3}], 2, _sample,
                                      oldest_allowed_version=3)
    assert sorted(o["worker_index"] for o in outputs) == [1, 2] and lost == 0
    assert group.synced == [[2]] and counters["total_num_restored_workers"] == 1


def test_a_runner_that_stays_down_is_counted_and_with_none_left_the_error_names_them_all():
    recovery, _ = _recovery(_Group())
    outputs, lost = recovery.complete([{"worker_index": 1, "weights_version": 3}], 2, _sample,
                                      oldest_allowed_version=3)
    assert [o["worker_index"] for o in outputs] == [1] and lost == 1
    with pytest.raises(EnvRunnerLostError, match=r"every env runner \(\[1, 2\]\) failed"):
        recovery.complete([], 2, _sample, oldest_allowed_version=3)


def test_with_restarts_off_a_lost_runner_stops_the_run_naming_it():
    recovery, _ = _recovery(_Group(), restart=False)
    with pytest.raises(EnvRunnerLostError, match=r"env runners \[2\] failed while sampling"):
        recovery.complete([{"worker_index": 1, "weights_version": 3}], 2, _sample, 3)


def test_a_runner_restarted_unseen_answers_with_initial_weights_and_samples_again():
    group = _Group()
    recovery, _ = _recovery(group)
    outputs, lost = recovery.complete([{"worker_index": 1, "weights_version": 0},
                                       {"worker_index": 2, "weights_version": 3}], 2, _sample,
                                      oldest_allowed_version=3)
    assert sorted((o["worker_index"], o["weights_version"]) for o in outputs) == [(1, 3), (2, 3)]
    assert group.synced == [[1]] and lost == 0


def test_a_runners_death_reads_as_a_lost_runner_while_sampling_and_receiving_weights():
    with pytest.raises(EnvRunnerLostError, match="failed while sampling and restart_failed"):
        with sampling_failures():
            raise RayError("actor died")
    with pytest.raises(EnvRunnerLostError, match="failed while receiving weights"):
        with weight_sync_failures():
            raise RayError("actor died")


def test_an_iteration_without_evaluation_carries_nan_and_the_untrained_success():
    held_out = HeldOutEvaluation(types.SimpleNamespace(evaluation_interval=0))
    held_out.start(None, "unused", measure_untrained=True)  # no interval: nothing measured
    assert held_out.untrained is None
    columns = held_out.columns_without_evaluation()
    assert list(columns) == [UNTRAINED] and math.isnan(columns[UNTRAINED])
    held_out.untrained = {EVALUATION_SUCCESS_RATE: 0.25}
    assert held_out.untrained_columns() == {UNTRAINED: 0.25}
