"""Process supervision, shared by both launchers and the batch harness: a run's uid and scratch
folder, then start one sandboxed process, enforce its wall clock, kill its whole process group,
reap it and read its output back. It knows no launcher: each builds its own argv and hands it
to :func:`execute` (so the probes and the runs of a launcher use the same code, with no import
back into :mod:`~pettingllms_envs.sandbox.runner`).

What each run gets from here:

* A scrubbed environment: ``PATH=/usr/bin:/bin``, ``LANG=C.UTF-8``, ``PYTHONHASHSEED=0``,
  ``PYTHONDONTWRITEBYTECODE=1``, ``HOME=<scratch>`` and ``*_NUM_THREADS=1`` (so numpy/BLAS do not
  spawn one thread per core, which would eat the process budget). Nothing else is inherited.
* Resource limits set in ``preexec_fn``: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_NOFILE,
  RLIMIT_FSIZE, RLIMIT_CORE=0 (soft = hard, so the code cannot raise them).
* A wall-clock timeout: the whole process group is SIGKILLed (and the cgroup, if any, emptied).
  The group is killed after *every* run, so background children never outlive it.
* Output goes to files the parent opened (not pipes: a 100 MB print cannot fill our memory or
  deadlock us); RLIMIT_FSIZE bounds them and only ``max_output_bytes`` are read back, with the
  random scratch path rewritten to ``/sandbox`` so identical programs give identical text.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import resource
import select
import signal
import subprocess
import time
import tempfile
from typing import Callable

from .capabilities import SandboxCapabilities
from .cleanup import remove_tree
from .results import TAIL_BYTES, SandboxLimits, SandboxResult

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"

#: The script's name in a run's scratch folder (its cwd), for every launcher.
SCRIPT_NAME = "solution.py"
_UID_BASE = 2_000_000  # per-run uids are drawn above this; no real account lives there
_UID_SPAN = 1_000_000
#: Numbers per-run names in this host process (the uids of :func:`next_uid`, the cgroups of
#: :mod:`.cgroups`).
_run_counter = itertools.count()


def next_run_number() -> int:
    """A number no other run of this host process had (with the pid: a unique per-run name)."""
    return next(_run_counter)


def next_uid() -> int:
    """A fresh host uid for one run (root hosts): its own process budget, no signals to or
    from another run, none of root's files. Drawn above any real account."""
    return _UID_BASE + (os.getpid() * 4096 + next_run_number()) % _UID_SPAN


@dataclasses.dataclass(frozen=True)
class Exit:
    """How a supervised process ended (:func:`execute`)."""

    returncode: int
    timed_out: bool
    wall_time_s: float
    cpu_time_s: float


class StartError(Exception):
    """The sandboxed process could not be started at all."""


@dataclasses.dataclass(frozen=True)
class PipedStdio:
    """Pipe ends that replace a run's stdin and stdout files (:mod:`.pair`): the run reads
    ``stdin_fd`` and writes ``stdout_fd``, its :attr:`SandboxResult.stdout` stays empty, and
    ``on_started`` is called once its process start was tried."""

    stdin_fd: int
    stdout_fd: int
    on_started: Callable[[], None]


def not_started(message: str, caps: SandboxCapabilities) -> SandboxResult:
    """The result of a run whose program never ran (``exit_code=None``: "could not start")."""
    return SandboxResult("", message, None, False, None, False, caps.network_isolated, 0.0,
                         filesystem_readonly=caps.filesystem_readonly)


def make_workspace(code: str, uid: int | None) -> tuple[str, str]:
    """A private base folder holding ``work/solution.py`` (the scratch folder, owned by ``uid``
    when given); returns ``(base, scratch)``. The caller removes ``base`` with
    :func:`~pettingllms_envs.sandbox.cleanup.remove_tree`."""
    base = tempfile.mkdtemp(prefix="pettingllms-sbx-")
    os.chmod(base, 0o711)  # a dropped uid may traverse to its scratch folder, not list ours
    try:
        scratch = os.path.join(base, "work")
        os.mkdir(scratch, 0o700)
        with open(os.path.join(scratch, SCRIPT_NAME), "w", encoding="utf-8",
                  errors="surrogatepass") as handle:
            handle.write(code)
        if uid is not None:
            os.chown(scratch, uid, uid)
            os.chown(os.path.join(scratch, SCRIPT_NAME), uid, uid)
    except BaseException:
        remove_tree(base)
        raise
    return base, scratch


