"""One real AT-GRPO iteration with the bundled SmolLM2-135M-Instruct on plan_path_v0.

The slowest test: it converts the GGUF on first use and samples real text from a real model.
"""

import pytest
import torch

ray = pytest.importorskip("ray")

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_bundled_smollm2_runs_a_real_iteration_with_per_role_adapters():
    config = (
        ATGRPOConfig()
        .environment("plan_path_v0", env_config={"grid_size": 3, "wall_prob": 0.0,
                                                 "max_turns": 1})
        .llm(model="smollm2-135m-instruct", lora={"r": 4, "lora_alpha": 8}, max_new_tokens=16)
        .training(num_branches=2, num_tasks_per_iteration=2, lr=1e-3)
        .multi_agent(**multi_agent_kwargs("per_role", ["tool", "planner"]))
        .resources(num_cpus_for_main_process=2)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        before = {mid: learner.module[mid].get_state() for mid in ("tool", "planner")}
        result = algo.train()
        runners = result["env_runners"]
        # 2 tasks x 1 turn x 2 agents x K=2 samples, every one a real decoded response
        assert runners["num_samples"] == 8
        assert runners["num_generated_tokens"] > 0
        assert 0.0 <= runners["success_rate"] <= 1.0
        assert {"tool", "planner"} <= set(runners["agent"])
        # Whichever module had a non-zero advantage must have moved.
        moved = [mid for mid in before if any(
            not torch.equal(v, learner.module[mid].get_state()[k]) for k, v in before[mid].items())]
        zero_var = result["at_grpo"]["zero_variance_group_fraction"]
        assert moved or zero_var == 1.0
    finally:
        algo.stop()
