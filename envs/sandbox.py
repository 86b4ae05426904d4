"""Run untrusted Python (LLM-written programs) in a throw-away, resource-limited subprocess.

Threat model
------------
The code comes from a model being trained. It is mostly honest but buggy (infinite loops, huge
allocations, 100 MB prints, accidental fork loops) and sometimes "hostile by reward hacking"
(reading the trainer's environment variables, using the network, writing outside its folder,
leaving background processes behind). In that order we guarantee: the host process and the
machine survive; a run ends within its wall-clock budget and leaves no process behind; the code
cannot read the host's environment or reach the network (where the OS allows); runs are
reproducible (fixed hash seed, no bytecode files). This is *not* a defence against a determined
attacker with a kernel exploit, and where privileges cannot be dropped (a root host whose
interpreter lives in a folder other users cannot read, e.g. ``/root/.pyenv``), the code keeps
root's *file* permissions inside its user namespace: use a container or VM for real adversaries.

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
  capabilities), a network namespace (only a downed loopback: no network at all), a pid
  namespace that dies with the program (``--kill-child``; the program is its pid 1, so signals
  it sends itself without a handler are ignored) and a private ``/proc`` (host processes and
  their environments are invisible). The first working variant wins; if none works the code
  runs without them and ``SandboxResult.network_isolated`` is ``False``.
* A wall-clock timeout: the whole process group is SIGKILLed (and the cgroup, if any, emptied).
  The group is killed after *every* run, so background children never outlive it.
* Output goes to files the parent opened (not pipes: a 100 MB print cannot fill our memory or
  deadlock us); RLIMIT_FSIZE bounds them and only ``max_output_bytes`` are read back, with the
  random scratch path rewritten to ``/sandbox`` so identical programs give identical text.

Residual risks (accepted for LLM-written code, not for adversaries): the file system is the
host's (world-readable files are readable, and without a privilege drop so are root's, and
``/tmp`` is writable); total disk use is bounded only per file and by the wall clock; a
deliberately hostile program running as (namespaced) root could leave its pids cgroup.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Sequence

logger = logging.getLogger(__name__)

__all__ = ["SandboxCapabilities", "SandboxLimits", "SandboxResult", "run_python",
           "run_python_batch", "sandbox_capabilities"]

#: Environment variable naming an interpreter to run sandboxed code with, e.g. a system Python
#: that an unprivileged uid can execute (enables the privilege drop on root hosts).
PYTHON_ENV_VAR = "PETTINGLLMS_SANDBOX_PYTHON"
_SCRIPT_NAME = "solution.py"
#: What the scratch folder's path reads as in returned stdout/stderr.
SCRATCH_PLACEHOLDER = "/sandbox"
_UID_BASE = 2_000_000  # per-run uids are drawn above this; no real account lives there
_UID_SPAN = 1_000_000
_run_counter = itertools.count()
_UNSHARE_SIGKILL = "unshare: sigprocmask unblock failed: Invalid argument\n"


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
        if self.max_open_files < 8:
            raise ValueError("SandboxLimits.max_open_files must be >= 8 (the interpreter needs some)")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """Outcome of one run. ``stdout``/``stderr`` are cut to ``max_output_bytes`` and decoded
    with ``errors="replace"``; ``exit_code`` is negative (``-signal``) when a signal killed the
    program and ``None`` when it could not be started."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed_by_signal: int | None
    output_truncated: bool
    network_isolated: bool
    wall_time_s: float

    @property
    def ok(self) -> bool:
        """The program exited normally with status 0 within its time budget."""
        return self.exit_code == 0 and not self.timed_out

    def describe_failure(self, max_chars: int = 400) -> str:
        """A short human-readable reason why the run is not ``ok`` ("" when it is)."""
        if self.ok:
            return ""
        if self.timed_out:
            reason = "timed out (wall-clock limit)"  # no measured time: keep text reproducible
        elif self.killed_by_signal is not None:
            name = _signal_name(self.killed_by_signal)
            hint = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (a resource limit)"}
            reason = f"killed by {name}{hint.get(name, '')}"
        elif self.exit_code is None:
            reason = "could not start"
        else:
            reason = f"exit code {self.exit_code}"
        tail = self.stderr.strip()[-max_chars:]
        return f"{reason}: {tail}" if tail else reason


