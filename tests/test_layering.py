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

And, read statically from the source: the project's modules import each other without cycles
(:data:`KNOWN_IMPORT_CYCLES` would list a tolerated one, with why; it is empty).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

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


#: Libraries a probe server imports before forking when the modules it probes may load them,
#: with the WATCHED modules each loads: every child would import them anyway, and importing
#: them once saves most of the time.
PRELOADABLE = {"numpy": (), "torch": ("torch",), "transformers": ("torch", "transformers"),
               "peft": ("torch", "transformers", "peft")}

#: Run in a fresh interpreter: import the libraries named in argv, print which WATCHED modules
#: that loaded, then for each module name read from stdin fork a child that imports it and
#: prints which WATCHED modules are loaded. Forking from one interpreter costs a fraction of
#: starting one per module, and a module's import leaves no trace in the next child.
PROBE_SERVER = f"""
import importlib, json, os, sys
for library in sys.argv[1:]:
    importlib.import_module(library)
watched = {list(WATCHED)!r}
print(json.dumps([m for m in watched if m in sys.modules]), flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(line.strip())
            answer = [m for m in watched if m in sys.modules]
        except BaseException as exc:
            answer = {{"error": repr(exc)}}
        print(json.dumps(answer), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def _probe(modules: list[str], forbidden: set[str]) -> dict[str, set[str]]:
    """module -> the WATCHED modules loaded once it is imported, in a server that preloaded
    the PRELOADABLE libraries none of ``forbidden`` names (checked: the preloads load nothing
    forbidden)."""
    preload = [lib for lib, loads in PRELOADABLE.items() if not set(loads) & forbidden]
    run = subprocess.run([sys.executable, "-c", PROBE_SERVER, *preload],
                         input="".join(f"{m}\n" for m in modules), capture_output=True,
                         text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    first, *answers = [json.loads(line) for line in run.stdout.splitlines()
                       if line.startswith(("[", "{"))]
    assert not set(first) & forbidden, (preload, first)
    assert len(answers) == len(modules), (run.stdout[-2000:], run.stderr[-2000:])
    errors = {m: a["error"] for m, a in zip(modules, answers) if isinstance(a, dict)}
    assert not errors, errors
    return {module: set(answer) for module, answer in zip(modules, answers)}


@pytest.fixture(scope="module")
def loaded_after_import() -> dict[str, set[str]]:
    """module -> the WATCHED modules importing it loads, for every module in CASES (one probe
    server per forbidden set)."""
    loaded: dict[str, set[str]] = {}
    for forbidden in {frozenset(f) for _, f in CASES}:
        loaded.update(_probe([m for m, f in CASES if f == forbidden], set(forbidden)))
    return loaded


def test_every_module_of_every_layer_is_covered():
    assert len(CASES) >= 30
    assert {"pettingllms_rllib.core.tree_sampler", "pettingllms_envs.code",
            "pettingllms_rllib.engines.vllm_engine"} <= {module for module, _ in CASES}


@pytest.mark.parametrize("module,forbidden", CASES, ids=[module for module, _ in CASES])
def test_importing_a_layer_loads_nothing_it_must_not_know(module, forbidden,
                                                          loaded_after_import):
    leaked = loaded_after_import[module] & forbidden
    assert not leaked, f"importing {module} loaded {sorted(leaked)}"


# ------------------------------------------------------------------------------ import cycles
PACKAGES = ("pettingllms_rllib", "pettingllms_envs")

#: The import cycles tolerated for now (each the exact set of modules of one strongly connected
#: component of the import graph), with why. A new cycle, a module joining or leaving one of
#: these, or one of these disappearing fails the test: keep the list true.
KNOWN_IMPORT_CYCLES: dict[frozenset[str], str] = {}


def _project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under :data:`PACKAGES` (a package's
    ``__init__.py`` is the package itself)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file (function-local imports
    included). ``import a.b.c`` is an edge to the deepest project module of ``a.b.c``;
    ``from pkg import name`` one to ``pkg.name`` when that is a module, else to ``pkg``."""

    def resolve(name: str) -> str | None:
        while name not in modules:
            if "." not in name:
                return None
            name = name.rsplit(".", 1)[0]
        return name

    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules
                           else resolve(base) for alias in node.names]
            else:
                continue
            graph[module].update(t for t in targets if t is not None and t != module)
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components of ``graph``, iteratively (no recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(sorted(graph[node]))))

    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        visit(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    visit(successor)
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:  # every successor done: close ``node``
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(frozenset(component))
    return components


def _import_cycles() -> set[frozenset[str]]:
    return {c for c in _strongly_connected(_import_graph(_project_modules())) if len(c) > 1}


def test_strongly_connected_components_on_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"},
             "g": set()}
    assert sorted(map(sorted, _strongly_connected(graph))) == [
        ["a", "b", "c"], ["d", "e"], ["f"], ["g"]]
    chain = {str(i): {str(i + 1)} for i in range(5000)} | {"5000": {"0"}}  # no recursion limit
    assert _strongly_connected(chain) == [frozenset(chain)]


def test_import_graph_sees_function_local_imports_and_the_code_record_layer():
    graph = _import_graph(_project_modules())
    # function-local: config.py imports env_runner inside ATGRPOConfig.__init__ only
    assert "pettingllms_rllib.algorithms.env_runner" in graph["pettingllms_rllib.algorithms.config"]
    # the algorithm imports its config; the config does not import the algorithm back
    assert "pettingllms_rllib.algorithms.config" in graph["pettingllms_rllib.algorithms.at_grpo"]
    assert "pettingllms_rllib.algorithms.at_grpo" not in graph["pettingllms_rllib.algorithms.config"]
    # the problem record sits below both the loaders and the generator
    assert graph["pettingllms_envs.code_problem"].isdisjoint(
        {"pettingllms_envs.code_data", "pettingllms_envs.code_generated"})
    assert "pettingllms_envs.code_generated" in graph["pettingllms_envs.code_data"]
    assert "pettingllms_envs.code_data" not in graph["pettingllms_envs.code_generated"]


def test_the_only_import_cycles_are_the_known_ones():
    found = _import_cycles()
    problems = []
    for cycle in sorted(found - KNOWN_IMPORT_CYCLES.keys(), key=sorted):
        overlapping = [known for known in KNOWN_IMPORT_CYCLES if known & cycle]
        if overlapping:
            for known in overlapping:
                problems.append(
                    f"the known import cycle {sorted(known)} changed: now {sorted(cycle)} "
                    f"(joined: {sorted(cycle - known)}, left: {sorted(known - cycle)}); break "
                    "the new imports, or update KNOWN_IMPORT_CYCLES if it shrank")
        else:
            problems.append(f"new import cycle: {sorted(cycle)}")
    for known in sorted(KNOWN_IMPORT_CYCLES.keys() - found, key=sorted):
        if not any(known & cycle for cycle in found):
            problems.append(f"the known import cycle {sorted(known)} is gone: remove it from "
                            "KNOWN_IMPORT_CYCLES in tests/test_layering.py")
    assert not problems, "\n".join(problems)
