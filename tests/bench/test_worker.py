"""bench/worker.py: an arm's result is its worker's last RESULT line; a worker that fails or
prints none raises, naming the arm and ending with the worker's stderr."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_worker", REPO / "bench" / "worker.py")
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)


def test_the_result_is_the_last_result_line_of_the_worker(tmp_path):
    script = ("import json, sys\nprint('RESULT [0]')\nprint('log line')\n"
              "print('RESULT ' + json.dumps(sys.argv[1:]))\n")
    assert worker.run_worker(script, [3, "x"], cwd=tmp_path, what="arm") == ["3", "x"]


@pytest.mark.parametrize("script", ["import sys\nsys.stderr.write('boom')\nsys.exit(2)",
                                    "import sys\nsys.stderr.write('boom')\nprint('no result')"])
def test_a_worker_that_fails_or_prints_no_result_raises_with_its_stderr(tmp_path, script):
    with pytest.raises(RuntimeError, match=r"(?s)arm two_pools failed.*boom"):
        worker.run_worker(script, [], cwd=tmp_path, what="arm two_pools")
