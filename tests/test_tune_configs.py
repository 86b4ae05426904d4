"""Every shipped experiment file loads and validates (keys, env id, env_config, mapping)
without Ray, so a renamed option cannot silently break a config users copy. Paper-scale files
that train on hub datasets are validated with a small local file of the same format (no
network in tests)."""

import json
from pathlib import Path

import pytest

from pettingllms_rllib.experiment import arm_names, load_document, load_experiment

CONFIG_DIR = Path(__file__).parents[1] / "tune_configs"
#: The paper-scale files (vLLM on GPUs).
GPU_DIR = CONFIG_DIR / "gpu"
CONFIGS = sorted(CONFIG_DIR.rglob("*.yaml"))
#: Every runnable experiment: each file as it is and each of its arms.
RUNNABLE = [(path, arm) for path in CONFIGS for arm in (None, *arm_names(path))]
TASKS = ("plan_path", "sokoban", "sudoku", "code", "math")
#: One valid row per hub dataset format the shipped configs use.
LOCAL_ROWS = {
    "code_contests": {"name": "add", "description": "Print the sum of two integers.",
                      "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
                      "solutions": {"language": [3], "solution": ["print(sum(map(int, input().split())))"]}},
    "polaris": {"problem": "What is 2 + 3?", "answer": "5"},
}


@pytest.fixture(autouse=True)
def vllm_counts_as_installed(monkeypatch):
    """The GPU configs ask for engine: vllm and name hub models (Qwen/Qwen3-...): validating
    them must need neither vLLM nor the model in this machine's HF cache."""
    monkeypatch.setattr("pettingllms_rllib.engines.vllm_engine.vllm_installed", lambda: True)
    monkeypatch.setattr("pettingllms_rllib.models.loading.check_hub_model",
                        lambda name, **kwargs: None)


def overrides_for(path: Path, tmp_path: Path, arm: str | None = None) -> list[str]:
    env_config = load_document(path, arm)["algorithm"]["environment"]["env_config"]
    dataset = env_config.get("dataset")
    # math_v0 and code_v0 name a loaded source and its format in one mapping.
    data_format = dataset.get("format") if isinstance(dataset, dict) else None
    if data_format is None:
        return []
    local = tmp_path / f"{data_format}.jsonl"
    local.write_text("\n".join(json.dumps(dict(LOCAL_ROWS[data_format], id=f"p{i}",
                                               name=f"p{i}")) for i in range(4)))
    return [f"environment.env_config.dataset.source={local}"]


@pytest.mark.parametrize("path,arm", RUNNABLE, ids=[
    str(p.relative_to(CONFIG_DIR)) + (f"[{a}]" if a else "") for p, a in RUNNABLE])
def test_config_loads_and_validates(path, arm, tmp_path):
    experiment = load_experiment(path, overrides_for(path, tmp_path, arm), arm=arm)
    assert experiment.configs and experiment.stop


def test_cpu_configs_are_one_file_per_setting():
    """Compared arms live in their setting's file (``arms:``), not in near-copies of it."""
    cpu = [p for p in CONFIGS if GPU_DIR not in p.parents]
    assert all(p.parent == CONFIG_DIR for p in cpu), "arms go in their setting's file"
    assert len(cpu) <= 15, sorted(p.name for p in cpu)


QWEN3_SIZES = {
    "1.7b": dict(hidden_size=2048, num_hidden_layers=28, intermediate_size=6144,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 vocab_size=151936, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, num_hidden_layers=36, intermediate_size=12288,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
               tie_word_embeddings=False),
}
GPU_CONFIGS = [(task, size) for task in TASKS for size in QWEN3_SIZES]


def local_qwen3(tmp_path: Path, size: str) -> Path:
    """A folder with the published Qwen3 config only: validation reads shapes, never weights."""
    from transformers import Qwen3Config

    folder = tmp_path / f"qwen3-{size}"
    Qwen3Config(**QWEN3_SIZES[size]).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("task,size", GPU_CONFIGS, ids=[f"{t}_{s}" for t, s in GPU_CONFIGS])
def test_gpu_configs_use_vllm_on_gpus_and_fit_80gb_gpus_by_the_memory_estimate(
        task, size, tmp_path):
    path = GPU_DIR / f"{task}_qwen3_{size}.yaml"
    model = local_qwen3(tmp_path, size)
    config = load_experiment(path, overrides_for(path, tmp_path) + [
        f"llm.model={model}", "llm.gpu_memory_gib=80"]).config
    assert config.engine == "vllm" and config.model_dtype == "bfloat16"
    assert config.num_gpus_per_env_runner == 1 and config.num_gpus_per_learner == 1
    assert (config.lora is not None) == (size == "8b")  # 8B: one adapter per role


def test_the_papers_full_finetuning_of_qwen3_8b_per_role_is_refused_on_80gb(tmp_path):
    from pettingllms_rllib.experiment import ExperimentError

    path = GPU_DIR / "plan_path_qwen3_8b.yaml"
    with pytest.raises(ExperimentError, match="needs an estimated"):
        load_experiment(path, [f"llm.model={local_qwen3(tmp_path, '8b')}",
                               "llm.gpu_memory_gib=80", "llm.lora=null"])


