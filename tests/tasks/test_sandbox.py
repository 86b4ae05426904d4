"""The code sandbox with hostile programs: every run must end on time, contained, and clean;
a batch of inputs must give each input what a single run would, and one bad input must not
poison the others.

This file pins the ``unshare`` launcher (the fallback where bubblewrap is missing) and tests
its mechanics: the read-only preamble, the batch harness, the pids cgroup. The bubblewrap
launcher, the default where it works, is held to the attacks in test_sandbox_hostile.py, which
also runs the behaviour both launchers share.
"""

import dataclasses
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pettingllms_envs.sandbox import (
    LAUNCHER_ENV_VAR,
    LIMIT_HITS,
    SCRATCH_PLACEHOLDER,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    run_python,
    run_python_batch,
    sandbox_capabilities,
)
from pettingllms_envs.sandbox import batch, filesystem, runner, unshare

FAST = SandboxLimits(wall_time_s=3, cpu_time_s=3)
REPO = Path(__file__).resolve().parents[2]
# Fields that must agree between run_python and run_python_batch (not the measured time).
COMPARED = ("stdout", "stderr", "exit_code", "timed_out", "killed_by_signal", "output_truncated",
            "network_isolated", "limit_hit", "filesystem_readonly")


@pytest.fixture(autouse=True)
def _unshare_launcher(monkeypatch):
    monkeypatch.setenv(LAUNCHER_ENV_VAR, "unshare")


