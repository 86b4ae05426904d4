"""Each task's CPU experiment file trains for two AT-GRPO iterations with a tiny random model.

The file is used as shipped except for the model (tiny random llama instead of SmolLM2), the
response length, the number of tasks and the size of the held-out set (2 instances where the file
evaluates: the untrained evaluation still runs at setup), so these tests check the env settings, the mapping
and the training section users run with `pettingllms-rllib train tune_configs/<task>_cpu.yaml`.
"""

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from pettingllms_rllib.experiment import load_experiment  # noqa: E402

pytestmark = pytest.mark.integration

CONFIG_DIR = Path(__file__).parents[2] / "tune_configs"
TASK_CONFIGS = sorted(CONFIG_DIR.glob("*_cpu.yaml"))
TINY_OVERRIDES = [
    "llm.model=tiny-random",
    "llm.tiny_model_config={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, "
    "num_attention_heads: 2, num_key_value_heads: 1}",
    "llm.max_new_tokens=8",
    "training.num_tasks_per_iteration=2",
    "evaluation.evaluation_duration=2",
]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("path", TASK_CONFIGS, ids=[p.stem for p in TASK_CONFIGS])
def test_cpu_config_trains_two_iterations_with_a_tiny_model(path):
    experiment = load_experiment(path, TINY_OVERRIDES)
    algo = experiment.config.build_algo()
    try:
        for iteration in (1, 2):
            result = algo.train()
            assert result["training_iteration"] == iteration
            runners = result["env_runners"]
            assert 0.0 <= runners["success_rate"] <= 1.0
            assert runners["num_episodes"] == 2
    finally:
        algo.stop()
