"""``extends:`` in experiment files: a thin file's keys deep-merged over its base's (mappings
key by key, anything else replaced), chains resolved base first, cycles and missing bases
refused naming the file and the key, ``--set`` applied last."""

import textwrap

import pytest
from tiny_experiment import GOOD

from pettingllms_rllib.experiment import (ExperimentError, load_document, load_experiment,
                                          merge_documents)


def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


BASE = GOOD.replace("algorithm:", "description: the base's own words\n"
                    "grid: {debugging.seed: [0, 1]}\nalgorithm:", 1).replace(
    "num_tasks_per_iteration: 1}", "num_tasks_per_iteration: 1, lr: 1.0e-4}\n"
    "  debugging: {seed: 0}")


def test_merge_documents_merges_mappings_and_replaces_everything_else():
    base = {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "l": [1, 2], "s": "base", "m": {"k": 1}}
    over = {"a": {"y": {"q": 3}, "z": 4}, "l": [9], "s": None, "m": "shared", "new": 1}
    merged = merge_documents(base, over)
    assert merged == {"a": {"x": 1, "y": {"p": 1, "q": 3}, "z": 4}, "l": [9], "s": None,
                      "m": "shared", "new": 1}
    assert base["a"]["y"] == {"p": 1, "q": 2}  # neither input is changed


def test_a_thin_file_is_its_base_with_its_own_keys(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    thin = write(tmp_path, "arms/shared.yaml", """\
        extends: ../base.yaml
        mapping: shared
        algorithm:
          environment: {env_config: {grid_size: 4}}
          training: {lr: 2.0e-4}
        """)
    document = load_document(thin)
    assert "extends" not in document
    assert document["mapping"] == "shared"
    assert document["algorithm"]["environment"] == {
        "env": "plan_path_v1", "env_config": {"grid_size": 4, "max_turns": 1}}
    assert document["algorithm"]["training"] == {"num_branches": 2, "num_tasks_per_iteration": 1,
                                                 "lr": 2.0e-4}
    assert document["grid"] == {"debugging.seed": [0, 1]}  # the base's grid is kept
    assert "name" not in document and "description" not in document  # never inherited
    experiment = load_experiment(thin)
    assert experiment.name == "shared"  # the thin file's stem, not the base's name
    assert len(experiment.configs) == 2
    assert experiment.config.lr == 2.0e-4 and experiment.config.env_config["grid_size"] == 4
    assert set(experiment.config.policies) == {"shared"}
    assert load_experiment(tmp_path / "base.yaml").name == "tiny"  # the base still runs


def test_a_thin_files_grid_adds_to_the_bases_grid(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    thin = write(tmp_path, "lr.yaml", "extends: base.yaml\ngrid: {training.lr: [0.1, 0.2]}\n")
    assert len(load_experiment(thin).variants) == 4


def test_a_chain_resolves_base_first(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    write(tmp_path, "middle.yaml", """\
        extends: base.yaml
        name: middle
        stop: {env_runners/num_generated_tokens_lifetime: 100}
        algorithm: {training: {lr: 3.0e-4, num_branches: 3}}
        """)
    top = write(tmp_path, "top.yaml", """\
        extends: middle.yaml
        algorithm: {training: {num_branches: 4}}
        """)
    document = load_document(top)
    assert document["stop"] == {"training_iteration": 1,
                                "env_runners/num_generated_tokens_lifetime": 100}
    assert document["algorithm"]["training"]["lr"] == 3.0e-4
    assert document["algorithm"]["training"]["num_branches"] == 4
    assert load_experiment(top).name == "top"


def test_set_overrides_apply_after_the_chain(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    thin = write(tmp_path, "thin.yaml", "extends: base.yaml\nalgorithm: {training: {lr: 2.0e-4}}\n")
    experiment = load_experiment(thin, ["training.lr=5.0e-4", "mapping=shared", "grid={}"])
    assert experiment.config.lr == 5.0e-4 and set(experiment.config.policies) == {"shared"}
    assert len(experiment.configs) == 1
    with pytest.raises(ExperimentError, match="extends is resolved when the file is read"):
        load_experiment(thin, ["extends=other.yaml"])


def test_a_cycle_is_refused_naming_the_file_and_the_key(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\nmapping: shared\n")
    with pytest.raises(ExperimentError, match=r"b\.yaml: extends: 'a\.yaml' makes a cycle"):
        load_experiment(tmp_path / "a.yaml")
    write(tmp_path, "self.yaml", "extends: self.yaml\n")
    with pytest.raises(ExperimentError, match=r"self\.yaml: extends: 'self\.yaml' makes a cycle"):
        load_document(tmp_path / "self.yaml")


def test_a_missing_base_is_refused_naming_the_file_and_the_key(tmp_path):
    thin = write(tmp_path, "thin.yaml", "extends: nope.yaml\n")
    with pytest.raises(ExperimentError,
                       match=r"thin\.yaml: extends: base file 'nope\.yaml' does not exist"):
        load_experiment(thin)
    write(tmp_path, "middle.yaml", "extends: gone.yaml\n")
    top = write(tmp_path, "top.yaml", "extends: middle.yaml\n")
    with pytest.raises(ExperimentError, match=r"middle\.yaml: extends: base file 'gone\.yaml'"):
        load_experiment(top)


@pytest.mark.parametrize("value", ["", "[a.yaml]", "3", "null"])
def test_extends_must_be_a_path(tmp_path, value):
    thin = write(tmp_path, "thin.yaml", f"extends: {value}\n")
    with pytest.raises(ExperimentError, match="thin.yaml: extends: expected the relative path"):
        load_experiment(thin)


def test_a_bad_key_in_a_base_names_the_base(tmp_path):
    write(tmp_path, "base.yaml", BASE.replace("num_branches: 2", "num_brnches: 2"))
    thin = write(tmp_path, "thin.yaml", "extends: base.yaml\n")
    with pytest.raises(ExperimentError, match=r"base\.yaml: unknown keys \['num_brnches'\]"):
        load_experiment(thin)