#: The newest version of each task (plan_path_v0 is kept only to reproduce earlier results).
CURRENT_ENV_IDS = {task: f"{task}_v0" for task in TASKS} | {"plan_path": "plan_path_v1"}


@pytest.mark.parametrize("task", TASKS)
def test_each_task_has_a_cpu_config_and_a_paper_scale_config(task, tmp_path):
    cpu = load_experiment(CONFIG_DIR / f"{task}_cpu.yaml").config
    paper_path = GPU_DIR / f"{task}_qwen3_1.7b.yaml"
    paper = load_experiment(paper_path, overrides_for(paper_path, tmp_path)).config
    assert cpu.env == paper.env == CURRENT_ENV_IDS[task]
    assert cpu.llm_model == "smollm2-135m-instruct"
    assert paper.llm_model == "Qwen/Qwen3-1.7B"
    assert paper.num_tasks_per_iteration == 128  # the paper's tasks per step
    large_path = GPU_DIR / f"{task}_qwen3_8b.yaml"
    large = load_experiment(large_path, overrides_for(large_path, tmp_path)).config
    assert large.llm_model == "Qwen/Qwen3-8B" and large.env == paper.env


#: The replication's arms, and the keys in which each may differ from AT-GRPO per role.
ARM_KEYS = {"atgrpo_per_role": {}, "atgrpo_shared": {"mapping": "shared"},
            "vanilla_grpo": {"rollout": "trajectories"},
            "single_agent_grpo": {"single_agent": True}}
#: The settings ``bench/replicate.sh`` compares the four arms in.
REPLICATED = [p for p in CONFIGS if set(ARM_KEYS) <= set(arm_names(p))]


def _without_arm_keys(config: dict) -> tuple[dict, dict]:
    """The config (changed in place) with the arm's own keys taken out, and those keys."""
    arm = {"mapping": config.pop("mapping", "per_role"),
           "rollout": config["algorithm"].get("training", {}).pop("rollout", None),
           "single_agent": config["algorithm"]["environment"]["env_config"].pop(
               "single_agent", None)}
    config.pop("name", None)
    return config, {key: value for key, value in arm.items()
                    if value not in (None, "per_role")}


def test_bench_replicate_compares_four_settings():
    assert sorted(p.stem for p in REPLICATED) == [
        "math_cpu", "plan_path_prefill_cpu", "plan_path_tool_helper_cpu",
        "plan_path_tool_offsets_cpu"]


@pytest.mark.parametrize("path", REPLICATED, ids=[p.stem for p in REPLICATED])
def test_the_arms_of_a_replication_differ_only_in_their_own_keys(path):
    """The four arms resolve to one document but for their own keys; a budget, prompt or
    learning rate set in one arm would make the comparison unmatched."""
    per_role, _ = _without_arm_keys(load_document(path, "atgrpo_per_role"))
    for arm, keys in ARM_KEYS.items():
        rest, own = _without_arm_keys(load_document(path, arm))
        assert own == keys, (arm, own)
        assert rest == per_role, arm


def test_plan_path_configs_name_their_variant_instead_of_prompt_flags():
    """Each shipped Plan-Path setting is a named variant (docs/tasks.md); the flags it is made
    of are the env's business, not a config's."""
    from pettingllms_envs.plan_path import RETIRED_FLAGS, VARIANTS

    checked = 0
    for path in sorted(Path(__file__).resolve().parents[1].glob("tune_configs/**/*.yaml")):
        environment = load_document(path).get("algorithm", {}).get("environment", {})
        if not str(environment.get("env", "")).startswith("plan_path"):
            continue
        env_config = environment.get("env_config", {})
        assert not RETIRED_FLAGS & set(env_config), path
        assert env_config.get("variant", "paper") in VARIANTS, path
        checked += 1
    assert checked >= 8


def test_math_configs_name_their_variant_and_one_data_source():
    """Each shipped math setting is a named variant with its data source in one ``dataset``
    mapping (docs/tasks.md); the retired prompt flags and flat data keywords are the env's
    past, not a config's."""
    from pettingllms_envs.math import (DATA_FIELDS, RETIRED_DATA_KEYWORDS, RETIRED_FLAGS,
                                       VARIANTS)

    checked = 0
    for path in CONFIGS:
        environment = load_document(path).get("algorithm", {}).get("environment", {})
        if environment.get("env") != "math_v0":
            continue
        env_config = environment.get("env_config", {})
        assert not (RETIRED_FLAGS | set(RETIRED_DATA_KEYWORDS)) & set(env_config), path
        assert env_config.get("variant", "paper") in VARIANTS, path
        dataset = env_config.get("dataset", "generated")
        assert dataset == "generated" or set(dataset) <= set(DATA_FIELDS), path
        checked += 1
    assert checked >= 5