def _marked_processes(marker: str) -> list[int]:
    """Host pids whose name (``/proc/<pid>/comm``) is ``marker``; zombies included."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm", encoding="utf-8", errors="replace") as handle:
                    if handle.read().strip() == marker:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _assert_all_gone(marker: str, grace_s: float = 3.0) -> None:
    deadline = time.monotonic() + grace_s
    while _marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked_processes(marker) == [], f"processes named {marker!r} outlived the run"


def _assert_host_unharmed(marker: str | None = None) -> None:
    """The host still runs a trivial program, and nothing the hostile one started is alive."""
    assert run_python("print('still fine')", limits=FAST).stdout == "still fine\n"
    if marker is not None:
        _assert_all_gone(marker)


def _marker(kind: str) -> str:
    return f"sbx{kind}{os.getpid() % 10000}"[:15]


def _name_self(marker: str) -> str:
    """Program prologue that renames the process (inherited by forks) so the test can find it."""
    return f"import ctypes\nctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)\n"


def _fields(result: SandboxResult) -> dict:
    return {name: getattr(result, name) for name in COMPARED}


# ------------------------------------------------------------------------------ basics
def test_happy_path_returns_stdout_and_ok():
    result = run_python("print(6 * 7)")
    assert result.ok and result.stdout == "42\n" and result.stderr == ""
    assert result.exit_code == 0 and not result.timed_out and result.killed_by_signal is None
    assert not result.output_truncated and result.wall_time_s > 0 and result.limit_hit is None


def test_stdin_is_fed_to_the_program():
    result = run_python("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))",
                        stdin="1 2 3\n4\n")
    assert result.ok and result.stdout.strip() == "10"


def test_errors_are_reported_reproducibly_without_host_paths():
    first, second = (run_python("x = 1\n1 / 0") for _ in range(2))
    assert first.exit_code == 1 and not first.ok and "ZeroDivisionError" in first.stderr
    assert f"{SCRATCH_PLACEHOLDER}/solution.py" in first.stderr
    assert first.stderr == second.stderr
    assert "exit code 1" in first.describe_failure()


def test_hash_seed_is_fixed_and_cwd_is_private():
    code = "import os\nprint(hash('abc'), list({'x', 'y', 'zz', 'w'}), os.getcwd())"
    first, second = run_python(code), run_python(code)
    assert first.ok and first.stdout == second.stdout
    assert first.stdout.split()[-1] == SCRATCH_PLACEHOLDER


def test_scratch_folder_is_removed(own_tempdir):
    code = ("open('left_behind.txt', 'w').write('x')\nimport os\nos.mkdir('sub')\n"
            "os.chmod('sub', 0)\nprint('done')")
    result = run_python(code)
    assert result.ok and result.stdout == "done\n"
    assert [r.stdout for r in run_python_batch(code, ["", ""])] == ["done\n", "done\n"]
    assert list(own_tempdir.iterdir()) == []


def test_invalid_utf8_output_is_replaced_not_raised():
    result = run_python("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok\\n')")
    assert result.ok and "\ufffd" in result.stdout and result.stdout.endswith("ok\n")


def test_limits_are_validated():
    for bad in ({"wall_time_s": 0}, {"memory_mb": -1}, {"max_output_bytes": True},
                {"cpu_time_s": float("inf")}, {"max_open_files": 3}):
        with pytest.raises(ValueError):
            SandboxLimits(**bad)
    with pytest.raises(TypeError):
        run_python(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        run_python_batch(b"print(1)", [""])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        run_python_batch("print(1)", "one string is not a list of inputs")


def test_capabilities_explain_every_fallback():
    caps = sandbox_capabilities()
    assert caps.process_limit in {"rlimit", "cgroup", "none"}
    assert caps.network_isolated == bool(caps.launcher)
    if not caps.network_isolated:
        assert any("network NOT isolated" in note for note in caps.notes)
    if not caps.filesystem_readonly:
        assert any("file system NOT read-only" in note for note in caps.notes)
    if os.geteuid() == 0 and caps.run_as_uid is None:
        assert any("RLIMIT_NPROC does not apply" in note for note in caps.notes)


def test_result_fields_ok_and_limit_hit_values():
    base = dict(stdout="", stderr="", exit_code=0, timed_out=False, killed_by_signal=None,
                output_truncated=False, network_isolated=False, wall_time_s=0.1)
    assert SandboxResult(**base).ok and SandboxResult(**base).limit_hit is None
    assert SandboxResult("", "", 0, False, None, False, False, 0.1).ok  # positional, as before
    assert not SandboxResult(**{**base, "exit_code": 2}).ok
    assert not SandboxResult(**{**base, "timed_out": True}).ok
    assert not SandboxResult(**{**base, "exit_code": None}).ok
    for limit in LIMIT_HITS:
        assert SandboxResult(**base, limit_hit=limit).limit_hit == limit
    with pytest.raises(ValueError):
        SandboxResult(**base, limit_hit="disk")


def test_describe_failure_names_the_limit():
    base = dict(stdout="", stderr="", exit_code=1, timed_out=False, killed_by_signal=None,
                output_truncated=False, network_isolated=True, wall_time_s=0.1)
    cpu = SandboxResult(**{**base, "exit_code": -9, "killed_by_signal": 9}, limit_hit="cpu_time")
    assert cpu.describe_failure() == "killed by SIGKILL (CPU time limit)"
    memory = SandboxResult(**{**base, "stderr": "MemoryError\n"}, limit_hit="memory")
    assert memory.describe_failure() == "exit code 1 (memory limit): MemoryError"
    assert SandboxResult(**base, limit_hit="output").describe_failure() == "exit code 1"
    timed = SandboxResult(**{**base, "timed_out": True}, limit_hit="wall_time")
    assert timed.describe_failure() == "timed out (wall-clock limit)"
    assert SandboxResult(**{**base, "exit_code": 0}, limit_hit="output").describe_failure() == ""


# ------------------------------------------------------------------------------ hostile programs
def test_infinite_loop_is_killed_by_the_wall_clock():
    marker = _marker("loop")
    started = time.monotonic()
    result = run_python(_name_self(marker) + "while True:\n    pass",
                        limits=SandboxLimits(wall_time_s=1, cpu_time_s=30))
    assert result.timed_out and not result.ok and result.limit_hit == "wall_time"
    assert time.monotonic() - started < 30
    assert result.describe_failure() == "timed out (wall-clock limit)"
    _assert_host_unharmed(marker)


def test_sleeping_program_is_killed_by_the_wall_clock():
    result = run_python("import time\ntime.sleep(60)", limits=SandboxLimits(wall_time_s=0.5))
    assert result.timed_out and result.wall_time_s < 3 and result.limit_hit == "wall_time"


def test_busy_loop_is_killed_by_the_cpu_limit():
    result = run_python("while True:\n    pass", limits=SandboxLimits(wall_time_s=20, cpu_time_s=1))
    assert not result.timed_out and not result.ok
    assert result.killed_by_signal == signal.SIGKILL and result.limit_hit == "cpu_time"
    assert result.describe_failure() == "killed by SIGKILL (CPU time limit)"


def test_memory_bomb_is_contained():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for code in ("x = bytearray(8 * 1024 ** 3)",
                 "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 ** 2))"):
        result = run_python(code, limits=SandboxLimits(wall_time_s=10, memory_mb=256))
        assert not result.ok and not result.timed_out and result.exit_code == 1
        assert "MemoryError" in result.stderr and result.limit_hit == "memory"
        assert "(memory limit)" in result.describe_failure()
    growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert growth_kib < 64 * 1024
    _assert_host_unharmed()


def test_deep_recursion_ends_as_a_contained_crash():
    """A C-stack overflow (recursion through ``repr`` with the limit lifted) kills only the
    program: SIGSEGV (or, on interpreters with a C recursion guard, a RecursionError)."""
    code = ("import sys\nsys.setrecursionlimit(10 ** 6)\n"
            "class Deep:\n    def __repr__(self):\n        return repr(Deep())\n"
            "print(repr(Deep()))\n")
    result = run_python(code, limits=SandboxLimits(wall_time_s=10))
    assert not result.ok and not result.timed_out
    assert result.killed_by_signal == signal.SIGSEGV or "RecursionError" in result.stderr
    assert result.limit_hit is None  # a crash, not one of our limits
    _assert_host_unharmed()


def test_bounded_fork_bomb_is_limited_and_the_whole_group_killed():
    marker = _marker("fork")
    code = _name_self(marker) + (
        "import os, time\nforked = 0\n"
        "for _ in range(200):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        continue\n"
        "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "    forked += 1\n"
        "print('forked', forked, flush=True)\ntime.sleep(60)\n")
    limits = SandboxLimits(wall_time_s=2, max_processes=16)
    result = run_python(code, limits=limits)
    assert result.timed_out and result.limit_hit == "wall_time", result
    forked = int(result.stdout.split()[1])
    if sandbox_capabilities().process_limit == "none":
        assert forked == 200  # root without a pids cgroup: only the wall clock contains it
    else:
        assert forked < limits.max_processes
    _assert_host_unharmed(marker)


@pytest.mark.skipif(sandbox_capabilities().process_limit == "none",
                    reason="no enforceable process limit on this host (root, no pids cgroup)")
def test_fork_loop_that_fails_at_the_process_limit_is_reported_as_such():
    code = ("import os, time\nfor _ in range(200):\n    if os.fork() == 0:\n"
            "        time.sleep(30)\n        os._exit(0)\n")
    result = run_python(code, limits=SandboxLimits(wall_time_s=5, max_processes=8))
    assert not result.ok and not result.timed_out and "BlockingIOError" in result.stderr
    assert result.limit_hit == "processes"
    assert "(process limit)" in result.describe_failure()


@pytest.mark.skipif(sandbox_capabilities().process_limit == "none",
                    reason="no enforceable process limit on this host (root, no pids cgroup)")
def test_real_fork_bomb_is_contained():
    marker = _marker("bomb")
    code = _name_self(marker) + (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    started = time.monotonic()
    result = run_python(code, limits=SandboxLimits(wall_time_s=1.5, cpu_time_s=5,
                                                   max_processes=12))
    assert result.timed_out and result.limit_hit == "wall_time"
    assert time.monotonic() - started < 30
    _assert_host_unharmed(marker)


def test_background_children_do_not_outlive_the_run():
    caps = sandbox_capabilities()
    marker = _marker("daemon")
    code = _name_self(marker) + (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
        "print('parent leaves')\n")
    result = run_python(code, limits=FAST)
    batch = run_python_batch(code, ["", ""], limits=FAST)
    assert result.ok and not result.timed_out and result.wall_time_s < 2.5
    assert all(r.ok and r.stdout == "parent leaves\n" for r in batch)
    if caps.pid_namespace or caps.process_limit == "cgroup":
        _assert_all_gone(marker)  # a setsid() escape from the process group is still caught
    else:
        for pid in _marked_processes(marker):  # clean up what this host cannot contain
            os.kill(pid, 9)


def test_big_file_hits_the_file_size_limit():
    code = ("data = b'x' * (1024 * 1024)\nwith open('big.bin', 'wb') as f:\n"
            "    for _ in range(8):\n        f.write(data)\nprint('wrote it all')")
    result = run_python(code, limits=SandboxLimits(max_file_bytes=2 * 1024 * 1024))
    assert not result.ok and "wrote it all" not in result.stdout
    assert "File too large" in result.stderr and result.limit_hit == "file_size"


def _writable_outside_targets(caps, tmp_path: Path, name: str) -> list[Path]:
    """Places outside the scratch folder the sandbox is guaranteed not to write to here."""
    if caps.filesystem_readonly:  # every mount but the run's own folders is read-only
        return list(dict.fromkeys([REPO / name, tmp_path / name, Path("/tmp") / name,
                                   Path(tempfile.gettempdir()) / name, Path("/etc") / name]))
    targets = [Path("/etc") / name]  # owned by root: out of reach of any non-root identity
    if caps.run_as_uid is not None:  # a dropped uid owns nothing of ours either
        targets += [tmp_path / name, REPO / name]
    return targets


_INTERPRETERS = [None] + [p for p in ("/usr/bin/python3",)
                          if os.path.exists(p) and os.path.realpath(p) != os.path.realpath(
                              sys.executable)]
# Tries each path given on stdin: create/overwrite ("write"), create a folder ("mkdir"), delete
# ("remove"); prints one verdict per attempt: "refused <op> <errno name>" or "done <op>".
_ESCAPE_CODE = """
import errno, os, sys
for line in sys.stdin.read().splitlines():
    op, path = line.split(' ', 1)
    try:
        if op == 'write':
            with open(path, 'w') as handle:
                handle.write('escaped')
        elif op == 'mkdir':
            os.mkdir(path)
        else:
            os.remove(path)
        print('done', op, path)
    except OSError as exc:
        print('refused', op, errno.errorcode.get(exc.errno, exc.errno), path)
