"""Per-module staleness (``pool_schedule.py``), without Ray: each resource pool updates on its
own schedule, so a pool still updating does not hold back another pool's module; rows lag their
module's published weights by at most one version; a pool one sample behind is waited for."""

import threading

import numpy as np
import pytest
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import SampleBatch

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.pool_schedule import PoolSchedule, PublishLog, WeightsLagError
from pettingllms_rllib.algorithms.resource_pools import PooledLearnerGroup, ResourcePool
from pettingllms_rllib.core.records import GroupKey, SampleRecord

POOLS = [ResourcePool("fast", ("a",)), ResourcePool("slow", ("b",))]


class GatedGroup:
    """A stand-in pool learner group: an update of the "slow" pool waits until the test opens
    its gate (so "still updating" is a fact of the test, not a timing); the learners' weights
    version is recorded as RLlib's Learner keeps it (set_state, +1 per update)."""

    gates: dict[str, threading.Event] = {}

    def __init__(self, *, config, module_spec):
        self.modules = sorted(module_spec.rl_module_specs)
        self.name = "slow" if self.modules == ["b"] else "fast"
        self.updates: list[dict] = []
        self.version = 0
        self.versions_at_start: list[int] = []

    def update(self, *, batch, **kwargs):
        self.versions_at_start.append(self.version)
        gate = GatedGroup.gates.get(self.name)
        if gate is not None and not gate.wait(timeout=20):
            raise TimeoutError("the test never opened the gate")
        self.updates.append({m: len(b) for m, b in batch.policy_batches.items()})
        self.version += 1
        return [{m: {"rows": len(b)} for m, b in batch.policy_batches.items()}]

    def foreach_learner(self, func, **kwargs):
        group = self

        class Learner:
            def set_state(self, state):
                group.version = state["weights_seq_no"]
        return [func(Learner())]

    def shutdown(self):
        pass


@pytest.fixture
def schedule():
    GatedGroup.gates = {"slow": threading.Event()}
    config = ATGRPOConfig().multi_agent(policies={"a", "b"})
    spec = MultiRLModuleSpec(rl_module_specs={m: RLModuleSpec() for m in "ab"})
    group = PooledLearnerGroup(config=config, module_spec=spec, pools=POOLS,
                               make_learner_group=GatedGroup)
    yield PoolSchedule(group, max_staleness=1)
    GatedGroup.gates["slow"].set()
    group.shutdown()


def rows(version: int, per_module: int = 2) -> list[SampleRecord]:
    return [SampleRecord(group_key=GroupKey("t", m, 0), module_id=m, branch=k, prompt_text="p",
                         prompt_ids=(1,), response_ids=(2,), behaviour_logprobs=(-0.1,),
                         response_text="r", reward=1.0, reward_team=0.0, reward_local=1.0,
                         success=False, parse_error=None, weights_version=version)
            for m in "ab" for k in range(per_module)]


def batches(records):
    counts: dict[str, int] = {}
    for record in records:
        counts[record.module_id] = counts.get(record.module_id, 0) + 1
    return {m: SampleBatch({"x": np.zeros(n)}) for m, n in counts.items()}


def iteration(schedule: PoolSchedule, sampled_version: int) -> tuple[dict, dict]:
    """One ATGRPO iteration of the pooled asynchronous schedule, without the runners."""
    finished = schedule.collect()
    published = schedule.publish(finished)
    schedule.queue(rows(sampled_version))
    return finished, {"published": published, "lags": schedule.start_idle(batches)}


def test_the_publish_log_counts_the_publications_after_a_sample():
    log = PublishLog()
    log.record(["a", "b"], 1)
    log.record(["a"], 2)
    assert [log.missed("a", v) for v in (0, 1, 2)] == [2, 1, 0]
    assert [log.missed("b", v) for v in (0, 1, 2)] == [1, 0, 0]
    assert log.missed("c", 0) == 0


def test_a_pool_still_updating_does_not_hold_back_the_other_pools_module(schedule):
    group = schedule.group
    _, first = iteration(schedule, sampled_version=0)
    assert first["lags"] == {"a": [0, 0], "b": [0, 0]}
    schedule.group._in_flight["fast"].result(timeout=20)  # the fast pool is done, slow is not
    finished, second = iteration(schedule, sampled_version=0)
    assert list(finished) == ["fast"] and group.is_updating("slow")
    assert second["published"] == (1, ["a"])
    # The fast pool started again on the new sample while the slow one is still in its first
    # update; the new rows lag "a" by the one version just published.
    assert second["lags"] == {"a": [1, 1]}
    group._in_flight["fast"].result(timeout=20)
    assert group.pools["fast"].updates == [{"a": 2}, {"a": 2}]
    assert group.pools["slow"].updates == [] and group.is_updating("slow")
    assert schedule.queued["slow"] and len(schedule.queued["slow"]) == 2


def test_a_pool_one_sample_behind_is_waited_for_and_its_rows_lag_one_version(schedule):
    group = schedule.group
    iteration(schedule, sampled_version=0)
    group._in_flight["fast"].result(timeout=20)
    iteration(schedule, sampled_version=0)  # slow still updating: its rows wait
    # The slow pool finishes a moment after the next iteration begins: collect must wait.
    opener = threading.Timer(0.3, GatedGroup.gates["slow"].set)
    opener.start()
    finished, third = iteration(schedule, sampled_version=1)
    opener.join()
    assert "slow" in finished
    # Waiting rows (sampled with version 0) and new ones (version 1, before slow's publication
    # as version 2) both lag "b" by exactly one publication.
    assert "b" in third["published"][1]
    assert sorted(third["lags"]["b"]) == [1, 1, 1, 1]
    slow = group.pools["slow"]
    group.finished_updates(wait_for=["slow", "fast"])
    assert slow.updates == [{"b": 2}, {"b": 4}]
    # The slow pool's learners started its second update from the version its weights were
    # published with, so the learner sees the rows sampled before it as stale.
    assert slow.versions_at_start == [0, third["published"][0]]


def test_rows_further_behind_than_the_bound_are_refused(schedule):
    schedule.log.record(["a"], 1)
    schedule.log.record(["a"], 2)
    schedule.queue(rows(0)[:1])
    with pytest.raises(WeightsLagError, match="2 versions behind .* max_staleness is 1"):
        schedule.start_idle(batches)


def test_a_failed_pool_update_names_its_pool(schedule):
    schedule.queue(rows(0))
    schedule.group.pools["fast"].update = lambda **kwargs: 1 / 0
    schedule.start_idle(batches)
    GatedGroup.gates["slow"].set()
    with pytest.raises(RuntimeError, match="resource pool 'fast' failed"):
        schedule.group.finished_updates(wait_for=["fast", "slow"])
