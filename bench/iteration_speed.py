"""Where an AT-GRPO iteration's time goes, each part against its baseline in the same run.

    python bench/iteration_speed.py engine      # rollout: decode loop vs the baseline engine
    python bench/iteration_speed.py learner     # learner: shared-prefix vs per-row batches
    python bench/iteration_speed.py sandbox     # env: shared program verdicts vs one run each
    python bench/iteration_speed.py iteration   # one main-job iteration, baseline tree vs this

The baseline is the code at ``--baseline-rev`` (default: the commit before the speed work),
checked out into a temporary git worktree: its ``HFEngine`` is loaded from there for the engine
part, and the iteration part runs the main job's config once with that tree on ``PYTHONPATH``
and once with this one.

* ``engine``: real plan_path prompts (the main job's env, tool and planner stages) at the main
  job's shape (8 tasks x K=4, 16 new tokens) and at 32 tasks x K=4, new engine vs baseline,
  alternating; the fp32 GEMM ceiling is measured in the same process (a 1024^3 matmul), and
  a token costs 2 x parameters FLOPs, so ceiling tokens/s = GEMM FLOP/s / (2 x params).
  Reported: response tokens/s, and model tokens/s (prefill + decode tokens that went through
  the model) as a share of the ceiling.
* ``learner``: records of one real rollout of the main job (bundled SmolLM2, per-role LoRA
  r=16, 8 tasks x K=4, both stages), every record with a non-zero advantage, minibatches of 8
  samples as in the main job, each trimmed to its longest row as the learner does; forward +
  backward + AdamW step of the AT-GRPO loss, per-row rows vs shared-prefix rows, alternating;
  response tokens/s and the largest minibatch's activation memory (bytes of the storages
  autograd saves for backward, the model's weights left out).
* ``sandbox``: one rollout of 32 main-job tasks x K=4 is recorded, then its engine answers are
  replayed through the tree sampler with identical programs sharing one sandbox run and
  without, alternating; env seconds (sampling minus generation), sandbox runs, and whether
  every reward equals the recording's.
* ``iteration``: each tree's own ``tune_configs/plan_path_cpu.yaml`` (``--set`` overrides
  apply to both) built with ``build_algo`` (no Tune), the first ``--iterations`` iterations,
  in a fresh subprocess per tree; wall seconds per iteration and, where the tree logs them,
  the time shares.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from worker import emit_result, run_worker  # noqa: E402  (bench/ itself, on the path above)
#: The commit before the speed work (shared-prefix training, preallocated decode loop).
DEFAULT_BASELINE = "191644a"
MAIN_JOB = REPO / "tune_configs" / "plan_path_cpu.yaml"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def baseline_tree(rev: str):
    """A throwaway worktree of ``rev`` (with ``pettingllms_envs`` importable from its root:
    revisions before the task suite's folder got its import name kept it in ``envs/``)."""
    folder = Path(tempfile.mkdtemp(prefix="pettingllms-baseline-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(folder),
                    rev], check=True, capture_output=True)
    if not (folder / "pettingllms_envs").exists():
        (folder / "pettingllms_envs").symlink_to(folder / "envs")
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)],
                       check=False, capture_output=True)


def load_module_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main_job_env(num_tasks: int, seed: int = 0):
    """``num_tasks`` reset plan_path envs with the main job's env_config."""
    import yaml

    from pettingllms_rllib.envs.registry import make_text_env

    document = yaml.safe_load(MAIN_JOB.read_text())
    env_section = document["algorithm"]["environment"]
    envs = []
    for task in range(num_tasks):
        env = make_text_env(env_section["env"], env_section["env_config"])
        env.reset(seed=seed * 1000 + task)
        envs.append(env)
    return envs, document


def stage_prompts(envs) -> dict[str, list[str]]:
    """Each task's tool prompt, and the planner prompt after a tool turn with no program."""
    prompts = {"tool": [], "planner": []}
    for env in envs:
        prompts["tool"].append(env.current_observations()["tool"])
        after = env.clone()
        after.step({"tool": "no program"})
        prompts["planner"].append(after.current_observations()["planner"])
    return prompts


def gemm_ceiling_gflops(repeats: int = 5) -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * 1024 ** 3 / best / 1e9


