"""Two sandboxes that talk over pipes: a trusted judge and the program it questions.

Why: a test that runs *inside* the submission's process hands the submission its expected
values (they are in the process's memory, where a program can search for them). Here the test
runs in a judge process that contains no submitted code, and the submission runs in a second,
separate sandbox that sees only the questions the judge sends it (a call's arguments). The
judge's stdout is the program's stdin and the program's stdout is the judge's stdin; nothing
else connects them. Each side is a full :func:`~pettingllms_envs.sandbox.run_python` run of its
own (its own uid, namespaces, scratch folder, limits and wall clock), so neither can read the
other's files or memory, and the judge's verdict (its exit status and its stderr, which only
it writes) is out of the program's reach.

End of file is what ends a conversation early: once both processes started, the host closes
its copies of the pipe ends, so when either side exits (or crashes at start) the other reads
end-of-file at once instead of waiting for its wall clock.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from .probe import sandbox_capabilities
from .process import PipedStdio
from .results import SandboxLimits, SandboxResult
from .runner import check_isolation, run_one


@dataclasses.dataclass(frozen=True)
class PairResult:
    """Both sides of :func:`run_python_pair`. Their ``stdout`` is empty: it went down the pipe
    to the other side."""

    judge: SandboxResult
    program: SandboxResult


def run_python_pair(judge_code: str, program_code: str, *,
                    limits: SandboxLimits = SandboxLimits(),
                    python: str | None = None) -> PairResult:
    """Run ``judge_code`` and ``program_code`` at once, each in its own sandbox with ``limits``,
    the judge's stdout feeding the program's stdin and the program's stdout the judge's stdin.

    Never raises for anything either program does (a start failure is reported in that side's
    result, as :func:`~pettingllms_envs.sandbox.run_python` does); only a host that cannot
    create a pipe or a temporary folder makes it raise.
    """
    for name, code in (("judge_code", judge_code), ("program_code", program_code)):
        if not isinstance(code, str):
            raise TypeError(f"{name} must be str, got {type(code).__name__}")
    caps = sandbox_capabilities(python, limits.launcher)
    check_isolation(caps, limits)
    to_program_read, to_program_write = os.pipe()
    to_judge_read, to_judge_write = os.pipe()
    started = (threading.Event(), threading.Event())
    outcomes: list[SandboxResult | BaseException | None] = [None, None]

    def side(index: int, code: str, stdin_fd: int, stdout_fd: int) -> None:
        try:
            outcomes[index] = run_one(code, "", limits, caps,
                                      stdio=PipedStdio(stdin_fd, stdout_fd, started[index].set))
        except BaseException as exc:  # re-raised on the calling thread below
            outcomes[index] = exc
        finally:
            started[index].set()

    threads = [
        threading.Thread(target=side, args=(0, judge_code, to_judge_read, to_program_write),
                         name="sandbox-pair-judge", daemon=True),
        threading.Thread(target=side, args=(1, program_code, to_program_read, to_judge_write),
                         name="sandbox-pair-program", daemon=True),
    ]
    try:
        for thread in threads:
            thread.start()
        for event in started:
            event.wait()
    finally:
        for fd in (to_program_read, to_program_write, to_judge_read, to_judge_write):
            os.close(fd)
    for thread in threads:
        thread.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    judge, program = outcomes
    assert isinstance(judge, SandboxResult) and isinstance(program, SandboxResult)
    return PairResult(judge, program)
