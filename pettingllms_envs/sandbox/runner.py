"""The public entry points :func:`run_python` and :func:`run_python_batch`: one run's
workspace, its uid, its supervised process and its result.

One subprocess per run, ``python -s -B solution.py`` (``-S`` too outside bubblewrap, see
:func:`~pettingllms_envs.sandbox.process.python_flags`) in a fresh scratch folder (its cwd
and ``HOME``), deleted afterwards. Not ``-I``: ``-I`` implies ``-E``, which would ignore the
``PYTHONHASHSEED=0`` we set; since we pass a scrubbed environment ourselves, ``-E`` buys nothing.

What the program can import: the standard library, plus the packages its limits allowlist
(``SandboxLimits.packages``): under bubblewrap those alone are mounted (at
``/sandbox-packages``, on ``PYTHONPATH``); under unshare ``PYTHONPATH`` is a folder of the run's
own where the read-only preamble mounts them (their site-packages hidden; links to them where
there is no read-only view).

How a run reaches its launcher: :func:`run_one` asks nothing but the capabilities which
launcher module runs it (:func:`pettingllms_envs.sandbox.bwrap.run` for bubblewrap,
:func:`pettingllms_envs.sandbox.unshare.run` for unshare and "none"); the launchers never
import this module, and :mod:`~pettingllms_envs.sandbox.batch` (the unshare batch harness)
neither.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

from . import batch, bwrap, unshare
from .capabilities import SandboxCapabilities
from .probe import sandbox_capabilities
from .process import PipedStdio, next_uid
from .results import SandboxLimits, SandboxResult, SandboxUnavailableError

__all__ = ["check_isolation", "run_one", "run_python", "run_python_batch"]

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"


def run_python(code: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
               python: str | None = None) -> SandboxResult:
    """Run ``code`` as a Python program on ``stdin`` inside the sandbox and report the outcome.

    ``python`` overrides the interpreter (default: ``$PETTINGLLMS_SANDBOX_PYTHON`` or
    ``sys.executable``). Never raises for anything the program does; only a host that cannot
    create a temporary folder makes it raise.
    """
    caps = sandbox_capabilities(python, limits.launcher)
    check_isolation(caps, limits)
    return run_one(code, stdin, limits, caps)


_warned_unisolated = False


def check_isolation(caps: SandboxCapabilities, limits: SandboxLimits) -> None:
    """Refuse a host where no launcher isolates anything, unless the caller opted in (every
    entry point calls it before its first run)."""
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
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if isinstance(stdins, (str, bytes)):
        raise TypeError("stdins must be a sequence of inputs, not a single string")
    inputs = [str(s).encode("utf-8", errors="replace") for s in stdins]
    if not inputs:
        return []
    caps = sandbox_capabilities(python, limits.launcher)
    check_isolation(caps, limits)
    if caps.launcher_name == "bubblewrap":  # one sandbox per input: nothing shared at all
        return [run_one(code, data.decode("utf-8"), limits, caps) for data in inputs]
    results: dict[int, SandboxResult] = {}
    pending = list(range(len(inputs)))
    deadline = time.monotonic() + batch.batch_budget_s(limits, len(inputs))
    failure = "sandbox: not run: the batch ran out of time before this input"
    while pending:
        budget = min(deadline - time.monotonic(), batch.batch_budget_s(limits, len(pending)))
        if budget <= 0:
            break
        outcome = batch.run_harness(code, [(i, inputs[i]) for i in pending], limits, caps, budget)
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
            results.update({i: run_one(code, inputs[i].decode("utf-8"), limits, caps)
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


def run_one(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities, *,
            stdio: PipedStdio | None = None) -> SandboxResult:
    """One run of ``code`` on ``stdin`` with the launcher ``caps`` names, as a fresh uid where
    the capabilities drop privileges (:func:`~pettingllms_envs.sandbox.process.next_uid`: its
    own process budget, no signals across runs). ``stdio``: pipes instead of the stdin and
    stdout files (:mod:`~pettingllms_envs.sandbox.pair`). No isolation check: the callers
    made it (:func:`check_isolation`)."""
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    uid = next_uid() if caps.run_as_uid is not None else None
    launcher = bwrap if caps.launcher_name == "bubblewrap" else unshare
    return launcher.run(code, stdin, limits, caps, uid=uid, stdio=stdio)
