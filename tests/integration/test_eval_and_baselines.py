"""Checkpoints -> evaluation (the role swap really seats module A's weights in role B's seat),
and the baselines that are configs of the same algorithm: vanilla GRPO (rollout=trajectories)
and one role trained alone (frozen_modules)."""

import json
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib import checkpoints  # noqa: E402
from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.evaluation.evaluate import checkpoint_policies  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=2)


def config(**training) -> ATGRPOConfig:
    return (ATGRPOConfig()
            .environment("toy_score_v0", env_config={"max_turns": 1})
            .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
                 lora={"r": 4, "lora_alpha": 8})
            .training(num_branches=4, num_tasks_per_iteration=3, lr=1e-2, **training)
            .multi_agent(**multi_agent_kwargs("per_role", AGENTS))
            .debugging(seed=0))


def adapter_weights(module) -> dict:
    return {k: v.clone() for k, v in module.get_state().items()}


def test_checkpoint_evaluation_and_the_role_swap_use_the_trained_weights(tmp_path):
    algo = config().build_algo()
    try:
        algo.train()
        algo.train()
        learner = algo.learner_group._learner.module
        trained = {mid: adapter_weights(learner[mid]) for mid in AGENTS}
        checkpoint = algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    policies = checkpoint_policies(checkpoint)
    assert policies.mapping == {"writer": "writer", "reviewer": "reviewer"}
    # The checkpoint carries the run's engine spec, which eval starts its engine from.
    assert policies.engine_spec == config().engine_spec
    assert (Path(checkpoint) / checkpoints.ENGINE_SPEC_FILE).is_file()
    swapped = policies.swapped()
    for role, expected_module in (("writer", "reviewer"), ("reviewer", "writer")):
        seated = swapped.modules[swapped.mapping[role]].rl_module
        got = adapter_weights(seated)
        assert got.keys() == trained[expected_module].keys()
        assert all(torch.equal(got[k], trained[expected_module][k]) for k in got)
        other = trained[role]
        assert not all(torch.equal(got[k], other[k]) for k in got)  # really the other role's

    from pettingllms_rllib.cli import main

    out = tmp_path / "eval"
    assert main(["eval", "--checkpoint", checkpoint, "--num-tasks", "2", "--swap-roles",
                 "--out", str(out)]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["mapping"] == {"writer": "reviewer", "reviewer": "writer"}
    assert record["engine"] == "hf"
    assert record["training_budget"] is None  # a bare checkpoint, not inside a Tune trial
    assert main(["eval", "--checkpoint", checkpoint, "--env", "plan_path_v1",
                 "--env-config", '{"grid_size": 3}', "--out", str(tmp_path / "bad")]) == 2


def test_vanilla_grpo_baseline_trains_through_the_same_algorithm():
    algo = config(rollout="trajectories").build_algo()
    try:
        result = algo.train()
        assert result["at_grpo"]["num_groups"] == 3  # one group per task
        assert result["env_runners"]["num_generated_tokens_lifetime"] > 0
    finally:
        algo.stop()


def test_a_frozen_role_acts_but_never_changes():
    algo = config(frozen_modules=["reviewer"]).build_algo()
    try:
        learner = algo.learner_group._learner.module
        before = {mid: adapter_weights(learner[mid]) for mid in AGENTS}
        for _ in range(2):
            algo.train()
        after = {mid: adapter_weights(learner[mid]) for mid in AGENTS}
        assert all(torch.equal(after["reviewer"][k], before["reviewer"][k])
                   for k in before["reviewer"])
        assert not all(torch.equal(after["writer"][k], before["writer"][k])
                       for k in before["writer"])
    finally:
        algo.stop()


def test_masking_truncated_responses_trains_only_on_responses_that_ended():
    """Same seed, same first samples: the masked run trains on exactly the responses that were
    not cut off at max_new_tokens (tiny random models rarely stop on their own)."""
    trained = {}
    for mask in (False, True):
        algo = config(mask_truncated_responses=mask).build_algo()
        try:
            result = algo.train()
        finally:
            algo.stop()
        trained[mask] = result["at_grpo"]["num_trained_samples"]
        truncated = [result["env_runners"]["agent"][a]["truncated_fraction"] for a in AGENTS]
    assert max(truncated) > 0
    assert trained[True] < trained[False]


def test_two_runs_combine_with_each_role_from_its_own_run(tmp_path):
    """Each role trained alone, then run together: the reviewer of run B joins run A's writer."""
    from pettingllms_rllib.evaluation.evaluate import with_module_from

    checkpoints, trained = {}, {}
    for run, frozen in (("a", ["reviewer"]), ("b", ["writer"])):
        algo = config(frozen_modules=frozen).build_algo()
        try:
            algo.train()
            module = algo.learner_group._learner.module
            trained[run] = {mid: adapter_weights(module[mid]) for mid in AGENTS}
            checkpoints[run] = algo.save_to_path(str(tmp_path / run))
        finally:
            algo.stop()
    together = with_module_from(checkpoint_policies(checkpoints["a"]), "reviewer",
                                checkpoint_policies(checkpoints["b"]))
    for role, run in (("writer", "a"), ("reviewer", "b")):
        got = adapter_weights(together.modules[together.mapping[role]].rl_module)
        assert all(torch.equal(got[k], trained[run][role][k]) for k in got), role
