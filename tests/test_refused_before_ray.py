"""Issue 42, item 4: every bad config the attacks sent to Ray is refused before ``ray.init``,
in one line that names the key and what is accepted.

Each test runs ``pettingllms-rllib train`` (``cli.main``) with ``ray.init`` replaced by a function
that fails the test, so a refusal that came too late (after Ray started) cannot pass."""

import dataclasses
import textwrap

import pytest
from tiny_experiment import GOOD

from pettingllms_rllib.cli import main



@pytest.fixture(autouse=True)
def ray_never_starts(monkeypatch):
    """``ray.init`` fails the test; Ray is not running before or after it."""
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init was called: the bad config reached Ray")

    initialized = ray.is_initialized  # a test may stand in for it
    assert not initialized()
    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
    assert not initialized()


@pytest.fixture
def two_cpus(monkeypatch):
    """This machine, as the CLI sees it: 2 CPUs and no GPU (whatever the test host has)."""
    monkeypatch.setattr("pettingllms_rllib.algorithms.resources.machine_resources",
                        lambda: {"CPU": 2.0, "GPU": 0.0})


def train(tmp_path, caplog, *extra, text=GOOD):
    """Exit status and log of ``train`` on ``text`` with ``extra`` arguments."""
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    status = main(["train", str(path), "--output", str(tmp_path / "runs"), *extra])
    return status, caplog.text


def refused(tmp_path, caplog, *extra, text=GOOD) -> str:
    status, log = train(tmp_path, caplog, *extra, text=text)
    assert status == 2, log[-2000:]
    assert "Traceback" not in log, log[-2000:]
    return log


# ------------------------------------------------------------------ sizes


def test_max_new_tokens_beyond_the_models_context_is_refused(tmp_path, caplog, two_cpus):
    log = refused(tmp_path, caplog, "--set", "llm.max_new_tokens=1000000000")
    # tiny-random has the tiny llama's 2048 positions (models/loading.DEFAULT_TINY_CONFIG)
    assert ("llm.max_new_tokens: 1000000000 is not accepted; expected an integer >= 1 and "
            "<= 2048 (the model's context length") in log


def test_max_new_tokens_bound_follows_the_models_config(tmp_path, caplog, two_cpus):
    text = GOOD.replace("max_new_tokens: 4",
                        "max_new_tokens: 4, tiny_model_config: {max_position_embeddings: 512}")
    log = refused(tmp_path, caplog, "--set", "llm.max_new_tokens=513", text=text)
    assert "llm.max_new_tokens: 513 is not accepted" in log and "<= 512" in log


def test_with_vllm_responses_fit_its_max_model_len_and_that_fits_the_model():
    from pettingllms_rllib.algorithms import ATGRPOConfig
    from pettingllms_rllib.algorithms.config_fields import check_fields

    config = ATGRPOConfig().environment("plan_path_v1").llm(
        model="tiny-random", engine="vllm", vllm_max_model_len=256, max_new_tokens=512)
    (problem,) = check_fields(config)
    assert problem.startswith("llm.max_new_tokens: 512 is not accepted; expected an integer "
                              ">= 1 and <= 256 (") and "vllm_max_model_len" in problem
    (problem,) = check_fields(config.llm(vllm_max_model_len=4096, max_new_tokens=64))
    assert problem.startswith("llm.vllm_max_model_len: 4096 is not accepted; expected an "
                              "integer >= 1 and <= 2048 (the model's context length")
    assert check_fields(config.llm(engine="hf", vllm_max_model_len=None, max_new_tokens=2048)) == []


def test_num_tasks_per_iteration_beyond_its_cap_is_refused(tmp_path, caplog):
    from pettingllms_rllib.algorithms.config_fields import MAX_TASKS_PER_ITERATION

    log = refused(tmp_path, caplog, "--set", "training.num_tasks_per_iteration=1000000000000")
    assert ("training.num_tasks_per_iteration: 1000000000000 is not accepted; expected an "
            f"integer >= 1 and <= {MAX_TASKS_PER_ITERATION}") in log


def test_num_branches_beyond_its_cap_is_refused(tmp_path, caplog):
    from pettingllms_rllib.algorithms.config_fields import MAX_BRANCHES

    log = refused(tmp_path, caplog, "--set", "training.num_branches=1000000000")
    assert ("training.num_branches: 1000000000 is not accepted; expected an integer >= 2 and "
            f"<= {MAX_BRANCHES}") in log


def test_sandbox_memory_beyond_the_hosts_is_refused(tmp_path, caplog, monkeypatch, two_cpus):
    from pettingllms_rllib.models import memory

    monkeypatch.setattr(memory, "host_memory_bytes", lambda: 8 << 30)
    log = refused(tmp_path, caplog, "--set",
                  "environment.env_config.sandbox_limits={memory_mb: 1000000000000000}")
    assert ("environment.env_config.sandbox_limits.memory_mb: 1000000000000000 is not accepted; "
            "expected a finite number > 0 and <= 8192 (this host's memory in MiB)") in log


