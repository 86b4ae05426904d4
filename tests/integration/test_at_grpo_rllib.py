"""AT-GRPO end to end inside RLlib and Tune on CPU with a tiny random llama.

Covers the three mappings (shared model, one model per role, one LoRA adapter per role on one
base), that training changes every trainable parameter, that runners hold the learner's weights
after sync (also on a remote runner), and checkpoint -> restore -> a further iteration.
"""

import pytest
import torch

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, runner_holds, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPO, ATGRPOConfig  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=2)


def tiny_config(mapping: str, *, lora: bool = False, num_env_runners: int = 0) -> ATGRPOConfig:
    config = (
        ATGRPOConfig()
        .environment("toy_score_v0", env_config={"max_turns": 1})
        .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
             lora={"r": 4, "lora_alpha": 8} if lora else None)
        .training(num_branches=4, num_tasks_per_iteration=3, lr=1e-2)
        .env_runners(num_env_runners=num_env_runners)
        .multi_agent(**multi_agent_kwargs(mapping, AGENTS))
        .debugging(seed=0)
    )
    return config


def learner_state(algo) -> dict:
    learner = algo.learner_group._learner
    return {mid: {k: v.clone() for k, v in learner.module[mid].get_state().items()}
            for mid in learner.module.keys()}


def trainable_names(algo, module_id) -> list[str]:
    module = algo.learner_group._learner.module[module_id]
    params = {id(p) for p in module.trainable_parameters()}
    return [n for n, p in module.causal_lm.named_parameters() if id(p) in params]


def runner_states(algo) -> list[dict]:
    group = algo.env_runner_group
    if group.num_remote_env_runners():
        return group.foreach_env_runner(lambda r: r.module.get_state(), local_env_runner=False)
    return [group.local_env_runner.module.get_state()]


@pytest.mark.parametrize("mapping,lora,runners", [
    ("shared", False, 0), ("per_role", False, 1), ("per_role", True, 0)],
    ids=["shared_model", "model_per_role_remote_runner", "lora_adapter_per_role"])
def test_training_changes_every_trainable_parameter_and_syncs_runners(mapping, lora, runners):
    algo = tiny_config(mapping, lora=lora, num_env_runners=runners).build_algo()
    try:
        before = learner_state(algo)
        expected_modules = {"shared"} if mapping == "shared" else set(AGENTS)
        assert set(before) == expected_modules
        for _ in range(2):  # LoRA's A only gets gradient once B moved off zero
            result = algo.train()
        after = learner_state(algo)
        for mid in expected_modules:
            names = set(trainable_names(algo, mid))
            assert names, f"{mid} has no trainable parameters"
            unchanged = [k for k in after[mid] if torch.equal(after[mid][k], before[mid][k])
                         and any(k.replace(".weight", "") in n or k in n for n in names)]
            assert not unchanged, f"{mid}: parameters did not change: {unchanged[:5]}"
        for state in runner_states(algo):
            for mid in expected_modules:
                for key, value in after[mid].items():
                    runner = torch.as_tensor(state[mid][key])  # auto: bf16 runner, fp32 learner
                    assert torch.equal(runner, value.to(runner.dtype)), (mid, key)
        assert result["env_runners"]["weights_version_min"] >= 1
        assert 0.0 <= result["at_grpo"]["zero_variance_group_fraction"] <= 1.0
        assert set(result["learners"]) >= expected_modules
        for agent in AGENTS:  # tiny random models rarely stop before max_new_tokens
            assert 0.0 <= result["env_runners"]["agent"][agent]["truncated_fraction"] <= 1.0
        # No connector-state round trip to the runners after an iteration (they have none).
        assert "synch_env_connectors" not in result["timers"]
    finally:
        algo.stop()


def test_checkpoint_restore_and_continue(tmp_path):
    algo = tiny_config("per_role", lora=True).build_algo()
    algo.train()
    algo.train()
    saved = learner_state(algo)
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    algo.stop()

    restored = ATGRPO.from_checkpoint(path)
    try:
        assert restored.iteration == 2
        state = learner_state(restored)
        for mid in saved:
            for key in saved[mid]:
                assert torch.equal(state[mid][key], saved[mid][key]), (mid, key)
            runner = restored.env_runner_group.local_env_runner.module[mid].get_state()
            for key in saved[mid]:
                assert runner_holds(runner[key], saved[mid][key]), ("runner", mid, key)
        result = restored.train()
        assert restored.iteration == 3
        assert result["env_runners"]["weights_version_min"] >= 2  # sampled with restored weights
    finally:
        restored.stop()


@pytest.mark.parametrize("mapping,lora", [("shared", False), ("per_role", False),
                                          ("per_role", True)],
                         ids=["shared_model", "model_per_role", "lora_adapter_per_role"])
def test_two_tune_iterations_per_mapping(tmp_path, mapping, lora):
    from ray import tune

    results = tune.Tuner(
        ATGRPO, param_space=tiny_config(mapping, lora=lora),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="t", verbose=0,
                                  stop={"training_iteration": 2}),
    ).fit()
    assert results.num_errors == 0, results.errors
    metrics = results[0].metrics
    assert metrics["training_iteration"] == 2
    assert "success_rate" in metrics["env_runners"]