# ----------------------------------------------------------------------------------- engine
def bench_engine(args) -> dict:
    from pettingllms_rllib.engines.base import SamplingConfig
    from pettingllms_rllib.engines.hf_engine import HFEngine
    from pettingllms_rllib.models.loading import load_causal_lm, load_tokenizer

    model, tokenizer = load_causal_lm(args.model), load_tokenizer(args.model)
    flops_per_token = 2 * sum(p.numel() for p in model.parameters())
    with baseline_tree(args.baseline_rev) as tree:
        baseline = load_module_from(tree / "pettingllms_rllib/engines/hf_engine.py",
                                    "baseline_hf_engine")
        engines = {"new engine": HFEngine, "baseline engine": baseline.HFEngine}
        results = {"flops_per_token": flops_per_token, "shapes": {}}
        for num_tasks in args.engine_tasks:
            envs, _ = main_job_env(num_tasks)
            prompts = stage_prompts(envs)
            sampling = SamplingConfig(max_new_tokens=16, temperature=0.7, seed=args.seed)
            rows = {name: [] for name in engines}
            ceilings = []
            for repeat in range(args.repeats):
                ceilings.append(gemm_ceiling_gflops())
                for name, engine_class in engines.items():
                    engine = engine_class(tokenizer, sampling)
                    prompt_tokens = response_tokens = 0
                    start = time.perf_counter()
                    for stage in ("tool", "planner"):
                        groups = engine.generate(model, prompts[stage], args.samples)
                        prompt_tokens += sum(len(g[0].prompt_ids) for g in groups)
                        response_tokens += sum(len(c.response_ids) for g in groups for c in g)
                    seconds = time.perf_counter() - start
                    rows[name].append({"seconds": seconds, "response_tokens": response_tokens,
                                       "model_tokens": prompt_tokens + response_tokens})
                    log(f"engine {num_tasks} tasks x K={args.samples}, {name}, repeat "
                        f"{repeat}: {response_tokens} response tokens in {seconds:.1f} s")
            ceiling_tps = np.median(ceilings) * 1e9 / flops_per_token
            summary = {"gemm_gflops": float(np.median(ceilings)),
                       "ceiling_tokens_per_s": float(ceiling_tps)}
            for name, runs in rows.items():
                seconds = float(np.median([r["seconds"] for r in runs]))
                summary[name] = {
                    "seconds": seconds, "runs": runs,
                    "response_tokens_per_s": runs[0]["response_tokens"] / seconds,
                    "model_tokens_per_s": runs[0]["model_tokens"] / seconds,
                    "ceiling_share": runs[0]["model_tokens"] / seconds / ceiling_tps}
            summary["speedup"] = (summary["baseline engine"]["seconds"]
                                  / summary["new engine"]["seconds"])
            results["shapes"][f"{num_tasks}x{args.samples}"] = summary
    return results


# ---------------------------------------------------------------------------------- learner
def real_records(args):
    """One tree rollout of the main job's env with the bundled model: the learner's input."""
    from pettingllms_rllib.core.tree_sampler import TreeSampler
    from pettingllms_rllib.engines.base import SamplingConfig
    from pettingllms_rllib.engines.hf_engine import HFEngine
    from pettingllms_rllib.models.loading import load_causal_lm, load_tokenizer

    model, tokenizer = load_causal_lm(args.model), load_tokenizer(args.model)
    envs, _ = main_job_env(args.learner_tasks, seed=args.seed)
    engine = HFEngine(tokenizer, SamplingConfig(max_new_tokens=16, temperature=0.7,
                                                seed=args.seed))
    sampler = TreeSampler(lambda module, prompts, n: engine.generate(model, prompts, n),
                          lambda agent: agent, num_branches=args.samples)
    with torch.no_grad():
        result = sampler.run({f"t{i}": env for i, env in enumerate(envs)})
    rng = np.random.default_rng(args.seed)
    records = [r for r in result.records if r.response_ids]
    for record in records:
        record.advantage = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.5))
    return records, tokenizer.pad_token_id or 0