"""


@pytest.mark.parametrize("python", _INTERPRETERS)
def test_writing_outside_the_scratch_folder_fails(python, tmp_path):
    """Where the sandbox can make the host's file system read-only (a mount namespace), every
    write outside the run's own folders fails with EROFS: new files in the repository, the
    test's own temporary folder and /tmp, a new folder, and overwriting or deleting a file the
    host made. Without it, only file permissions refuse: a dropped uid cannot write to root's
    folders, nor can a non-root host user write to ``/etc``; a root host without either keeps
    root's file permissions (the documented residual risk), so there is nothing to assert."""
    caps = sandbox_capabilities(python)
    if os.geteuid() == 0 and caps.run_as_uid is None and not caps.filesystem_readonly:
        pytest.skip(f"root without a privilege drop or a read-only file system writes as root "
                    f"(residual risk): {caps.notes}")
    name = f"pettingllms-sbx-escape-{os.getpid()}.txt"
    targets = _writable_outside_targets(caps, tmp_path, name)
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    attempts = [("write", path) for path in targets]
    if caps.filesystem_readonly or caps.run_as_uid is not None:
        attempts += [("mkdir", tmp_path / "new-folder"), ("write", victim), ("remove", victim)]
    stdin = "\n".join(f"{op} {path}" for op, path in attempts)
    try:
        results = [run_python(_ESCAPE_CODE, stdin=stdin, python=python),
                   *run_python_batch(_ESCAPE_CODE, [stdin], python=python)]
        for result in results:
            verdicts = [line.split()[:3] for line in result.stdout.splitlines()]
            assert result.ok and len(verdicts) == len(attempts), result
            assert result.filesystem_readonly == caps.filesystem_readonly
            assert all(verdict[0] == "refused" for verdict in verdicts), result.stdout
            if caps.filesystem_readonly:  # a non-root uid may be refused by permissions first
                permissions_first = caps.run_as_uid is not None or os.geteuid() != 0
                allowed = {"EROFS"} | ({"EACCES"} if permissions_first else set())
                assert {verdict[2] for verdict in verdicts} <= allowed, result.stdout
        assert [path for path in targets if path.exists()] == []
        assert not (tmp_path / "new-folder").exists() and victim.read_text() == "original"
    finally:
        for path in targets:
            if path.exists():
                path.unlink()


