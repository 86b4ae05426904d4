"""Every shell snippet in README.md and docs/*.md is run or checked by a test.

* ``make`` lines: the target exists (``make -n`` plans it without running it);
* ``pettingllms-rllib`` lines: every one parses with the CLI's own parser and its config files
  load and validate; in the integration tier the README's walkthrough runs top to bottom
  (train, resume, plot, eval of the run and of the bundled base model, report, envs), with
  only sizes turned down (the tiny model for training, 2 evaluation tasks);
* ``python`` lines: run (the sandbox report), or, for a pytest call, its test file exists;
* ``curl`` lines (the README's serving examples): run against a live server in
  ``tests/integration/test_serving.py``.

A snippet with any other program fails :func:`test_every_snippet_is_a_command_these_tests_know`,
so a new kind of snippet cannot go untested. docs/custom_env.md's snippets run in
``test_custom_env_guide.py``.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms_rllib.cli import build_parser
from pettingllms_rllib.experiment import load_experiment

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TESTED_ELSEWHERE = {"custom_env.md"}
KNOWN_PROGRAMS = {"make", "pettingllms-rllib", "python", "curl"}
#: Placeholders in the README's command list, and what a test puts in their place.
PLACEHOLDERS = {" [more run dirs]": "", "CONFIG.yaml": "tune_configs/math_cpu.yaml"}


def _commands(document: Path) -> list[list[str]]:
    """The commands of a document's bash blocks: continuations joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", document.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for placeholder, value in PLACEHOLDERS.items():
                line = line.replace(placeholder, value)
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def _snippets() -> list[tuple[str, list[str]]]:
    return [(document.name, words) for document in DOCUMENTS
            if document.name not in TESTED_ELSEWHERE for words in _commands(document)]


def _cli_lines(document: str = "README.md") -> list[list[str]]:
    return [words[1:] for name, words in _snippets()
            if name == document and words[0] == "pettingllms-rllib"]


def test_every_snippet_is_a_command_these_tests_know():
    snippets = _snippets()
    assert len(snippets) >= 12
    assert {words[0] for _, words in snippets} <= KNOWN_PROGRAMS, snippets


def test_the_make_targets_exist():
    targets = [words[1] for _, words in _snippets() if words[0] == "make"]
    assert targets == ["train", "test"]
    for target in targets:
        plan = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True)
        assert plan.returncode == 0, plan.stderr


def test_every_cli_line_parses_and_its_configs_validate():
    parser = build_parser()
    lines = _cli_lines()
    assert {line[0] for line in lines} == {"train", "plot", "eval", "report", "envs", "serve"}
    for line in lines:
        args = parser.parse_args(line)
        if args.command == "train":
            load_experiment(REPO / args.config, args.set or [], arm=args.arm)  # raises if bad


def test_the_sandbox_report_snippet_runs_and_the_suite_it_names_exists():
    commands = [words for name, words in _snippets() if name == "sandbox.md"]
    report, suite = commands
    assert report[:2] == ["python", "-c"]
    run = subprocess.run([sys.executable, "-c", report[2]], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] in {"bubblewrap", "unshare", "none"}
    assert suite[:3] == ["python", "-m", "pytest"] and (REPO / suite[3]).is_file()


#: Sizes for the README walkthrough: the tiny model, one iteration, two evaluation tasks.
TINY_TRAINING = [
    "--set", "llm.model=tiny-random",
    "--set", "llm.tiny_model_config={hidden_size: 32, intermediate_size: 64, "
             "num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1}",
    "--set", "llm.max_new_tokens=4", "--set", "llm.lora={r: 4}",
    "--set", "stop={training_iteration: 1}", "--set", "training.num_branches=2",
    "--set", "training.num_tasks_per_iteration=1",
    "--set", "evaluation.evaluation_duration=2", "--num-cpus", "2"]


def _sized(line: list[str]) -> list[str]:
    if line[0] == "train":
        return line + TINY_TRAINING
    if line[0] == "eval":
        line = [("2" if previous == "--num-tasks" else word)
                for previous, word in zip([None, *line], line)]
        return line + (["--num-tasks", "2"] if "--num-tasks" not in line else []) + (
            ["--max-new-tokens", "8"] if "--base-model" in line else [])
    return line


@pytest.mark.integration
def test_the_readme_walkthrough_runs_top_to_bottom(tmp_path):
    (tmp_path / "tune_configs").symlink_to(REPO / "tune_configs")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    ran = []
    for line in _cli_lines():
        if "--address" in line:  # needs a running Ray cluster; parsed above
            continue
        if line[0] == "serve":  # runs until stopped: tests/integration/test_serving.py
            continue
        run = subprocess.run([sys.executable, "-m", "pettingllms_rllib.cli", *_sized(line)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, (line, run.stderr[-3000:])
        ran.append(line[0])
    assert ran == ["train", "train", "plot", "eval", "eval", "report", "envs"]
    assert (tmp_path / "runs" / "math_cpu" / "learning_curve.png").stat().st_size > 0
    for name in ("a", "base"):
        record = json.loads((tmp_path / "evals" / name / "eval.json").read_text())
        assert record["summary"]["num_episodes"] == 2
    assert json.loads((tmp_path / "evals" / "base" / "eval.json").read_text())[
        "model"] == "smollm2-135m-instruct"
    assert "| " in (tmp_path / "report.md").read_text()