def execute(argv: list[str], *, stdin, stdout, stderr, cwd: str, uid: int | None,
             rlimits: SandboxLimits, wall_time_s: float, caps: SandboxCapabilities,
             cgroup: str | None, probing: bool = False, pass_fds: tuple[int, ...] = (),
             extra_cgroups: tuple[str, ...] = (), on_started=None,
             extra_env: dict[str, str] | None = None) -> Exit:
    """Start ``argv`` under ``rlimits`` (as ``uid``, in ``cgroup``), wait at most
    ``wall_time_s``, kill its whole process group, reap it. Raises :class:`StartError`.

    ``on_started`` (no arguments) is called once the start was tried, whether or not it
    worked: a caller that handed the process pipe ends closes its own copies then, so the
    other side sees end-of-file when this process exits. ``extra_env`` is added to the
    scrubbed environment (a task's ``PYTHONPATH``)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd,
            env={**scrubbed_env(cwd), **(extra_env or {})}, start_new_session=True,
            close_fds=True, pass_fds=pass_fds,
            preexec_fn=_make_preexec(rlimits, [os.path.join(c, "cgroup.procs")
                                               for c in (cgroup, *extra_cgroups) if c]),
            user=uid, group=uid, extra_groups=[] if uid is not None else None)
    except (OSError, subprocess.SubprocessError) as exc:
        (logger.debug if probing else logger.warning)(
            "sandbox could not start %s: %r", argv[0], exc)
        raise StartError(str(exc)) from exc
    finally:
        if on_started is not None:
            on_started()
    exited = _wait_without_reaping(proc.pid, wall_time_s)
    if not exited and "--fork" in caps.launcher:
        _kill_namespace_init(proc.pid)
    _kill_group(proc.pid)  # leader not reaped yet, so its group id cannot be reused
    returncode, cpu = _reap(proc)
    return Exit(returncode, not exited, time.monotonic() - started, cpu)


def _reap(proc: subprocess.Popen) -> tuple[int, float]:
    """Reap ``proc``; returns its exit code (``-signal`` if killed) and the CPU seconds of it
    and its reaped descendants (``wait4``'s rusage)."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere; no usage to report
        return proc.wait(), 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def python_flags(caps: SandboxCapabilities | None = None) -> list[str]:
    """The interpreter flags of a run. -s: no user site; -B: no .pyc. Under bubblewrap the
    site-packages folders are empty mounts, so ``site`` runs (``exit()`` and ``quit()`` exist) and adds nothing. Elsewhere the
    host's site-packages are readable, so -S keeps ``site`` from putting them on ``sys.path``
    (a program may still read them, or add them itself: see docs/sandbox.md). Not ``-I``:
    it implies ``-E``, which would ignore ``PYTHONHASHSEED=0`` and a task's ``PYTHONPATH``;
    the environment is scrubbed by us anyway. (Not -P: the interpreter may be older than
    3.11, and the script folder it would keep off sys.path is the scratch folder anyway.)"""
    if caps is not None and caps.launcher_name == "bubblewrap":
        return ["-s", "-B"]
    return ["-S", "-s", "-B"]


def scrubbed_env(home: str) -> dict[str, str]:
    """A run's whole environment (module docstring): nothing of the host's is inherited."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": home}
    env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def _make_preexec(limits: SandboxLimits, cgroup_procs: list[str]):
    """Build the child-side hook. It only issues syscalls (no imports, no locks), because
    ``preexec_fn`` runs between fork and exec, where a multi-threaded parent's locks may be held."""
    pairs = _rlimit_pairs(limits)
    procs_paths = [path.encode() for path in cgroup_procs]
    setrlimit, os_open, os_write, os_close, getpid = (
        resource.setrlimit, os.open, os.write, os.close, os.getpid)

    def preexec() -> None:
        for procs_path in procs_paths:
            fd = os_open(procs_path, os.O_WRONLY)
            try:
                os_write(fd, b"%d" % getpid())
            finally:
                os_close(fd)
        for res, pair in pairs:
            setrlimit(res, pair)

    return preexec


def _rlimit_pairs(limits: SandboxLimits) -> list[tuple[int, tuple[int, int]]]:
    cpu = max(1, math.ceil(limits.cpu_time_s))
    wanted = [
        # soft == hard: SIGKILL exactly at the limit. SIGXCPU (soft < hard) would be ignored by
        # a program that is pid 1 of its namespace, and may be caught by a hostile one.
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024),
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_NOFILE, limits.max_open_files),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes),
        (resource.RLIMIT_CORE, 0),
    ]
    pairs = []
    for res, value in wanted:  # never ask for more than the host's hard limit allows
        host_hard = resource.getrlimit(res)[1]
        if host_hard != resource.RLIM_INFINITY:
            value = min(value, host_hard)
        pairs.append((res, (int(value), int(value))))
    return pairs


def _wait_without_reaping(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` exits or ``timeout`` passes; True if it exited. Leaves it a zombie."""
    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    ready, _, _ = select.select([pidfd], [], [], remaining)
                except InterruptedError:
                    continue
                return bool(ready)
        finally:
            os.close(pidfd)
    pause = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _kill_namespace_init(launcher_pid: int) -> None:
    """Kill the program (pid 1 of its namespace, the child of ``unshare --fork``) *before* its
    parent, so ``unshare`` reaps it and the namespace's teardown. Killing both at once would
    orphan the program to the host's init, which in a container may never reap zombies."""
    try:
        with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children", encoding="ascii") as fh:
            children = [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return
    for child in children:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _wait_without_reaping(launcher_pid, 2.0)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_output(path: str, cap: int) -> tuple[bytes, int, bytes]:
    """The first ``cap`` bytes of a file, its size and its last :data:`TAIL_BYTES` bytes."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(cap)
            if size <= cap:
                return head, size, head[-TAIL_BYTES:]
            handle.seek(max(cap, size - TAIL_BYTES))
            return head, size, handle.read(TAIL_BYTES)
    except OSError:
        return b"", 0, b""