def _require_readonly_filesystem():
    caps = sandbox_capabilities()
    if not caps.filesystem_readonly:
        pytest.skip(f"no read-only file system on this host: {caps.notes}")
    return caps


def test_a_program_cannot_lift_the_read_only_view():
    """Root inside its namespaces, yet without capabilities: no remount, no unmount of its
    folder's own mount; a nested user namespace gets a copy whose read-only flags are locked.
    Host files that only root may write, such as sysctls, refuse too (opened, never written):
    read-only for namespaced root, not permitted at all for a dropped uid."""
    caps = _require_readonly_filesystem()
    sysctl_refusal = "EROFS" if caps.run_as_uid is None else "EACCES"
    code = (
        "import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def verdict(what, result):\n"
        "    code = ctypes.get_errno() if result != 0 else 0\n"
        "    print(what, errno.errorcode.get(code, code))\n"
        "remount = 32 | 4096 | (1 << 21)  # MS_REMOUNT | MS_BIND | MS_RELATIME, without MS_RDONLY\n"
        "verdict('remount', libc.mount(None, b'/', None, remount, None))\n"
        "verdict('umount', libc.umount2(os.getcwd().encode(), 2))\n"
        "try:\n    os.close(os.open('/proc/sys/vm/drop_caches', os.O_WRONLY))\n"
        "    print('sysctl', 0)\nexcept OSError as exc:\n"
        "    print('sysctl', errno.errorcode[exc.errno])\n"
        "if libc.unshare(0x10000000 | 0x20000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS\n"
        "    verdict('nested-remount', libc.mount(None, b'/', None, remount, None))\n"
        "else:\n    verdict('nested-unshare', -1)\n")
    results = [run_python(code, limits=FAST), *run_python_batch(code, [""], limits=FAST)]
    for result in results:
        verdicts = dict(line.split() for line in result.stdout.splitlines())
        assert result.ok and result.filesystem_readonly, result
        assert verdicts["remount"] == "EPERM" and verdicts["umount"] == "EPERM", verdicts
        assert verdicts["sysctl"] == sysctl_refusal, verdicts
        assert verdicts.get("nested-remount", "EPERM") == "EPERM", verdicts