def bench_learner(args) -> dict:
    import gymnasium

    from pettingllms_rllib.algorithms import ATGRPOConfig
    from pettingllms_rllib.core.batching import batches_per_module
    from pettingllms_rllib.core.loss import clipped_token_loss
    from pettingllms_rllib.core.minibatching import plan_minibatches
    from pettingllms_rllib.models.rl_modules import TOKEN_LOGP
    from ray.rllib.policy.sample_batch import SampleBatch

    from pettingllms_rllib.algorithms.learner import trimmed_rows, samples_per_row

    records, pad_id = real_records(args)
    log(f"learner: {len(records)} records from one rollout")
    config = (ATGRPOConfig().environment("plan_path_v1")
              .llm(model=args.model, lora={"r": 16, "lora_alpha": 32}, temperature=0.7)
              .multi_agent(policies={"tool", "planner"},
                           policy_mapping_fn=lambda agent_id, *a, **k: agent_id))
    space = gymnasium.spaces.Text(8)
    multi = config.get_multi_rl_module_spec(
        spaces={m: (space, space) for m in ("tool", "planner")}).build()
    optimizers = {m: torch.optim.AdamW(multi[m].trainable_parameters(), lr=1e-6)
                  for m in multi.keys()}

    def minibatches(shared_prefix: bool):
        """The learner's own minibatches: whole rows of at most 8 samples, each trimmed to
        its longest row (``ATGRPOTorchLearner``)."""
        batches = batches_per_module(records, pad_id, shared_prefix=shared_prefix)
        tensors = {m: SampleBatch({k: torch.as_tensor(v) for k, v in b.items()})
                   for m, b in batches.items()}
        steps = plan_minibatches({m: samples_per_row(b) for m, b in tensors.items()},
                                 num_epochs=1, minibatch_size=8)
        return [(module_id, dict(trimmed_rows(tensors[module_id], rows)))
                for step in steps for module_id, rows in step.items()]

    variants = {"per-row": minibatches(False), "shared-prefix": minibatches(True)}
    results = {name: [] for name in variants}
    for repeat in range(args.repeats):
        for name, batches in variants.items():
            tokens, saved_peak, start = 0, 0, time.perf_counter()
            for module_id, batch in batches:
                module = multi[module_id]
                module.causal_lm.train()
                saved = SavedActivations(module.causal_lm.parameters())
                with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                    logp = module.forward_train(batch)[TOKEN_LOGP]
                    loss, stats = clipped_token_loss(logp, batch["old_logp"],
                                                     batch["advantages"], batch["response_mask"])
                saved_peak = max(saved_peak, saved.bytes)
                optimizers[module_id].zero_grad()
                loss.backward()
                optimizers[module_id].step()
                tokens += stats.num_tokens
            seconds = time.perf_counter() - start
            model_tokens = sum(int(b["input_ids"].numel()) for _, b in batches)
            results[name].append({"seconds": seconds, "response_tokens": tokens,
                                  "model_tokens": model_tokens, "minibatches": len(batches),
                                  "saved_activations_mb": saved_peak / 2**20})
            log(f"learner {name}, repeat {repeat}: {tokens} response tokens "
                f"({model_tokens} tokens through the model, {len(batches)} minibatches) in "
                f"{seconds:.1f} s, largest minibatch's saved activations "
                f"{saved_peak / 2**20:.0f} MB")
    summary = {}
    for name, runs in results.items():
        seconds = float(np.median([r["seconds"] for r in runs]))
        summary[name] = {"seconds": seconds, "runs": runs,
                         "response_tokens_per_s": runs[0]["response_tokens"] / seconds}
    summary["speedup"] = summary["per-row"]["seconds"] / summary["shared-prefix"]["seconds"]
    return summary


