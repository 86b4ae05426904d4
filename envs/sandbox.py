"""Run untrusted Python (LLM-written programs) in a throw-away, resource-limited subprocess.

Threat model
------------
The code comes from a model being trained. It is mostly honest but buggy (infinite loops, huge
allocations, 100 MB prints, accidental fork loops) and sometimes "hostile by reward hacking"
(reading the trainer's environment variables, using the network, writing outside its folder,
leaving background processes behind). In that order we guarantee: the host process and the
machine survive; a run ends within its wall-clock budget and leaves no process behind; the code
cannot read the host's environment, reach the network or write outside its own folders (where
the OS allows); runs are reproducible (fixed hash seed, no bytecode files). This is *not* a
defence against a determined attacker with a kernel exploit, and where privileges cannot be
dropped (a root host whose interpreter lives in a folder other users cannot read, e.g.
``/root/.pyenv``), the code keeps root's *file* permissions inside its user namespace (to read
with; writes are stopped by the read-only file system where it is available): use a container
or VM for real adversaries.

Mechanisms (what each run gets; the OS-dependent ones are probed once per interpreter and
cached, see :func:`sandbox_capabilities`)
------------------------------------------------------------------------------------------------
* One subprocess per run, ``python -s -B solution.py`` in a fresh scratch folder (its cwd and
  ``HOME``), deleted afterwards. Not ``-I``: ``-I`` implies ``-E``, which would ignore the
  ``PYTHONHASHSEED=0`` we set; since we pass a scrubbed environment ourselves, ``-E`` buys nothing.
* A scrubbed environment: ``PATH=/usr/bin:/bin``, ``LANG=C.UTF-8``, ``PYTHONHASHSEED=0``,
  ``PYTHONDONTWRITEBYTECODE=1``, ``HOME=<scratch>`` and ``*_NUM_THREADS=1`` (so numpy/BLAS do not
  spawn one thread per core, which would eat the process budget). Nothing else is inherited.
* Resource limits set in ``preexec_fn``: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_NOFILE,
  RLIMIT_FSIZE, RLIMIT_CORE=0 (soft = hard, so the code cannot raise them).
* Privilege drop: on a root host, if the interpreter runs as an unprivileged uid, each run gets
  its own uid (so RLIMIT_NPROC is real and per run, and root's files are out of reach). Linux
  exempts uid 0 from RLIMIT_NPROC; when we stay root, a v1 ``pids`` cgroup per run enforces
  ``max_processes`` instead if one is writable, else the process budget is *not* enforced and
  :func:`sandbox_capabilities` says so (``process_limit == "none"``). Off root, RLIMIT_NPROC
  counts *all* processes of the user, not only the sandbox's.
* Namespaces through util-linux ``unshare`` when it works here: a user namespace (no host
  capabilities), a network namespace, a pid namespace that dies with the program
  (``--kill-child``; the program is its pid 1, so signals it sends itself without a handler are
  ignored) and a private ``/proc`` (host processes and their environments are invisible). The
  first working variant wins (the probe runs a program that must fail to connect to
  127.0.0.1); if none works the code runs without them, see "Network" below.
* A read-only view of the host's file system, where the launcher gives a mount namespace: only
  the run's own folders can be written, see "File system" below.
* A wall-clock timeout: the whole process group is SIGKILLed (and the cgroup, if any, emptied).
  The group is killed after *every* run, so background children never outlive it.
* Output goes to files the parent opened (not pipes: a 100 MB print cannot fill our memory or
  deadlock us); RLIMIT_FSIZE bounds them and only ``max_output_bytes`` are read back, with the
  random scratch path rewritten to ``/sandbox`` so identical programs give identical text.

Network
-------
What cuts the network is the *network namespace* (``unshare --net``): the program's namespace
holds only a loopback interface that is down, so every ``connect`` fails with ENETUNREACH (the
host's own loopback services are unreachable too) and DNS cannot resolve. Nothing else (no
seccomp filter, no firewall rule) blocks sockets. Where no ``unshare`` variant works (no
binary, or user namespaces disabled, as in many containers without ``CAP_SYS_ADMIN``) programs
run *with* the host's network: every result then says ``network_isolated=False`` and
:attr:`SandboxCapabilities.notes` says "network NOT isolated" and why; callers that need
isolation must check one of them. A root host can isolate without user namespaces (the plain
``unshare --net`` variants); an unprivileged host needs unprivileged user namespaces
(``kernel.unprivileged_userns_clone=1`` / ``user.max_user_namespaces > 0``).

File system
-----------
Inside the launcher's mount namespace a small trusted preamble (``python -I -S -B -c
<_FS_PREAMBLE>``, run as the namespace's root between ``unshare`` and the program) bind-mounts
each folder the run must write onto itself (the scratch folder; for a batch also the harness's
io folder), so they are mounts of their own, then remounts *every* other visible mount
(``/``, ``/tmp`` if separate, ``/proc``, ``/sys`` with the cgroup file systems, ``/dev``, ...)
``ro,nosuid,nodev``, repeating each mount's flags that the user namespace locked (atime,
``nosuid``, ``noexec``, as listed in ``/proc/self/mountinfo``). The harmless devices
(``/dev/null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty``) are bind-mounted onto
themselves first, so they keep working (a device file's own writes are not stopped by a
read-only mount); ``/dev/shm`` gets a private tmpfs of ``max_file_bytes`` (POSIX semaphores,
hence ``multiprocessing``, still work; it vanishes with the run, and a batch's harness empties
it before each input). Then the preamble drops every capability for good (bounding,
inheritable and ambient sets), so the program, still uid 0 of its user namespace, can neither
remount, unmount nor override file permissions (a nested user namespace it may create gets a
copy whose read-only flags the kernel locks), and ``exec``-s the program: same pid (pid 1 of
its namespace), argv, environment and file descriptors. The stdin/stdout/stderr files the host
opened stay writable (an open file keeps the host's mount), ``/dev/stdout`` included. Writes
elsewhere fail with EROFS; ``tempfile`` then falls back to the scratch folder. Nothing is
mounted before ``/`` is made private, and the preamble refuses to run in the host's own mount
namespace, so the host's mounts are never touched. Cost: one more interpreter start (about 30
ms, counted in the program's CPU time) per :func:`run_python` and per batch.

The probe runs a program that must write in its folder, fail with EROFS one level above it and
see an empty bounding set; where it fails (or there is no mount namespace) runs go on as
before, with a writable file system: :attr:`SandboxCapabilities.filesystem_readonly` and every
result's ``filesystem_readonly`` are False and the notes say "file system NOT read-only" and
why. If the preamble fails on a later run, the program does not run (``exit_code=None``, "could
not start" with the reason).

Many inputs: :func:`run_python_batch`
-------------------------------------
Running one program on N test inputs with :func:`run_python` pays N sandbox starts (namespaces
plus a fresh interpreter, ~0.1-0.2 s each). :func:`run_python_batch` pays one: the sandboxed
process is a small trusted *harness* (``envs/sandbox_harness.py``, run with ``python -c``)
inside the same namespaces, read-only view (behind the same preamble), rlimits, uid and pids
cgroup as a single run. The harness compiles the program once and, per input, forks a child (a
fresh copy of an interpreter that has run nothing of the program) that gets its own
stdin/stdout/stderr files, its own RLIMIT_CPU, FSIZE and NOFILE, a fresh ``__main__`` module,
``sys.argv == ["solution.py"]`` and a scratch folder reset to hold only ``solution.py``. The
harness enforces the per-input wall clock, then kills every process the input left (``kill(-1)``
from pid 1 of the pid namespace, or, without one, a subreaper walk of its children) and appends
one record (exit status or signal, timeout, CPU seconds, output sizes, the first
``max_output_bytes`` of each stream and the last bytes of stderr) to its own stdout, a file the
host opened. Inputs reach the harness through an unnamed file; each input's stdin, stdout and
stderr files are unlinked as soon as they are open. The batch as a whole has a wall clock of
``10 s + N * (wall_time_s + 1 s)``; the host still kills the process group and the cgroup at the
end. If the harness dies (or the batch clock runs out) the input that was running is reported as
killed (SIGKILL; timed out if the batch clock ran out), the harness is started again for the
inputs after it, and inputs for which no time is left are reported as not run
(``exit_code=None``): never an exception, never a hang. A harness that cannot run at all (e.g.
an interpreter too old for it) falls back to one :func:`run_python` per input.

Per-input results match :func:`run_python` on the same program and input, with these known
differences: the program is *not* pid 1 of its pid namespace (so ``os.getpid() != 1`` and a
signal it sends itself without a handler does kill it, e.g. ``os.abort()`` gives SIGABRT rather
than the SIGSEGV a pid 1 gets); it runs below the harness's own frame and ``exec`` call, so
``RecursionError`` comes two levels earlier and ``sys._getframe(1)`` at top level finds a frame;
its address space starts from the harness's (about 1.5 MB more than a bare interpreter's, out
of ``memory_mb``); the objects it inherits are frozen (``gc.freeze()``, to spare copy-on-write
pages), so ``gc.get_objects()`` does not list them; ``RLIMIT_NPROC`` reads one higher (the
harness is one more process of the user; the input's own budget is the same); its wall clock
starts at the fork, without the sandbox start-up. A program that fails to compile, or compiles
with a warning, is not forked but ``exec``-ed fresh (``python -s -B solution.py``) per input,
so its error text is exactly the interpreter's.

Limit hits (``SandboxResult.limit_hit``)
----------------------------------------
Best-effort, from what the host can observe after the run; the first rule that matches wins:

* ``"wall_time"``: the wall clock killed the run (``timed_out``); exact.
* ``"cpu_time"``: killed by SIGKILL or SIGXCPU after at least the CPU budget (``getrusage`` of
  the program and its reaped children); exact for the program's main process.
* ``"memory"``: the run failed and the last line of stderr mentions ``MemoryError`` (numpy's
  ``_ArrayMemoryError`` too), ``[Errno 12]`` or "Cannot allocate memory". RLIMIT_AS makes
  allocations fail rather than kill; a program that swallows its MemoryError is not detected.
* ``"processes"``: where a pids cgroup enforces the budget, its ``pids.events`` "max" counter
  rose during the run (exact, even when the program caught the error). Elsewhere: the run
  failed and the last line of stderr shows EAGAIN from ``fork`` (``BlockingIOError: [Errno
  11]``) or "can't start new thread"; a non-blocking read failing with EAGAIN can be mistaken
  for it.
* ``"file_size"``: the run failed and the last line of stderr shows ``[Errno 27]`` / "File too
  large" (Python ignores SIGXFSZ, so RLIMIT_FSIZE surfaces as EFBIG), or SIGXFSZ killed it.
  Printing more than ``max_file_bytes`` lands here: stdout is a file under that limit.
* ``"output"``: nothing above, but stdout or stderr was cut to ``max_output_bytes`` (also for
  runs that are ``ok``).

Stderr is read at its end for this, even when the part returned is cut; a program that writes
after its fatal error, or forges such a line, misleads the guess (it never changes ``ok``).

Residual risks (accepted for LLM-written code, not for adversaries): the file system is the
host's to read (world-readable files, and without a privilege drop root's too); where the
read-only view is unavailable it is also writable wherever the run's uid may write (``/tmp``;
without a privilege drop, all of root's files) and a deliberately hostile program running as
(namespaced) root could leave its pids cgroup; with it, the scratch folder (and a batch's io
folder) and the private ``/dev/shm`` stay writable, bounded per file and, for ``/dev/shm``, in
total. Total disk use in the scratch folder is bounded only per file and by the wall clock.
System V IPC is the host's (no IPC namespace): a program can create shared memory segments,
semaphores or message queues that outlive it. Within
one :func:`run_python_batch` call the inputs share a user and namespaces with the harness: a
program that deliberately inspects the harness (its ``/proc/1/fd`` or memory) could read the
other inputs or forge the records of later inputs. Without a pid namespace, a process that an
input detaches from the harness's reach (``setsid`` plus a double fork while the harness cannot
walk its children) may live until the batch ends.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import math
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

logger = logging.getLogger(__name__)

__all__ = ["LIMIT_HITS", "SandboxCapabilities", "SandboxLimits", "SandboxResult", "run_python",
           "run_python_batch", "sandbox_capabilities"]

#: Environment variable naming an interpreter to run sandboxed code with, e.g. a system Python
#: that an unprivileged uid can execute (enables the privilege drop on root hosts).
PYTHON_ENV_VAR = "PETTINGLLMS_SANDBOX_PYTHON"
_SCRIPT_NAME = "solution.py"
#: What the scratch folder's path reads as in returned stdout/stderr.
SCRATCH_PLACEHOLDER = "/sandbox"
#: Values of :attr:`SandboxResult.limit_hit` (see the module docstring for how each is detected).
LIMIT_HITS = ("wall_time", "cpu_time", "memory", "file_size", "processes", "output")
_UID_BASE = 2_000_000  # per-run uids are drawn above this; no real account lives there
_UID_SPAN = 1_000_000
_run_counter = itertools.count()
_UNSHARE_SIGKILL = b"unshare: sigprocmask unblock failed: Invalid argument\n"
_TAIL_BYTES = 2048  # end of stderr kept for limit detection
_CPU_SLACK_S = 0.1
_BATCH_START_S = 10.0  # batch wall clock: start-up allowance ...
_BATCH_CASE_SLACK_S = 1.0  # ... plus, per input, its wall clock and this much for bookkeeping
_LIMIT_WORDS = {"wall_time": "wall-clock limit", "cpu_time": "CPU time limit",
                "memory": "memory limit", "file_size": "file size limit",
                "processes": "process limit", "output": "output limit"}
_FAILURE_PATTERNS = (
    ("memory", re.compile(r"MemoryError|\[Errno 12\]|Cannot allocate memory")),
    ("file_size", re.compile(r"\[Errno 27\]|File too large")),
    ("processes", re.compile(r"BlockingIOError: \[Errno 11\]|can't start new thread")),
)


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Budget of one sandboxed run.

    Attributes:
        wall_time_s: wall-clock seconds before the process group is killed (``timed_out``).
        cpu_time_s: CPU seconds per process (RLIMIT_CPU, rounded up to whole seconds; the
            kernel sends SIGKILL at the limit).
        memory_mb: address-space limit per process in MiB (RLIMIT_AS); allocations beyond it
            fail (Python raises ``MemoryError``).
        max_processes: processes/threads the run may hold at once (RLIMIT_NPROC or a pids
            cgroup; see the module docstring for when neither is available).
        max_open_files: file descriptors per process (RLIMIT_NOFILE).
        max_file_bytes: largest file the program may write, stdout/stderr included (RLIMIT_FSIZE).
        max_output_bytes: bytes of stdout and of stderr read back into the result.
    """

    wall_time_s: float = 5.0
    cpu_time_s: float = 5.0
    memory_mb: int = 512
    max_processes: int = 32
    max_open_files: int = 64
    max_file_bytes: int = 16 * 1024 * 1024
    max_output_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SandboxLimits.{field.name} must be a positive number, "
                                 f"got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"SandboxLimits.{field.name} must be finite, got {value!r}")
            if field.name not in ("wall_time_s", "cpu_time_s"):
                if value != int(value):
                    raise ValueError(f"SandboxLimits.{field.name} must be a whole number, "
                                     f"got {value!r}")
                object.__setattr__(self, field.name, int(value))  # 1e6 (YAML) -> 1000000
        if self.max_open_files < 8:
            raise ValueError("SandboxLimits.max_open_files must be >= 8 (the interpreter needs some)")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """Outcome of one run. ``stdout``/``stderr`` are cut to ``max_output_bytes`` and decoded
    with ``errors="replace"``; ``exit_code`` is negative (``-signal``) when a signal killed the
    program and ``None`` when it could not be started (or, in a batch, was not run).
    ``limit_hit`` names the limit the run ran into, one of :data:`LIMIT_HITS` or ``None``
    (best-effort; the module docstring says how each is detected). ``network_isolated`` and
    ``filesystem_readonly`` say whether the run had those protections (see
    :class:`SandboxCapabilities`)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed_by_signal: int | None
    output_truncated: bool
    network_isolated: bool
    wall_time_s: float
    limit_hit: str | None = None
    filesystem_readonly: bool = False

    def __post_init__(self) -> None:
        if self.limit_hit is not None and self.limit_hit not in LIMIT_HITS:
            raise ValueError(f"SandboxResult.limit_hit must be None or one of {LIMIT_HITS}, "
                             f"got {self.limit_hit!r}")

    @property
    def ok(self) -> bool:
        """The program exited normally with status 0 within its time budget."""
        return self.exit_code == 0 and not self.timed_out

    def describe_failure(self, max_chars: int = 400) -> str:
        """A short human-readable reason why the run is not ``ok`` ("" when it is)."""
        if self.ok:
            return ""
        limit = _LIMIT_WORDS.get(self.limit_hit) if self.limit_hit != "output" else None
        if self.timed_out:
            reason = "timed out (wall-clock limit)"  # no measured time: keep text reproducible
        elif self.killed_by_signal is not None:
            name = _signal_name(self.killed_by_signal)
            hint = limit or {"SIGXCPU": "CPU time limit", "SIGKILL": "a resource limit"}.get(name)
            reason = f"killed by {name}" + (f" ({hint})" if hint else "")
        elif self.exit_code is None:
            reason = "could not start"
        else:
            reason = f"exit code {self.exit_code}" + (f" ({limit})" if limit else "")
        tail = self.stderr.strip()[-max_chars:]
        return f"{reason}: {tail}" if tail else reason


@dataclasses.dataclass(frozen=True)
class SandboxCapabilities:
    """What isolation this host allows, as probed (see the module docstring).

    ``launcher`` is the command prefix (an ``unshare`` invocation or empty); ``run_as_uid`` is
    ``None`` when runs keep the host uid; ``process_limit`` is ``"rlimit"``, ``"cgroup"`` or
    ``"none"``; ``filesystem_readonly`` is True when runs see the host's file system read-only
    (all but their own folders, see "File system" in the module docstring); ``notes``
    explains every fallback taken.
    """

    python: str
    launcher: tuple[str, ...]
    network_isolated: bool
    pid_namespace: bool
    run_as_uid: int | None
    process_limit: str
    cgroup_root: str | None
    notes: tuple[str, ...]
    filesystem_readonly: bool = False


# ---------------------------------------------------------------------------------- public API
def run_python(code: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
               python: str | None = None) -> SandboxResult:
    """Run ``code`` as a Python program on ``stdin`` inside the sandbox and report the outcome.

    ``python`` overrides the interpreter (default: ``$PETTINGLLMS_SANDBOX_PYTHON`` or
    ``sys.executable``). Never raises for anything the program does; only a host that cannot
    create a temporary folder makes it raise.
    """
    caps = sandbox_capabilities(python)
    return _run(code, stdin, limits, caps)


def run_python_batch(code: str, stdins: Sequence[str], *, limits: SandboxLimits = SandboxLimits(),
                     python: str | None = None) -> list[SandboxResult]:
    """Run one program on many inputs (e.g. test cases): one result per input, in order.

    Each input gets ``limits`` (wall clock, CPU, memory, processes, files, output) and a fresh
    process, scratch folder and stdin of its own, so one hanging or crashing input cannot
    starve or poison the others; the results mean what :func:`run_python` reports for the same
    program and input. Inputs run one after another in a single sandbox (a harness that forks
    per input, see the module docstring), which costs one sandbox start for the whole batch.
    Never raises for anything the program does.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if isinstance(stdins, (str, bytes)):
        raise TypeError("stdins must be a sequence of inputs, not a single string")
    inputs = [str(s).encode("utf-8", errors="replace") for s in stdins]
    if not inputs:
        return []
    caps = sandbox_capabilities(python)
    results: dict[int, SandboxResult] = {}
    pending = list(range(len(inputs)))
    deadline = time.monotonic() + _batch_budget_s(limits, len(inputs))
    failure = "sandbox: not run: the batch ran out of time before this input"
    while pending:
        budget = min(deadline - time.monotonic(), _batch_budget_s(limits, len(pending)))
        if budget <= 0:
            break
        outcome = _run_harness(code, [(i, inputs[i]) for i in pending], limits, caps, budget)
        if outcome.start_error is not None:
            failure = outcome.start_error
            break
        results.update(outcome.results)
        pending = [i for i in pending if i not in results]
        if not pending or outcome.timed_out:
            break
        if not outcome.results:  # the harness cannot run here at all: one sandbox per input
            logger.warning("sandbox batch harness did not run (%s); running the %d inputs one "
                           "sandbox each", outcome.diagnostics or "no message", len(pending))
            results.update({i: _run(code, inputs[i].decode("utf-8"), limits, caps)
                            for i in pending})
            break
        logger.warning("sandbox batch harness stopped early (%s); restarting it for the %d "
                       "remaining inputs", outcome.diagnostics or "no message", len(pending))
    for i in range(len(inputs)):
        if i not in results:
            results[i] = SandboxResult("", failure, None, False, None, False,
                                       caps.network_isolated, 0.0,
                                       filesystem_readonly=caps.filesystem_readonly)
    return [results[i] for i in range(len(inputs))]