def test_dev_shm_is_private_to_each_run():
    """/dev/shm is a small tmpfs of the run's own: writable (so multiprocessing's semaphores
    work), invisible to the host, and emptied between the inputs of a batch."""
    _require_readonly_filesystem()
    name = f"pettingllms-sbx-shm-{os.getpid()}"
    code = ("import multiprocessing, os\nlock = multiprocessing.Lock()\n"
            f"print(sorted(os.listdir('/dev/shm')))\nopen('/dev/shm/{name}', 'w').write('x')\n"
            "with lock:\n    print('locked')\n")
    results = [run_python(code, limits=FAST), *run_python_batch(code, ["", ""], limits=FAST)]
    for result in results:
        assert result.ok and result.stdout == "[]\nlocked\n", result
    assert not os.path.exists(f"/dev/shm/{name}")


def test_a_failing_read_only_setup_means_the_program_does_not_run(monkeypatch):
    """A preamble that cannot set up the read-only view (here: launched without a mount
    namespace of its own, where it refuses to touch the mounts it sees) starts nothing: every
    result says "could not start" and why, none runs the program."""
    _require_readonly_filesystem()
    caps = sandbox_capabilities()
    if "--user" not in caps.launcher:
        pytest.skip(f"needs a user namespace launcher to test safely: {caps.launcher}")
    no_mount_ns = dataclasses.replace(
        caps, launcher=(caps.launcher[0], "--user", "--map-root-user", "--net", "--"))
    monkeypatch.setattr(runner, "sandbox_capabilities",
                        lambda python=None, launcher=None: no_mount_ns)
    code = "print('ran')"
    results = [run_python(code, limits=FAST), *run_python_batch(code, ["", ""], limits=FAST)]
    for result in results:
        assert result.exit_code is None and result.stdout == "" and result.filesystem_readonly
        assert "read-only file system setup failed" in result.stderr, result
        assert "not in a mount namespace of its own" in result.stderr, result
        assert result.describe_failure().startswith("could not start")


def test_where_the_read_only_setup_fails_the_probe_says_so_and_runs_go_on(monkeypatch):
    """The probe's read-only attempt fails (a stand-in preamble that only exits 125): the
    capabilities say why, and runs start without the preamble, as they did before it."""
    monkeypatch.setattr(filesystem, "FS_PREAMBLE", "import sys\nsys.exit(125)")
    caps = unshare.probe(sys.executable)
    assert not caps.filesystem_readonly
    assert any(note.startswith("file system NOT read-only") for note in caps.notes), caps.notes
    assert caps.network_isolated == sandbox_capabilities().network_isolated
    monkeypatch.setattr(runner, "sandbox_capabilities", lambda python=None, launcher=None: caps)
    results = [run_python("print('ran')", limits=FAST),
               *run_python_batch("print('ran')", [""], limits=FAST)]
    assert all(r.ok and r.stdout == "ran\n" and not r.filesystem_readonly for r in results)


def test_an_ordinary_program_behaves_alike_in_single_and_batch_runs():
    """Imports, stdin, files in its own folder (the temporary-file folder falls back to it),
    /dev/null and the host-opened stdout/stderr (also by path) all work as without the
    read-only view."""
    code = ("import collections, heapq, json, sys, tempfile\ndata = sys.stdin.read().split()\n"
            "with open('notes.txt', 'w') as handle:\n    json.dump(data, handle)\n"
            "with tempfile.TemporaryFile() as spill:\n    spill.write(b'x' * 1000)\n"
            "open('/dev/null', 'w').write('discarded')\n"
            "open('/dev/stderr', 'a').write('to stderr\\n')\n"
            "counts = collections.Counter(json.load(open('notes.txt')))\n"
            "print(counts.most_common(2), heapq.nsmallest(1, data), flush=True)\n")
    inputs = ["a b a c a b", ""]
    singles = [run_python(code, stdin=text, limits=FAST) for text in inputs]
    batch = run_python_batch(code, inputs, limits=FAST)
    assert [_fields(r) for r in batch] == [_fields(r) for r in singles]
    assert singles[0].ok and singles[0].stdout == "[('a', 3), ('b', 2)] ['a']\n"
    assert singles[0].stderr == "to stderr\n" and singles[1].stdout == "[] []\n"


def test_host_environment_is_invisible(monkeypatch):
    secret = "s3cr3t-token-value-for-the-sandbox-test"
    monkeypatch.setenv("MY_SECRET_TOKEN", secret)
    code = "import os\nprint(sorted(os.environ))\nprint(os.environ.get('MY_SECRET_TOKEN'))\n"
    result = run_python(code)
    batch = run_python_batch(code, [""])[0]
    for run in (result, batch):
        assert run.ok and secret not in run.stdout and run.limit_hit is None
        assert "MY_SECRET_TOKEN" not in run.stdout.splitlines()[0]
        assert run.stdout.splitlines()[1] == "None"
    assert os.environ["MY_SECRET_TOKEN"] == secret  # the host is untouched