def test_sandbox_wall_time_beyond_its_cap_is_refused(tmp_path, caplog, two_cpus):
    from pettingllms_rllib.algorithms.config_fields import MAX_SANDBOX_SECONDS

    log = refused(tmp_path, caplog, "--set",
                  "environment.env_config.sandbox_limits={wall_time_s: 1e308}")
    assert ("environment.env_config.sandbox_limits.wall_time_s: 1e+308 is not accepted; "
            f"expected a finite number > 0 and <= {MAX_SANDBOX_SECONDS:g}") in log


def test_sandbox_limits_given_as_the_dataclass_are_bounded_too(monkeypatch):
    """Python users pass ``SandboxLimits`` itself: the same bounds apply."""
    from pettingllms_envs.sandbox import SandboxLimits
    from pettingllms_rllib.algorithms.config_fields import check_fields
    from pettingllms_rllib.algorithms import ATGRPOConfig
    from pettingllms_rllib.models import memory

    monkeypatch.setattr(memory, "host_memory_bytes", lambda: 1 << 30)
    config = ATGRPOConfig().environment("plan_path_v1", env_config={
        "sandbox_limits": SandboxLimits(memory_mb=4096, wall_time_s=5)})
    assert check_fields(config) == [
        "environment.env_config.sandbox_limits.memory_mb: 4096 is not accepted; expected a "
        "finite number > 0 and <= 1024 (this host's memory in MiB)"]
    fits = dataclasses.replace(SandboxLimits(), memory_mb=512)
    assert check_fields(ATGRPOConfig().environment(
        "plan_path_v1", env_config={"sandbox_limits": fits})) == []


# ------------------------------------------------------------------ Tune's settings


def test_a_stop_value_below_one_is_refused(tmp_path, caplog):
    log = refused(tmp_path, caplog, "--set", "stop.training_iteration=-1")
    assert "stop.training_iteration: -1 is not accepted; expected an integer >= 1" in log


def test_stop_counters_need_one_but_other_metrics_take_any_threshold():
    from pettingllms_rllib.algorithms.config_fields import check_value, stop_field

    assert check_value("stop.x", 0, stop_field("env_runners/num_generated_tokens_lifetime"))
    assert check_value("stop.x", 0.5, stop_field("time_total_s"))
    assert check_value("stop.x", 0.9, stop_field("evaluation/success_rate")) is None


def test_resume_into_a_folder_with_no_run_is_refused(tmp_path, caplog, two_cpus):
    log = refused(tmp_path, caplog, "--resume")
    assert f"--resume: {tmp_path / 'runs' / 'tiny'} does not exist; accepted:" in log
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    log = refused(tmp_path, caplog, "--resume")
    assert "holds no run (no tuner.pkl)" in log


# ------------------------------------------------------------------ the YAML file


def test_a_duplicate_key_is_refused_with_its_line(tmp_path, caplog):
    text = GOOD.replace("  training: {num_branches: 2, num_tasks_per_iteration: 1}",
                        "  training: {num_branches: 2, num_tasks_per_iteration: 1}\n"
                        "  training: {num_branches: 4}")
    log = refused(tmp_path, caplog, text=text)
    assert (f"{tmp_path / 'exp.yaml'}:9:3: duplicate key 'training' (first given on line 8); "
            "accepted: each key once per mapping") in log


def test_a_duplicate_key_inside_a_flow_mapping_and_in_set_is_refused(tmp_path, caplog):
    log = refused(tmp_path, caplog, text=GOOD.replace("num_branches: 2,",
                                                      "num_branches: 2, num_branches: 3,"))
    assert "duplicate key 'num_branches'" in log
    log = refused(tmp_path, caplog, "--set", "training={lr: 0.1, lr: 0.2}")
    assert "--set 'training={lr: 0.1, lr: 0.2}':1:" in log and "duplicate key 'lr'" in log


def test_yaml_merge_keys_still_override_what_they_merge(tmp_path):
    from pettingllms_rllib.experiment import _load_yaml

    assert _load_yaml("base: &b {x: 1, y: 2}\nother: {<<: *b, y: 3}\n")["other"] == {
        "x": 1, "y": 3}


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(tmp_path, caplog):
    log = refused(tmp_path, caplog, text=GOOD.replace("  llm:", "\tllm:"))
    lines = [line for line in log.splitlines() if "exp.yaml" in line]
    assert len(lines) == 1, log
    assert (f"{tmp_path / 'exp.yaml'}:7:1: found character '\\t' that cannot start any token"
            in lines[0]) and "not tabs" in lines[0]


# ------------------------------------------------------------------ resources


def test_more_cpus_than_the_machine_has_are_refused(tmp_path, caplog, two_cpus):
    log = refused(tmp_path, caplog, "--set", "env_runners.num_env_runners=2")
    assert "a trial asks for 3 CPU(s) in all" in log
    assert "env_runners.num_env_runners=2 x env_runners.num_cpus_per_env_runner=1" in log
    assert "but the local Ray of this machine has 2; accepted: at most 2" in log


