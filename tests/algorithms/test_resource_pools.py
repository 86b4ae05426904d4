"""``.resource_pools(...)`` and ``async_rollout``'s settings are checked before Ray starts:
every module in exactly one pool, no empty pool, no unknown module or key, a staleness bound
the schedule can keep, and runners that can overlap; each error names the value and what is
accepted. The placement group reserves every pool's learners."""

import pytest

from pettingllms_rllib.algorithms import ATGRPO, ATGRPOConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from pettingllms_rllib.algorithms.resource_pools import (ResourcePool, assignment_problems,
                                                         parse_pools, restrict_spec)
from pettingllms_rllib.experiment import multi_agent_kwargs

ROLES = ["tool", "planner"]


def config(**pools) -> ATGRPOConfig:
    base = (ATGRPOConfig()
            .environment("plan_path_v1", env_config={"grid_size": 3, "max_turns": 1})
            .llm(model="tiny-random")
            .multi_agent(**multi_agent_kwargs("per_role", ROLES)))
    return base.resource_pools(pools=pools) if pools else base


def test_two_pools_one_per_role_are_accepted():
    cfg = config(tool_pool={"modules": ["tool"], "num_learners": 1},
                 planner_pool={"modules": ["planner"], "num_learners": 2, "lr": 1e-4})
    cfg.validate_at_grpo()
    pools = {pool.name: pool for pool in cfg.parsed_resource_pools}
    assert pools["planner_pool"] == ResourcePool("planner_pool", ("planner",), num_learners=2,
                                                 lr=1e-4)
    assert pools["tool_pool"].num_cpus_per_learner == 1.0  # the defaults


def test_without_pools_there_is_one_learner_group_as_before():
    assert config().parsed_resource_pools is None


@pytest.mark.parametrize("pools,message", [
    ({"a": {"modules": ["tool"]}}, r"modules \['planner'\] are assigned to no pool"),
    ({"a": {"modules": ["tool", "planner"]}, "b": {"modules": ["planner"]}},
     r"module 'planner' is assigned to several pools \['a', 'b'\]"),
    ({"a": {"modules": ["tool", "planner"]}, "b": {"modules": []}},
     r"resource_pools.b.modules: \[\] is not accepted; a pool holds at least one module"),
    ({"a": {"modules": ["tool", "planner", "critic"]}},
     r"resource_pools.a.modules names \['critic'\], which are not among the policies"),
    ({"a": {"modules": ["tool", "planner"], "gpus": 1}},
     r"resource_pools.a: unknown keys \['gpus'\]; accepted: \['modules', 'num_learners'"),
    ({"a": {"modules": ["tool", "planner"], "num_learners": -1}},
     r"resource_pools.a.num_learners: -1 is not accepted; expected an integer >= 0"),
    ({"a": {"modules": ["tool", "planner"], "lr": 0}},
     r"resource_pools.a.lr: 0 is not accepted; expected a finite number > 0"),
], ids=["module_in_no_pool", "module_in_two_pools", "empty_pool", "unknown_module",
        "unknown_key", "negative_learners", "zero_lr"])
def test_a_bad_pool_assignment_is_refused_naming_it(pools, message):
    with pytest.raises(ValueError, match=message):
        config(**pools).validate_at_grpo()


def test_an_empty_pools_mapping_is_refused():
    cfg = config().resource_pools(pools={})
    with pytest.raises(ValueError, match="expected a non-empty mapping"):
        cfg.validate_at_grpo()


@pytest.mark.parametrize("settings,runners,message", [
    ({"async_rollout": True, "max_staleness": -1}, 1,
     r"training.max_staleness: -1 is not accepted; expected an integer >= 0 and <= 1, or null"),
    ({"async_rollout": True, "max_staleness": 2}, 1, r"training.max_staleness: 2 is not acc"),
    ({"max_staleness": 1}, 1, r"max_staleness=1 needs async_rollout=True"),
    ({"async_rollout": True}, 0, r"needs remote env runners .* got num_env_runners=0"),
    ({"importance_sampling_cap": 0.0}, 0, r"training.importance_sampling_cap: 0.0 is not "),
], ids=["negative", "deeper_than_built", "without_async", "local_runner", "cap"])
def test_bad_async_settings_are_refused_naming_them(settings, runners, message):
    cfg = config().training(**settings).env_runners(num_env_runners=runners)
    with pytest.raises(ValueError, match=message):
        cfg.validate_at_grpo()


def test_the_staleness_bound_in_force():
    assert config().effective_max_staleness == 0
    assert config().training(async_rollout=True).effective_max_staleness == 1
    assert config().training(async_rollout=True, max_staleness=0).effective_max_staleness == 0
    # sampling overlaps training only with a bound above 0: max_staleness=0 is synchronous
    assert config().training(async_rollout=True).overlaps_sampling
    assert not config().overlaps_sampling
    assert not config().training(async_rollout=True, max_staleness=0).overlaps_sampling


def test_parse_and_assign_are_pure():
    pools, problems = parse_pools({"x": {"modules": ["a"]}, "y/z": {"modules": ["b"]}})
    assert [p.name for p in pools] == ["x"] and "without '/'" in problems[0]
    assert assignment_problems(pools, {"a"}) == []


def test_the_placement_group_reserves_every_pools_learners():
    cfg = (config(tool_pool={"modules": ["tool"], "num_learners": 2, "num_gpus_per_learner": 1},
                  planner_pool={"modules": ["planner"], "num_learners": 1,
                                "num_gpus_per_learner": 0.5, "num_cpus_per_learner": 2})
           .env_runners(num_env_runners=1, num_gpus_per_env_runner=1)
           .learners(num_learners=3, num_gpus_per_learner=1))  # unused with pools
    factory = ATGRPO.default_resource_request(cfg)
    assert [float(b.get("GPU", 0)) for b in factory.bundles] == [0, 1, 1, 1, 0.5]
    assert factory.bundles[-1]["CPU"] == 2


def test_a_pool_learning_inside_the_driver_puts_its_gpu_in_the_main_bundle():
    cfg = config(tool_pool={"modules": ["tool"], "num_gpus_per_learner": 1},
                 planner_pool={"modules": ["planner"], "num_learners": 1,
                               "num_gpus_per_learner": 1}).env_runners(num_env_runners=1)
    factory = ATGRPO.default_resource_request(cfg)
    assert [float(b.get("GPU", 0)) for b in factory.bundles] == [1, 0, 1]


def test_a_pools_spec_keeps_every_field_but_the_other_modules():
    full = MultiRLModuleSpec(rl_module_specs={m: RLModuleSpec() for m in ROLES},
                             model_config={"shared": 1}, load_state_path="/ckpt")
    tool_only = restrict_spec(full, ["tool"])
    assert set(tool_only.rl_module_specs) == {"tool"}
    assert (tool_only.model_config, tool_only.load_state_path) == ({"shared": 1}, "/ckpt")
    assert set(full.rl_module_specs) == set(ROLES)  # the algorithm's spec is left whole