@dataclasses.dataclass(frozen=True)
class SandboxCapabilities:
    """What isolation this host allows, as probed (see the module docstring).

    ``launcher`` is the command prefix (an ``unshare`` invocation or empty); ``run_as_uid`` is
    ``None`` when runs keep the host uid; ``process_limit`` is ``"rlimit"``, ``"cgroup"`` or
    ``"none"``; ``notes`` explains every fallback taken.
    """

    python: str
    launcher: tuple[str, ...]
    network_isolated: bool
    pid_namespace: bool
    run_as_uid: int | None
    process_limit: str
    cgroup_root: str | None
    notes: tuple[str, ...]


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
    """Run one program on many inputs (e.g. test cases), one fresh sandbox per input.

    Sequential for now: each input pays one interpreter start (~50 ms) and gets its own limits,
    scratch folder and wall clock, so one hanging input cannot starve the others. A pooled
    or parallel version can replace this without changing the signature.
    """
    caps = sandbox_capabilities(python)
    return [_run(code, s, limits, caps) for s in stdins]


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
def _run(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities,
         *, uid: int | None = None, probing: bool = False) -> SandboxResult:
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if uid is None and caps.run_as_uid is not None:
        uid = _next_uid()  # a fresh uid per run: its own process budget, no cross-run signals
    base = tempfile.mkdtemp(prefix="pettingllms-sbx-")
    os.chmod(base, 0o711)  # a dropped uid may traverse to its scratch folder, not list ours
    cgroup = None
    started = time.monotonic()
    try:
        scratch = os.path.join(base, "work")
        os.mkdir(scratch, 0o700)
        with open(os.path.join(scratch, _SCRIPT_NAME), "w", encoding="utf-8",
                  errors="surrogatepass") as handle:
            handle.write(code)
        if uid is not None:
            os.chown(scratch, uid, uid)
            os.chown(os.path.join(scratch, _SCRIPT_NAME), uid, uid)
        stdin_path = os.path.join(base, "stdin")
        with open(stdin_path, "wb") as handle:
            handle.write(str(stdin).encode("utf-8", errors="replace"))
        if caps.process_limit == "cgroup" and caps.cgroup_root:
            try:  # +1: the `unshare --fork` parent lives in the cgroup too
                cgroup = _make_cgroup(caps.cgroup_root, limits.max_processes + 1)
            except OSError as exc:
                logger.warning("sandbox: no pids cgroup for this run (%r); process count "
                               "unlimited", exc)
        argv = [*caps.launcher, caps.python, *_python_flags(), _SCRIPT_NAME]
        out_path, err_path = os.path.join(base, "stdout"), os.path.join(base, "stderr")
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, \
                open(err_path, "wb") as ferr:
            started = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv, stdin=fin, stdout=fout, stderr=ferr, cwd=scratch,
                    env=_scrubbed_env(scratch), start_new_session=True, close_fds=True,
                    preexec_fn=_make_preexec(limits, cgroup and os.path.join(cgroup, "cgroup.procs")),
                    user=uid, group=uid, extra_groups=[] if uid is not None else None)
            except (OSError, subprocess.SubprocessError) as exc:
                (logger.debug if probing else logger.warning)(
                    "sandbox could not start %s: %r", argv[0], exc)
                return SandboxResult("", f"sandbox could not start: {exc}", None, False, None,
                                     False, caps.network_isolated, 0.0)
            exited = _wait_without_reaping(proc.pid, limits.wall_time_s)
            if not exited and "--fork" in caps.launcher:
                _kill_namespace_init(proc.pid)
            _kill_group(proc.pid)  # leader not reaped yet, so its group id cannot be reused
            returncode = proc.wait()
            elapsed = time.monotonic() - started
        if cgroup:
            _remove_cgroup(cgroup)
            cgroup = None
        stdout, cut_out = _read_capped(out_path, limits.max_output_bytes, scratch)
        stderr, cut_err = _read_capped(err_path, limits.max_output_bytes, scratch)
        if "--fork" in caps.launcher and returncode == 1 and stderr.endswith(_UNSHARE_SIGKILL):
            # `unshare --fork` cannot re-raise SIGKILL on itself (signal(SIGKILL) fails), so
            # a program killed by SIGKILL (CPU limit, OOM) reaches us as this message + exit 1.
            stderr, returncode = stderr[: -len(_UNSHARE_SIGKILL)], -signal.SIGKILL
        timed_out = not exited
        return SandboxResult(
            stdout=stdout, stderr=stderr, exit_code=returncode, timed_out=timed_out,
            killed_by_signal=-returncode if returncode < 0 else None,
            output_truncated=cut_out or cut_err, network_isolated=caps.network_isolated,
            wall_time_s=elapsed)
    finally:
        if cgroup:
            _remove_cgroup(cgroup)
        _remove_tree(base)


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
    cpu = max(1, math.ceil(limits.cpu_time_s))
    wanted = [
        # soft == hard: SIGKILL exactly at the limit. SIGXCPU (soft < hard) would be ignored by
        # a program that is pid 1 of its namespace, and may be caught by a hostile one.
        (resource.RLIMIT_CPU, cpu, None),
        (resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024, None),
        (resource.RLIMIT_NPROC, limits.max_processes, None),
        (resource.RLIMIT_NOFILE, limits.max_open_files, None),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes, None),
        (resource.RLIMIT_CORE, 0, None),
    ]
    pairs = []
    for res, soft, hard in wanted:  # never ask for more than the host's hard limit allows
        host_hard = resource.getrlimit(res)[1]
        hard = soft if hard is None else hard
        if host_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, host_hard), min(hard, host_hard)
        pairs.append((res, (int(soft), int(hard))))
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


def _read_capped(path: str, cap: int, scratch: str) -> tuple[str, bool]:
    """Read at most ``cap`` bytes back. The random scratch path (tracebacks name the script by
    its absolute path) becomes ``/sandbox`` so identical programs give identical text, which
    the AT-GRPO clone contract needs."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(cap)
    except OSError:
        return "", False
    text = data.decode("utf-8", errors="replace").replace(scratch, SCRATCH_PLACEHOLDER)
    return text, size > cap


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


# ---------------------------------------------------------------------------------- cgroups
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
    variants: list[tuple[str, ...]] = [user_ns + full, user_ns + ("--net",)]
    if os.geteuid() == 0 and uid is None:
        variants += [full, ("--net",)]
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
        notes.append("network NOT isolated")
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
                               cgroup_root, tuple(notes))
