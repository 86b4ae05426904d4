"""``arms:`` in experiment files: one file holds a setting and the arms compared in it. An arm
is the file, then ``every_arm``, then the arm's own keys; it is named ``<name>_<arm>``; the file
run without ``--arm`` is the setting as it is; unknown arms and bad arm keys are refused before
Ray, naming the file's arms or the accepted keys."""

import textwrap

import pytest
from tiny_experiment import GOOD

from pettingllms_rllib.cli import main
from pettingllms_rllib.experiment import (ExperimentError, arm_names, load_document,
                                          load_experiment)

ARMS = """\
every_arm:
  grid: {debugging.seed: [0, 1]}
  stop: {training_iteration: 3}
  algorithm:
    training: {lr: 2.0e-4}
arms:
  per_role: {}
  shared: {mapping: shared}
  slow:
    name: slow_one
    algorithm:
      training: {lr: 1.0e-5}
"""


def write(folder, text, name="setting.yaml"):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_file_without_an_arm_is_the_setting_as_it_is(tmp_path):
    path = write(tmp_path, GOOD + ARMS)
    document = load_document(path)
    assert "arms" not in document and "every_arm" not in document
    experiment = load_experiment(path)
    assert experiment.name == "tiny" and len(experiment.configs) == 1
    assert experiment.stop == {"training_iteration": 1}
    assert arm_names(path) == ["per_role", "shared", "slow"]


def test_an_arm_is_the_file_then_every_arm_then_its_own_keys(tmp_path):
    path = write(tmp_path, GOOD + ARMS)
    shared = load_experiment(path, arm="shared")
    assert shared.name == "tiny_shared"
    assert set(shared.config.policies) == {"shared"}
    assert len(shared.configs) == 2 and shared.stop == {"training_iteration": 3}
    assert shared.config.lr == 2.0e-4  # every_arm over the file
    slow = load_experiment(path, arm="slow")
    assert slow.name == "slow_one"  # an arm's own name wins
    assert slow.config.lr == 1.0e-5  # the arm over every_arm
    per_role = load_document(path, "per_role")
    assert per_role["algorithm"]["environment"] == load_document(path)["algorithm"]["environment"]
    assert per_role["grid"] == {"debugging.seed": [0, 1]}


def test_set_overrides_apply_after_the_arm(tmp_path):
    path = write(tmp_path, GOOD + ARMS)
    experiment = load_experiment(path, ["training.lr=3.0e-4", "grid={}"], arm="slow")
    assert experiment.config.lr == 3.0e-4 and len(experiment.configs) == 1
    with pytest.raises(ExperimentError, match="arms is resolved when the file is read"):
        load_experiment(path, ["arms={x: {}}"])


def test_unknown_arms_are_refused_naming_the_files_arms(tmp_path):
    path = write(tmp_path, GOOD + ARMS)
    with pytest.raises(ExperimentError, match=r"unknown arm 'sharde'; accepted: "
                                              r"\['per_role', 'shared', 'slow'\]"):
        load_experiment(path, arm="sharde")
    plain = write(tmp_path, GOOD, "plain.yaml")
    with pytest.raises(ExperimentError, match="the file has no arms"):
        load_experiment(plain, arm="shared")


@pytest.mark.parametrize("arms,message", [
    ("arms: [a, b]\n", "'arms' must map arm names to overrides"),
    ("arms: {}\n", "'arms' must map arm names to overrides"),
    ("arms: {a: 3}\n", "arms.a must be a mapping"),
    ("arms: {a: {extends: x.yaml}}\n", r"unknown keys \['extends'\] in arms.a"),
    ("arms: {a: {arms: {b: {}}}}\n", r"unknown keys \['arms'\] in arms.a"),
    ("arms: {'a b': {}}\n", "arm name 'a b'"),
    ("every_arm: {stopp: {}}\n", r"unknown keys \['stopp'\] in every_arm"),
])
def test_bad_arms_are_refused_naming_the_key(tmp_path, arms, message):
    with pytest.raises(ExperimentError, match=message):
        load_document(write(tmp_path, GOOD + arms))


def test_a_bad_value_in_an_arm_is_refused_when_the_arm_is_loaded(tmp_path):
    path = write(tmp_path, GOOD + "arms:\n  bad: {algorithm: {training: {lr: -1}}}\n")
    with pytest.raises(ExperimentError, match="arm bad"):
        load_document(path, "bad")


def test_arms_and_every_arm_are_not_inherited_through_extends(tmp_path):
    write(tmp_path, GOOD + ARMS, "base.yaml")
    thin = write(tmp_path, "extends: base.yaml\nmapping: shared\n", "thin.yaml")
    assert arm_names(thin) == []
    document = load_document(thin)
    assert "grid" not in document and document["stop"] == {"training_iteration": 1}
    with pytest.raises(ExperimentError, match="the file has no arms"):
        load_document(thin, "shared")


def test_the_cli_refuses_an_unknown_arm_before_ray(tmp_path, caplog):
    path = write(tmp_path, GOOD + ARMS)
    assert main(["train", str(path), "--arm", "nope", "--output", str(tmp_path)]) == 2
    assert "unknown arm 'nope'" in caplog.text
    assert main(["eval", "--config-arm", "shared", "--base-model", "tiny-random",
                 "--env", "plan_path_v1", "--out", str(tmp_path / "e")]) == 2
    assert "--config-arm picks an arm of --config" in caplog.text
