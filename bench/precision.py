"""fp32 against ``model_dtype: auto`` on this machine, side by side in one run (issue 43).

    python bench/precision.py gemm        # the fp32 and bf16 GEMM ceilings (1024^3 matmul)
    python bench/precision.py model       # the bundled model: prefill, decode-shaped, fwd+bwd
    python bench/precision.py mismatch    # engine vs learner log-probs of the same samples
    python bench/precision.py iteration   # main-job iterations, float32 vs auto
    python bench/precision.py profile     # where a main-job generate call's time goes
    python bench/precision.py learner     # one main-job minibatch: forward, backward, recompute
    python bench/precision.py update      # one learner update: the first step's recompute saved

Every part alternates the two arms within each repetition, so drift in machine load hits both;
quote the ratios, not the absolute times (a shared 2-core VM). ``auto`` resolves here as the
library does (``models/precision.py``): printed first. Results: bench/RESULTS.md "Arithmetic".

* ``model``: SmolLM2-135M (bundled) with fp32 weights vs bf16 weights: a prefill of 8 x 128
  tokens, one decode-shaped step of 64 rows x 1 token over a 128-token KV cache, and forward +
  backward of 8 x 256 tokens; tokens/s. Then one decode step over the engine's preallocated
  cache under the profiler: seconds in GEMMs, attention and the rest, and the rate at which
  the GEMMs read the weights (a decode step reads every weight once).
* ``mismatch``: the HF engine samples K=4 answers to 8 main-job prompts; the learner's module
  recomputes their log-probs teacher-forced, in both arms; mean, p99 and max |gap| per token.
* ``profile``: the main job's generation as its env runner does it (the runner's inference
  copies: the bundled base with one LoRA adapter per role, built from the job's config; 8
  prompts x K=4, 48 new tokens, temperature 0.7), under ``torch.profiler`` in both arms: wall
  seconds per call, the ops with the most self CPU time and the seconds in GEMMs, attention
  and the rest, so the gap between a bf16 GEMM's speed-up and the iteration's is read from
  measurements.
* ``learner``: the learner's copies of the main job (bundled base, one LoRA adapter per role,
  built from its config) on one minibatch shaped as the main job's (2 shared-prefix rows, each
  a 90-token prompt and K=4 responses of 40 tokens): seconds of the training forward, its
  backward and the no-gradient recompute of the ratio's denominator, best of ``--repeats``;
  a minibatch as trained is forward + backward in fp32 (the exact path recomputes nothing) and
  all three under ``auto``. Then one forward and its backward under the profiler: seconds in
  GEMMs, attention and the rest.
* ``update``: one whole learner update under ``auto`` (the main job's learner, 2 modules x 2
  minibatches), as shipped and with every row's denominator recomputed, alternating: what
  taking the first step's forward as its own denominator saves.
* ``iteration``: the main job (``tune_configs/math_cpu.yaml``, ``--set`` overrides apply) built
  with ``build_algo`` in a fresh subprocess per arm and repetition, ``--iterations`` each; wall
  seconds per iteration and the time shares (generate, learner, ...).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from iteration_speed import ITERATION_WORKER  # noqa: E402  (bench/ itself, on the path above)
from worker import emit_result, run_worker  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MAIN_JOB = REPO / "tune_configs/math_cpu.yaml"
ARMS = ("float32", "bfloat16")


def log(message: str) -> None:
    print(f"[precision] {message}", file=sys.stderr, flush=True)


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


#: Self-time categories of a profiled call: the matrix products bf16 speeds up, attention, and
#: everything else (norms, rotary, elementwise, sampling, the log-softmax over the vocabulary).
_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _op_seconds(prof) -> dict[str, float]:
    """Seconds of self CPU time per category (:data:`_GEMM_OPS`, attention, other)."""
    seconds = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for event in prof.key_averages():
        part = ("gemm" if event.key in _GEMM_OPS else
                "attention" if "scaled_dot_product" in event.key else "other")
        seconds[part] += event.self_cpu_time_total / 1e6
    return {part: round(value, 4) for part, value in seconds.items()}


# ------------------------------------------------------------------------------------- gemm
def bench_gemm(args) -> dict:
    size = 1024
    rows: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(args.repeats):
        for arm in ARMS:
            dtype = getattr(torch, arm)
            a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
            seconds = _best_seconds(lambda: a @ b, 5)
            rows[arm].append(2 * size ** 3 / seconds / 1e9)
    best = {arm: max(values) for arm, values in rows.items()}
    return {"gflops": rows, "best_gflops": best,
            "bf16_over_fp32": best["bfloat16"] / best["float32"]}


# ------------------------------------------------------------------------------------ model
def bench_model(args) -> dict:
    from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm

    models = {arm: load_causal_lm(ModelSpec(args.model, dtype=arm)) for arm in ARMS}
    vocab = models["float32"].config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prefill = torch.randint(0, vocab, (8, 128), generator=generator)
    train = torch.randint(0, vocab, (8, 256), generator=generator)
    step = torch.randint(0, vocab, (64, 1), generator=generator)

    def run_prefill(model):
        with torch.no_grad():
            model(prefill)

    def decode_seconds(model, cache, repeats: int) -> float:
        """The best of ``repeats`` single decode steps, each on its own copy of the cache (the
        copy made outside the timed call: a step appends to the cache it is given)."""
        best = float("inf")
        for _ in range(repeats + 1):  # the first is the warm-up
            fresh = copy.deepcopy(cache)
            start = time.perf_counter()
            with torch.no_grad():
                model(step, past_key_values=fresh, use_cache=True)
            best = min(best, time.perf_counter() - start)
        return best

    def run_train(model):
        model.zero_grad(set_to_none=True)
        logits = model(train).logits
        logits.float().logsumexp(-1).mean().backward()

    results: dict[str, dict[str, list[float]]] = {arm: {"prefill": [], "decode": [], "train": []}
                                                   for arm in ARMS}
    for _ in range(args.repeats):
        for arm, model in models.items():
            with torch.no_grad():
                context = torch.randint(0, vocab, (64, 128), generator=generator)
                cache = model(context, use_cache=True).past_key_values
            results[arm]["prefill"].append(prefill.numel() / _best_seconds(
                lambda: run_prefill(model), 2))
            results[arm]["decode"].append(64 / decode_seconds(model, cache, 3))
            model.train()
            results[arm]["train"].append(train.numel() / _best_seconds(
                lambda: run_train(model), 1))
            model.eval()
    best = {arm: {part: max(v) for part, v in parts.items()} for arm, parts in results.items()}
    return {"tokens_per_s": results, "best_tokens_per_s": best,
            "bf16_over_fp32": {part: best["bfloat16"][part] / best["float32"][part]
                               for part in best["float32"]},
            "decode_step_ops": {arm: _decode_step_ops(model, step) for arm, model in models.items()}}


def _decode_step_ops(model, step: torch.Tensor) -> dict:
    """One decode step (``step``'s rows over a 150-token cache, the engine's preallocated
    cache) under the profiler: seconds per op category, and the rate at which the step's GEMMs
    read the model's weights (every weight is read once per step)."""
    from torch.profiler import ProfilerActivity, profile

    from pettingllms_rllib.engines.hf_engine import preallocated_cache

    def cached():
        cache = preallocated_cache(model, capacity=152)
        with torch.no_grad():
            model(torch.randint(0, model.config.vocab_size, (len(step), 150),
                                generator=torch.Generator().manual_seed(1)),
                  past_key_values=cache, use_cache=True)
        return cache

    with torch.no_grad():
        model(step, past_key_values=cached(), use_cache=True)  # warm-up
        cache = cached()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(step, past_key_values=cache, use_cache=True)
    seconds = _op_seconds(prof)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"seconds": seconds, "weight_bytes": weight_bytes,
            "gemm_weight_read_gb_per_s": round(weight_bytes / seconds["gemm"] / 1e9, 2)}