_CAPS_LOCK = threading.Lock()
_CAPS_CACHE: dict[str, SandboxCapabilities] = {}


def sandbox_capabilities(python: str | None = None) -> SandboxCapabilities:
    """Probe (once per interpreter, then cached) which isolation mechanisms work here."""
    exe = python or os.environ.get(PYTHON_ENV_VAR) or sys.executable
    with _CAPS_LOCK:
        if exe not in _CAPS_CACHE:
            _CAPS_CACHE[exe] = _probe(exe)
            logger.info("sandbox capabilities: %s", _CAPS_CACHE[exe])
        return _CAPS_CACHE[exe]


# ---------------------------------------------------------------------------------- one run
@dataclasses.dataclass(frozen=True)
class _Exit:
    returncode: int
    timed_out: bool
    wall_time_s: float
    cpu_time_s: float


class _StartError(Exception):
    """The sandboxed process could not be started at all."""


def _run(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities,
         *, uid: int | None = None, probing: bool = False) -> SandboxResult:
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if uid is None and caps.run_as_uid is not None:
        uid = _next_uid()  # a fresh uid per run: its own process budget, no cross-run signals
    base, scratch = _make_workspace(code, uid)
    cgroup = None
    try:
        stdin_path = os.path.join(base, "stdin")
        with open(stdin_path, "wb") as handle:
            handle.write(str(stdin).encode("utf-8", errors="replace"))
        cgroup = _open_cgroup(caps, limits.max_processes + 1)  # +1: the `unshare --fork` parent
        argv = _sandbox_argv(caps, [caps.python, *_python_flags(), _SCRIPT_NAME], [scratch],
                             limits)
        out_path, err_path = os.path.join(base, "stdout"), os.path.join(base, "stderr")
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, \
                open(err_path, "wb") as ferr:
            try:
                done = _execute(argv, stdin=fin, stdout=fout, stderr=ferr, cwd=scratch, uid=uid,
                                rlimits=limits, wall_time_s=limits.wall_time_s, caps=caps,
                                cgroup=cgroup, probing=probing)
            except _StartError as exc:
                return _not_started(f"sandbox could not start: {exc}", caps)
        pids_max_hit = _cgroup_max_hit(cgroup) if cgroup else None
        cap = limits.max_output_bytes
        out, out_size, _ = _read_output(out_path, cap)
        err, err_size, tail = _read_output(err_path, cap)
        if _fs_setup_failed(caps, done.returncode, err):
            return _not_started(f"sandbox could not start: {_decode(err, scratch, base).strip()}",
                                caps)
        returncode = done.returncode
        if "--fork" in caps.launcher and returncode == 1 and tail.endswith(_UNSHARE_SIGKILL):
            # `unshare --fork` cannot re-raise SIGKILL on itself (signal(SIGKILL) fails), so
            # a program killed by SIGKILL (CPU limit, OOM) reaches us as this message + exit 1.
            returncode, tail = -signal.SIGKILL, tail[: -len(_UNSHARE_SIGKILL)]
            err_size -= len(_UNSHARE_SIGKILL)
            err = err[:err_size]
        return _make_result(
            out=out, out_size=out_size, err=err, err_size=err_size, tail=tail,
            returncode=returncode, timed_out=done.timed_out, cpu_time_s=done.cpu_time_s,
            wall_time_s=done.wall_time_s, pids_max_hit=pids_max_hit, limits=limits, caps=caps,
            scratch=scratch, base=base)
    finally:
        if cgroup:
            _remove_cgroup(cgroup)
        _remove_tree(base)