def test_num_cpus_sets_what_the_local_ray_has(tmp_path, caplog, two_cpus):
    log = refused(tmp_path, caplog, "--num-cpus", "1", "--set", "env_runners.num_env_runners=1")
    assert "a trial asks for 2 CPU(s) in all" in log and "has 1; accepted: at most 1" in log
    # Four logical CPUs for the local Ray hold three: the config goes on to ray.init (the stub).
    with pytest.raises(AssertionError, match="ray.init was called"):
        train(tmp_path, caplog, "--num-cpus", "4", "--set", "env_runners.num_env_runners=2")


def test_a_gpu_on_a_machine_without_gpus_is_refused(tmp_path, caplog, two_cpus):
    log = refused(tmp_path, caplog, "--set", "env_runners.num_gpus_per_env_runner=1")
    assert "a trial asks for 1 GPU(s) in all" in log
    assert "env_runners.num_gpus_per_env_runner=1" in log and "has 0" in log


def test_a_local_pools_resources_count_in_the_trial(tmp_path, caplog, two_cpus):
    """A ``num_learners: 0`` pool learns inside the trial's main process: its CPUs and GPUs
    join that bundle, and a pool the machine cannot hold is refused naming the pool."""
    log = refused(tmp_path, caplog, "--set", "resource_pools.pools={tool_pool: {modules: [tool], "
                  "num_learners: 0, num_gpus_per_learner: 1}, planner_pool: {modules: [planner]}}")
    assert "resource_pools.pools.tool_pool: num_learners=0 x num_gpus_per_learner=1" in log


def test_local_pools_gpus_add_up_in_the_main_process(tmp_path, caplog, monkeypatch):
    """Two ``num_learners: 0`` pools with a GPU each ask the trial's main process for both
    GPUs: on a one-GPU machine Ray would wait forever."""
    monkeypatch.setattr("pettingllms_rllib.algorithms.resources.machine_resources",
                        lambda: {"CPU": 2.0, "GPU": 1.0})
    log = refused(tmp_path, caplog, "--set", "resource_pools.pools={"
                  "tool_pool: {modules: [tool], num_learners: 0, num_gpus_per_learner: 1}, "
                  "planner_pool: {modules: [planner], num_learners: 0, num_gpus_per_learner: 1}}")
    assert "a trial asks for 2 GPU(s) in all" in log and "has 1; accepted: at most 1" in log
    for pool in ("tool_pool", "planner_pool"):
        assert f"resource_pools.pools.{pool}: num_learners=0 x num_gpus_per_learner=1" in log


def test_a_cluster_that_cannot_hold_the_trial_is_refused(monkeypatch):
    """Where Ray is already initialised, the cluster's totals are what a trial must fit in."""
    import ray

    from pettingllms_rllib.algorithms import ATGRPOConfig
    from pettingllms_rllib.experiment import multi_agent_kwargs

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 2.0})
    config = (ATGRPOConfig().environment("plan_path_v1", env_config={"grid_size": 3})
              .llm(model="tiny-random", lora={"r": 4})
              .learners(num_learners=4, num_gpus_per_learner=1)
              .multi_agent(**multi_agent_kwargs("per_role", ["tool", "planner"])))
    with pytest.raises(ValueError, match=r"a trial asks for 4 GPU\(s\) in all .*"
                                         r"learners.num_learners=4 x learners.num_gpus_per_"
                                         r"learner=1\) but the Ray cluster has 2"):
        config.check_resources()
    config.learners(num_learners=2).check_resources()  # 2 GPUs fit


def test_the_local_ray_is_not_checked_when_joining_a_cluster(tmp_path, caplog, two_cpus):
    """With --address the cluster may have what this machine lacks: the check waits for the
    connection (and the stub stands in for it here)."""
    with pytest.raises(AssertionError, match="ray.init was called"):
        train(tmp_path, caplog, "--address", "ray://nowhere:10001", "--set",
              "env_runners.num_env_runners=4")
    assert "a trial asks for" not in caplog.text


# ------------------------------------------------------------------ messages


def test_no_error_carries_rllibs_validate_config_hint():
    from pettingllms_rllib.algorithms import ATGRPOConfig

    config = ATGRPOConfig().environment("plan_path_v1").training(num_branches=1)
    with pytest.raises(ValueError) as error:
        config.validate()
    assert "num_branches" in str(error.value)
    assert "_validate_config" not in str(error.value) and "own risk" not in str(error.value)


def test_eval_imports_the_env_module_a_checkpoint_needs_and_names_one_it_cannot(caplog):
    assert main(["eval", "--import", "no_such_env_module", "--base-model", "tiny-random",
                 "--env", "math_v0", "--out", "unused"]) == 2
    assert "--import: imports: cannot import 'no_such_env_module'" in caplog.text