# --------------------------------------------------------------------------------- mismatch
def bench_mismatch(args) -> dict:
    from pettingllms_rllib.engines.base import SamplingConfig
    from pettingllms_rllib.engines.hf_engine import HFEngine
    from pettingllms_rllib.envs import make_text_env
    from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm, load_tokenizer
    from pettingllms_rllib.models.logprobs import response_logprobs

    env = make_text_env("math_v0", {"dataset": {"source": "generated", "difficulty": 1,
                                                "kinds": ["arithmetic"]},
                                    "variant": "compact_sentence"})
    prompts = [env.reset(seed=seed)[0]["reasoner"] for seed in range(8)]
    tokenizer = load_tokenizer(ModelSpec(args.model))
    result = {}
    for arm in ARMS:
        model = load_causal_lm(ModelSpec(args.model, dtype=arm))
        engine = HFEngine(tokenizer, SamplingConfig(max_new_tokens=40, temperature=0.7, seed=0))
        gaps = []
        for completion in (c for group in engine.generate(model, prompts, 4) for c in group):
            ids = torch.tensor([list(completion.prompt_ids) + list(completion.response_ids)])
            start = len(completion.prompt_ids)
            mask = torch.zeros_like(ids)
            mask[0, start:] = 1
            with torch.no_grad():
                learner = response_logprobs(model, ids, torch.ones_like(ids), mask,
                                            temperature=0.7)[0, start:]
            gaps.append((learner - torch.tensor(completion.logprobs)).abs())
        flat = torch.cat(gaps)
        result[arm] = {"tokens": int(flat.numel()), "mean": float(flat.mean()),
                       "p99": float(flat.quantile(0.99)), "max": float(flat.max())}
    return result


