"""The public entry points :func:`run_python` and :func:`run_python_batch`: one run's
workspace, its uid, its supervised process and its result.

One subprocess per run, ``python -s -B solution.py`` (``-S`` too outside bubblewrap, see
:func:`~pettingllms_envs.sandbox.process._python_flags`) in a fresh scratch folder (its cwd
and ``HOME``), deleted afterwards. Not ``-I``: ``-I`` implies ``-E``, which would ignore the
``PYTHONHASHSEED=0`` we set; since we pass a scrubbed environment ourselves, ``-E`` buys nothing.

What the program can import: the standard library, plus the packages its limits allowlist
(``SandboxLimits.packages``): under bubblewrap those alone are mounted (at
``/sandbox-packages``, on ``PYTHONPATH``); under unshare ``PYTHONPATH`` is a folder of the run's
own where the read-only preamble mounts them (their site-packages hidden; links to them where
there is no read-only view).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from typing import Callable, Sequence

from .bwrap import BWRAP_SCRATCH, PACKAGES_MOUNT, bwrap_argv, find_bwrap, package_binds
from .cgroups import (_cgroup_max_hit, _memory_limit_hit, _open_cgroup, _open_memory_cgroup,
                      _remove_cgroup)
from .cleanup import remove_tree
from .filesystem import _fs_setup_failed, _package_folder, _sandbox_argv
from .probe import SandboxCapabilities, sandbox_capabilities
from .process import (_StartError, _execute, _python_flags, _read_output, _run_counter,
                      _scrubbed_env)
from .results import SandboxLimits, SandboxResult, SandboxUnavailableError, _decode, _make_result
from .seccomp import seccomp_program

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"

_SCRIPT_NAME = "solution.py"
_UID_BASE = 2_000_000  # per-run uids are drawn above this; no real account lives there
_UID_SPAN = 1_000_000
_PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin") or "/usr/bin/prlimit"
_UNSHARE_SIGKILL = b"unshare: sigprocmask unblock failed: Invalid argument\n"


def run_python(code: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
               python: str | None = None) -> SandboxResult:
    """Run ``code`` as a Python program on ``stdin`` inside the sandbox and report the outcome.

    ``python`` overrides the interpreter (default: ``$PETTINGLLMS_SANDBOX_PYTHON`` or
    ``sys.executable``). Never raises for anything the program does; only a host that cannot
    create a temporary folder makes it raise.
    """
    caps = sandbox_capabilities(python, limits.launcher)
    _check_isolation(caps, limits)
    return _run(code, stdin, limits, caps)


_warned_unisolated = False


def _check_isolation(caps: SandboxCapabilities, limits: SandboxLimits) -> None:
    """Refuse a host where no launcher isolates anything, unless the caller opted in."""
    global _warned_unisolated
    if caps.launcher_name != "none":
        return
    if not limits.allow_unisolated:
        raise SandboxUnavailableError(
            "no sandbox launcher works on this host (" + "; ".join(caps.notes) + "); install "
            "bubblewrap (apt-get install bubblewrap) or enable user namespaces, or pass "
            "SandboxLimits(allow_unisolated=True) to run programs with the host's network, "
            "files and processes")
    if not _warned_unisolated:
        _warned_unisolated = True
        logger.warning("sandbox: running programs WITHOUT isolation (allow_unisolated=True): "
                       "they share the host's network, files and processes")


def run_python_batch(code: str, stdins: Sequence[str], *, limits: SandboxLimits = SandboxLimits(),
                     python: str | None = None) -> list[SandboxResult]:
    """Run one program on many inputs (e.g. test cases): one result per input, in order.

    Each input gets ``limits`` (wall clock, CPU, memory, processes, files, output) and a fresh
    process, scratch folder and stdin of its own, so one hanging or crashing input cannot
    starve or poison the others; the results mean what :func:`run_python` reports for the same
    program and input. Inputs run one after another in a single sandbox (a harness that forks
    per input, see :mod:`~pettingllms_envs.sandbox.batch`), which costs one sandbox start for
    the whole batch. Never raises for anything the program does.
    """
    from .batch import _batch_budget_s, _run_harness  # batch needs this module

    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if isinstance(stdins, (str, bytes)):
        raise TypeError("stdins must be a sequence of inputs, not a single string")
    inputs = [str(s).encode("utf-8", errors="replace") for s in stdins]
    if not inputs:
        return []
    caps = sandbox_capabilities(python, limits.launcher)
    _check_isolation(caps, limits)
    if caps.launcher_name == "bubblewrap":  # one sandbox per input: nothing shared at all
        return [_run(code, data.decode("utf-8"), limits, caps) for data in inputs]
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


@dataclasses.dataclass(frozen=True)
class PipedStdio:
    """Pipe ends that replace a run's stdin and stdout files (:mod:`.pair`): the run reads
    ``stdin_fd`` and writes ``stdout_fd``, its :attr:`SandboxResult.stdout` stays empty, and
    ``on_started`` is called once its process start was tried."""

    stdin_fd: int
    stdout_fd: int
    on_started: Callable[[], None]


def _run(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities,
         *, uid: int | None = None, probing: bool = False,
         stdio: PipedStdio | None = None) -> SandboxResult:
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if uid is None and caps.run_as_uid is not None:
        uid = _next_uid()  # a fresh uid per run: its own process budget, no cross-run signals
    if caps.launcher_name == "bubblewrap":
        return _run_bwrap(code, stdin, limits, caps, uid, probing, stdio)
    base, scratch = _make_workspace(code, uid)
    cgroup = None
    try:
        stdin_path = os.path.join(base, "stdin")
        with open(stdin_path, "wb") as handle:
            handle.write(str(stdin).encode("utf-8", errors="replace"))
        cgroup = _open_cgroup(caps, limits.max_processes + 1)  # +1: the `unshare --fork` parent
        package_env, binds = _package_folder(base, caps, limits)
        argv = _sandbox_argv(caps, [caps.python, *_python_flags(caps), _SCRIPT_NAME], [scratch],
                             limits, binds)
        out_path, err_path = os.path.join(base, "stdout"), os.path.join(base, "stderr")
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, \
                open(err_path, "wb") as ferr:
            if uid is not None:  # so `/dev/stdout` and `/dev/stderr` reopen for the dropped
                os.fchown(fout.fileno(), uid, uid)  # uid, as in a batch (its io folder)
                os.fchown(ferr.fileno(), uid, uid)
            try:
                done = _execute(argv, stdin=stdio.stdin_fd if stdio else fin,
                                stdout=stdio.stdout_fd if stdio else fout, stderr=ferr,
                                cwd=scratch, uid=uid, rlimits=limits,
                                wall_time_s=limits.wall_time_s, caps=caps, cgroup=cgroup,
                                probing=probing, on_started=stdio.on_started if stdio else None,
                                extra_env=package_env)
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


def _run_bwrap(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities,
               uid: int | None, probing: bool, stdio: PipedStdio | None = None) -> SandboxResult:
    """One run under bubblewrap (:mod:`~pettingllms_envs.sandbox.bwrap`). The host folder
    holds only the program's stdin/stdout/stderr files, the script and the filter, all
    root's and none visible inside; the program's own files live in tmpfs that vanish."""
    base = tempfile.mkdtemp(prefix="pettingllms-sbx-")
    memory_cgroup = None
    status_read = status_write = -1
    try:
        paths = {name: os.path.join(base, name) for name in ("stdin", "stdout", "stderr",
                                                             "solution.py", "seccomp")}
        with open(paths["stdin"], "wb") as handle:
            handle.write(str(stdin).encode("utf-8", errors="replace"))
        with open(paths["solution.py"], "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(code)
        with open(paths["seccomp"], "wb") as handle:
            handle.write(seccomp_program() or b"")
        memory_cgroup = _open_memory_cgroup(caps, limits.memory_mb * 1024 * 1024)
        status_read, status_write = os.pipe()
        with open(paths["solution.py"], "rb") as script, open(paths["seccomp"], "rb") as flt, \
                open(paths["stdin"], "rb") as fin, open(paths["stdout"], "wb") as fout, \
                open(paths["stderr"], "wb") as ferr:
            command = [caps.layout.executable, *_python_flags(caps), _SCRIPT_NAME]
            env = {**_scrubbed_env(BWRAP_SCRATCH), **dict(caps.layout.env)}
            packages = package_binds(caps.python, limits.packages)
            if packages:
                env["PYTHONPATH"] = PACKAGES_MOUNT
            host_limits = limits
            if uid is None:
                # Unprivileged host: every run is this user's uid, and RLIMIT_NPROC set here
                # would count all of the user's processes (the trainer's threads, the last
                # run's exiting ones). Inside the run's own user namespace the count is the
                # run's alone, so the budget is set there, by prlimit, and kept loose here.
                command = [_PRLIMIT, f"--nproc={limits.max_processes}:{limits.max_processes}",
                           "--", *command]
                host_limits = dataclasses.replace(limits,
                                                  max_processes=limits.max_processes + 65536)
            argv = bwrap_argv(
                find_bwrap() or "bwrap", caps.layout, command,
                script_fd=script.fileno(), seccomp_fd=flt.fileno(), status_fd=status_write,
                run_uid=uid, tmpfs_bytes=max(2 * limits.max_file_bytes, 1 << 20),
                env=env, disable_userns=uid is None, packages=packages)
            try:
                done = _execute(argv, stdin=stdio.stdin_fd if stdio else fin,
                                stdout=stdio.stdout_fd if stdio else fout, stderr=ferr,
                                cwd=base, uid=None, rlimits=host_limits,
                                wall_time_s=limits.wall_time_s, caps=caps, cgroup=None,
                                probing=probing,
                                pass_fds=(script.fileno(), flt.fileno(), status_write),
                                extra_cgroups=(memory_cgroup,) if memory_cgroup else (),
                                on_started=stdio.on_started if stdio else None)
            except _StartError as exc:
                return _not_started(f"sandbox could not start: {exc}", caps)
            finally:
                os.close(status_write)
                status_write = -1
        status = _read_status(status_read)
        cap = limits.max_output_bytes
        out, out_size, _ = _read_output(paths["stdout"], cap)
        err, err_size, tail = _read_output(paths["stderr"], cap)
        if "child-pid" not in status and not done.timed_out:
            return _not_started("sandbox could not start: "
                                + err.decode("utf-8", "replace").strip()[-300:], caps)
        returncode = status.get("exit-code", done.returncode)
        if 128 < returncode < 128 + 65:  # bubblewrap passes a signal on as 128 + its number
            returncode = 128 - returncode
        return _make_result(
            out=out, out_size=out_size, err=err, err_size=err_size, tail=tail,
            returncode=returncode, timed_out=done.timed_out, cpu_time_s=done.cpu_time_s,
            wall_time_s=done.wall_time_s, pids_max_hit=None, limits=limits, caps=caps,
            scratch=BWRAP_SCRATCH, base=base,
            memory_hit=bool(memory_cgroup) and _memory_limit_hit(memory_cgroup))
    finally:
        for fd in (status_read, status_write):
            if fd >= 0:
                os.close(fd)
        if memory_cgroup:
            _remove_cgroup(memory_cgroup)
        remove_tree(base)


def _read_status(fd: int) -> dict:
    """bubblewrap's JSON status documents (``child-pid``, then ``exit-code``), merged."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    merged: dict = {}
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict):
            merged.update({k: v for k, v in document.items() if isinstance(v, int)})
    return merged


def _not_started(message: str, caps: SandboxCapabilities) -> SandboxResult:
    return SandboxResult("", message, None, False, None, False, caps.network_isolated, 0.0,
                         filesystem_readonly=caps.filesystem_readonly)


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


def _remove_tree(path: str) -> None:
    remove_tree(path)  # iterative, bounded, never raises (see cleanup)


def _next_uid() -> int:
    return _UID_BASE + (os.getpid() * 4096 + next(_run_counter)) % _UID_SPAN
