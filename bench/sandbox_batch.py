"""Running one program on many inputs: ``run_python_batch`` (one sandbox, a harness that forks
per input) vs the old way, one ``run_python`` sandbox per input, measured side by side.

    python bench/sandbox_batch.py                  # 50 inputs, 3 repetitions
    python bench/sandbox_batch.py --inputs 20 --repeats 5
    python bench/sandbox_batch.py --python /usr/bin/python3   # another sandbox interpreter

The program is a typical judged solution (read a number, print a result). The two variants
alternate within each repetition so drift in machine load hits both; every repetition checks
that both variants produced the same outputs. Prints a markdown table and the ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from pettingllms_envs.sandbox import (
    SandboxLimits,
    run_python,
    run_python_batch,
    sandbox_capabilities,
)

PROGRAM = "n = int(input())\nprint(sum(i * i for i in range(n)) % 1_000_003)\n"


def _per_input_loop(code: str, stdins: list[str], limits: SandboxLimits,
                    python: str | None) -> list[str]:
    return [run_python(code, stdin=s, limits=limits, python=python).stdout for s in stdins]


def _batch(code: str, stdins: list[str], limits: SandboxLimits, python: str | None) -> list[str]:
    return [r.stdout for r in run_python_batch(code, stdins, limits=limits, python=python)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python", default=None,
                        help="interpreter for the sandboxed program (default: the sandbox's)")
    args = parser.parse_args()
    if args.inputs < 1 or args.repeats < 1:
        parser.error("--inputs and --repeats must be >= 1")

    caps = sandbox_capabilities(args.python)
    stdins = [str(1000 * i) for i in range(args.inputs)]
    limits = SandboxLimits()
    variants = {"run_python_batch (one sandbox, fork per input)": _batch,
                "run_python per input [baseline]": _per_input_loop}
    print(f"host: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
          f", load average before {os.getloadavg()[0]:.2f}")
    print(f"sandbox: python={caps.python}, launcher={' '.join(caps.launcher) or '(none)'}, "
          f"uid drop={caps.run_as_uid is not None}, process limit={caps.process_limit}")
    run_python("pass", python=args.python)  # warm the capability probe and the page cache out of the timings

    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        outputs = []
        for name, variant in variants.items():
            started = time.perf_counter()
            outputs.append(variant(PROGRAM, stdins, limits, args.python))
            seconds[name].append(time.perf_counter() - started)
        if outputs[0] != outputs[1] or not all(outputs[0]):
            raise SystemExit(f"repetition {repeat}: the variants disagree on the outputs")

    baseline = statistics.median(seconds["run_python per input [baseline]"])
    print(f"\n{args.inputs} inputs, {args.repeats} repetitions (median; min-max in brackets), "
          f"load average after {os.getloadavg()[0]:.2f}\n")
    print("| variant | seconds per batch | ms per input | speed-up vs baseline |")
    print("|---|---:|---:|---:|")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} [{min(values):.2f}-{max(values):.2f}] "
              f"| {1000 * median / args.inputs:.1f} | {baseline / median:.1f}x |")


if __name__ == "__main__":
    main()
