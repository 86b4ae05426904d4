"""One-GPU check of the Ray-free parts of the library: engine and learner throughput, LoRA
memory, and behaviour-vs-learner log-prob agreement, on a Qwen3-1.7B-shaped random model.

    python bench/device_check.py [--tiny] [--out results.json] [--budget-s 360]

Self-contained for a machine with torch, transformers and peft but without Ray, vLLM or
network: the model (Qwen3-1.7B's published shape, random weights, bf16 on CUDA) and a
word-level tokenizer with a chat template are built locally, nothing is downloaded. Only
``pettingllms_rllib.engines``, ``pettingllms_rllib.models.logprobs`` and
``pettingllms_rllib.core.loss`` are imported from this repository; none of them (nor the
package ``__init__``, which defers its RLlib import) imports Ray. ``--tiny`` runs a 2-layer,
hidden-64 model on CPU in fp32 to test the script itself.

Measured, in this order (the agreement check comes before any optimiser step):

1. ``HFEngine`` tokens/s: one batched call, P prompts x n=K samples (shared prefill), against
   the same prompts one at a time with n=1, in the same run, with a fresh engine of the same
   seed each. A random model almost never samples EOS, so responses run to max_new_tokens.
2. Behaviour log-probs returned by the engine (KV-cache decode, left padding) against
   ``response_logprobs`` recomputed teacher-forced by the learner path (right padding) on the
   same tokens: max and mean |diff| and the mean ratio exp(learner - behaviour).
3. Learner tokens/s of one AdamW step with ``clipped_token_loss`` on the response tokens of the
   engine's batch: full fine-tuning; one shared LoRA adapter; two per-role LoRA adapters on one
   base (each one step on its half of the batch). One untimed warm-up step first (kernels,
   optimiser state); peak memory (``torch.cuda.max_memory_allocated``, reset per variant,
   warm-up included) on CUDA, n/a on CPU.

``--budget-s`` (default 360 s, counted from start, model construction included) stops repeating
measurements once spent and skips the sections not started yet, so that the default run stays
under 8 minutes; what was cut is listed under "notes".
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import random
import sys
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# peft asks transformers for a deprecated property; the warning is noise in the printed table.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

import torch  # noqa: E402

from pettingllms_rllib.core.loss import clipped_token_loss  # noqa: E402
from pettingllms_rllib.engines.base import SamplingConfig  # noqa: E402
from pettingllms_rllib.engines.hf_engine import HFEngine  # noqa: E402
from pettingllms_rllib.models.logprobs import response_logprobs  # noqa: E402
from pettingllms_rllib.models.memory import DEFAULT_LORA  # noqa: E402


# Qwen3-1.7B's published config (config.json of Qwen/Qwen3-1.7B).
QWEN3_1_7B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                  num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                  head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, rope_parameters={"rope_type": "default",
                                                             "rope_theta": 1000000.0})
TINY = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})

SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
WORDS = ("the agent moves up down left right to a goal in grid wall free cell row column start "
         "plan tool answer code test math number sum of is and or not then else if for each "
         "step path shortest list print run output value check result one two three four five "
         "six seven eight nine zero system user assistant you are give on line like").split()
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                 "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


class Budget:
    """Seconds left of --budget-s since start; ``spent`` once they are gone."""

    def __init__(self, seconds: float):
        self.start = time.perf_counter()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    @property
    def spent(self) -> bool:
        return self.elapsed() >= self.seconds


def build_tokenizer(vocab_size: int):
    """A word-level tokenizer covering every model id (so any sampled id decodes), with
    ChatML-style special tokens and chat template; built in memory, nothing downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    names = SPECIALS + WORDS
    names += [f"<t{i}>" for i in range(vocab_size - len(names))]
    vocab = {name: i for i, name in enumerate(names)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                                        pad_token="<pad>", eos_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(shape: dict, tokenizer, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**shape, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    with torch.device(device):  # initialise in place: no fp32 CPU copy of 1.7B weights
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def make_prompts(count: int, min_words: int, max_words: int) -> list[str]:
    rng = random.Random(1234)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
            for _ in range(count)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**30


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------- engine


def bench_engine(model, tokenizer, prompts, args, device, budget, notes):
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    # Warm-up (kernel selection, allocator): tiny generation, not timed.
    HFEngine(tokenizer, SamplingConfig(max_new_tokens=4, seed=1)).generate(model, prompts[:2], 2)

    reset_peak(device)
    engine = HFEngine(tokenizer, sampling)
    batched_tokens, batched_seconds, first = 0, 0.0, None
    for rep in range(args.engine_reps):
        if rep > 0 and budget.spent:
            notes.append(f"engine batched: {rep} of {args.engine_reps} repetitions (budget)")
            break
        sync(device)
        t0 = time.perf_counter()
        completions = engine.generate(model, prompts, args.samples)
        sync(device)
        batched_seconds += time.perf_counter() - t0
        batched_tokens += sum(len(c.response_ids) for group in completions for c in group)
        first = first or completions
    batched_peak = peak_gib(device)

    reset_peak(device)
    engine = HFEngine(tokenizer, sampling)
    seq_tokens, seq_seconds, done = 0, 0.0, 0
    for prompt in prompts:
        if done > 0 and budget.spent:
            notes.append(f"engine sequential: {done} of {len(prompts)} prompts (budget)")
            break
        sync(device)
        t0 = time.perf_counter()
        [[completion]] = engine.generate(model, [prompt], 1)
        sync(device)
        seq_seconds += time.perf_counter() - t0
        seq_tokens += len(completion.response_ids)
        done += 1
    seq_peak = peak_gib(device)

    batched = {"variant": f"batched: {len(prompts)} prompts x n={args.samples}, one call",
               "tokens": batched_tokens, "seconds": batched_seconds,
               "tokens_per_s": batched_tokens / batched_seconds, "peak_gib": batched_peak}
    sequential = {"variant": f"sequential: {done} prompts x n=1, one call each",
                  "tokens": seq_tokens, "seconds": seq_seconds,
                  "tokens_per_s": seq_tokens / seq_seconds, "peak_gib": seq_peak}
    result = {"batched": batched, "sequential": sequential,
              "speedup": batched["tokens_per_s"] / sequential["tokens_per_s"],
              "max_new_tokens": args.new_tokens,
              "stop_fraction": sum(c.finish_reason == "stop" for g in first for c in g)
              / sum(len(g) for g in first)}
    return result, first


# --------------------------------------------------------------------------------- learner


def learner_batch(completions, pad_id: int, device: torch.device, seed: int = 0):
    """Right-padded prompt + response rows, response mask, behaviour log-probs on response
    positions, one advantage per row (group-normalised random rewards)."""
    rows = [c for group in completions for c in group]
    width = max(len(c.prompt_ids) + len(c.response_ids) for c in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    response = torch.zeros((len(rows), width), dtype=torch.long)
    old_logp = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, c in enumerate(rows):
        p, r = len(c.prompt_ids), len(c.response_ids)
        ids[i, :p + r] = torch.tensor(c.prompt_ids + c.response_ids)
        attention[i, :p + r] = 1
        response[i, p:p + r] = 1
        old_logp[i, p:p + r] = torch.tensor(c.logprobs, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    group = len(completions[0])
    rewards = torch.rand((len(completions), group), generator=generator)
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
    return {"input_ids": ids.to(device), "attention_mask": attention.to(device),
            "response_mask": response.to(device), "old_logp": old_logp.to(device),
            "advantages": adv.reshape(-1).to(device)}


def agreement(model, batch, chunk_size: int) -> dict:
    with torch.no_grad():
        learner = response_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                    batch["response_mask"], temperature=1.0,
                                    chunk_size=chunk_size)
    mask = batch["response_mask"].bool()
    diff = (learner - batch["old_logp"])[mask].double()
    return {"tokens": int(mask.sum()), "max_abs_diff": float(diff.abs().max()),
            "mean_abs_diff": float(diff.abs().mean()),
            "mean_ratio": float(diff.exp().mean()),
            "mean_behaviour_logprob": float(batch["old_logp"][mask].double().mean())}


def _rows(batch, index):
    """Sub-batch of rows ``index``, trimmed to its longest row."""
    sub = {k: v[index] for k, v in batch.items()}
    width = int(sub["attention_mask"].sum(1).max())
    return {k: (v[:, :width] if v.dim() == 2 else v) for k, v in sub.items()}


def optimisation_step(model, optimizer, sub, chunk_size: int):
    optimizer.zero_grad(set_to_none=True)
    logp = response_logprobs(model, sub["input_ids"], sub["attention_mask"],
                             sub["response_mask"], temperature=1.0, chunk_size=chunk_size)
    loss, stats = clipped_token_loss(logp, sub["old_logp"], sub["advantages"],
                                     sub["response_mask"])
    loss.backward()
    optimizer.step()
    if not math.isfinite(stats.policy_loss):
        raise RuntimeError(f"non-finite loss {stats.policy_loss}")
    return stats


def timed_steps(steps, args, device, budget, notes, label):
    """Run ``steps`` (list of (model, optimizer, sub_batch)) once untimed, then time up to
    --learner-reps rounds; return (seconds per round, rounds, peak GiB incl. warm-up)."""
    for model, optimizer, sub in steps:
        optimisation_step(model, optimizer, sub, args.chunk_size)
    seconds, rounds = 0.0, 0
    for rep in range(args.learner_reps):
        if rep > 0 and budget.spent:
            notes.append(f"learner {label}: {rep} of {args.learner_reps} timed steps (budget)")
            break
        sync(device)
        t0 = time.perf_counter()
        for model, optimizer, sub in steps:
            optimisation_step(model, optimizer, sub, args.chunk_size)
        sync(device)
        seconds += time.perf_counter() - t0
        rounds += 1
    return seconds / rounds, rounds, peak_gib(device)


def bench_learner(model, batch, args, device, budget, notes) -> list[dict]:
    from peft import LoraConfig, get_peft_model

    tokens = int(batch["attention_mask"].sum())
    response_tokens = int(batch["response_mask"].sum())
    everything = torch.arange(batch["input_ids"].shape[0], device=device)
    results = []

    def record(variant, seconds, rounds, peak, trainable):
        results.append({"variant": variant, "tokens": tokens, "response_tokens": response_tokens,
                        "seconds": seconds, "timed_steps": rounds,
                        "tokens_per_s": tokens / seconds,
                        "response_tokens_per_s": response_tokens / seconds,
                        "peak_gib": peak, "trainable_params": trainable})

    def skipped(variant):
        notes.append(f"learner {variant}: skipped (budget)")
        results.append({"variant": variant, "skipped": True})

    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()

    # Full fine-tuning.
    if budget.spent:
        skipped("full fine-tuning")
    else:
        free_memory(device)
        reset_peak(device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-6)
        seconds, rounds, peak = timed_steps([(model, optimizer, _rows(batch, everything))],
                                            args, device, budget, notes, "full")
        record("full fine-tuning (AdamW)", seconds, rounds, peak, sum(p.numel() for p in params))
        del optimizer, params
        model.zero_grad(set_to_none=True)

    for param in model.parameters():
        param.requires_grad_(False)
    free_memory(device)

    # One shared LoRA adapter.
    peft_model = get_peft_model(model, LoraConfig(**DEFAULT_LORA), adapter_name="shared")
    if budget.spent:
        skipped("LoRA, one shared adapter")
    else:
        reset_peak(device)
        params = [p for n, p in peft_model.named_parameters() if "lora_" in n and p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-4)
        seconds, rounds, peak = timed_steps([(peft_model, optimizer, _rows(batch, everything))],
                                            args, device, budget, notes, "shared LoRA")
        record(f"LoRA, one shared adapter (r={DEFAULT_LORA['r']})", seconds, rounds, peak,
               sum(p.numel() for p in params))
        del optimizer, params
        peft_model.zero_grad(set_to_none=True)

    # Per-role adapters on the same base; each role one step on its half of the batch.
    roles = ("planner", "tool")
    for role in roles:
        peft_model.add_adapter(role, LoraConfig(**DEFAULT_LORA))
    peft_model.base_model.set_adapter(roles[0])
    peft_model.delete_adapter("shared")
    free_memory(device)
    if budget.spent:
        skipped("LoRA, per-role adapters")
    else:
        reset_peak(device)
        half = (len(everything) + 1) // 2
        steps, trainable = [], 0
        for i, role in enumerate(roles):
            tag = f".{role}."
            params = [p for n, p in peft_model.named_parameters() if "lora_" in n and tag in n]
            for p in params:
                p.requires_grad_(True)
            trainable += sum(p.numel() for p in params)
            steps.append((_AdapterView(peft_model, role), torch.optim.AdamW(params, lr=1e-4),
                          _rows(batch, everything[i * half:(i + 1) * half])))
        seconds, rounds, peak = timed_steps(steps, args, device, budget, notes, "per-role LoRA")
        record(f"LoRA, {len(roles)} per-role adapters on one base, one step each on its half",
               seconds, rounds, peak, trainable)
    return results


class _AdapterView:
    """Activates one adapter of a peft model before every use (as LoRAAdapterRLModule.activate
    does), then behaves like the peft model for ``response_logprobs``."""

    def __init__(self, peft_model, adapter: str):
        self._peft_model, self._adapter = peft_model, adapter

    def get_base_model(self):
        self._peft_model.base_model.set_adapter(self._adapter)
        # set_adapter freezes the other adapters; each has its own optimiser here, keep them all
        # trainable as the library does.
        for name, param in self._peft_model.named_parameters():
            if "lora_" in name:
                param.requires_grad_(True)
        return self._peft_model.get_base_model()


# ----------------------------------------------------------------------------------- report


def _fmt(value, digits=1):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(result: dict) -> str:
    meta = result["meta"]
    lines = [f"### device_check, {meta['date']}", "",
             f"- device: {meta['device_name']} ({meta['device']}, {meta['dtype']}); torch "
             f"{meta['torch']}, transformers {meta['transformers']}, peft {meta['peft']}, "
             f"python {meta['python']}",
             f"- model: {meta['model']}, {meta['params'] / 1e6:,.1f}M params, random init; "
             f"{meta['prompts']} prompts of {meta['prompt_tokens']} tokens, K={meta['samples']}, "
             f"max_new_tokens={meta['max_new_tokens']}, temperature 1",
             f"- total wall time {meta['wall_s']:.0f} s (budget {meta['budget_s']:.0f} s)", "",
             "| part | variant | tokens | s | tokens/s | peak GiB |",
             "|---|---|---:|---:|---:|---:|"]
    engine = result.get("engine")
    if engine:
        for key in ("batched", "sequential"):
            e = engine[key]
            lines.append(f"| engine | {e['variant']} | {_fmt(e['tokens'])} | "
                         f"{_fmt(e['seconds'], 2)} | {_fmt(e['tokens_per_s'])} | "
                         f"{_fmt(e['peak_gib'], 2)} |")
        lines.append(f"| engine | batched / sequential tokens/s | | | "
                     f"**{engine['speedup']:.2f}x** | |")
    for entry in result.get("learner", []):
        if entry.get("skipped"):
            lines.append(f"| learner | {entry['variant']} | skipped (budget) | | | |")
            continue
        lines.append(f"| learner | {entry['variant']}; {_fmt(entry['trainable_params'])} "
                     f"trainable | {_fmt(entry['tokens'])} ({_fmt(entry['response_tokens'])} "
                     f"resp.) | {_fmt(entry['seconds'], 2)} | {_fmt(entry['tokens_per_s'])} "
                     f"({_fmt(entry['response_tokens_per_s'])} resp.) | "
                     f"{_fmt(entry['peak_gib'], 2)} |")
    agree = result.get("agreement")
    if agree:
        lines += ["", "| behaviour vs learner log-probs | tokens | max abs diff | mean abs diff "
                  "| mean exp(learner - behaviour) |", "|---|---:|---:|---:|---:|",
                  f"| engine (KV cache, left pad) vs response_logprobs (teacher-forced) | "
                  f"{agree['tokens']:,} | {agree['max_abs_diff']:.3g} | "
                  f"{agree['mean_abs_diff']:.3g} | {agree['mean_ratio']:.6f} |"]
    if result["notes"]:
        lines += ["", "notes: " + "; ".join(result["notes"])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="2-layer hidden-64 model on CPU in fp32 (tests the script)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--budget-s", type=float, default=360.0,
                        help="stop repeating / skip unstarted sections after this many seconds")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4, help="K, samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=None,
                        help="max new tokens (default 128; 16 with --tiny)")
    parser.add_argument("--engine-reps", type=int, default=2)
    parser.add_argument("--learner-reps", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=1024,
                        help="response_logprobs LM-head chunk size")
    parser.add_argument("--grad-checkpointing", action="store_true")
    args = parser.parse_args(argv)
    if args.new_tokens is None:
        args.new_tokens = 16 if args.tiny else 128
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    import peft
    import transformers

    if args.tiny:
        device, dtype, shape, name = torch.device("cpu"), torch.float32, TINY, "tiny Qwen3"
        prompt_words = (8, 24)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --tiny on CPU")
        device, dtype, shape = torch.device("cuda", 0), torch.bfloat16, QWEN3_1_7B
        name, prompt_words = "Qwen3-1.7B-shaped", (96, 192)
    notes: list[str] = []

    tokenizer = build_tokenizer(shape["vocab_size"])
    model = build_model(shape, tokenizer, device, dtype)
    prompts = make_prompts(args.prompts, *prompt_words)
    prompt_lengths = [len(HFEngine(tokenizer, SamplingConfig()).encode_prompt(p)) for p in prompts]
    result = {"meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__, "python": platform.python_version(),
        "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "dtype": str(dtype).replace("torch.", ""), "model": name, "shape": shape,
        "params": sum(p.numel() for p in model.parameters()),
        "prompts": len(prompts), "prompt_tokens": f"{min(prompt_lengths)}-{max(prompt_lengths)}",
        "samples": args.samples, "max_new_tokens": args.new_tokens,
        "budget_s": args.budget_s, "ray_importable": _importable("ray"),
        "vllm_importable": _importable("vllm"), "build_s": budget.elapsed()},
        "notes": notes}

    engine, completions = bench_engine(model, tokenizer, prompts, args, device, budget, notes)
    result["engine"] = engine
    batch = learner_batch(completions, tokenizer.pad_token_id, device)
    result["agreement"] = agreement(model, batch, args.chunk_size)
    result["learner"] = bench_learner(model, batch, args, device, budget, notes)
    result["meta"]["wall_s"] = budget.elapsed()

    print(markdown(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


if __name__ == "__main__":
    main()
