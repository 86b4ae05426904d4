"""Does the sandbox hold where this checkout and its venv live? One verdict per attack class.

    python bench/sandbox_bars.py                     # this checkout, its interpreter
    python bench/sandbox_bars.py --clone-into /tmp   # a fresh clone of HEAD under /tmp, its own
    python bench/sandbox_bars.py --clone-into /root  #   venv made by `make install`, run there

The attack classes are those of the audits behind docs/sandbox.md: each is one or more cases of
the hostile suites (tests/tasks/test_sandbox_*.py), run here under the launcher the sandbox
picks by itself. A class is *contained* when all its cases pass and none was skipped; the
launcher row says whether bubblewrap was in use (it must be, where `bwrap` is installed).
Prints a markdown table; exits 1 if any class is not contained. Results: docs/sandbox.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "tests/tasks/test_sandbox_hostile.py"
ANSWERS = "tests/tasks/test_sandbox_answers.py"
LAUNCHERS = "tests/tasks/test_sandbox_launchers.py"
#: attack class -> the test cases (file, name prefix) that decide it.
CLASSES = {
    "answer keys: reference solutions, datasets, task generators": [
        (ANSWERS, "test_a_program_that_searches_for_its_instances_answer_finds_nothing"),
        (ANSWERS, "test_a_coder_solution_that_looks_its_reference_up_earns_no_more_than_pass"),
        (ANSWERS, "test_answer_packages_are_not_importable_under_either_launcher"),
        (HOSTILE, "test_a_solution_that_searches_its_process_and_files_for_the_test")],
    "host files: /etc/shadow, home dotfiles, the checkout": [
        (HOSTILE, "test_host_files_are_invisible")],
    "other runs: concurrent programs, batch inputs forging records": [
        (HOSTILE, "test_concurrent_runs_cannot_see_each_other"),
        (HOSTILE, "test_a_batch_input_can_neither_read_nor_forge_another_input"),
        (HOSTILE, "test_a_solution_that_forges_harness_results")],
    "host sockets and Ray's session folder, the network": [
        (HOSTILE, "test_host_unix_sockets_and_the_ray_session_folder_are_invisible"),
        (HOSTILE, "test_the_network_is_unreachable_even_on_loopback")],
    "memory beyond the limit: memfd, System V shared memory": [
        (HOSTILE, "test_memfd_beyond_the_memory_limit_fails"),
        (HOSTILE, "test_system_v_shared_memory_is_private_and_dies_with_the_run")],
    "the host disk and the host's processes": [
        (HOSTILE, "test_disk_fill_ends_in_a_limit_not_a_full_disk"),
        (HOSTILE, "test_daemons_do_not_outlive_the_run"),
        (HOSTILE, "test_ptrace_is_refused"),
        (HOSTILE, "test_runs_are_an_unprivileged_uid_without_capabilities")],
    "bubblewrap in use wherever the interpreter and venv live": [
        (LAUNCHERS, "test_this_machines_interpreter_runs_under_bubblewrap"),
        (LAUNCHERS, "test_a_venv_under_tmp_and_a_symlinked_one_run_under_bubblewrap"),
        (LAUNCHERS, "test_an_interpreter_under_tmp_in_a_0700_folder_runs_under_bubblewrap")],
}


def _outcomes(report: Path) -> dict[str, list[str]]:
    """test name (parameters dropped) -> the outcomes of its cases."""
    outcomes: dict[str, list[str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").split("[")[0]
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes.setdefault(name, []).append(kinds[0] if kinds else "passed")
    return outcomes


def _verdicts() -> int:
    from pettingllms_envs.sandbox import sandbox_capabilities

    caps = sandbox_capabilities()
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={report}", HOSTILE, ANSWERS, LAUNCHERS],
                       cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                       stdout=subprocess.DEVNULL, check=False)
        outcomes = _outcomes(report)
    print(f"checkout `{ROOT}`, interpreter `{sys.executable}` "
          f"(base `{getattr(sys, '_base_executable', sys.executable)}`), "
          f"launcher **{caps.launcher_name}**, uid {os.getuid()}\n")
    print("| attack class | cases | verdict |\n|---|---|---|")
    failed = 0
    for attack, cases in CLASSES.items():
        seen = [kind for _, name in cases for test, kinds in outcomes.items()
                if test.startswith(name) for kind in kinds]
        contained = bool(seen) and all(kind == "passed" for kind in seen)
        failed += not contained
        tally = ", ".join(f"{seen.count(k)} {k}" for k in ("passed", "failure", "error",
                                                            "skipped") if seen.count(k))
        print(f"| {attack} | {tally or 'none ran'} | "
              f"{'contained' if contained else '**NOT CONTAINED**'} |")
    return 1 if failed else 0


def _in_clone(parent: Path) -> int:
    """Clone HEAD under ``parent``, install it there (`make install`: its own venv) and run
    this script inside the clone."""
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                         capture_output=True, check=True).stdout.strip()
    clone = parent / f"pettingllms-bars-{sha}"
    if not clone.exists():
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    subprocess.run(["make", "--no-print-directory", "install", "sandbox-tools"], cwd=clone,
                   check=True)
    return subprocess.run([str(clone / ".venv/bin/python"), "bench/sandbox_bars.py"],
                          cwd=clone, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clone-into", type=Path,
                        help="clone HEAD under this folder, install it there and run there")
    args = parser.parse_args()
    return _in_clone(args.clone_into) if args.clone_into else _verdicts()


if __name__ == "__main__":
    sys.exit(main())
