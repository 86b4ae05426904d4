"""No shipped CPU config's prompt example solves the instance it is shown with.

A policy that copies its prompt's "answer like: ..." example must not be rewarded with
success: on the first 200 training seeds of every ``tune_configs/**/*_cpu.yaml`` task, the
whole team answers with its prompts' examples every turn (``prompt_examples()``), and no
episode may end solved. The main job's trained 135M model had learned exactly that copy.
"""

from pathlib import Path

import pytest

from pettingllms_rllib.experiment import import_env_modules, load_document

from pettingllms_rllib.envs import make_text_env


CONFIGS = sorted((Path(__file__).parents[2] / "tune_configs").rglob("*_cpu.yaml"))
SEEDS = range(200)


def task_settings():
    settings = {}
    for path in CONFIGS:
        config = load_document(path)
        import_env_modules(config.get("imports", []), source=path.name)
        environment = config["algorithm"]["environment"]
        key = (environment["env"], repr(sorted(environment.get("env_config", {}).items())))
        settings.setdefault(key, (environment["env"], environment.get("env_config", {}),
                                  path.name))
    return sorted(settings.values(), key=lambda s: s[2])


def play_examples(env, seed: int) -> bool:
    """One episode in which every acting agent answers with its prompt's example."""
    env.reset(seed=seed)
    solved = False
    while env.agents:
        examples = env.prompt_examples()
        _, _, _, _, infos = env.step({agent: examples.get(agent, "")
                                      for agent in env.acting_agents()})
        solved = solved or any(info.get("success") for info in infos.values())
    return solved


@pytest.mark.parametrize("env_id,env_config,source", task_settings(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_copying_the_prompt_example_never_solves_a_training_instance(env_id, env_config,
                                                                     source):
    env = make_text_env(env_id, env_config)
    solved = [seed for seed in SEEDS if play_examples(env, seed)]
    assert not solved, f"{source}: the prompt examples solve seeds {solved[:10]}"


def test_the_examples_are_in_the_prompts_they_stand_for():
    env = make_text_env("plan_path_v1", {"grid_size": 3, "wall_prob": 0.0, "max_turns": 2,
                                         "variant": "compact"})
    for seed in range(20):
        observations, _ = env.reset(seed=seed)
        examples = env.prompt_examples()
        assert examples["planner"] in observations["planner"]
        printed = examples["tool"].split("\n")[1]  # the print(...) line of the code block
        assert printed in observations["tool"]
