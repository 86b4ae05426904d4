"""A bounded load test of ``pettingllms-rllib serve`` on 127.0.0.1: the same requests sent one
at a time and then concurrently, side by side against one server, for team episodes and for
per-agent chat completions.

    python bench/serve_load.py runs/replication_math/train/atgrpo_per_role/seed=0 \\
        --episodes 64 --episode-concurrency 8 --chats 256 --chat-concurrency 16 \\
        --out bench/serve_load.json

Episodes are the run's own task at seeds 1e9.. (greedy); chats ask each agent in turn (greedy)
the prompts of those tasks' first turn. Every request loop is bounded in count and each request
in time; only 127.0.0.1 is addressed. Reported per phase: failed requests, p50/p95 latency,
throughput, and the concurrent/sequential throughput ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import requests

from pettingllms_rllib.serving.client import wait_until_serving

REQUEST_TIMEOUT_S = 600


class ServerProcess:
    """``pettingllms-rllib serve CHECKPOINT`` in its own process on a free 127.0.0.1 port,
    as a user starts it; ``url`` once it answers ``GET /v1/models``.

    Args:
        checkpoint: what ``serve`` is given.
        extra_args: more ``serve`` arguments (``--import``, ``--max-batch-size``, ...).
        env: the process environment (default: this one's).
        start_timeout_s: how long to wait for the first answer.
    """

    def __init__(self, checkpoint: str | Path, extra_args: Sequence[str] = (), *,
                 env: dict[str, str] | None = None, start_timeout_s: float = 300):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pettingllms_rllib.cli", "serve", str(checkpoint),
             "--host", "127.0.0.1", "--port", str(self.port), *extra_args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        try:
            wait_until_serving(self.url, timeout_s=start_timeout_s,
                               alive=lambda: self.process.poll() is None)
        except TimeoutError as exc:
            self.kill()
            raise RuntimeError(f"the server did not come up ({exc}):\n"
                               f"{self.process.stdout.read()[-3000:]}") from exc

    def stop(self, timeout_s: float = 120) -> tuple[int, str]:
        """SIGTERM, as a service manager stops it; its exit code and output."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout_s)
        return code, self.process.stdout.read()

    def kill(self) -> None:
        """Kill the server and every process it started (Ray's included)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def send_all(url: str, bodies: Sequence[dict[str, Any]], concurrency: int
             ) -> tuple[list[float], list[Any], float]:
    """POST every body (``concurrency`` in flight at a time); per-request latencies, the
    replies' JSON (None for a failed request) and the wall time of the whole phase."""

    def one(body):
        start = time.perf_counter()
        try:
            reply = requests.post(url, json=body, timeout=REQUEST_TIMEOUT_S)
            result = reply.json() if reply.status_code == 200 else None
        except requests.RequestException:
            result = None
        return time.perf_counter() - start, result

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        outcomes = list(pool.map(one, bodies))
    wall = time.perf_counter() - started
    return [latency for latency, _ in outcomes], [result for _, result in outcomes], wall


def phase_summary(latencies: Sequence[float], results: Sequence[Any],
                  wall_s: float) -> dict[str, Any]:
    """Failed requests, p50/p95 latency and throughput of one phase."""
    return {"requests": len(results), "failed": sum(r is None for r in results),
            "p50_s": float(np.percentile(latencies, 50)),
            "p95_s": float(np.percentile(latencies, 95)),
            "wall_s": wall_s, "requests_per_s": len(results) / wall_s}


def measure(url: str, path: str, bodies: Sequence[dict[str, Any]],
            concurrency: int) -> dict[str, Any]:
    """The same requests one at a time, then ``concurrency`` at a time; whether both phases
    answered alike (greedy requests must)."""
    sequential = send_all(f"{url}{path}", bodies, 1)
    concurrent = send_all(f"{url}{path}", bodies, concurrency)
    summary = {"sequential": phase_summary(*sequential),
               "concurrent": phase_summary(*concurrent), "concurrency": concurrency}
    summary["throughput_ratio"] = (summary["concurrent"]["requests_per_s"]
                                   / summary["sequential"]["requests_per_s"])
    summary["same_answers"] = _answers(sequential[1]) == _answers(concurrent[1])
    return summary


def _answers(results: Sequence[Any]) -> list[Any]:
    """What must not depend on batching: transcripts and chat texts (not ids or times)."""
    return [None if r is None else r["transcript"] if "transcript" in r
            else [c["message"]["content"] for c in r["choices"]] for r in results]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="a checkpoint, trial or one-trial experiment folder")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--episode-concurrency", type=int, default=8)
    parser.add_argument("--chats", type=int, default=256)
    parser.add_argument("--chat-concurrency", type=int, default=16)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="more `serve` arguments, e.g. --serve-arg=--import=my_envs")
    parser.add_argument("--out", help="JSON file for the results")
    args = parser.parse_args(argv)
    # A timeout's SIGTERM must still stop the server (and its Ray) through ``finally``.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    server = ServerProcess(args.checkpoint, ["--max-batch-size", str(args.max_batch_size),
                                             "--num-cpus", str(args.num_cpus),
                                             *args.serve_arg])
    try:
        agents = sorted({m["agent"] for m in
                         requests.get(f"{server.url}/v1/models", timeout=60).json()["data"]})
        episodes = [{"seed": 1_000_000_000 + i} for i in range(args.episodes)]
        prompts = _first_prompts(server.url, args.chats)
        chats = [{"model": agents[i % len(agents)], "temperature": 0,
                  "messages": [{"role": "user", "content": prompts[i % len(prompts)]}]}
                 for i in range(args.chats)]
        results = {"checkpoint": str(args.checkpoint), "max_batch_size": args.max_batch_size}
        for kind, path, bodies, concurrency in (
                ("episodes", "/v1/episodes", episodes, args.episode_concurrency),
                ("chats", "/v1/chat/completions", chats, args.chat_concurrency)):
            started = time.perf_counter()
            results[kind] = measure(server.url, path, bodies, concurrency)
            print(f"{kind}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            if args.out:  # what is measured so far survives a later failure
                Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        server.kill()
    print(json.dumps(results, indent=1))
    return 0


def _first_prompts(url: str, count: int) -> list[str]:
    """Distinct real prompts: the first prompt of each of a few episodes' agents."""
    prompts: list[str] = []
    seed = 2_000_000_000
    while len(prompts) < min(count, 32):
        episode = requests.post(f"{url}/v1/episodes", json={"seed": seed},
                                timeout=REQUEST_TIMEOUT_S).json()
        prompts.extend(e["prompt"] for e in episode["transcript"] if e["turn"] == 0)
        seed += 1
    return prompts


if __name__ == "__main__":
    sys.exit(main())
