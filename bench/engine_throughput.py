"""Rollout throughput of HFEngine vs naive HF ``generate``, and learner memory of the chunked
log-prob path vs full logits, each measured against its baseline in the same run.

    python bench/engine_throughput.py                    # bundled SmolLM2-135M-Instruct
    python bench/engine_throughput.py --model tiny-random

Throughput: the same plan-path-like prompts (chat template applied, ~150-200 tokens each), K
samples each, temperature 1, no top-k/top-p, natural EOS stopping. Variants:

* ``HFEngine``: one call for all prompts x K (prefill once per prompt, shared KV cache);
* ``generate, sequential``: the naive baseline, ``model.generate`` once per prompt per sample;
* ``generate, batched``: ``model.generate`` once on the left-padded prompts with
  ``num_return_sequences=K`` (HF's own batching; a stronger baseline, for context).

Learner memory: a fresh subprocess per variant (so peaks do not mix) runs forward + backward of
a ``B x L`` batch (second half of each row is the response) through ``response_logprobs``
(chunked LM head) or the full-logits ``log_softmax``; peak RSS from ``getrusage`` (tracemalloc
does not see torch's allocations).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time

import torch

from pettingllms_rllib.engines.base import SamplingConfig
from pettingllms_rllib.engines.hf_engine import HFEngine
from pettingllms_rllib.models.loading import load_causal_lm, load_tokenizer
from pettingllms_rllib.models.logprobs import reference_response_logprobs, response_logprobs


def plan_path_prompt(seed: int) -> str:
    """A planner prompt shaped like the plan_path task's: grid, positions, tool output, format.
    Grid sizes 4-6 vary so that the batch holds prompts of different lengths."""
    rng = random.Random(seed)
    size = 4 + seed % 3
    cells = [["#" if rng.random() < 0.22 else "." for _ in range(size)] for _ in range(size)]
    start, goal = (0, rng.randrange(size)), (size - 1, rng.randrange(size))
    cells[start[0]][start[1]], cells[goal[0]][goal[1]] = "S", "G"
    grid = "\n".join(" ".join(row) for row in cells)
    return (f"You are the planner agent in a {size}x{size} grid world.\n"
            f"Legend: S = start, G = goal, # = wall, . = free cell.\n{grid}\n"
            f"Start is at row {start[0]}, column {start[1]}. Goal is at row {goal[0]}, column "
            f"{goal[1]}. Rows grow downwards, columns grow to the right.\n"
            "Moves: U (up), D (down), L (left), R (right). You may not enter a wall or leave "
            "the grid. The tool agent's script printed: "
            f"'distance ignoring walls: {abs(goal[0] - start[0]) + abs(goal[1] - start[1])}'.\n"
            "Give the shortest list of moves from S to G. Answer on one line like: Moves: R D")


def progress(row) -> None:
    """One line per finished variant on stderr, so a long run shows where it is."""
    name, seconds, tokens = row
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {tokens} tokens in {seconds:.1f} s",
          file=sys.stderr, flush=True)


def rss_now_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


class RssSampler(threading.Thread):
    """Polls the current RSS: the peak of one step alone, which ``ru_maxrss`` cannot give when
    loading the model peaked higher than the step."""

    def __init__(self, interval_s: float = 0.005):
        super().__init__(daemon=True)
        self.interval_s, self.peak_mb, self._done = interval_s, rss_now_mb(), threading.Event()

    def run(self):
        while not self._done.is_set():
            self.peak_mb = max(self.peak_mb, rss_now_mb())
            time.sleep(self.interval_s)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return max(self.peak_mb, rss_now_mb())


# ----------------------------------------------------------------------------- throughput


def bench_engine(model, tokenizer, prompts, args):
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=1.0, seed=args.seed)
    engine = HFEngine(tokenizer, sampling)
    start = time.perf_counter()
    groups = engine.generate(model, prompts, args.samples)
    seconds = time.perf_counter() - start
    tokens = sum(len(c.response_ids) for group in groups for c in group)
    prompt_tokens = [len(group[0].prompt_ids) for group in groups]
    return seconds, tokens, prompt_tokens


def _generate_kwargs(tokenizer, args, num_return_sequences=1):
    # top_k=0 and top_p=1 switch off HF's default top-k 50, so both sample the full softmax.
    return dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=args.new_tokens, num_return_sequences=num_return_sequences,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)


def _count_new_tokens(new_ids, eos_id):
    """Response tokens up to and including the first EOS (what HFEngine counts)."""
    count = 0
    for token in new_ids:
        count += 1
        if token == eos_id:
            break
    return count


def encode(tokenizer, prompt):
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                         add_generation_prompt=True, return_dict=True)["input_ids"]


def bench_generate_sequential(model, tokenizer, prompts, args):
    torch.manual_seed(args.seed)
    tokens, start = 0, time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([encode(tokenizer, prompt)])
            for _ in range(args.samples):
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     **_generate_kwargs(tokenizer, args))
                tokens += _count_new_tokens(out[0, ids.shape[1]:].tolist(),
                                            tokenizer.eos_token_id)
    return time.perf_counter() - start, tokens


def bench_generate_batched(model, tokenizer, prompts, args):
    torch.manual_seed(args.seed)
    encoded = [encode(tokenizer, p) for p in prompts]
    width = max(map(len, encoded))
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(encoded):
        ids[i, width - len(row):], mask[i, width - len(row):] = torch.tensor(row), 1
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask,
                             **_generate_kwargs(tokenizer, args, args.samples))
    seconds = time.perf_counter() - start
    tokens = sum(_count_new_tokens(row[width:].tolist(), tokenizer.eos_token_id) for row in out)
    return seconds, tokens


# ----------------------------------------------------------------------------- memory


MEMORY_VARIANTS = {
    "chunked": "response_logprobs (chunked LM head, checkpointed)",
    "chunked+gc": "response_logprobs + decoder-layer gradient checkpointing",
    "full": "full logits + log_softmax [baseline]",
}


def memory_worker(args) -> None:
    """Run in a subprocess: one forward + backward of one variant; print a JSON line."""
    torch.set_num_threads(args.threads)
    model = load_causal_lm(args.model)
    model.train()  # dropout is 0 anyway; train mode as the learner runs it
    if args.memory_worker == "chunked+gc":
        # Recompute each decoder layer in backward: trades ~1 extra forward for the body's
        # activations, which on a 30-layer model outweigh the logits.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    generator = torch.Generator().manual_seed(0)
    shape = (args.memory_batch, args.memory_len)
    input_ids = torch.randint(3, model.config.vocab_size, shape, generator=generator)
    attention_mask = torch.ones_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    response_mask[:, args.memory_len // 2:] = 1
    before_mb = rss_now_mb()
    sampler = RssSampler()
    sampler.start()
    start = time.perf_counter()
    if args.memory_worker.startswith("chunked"):
        logprobs = response_logprobs(model, input_ids, attention_mask, response_mask)
    else:
        logprobs = reference_response_logprobs(model, input_ids, attention_mask, response_mask)
    (logprobs.sum() / response_mask.sum()).backward()
    seconds = time.perf_counter() - start
    step_peak_mb = sampler.stop()
    print(json.dumps({"variant": args.memory_worker, "rss_before_mb": before_mb,
                      "step_peak_rss_mb": step_peak_mb, "process_peak_rss_mb": rss_peak_mb(),
                      "seconds": seconds,
                      "loss": float(logprobs.sum())}))


def bench_memory(args) -> dict[str, dict]:
    results = {}
    for variant in MEMORY_VARIANTS:
        command = [sys.executable, os.path.abspath(__file__), "--memory-worker", variant,
                   "--model", args.model, "--threads", str(args.threads),
                   "--memory-batch", str(args.memory_batch), "--memory-len", str(args.memory_len)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[variant] = json.loads(output.strip().splitlines()[-1])
    return results


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="smollm2-135m-instruct (default), tiny-random, or a path")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4, help="K, samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-batched", action="store_true",
                        help="skip the batched model.generate variant")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--memory-batch", type=int, default=16)
    parser.add_argument("--memory-len", type=int, default=256)
    parser.add_argument("--memory-worker", choices=list(MEMORY_VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        memory_worker(args)
        return

    if not args.skip_throughput:
        bench_throughput(args)
    if not args.skip_memory:
        report_memory(args)


def bench_throughput(args) -> None:
    torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm(args.model), load_tokenizer(args.model)
    prompts = [plan_path_prompt(seed) for seed in range(args.prompts)]
    # Warm-up: first-call costs (kernel selection, allocator) must not land on either side.
    HFEngine(tokenizer, SamplingConfig(max_new_tokens=2, seed=0)).generate(model, prompts[:1], 1)

    # The engine runs before and after the baselines: on a shared machine the gap between its
    # two runs shows how much the load drifted while the slow baseline ran.
    load_before = os.getloadavg()
    rows = []
    seconds, tokens, prompt_tokens = bench_engine(model, tokenizer, prompts, args)
    rows.append(("HFEngine, run 1 (one call, shared prefill, KV cache)", seconds, tokens))
    progress(rows[-1])
    if not args.skip_batched:
        seconds, tokens = bench_generate_batched(model, tokenizer, prompts, args)
        rows.append((f"HF generate, batched (1 call, num_return_sequences={args.samples})",
                     seconds, tokens))
        progress(rows[-1])
    seconds, tokens = bench_generate_sequential(model, tokenizer, prompts, args)
    baseline = ("HF generate, sequential (1 call per prompt per sample) [baseline]",
                seconds, tokens)
    progress(baseline)
    seconds, tokens, _ = bench_engine(model, tokenizer, prompts, args)
    rows.append(("HFEngine, run 2 (same settings, after the baselines)", seconds, tokens))
    progress(rows[-1])
    rows.append(baseline)
    load_after = os.getloadavg()

    baseline_rate = baseline[2] / baseline[1]
    print(f"\n## Rollout throughput: {args.model}, {args.prompts} prompts "
          f"({min(prompt_tokens)}-{max(prompt_tokens)} prompt tokens) x K={args.samples}, "
          f"<= {args.new_tokens} new tokens, temperature 1, {args.threads} torch threads\n")
    print(f"1-minute load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"({os.cpu_count()} CPUs)\n")
    print("| variant | response tokens | seconds | tokens/s | vs baseline |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds, tokens in rows:
        rate = tokens / seconds
        print(f"| {name} | {tokens} | {seconds:.1f} | {rate:.1f} | {rate / baseline_rate:.2f}x |")



def report_memory(args) -> None:
    memory = bench_memory(args)
    print(f"\n## Learner memory: forward + backward of {args.memory_batch} x {args.memory_len} "
          f"tokens (last {args.memory_len // 2} of each row are the response), full fine-tune\n")
    print("| variant | RSS before step (MB) | peak RSS in step (MB) | step peak - before (MB) "
          "| process max RSS, getrusage (MB) | seconds |")
    print("|---|---:|---:|---:|---:|---:|")
    for variant, name in MEMORY_VARIANTS.items():
        r = memory[variant]
        print(f"| {name} | {r['rss_before_mb']:.0f} | {r['step_peak_rss_mb']:.0f} | "
              f"{r['step_peak_rss_mb'] - r['rss_before_mb']:.0f} | "
              f"{r['process_peak_rss_mb']:.0f} | {r['seconds']:.1f} |")
    chunked, full = memory["chunked"], memory["full"]

    def step_mb(r):
        return r["step_peak_rss_mb"] - r["rss_before_mb"]

    print(f"\nstep memory (peak - before), full / chunked: "
          f"{step_mb(full) / step_mb(chunked):.2f}x (with decoder checkpointing "
          f"{step_mb(full) / step_mb(memory['chunked+gc']):.2f}x); "
          f"process max RSS, full / chunked: "
          f"{full['process_peak_rss_mb'] / chunked['process_peak_rss_mb']:.2f}x; "
          f"summed log-probs agree: {chunked['loss']:.4f} vs {full['loss']:.4f}")


if __name__ == "__main__":
    main()
