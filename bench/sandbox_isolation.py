"""What the bubblewrap sandbox costs against the unshare fallback, measured side by side.

    python bench/sandbox_isolation.py                 # 3 repetitions
    python bench/sandbox_isolation.py --repeats 5 --inputs 50

Three workloads, each run under both launchers (``$PETTINGLLMS_SANDBOX_LAUNCHER`` set per
call), alternating within every repetition so drift in machine load hits both:

* one ``run_python`` of a trivial program (the sandbox's start-up);
* one ``run_python_batch`` of a judged-solution-like program on ``--inputs`` inputs (bubblewrap
  starts one sandbox per input, nothing shared; unshare forks them from one harness);
* judging HumanEval/0's canonical solution on its 7 tests with ``run_tests`` (per test, two
  sandboxes at once: the judge holding the test and the solution answering its calls).

Every repetition checks that both launchers produced the same outputs. Prints markdown rows.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from pettingllms_envs.code_data import load_humaneval
from pettingllms_envs.code_judge import run_tests
from pettingllms_envs.sandbox import (
    LAUNCHER_ENV_VAR,
    SandboxLimits,
    run_python,
    run_python_batch,
    sandbox_capabilities,
)

PROGRAM = "n = int(input())\nprint(sum(i * i for i in range(n)) % 1_000_003)\n"
LAUNCHERS = ("bubblewrap", "unshare")


def _single() -> list[str]:
    return [run_python("print('ok')").stdout]


def _batch(stdins: list[str]) -> list[str]:
    return [r.stdout for r in run_python_batch(PROGRAM, stdins)]


def _judge(problem) -> list[str]:
    return [str(o.passed) for o in run_tests(problem, problem.reference, problem.tests,
                                             limits=SandboxLimits())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.inputs < 1 or args.repeats < 1:
        parser.error("--inputs and --repeats must be >= 1")
    stdins = [str(1000 * i) for i in range(args.inputs)]
    problem = next(p for p in load_humaneval() if p.id == "HumanEval/0")
    workloads = {"one run_python": _single,
                 f"run_python_batch, {args.inputs} inputs": lambda: _batch(stdins),
                 "HumanEval/0 judged (7 tests)": lambda: _judge(problem)}
    print(f"host: {platform.machine()}, {os.cpu_count()} CPUs, uid {os.geteuid()}, "
          f"load average before {os.getloadavg()[0]:.2f}")
    for launcher in LAUNCHERS:
        os.environ[LAUNCHER_ENV_VAR] = launcher
        caps = sandbox_capabilities()
        if caps.launcher_name != launcher:
            raise SystemExit(f"{launcher} is not usable here: {caps.notes}")
        print(f"{launcher}: {'; '.join(caps.guarantees)}")
        run_python("pass")  # the probe and the page cache out of the timings
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for name, work in workloads.items():
            outputs = {}
            for launcher in LAUNCHERS:
                os.environ[LAUNCHER_ENV_VAR] = launcher
                started = time.perf_counter()
                outputs[launcher] = work()
                times.setdefault((name, launcher), []).append(time.perf_counter() - started)
            if outputs["bubblewrap"] != outputs["unshare"]:
                raise SystemExit(f"{name}: the launchers disagree: {outputs}")
    print(f"load average after {os.getloadavg()[0]:.2f}\n")
    print("| workload | launcher | seconds, median [min-max] | vs unshare |")
    print("|---|---|---:|---:|")
    for name in workloads:
        base = statistics.median(times[(name, "unshare")])
        for launcher in LAUNCHERS:
            values = times[(name, launcher)]
            median = statistics.median(values)
            print(f"| {name} | {launcher} | {median:.3f} [{min(values):.3f}-{max(values):.3f}] "
                  f"| {median / base:.2f}x |")


if __name__ == "__main__":
    main()
