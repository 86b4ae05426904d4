"""bench/vllm_vs_hf.py without vLLM: argument defaults, workloads and the tables it prints."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vllm_vs_hf", REPO / "bench" / "vllm_vs_hf.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("vllm_vs_hf", module)
    spec.loader.exec_module(module)
    return module


def test_defaults(bench):
    args = bench.parse_args([])
    assert (args.model, args.prompts, args.samples, args.new_tokens, args.rounds, args.threads,
            args.seed) == ("smollm2-135m-instruct", 8, 4, 48, 3, 2, 0)
    assert args.enforce_eager is True and args.prefix_workload is True
    assert bench.parse_args(["--no-enforce-eager"]).enforce_eager is False
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "0"])


def test_workloads_share_the_preamble(bench):
    prompts = bench.workloads(bench.parse_args(["--prompts", "3", "--prefix-examples", "2"]))
    base, shared = prompts["plan-path"], prompts["shared-prefix"]
    preamble = bench.shared_preamble(2)
    assert len(base) == len(shared) == 3 and len(set(base)) == 3
    assert all(s == preamble + b for s, b in zip(shared, base))
    assert "shared-prefix" not in bench.workloads(bench.parse_args(["--no-prefix-workload"]))


def _round(bench, engine, index, seconds, tokens, workload="plan-path"):
    return bench.Round(workload, engine, index, seconds, cpu_seconds=seconds * 2,
                       response_tokens=tokens, completions=4, stopped=3, stopped_at_eos=3,
                       length_mismatches=0)


def test_tables_and_ratios(bench):
    rounds = [_round(bench, "HF", 1, 10.0, 100), _round(bench, "vLLM", 1, 5.0, 100),
              _round(bench, "HF", 2, 20.0, 100), _round(bench, "vLLM", 2, 4.0, 100),
              _round(bench, "HF", 3, 10.0, 120), _round(bench, "vLLM", 3, 5.0, 120)]
    # HF tokens/s 10, 5, 12 -> median 10; vLLM 20, 25, 24 -> median 24.
    assert bench.median_ratio(rounds, "plan-path") == pytest.approx(2.4)
    assert bench.paired_ratios(rounds, "plan-path") == pytest.approx([2.0, 5.0, 2.0])

    summary = bench.format_summary_table(rounds, {"plan-path": [190, 210]}, 4).splitlines()
    assert len(summary) == 4 and summary[1].startswith("|---")
    assert summary[2] == ("| plan-path | 190-210 | 4 | HF | 3 | 10.0 [5.0-12.0] | - | 26.7 "
                          "| 9/9 | 0/12 |")
    assert summary[3] == ("| plan-path | 190-210 | 4 | vLLM | 3 | 24.0 [20.0-25.0] | 2.40x "
                          "| 26.7 | 9/9 | 0/12 |")

    per_round = bench.format_rounds_table(rounds).splitlines()
    assert len(per_round) == 2 + len(rounds)
    assert per_round[3] == "| plan-path | 1 | vLLM | 100 | 5.0 | 20.0 | 2.00 |"
