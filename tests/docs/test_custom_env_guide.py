"""docs/custom_env.md is executable: its Python blocks run in order in one namespace.

The first blocks (write, test, register) need no Ray; the last one trains for one iteration
with a tiny random model inside Ray, so it runs in the integration tier.
"""

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).parents[2] / "docs" / "custom_env.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)


def run_blocks(blocks: list[str]) -> dict:
    namespace = {"__name__": "custom_env_guide"}
    for index, block in enumerate(blocks):
        exec(compile(block, f"{GUIDE}:block{index}", "exec"), namespace)
    return namespace


def test_the_guide_has_wrap_write_test_register_and_train_blocks():
    blocks = python_blocks()
    assert len(blocks) == 5
    assert "wrap_parallel_env(EchoGame)" in blocks[0] and "TextParallelEnv" not in blocks[0]
    assert "class WordRelayEnv(TextParallelEnv)" in blocks[1]
    assert "parallel_api_test" in blocks[2] and "check_clone_contract" in blocks[2]
    assert "register_text_env" in blocks[3] and "build_algo" in blocks[4]


def test_the_wrapped_plain_env_passes_the_checks_and_registers_as_the_guide_says():
    from pettingllms_rllib.envs import ParallelTextEnv, make_text_env

    run_blocks(python_blocks()[:1])  # check_text_env raises if the wrapped env fails a rule
    env = make_text_env("echo_game_v0")
    env.reset(seed=0)
    assert isinstance(env, ParallelTextEnv) and env.acting_agents() == ("left", "right")


def test_the_example_env_is_written_tested_and_registered_as_the_guide_says():
    namespace = run_blocks(python_blocks()[:4])
    env = namespace["make_text_env"]("word_relay_v0")
    assert isinstance(env, namespace["WordRelayEnv"])


@pytest.mark.integration
def test_the_example_env_trains_one_iteration_as_the_guide_says():
    pytest.importorskip("ray")
    namespace = run_blocks(python_blocks())
    assert namespace["result"]["training_iteration"] == 1
