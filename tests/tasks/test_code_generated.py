"""The generated offline coding set: seeded, every template covered, and every reference
solution reproduces its hidden outputs when run in the sandbox."""

import json

from pettingllms_envs.code_generated import TEMPLATES, generate_problems
from pettingllms_envs.code_judge import compare_outputs
from pettingllms_envs.sandbox import SandboxLimits, run_python


def test_generated_problems_are_seeded_and_cover_every_template():
    problems = generate_problems(28, seed=0)
    assert problems == generate_problems(28, seed=0)
    assert problems[:10] == generate_problems(10, seed=0)  # a prefix does not depend on count
    assert problems != generate_problems(28, seed=1)
    assert {p.id.split("-", 1)[1] for p in problems} == set(TEMPLATES)
    assert len({p.id for p in problems}) == 28
    for problem in problems:
        assert problem.kind == "stdio" and problem.reference and len(problem.tests) == 6
        assert all(t.input.endswith("\n") and "\n\n" not in t.input and t.output.strip()
                   for t in problem.tests)


def test_generated_references_reproduce_their_hidden_outputs():
    """One sandbox run replays every reference of two problems per template on its tests."""
    problems = generate_problems(2 * len(TEMPLATES), seed=7)
    cases = [[p.reference, t.input] for p in problems for t in p.tests]
    driver = ("import contextlib, io, json, sys\n"
              "outputs = []\n"
              "for code, given in json.load(sys.stdin):\n"
              "    sys.stdin, buffer = io.StringIO(given), io.StringIO()\n"
              "    with contextlib.redirect_stdout(buffer):\n"
              "        exec(code, {'__name__': '__main__'})\n"
              "    outputs.append(buffer.getvalue())\n"
              "sys.stdout.write(json.dumps(outputs))\n")
    result = run_python(driver, stdin=json.dumps(cases),
                        limits=SandboxLimits(wall_time_s=20, cpu_time_s=20))
    assert result.ok, result.describe_failure()
    outputs = iter(json.loads(result.stdout))
    for problem in problems:
        for test in problem.tests:
            got = next(outputs)
            assert got == test.output and compare_outputs(test.output, got), (problem.id, test)