# ---------------------------------------------------------------------------------- profile
def bench_profile(args) -> dict:
    from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES
    from torch.profiler import ProfilerActivity, profile

    from pettingllms_rllib.engines.base import SamplingConfig
    from pettingllms_rllib.engines.hf_engine import HFEngine
    from pettingllms_rllib.envs import make_text_env
    from pettingllms_rllib.experiment import load_experiment
    from pettingllms_rllib.models.loading import ModelSpec, load_tokenizer

    arms = {}
    for arm in ("float32", "auto"):
        config = load_experiment(MAIN_JOB, [f"llm.model_dtype={arm}"]).config
        env = make_text_env(config.env, config.env_config)
        agent = env.possible_agents[0]
        module_id = config.policy_mapping_fn(agent, None)
        prompts = [env.reset(seed=seed)[0][agent] for seed in range(8)]
        obs, act = env.observation_space(agent), env.action_space(agent)
        spaces = {INPUT_ENV_SPACES: (obs, act), INPUT_ENV_SINGLE_SPACES: (obs, act),
                  **{config.policy_mapping_fn(a, None): (obs, act) for a in env.possible_agents}}
        modules = config.get_multi_rl_module_spec(spaces=spaces, inference_only=True).build()
        module = modules[module_id]
        module.activate()
        engine = HFEngine(load_tokenizer(ModelSpec.coerce(config.model_spec_dict)),
                          SamplingConfig(max_new_tokens=48, temperature=0.7, seed=0))

        def call():
            return engine.generate(module.causal_lm, prompts, 4)

        seconds = _best_seconds(call, args.repeats)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            completions = call()
        tokens = sum(len(c.response_ids) for group in completions for c in group)
        total = sum(e.self_cpu_time_total for e in prof.key_averages())
        top = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        arms[arm] = {
            "seconds_per_call": seconds, "response_tokens": tokens,
            "op_seconds": _op_seconds(prof),
            "weight_dtypes": sorted({str(p.dtype) for p in module.causal_lm.parameters()}),
            "top_ops_self_cpu_share": {e.key: round(e.self_cpu_time_total / total, 3)
                                       for e in top[:12]}}
        log(f"profile: {arm}: {seconds:.2f} s per call, {tokens} tokens")
    return {"arms": arms, "fp32_over_auto": (arms["float32"]["seconds_per_call"]
                                             / arms["auto"]["seconds_per_call"])}


