"""Bubblewrap wherever the interpreter and the venv live, and no silent fallback (issue 42,
item 2).

* An interpreter whose prefix lies under /tmp inside a 0700 folder, a venv under /tmp and a
  symlinked venv all run under bubblewrap (the prefix is mounted at a neutral path, so the
  sandbox's private /tmp does not hide it and the run's own uid can reach it), with only the
  standard library on ``sys.path``.
* Where bubblewrap is installed but fails its probe, the run stops with the probe's reason
  and the fix, unless the weaker launcher is chosen explicitly (a task's ``sandbox:
  {launcher: unshare}``, ``SandboxLimits.launcher`` or ``$PETTINGLLMS_SANDBOX_LAUNCHER``).
* An unknown launcher name is refused, listing the accepted ones; the choice and its
  guarantees are logged once.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from pettingllms_envs.common import run_tool_program
from pettingllms_envs.math import MathEnv
from pettingllms_envs import sandbox
from pettingllms_envs.sandbox import (LAUNCHER_ENV_VAR, LAUNCHERS, SandboxLimits,
                                      SandboxUnavailableError, bwrap, probe, run_python,
                                      sandbox_capabilities, unshare)
from pettingllms_envs.sandbox.cleanup import remove_tree

FAST = SandboxLimits(wall_time_s=20, cpu_time_s=20)
CAPS = sandbox_capabilities()
needs_bwrap = pytest.mark.skipif(CAPS.launcher_name != "bubblewrap",
                                 reason=f"needs the bubblewrap launcher ({CAPS.notes})")
NEEDLE = "planted-" + "answer-key"  # split: this file's own text must not match

#: What the program reports: its interpreter, its sys.path (non-empty folders only), whether
#: the planted module imports and whether any readable file holds the needle.
REPORT = """
import json, os, sys
hits = []
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev", "/usr"):
        dirs[:] = []
        continue
    for name in files:
        try:
            with open(os.path.join(root, name), "rb") as handle:
                if b"planted-" + b"answer-key" in handle.read(1 << 20):
                    hits.append(os.path.join(root, name))
        except OSError:
            pass
try:
    import planted_secret
    planted = True
except ImportError:
    planted = False
print(json.dumps({"executable": sys.executable, "planted": planted, "hits": hits,
                  "path": [p for p in sys.path if os.path.isdir(p) and os.listdir(p)]}))