class SavedActivations:
    """Bytes of the distinct storages autograd saves for backward: the activation memory of a
    step, exactly, where RSS would also show the allocator's cached blocks."""

    def __init__(self, parameters=()):
        # weights saved for backward are not activations: leave them out
        self.bytes, self._seen = 0, {p.untyped_storage().data_ptr() for p in parameters}

    def pack(self, tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._seen:
            self._seen.add(storage.data_ptr())
            self.bytes += storage.nbytes()
        return tensor

    @staticmethod
    def unpack(tensor):
        return tensor


# ---------------------------------------------------------------------------------- sandbox
def bench_sandbox(args) -> dict:
    """The env side of one rollout of ``--sandbox-tasks`` tasks: the engine's answers are
    recorded once, then replayed through the tree sampler with shared program verdicts and
    without, alternating; env seconds (everything but generation) and sandbox runs."""
    import pettingllms_envs.common as common
    from pettingllms_envs.common import ProgramVerdicts
    from pettingllms_rllib.core.timing import TimedCall
    from pettingllms_rllib.core.tree_sampler import TreeSampler
    from pettingllms_rllib.engines.base import SamplingConfig
    from pettingllms_rllib.engines.hf_engine import HFEngine
    from pettingllms_rllib.models.loading import load_causal_lm, load_tokenizer

    model, tokenizer = load_causal_lm(args.model), load_tokenizer(args.model)
    engine = HFEngine(tokenizer, SamplingConfig(max_new_tokens=16, temperature=0.7,
                                                seed=args.seed))
    recorded = []

    def record(module, prompts, n):
        recorded.append(engine.generate(model, prompts, n))
        return recorded[-1]

    def rollout(generate):
        envs, _ = main_job_env(args.sandbox_tasks, seed=args.seed)
        timed = TimedCall(generate)
        sampler = TreeSampler(timed, lambda agent: agent, num_branches=args.samples)
        start = time.perf_counter()
        result = sampler.run({f"t{i}": env for i, env in enumerate(envs)})
        return result, time.perf_counter() - start - timed.seconds

    with torch.no_grad():
        reference, _ = rollout(record)
    log(f"sandbox: recorded {len(recorded)} engine calls for {args.sandbox_tasks} tasks")
    results = {"shared verdicts": [], "one run per candidate": []}
    for repeat in range(args.repeats):
        for name, capacity in (("shared verdicts", 256), ("one run per candidate", 0)):
            verdicts = ProgramVerdicts(capacity)
            common.PROGRAM_VERDICTS = verdicts
            replay = iter(recorded)
            result, env_seconds = rollout(lambda module, prompts, n: next(replay))
            same = [r.reward for r in result.records] == [r.reward for r in reference.records]
            results[name].append({"env_seconds": env_seconds, "sandbox_runs": verdicts.runs,
                                  "shared_hits": verdicts.hits, "same_rewards": same})
            log(f"sandbox {name}, repeat {repeat}: env {env_seconds:.1f} s, "
                f"{verdicts.runs} sandbox runs, rewards identical to the recording: {same}")
    summary = {name: {"env_seconds": float(np.median([r["env_seconds"] for r in runs])),
                      "runs": runs} for name, runs in results.items()}
    summary["speedup"] = (summary["one run per candidate"]["env_seconds"]
                          / summary["shared verdicts"]["env_seconds"])
    return summary


# -------------------------------------------------------------------------------- iteration
ITERATION_WORKER = r"""
import json, sys, time
import ray
from pettingllms_rllib.experiment import load_experiment
experiment = load_experiment(sys.argv[1], sys.argv[3:])
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
algo = experiment.config.build_algo()
rows = []
for _ in range(int(sys.argv[2])):
    result = algo.train()
    stats = result.get("at_grpo", {})
    learners = result.get("learners", {})
    rows.append({"time_this_iter_s": result["time_this_iter_s"],
                 "success_rate": result["env_runners"]["success_rate"],
                 "generated_tokens": result["env_runners"]["num_generated_tokens"],
                 "time_s": stats.get("time_s"), "time_share": stats.get("time_share"),
                 "logp_mismatch_mean": {m: v.get("logp_mismatch_mean")
                                        for m, v in learners.items() if isinstance(v, dict)}})
algo.stop()
print("RESULT " + json.dumps(rows, default=float))
"""


def run_iterations(tree: Path, args) -> list[dict]:
    config = tree / MAIN_JOB.relative_to(REPO)  # each tree's own main job
    return run_worker(ITERATION_WORKER, [config, args.iterations, *args.set], cwd=tree,
                      env={**os.environ, "PYTHONPATH": str(tree)},
                      what=f"iteration worker in {tree}")


def bench_iteration(args) -> dict:
    results = {}
    with baseline_tree(args.baseline_rev) as tree:
        for name, folder in (("baseline", tree), ("new", REPO)):
            log(f"iteration: {name} tree, {args.iterations} iterations")
            results[name] = run_iterations(folder, args)
            log(f"iteration: {name}: " + ", ".join(
                f"{row['time_this_iter_s']:.1f} s" for row in results[name]))
    results["speedup_per_iteration"] = [
        b["time_this_iter_s"] / n["time_this_iter_s"]
        for b, n in zip(results["baseline"], results["new"])]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("engine", "learner", "sandbox", "iteration"))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--baseline-rev", default=DEFAULT_BASELINE)
    parser.add_argument("--samples", type=int, default=4, help="K")
    parser.add_argument("--engine-tasks", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--learner-tasks", type=int, default=8)
    parser.add_argument("--sandbox-tasks", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], help="overrides for the iteration part")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (the main job's trial uses 1 CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"engine": bench_engine, "learner": bench_learner, "sandbox": bench_sandbox,
              "iteration": bench_iteration}[args.part](args)
    result["threads"] = args.threads
    emit_result(result, args.out)


if __name__ == "__main__":
    main()