# ---------------------------------------------------------------------------------- learner
def _packed_minibatch(rows: int = 2, prompt: int = 90, samples: int = 4, response: int = 40,
                      vocab: int = 40000) -> dict:
    """Shared-prefix rows (``core.batching.pack_records``) of random tokens."""
    generator = torch.Generator().manual_seed(0)
    length = prompt + samples * response
    segments = torch.zeros(rows, length, dtype=torch.long)
    positions = torch.zeros(rows, length, dtype=torch.long)
    positions[:, :prompt] = torch.arange(prompt)
    for k in range(samples):
        start = prompt + k * response
        segments[:, start:start + response] = k + 1
        positions[:, start:start + response] = torch.arange(prompt, prompt + response)
    return {"input_ids": torch.randint(0, vocab, (rows, length), generator=generator),
            "position_ids": positions, "segment_ids": segments,
            "response_mask": (segments > 0).float()}


def bench_learner(args) -> dict:
    from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES

    from pettingllms_rllib.envs import make_text_env
    from pettingllms_rllib.experiment import load_experiment
    from pettingllms_rllib.models.rl_modules import TOKEN_LOGP

    batch = _packed_minibatch()
    modules = {}
    for arm in ("float32", "auto"):
        config = load_experiment(MAIN_JOB, [f"llm.model_dtype={arm}"]).config
        env = make_text_env(config.env, config.env_config)
        agent = env.possible_agents[0]
        obs, act = env.observation_space(agent), env.action_space(agent)
        spaces = {INPUT_ENV_SPACES: (obs, act), INPUT_ENV_SINGLE_SPACES: (obs, act),
                  **{config.policy_mapping_fn(a, None): (obs, act) for a in env.possible_agents}}
        built = config.get_multi_rl_module_spec(spaces=spaces, inference_only=False).build()
        modules[arm] = built[config.policy_mapping_fn(agent, None)]
    seconds: dict[str, dict[str, list[float]]] = {
        arm: {"forward": [], "backward": [], "recompute": []} for arm in modules}
    for repeat in range(args.repeats + 1):  # the first is the warm-up
        for arm, module in modules.items():
            start = time.perf_counter()
            logp = module.forward_train(batch)[TOKEN_LOGP]
            forward = time.perf_counter()
            logp.sum().backward()
            backward = time.perf_counter()
            module.detached_logprobs(batch)
            end = time.perf_counter()
            if repeat:
                for part, value in (("forward", forward - start), ("backward", backward - forward),
                                    ("recompute", end - backward)):
                    seconds[arm][part].append(value)
    best = {arm: {part: min(v) for part, v in parts.items()} for arm, parts in seconds.items()}
    ops = {arm: _learner_ops(module, batch) for arm, module in modules.items()}
    # As trained: the exact path (fp32 on-policy) needs no recompute, bf16 always does.
    trained = {"float32": best["float32"]["forward"] + best["float32"]["backward"],
               "auto": sum(best["auto"].values())}
    return {"minibatch_as_trained_s": trained,
            "minibatch_fp32_over_auto": trained["float32"] / trained["auto"],
            "seconds": seconds, "best_seconds": best,
            "fp32_over_auto": {part: best["float32"][part] / best["auto"][part]
                               for part in best["float32"]},
            "shape": {k: list(v.shape) for k, v in batch.items()}, "op_seconds": ops}


def _learner_ops(module, batch) -> dict[str, dict[str, float]]:
    """One training forward and its backward under the profiler: seconds per op category."""
    from torch.profiler import ProfilerActivity, profile

    from pettingllms_rllib.models.rl_modules import TOKEN_LOGP

    with profile(activities=[ProfilerActivity.CPU]) as forward:
        logp = module.forward_train(batch)[TOKEN_LOGP]
    with profile(activities=[ProfilerActivity.CPU]) as backward:
        logp.sum().backward()
    return {"forward": _op_seconds(forward), "backward": _op_seconds(backward)}


