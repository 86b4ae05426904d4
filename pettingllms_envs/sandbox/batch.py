"""The batch harness runner: one program on many inputs in one sandbox start.

Many inputs: :func:`run_python_batch`
-------------------------------------
Running one program on N test inputs with :func:`run_python` pays N sandbox starts (namespaces
plus a fresh interpreter, ~0.1-0.2 s each). :func:`run_python_batch` pays one: the sandboxed
process is a small trusted *harness* (``pettingllms_envs/sandbox/harness_main.py``, run with ``python -c``)
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
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import tempfile
from pathlib import Path

from .capabilities import SandboxCapabilities
from .cgroups import open_pids_cgroup, remove_cgroup
from .cleanup import remove_tree
from .filesystem import PRIVATE_SHM, package_folder, setup_failed
from .process import StartError, execute, make_workspace, next_uid, not_started, python_flags
from .results import TAIL_BYTES, SandboxLimits, SandboxResult, decode_output, make_result
from .unshare import unshare_argv

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"

_BATCH_START_S = 10.0  # batch wall clock: start-up allowance ...
_BATCH_CASE_SLACK_S = 1.0  # ... plus, per input, its wall clock and this much for bookkeeping
#: Source of the in-sandbox batch harness (see pettingllms_envs/sandbox/harness_main.py), run with
#: ``python -c``.
_HARNESS = (Path(__file__).parent / "harness_main.py").read_text(encoding="utf-8")


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
class HarnessOutcome:
    """One harness run (:func:`run_harness`): the results it produced by input index, whether
    the batch clock ran out, why it could not start (None if it did), its last stderr line."""

    results: dict[int, SandboxResult]
    timed_out: bool
    start_error: str | None
    diagnostics: str


def batch_budget_s(limits: SandboxLimits, count: int) -> float:
    """The wall clock of a batch of ``count`` inputs: a start-up allowance plus, per input, its
    own wall clock and some bookkeeping."""
    return _BATCH_START_S + count * (limits.wall_time_s + _BATCH_CASE_SLACK_S)


def run_harness(code: str, cases: list[tuple[int, bytes]], limits: SandboxLimits,
                 caps: SandboxCapabilities, budget_s: float) -> HarnessOutcome:
    """One sandbox run of the harness over ``cases`` (``(index, stdin bytes)``), started by the
    unshare launcher (:func:`~pettingllms_envs.sandbox.unshare.unshare_argv`) with the same
    workspace, uid, pids cgroup and read-only view as one of its single runs."""
    uid = next_uid() if caps.run_as_uid is not None else None
    base, scratch = make_workspace(code, uid)
    cgroup = None
    cap = limits.max_output_bytes
    record_bytes = len(cases) * (2 * cap + TAIL_BYTES + 256) + 4096
    try:
        io_dir = os.path.join(base, "io")
        os.mkdir(io_dir, 0o700)
        if uid is not None:
            os.chown(io_dir, uid, uid)
        # +2: the `unshare --fork` parent and the harness; each input gets max_processes.
        cgroup = open_pids_cgroup(caps, limits.max_processes + 2)
        events = os.path.join(cgroup, "pids.events") if cgroup else "-"
        largest = max(len(data) for _, data in cases)
        harness_limits = dataclasses.replace(  # what the per-input children lower again
            limits, cpu_time_s=math.ceil(budget_s) + 1, max_processes=limits.max_processes + 1,
            max_open_files=limits.max_open_files + 8,
            max_file_bytes=max(limits.max_file_bytes, largest, record_bytes))
        shm = PRIVATE_SHM if caps.filesystem_readonly else "-"  # emptied before each input
        command = [caps.python, *python_flags(caps), "-c", _HARNESS, scratch, io_dir, events, shm,
                   str(max(1, math.ceil(limits.cpu_time_s))), str(limits.max_file_bytes),
                   str(limits.max_open_files), str(cap), str(TAIL_BYTES),
                   repr(limits.wall_time_s), *python_flags(caps)]
        package_env, binds = package_folder(base, caps, limits)
        argv = unshare_argv(caps, command, [scratch, io_dir], limits, binds)
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
                done = execute(argv, stdin=blob, stdout=records, stderr=diag, cwd=scratch,
                                uid=uid, rlimits=harness_limits, wall_time_s=budget_s, caps=caps,
                                cgroup=cgroup, extra_env=package_env)
            except StartError as exc:
                return HarnessOutcome({}, False, f"sandbox could not start: {exc}", "")
            records.seek(0)
            parsed, running = _parse_records(records.read(record_bytes))
            diag.seek(0)
            diag_head = diag.read(4096)
            diagnostics = decode_output(diag_head, scratch, base).strip()
        if not parsed and setup_failed(caps, done.returncode, diag_head):
            return HarnessOutcome({}, False, f"sandbox could not start: {diagnostics}", "")
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
        return HarnessOutcome(results, done.timed_out, None,
                               diagnostics.splitlines()[-1] if diagnostics else "")
    finally:
        if cgroup:
            remove_cgroup(cgroup)
        remove_tree(base)


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
        return not_started(decode_output(rec.err, scratch, base), caps)
    return make_result(
        out=rec.out, out_size=rec.out_size, err=rec.err, err_size=rec.err_size,
        tail=rec.tail or rec.err[-TAIL_BYTES:],
        returncode=-rec.value if rec.kind == "signal" else rec.value, timed_out=rec.timed_out,
        cpu_time_s=rec.cpu_time_s, wall_time_s=rec.wall_time_s, pids_max_hit=rec.pids_max_hit,
        limits=limits, caps=caps, scratch=scratch, base=base)
