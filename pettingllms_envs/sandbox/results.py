"""What a sandboxed run is given and what it reports: :class:`SandboxLimits`,
:class:`SandboxResult`, and which limit a run ran into.

Limit hits (``SandboxResult.limit_hit``)
----------------------------------------
Best-effort, from what the host can observe after the run; the first rule that matches wins:

* ``"wall_time"``: the wall clock killed the run (``timed_out``); exact.
* ``"cpu_time"``: killed by SIGKILL or SIGXCPU after at least the CPU budget (``getrusage`` of
  the program and its reaped children); exact for the program's main process.
* ``"memory"``: the run failed and its memory cgroup (where one is used, see
  :mod:`~pettingllms_envs.sandbox.cgroups`) reached its limit (exact); or the run failed and
  the last line of stderr mentions ``MemoryError`` (numpy's
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

Near the bottom of the package: it imports only :mod:`~pettingllms_envs.sandbox.capabilities`
and :mod:`~pettingllms_envs.sandbox.interpreter`, so every launcher can build its results with
:func:`make_result` without an import cycle.
"""

from __future__ import annotations

import dataclasses
import math
import re
import signal

from .capabilities import SandboxCapabilities, check_launcher
from .interpreter import check_packages

#: What the scratch folder's path reads as in returned stdout/stderr.
SCRATCH_PLACEHOLDER = "/sandbox"
#: Values of :attr:`SandboxResult.limit_hit` (see the module docstring for how each is detected).
LIMIT_HITS = ("wall_time", "cpu_time", "memory", "file_size", "processes", "output")
#: How many bytes of a run's stderr end are kept for limit detection (:func:`make_result`).
TAIL_BYTES = 2048
_CPU_SLACK_S = 0.1
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
            cgroup; see :mod:`~pettingllms_envs.sandbox.probe` for when neither is available).
        max_open_files: file descriptors per process (RLIMIT_NOFILE).
        max_file_bytes: largest file the program may write, stdout/stderr included (RLIMIT_FSIZE).
        max_output_bytes: bytes of stdout and of stderr read back into the result.
        allow_unisolated: run even where no launcher isolates anything (no namespaces at
            all: the program shares the host's network, files and processes). Off by default:
            such a host raises :class:`SandboxUnavailableError` at the first run; on, each
            process warns once.
        launcher: the launcher for this task's runs, one of ``LAUNCHERS`` (``"unshare"`` to
            choose the weaker launcher explicitly where bubblewrap fails its probe), or None
            (default): ``$PETTINGLLMS_SANDBOX_LAUNCHER``, else ``"auto"``.
        packages: top-level names of installed packages the program may import besides the
            standard library (e.g. ``("numpy",)``), mounted one by one; none by default. Never
            the project's own packages, nor (checked by each task) one holding the task's data.
    """

    wall_time_s: float = 5.0
    cpu_time_s: float = 5.0
    memory_mb: int = 512
    max_processes: int = 32
    max_open_files: int = 64
    max_file_bytes: int = 16 * 1024 * 1024
    max_output_bytes: int = 64 * 1024
    allow_unisolated: bool = False
    launcher: str | None = None
    packages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.launcher is not None:
            check_launcher(self.launcher, "SandboxLimits.launcher")
        object.__setattr__(self, "packages", check_packages(self.packages))
        if not isinstance(self.allow_unisolated, bool):
            raise ValueError(f"SandboxLimits.allow_unisolated must be True or False, "
                             f"got {self.allow_unisolated!r}")
        for field in dataclasses.fields(self):
            if field.name in ("allow_unisolated", "launcher", "packages"):
                continue
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


class SandboxUnavailableError(RuntimeError):
    """No launcher isolates anything on this host and ``allow_unisolated`` is off."""


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
        """A short human-readable reason why the run is not ``ok`` ("" when it is), with the
        last ``max_chars`` characters of stderr (raw: for logs, not for prompts)."""
        reason = self.failure_reason()
        tail = self.stderr.strip()[-max_chars:] if max_chars > 0 else ""
        return f"{reason}: {tail}" if reason and tail else reason

    def failure_reason(self) -> str:
        """Why the run is not ``ok``, in the sandbox's own words only ("" when it is ok): no
        byte the program wrote, so it is safe to show unquoted."""
        if self.ok:
            return ""
        limit = _LIMIT_WORDS.get(self.limit_hit) if self.limit_hit != "output" else None
        if self.timed_out:
            reason = "timed out (wall-clock limit)"  # no measured time: keep text reproducible
        elif self.killed_by_signal is not None:
            name = _signal_name(self.killed_by_signal)
            # no guess for a bare SIGKILL: a program may send it to itself (os.kill(0, 9))
            hint = limit or ("CPU time limit" if name == "SIGXCPU" else None)
            reason = f"killed by {name}" + (f" ({hint})" if hint else "")
        elif self.exit_code is None:
            reason = "could not start"
        else:
            reason = f"exit code {self.exit_code}" + (f" ({limit})" if limit else "")
        return reason


def make_result(*, out: bytes, out_size: int, err: bytes, err_size: int, tail: bytes,
                 returncode: int, timed_out: bool, cpu_time_s: float, wall_time_s: float,
                 pids_max_hit: bool | None, limits: SandboxLimits, caps: SandboxCapabilities,
                 scratch: str, base: str, memory_hit: bool = False) -> SandboxResult:
    """The :class:`SandboxResult` of a run that started, from what the host observed: output
    bytes (``out``/``err`` at most ``max_output_bytes`` are kept, ``tail`` is stderr's end),
    sizes, exit status and times; every launcher and the batch harness report through it, so
    a result means the same whichever produced it."""
    cap = limits.max_output_bytes
    truncated = out_size > cap or err_size > cap
    stderr_tail = decode_output(tail, scratch, base)
    return SandboxResult(
        stdout=decode_output(out[:cap], scratch, base),
        stderr=decode_output(err[:cap], scratch, base),
        exit_code=returncode, timed_out=timed_out,
        killed_by_signal=-returncode if returncode < 0 else None, output_truncated=truncated,
        network_isolated=caps.network_isolated, wall_time_s=wall_time_s,
        filesystem_readonly=caps.filesystem_readonly,
        limit_hit=_limit_hit(timed_out=timed_out, returncode=returncode,
                             cpu_time_s=cpu_time_s, limits=limits, stderr_tail=stderr_tail,
                             pids_max_hit=pids_max_hit, output_truncated=truncated,
                             memory_hit=memory_hit))


def _limit_hit(*, timed_out: bool, returncode: int, cpu_time_s: float, limits: SandboxLimits,
               stderr_tail: str, pids_max_hit: bool | None, output_truncated: bool,
               memory_hit: bool = False) -> str | None:
    """Which limit the run ran into (rules and their limits: module docstring)."""
    if timed_out:
        return "wall_time"
    killer = -returncode if returncode < 0 else None
    if memory_hit and returncode != 0:  # the run's memory cgroup hit its limit (exact)
        return "memory"
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


def decode_output(data: bytes, scratch: str, base: str) -> str:
    """Output bytes as text. The random folder names (tracebacks name the script by its
    absolute path) become ``/sandbox`` so identical programs give identical text, which the
    AT-GRPO clone contract needs."""
    text = data.decode("utf-8", errors="replace").replace(scratch, SCRATCH_PLACEHOLDER)
    return text.replace(base, SCRATCH_PLACEHOLDER + "-base")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
