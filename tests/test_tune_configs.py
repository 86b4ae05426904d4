"""Every shipped experiment file loads and validates (keys, env id, env_config, mapping)
without Ray, so a renamed option cannot silently break a config users copy."""

from pathlib import Path

import pytest

from pettingllms_rllib.experiment import load_experiment

CONFIG_DIR = Path(__file__).parents[1] / "tune_configs"
CONFIGS = sorted(CONFIG_DIR.rglob("*.yaml"))
TASKS = ("plan_path", "sokoban", "sudoku", "code", "math")


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(CONFIG_DIR)) for p in CONFIGS])
def test_config_loads_and_validates(path):
    experiment = load_experiment(path)
    assert experiment.configs and experiment.stop


@pytest.mark.parametrize("task", TASKS)
def test_each_task_has_a_cpu_config_and_a_paper_scale_config(task):
    cpu = load_experiment(CONFIG_DIR / f"{task}_cpu.yaml").config
    paper = load_experiment(CONFIG_DIR / f"{task}_qwen3_1.7b.yaml").config
    assert cpu.env == paper.env == f"{task}_v0"
    assert cpu.llm_model == "smollm2-135m-instruct"
    assert paper.llm_model == "Qwen/Qwen3-1.7B"
    assert paper.num_tasks_per_iteration == 128  # the paper's tasks per step
