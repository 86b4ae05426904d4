"""No shipped config evaluates on a training instance, and each can fill its evaluation set.

For every task setting of ``tune_configs/**/*.yaml`` that builds offline: the first 64
evaluation seeds produce no instance that training seeds 0-199 produce (what the agents are
shown at reset, ``envs.instances``), and a config with held-out evaluation finds
``evaluation_duration`` distinct evaluation instances. ``plan_path_v0`` is the one exception
kept on purpose (its own test shows the leak); no shipped config uses it.
"""

from pathlib import Path

import pytest

from pettingllms_rllib.experiment import import_env_modules, load_document

from pettingllms_rllib.envs import check_splits_disjoint, distinct_instance_seeds, make_text_env

CONFIGS = sorted((Path(__file__).parents[2] / "tune_configs").rglob("*.yaml"))
#: Settings whose data needs the hub (skipped offline: the loaders are tested on local files).
HUB_DATASETS = {"POLARIS-Project/Polaris-Dataset-53K", "deepmind/code_contests"}


def task_settings():
    settings = {}
    for path in CONFIGS:
        config = load_document(path)
        import_env_modules(config.get("imports", []), source=path.name)
        environment = config["algorithm"]["environment"]
        env_config = environment.get("env_config", {})
        dataset = env_config.get("dataset")
        if isinstance(dataset, dict):  # math_v0's data source: {source, format, ...}
            dataset = dataset.get("source")
        if dataset in HUB_DATASETS:
            continue
        duration = (config["algorithm"].get("evaluation") or {}).get("evaluation_duration", 0)
        key = (environment["env"], repr(sorted(env_config.items())))
        known = settings.get(key)
        settings[key] = (environment["env"], env_config,
                         max(duration, known[2] if known else 0), path.name)
    return sorted(settings.values(), key=lambda s: s[3])


def test_no_shipped_config_uses_the_leaking_plan_path_v0():
    assert not [s[3] for s in task_settings() if s[0] == "plan_path_v0"]


@pytest.mark.parametrize("env_id,env_config,duration,source", task_settings(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_evaluation_instances_are_held_out_and_enough(env_id, env_config, duration, source):
    check_splits_disjoint(lambda: make_text_env(env_id, env_config))
    if duration:
        assert len(distinct_instance_seeds(make_text_env(env_id, env_config), duration)) == duration
