"""``PooledLearnerGroup``'s routing, without Ray: each pool is built with only its modules and
its own learner settings, receives only its modules' rows, and every pool carries the group's
weights version; states merge and split by module. Stand-in learner groups record calls.
And its surface: a facade that inherits nothing from LearnerGroup, recognised as one by
``isinstance`` (RLlib dispatches on it), answering every public LearnerGroup method of the pinned
RLlib itself (so a Ray upgrade that adds one fails here, naming it, not inside a pooled run)."""

import inspect
import threading

import pytest

import numpy as np
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.resource_pools import PooledLearnerGroup, ResourcePool

POOLS = [ResourcePool("fast", ("a",), num_learners=1, lr=1e-3),
         ResourcePool("slow", ("b", "c"), num_learners=2, num_gpus_per_learner=0.5)]


class StandInGroup:
    #: Set by a test: every pool's update waits here until all pools are inside theirs.
    barrier: threading.Barrier | None = None

    def __init__(self, *, config, module_spec):
        self.config, self.modules = config, sorted(module_spec.rl_module_specs)
        self.updates, self.versions_set, self.states_set = [], [], []

    def shutdown(self):
        pass

    def update(self, *, batch, timesteps=None, **kwargs):
        if StandInGroup.barrier is not None:
            StandInGroup.barrier.wait()  # raises BrokenBarrierError if the pools ran in turn
        self.updates.append(sorted(batch.policy_batches))
        return [{m: {"rows": len(b)} for m, b in batch.policy_batches.items()}]

    def foreach_learner(self, func, **kwargs):
        class Learner:
            def set_state(inner, state):
                self.versions_set.append(state["weights_seq_no"])
        func(Learner())
        return []

    def get_state(self, components=None, **kwargs):
        return {"learner": {"rl_module": {m: {"w": m} for m in self.modules},
                            "optimizer": {f"{m}_opt": {"module_id": m} for m in self.modules},
                            "weights_seq_no": 99, "metrics_logger": self.modules}}

    def set_state(self, state):
        self.states_set.append(state)

    def load_module_state(self, **kwargs):
        self.modules_loaded = kwargs

    def get_stats(self):
        return {"learner_group_ts_dropped_lifetime": len(self.modules),
                "actor_manager_num_outstanding_async_reqs": 1}


def pooled() -> PooledLearnerGroup:
    config = ATGRPOConfig().multi_agent(policies={"a", "b", "c"})
    spec = MultiRLModuleSpec(rl_module_specs={m: RLModuleSpec() for m in "abc"})
    return PooledLearnerGroup(config=config, module_spec=spec, pools=POOLS,
                              make_learner_group=StandInGroup)


def batch(*modules) -> MultiAgentBatch:
    return MultiAgentBatch({m: SampleBatch({"x": np.zeros(2)}) for m in modules}, env_steps=2)


def test_each_pool_is_built_with_only_its_modules_and_its_own_learners():
    group = pooled()
    fast, slow = group.pools["fast"], group.pools["slow"]
    assert (fast.modules, slow.modules) == (["a"], ["b", "c"])
    assert (fast.config.num_learners, slow.config.num_learners) == (1, 2)
    assert slow.config.num_gpus_per_learner == 0.5
    assert fast.config.algorithm_config_overrides_per_module["a"]["lr"] == 1e-3
    assert set(fast.config.policies) == {"a"} and set(slow.config.policies) == {"b", "c"}


def test_rows_go_to_their_pool_only_and_the_pools_update_at_the_same_time():
    group = pooled()
    StandInGroup.barrier = threading.Barrier(len(POOLS), timeout=10)
    try:
        results = group.update(batch=batch("a", "b", "c"))
    finally:
        StandInGroup.barrier = None
    assert group.pools["fast"].updates == [["a"]] and group.pools["slow"].updates == [["b", "c"]]
    assert sorted(m for r in results for m in r) == ["a", "b", "c"]
    assert group.weights_seq_no == 1


def test_a_pool_without_rows_takes_the_new_version_too():
    group = pooled()
    group.update(batch=batch("a"))
    group.update(batch=batch("a"))
    assert group.pools["slow"].updates == []
    assert group.pools["slow"].versions_set == [1, 2]
    assert group.pools["fast"].versions_set == []  # its own update counted it


