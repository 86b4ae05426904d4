"""The public entry points :func:`run_python` and :func:`run_python_batch`: one run's
workspace, its uid, its supervised process and its result.

One subprocess per run, ``python -s -B solution.py`` in a fresh scratch folder (its cwd and
``HOME``), deleted afterwards. Not ``-I``: ``-I`` implies ``-E``, which would ignore the
``PYTHONHASHSEED=0`` we set; since we pass a scrubbed environment ourselves, ``-E`` buys nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time
from typing import Sequence

from .cgroups import _cgroup_max_hit, _open_cgroup, _remove_cgroup
from .filesystem import _fs_setup_failed, _sandbox_argv
from .probe import SandboxCapabilities, sandbox_capabilities
from .process import _StartError, _execute, _python_flags, _read_output, _run_counter
from .results import SandboxLimits, SandboxResult, _decode, _make_result

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"

_SCRIPT_NAME = "solution.py"
_UID_BASE = 2_000_000  # per-run uids are drawn above this; no real account lives there
_UID_SPAN = 1_000_000
_UNSHARE_SIGKILL = b"unshare: sigprocmask unblock failed: Invalid argument\n"


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
