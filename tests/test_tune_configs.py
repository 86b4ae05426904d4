"""Every shipped experiment file loads and validates (keys, env id, env_config, mapping)
without Ray, so a renamed option cannot silently break a config users copy. Paper-scale files
that train on hub datasets are validated with a small local file of the same format (no
network in tests)."""

import json
from pathlib import Path

import pytest
import yaml

from pettingllms_rllib.experiment import load_experiment

CONFIG_DIR = Path(__file__).parents[1] / "tune_configs"
CONFIGS = sorted(CONFIG_DIR.rglob("*.yaml"))
TASKS = ("plan_path", "sokoban", "sudoku", "code", "math")
#: One valid row per hub dataset format the shipped configs use.
LOCAL_ROWS = {
    "code_contests": {"name": "add", "description": "Print the sum of two integers.",
                      "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
                      "solutions": {"language": [3], "solution": ["print(sum(map(int, input().split())))"]}},
    "polaris": {"problem": "What is 2 + 3?", "answer": "5"},
}


def overrides_for(path: Path, tmp_path: Path) -> list[str]:
    env_config = yaml.safe_load(path.read_text())["algorithm"]["environment"]["env_config"]
    data_format = env_config.get("dataset_format")
    if data_format is None:
        return []
    local = tmp_path / f"{data_format}.jsonl"
    local.write_text("\n".join(json.dumps(dict(LOCAL_ROWS[data_format], id=f"p{i}",
                                               name=f"p{i}")) for i in range(4)))
    return [f"environment.env_config.dataset={local}"]


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(CONFIG_DIR)) for p in CONFIGS])
def test_config_loads_and_validates(path, tmp_path):
    experiment = load_experiment(path, overrides_for(path, tmp_path))
    assert experiment.configs and experiment.stop


@pytest.mark.parametrize("task", TASKS)
def test_each_task_has_a_cpu_config_and_a_paper_scale_config(task, tmp_path):
    cpu = load_experiment(CONFIG_DIR / f"{task}_cpu.yaml").config
    paper_path = CONFIG_DIR / f"{task}_qwen3_1.7b.yaml"
    paper = load_experiment(paper_path, overrides_for(paper_path, tmp_path)).config
    assert cpu.env == paper.env == f"{task}_v0"
    assert cpu.llm_model == "smollm2-135m-instruct"
    assert paper.llm_model == "Qwen/Qwen3-1.7B"
    assert paper.num_tasks_per_iteration == 128  # the paper's tasks per step
