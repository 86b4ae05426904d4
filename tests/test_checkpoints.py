"""The checkpoint layout, read from small folders laid out as RLlib and Tune write them: which
folder a path resolves to, where the modules are (one learner group or one per pool), and the
training budget up to a checkpoint."""

import json
import pickle

import pytest

from pettingllms_rllib import checkpoints
from pettingllms_rllib.checkpoints import (ALGORITHM_STATE_FILE, CTOR_ARGS_FILE, LEARNER_DIR,
                                           LEARNER_GROUP_DIR, METADATA_FILE, POOLS_DIR,
                                           RL_MODULE_DIR)


def fake_checkpoint(folder, config=None, iteration=None):
    """An algorithm checkpoint as far as this module reads it: the stored config, and the
    algorithm state when ``iteration`` is given."""
    folder.mkdir(parents=True)
    stored = {"ctor_args_and_kwargs": ((config or {"env": "plan_path_v1"},), {})}
    (folder / CTOR_ARGS_FILE).write_bytes(pickle.dumps(stored))
    (folder / METADATA_FILE).write_text("{}")
    if iteration is not None:
        (folder / ALGORITHM_STATE_FILE).write_bytes(pickle.dumps(
            {"training_iteration": iteration, "other": "state"}))
    return folder


def test_a_checkpoint_resolves_to_itself_a_trial_or_one_trial_experiment_to_its_newest(tmp_path):
    trial = tmp_path / "exp" / "ATGRPO_trial_0"
    for name in ("checkpoint_000003", "checkpoint_000010", "checkpoint_000009"):
        fake_checkpoint(trial / name)
    assert checkpoints.resolve(trial) == trial / "checkpoint_000010"
    assert checkpoints.resolve(tmp_path / "exp") == trial / "checkpoint_000010"
    assert checkpoints.resolve(trial / "checkpoint_000003") == trial / "checkpoint_000003"
    assert [p.name for p in checkpoints.trial_checkpoints(trial)] == [
        "checkpoint_000003", "checkpoint_000009", "checkpoint_000010"]
    assert checkpoints.is_algorithm_checkpoint(trial / "checkpoint_000003")
    assert not checkpoints.is_algorithm_checkpoint(trial)
    assert not checkpoints.is_algorithm_checkpoint(tmp_path / "exp")
    component = trial / "checkpoint_000003" / LEARNER_GROUP_DIR  # RLlib writes no metadata
    component.mkdir()
    (component / CTOR_ARGS_FILE).write_bytes(b"")
    assert not checkpoints.is_algorithm_checkpoint(component)


def test_an_experiment_with_several_trials_or_no_checkpoint_is_refused_saying_what_to_pass(
        tmp_path):
    fake_checkpoint(tmp_path / "exp" / "ATGRPO_trial_0" / "checkpoint_000001")
    (tmp_path / "exp" / "ATGRPO_trial_1" / "checkpoint_000001").mkdir(parents=True)
    with pytest.raises(FileNotFoundError,
                       match="holds 2 trials; pass one of them: ATGRPO_trial_0, ATGRPO_trial_1"):
        checkpoints.resolve(tmp_path / "exp")
    (tmp_path / "empty").mkdir()
    for nothing in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(FileNotFoundError, match="no checkpoint under .*: pass a "
                                                    r"checkpoint_\* folder, a trial folder"):
            checkpoints.resolve(nothing)
    assert checkpoints.trial_checkpoints(tmp_path / "empty") == []


def test_the_stored_config_is_read_without_ray_and_a_non_checkpoint_is_named(tmp_path):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint_000001", {"env": "toy", "lr": 1e-5})
    assert checkpoints.read_config(checkpoint) == {"env": "toy", "lr": 1e-5}
    with pytest.raises(FileNotFoundError, match=f"not an AT-GRPO algorithm checkpoint "
                                                f"\\({CTOR_ARGS_FILE} is missing\\)"):
        checkpoints.read_config(tmp_path)


def test_the_modules_are_in_the_learner_group_or_one_folder_per_pool(tmp_path):
    single = tmp_path / "single"
    (single / LEARNER_GROUP_DIR / LEARNER_DIR / RL_MODULE_DIR).mkdir(parents=True)
    assert checkpoints.module_dirs(single) == [
        single / "learner_group" / "learner" / "rl_module"]

    pooled = tmp_path / "pooled"
    for pool in ("tool", "planner"):
        (pooled / LEARNER_GROUP_DIR / POOLS_DIR / pool / LEARNER_DIR / RL_MODULE_DIR).mkdir(
            parents=True)
    (pooled / LEARNER_GROUP_DIR / POOLS_DIR / "no_learner").mkdir()  # not a pool's checkpoint
    assert checkpoints.module_dirs(pooled) == [
        pooled / "learner_group" / "pools" / pool / "learner" / "rl_module"
        for pool in ("planner", "tool")]

    with pytest.raises(FileNotFoundError, match="holds no trained modules .*learner_group/"
                                                "learner/rl_module nor learner_group/pools/"):
        checkpoints.module_dirs(tmp_path / "empty")


def test_the_budget_sums_the_tokens_of_the_trials_rows_up_to_the_checkpoints_iteration(
        tmp_path):
    trial = tmp_path / "trial"
    checkpoint = fake_checkpoint(trial / "checkpoint_000001", iteration=2)
    rows = [{"training_iteration": 1, "env_runners": {"num_generated_tokens": 100}},
            {"training_iteration": 2, "env_runners": {"num_generated_tokens": 50}},
            {"training_iteration": 2, "env_runners": {}},  # no count: none generated
            {"training_iteration": 3, "env_runners": {"num_generated_tokens": 1000}}]
    (trial / "result.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert checkpoints.checkpoint_iteration(checkpoint) == 2
    assert checkpoints.training_budget(checkpoint) == {"iterations": 2,
                                                      "generated_tokens": 150}


def test_no_budget_outside_a_trial_folder_or_without_the_algorithm_state(tmp_path):
    outside = fake_checkpoint(tmp_path / "copied", iteration=2)
    assert checkpoints.training_budget(outside) is None  # no result.json beside it
    trial = tmp_path / "trial"
    stateless = fake_checkpoint(trial / "checkpoint_000001")
    (trial / "result.json").write_text(json.dumps({"training_iteration": 1}) + "\n")
    assert checkpoints.checkpoint_iteration(stateless) is None
    assert checkpoints.training_budget(stateless) is None


def test_the_names_are_the_ones_rllib_and_tune_write():
    pytest.importorskip("ray.rllib")
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE
    from ray.rllib.utils.checkpoints import Checkpointable
    from ray.train._internal.storage import StorageContext

    assert checkpoints.METADATA_FILE == Algorithm.METADATA_FILE_NAME
    assert checkpoints.ALGORITHM_STATE_FILE == f"{Algorithm.STATE_FILE_NAME}.pkl"
    assert checkpoints.CTOR_ARGS_FILE == Checkpointable.CLASS_AND_CTOR_ARGS_FILE_NAME
    assert (checkpoints.LEARNER_GROUP_DIR, checkpoints.LEARNER_DIR, checkpoints.RL_MODULE_DIR) \
        == (COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER, COMPONENT_RL_MODULE)
    assert StorageContext._make_checkpoint_dir_name(3).startswith(checkpoints.CHECKPOINT_PREFIX)
