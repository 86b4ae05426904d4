"""One real AT-GRPO iteration with the bundled SmolLM2-135M-Instruct on plan_path_v1, and its
checkpoint served over HTTP by Ray Serve.

The slowest tests: they convert the GGUF on first use and sample real text from a real model.
"""

import json
import socket

import pytest
import torch

ray = pytest.importorskip("ray")

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def iteration(tmp_path_factory):
    """One training iteration; its result, the modules' states before and after, and the
    checkpoint saved after it."""
    config = (
        ATGRPOConfig()
        .environment("plan_path_v1", env_config={"grid_size": 3, "wall_prob": 0.0,
                                                 "max_turns": 1})
        .llm(model="smollm2-135m-instruct", lora={"r": 4, "lora_alpha": 8}, max_new_tokens=16)
        .training(num_branches=2, num_tasks_per_iteration=2, lr=1e-3)
        .multi_agent(**multi_agent_kwargs("per_role", ["tool", "planner"]))
        .resources(num_cpus_for_main_process=2)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        before = {mid: learner.module[mid].get_state() for mid in ("tool", "planner")}
        result = algo.train()
        after = {mid: learner.module[mid].get_state() for mid in ("tool", "planner")}
        checkpoint = algo.save_to_path(str(tmp_path_factory.mktemp("run") / "checkpoint_0"))
    finally:
        algo.stop()
    return result, before, after, checkpoint


def test_bundled_smollm2_runs_a_real_iteration_with_per_role_adapters(iteration):
    result, before, after, _ = iteration
    runners = result["env_runners"]
    # 2 tasks x 1 turn x 2 agents x K=2 samples, every one a real decoded response
    assert runners["num_samples"] == 8
    assert runners["num_generated_tokens"] > 0
    assert 0.0 <= runners["success_rate"] <= 1.0
    assert {"tool", "planner"} <= set(runners["agent"])
    # Whichever module had a non-zero advantage must have moved.
    moved = [mid for mid in before if any(
        not torch.equal(v, after[mid][k]) for k, v in before[mid].items())]
    zero_var = result["at_grpo"]["zero_variance_group_fraction"]
    assert moved or zero_var == 1.0


def test_the_trained_checkpoint_served_over_http_plays_what_eval_plays(iteration, tmp_path):
    import requests
    from ray import serve

    from pettingllms_rllib.cli import main
    from pettingllms_rllib.serving import build_app
    from pettingllms_rllib.serving.client import wait_until_serving

    checkpoint = iteration[3]
    seed = TRAIN_SEED_LIMIT + 2
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_app(checkpoint), name="bundled", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(url)  # the HTTP proxy may still be starting
        reply = requests.post(f"{url}/v1/episodes", json={"seed": seed}, timeout=300)
        assert reply.status_code == 200, reply.text
        served = reply.json()
        planner_prompt = next(e["prompt"] for e in served["transcript"]
                              if e["agent"] == "planner")
        chat = requests.post(f"{url}/v1/chat/completions", timeout=300, json={
            "model": "smollm2-135m-instruct:planner", "temperature": 0, "max_tokens": 16,
            "messages": [{"role": "user", "content": planner_prompt}]})
        assert chat.status_code == 200, chat.text
    finally:
        serve.shutdown()
    assert main(["eval", "--checkpoint", checkpoint, "--num-tasks", "1", "--first-seed",
                 str(seed), "--out", str(tmp_path)]) == 0
    evaluated = [json.loads(line) for line in
                 (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert served["transcript"] == evaluated
    assert all(entry["response"] for entry in evaluated)  # real text from the real model
    # The planner's chat answer to its episode prompt is its answer in the episode.
    planner_response = next(e["response"] for e in evaluated if e["agent"] == "planner")
    assert chat.json()["choices"][0]["message"]["content"] == planner_response
