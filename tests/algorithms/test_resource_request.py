"""ATGRPO.default_resource_request: the placement group a Tune trial reserves holds every GPU
the config asks for (runners, learners, and a driver-local runner), and nothing more."""

import pytest

from pettingllms_rllib.algorithms import ATGRPO, ATGRPOConfig
from pettingllms_rllib.experiment import multi_agent_kwargs


def config(**resources) -> ATGRPOConfig:
    runners = {k: v for k, v in resources.items() if "env_runner" in k}
    learners = {k: v for k, v in resources.items() if "learner" in k}
    return (ATGRPOConfig()
            .environment("plan_path_v1", env_config={"grid_size": 3, "max_turns": 1})
            .llm(model="tiny-random", lora={"r": 8})
            .env_runners(**runners)
            .learners(**learners)
            .multi_agent(**multi_agent_kwargs("per_role", ["tool", "planner"])))


def gpus(factory) -> list[float]:
    return [float(bundle.get("GPU", 0)) for bundle in factory.bundles]


def test_each_remote_runner_and_each_learner_gets_its_own_gpu_bundle():
    factory = ATGRPO.default_resource_request(config(
        num_env_runners=4, num_gpus_per_env_runner=1, num_cpus_per_env_runner=2,
        num_learners=2, num_gpus_per_learner=1))
    assert gpus(factory) == [0, 1, 1, 1, 1, 1, 1]  # main process, 4 runners, 2 learners
    assert [b["CPU"] for b in factory.bundles[1:5]] == [2, 2, 2, 2]
    assert factory.required_resources["GPU"] == 6


def test_fractional_gpus_are_reserved_as_asked():
    factory = ATGRPO.default_resource_request(config(
        num_env_runners=2, num_gpus_per_env_runner=0.5, num_learners=1, num_gpus_per_learner=1))
    assert gpus(factory) == [0, 0.5, 0.5, 1]


def test_a_driver_local_runner_gets_its_gpu_in_the_main_bundle():
    factory = ATGRPO.default_resource_request(config(
        num_env_runners=0, num_gpus_per_env_runner=1, num_learners=1, num_gpus_per_learner=1))
    assert gpus(factory) == [1, 1]  # RLlib alone would give the main process no GPU


def test_colocated_runner_and_learner_share_the_main_process_gpu():
    factory = ATGRPO.default_resource_request(config(
        num_env_runners=0, num_gpus_per_env_runner=1, num_learners=0, num_gpus_per_learner=1))
    assert gpus(factory) == [1]


def test_a_cpu_config_reserves_no_gpu():
    factory = ATGRPO.default_resource_request(config(num_env_runners=2))
    assert sum(gpus(factory)) == 0


def test_the_request_is_the_same_from_a_tune_param_space_dict():
    cfg = config(num_env_runners=2, num_gpus_per_env_runner=1, num_learners=1,
                 num_gpus_per_learner=1)
    assert gpus(ATGRPO.default_resource_request(cfg.to_dict())) == gpus(
        ATGRPO.default_resource_request(cfg))


@pytest.mark.parametrize("bad", [{"num_gpus_per_env_runner": -1}])
def test_negative_gpu_requests_are_refused(bad):
    with pytest.raises(ValueError):
        ATGRPO.default_resource_request(config(num_env_runners=1, **bad))