def test_host_processes_environments_are_unreadable():
    """``/proc/<pid>/environ`` of a host process holding a secret: hidden by the private /proc
    of a pid namespace, or unreadable after the privilege drop."""
    caps = sandbox_capabilities()
    if not (caps.pid_namespace or caps.run_as_uid is not None):
        pytest.skip(f"no pid namespace and no privilege drop on this host: {caps.notes}")
    secret = "s3cr3t-in-a-host-process-environment"
    holder = subprocess.Popen(["sleep", "30"], env={"PATH": "/usr/bin:/bin", "TOKEN": secret})
    try:
        code = ("import os\nfor pid in os.listdir('/proc'):\n"
                "    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
                "    except Exception:\n        pass\n"
                f"print(open('/proc/{holder.pid}/environ', 'rb').read())\n")
        limits = SandboxLimits(max_output_bytes=1024 * 1024)
        results = [run_python(code, limits=limits), *run_python_batch(code, [""], limits=limits)]
    finally:
        holder.kill()
        holder.wait()
    for result in results:
        assert secret not in result.stdout and secret not in result.stderr
        assert not result.ok  # the direct read of the holder's environ failed


def test_network_is_blocked_when_isolated():
    caps = sandbox_capabilities()
    if not caps.network_isolated:
        pytest.skip(f"no network namespace on this host: {caps.notes}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = ("import socket\ns = socket.socket()\ns.settimeout(2)\n"
                f"try:\n    s.connect(('127.0.0.1', {port}))\n    print('connected')\n"
                "except OSError as e:\n    print('blocked', e.errno)\n")
        results = [run_python(code, limits=FAST), *run_python_batch(code, [""], limits=FAST)]
    for result in results:
        assert result.ok and result.network_isolated and result.limit_hit is None
        assert result.stdout.startswith("blocked"), result.stdout


def test_huge_print_is_truncated_quickly_and_the_host_is_unharmed():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    limits = SandboxLimits(wall_time_s=10)
    started = time.monotonic()
    result = run_python("print('x' * 100_000_000)", limits=limits)
    assert time.monotonic() - started < 30
    assert result.output_truncated and not result.ok and not result.timed_out
    assert result.limit_hit == "file_size"  # stdout is a file under max_file_bytes (16 MB)
    assert len(result.stdout.encode()) <= limits.max_output_bytes
    assert result.stdout.startswith("xxxx")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024
    _assert_host_unharmed()


def test_output_beyond_the_read_back_cap_is_flagged_on_a_successful_run():
    limits = SandboxLimits(max_output_bytes=1000)
    result = run_python("print('y' * 5000)", limits=limits)
    assert result.ok and result.output_truncated and result.limit_hit == "output"
    assert result.stdout == "y" * 1000 and result.describe_failure() == ""


# ------------------------------------------------------------------------------ batches
def test_batch_runs_each_input_on_its_own():
    results = run_python_batch("print(int(input()) * 2)", ["1", "21", "not a number"],
                               limits=FAST)
    assert [r.stdout.strip() for r in results[:2]] == ["2", "42"]
    assert results[0].ok and results[1].ok and not results[2].ok
    assert "ValueError" in results[2].stderr and results[2].exit_code == 1
    assert run_python_batch("print(1)", []) == []


def test_batch_program_sees_exactly_its_own_input():
    inputs = ["", "no newline", "a\nb\n", "ünïcödé ✓\n", "x" * 1_000_000, "\0 nul \0", "\r\n"]
    code = "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), hash(data))"
    results = run_python_batch(code, inputs, limits=FAST)
    for text, result in zip(inputs, results):
        raw = text.encode()
        assert result.ok and result.stdout == run_python(code, stdin=text).stdout
        assert result.stdout.split()[0] == str(len(raw))


def test_batch_gives_every_input_a_fresh_scratch_folder_and_process():
    code = ("import os, sys\nprint(sorted(os.listdir('.')), 'seen' in sys.modules)\n"
            "open('state.txt', 'w').write('left')\nsys.modules['seen'] = sys\n"
            "os.chmod('.', 0o500)\n")
    results = run_python_batch(code, ["", "", ""], limits=FAST)
    assert [r.stdout for r in results] == ["['solution.py'] False\n"] * 3