def _not_started(message: str, caps: SandboxCapabilities) -> SandboxResult:
    return SandboxResult("", message, None, False, None, False, caps.network_isolated, 0.0,
                         filesystem_readonly=caps.filesystem_readonly)


def _sandbox_argv(caps: SandboxCapabilities, command: list[str], writable: list[str],
                  limits: SandboxLimits) -> list[str]:
    """The command line of one sandboxed process: the launcher, then (where the file system is
    made read-only) the preamble that does so, keeping ``writable`` folders writable, and
    replaces itself with ``command``."""
    if not caps.filesystem_readonly:
        return [*caps.launcher, *command]
    try:
        host_namespace = os.readlink("/proc/self/ns/mnt")
    except OSError:
        host_namespace = "unknown"
    return [*caps.launcher, caps.python, "-I", "-S", "-B", "-c", _FS_PREAMBLE, host_namespace,
            str(max(1 << 12, int(limits.max_file_bytes))), *writable, "--", *command]


def _fs_setup_failed(caps: SandboxCapabilities, returncode: int, stderr_head: bytes) -> bool:
    """Whether the read-only preamble refused to start the program (it never ran)."""
    return caps.filesystem_readonly and returncode == _FS_SETUP_EXIT and \
        stderr_head.startswith(_FS_SETUP_MESSAGE)


