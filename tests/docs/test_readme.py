"""The README's code runs: its Python API example (on the tiny random model, one iteration:
the bundled model would take ~10 minutes here) and its conformance-check snippet."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pettingllms_rllib.algorithms.at_grpo import split_tasks
from pettingllms_rllib.checkpoints import is_algorithm_checkpoint

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.integration
def test_the_python_api_example_trains_saves_and_prints_a_success_rate(tmp_path):
    example = _python_blocks()[0]  # the Python API section comes first
    assert 'model="smollm2-135m-instruct"' in example and "range(3)" in example
    printed = 'print(algo.train()["env_runners"]["success_rate"])'
    assert printed in example
    tiny = example.replace(
        'model="smollm2-135m-instruct",',
        'model="tiny-random", tiny_model_config={"hidden_size": 32, "intermediate_size": 64, '
        '"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1},').replace(
        "range(3)", "range(1)").replace("num_tasks_per_iteration=8", "num_tasks_per_iteration=1"
    ).replace("/tmp/atgrpo_ckpt", str(tmp_path / "ckpt")).replace(
        "ray.init()", "ray.init(num_cpus=2, include_dashboard=False)").replace(
        printed, printed.replace("algo.train()", "(result := algo.train())"))
    # and after it, what the printed rate is a fraction of
    tiny += ('\nprint(result["env_runners"]["num_episodes"], algo.config.num_env_runners,'
             ' algo.config.num_tasks_per_iteration)\n')
    run = subprocess.run([sys.executable, "-c", tiny], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    *_, rate, counts = run.stdout.strip().splitlines()
    episodes, runners, tasks = map(int, counts.split())
    # one iteration of one task per iteration, each env runner playing at least one
    assert tasks == 1 and episodes == sum(split_tasks(tasks, runners)) >= 1
    # the printed success rate is the fraction of those episodes that succeeded
    assert re.fullmatch(r"\d\.\d+", rate), rate
    assert any(float(rate) == pytest.approx(k / episodes) for k in range(episodes + 1)), rate
    assert is_algorithm_checkpoint(tmp_path / "ckpt")


def test_the_conformance_snippet_checks_an_env():
    (snippet,) = [block for block in _python_blocks() if "check_text_env" in block]
    assert "check_text_env(lambda: MyEnv(max_turns=3))" in snippet
    setup = textwrap.dedent("""
        from pettingllms_envs.plan_path import PlanPathEnv as MyEnv
    """)
    exec(compile(setup + snippet, "README.md", "exec"), {})


def _prose_paragraphs(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of every prose paragraph: runs of text lines outside code
    fences that are not headings, table rows or list items (a list item ends one)."""
    paragraphs, current, fenced = [], [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        prose = (not fenced and not line.startswith(("```", "#", "|", "- ", "  ", "* "))
                 and not re.match(r"\d+\. ", line) and line.strip())
        if prose:
            current.append((number, line))
        elif current:
            paragraphs.append((current[0][0], [text for _, text in current]))
            current = []
    if current:
        paragraphs.append((current[0][0], [text for _, text in current]))
    return paragraphs


def test_no_readme_paragraph_is_longer_than_six_lines():
    assert _prose_paragraphs("a\nb\n\n```\nx\ny\n```\n- item\n  more\nc\n") == [
        (1, ["a", "b"]), (10, ["c"])]
    long = {start: len(lines) for start, lines in _prose_paragraphs(README.read_text())
            if len(lines) > 6}
    assert not long, f"README paragraphs over 6 lines (first line: length): {long}"
