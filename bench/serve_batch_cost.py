"""What one batched call saves the team server, in-process (no HTTP, no Ray Serve).

For a checkpoint of the math task: (1) per agent, one greedy HF ``generate_from_ids`` call over
8 first-turn prompts against 8 calls of one prompt; (2) ``TeamService.complete`` over 16 greedy
chats (the two agents in turn) as one batch against one at a time. Answers must not change.
This is the ceiling the server's batching can reach; ``bench/serve_load.py`` measures what the
HTTP server gets. Run::

    .venv/bin/python bench/serve_batch_cost.py CHECKPOINT --threads 1 --out /tmp/cost.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out")
    args = parser.parse_args()

    import torch

    from pettingllms_rllib.engines.base import SamplingConfig, encode_requests
    from pettingllms_rllib.engines.hf_engine import HFEngine
    from pettingllms_rllib.envs import make_text_env
    from pettingllms_rllib.evaluation.evaluate import causal_lm_of
    from pettingllms_rllib.serving.requests import parse_chat_request
    from pettingllms_rllib.serving.team import TeamService

    torch.set_num_threads(args.threads)
    service = TeamService.from_checkpoint(args.checkpoint)
    team, policies = service.team, service.policies
    env = make_text_env(team.env, dict(team.env_config))
    seeds = [1_000_000_000 + i for i in range(8)]
    observations = [env.reset(seed=seed)[0] for seed in seeds]
    results: dict = {"checkpoint": str(args.checkpoint), "threads": args.threads, "engine": {}}
    for agent, module_id in sorted(team.mapping.items()):
        ids = encode_requests(policies.tokenizer, [o[agent] for o in observations], 1,
                              policies.system_prompt)
        model = causal_lm_of(policies.modules[module_id])
        engine = HFEngine(policies.tokenizer, SamplingConfig(max_new_tokens=team.max_new_tokens,
                                                             greedy=True))
        engine.generate_from_ids(model, ids[:1], 1)  # warm-up
        singles, alone = timed(lambda: [engine.generate_from_ids(model, [p], 1)[0] for p in ids])
        batch, together = timed(lambda: engine.generate_from_ids(model, ids, 1))
        results["engine"][agent] = {
            "one_at_a_time_s": alone, "one_call_s": together, "ratio": alone / together,
            "response_tokens": [len(c[0].response_ids) for c in singles],
            "same_answers": [c[0].text for c in singles] == [c[0].text for c in batch]}
    agents = sorted(team.mapping)
    prepared = [service.prepare_chat(parse_chat_request(
        {"model": agents[i % 2], "temperature": 0,
         "messages": [{"role": "user", "content": observations[i // 2][agents[i % 2]]}]}, team))
        for i in range(16)]
    service.complete(prepared[:1])  # warm-up
    singles, alone = timed(lambda: [service.complete([p])[0] for p in prepared])
    batch, together = timed(lambda: service.complete(prepared))
    texts = [[c["message"]["content"] for c in r["choices"]] for r in singles]
    results["chats"] = {"count": 16, "one_at_a_time_s": alone, "one_batch_s": together,
                        "ratio": alone / together,
                        "same_answers": texts == [[c["message"]["content"] for c in r["choices"]]
                                                  for r in batch]}
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
