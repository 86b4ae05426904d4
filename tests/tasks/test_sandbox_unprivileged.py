"""The hostile sandbox suites again as an unprivileged user, when the tests run as root.

Root and everyone else take different paths through bubblewrap (root drops to a uid of its own;
anyone else runs it in a user namespace), and CI and ``make train`` here run as root, so a root
run alone would never exercise the path most users take. ``tests/sandbox_unprivileged.sh``
makes the user and reruns the hostile, pair, launcher and answer suites as it. Being one test of
the suite (not a step after it) lets pytest-xdist run it beside the other tests instead of after
them all.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "sandbox_unprivileged.sh"

pytestmark = pytest.mark.slow


@pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: the sandbox suites of "
                    "this run test the unprivileged path themselves")
@pytest.mark.skipif(shutil.which("runuser") is None or shutil.which("useradd") is None,
                    reason="runuser and useradd are needed to run the suites as another user")
def test_the_hostile_sandbox_suites_pass_as_an_unprivileged_user():
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    run = subprocess.run([str(SCRIPT)], env={**env, "PY": sys.executable},
                         capture_output=True, text=True, timeout=1200)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, (summary, run.stdout[-6000:], run.stderr[-3000:])
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