EQUIVALENCE_PROGRAMS = {
    "ok_with_input": ("a, b = map(int, input().split())\nprint(a + b)", ["1 2", "40 2"]),
    "reads_all_stdin": ("import sys\nprint(repr(sys.stdin.read()))", ["x\ny\n", ""]),
    "exception": ("def f(x):\n    return 1 / x\nprint(f(int(input())))", ["0", "2"]),
    "exit_code": ("import sys\nprint('partial')\nsys.exit(int(input()))", ["3", "0", "256"]),
    "exit_message": ("import sys\nsys.exit('bye: ' + input())", ["now"]),
    "keyboard_interrupt": ("print('before')\nraise KeyboardInterrupt", [""]),
    "syntax_error": ("def f(:\n    pass\n", ["", ""]),
    "compile_warning": ("x = int(input())\nprint(x is 1)", ["1"]),
    "timeout": ("while True:\n    pass", [""]),
    "huge_output": ("print('x' * 100_000_000)", [""]),
    "threads_and_atexit": (
        "import atexit, threading, time\natexit.register(lambda: print('atexit ran'))\n"
        "def late():\n    time.sleep(0.2)\n    print('thread done')\n"
        "threading.Thread(target=late).start()\nprint('main done', end='')", [""]),
    "interpreter_state": (
        "import os, resource, sys\n"
        "print(sorted(globals()), __name__, __file__, __spec__, sys.argv, sys.orig_argv[1:])\n"
        "print(sys.path[0], type(__loader__).__name__, sys.flags.dont_write_bytecode)\n"
        "print(sorted(sys.modules), os.listdir('/proc/self/fd'), os.getcwd(), os.environ)\n"
        "print([resource.getrlimit(getattr(resource, 'RLIMIT_' + name))\n"
        "       for name in ('CPU', 'AS', 'NOFILE', 'FSIZE', 'CORE')])", [""]),
    "memory_error": ("x = bytearray(8 * 1024 ** 3)", [""]),
}


@pytest.mark.parametrize("name", sorted(EQUIVALENCE_PROGRAMS))
def test_batch_results_match_single_runs(name):
    code, inputs = EQUIVALENCE_PROGRAMS[name]
    # A short wall clock only where it must fire: elsewhere both runs must finish on time.
    limits = SandboxLimits(wall_time_s=1.5 if name == "timeout" else 10, cpu_time_s=3)
    singles = [run_python(code, stdin=text, limits=limits) for text in inputs]
    batch = run_python_batch(code, inputs, limits=limits)
    assert [_fields(r) for r in batch] == [_fields(r) for r in singles]


def test_hostile_inputs_in_a_batch_do_not_poison_the_others(monkeypatch):
    caps = sandbox_capabilities()
    monkeypatch.setenv("MY_SECRET_TOKEN", "batch-s3cr3t-value")
    marker = _marker("batch")
    code = _name_self(marker) + (
        "import os, socket\nwhat = input()\n"
        "if what == 'loop':\n    while True:\n        pass\n"
        "elif what == 'fork':\n    while True:\n        try:\n            os.fork()\n"
        "        except OSError:\n            pass\n"
        "elif what == 'print':\n    print('x' * 100_000_000)\n"
        "elif what == 'memory':\n    x = bytearray(8 * 1024 ** 3)\n"
        "elif what == 'secret':\n    print(os.environ.get('MY_SECRET_TOKEN'))\n"
        "elif what == 'socket':\n    s = socket.socket()\n    s.settimeout(1)\n"
        "    s.connect(('127.0.0.1', 9))\n"
        "else:\n    print(int(what) * 2)\n")
    hostile = ["loop", "print", "memory", "secret", "socket"]
    if caps.process_limit != "none":  # an unbounded fork bomb needs a process limit
        hostile.insert(1, "fork")
    inputs = [str(i) for i in range(len(hostile) + 1)]
    for position, what in enumerate(hostile):
        inputs.insert(2 * position + 1, what)
    limits = SandboxLimits(wall_time_s=3, cpu_time_s=10, max_processes=12)
    results = dict(zip(inputs, run_python_batch(code, inputs, limits=limits)))
    for good in (str(i) for i in range(len(hostile) + 1)):
        assert results[good].ok and results[good].stdout == f"{int(good) * 2}\n", results[good]
    assert results["loop"].timed_out and results["loop"].limit_hit == "wall_time"
    if "fork" in results:
        assert results["fork"].timed_out and results["fork"].limit_hit == "wall_time"
    assert results["print"].output_truncated and results["print"].limit_hit == "file_size"
    assert results["memory"].exit_code == 1 and results["memory"].limit_hit == "memory"
    assert results["secret"].ok and results["secret"].stdout == "None\n"
    if caps.network_isolated:
        assert not results["socket"].ok and "Network is unreachable" in results["socket"].stderr
    _assert_host_unharmed(marker)


def test_batch_that_outlives_its_overall_budget_reports_every_input(monkeypatch):
    """The batch clock (here 2 s for 20 inputs of 0.4 s) kills the harness: the inputs done
    keep their results, the one running is timed out, the rest are reported as not run."""
    monkeypatch.setattr(batch, "batch_budget_s", lambda limits, count: 2.0)
    started = time.monotonic()
    results = run_python_batch("import time\ntime.sleep(0.4)\nprint('done')", [""] * 20,
                               limits=SandboxLimits(wall_time_s=5))
    assert time.monotonic() - started < 30
    assert len(results) == 20 and all(isinstance(r, SandboxResult) for r in results)
    done = [r for r in results if r.ok]
    assert all(r.stdout == "done\n" for r in done) and results[:len(done)] == done
    rest = results[len(done):]
    if rest[0].timed_out:
        assert rest[0].limit_hit == "wall_time" and "time budget ran out" in rest[0].stderr
        rest = rest[1:]
    assert rest and all(r.exit_code is None and "not run" in r.stderr for r in rest)
    assert all(r.describe_failure().startswith("could not start") for r in rest)


