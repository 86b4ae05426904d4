"""The import layering of docs/design.md, checked in fresh interpreters: importing a layer
loads nothing a layer below it must not know about.

* core: neither ray nor torch (``core/loss.py``: torch only, no ray, no transformers);
* the text-env protocol and the task suite: no torch, transformers or RLlib;
* engines and models: no RLlib (``models/rl_modules.py`` is the RLlib glue of models);
* nothing outside ``engines/vllm_engine.py`` (when generating) imports vLLM;
* serving: checking requests needs no model; the team service needs no Ray (only ``app.py``
  is Serve glue);
* the checkpoint layout (``checkpoints.py``): neither ray nor torch, so evaluation, serving and
  the CLI read a checkpoint's config, modules' folders and budget without either.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WATCHED = ("ray", "ray.rllib", "torch", "transformers", "peft", "vllm")


def _modules(folder: str, package: str, skip: set[str] = frozenset()) -> list[str]:
    return sorted(f"{package}.{path.stem}" for path in (REPO / folder).glob("*.py")
                  if path.stem != "__init__" and path.stem not in skip)


#: (modules, what importing any one of them must not load)
RULES = [
    (_modules("pettingllms_rllib/core", "pettingllms_rllib.core", {"loss"}),
     {"ray", "torch", "transformers"}),
    (["pettingllms_rllib.core.loss"], {"ray", "transformers"}),
    (_modules("pettingllms_rllib/envs", "pettingllms_rllib.envs"),
     {"torch", "transformers", "ray.rllib"}),
    (_modules("pettingllms_envs", "pettingllms_envs"), {"torch", "transformers", "ray.rllib"}),
    (_modules("pettingllms_rllib/engines", "pettingllms_rllib.engines"), {"ray", "vllm"}),
    (_modules("pettingllms_rllib/models", "pettingllms_rllib.models", {"rl_modules"}),
     {"ray", "vllm"}),
    (["pettingllms_rllib.serving", "pettingllms_rllib.serving.requests",
      "pettingllms_rllib.serving.client"],
     {"ray", "torch", "transformers"}),
    (["pettingllms_rllib.serving.team"], {"ray", "vllm"}),
    (["pettingllms_rllib.checkpoints"], {"ray", "torch", "transformers"}),
]
CASES = [(module, forbidden) for modules, forbidden in RULES for module in modules]


def _loaded_after_import(module: str) -> set[str]:
    probe = (f"import importlib, json, sys; importlib.import_module({module!r}); "
             f"print(json.dumps([m for m in {list(WATCHED)!r} if m in sys.modules]))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    return set(json.loads(run.stdout.strip().splitlines()[-1]))


def test_every_module_of_every_layer_is_covered():
    assert len(CASES) >= 30
    assert {"pettingllms_rllib.core.tree_sampler", "pettingllms_envs.code",
            "pettingllms_rllib.engines.vllm_engine"} <= {module for module, _ in CASES}


@pytest.mark.parametrize("module,forbidden", CASES, ids=[module for module, _ in CASES])
def test_importing_a_layer_loads_nothing_it_must_not_know(module, forbidden):
    leaked = _loaded_after_import(module) & forbidden
    assert not leaked, f"importing {module} loaded {sorted(leaked)}"