def test_states_merge_and_split_by_module():
    group = pooled()
    merged = group.get_state()["learner"]
    assert sorted(merged["rl_module"]) == ["a", "b", "c"]
    assert sorted(merged["optimizer"]) == ["a_opt", "b_opt", "c_opt"]
    assert merged["weights_seq_no"] == 0 and "metrics_logger" not in merged
    group.set_state({"learner": {**merged, "weights_seq_no": 7}})
    (slow_state,) = group.pools["slow"].states_set
    assert sorted(slow_state["learner"]["rl_module"]) == ["b", "c"]
    assert sorted(slow_state["learner"]["optimizer"]) == ["b_opt", "c_opt"]
    assert group.weights_seq_no == 7


def test_a_request_for_one_modules_weights_asks_only_its_pool():
    group = pooled()
    assert group._asks_for_pool("fast", ["learner/rl_module/a"])
    assert not group._asks_for_pool("slow", ["learner/rl_module/a"])
    assert group._asks_for_pool("slow", None) and group._asks_for_pool("slow", "learner")


#: LearnerGroup's public methods the facade leaves out: RLlib 2.60 marks them deprecated
#: (``update_from_batch``/``update_from_episodes`` forward to ``update``; ``async_update``
#: raises) and calls none of them.
DEPRECATED = {"update_from_batch", "update_from_episodes", "async_update"}


def test_the_pooled_group_is_a_learner_group_by_registration_only():
    group = pooled()
    assert isinstance(group, LearnerGroup)  # what RLlib's sync_weights dispatches on
    assert LearnerGroup not in type(group).__mro__  # nothing inherited, no __init__ skipped


def test_every_public_learner_group_method_is_answered_by_the_facade():
    public = {name for name, member in vars(LearnerGroup).items()
              if not name.startswith("_")
              and (inspect.isfunction(member) or isinstance(member, property))}
    unanswered = sorted(name for name in public - DEPRECATED
                        if name not in dir(PooledLearnerGroup))
    assert not unanswered, (f"LearnerGroup methods PooledLearnerGroup does not answer: "
                            f"{unanswered}; answer them in resource_pools.py")
    assert DEPRECATED <= public  # the pinned RLlib still has them; drop the ones it removed


def test_weights_go_to_and_come_from_each_modules_pool():
    group = pooled()
    assert group.get_weights(["a"]) == {"a": {"w": "a"}}
    assert sorted(group.get_weights()) == ["a", "b", "c"]
    group.set_weights({"a": {"w": 1}, "c": {"w": 3}})
    (fast,), (slow,) = group.pools["fast"].states_set, group.pools["slow"].states_set
    assert fast["learner"]["rl_module"] == {"a": {"w": 1}}
    assert slow["learner"]["rl_module"] == {"c": {"w": 3}}


def test_each_pool_loads_only_its_own_modules_from_checkpoints():
    group = pooled()
    group.load_module_state(multi_rl_module_ckpt_dir="/ckpt", modules_to_load={"a", "b"},
                            rl_module_ckpt_dirs={"c": "/c"})
    assert group.pools["fast"].modules_loaded == {
        "multi_rl_module_ckpt_dir": "/ckpt", "modules_to_load": {"a"}, "rl_module_ckpt_dirs": {}}
    assert group.pools["slow"].modules_loaded == {
        "multi_rl_module_ckpt_dir": "/ckpt", "modules_to_load": {"b"},
        "rl_module_ckpt_dirs": {"c": "/c"}}
    group = pooled()
    group.load_module_state(rl_module_ckpt_dirs={"b": "/b"})
    assert not hasattr(group.pools["fast"], "modules_loaded")
    assert group.pools["slow"].modules_loaded == {
        "multi_rl_module_ckpt_dir": None, "modules_to_load": None,
        "rl_module_ckpt_dirs": {"b": "/b"}}


def test_stats_are_summed_over_the_pools():
    assert pooled().get_stats() == {"learner_group_ts_dropped_lifetime": 3,
                                    "actor_manager_num_outstanding_async_reqs": 2}


def test_adding_or_removing_a_module_is_refused_naming_the_pools():
    group = pooled()
    with pytest.raises(NotImplementedError, match=r"resource_pools \['fast', 'slow'\]"):
        group.add_module(module_id="d", module_spec=RLModuleSpec())
    with pytest.raises(NotImplementedError, match="fixed by the config"):
        group.remove_module("a")