"""


def _plant(site_packages: str) -> None:
    os.makedirs(site_packages, exist_ok=True)
    with open(os.path.join(site_packages, "planted_secret.py"), "w") as handle:
        handle.write(f"ANSWER = {NEEDLE!r}\n")


def _link_tree(src: str, dst: str, ignore=None) -> None:
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)
    shutil.copytree(src, dst, symlinks=True, copy_function=link, ignore=ignore)


@pytest.fixture(scope="module")
def tmp_prefix():
    """A copy (hard links where possible) of this interpreter's base prefix, stdlib only,
    under /tmp inside a 0700 folder, with a planted package in its site-packages."""
    base = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    holder = tempfile.mkdtemp(prefix="pettingllms-0700-", dir="/tmp")  # mode 0700
    prefix = os.path.join(holder, "prefix")
    try:
        os.makedirs(os.path.join(prefix, "bin"), mode=0o755)
        os.chmod(prefix, 0o755)
        shutil.copy2(exe, os.path.join(prefix, "bin", os.path.basename(exe)))
        libdir = os.path.join(base, "lib")
        os.makedirs(os.path.join(prefix, "lib"), mode=0o755, exist_ok=True)
        for name in os.listdir(libdir):
            if name.startswith("libpython"):
                shutil.copy2(os.path.join(libdir, name), os.path.join(prefix, "lib", name),
                             follow_symlinks=False)
        _link_tree(os.path.join(libdir, version), os.path.join(prefix, "lib", version),
                   ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter",
                                                 "turtledemo", "ensurepip"))
        _plant(os.path.join(prefix, "lib", version, "site-packages"))
        yield os.path.join(prefix, "bin", os.path.basename(exe))
    finally:
        remove_tree(holder)


@pytest.fixture(scope="module")
def tmp_venv():
    """A venv (no pip) under /tmp with a planted package in its site-packages, and a symlink
    to it."""
    holder = tempfile.mkdtemp(prefix="pettingllms-venv-", dir="/tmp")
    os.chmod(holder, 0o755)
    venv = os.path.join(holder, "venv")
    base = getattr(sys, "_base_executable", sys.executable)
    try:
        subprocess.run([base, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
        site_packages = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, timeout=60).stdout.strip()
        _plant(site_packages)
        link = os.path.join(holder, "linked")
        os.symlink(venv, link)
        yield os.path.join(venv, "bin", "python"), os.path.join(link, "bin", "python")
    finally:
        remove_tree(holder)


def _assert_stdlib_only_under_bubblewrap(python: str) -> dict:
    caps = sandbox_capabilities(python)
    assert caps.launcher_name == "bubblewrap", caps.notes
    result = run_python(REPORT, limits=FAST, python=python)
    assert result.ok, result.describe_failure()
    report = json.loads(result.stdout)
    assert report["executable"].startswith(bwrap.PYTHON_MOUNT + "/"), report
    assert not report["planted"] and report["hits"] == [], report
    assert not any(p.endswith(("site-packages", "dist-packages")) for p in report["path"])
    return report


@needs_bwrap
def test_an_interpreter_under_tmp_in_a_0700_folder_runs_under_bubblewrap(tmp_prefix):
    _assert_stdlib_only_under_bubblewrap(tmp_prefix)


@needs_bwrap
def test_a_venv_under_tmp_and_a_symlinked_one_run_under_bubblewrap(tmp_venv):
    for python in tmp_venv:
        _assert_stdlib_only_under_bubblewrap(python)


@needs_bwrap
def test_this_machines_interpreter_runs_under_bubblewrap_with_the_stdlib_only():
    report = _assert_stdlib_only_under_bubblewrap(sys.executable)
    stdlib = sysconfig.get_paths()["stdlib"]
    assert any(p.endswith(os.path.basename(stdlib)) for p in report["path"]), report


@pytest.mark.skipif(os.geteuid() != 0 or CAPS.launcher_name != "bubblewrap",
                    reason="root with bubblewrap only: the run's uid is another user's")
def test_a_prefix_other_users_cannot_enter_stops_with_the_fix(tmp_prefix, monkeypatch):
    monkeypatch.setattr(probe, "_CAPS_CACHE", {})
    prefix = os.path.dirname(os.path.dirname(tmp_prefix))
    os.chmod(prefix, 0o700)
    try:
        with pytest.raises(SandboxUnavailableError, match="chmod o\\+rx") as raised:
            sandbox_capabilities(tmp_prefix, "auto")
    finally:
        os.chmod(prefix, 0o755)
    assert "launcher: unshare" in str(raised.value) and LAUNCHER_ENV_VAR in str(raised.value)


@pytest.fixture
def broken_bubblewrap(monkeypatch):
    """bubblewrap installed but failing its probe, with fresh capability caches."""
    monkeypatch.setattr(probe, "_CAPS_CACHE", {})
    monkeypatch.setattr(probe, "_ANNOUNCED", set())
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(bwrap, "probe", lambda python: (None, "the probe run failed (simulated)"))
    monkeypatch.delenv(LAUNCHER_ENV_VAR, raising=False)


def test_bubblewrap_failing_its_probe_stops_the_run_with_the_reason_and_the_fix(
        broken_bubblewrap):
    for call in (lambda: sandbox_capabilities(),
                 lambda: run_python("print(1)", limits=FAST),
                 lambda: MathEnv(),  # a task with the default sandbox: refused at start
                 lambda: run_tool_program(f"print({os.getpid()} * 3)", limits=FAST)):
        with pytest.raises(SandboxUnavailableError) as raised:
            call()
        message = str(raised.value)  # and never scored as the agent's failure
        assert "the probe run failed (simulated)" in message and "Fix:" in message
        assert "sandbox: {launcher: unshare}" in message and LAUNCHER_ENV_VAR in message
    with pytest.raises(SandboxUnavailableError):  # explicitly bubblewrap: no fallback either
        sandbox_capabilities(launcher="bubblewrap")


def test_the_weaker_launcher_runs_when_chosen_explicitly(broken_bubblewrap, monkeypatch):
    if not unshare.probe(sys.executable).launcher:
        pytest.skip("no unshare launcher works here")
    env = MathEnv(sandbox={"launcher": "unshare"})
    assert env.sandbox_limits.launcher == "unshare"
    result, failure = run_tool_program("print(6 * 7)", limits=env.sandbox_limits)
    assert failure is None and result.stdout == "42\n"
    monkeypatch.setenv(LAUNCHER_ENV_VAR, "unshare")
    assert sandbox_capabilities().launcher_name == "unshare"
    assert run_python("print(1)", limits=FAST).stdout == "1\n"


def test_an_unknown_launcher_is_refused_listing_the_accepted_ones(monkeypatch):
    for call in (lambda: SandboxLimits(launcher="docker"),
                 lambda: MathEnv(sandbox={"launcher": "docker"}),
                 lambda: MathEnv(sandbox_limits={"launcher": "docker"}),
                 lambda: sandbox_capabilities(launcher="docker")):
        with pytest.raises(ValueError, match="docker") as raised:
            call()
        assert all(name in str(raised.value) for name in LAUNCHERS)
    monkeypatch.setenv(LAUNCHER_ENV_VAR, "firejail")
    with pytest.raises(ValueError, match="auto, bubblewrap, unshare, none"):
        sandbox_capabilities()


def test_the_choice_and_its_guarantees_are_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(probe, "_ANNOUNCED", set())
    with caplog.at_level(logging.INFO, logger="pettingllms_envs.sandbox"):
        for _ in range(3):
            sandbox_capabilities()
    said = [r.getMessage() for r in caplog.records if "guarantees" in r.getMessage()
            or "launcher" in r.getMessage()]
    assert len(said) == 1 and CAPS.launcher_name in said[0], said
    described = sandbox.describe_sandbox()
    assert described["launcher"] == CAPS.launcher_name
    assert described["guarantees"] == list(CAPS.guarantees)
