"""The code sandbox with hostile programs: every run must end on time, contained, and clean."""

import os
import resource
import socket
import subprocess
import tempfile
import time

import pytest

from pettingllms_envs.sandbox import (
    SCRATCH_PLACEHOLDER,
    SandboxLimits,
    SandboxResult,
    run_python,
    run_python_batch,
    sandbox_capabilities,
)

FAST = SandboxLimits(wall_time_s=3, cpu_time_s=3)


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


def _name_self(marker: str) -> str:
    """Program prologue that renames the process (inherited by forks) so the test can find it."""
    return f"import ctypes\nctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)\n"


def test_happy_path_returns_stdout_and_ok():
    result = run_python("print(6 * 7)")
    assert result.ok and result.stdout == "42\n" and result.stderr == ""
    assert result.exit_code == 0 and not result.timed_out and result.killed_by_signal is None
    assert not result.output_truncated and result.wall_time_s > 0


def test_stdin_is_fed_to_the_program():
    result = run_python("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))",
                        stdin="1 2 3\n4\n")
    assert result.ok and result.stdout.strip() == "10"


def test_batch_runs_each_input_in_its_own_sandbox():
    results = run_python_batch("print(int(input()) * 2)", ["1", "21", "not a number"],
                               limits=FAST)
    assert [r.stdout.strip() for r in results[:2]] == ["2", "42"]
    assert results[0].ok and results[1].ok and not results[2].ok
    assert "ValueError" in results[2].stderr


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


def test_scratch_folder_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run_python("open('left_behind.txt', 'w').write('x')\nimport os\nos.mkdir('sub')\n"
                        "os.chmod('sub', 0)\nprint('done')")
    assert result.ok and result.stdout == "done\n"
    assert list(tmp_path.iterdir()) == []


def test_infinite_loop_is_killed_by_the_wall_clock():
    started = time.monotonic()
    result = run_python("while True:\n    pass", limits=SandboxLimits(wall_time_s=1, cpu_time_s=30))
    assert result.timed_out and not result.ok
    assert time.monotonic() - started < 30
    assert "timed out" in result.describe_failure()


def test_sleeping_program_is_killed_by_the_wall_clock():
    result = run_python("import time\ntime.sleep(60)", limits=SandboxLimits(wall_time_s=0.5))
    assert result.timed_out and result.wall_time_s < 3


def test_busy_loop_is_killed_by_the_cpu_limit():
    result = run_python("while True:\n    pass", limits=SandboxLimits(wall_time_s=20, cpu_time_s=1))
    assert not result.timed_out and not result.ok
    assert result.killed_by_signal is not None and result.wall_time_s < 8


def test_memory_bomb_is_contained():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for code in ("x = bytearray(8 * 1024 ** 3)",
                 "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 ** 2))"):
        result = run_python(code, limits=SandboxLimits(wall_time_s=10, memory_mb=256))
        assert not result.ok and not result.timed_out
        assert "MemoryError" in result.stderr or result.killed_by_signal is not None
    growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert growth_kib < 64 * 1024


def test_bounded_fork_bomb_is_limited_and_the_whole_group_killed():
    marker = f"sbxfork{os.getpid() % 100000}"
    code = _name_self(marker) + (
        "import os, time\nforked = 0\n"
        "for _ in range(200):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        continue\n"
        "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "    forked += 1\n"
        "print('forked', forked, flush=True)\ntime.sleep(60)\n")
    limits = SandboxLimits(wall_time_s=2, max_processes=16)
    result = run_python(code, limits=limits)
    assert result.timed_out, result
    forked = int(result.stdout.split()[1])
    if sandbox_capabilities().process_limit == "none":
        assert forked == 200  # root without a pids cgroup: only the wall clock contains it
    else:
        assert forked < limits.max_processes
    _assert_all_gone(marker)


@pytest.mark.skipif(sandbox_capabilities().process_limit == "none",
                    reason="no enforceable process limit on this host (root, no pids cgroup)")
def test_real_fork_bomb_is_contained():
    marker = f"sbxbomb{os.getpid() % 100000}"
    code = _name_self(marker) + (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    started = time.monotonic()
    result = run_python(code, limits=SandboxLimits(wall_time_s=1.5, cpu_time_s=5,
                                                   max_processes=12))
    assert result.timed_out and time.monotonic() - started < 30
    _assert_all_gone(marker)


def test_background_children_do_not_outlive_the_run():
    caps = sandbox_capabilities()
    marker = f"sbxdaemon{os.getpid() % 10000}"
    code = _name_self(marker) + (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
        "print('parent leaves')\n")
    result = run_python(code, limits=FAST)
    assert result.ok and not result.timed_out and result.wall_time_s < 2.5
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
    assert "File too large" in result.stderr or result.killed_by_signal is not None


def test_host_environment_is_invisible(monkeypatch):
    secret = "s3cr3t-token-value-for-the-sandbox-test"
    monkeypatch.setenv("MY_SECRET_TOKEN", secret)
    code = "import os\nprint(sorted(os.environ))\nprint(os.environ.get('MY_SECRET_TOKEN'))\n"
    result = run_python(code)
    assert result.ok and secret not in result.stdout
    assert "MY_SECRET_TOKEN" not in result.stdout.splitlines()[0]
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
        result = run_python(code, limits=SandboxLimits(max_output_bytes=1024 * 1024))
    finally:
        holder.kill()
        holder.wait()
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
        result = run_python(code, limits=FAST)
    assert result.ok and result.network_isolated
    assert result.stdout.startswith("blocked"), result.stdout


def test_huge_print_is_truncated_quickly_and_the_host_is_unharmed():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    limits = SandboxLimits(wall_time_s=10)
    started = time.monotonic()
    result = run_python("print('x' * 100_000_000)", limits=limits)
    assert time.monotonic() - started < 30
    assert result.output_truncated
    assert len(result.stdout.encode()) <= limits.max_output_bytes
    assert result.stdout.startswith("xxxx")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024
    assert run_python("print('still fine')").stdout == "still fine\n"


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


def test_capabilities_explain_every_fallback():
    caps = sandbox_capabilities()
    assert caps.process_limit in {"rlimit", "cgroup", "none"}
    assert caps.network_isolated == bool(caps.launcher)
    if os.geteuid() == 0 and caps.run_as_uid is None:
        assert any("RLIMIT_NPROC does not apply" in note for note in caps.notes)


def test_result_ok_property():
    base = dict(stdout="", stderr="", exit_code=0, timed_out=False, killed_by_signal=None,
                output_truncated=False, network_isolated=False, wall_time_s=0.1)
    assert SandboxResult(**base).ok
    assert not SandboxResult(**{**base, "exit_code": 2}).ok
    assert not SandboxResult(**{**base, "timed_out": True}).ok
    assert not SandboxResult(**{**base, "exit_code": None}).ok