def test_batch_restarts_the_harness_for_inputs_after_a_harness_death(monkeypatch):
    """Policy of run_python_batch on a (simulated) harness that dies during input 1: input 1
    keeps its verdict and a fresh harness runs inputs 2 and 3."""
    calls = []

    def fake_harness(code, cases, limits, caps, budget_s):
        calls.append([i for i, _ in cases])
        results = {i: SandboxResult(data.decode(), "", 0, False, None, False, True, 0.1)
                   for i, data in cases[:1]}
        if len(calls) == 1:
            results[cases[1][0]] = SandboxResult("", "sandbox: the batch harness stopped", None,
                                                 False, None, False, True, 0.0)
        else:
            results.update({i: SandboxResult(data.decode(), "", 0, False, None, False, True,
                                             0.1) for i, data in cases[1:]})
        return batch.HarnessOutcome(results, False, None, "killed")

    monkeypatch.setattr(batch, "run_harness", fake_harness)
    results = run_python_batch("ignored", ["a", "b", "c", "d"])
    assert calls == [[0, 1, 2, 3], [2, 3]]
    assert [r.stdout for r in results] == ["a", "", "c", "d"]
    assert "harness stopped" in results[1].stderr and not results[1].ok


def test_batch_falls_back_to_single_runs_when_the_harness_cannot_run(monkeypatch):
    monkeypatch.setattr(batch, "run_harness", lambda *args: batch.HarnessOutcome(
        {}, False, None, "SyntaxError: this interpreter cannot run the harness"))
    results = run_python_batch("print(int(input()) + 1)", ["1", "2"], limits=FAST)
    assert [r.stdout for r in results] == ["2\n", "3\n"]


def test_a_host_without_any_isolation_refuses_to_run_unless_told_to():
    with pytest.raises(SandboxUnavailableError, match="allow_unisolated"):
        run_python_batch("print(1)", ["", ""], python="/nonexistent/python3")
    results = run_python_batch("print(1)", ["", ""], python="/nonexistent/python3",
                               limits=SandboxLimits(allow_unisolated=True))
    assert [r.exit_code for r in results] == [None, None]
    assert all(r.describe_failure().startswith("could not start") for r in results)


_RECORD = (b"S 0\nR 0 exit 0 0 0.010000 0.020000 3 0 0 3 0 0\nhi\n"
           b"S 1\nR 1 signal 9 1 0.0 1.5 0 5 1 0 5 0\nerror"
           b"S 2\nR 2 nostart 0 0 0.0 0.0 0 0 -1 0 4 0\nwhy?S 3\n")


def test_harness_records_parse_and_the_running_input_is_known():
    records, running = batch._parse_records(_RECORD)
    assert sorted(records) == [0, 1, 2] and running == 3
    assert records[0].out == b"hi\n" and records[0].pids_max_hit is False
    assert records[1].kind == "signal" and records[1].timed_out and records[1].err == b"error"
    assert records[2].pids_max_hit is None and records[2].err == b"why?"


@settings(max_examples=500, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(st.binary(max_size=400),
                 st.integers(0, len(_RECORD)).map(lambda n: _RECORD[:n]),
                 st.binary(max_size=40).map(lambda junk: _RECORD[:60] + junk + _RECORD[60:])))
def test_harness_record_parser_never_raises(data):
    records, running = batch._parse_records(data)
    assert running is None or isinstance(running, int)
    assert all(rec.kind in ("exit", "signal", "nostart") for rec in records.values())


def test_no_scratch_harness_or_cgroup_is_left_behind(own_tempdir):
    results = run_python_batch("import time\nopen('f', 'w').write('x')\ntime.sleep(5)", ["", ""],
                               limits=SandboxLimits(wall_time_s=0.5))
    assert all(r.timed_out for r in results)
    assert list(own_tempdir.iterdir()) == []
    root = sandbox_capabilities().cgroup_root
    if root is not None:
        ours = f"pettingllms-sbx-{os.getpid()}-"
        assert [name for name in os.listdir(root) if name.startswith(ours)] == []


def test_whole_number_limits_accept_yaml_floats_and_reject_fractions():
    """YAML writes 1e6 as a float; byte, MiB and count limits must still be whole numbers."""
    limits = SandboxLimits(max_file_bytes=1e6, memory_mb=256.0)
    assert limits.max_file_bytes == 1_000_000 and isinstance(limits.max_file_bytes, int)
    assert isinstance(limits.memory_mb, int)
    with pytest.raises(ValueError, match="whole number"):
        SandboxLimits(max_processes=2.5)