def _make_workspace(code: str, uid: int | None) -> tuple[str, str]:
    """A private base folder holding ``work/solution.py``; returns ``(base, scratch)``."""
    base = tempfile.mkdtemp(prefix="pettingllms-sbx-")
    os.chmod(base, 0o711)  # a dropped uid may traverse to its scratch folder, not list ours
    try:
        scratch = os.path.join(base, "work")
        os.mkdir(scratch, 0o700)
        with open(os.path.join(scratch, _SCRIPT_NAME), "w", encoding="utf-8",
                  errors="surrogatepass") as handle:
            handle.write(code)
        if uid is not None:
            os.chown(scratch, uid, uid)
            os.chown(os.path.join(scratch, _SCRIPT_NAME), uid, uid)
    except BaseException:
        _remove_tree(base)
        raise
    return base, scratch


def _execute(argv: list[str], *, stdin, stdout, stderr, cwd: str, uid: int | None,
             rlimits: SandboxLimits, wall_time_s: float, caps: SandboxCapabilities,
             cgroup: str | None, probing: bool = False) -> _Exit:
    """Start ``argv`` under ``rlimits`` (as ``uid``, in ``cgroup``), wait at most
    ``wall_time_s``, kill its whole process group, reap it. Raises :class:`_StartError`."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd,
            env=_scrubbed_env(cwd), start_new_session=True, close_fds=True,
            preexec_fn=_make_preexec(rlimits, cgroup and os.path.join(cgroup, "cgroup.procs")),
            user=uid, group=uid, extra_groups=[] if uid is not None else None)
    except (OSError, subprocess.SubprocessError) as exc:
        (logger.debug if probing else logger.warning)(
            "sandbox could not start %s: %r", argv[0], exc)
        raise _StartError(str(exc)) from exc
    exited = _wait_without_reaping(proc.pid, wall_time_s)
    if not exited and "--fork" in caps.launcher:
        _kill_namespace_init(proc.pid)
    _kill_group(proc.pid)  # leader not reaped yet, so its group id cannot be reused
    returncode, cpu = _reap(proc)
    return _Exit(returncode, not exited, time.monotonic() - started, cpu)


def _reap(proc: subprocess.Popen) -> tuple[int, float]:
    """Reap ``proc``; returns its exit code (``-signal`` if killed) and the CPU seconds of it
    and its reaped descendants (``wait4``'s rusage)."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere; no usage to report
        return proc.wait(), 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def _make_result(*, out: bytes, out_size: int, err: bytes, err_size: int, tail: bytes,
                 returncode: int, timed_out: bool, cpu_time_s: float, wall_time_s: float,
                 pids_max_hit: bool | None, limits: SandboxLimits, caps: SandboxCapabilities,
                 scratch: str, base: str) -> SandboxResult:
    cap = limits.max_output_bytes
    truncated = out_size > cap or err_size > cap
    stderr_tail = _decode(tail, scratch, base)
    return SandboxResult(
        stdout=_decode(out[:cap], scratch, base), stderr=_decode(err[:cap], scratch, base),
        exit_code=returncode, timed_out=timed_out,
        killed_by_signal=-returncode if returncode < 0 else None, output_truncated=truncated,
        network_isolated=caps.network_isolated, wall_time_s=wall_time_s,
        filesystem_readonly=caps.filesystem_readonly,
        limit_hit=_limit_hit(timed_out=timed_out, returncode=returncode,
                             cpu_time_s=cpu_time_s, limits=limits, stderr_tail=stderr_tail,
                             pids_max_hit=pids_max_hit, output_truncated=truncated))


def _limit_hit(*, timed_out: bool, returncode: int, cpu_time_s: float, limits: SandboxLimits,
               stderr_tail: str, pids_max_hit: bool | None, output_truncated: bool) -> str | None:
    """Which limit the run ran into (rules and their limits: module docstring)."""
    if timed_out:
        return "wall_time"
    killer = -returncode if returncode < 0 else None
    if killer in (signal.SIGKILL, signal.SIGXCPU) and \
            cpu_time_s >= math.ceil(limits.cpu_time_s) - _CPU_SLACK_S:
        return "cpu_time"
    if returncode != 0:
        lines = [line for line in stderr_tail.splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        for name, pattern in _FAILURE_PATTERNS:
            if pattern.search(last) and (name != "processes" or pids_max_hit is not False):
                return name
    if killer == signal.SIGXFSZ:
        return "file_size"
    if pids_max_hit:
        return "processes"
    return "output" if output_truncated else None


def _python_flags() -> list[str]:
    # -s: no user site; -B: no .pyc. (Not -P: the interpreter may be older than 3.11, and the
    # script folder it would keep off sys.path is the scratch folder anyway.)
    return ["-s", "-B"]


def _scrubbed_env(home: str) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": home}
    env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def _make_preexec(limits: SandboxLimits, cgroup_procs: str | None):
    """Build the child-side hook. It only issues syscalls (no imports, no locks), because
    ``preexec_fn`` runs between fork and exec, where a multi-threaded parent's locks may be held."""
    pairs = _rlimit_pairs(limits)
    procs_path = cgroup_procs.encode() if cgroup_procs else None
    setrlimit, os_open, os_write, os_close, getpid = (
        resource.setrlimit, os.open, os.write, os.close, os.getpid)

    def preexec() -> None:
        if procs_path is not None:
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


def _read_output(path: str, cap: int) -> tuple[bytes, int, bytes]:
    """The first ``cap`` bytes of a file, its size and its last :data:`_TAIL_BYTES` bytes."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(cap)
            if size <= cap:
                return head, size, head[-_TAIL_BYTES:]
            handle.seek(max(cap, size - _TAIL_BYTES))
            return head, size, handle.read(_TAIL_BYTES)
    except OSError:
        return b"", 0, b""


def _decode(data: bytes, scratch: str, base: str) -> str:
    """Output bytes as text. The random folder names (tracebacks name the script by its
    absolute path) become ``/sandbox`` so identical programs give identical text, which the
    AT-GRPO clone contract needs."""
    text = data.decode("utf-8", errors="replace").replace(scratch, SCRATCH_PLACEHOLDER)
    return text.replace(base, SCRATCH_PLACEHOLDER + "-base")


def _remove_tree(path: str) -> None:
    def retry_writable(func, failed, _exc):  # the program may have chmod-ed its own files
        try:
            os.chmod(os.path.dirname(failed) or failed, 0o700)
            os.chmod(failed, 0o700)
            func(failed)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry_writable)
    if os.path.exists(path):
        logger.warning("sandbox scratch folder %s could not be removed", path)


def _next_uid() -> int:
    return _UID_BASE + (os.getpid() * 4096 + next(_run_counter)) % _UID_SPAN


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# ---------------------------------------------------------------------------------- batches
#: Source of the in-sandbox batch harness (see envs/sandbox_harness.py), run with ``python -c``.
_HARNESS = (Path(__file__).parent / "sandbox_harness.py").read_text(encoding="utf-8")


@dataclasses.dataclass(frozen=True)
class _CaseRecord:
    kind: str
    value: int
    timed_out: bool
    cpu_time_s: float
    wall_time_s: float
    out_size: int
    err_size: int
    pids_max_hit: bool | None
    out: bytes
    err: bytes
    tail: bytes


@dataclasses.dataclass(frozen=True)
class _HarnessOutcome:
    results: dict[int, SandboxResult]
    timed_out: bool
    start_error: str | None
    diagnostics: str


def _batch_budget_s(limits: SandboxLimits, count: int) -> float:
    return _BATCH_START_S + count * (limits.wall_time_s + _BATCH_CASE_SLACK_S)


def _run_harness(code: str, cases: list[tuple[int, bytes]], limits: SandboxLimits,
                 caps: SandboxCapabilities, budget_s: float) -> _HarnessOutcome:
    """One sandbox run of the harness over ``cases`` (``(index, stdin bytes)``)."""
    uid = _next_uid() if caps.run_as_uid is not None else None
    base, scratch = _make_workspace(code, uid)
    cgroup = None
    cap = limits.max_output_bytes
    record_bytes = len(cases) * (2 * cap + _TAIL_BYTES + 256) + 4096
    try:
        io_dir = os.path.join(base, "io")
        os.mkdir(io_dir, 0o700)
        if uid is not None:
            os.chown(io_dir, uid, uid)
        # +2: the `unshare --fork` parent and the harness; each input gets max_processes.
        cgroup = _open_cgroup(caps, limits.max_processes + 2)
        events = os.path.join(cgroup, "pids.events") if cgroup else "-"
        largest = max(len(data) for _, data in cases)
        harness_limits = dataclasses.replace(  # what the per-input children lower again
            limits, cpu_time_s=math.ceil(budget_s) + 1, max_processes=limits.max_processes + 1,
            max_open_files=limits.max_open_files + 8,
            max_file_bytes=max(limits.max_file_bytes, largest, record_bytes))
        shm = _PRIVATE_SHM if caps.filesystem_readonly else "-"  # emptied before each input
        command = [caps.python, *_python_flags(), "-c", _HARNESS, scratch, io_dir, events, shm,
                   str(max(1, math.ceil(limits.cpu_time_s))), str(limits.max_file_bytes),
                   str(limits.max_open_files), str(cap), str(_TAIL_BYTES),
                   repr(limits.wall_time_s), *_python_flags()]
        argv = _sandbox_argv(caps, command, [scratch, io_dir], limits)
        index = " ".join(f"{i}:{len(data)}" for i, data in cases).encode("ascii")
        with tempfile.TemporaryFile(dir=base) as blob, \
                open(os.path.join(base, "records"), "w+b") as records, \
                open(os.path.join(base, "harness-stderr"), "w+b") as diag:
            for handle in (records, diag):  # private to the host (and the harness's fd)
                os.fchmod(handle.fileno(), 0o600)
            blob.write(index + b"\n")
            for _, data in cases:
                blob.write(data)
            blob.flush()
            blob.seek(0)
            try:
                done = _execute(argv, stdin=blob, stdout=records, stderr=diag, cwd=scratch,
                                uid=uid, rlimits=harness_limits, wall_time_s=budget_s, caps=caps,
                                cgroup=cgroup)
            except _StartError as exc:
                return _HarnessOutcome({}, False, f"sandbox could not start: {exc}", "")
            records.seek(0)
            parsed, running = _parse_records(records.read(record_bytes))
            diag.seek(0)
            diag_head = diag.read(4096)
            diagnostics = _decode(diag_head, scratch, base).strip()
        if not parsed and _fs_setup_failed(caps, done.returncode, diag_head):
            return _HarnessOutcome({}, False, f"sandbox could not start: {diagnostics}", "")
        wanted = {i for i, _ in cases}
        results = {i: _case_result(rec, limits, caps, scratch, base)
                   for i, rec in parsed.items() if i in wanted}
        if running in wanted and running not in results:
            # Its processes died with the harness (the namespace's init, or their parent with
            # PR_SET_PDEATHSIG), by SIGKILL.
            why = ("the batch's time budget ran out while this input ran" if done.timed_out
                   else "the batch harness stopped while this input ran")
            results[running] = SandboxResult(
                "", f"sandbox: {why}", -signal.SIGKILL, done.timed_out, signal.SIGKILL, False,
                caps.network_isolated, 0.0, "wall_time" if done.timed_out else None,
                caps.filesystem_readonly)
        if diagnostics:
            logger.warning("sandbox batch harness stderr: %s", diagnostics[-1000:])
        return _HarnessOutcome(results, done.timed_out, None,
                               diagnostics.splitlines()[-1] if diagnostics else "")
    finally:
        if cgroup:
            _remove_cgroup(cgroup)
        _remove_tree(base)


def _parse_records(data: bytes) -> tuple[dict[int, _CaseRecord], int | None]:
    """The harness's records, up to the first incomplete or malformed one (never raises);
    and the index of an input that started without a record, if any."""
    records: dict[int, _CaseRecord] = {}
    running = None
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            break
        fields = data[pos:end].split()
        pos = end + 1
        try:
            if len(fields) == 2 and fields[0] == b"S":
                running = int(fields[1])
                continue
            if len(fields) != 13 or fields[0] != b"R":
                break
            index, kind, value, timed_out = (int(fields[1]), fields[2].decode("ascii"),
                                             int(fields[3]), fields[4] == b"1")
            cpu, wall = float(fields[5]), float(fields[6])
            out_size, err_size, pids_hit, n_out, n_err, n_tail = (int(f) for f in fields[7:13])
        except (ValueError, UnicodeDecodeError):
            break
        if kind not in ("exit", "signal", "nostart") or min(n_out, n_err, n_tail) < 0 \
                or pos + n_out + n_err + n_tail > len(data):
            break
        out = data[pos:pos + n_out]
        err = data[pos + n_out:pos + n_out + n_err]
        tail = data[pos + n_out + n_err:pos + n_out + n_err + n_tail]
        pos += n_out + n_err + n_tail
        records[index] = _CaseRecord(kind, value, timed_out, cpu, wall, out_size, err_size,
                                     None if pids_hit < 0 else bool(pids_hit), out, err, tail)
        running = None
    return records, running


def _case_result(rec: _CaseRecord, limits: SandboxLimits, caps: SandboxCapabilities,
                 scratch: str, base: str) -> SandboxResult:
    if rec.kind == "nostart":
        return _not_started(_decode(rec.err, scratch, base), caps)
    return _make_result(
        out=rec.out, out_size=rec.out_size, err=rec.err, err_size=rec.err_size,
        tail=rec.tail or rec.err[-_TAIL_BYTES:],
        returncode=-rec.value if rec.kind == "signal" else rec.value, timed_out=rec.timed_out,
        cpu_time_s=rec.cpu_time_s, wall_time_s=rec.wall_time_s, pids_max_hit=rec.pids_max_hit,
        limits=limits, caps=caps, scratch=scratch, base=base)


# ---------------------------------------------------------------------------------- cgroups
def _open_cgroup(caps: SandboxCapabilities, max_pids: int) -> str | None:
    if caps.process_limit != "cgroup" or not caps.cgroup_root:
        return None
    try:
        return _make_cgroup(caps.cgroup_root, max_pids)
    except OSError as exc:
        logger.warning("sandbox: no pids cgroup for this run (%r); process count unlimited", exc)
        return None


def _cgroup_max_hit(path: str) -> bool | None:
    """Whether a fork in the cgroup failed at ``pids.max`` (None: no counter to read)."""
    try:
        with open(os.path.join(path, "pids.events"), encoding="ascii") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "max":
                    return int(parts[1]) > 0
    except (OSError, ValueError):
        pass
    return None


def _pids_cgroup_root() -> str | None:
    """Our own folder in a writable cgroup-v1 ``pids`` hierarchy, or None."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            mounts = [line.split() for line in handle]
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            membership = [line.strip().split(":", 2) for line in handle]
    except OSError:
        return None
    mount = next((m[1] for m in mounts if len(m) > 3 and m[2] == "cgroup"
                  and "pids" in m[3].split(",")), None)
    own = next((m[2] for m in membership if len(m) == 3 and "pids" in m[1].split(",")), None)
    if mount is None or own is None:
        return None
    root = os.path.join(mount, own.lstrip("/"))
    try:
        probe = _make_cgroup(root, 4)
    except OSError:
        return None
    _remove_cgroup(probe)
    return root


def _make_cgroup(root: str, max_pids: int) -> str:
    path = os.path.join(root, f"pettingllms-sbx-{os.getpid()}-{next(_run_counter)}")
    os.mkdir(path)
    try:
        with open(os.path.join(path, "pids.max"), "w", encoding="ascii") as handle:
            handle.write(str(max_pids))
    except OSError:
        os.rmdir(path)
        raise
    return path


def _remove_cgroup(path: str) -> None:
    for _ in range(200):
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as handle:
                pids = [int(p) for p in handle.read().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                break
        time.sleep(0.005)
    logger.warning("sandbox cgroup %s could not be removed", path)


# ---------------------------------------------------------------------------------- file system
#: Exit status and first stderr bytes of a preamble that refused to start the program.
_FS_SETUP_EXIT = 125
_FS_SETUP_MESSAGE = b"sandbox: read-only file system setup failed: "
_PRIVATE_SHM = "/dev/shm"  # where the preamble mounts a private tmpfs
#: The preamble (``python -I -S -B -c <this> HOST_MNT_NS SHM_BYTES DIR... -- COMMAND...``) run
#: inside the launcher's mount namespace, as its root: it makes every mount read-only except
#: the ``DIR`` folders, mounts a private tmpfs on /dev/shm, drops all capabilities for good and
#: becomes ``COMMAND`` (same pid, environment and file descriptors). Any Python 3; failures
#: end it with :data:`_FS_SETUP_EXIT` and :data:`_FS_SETUP_MESSAGE` before the program runs.
_FS_PREAMBLE = (Path(__file__).parent / "sandbox_fs_preamble.py").read_text(encoding="utf-8")
_FS_PROBE_CODE = """
import errno, os
with open("inside", "w") as handle:
    handle.write("x")
os.remove("inside")
try:
    with open(os.path.join(os.path.dirname(os.getcwd()), "outside"), "w") as handle:
        handle.write("x")
    fs = "writable"
except OSError as e:
    fs = "read-only" if e.errno == errno.EROFS else "refused"
with open(os.devnull, "w") as handle:
    handle.write("x")
with open("/proc/self/status") as handle:
    bounding = [line.split()[1] for line in handle if line.startswith("CapBnd:")]
print(fs, int(bounding[0], 16) if bounding else -1)
"""


# ---------------------------------------------------------------------------------- probing
_PROBE_CODE = """
import errno, os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(2)
try:
    s.connect(("127.0.0.1", 9))
    net = "open"
except OSError as e:
    net = "isolated" if e.errno in (errno.ENETUNREACH, errno.EADDRNOTAVAIL) else "open"
print(net, os.getpid())
"""


def _probe(python: str) -> SandboxCapabilities:
    notes: list[str] = []
    limits = SandboxLimits(wall_time_s=20, cpu_time_s=10)
    plain = SandboxCapabilities(python, (), False, False, None, "none", None, ())

    def attempt(launcher: tuple[str, ...], uid: int | None) -> tuple[bool, bool, bool]:
        caps = dataclasses.replace(plain, launcher=launcher)
        result = _run(_PROBE_CODE, "", limits, caps, uid=uid, probing=True)
        words = result.stdout.split()
        if not result.ok or len(words) != 2:
            return False, False, False
        return True, words[0] == "isolated", words[1] == "1"

    uid = None
    if os.geteuid() == 0:
        candidate = _next_uid()
        if attempt((), candidate)[0]:
            uid = candidate
        else:
            notes.append(f"cannot drop root: {python} does not run as an unprivileged uid "
                         f"(set ${PYTHON_ENV_VAR} to an interpreter others can execute)")
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    user_ns = ("--user", "--map-root-user")
    full = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    variants: list[tuple[str, ...]] = [user_ns + full, user_ns + ("--mount", "--net")]
    if os.geteuid() == 0 and uid is None:
        variants += [full, ("--mount", "--net")]
    launcher: tuple[str, ...] = ()
    network = pid_ns = False
    if unshare is None:
        notes.append("no `unshare` binary: no namespaces, network not isolated")
    for flags in variants if unshare else []:
        ran, isolated, is_init = attempt((unshare, *flags, "--"), uid)
        if ran and isolated:
            launcher, network, pid_ns = (unshare, *flags, "--"), True, is_init
            break
        notes.append(f"`unshare {' '.join(flags)}` unusable here")
    if not network:
        notes.append("network NOT isolated: programs can reach the host's network")
    readonly, why = False, "no mount namespace (no working `unshare --mount` variant)"
    if {"--mount", "--mount-proc"} & set(launcher):
        caps = dataclasses.replace(plain, launcher=launcher, filesystem_readonly=True)
        result = _run(_PROBE_CODE + _FS_PROBE_CODE, "", limits, caps, uid=uid, probing=True)
        words = result.stdout.split()
        readonly = result.ok and len(words) == 4 and words[0] == "isolated" and \
            (words[1] == "1") == pid_ns and words[2:] == ["read-only", "0"]
        why = (f"the read-only setup does not work here "
               f"({(result.stderr.strip() or result.stdout.strip())[-300:] or 'no output'})")
    if not readonly:
        notes.append(f"file system NOT read-only: {why}; programs can write wherever their "
                     f"uid may, outside their scratch folder too")
    cgroup_root = None
    if uid is not None:
        process_limit = "rlimit"
    elif os.geteuid() != 0:
        process_limit = "rlimit"
        notes.append("RLIMIT_NPROC counts every process of this user, not only the sandbox's")
    else:
        cgroup_root = _pids_cgroup_root()
        process_limit = "cgroup" if cgroup_root else "none"
        notes.append("running as root: RLIMIT_NPROC does not apply to uid 0; "
                     + ("a pids cgroup enforces max_processes" if cgroup_root else
                        "no writable pids cgroup either, so max_processes is NOT enforced"))
    return SandboxCapabilities(python, launcher, network, pid_ns, uid, process_limit,
                               cgroup_root, tuple(notes), readonly)
