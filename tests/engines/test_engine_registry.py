"""Issue 44: engine kinds are branched on only inside ``engines/``. The rest of the library asks
an engine's kind (``engines/__init__.py``: ``ENGINE_KINDS``) what differs between engines
instead of comparing engine names."""

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pettingllms_rllib.engines import (ENGINE_KINDS, ENGINES_SHARING_THE_LEARNERS_NUMERICS,
                                       MODULE_ENGINES, EngineKind, engine_kind,
                                       find_engine_kind, start_module_engine)

PACKAGE = Path(__file__).resolve().parents[2] / "pettingllms_rllib"
ENGINES_FOLDER = PACKAGE / "engines"
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _engine_names_in(node: ast.AST) -> list[str]:
    """The engine names ``node`` spells out: a string literal, or one inside a literal
    tuple, list or set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [item.value for item in items
            if isinstance(item, ast.Constant) and isinstance(item.value, str)
            and item.value in ENGINE_KINDS]


def engine_name_branches(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, engine name) of every comparison (==, !=, in, not in) of anything with an
    engine name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Compare) and any(isinstance(op, COMPARISONS)
                                                 for op in node.ops):
            for operand in (node.left, *node.comparators):
                found.extend((node.lineno, name) for name in _engine_names_in(operand))
    return found


def test_the_scan_finds_each_kind_of_comparison():
    source = ('if engine == "vllm": pass\n'
              'x = "hf" != config.engine\n'
              'y = name in ("hf", "other")\n'
              'z = name not in ["vllm"]\n'
              'w = engine == "other"\n'
              'v = {"hf": 1}["hf"]\n')
    assert engine_name_branches(source) == [(1, "vllm"), (2, "hf"), (3, "hf"), (4, "vllm")]


def test_no_engine_kind_branch_outside_engines():
    files = [path for path in sorted(PACKAGE.rglob("*.py"))
             if ENGINES_FOLDER not in path.parents]
    assert len(files) > 20 and PACKAGE / "algorithms" / "config.py" in files
    branches = [f"{path.relative_to(PACKAGE.parent)}:{line}: compares with engine name {name!r}"
                for path in files
                for line, name in engine_name_branches(path.read_text(encoding="utf-8"),
                                                       str(path))]
    assert not branches, ("ask the engine's kind (pettingllms_rllib.engines.engine_kind) "
                          "instead:\n" + "\n".join(branches))


def test_an_unknown_engine_name_raises_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown engine 'sglang'; known: \['hf', 'vllm'\]"):
        engine_kind("sglang")
    with pytest.raises(ValueError, match=r"unknown engine 'sglang'; known: \['hf', 'vllm'\]"):
        start_module_engine(SimpleNamespace(engine="sglang"), None, None, lambda: {})
    assert find_engine_kind("sglang") is None and find_engine_kind(["hf"]) is None


def test_the_registry_describes_each_engine():
    assert list(ENGINE_KINDS) == ["hf", "vllm"]
    for name, kind in ENGINE_KINDS.items():
        assert isinstance(kind, EngineKind) and kind.name == name and engine_kind(name) is kind
        assert MODULE_ENGINES[name] == f"{kind.module}:{kind.start_function}"
        assert kind.module.startswith("pettingllms_rllib.engines.")
        with pytest.raises(dataclasses.FrozenInstanceError):
            kind.name = "other"
    assert ENGINES_SHARING_THE_LEARNERS_NUMERICS == {"hf"}
    hf, vllm = ENGINE_KINDS["hf"], ENGINE_KINDS["vllm"]
    assert hf.package is None and vllm.package == "vllm" and "pip install" in vllm.install_hint


class _Config:
    lora = None
    vllm_gpu_memory_utilization = 0.5
    vllm_max_model_len = 512
    vllm_weight_sync_dir = "/tmp/sync"
    vllm_engine_kwargs = None


def test_the_facts_callers_ask_for_read_the_config_by_attribute():
    hf, vllm = ENGINE_KINDS["hf"], ENGINE_KINDS["vllm"]
    config = _Config()
    assert hf.runner_gpu_share(config) == 1.0 and vllm.runner_gpu_share(config) == 0.5
    assert hf.max_model_len(config) is None and vllm.max_model_len(config) == 512
    assert not hf.syncs_full_weights_through_files(config)
    assert vllm.syncs_full_weights_through_files(config)
    config.lora = {"r": 8}
    assert not vllm.syncs_full_weights_through_files(config)
    assert hf.config_problems(config) == [] and vllm.config_problems(config) == []
    config.vllm_gpu_memory_utilization, config.vllm_engine_kwargs = 2, "x"
    assert vllm.config_problems(config) == [
        "vllm_gpu_memory_utilization must be in (0, 1], got 2",
        "vllm_engine_kwargs must be a dict of vllm.LLM keyword arguments"]
    hf.check_installed()  # nothing to install
    hf.require()


def test_describing_vllm_does_not_import_it():
    probe = ("import sys; from pettingllms_rllib.engines import ENGINE_KINDS as K; "
             "k = K['vllm']; k.config_problems(type('C', (), dict(vllm_gpu_memory_utilization=1,"
             " vllm_engine_kwargs=None, vllm_weight_sync_dir=None))()); "
             "print('vllm' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, cwd=PACKAGE.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "False"
