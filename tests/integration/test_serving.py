"""``pettingllms-rllib serve`` over real HTTP on 127.0.0.1: a trained per-role checkpoint of the
tiny model behind Ray Serve answers team episodes exactly as ``eval`` plays them, each agent's
chat with its own adapter, concurrent requests, the README's client examples, and every bad
request with a 4xx naming the field while it keeps serving."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, per_role_lora_checkpoint  # noqa: E402

from pettingllms_rllib.cli import main  # noqa: E402
from pettingllms_rllib.engines.base import SamplingConfig  # noqa: E402
from pettingllms_rllib.engines.hf_engine import HFEngine  # noqa: E402
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT  # noqa: E402
from pettingllms_rllib.evaluation.evaluate import (causal_lm_of,  # noqa: E402
                                                   checkpoint_policies)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("serve_load", REPO / "bench" / "serve_load.py")
serve_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_load)
SUPPORT = REPO / "tests" / "support"
SEED = TRAIN_SEED_LIMIT + 1
PROMPT = "You are the writer. Topic 7, turn 0. Writer said: "


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One iteration of per-role LoRA on the toy env; the reviewer's adapter pushed far from
    the writer's, so the two agents' answers must differ when served."""
    return per_role_lora_checkpoint(tmp_path_factory.mktemp("run") / "checkpoint_000000",
                                    tiny_model_config=TINY, env_config={"max_turns": 2})


@pytest.fixture(scope="module")
def server(checkpoint):
    """``pettingllms-rllib serve`` in its own process, as a user starts it (the load
    benchmark's server runner, ``bench/serve_load.py``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(SUPPORT), os.environ.get("PYTHONPATH")) if p)}
    running = serve_load.ServerProcess(
        checkpoint, ["--import", "registered_toy_envs", "--num-cpus", "2",
                     "--max-batch-size", "8"], env=env)
    yield running.url, running
    running.kill()


def post(url, path, body, **kwargs):
    return requests.post(f"{url}{path}", json=body, timeout=120, **kwargs)


def test_a_served_episode_is_the_one_eval_plays_for_the_same_seed(server, checkpoint, tmp_path):
    url, _ = server
    reply = post(url, "/v1/episodes", {"seed": SEED})
    assert reply.status_code == 200, reply.text
    served = reply.json()
    assert main(["eval", "--checkpoint", checkpoint, "--num-tasks", "1", "--first-seed",
                 str(SEED), "--out", str(tmp_path)]) == 0
    evaluated = [json.loads(line) for line in
                 (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert served["transcript"] == evaluated
    assert served["mapping"] == {"writer": "writer", "reviewer": "reviewer"}
    record = json.loads((tmp_path / "eval.json").read_text())
    assert served["turns"] == record["summary"]["turns_mean"] == 2


def test_each_agent_answers_with_its_own_trained_adapter(server, checkpoint):
    url, _ = server
    policies = checkpoint_policies(checkpoint)
    engine = HFEngine(policies.tokenizer, SamplingConfig(max_new_tokens=6, greedy=True))
    answers = {}
    for agent in AGENTS:
        reply = post(url, "/v1/chat/completions", {
            "model": f"tiny-random:{agent}", "temperature": 0, "max_tokens": 6,
            "messages": [{"role": "user", "content": PROMPT}]})
        assert reply.status_code == 200, reply.text
        answers[agent] = reply.json()["choices"][0]["message"]["content"]
        (expected,) = engine.generate(causal_lm_of(policies.modules[agent]), [PROMPT], 1)
        assert answers[agent] == expected[0].text
    assert answers["writer"] != answers["reviewer"]
    listed = {m["id"] for m in requests.get(f"{url}/v1/models", timeout=30).json()["data"]}
    assert listed == {*AGENTS, *(f"tiny-random:{a}" for a in AGENTS)}


def test_concurrent_requests_get_what_they_get_one_at_a_time(server):
    """The load benchmark's measurement, small: every request answered, batching changes no
    answer."""
    url, _ = server
    episodes = serve_load.measure(url, "/v1/episodes", [{"seed": s} for s in range(8)], 8)
    chats = serve_load.measure(url, "/v1/chat/completions", [
        {"model": AGENTS[i % 2], "temperature": 0, "max_tokens": 5,
         "messages": [{"role": "user", "content": f"topic {i}"}]} for i in range(16)], 16)
    for measured in (episodes, chats):
        assert measured["sequential"]["failed"] == measured["concurrent"]["failed"] == 0
        assert measured["same_answers"]


BAD_REQUESTS = [
    ("/v1/episodes", b'{"seed": 7', "body", 400),
    ("/v1/episodes", {"seed": 7, "env": "chess_v9"}, "env", 400),
    ("/v1/episodes", {"seed": 7, "env_config": {"colour": "red"}}, "env_config", 400),
    ("/v1/episodes", {"seed": -1}, "seed", 400),
    ("/v1/episodes", {"seed": 7, "search": 0}, "search", 400),
    ("/v1/episodes", {"seed": 7, "env": "plan_path_v1"}, "env", 422),
    ("/v1/chat/completions", {"model": "critic", "messages": [
        {"role": "user", "content": "x"}]}, "model", 404),
    ("/v1/chat/completions", {"model": "writer", "max_tokens": 5, "messages": [
        {"role": "user", "content": "word " * 3000}]}, "messages", 400),
    ("/v1/chat/completions", b"not json", "body", 400),
]


@pytest.mark.parametrize("path,body,field,status", BAD_REQUESTS,
                         ids=[f"{p}-{f}-{s}" for p, _, f, s in BAD_REQUESTS])
def test_a_bad_request_is_a_4xx_naming_the_field_and_the_server_keeps_serving(
        server, path, body, field, status):
    url, _ = server
    if isinstance(body, bytes):
        reply = requests.post(f"{url}{path}", data=body, timeout=60,
                              headers={"Content-Type": "application/json"})
    else:
        reply = post(url, path, body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["param"] == field and field in error["message"]
    assert post(url, "/v1/episodes", {"seed": 3}).status_code == 200


def _readme_serving_section() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Serving a trained team"):].split("\n## ")[0]


def _for_the_toy_run(snippet: str) -> str:
    """The README's examples address the main job's run; here the toy run is served."""
    return snippet.replace("smollm2-135m-instruct:tool", "tiny-random:writer")


def test_the_readme_client_examples_run_against_the_server(server):
    url, _ = server
    port = url.rsplit(":", 1)[1]
    section = _readme_serving_section().replace("localhost:8000", f"localhost:{port}")
    curls = [line for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)
             for line in block.replace("\\\n", " ").splitlines() if line.startswith("curl")]
    assert len(curls) == 2
    for line in curls:
        run = subprocess.run(["bash", "-c", _for_the_toy_run(line) + " --fail-with-body"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (line, run.stdout, run.stderr)
        assert json.loads(run.stdout)
    (client,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    run = subprocess.run([sys.executable, "-c", _for_the_toy_run(client)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip()


def test_sigterm_stops_the_server(server):
    _, running = server
    code, output = running.stop()
    assert code == 0
    assert "stopping the server" in output