# ----------------------------------------------------------------------------------- update
def bench_update(args) -> dict:
    """One whole learner update under ``auto`` on a main-job-shaped batch (each module: 4
    shared-prefix rows of a 90-token prompt and K=4 responses of 40 tokens, 16 samples, so 2
    steps of ``minibatch_size`` 8), as shipped (the first step's rows take their own forward
    as the ratio denominator) and with every row recomputed (the rule before 4b1250d),
    alternating; seconds per update, best of ``--repeats``."""
    import gymnasium
    import numpy as np
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from pettingllms_rllib.algorithms import learner as learner_module
    from pettingllms_rllib.envs import make_text_env
    from pettingllms_rllib.experiment import load_experiment

    config = load_experiment(MAIN_JOB, ["llm.model_dtype=auto"]).config
    agents = make_text_env(config.env, config.env_config).possible_agents
    space = gymnasium.spaces.Text(8)
    learner = config.build_learner(env=None, spaces={a: (space, space) for a in agents})
    rows = {key: value.numpy() for key, value in _packed_minibatch(rows=4).items()}
    rows["old_logp"] = np.where(rows["response_mask"] > 0, -2.0, 0.0).astype(np.float32)
    rows["advantages"] = (rows["response_mask"] * np.where(rows["segment_ids"] % 2, 1.0, -1.0)
                          ).astype(np.float32)
    rows["num_samples"] = np.full(4, 4, dtype=np.int64)
    modules = {config.policy_mapping_fn(agent, None) for agent in agents}
    shipped = learner_module.rows_trained_before_any_update
    arms = {"first step from its forward": shipped,
            "every row recomputed": lambda steps, module_id: np.zeros(0, dtype=np.int64)}
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for repeat in range(args.repeats + 1):  # the first is the warm-up
        for arm, rule in arms.items():
            learner_module.rows_trained_before_any_update = rule
            batch = MultiAgentBatch({m: SampleBatch(dict(rows)) for m in modules}, env_steps=16)
            start = time.perf_counter()
            learner.update(batch=batch, minibatch_size=8, num_epochs=1)
            if repeat:
                seconds[arm].append(time.perf_counter() - start)
    learner_module.rows_trained_before_any_update = shipped
    best = {arm: min(values) for arm, values in seconds.items()}
    return {"seconds": seconds, "best_seconds": best,
            "recomputed_over_shipped": best["every row recomputed"]
            / best["first step from its forward"]}


# -------------------------------------------------------------------------------- iteration


def bench_iteration(args) -> dict:
    results: dict[str, list] = {"float32": [], "auto": []}
    for repeat in range(args.repeats):
        for arm in results:
            log(f"iteration: {arm}, repetition {repeat + 1}/{args.repeats}")
            overrides = [f"llm.model_dtype={arm}", "evaluation.evaluation_interval=0",
                         "resources.num_cpus_for_main_process=1", *args.set]
            results[arm].append(run_worker(
                ITERATION_WORKER, [MAIN_JOB, args.iterations, *overrides], cwd=REPO,
                env={**os.environ, "OMP_NUM_THREADS": "1"}, what=f"iteration worker ({arm})"))
    per_arm = {arm: [row["time_this_iter_s"] for run in runs for row in run]
               for arm, runs in results.items()}
    median = {arm: sorted(v)[len(v) // 2] for arm, v in per_arm.items()}
    return {"runs": results, "median_iteration_s": median,
            "fp32_over_auto": median["float32"] / median["auto"]}


def main() -> None:
    from pettingllms_rllib.models.precision import resolve_model_dtype

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("gemm", "model", "mismatch", "profile", "learner",
                                             "update", "iteration"))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", nargs="*", default=[], help="overrides for the iteration part")
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    choice = resolve_model_dtype("auto")
    log(choice.describe())
    result = {"gemm": bench_gemm, "model": bench_model, "mismatch": bench_mismatch,
              "profile": bench_profile, "learner": bench_learner, "update": bench_update,
              "iteration": bench_iteration}[args.part](args)
    result.update(threads=args.threads, auto=choice.describe())
    emit_result(result, args.out)


if __name__ == "__main__":
    main()
