"""Held-out evaluation during training, the RLlib way (``evaluation_interval``).

Every N iterations the first M evaluation instances are played greedily with the learner's
current weights; every iteration carries the evaluation columns (NaN when it did not evaluate)
so Tune's progress.csv, which keeps the first row's columns, has them; the untrained team's
held-out success is measured once before the first update.
"""

import math
import shutil

import pytest
import torch

ray = pytest.importorskip("ray")

from ray.rllib.utils.metrics import EVALUATION_RESULTS  # noqa: E402
from toy_ray import AGENTS, TINY, runner_holds, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPO, ATGRPOConfig  # noqa: E402
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=2)


def config() -> ATGRPOConfig:
    return (ATGRPOConfig().environment("toy_score_v0", env_config={"max_turns": 1})
            .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6,
                 lora={"r": 4, "lora_alpha": 8})
            .training(num_branches=4, num_tasks_per_iteration=2, lr=1e-2)
            .evaluation(evaluation_interval=2, evaluation_duration=3)
            .multi_agent(**multi_agent_kwargs("per_role", AGENTS)).debugging(seed=0))


def test_every_n_iterations_the_held_out_set_is_played_with_the_current_weights():
    algo = config().build_algo()
    try:
        assert algo.evaluation_seeds() == [TRAIN_SEED_LIMIT + i for i in range(3)]
        results = [algo.train() for _ in range(3)]
        first, second, third = (r[EVALUATION_RESULTS] for r in results)
        untrained = first["untrained_success_rate"]
        assert 0.0 <= untrained <= 1.0
        assert all(r["untrained_success_rate"] == untrained for r in (second, third))
        assert math.isnan(first["success_rate"]) and math.isnan(third["success_rate"])
        assert 0.0 <= second["success_rate"] <= 1.0 and second["num_episodes"] == 3
        assert set(second["agent"]) == set(AGENTS)
        assert all(0.0 <= s["parse_error_rate"] <= 1.0 for s in second["agent"].values())
        # learning diagnostics per module, every iteration
        for result in results:
            assert set(result["at_grpo"]["advantage_std"]) == set(AGENTS)
            assert set(result["at_grpo"]["reward_std"]) == set(AGENTS)
        trained_modules = [m for m in AGENTS if m in results[0]["learners"]]
        assert trained_modules and all(
            results[0]["learners"][m]["entropy"] > 0 for m in trained_modules)
        # KL from the starting policy: zero before the first step (LoRA B starts at 0), then
        # the adapters move the policy away from the base model (a module whose groups all
        # tied got zero gradients and has not moved, hence any, not all)
        assert all(abs(results[0]["learners"][m]["kl_to_start"]) < 1e-6 for m in trained_modules)
        assert any(results[-1]["learners"][m]["kl_to_start"] > 1e-6
                   for m in AGENTS if m in results[-1]["learners"])
        # the evaluating runner held the learner's weights of iteration 2
        learner = algo.learner_group._learner.module
        runner = (algo.eval_env_runner_group or algo.env_runner_group).local_env_runner.module
        algo.evaluate()
        for module_id in AGENTS:
            trained, evaluated = learner[module_id].get_state(), runner[module_id].get_state()
            assert all(runner_holds(evaluated[k], trained[k]) for k in trained)
    finally:
        algo.stop()


def test_each_evaluation_writes_every_held_out_response_to_a_transcript_in_the_logdir():
    """Split over two remote runners (2 + 1 instances): the transcript still holds every
    held-out instance, one greedy response per agent and turn, and its parse errors are the
    ones the evaluation metrics counted."""
    import json
    from pathlib import Path

    from pettingllms_rllib.algorithms.held_out import HELD_OUT_TRANSCRIPTS_DIR
    from pettingllms_rllib.envs.base import task_name

    algo = config().env_runners(num_env_runners=2).build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        folder = Path(algo.logdir) / HELD_OUT_TRANSCRIPTS_DIR
        assert sorted(p.name for p in folder.iterdir()) == ["iteration_000000.jsonl",
                                                            "iteration_000002.jsonl"]
        entries = [json.loads(line) for line in
                   (folder / "iteration_000002.jsonl").read_text().splitlines()]
        assert sorted(e["task"] for e in entries if e["agent"] == AGENTS[0]) == sorted(
            task_name("toy_score_v0", seed) for seed in algo.evaluation_seeds())
        assert all(e["branch"] == 0 and e["selected"] for e in entries)
        logged = results[1][EVALUATION_RESULTS]["agent"]
        for agent in AGENTS:
            errors = [e["parse_error"] is not None for e in entries if e["agent"] == agent]
            assert sum(errors) / len(errors) == pytest.approx(logged[agent]["parse_error_rate"])
    finally:
        algo.stop()


def test_a_bad_evaluation_duration_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="evaluation_duration"):
        config().evaluation(evaluation_duration="auto").validate()


def test_turn_credit_reaches_the_runners_and_is_logged_for_the_earlier_stage_only():
    algo = config().training(stage_credit="turn").evaluation(evaluation_interval=None).build_algo()
    try:
        credit = algo.train()["at_grpo"]["stage_credit_mean"]
    finally:
        algo.stop()
    # writer -> reviewer: the writer's candidates are credited with the turn's end (the toy
    # env's team reward is always 0), the reviewer ends the turn and gets none
    assert credit["writer"] == 0.0 and math.isnan(credit["reviewer"])


def learner_state(algo) -> dict:
    learner = algo.learner_group._learner.module
    return {mid: {k: v.clone() for k, v in learner[mid].get_state().items()} for mid in AGENTS}


def test_a_run_started_from_a_checkpoint_continues_its_weights_iterations_and_token_count(
        tmp_path):
    first = config().build_algo()
    try:
        first.train()
        tokens = first.train()["env_runners"]["num_generated_tokens_lifetime"]
        saved = learner_state(first)
        checkpoint = first.save_to_path(str(tmp_path / "checkpoint_000001"))
    finally:
        first.stop()
    assert tokens > 0

    algo = config().training(start_from_checkpoint=checkpoint).build_algo()
    try:
        started = learner_state(algo)
        runner = algo.env_runner_group.local_env_runner.module
        for module_id in AGENTS:  # the learner and the sampling runner hold the checkpoint
            for key, value in saved[module_id].items():
                assert torch.equal(started[module_id][key], value), (module_id, key)
                assert runner_holds(runner[module_id].get_state()[key], value), (module_id, key)
        assert algo.iteration == 2
        result = algo.train()
        assert algo.iteration == 3
        assert result["env_runners"]["num_generated_tokens_lifetime"] > tokens
        # no untrained-team evaluation in a continued run, but the evaluation columns are there
        evaluated = result[EVALUATION_RESULTS]
        assert math.isnan(evaluated["untrained_success_rate"])
        assert math.isnan(evaluated["success_rate"]) and set(evaluated["agent"]) == set(AGENTS)
        measured = algo.train()[EVALUATION_RESULTS]  # iteration 4 evaluates
        assert 0.0 <= measured["success_rate"] <= 1.0
        # the NaN columns of a non-evaluating iteration are measured ones (RLlib adds its
        # runner-health counters to an evaluating iteration)
        assert set(evaluated) <= set(measured)
        assert evaluated["agent"].keys() == measured["agent"].keys()
        assert all(evaluated["agent"][a].keys() == measured["agent"][a].keys() for a in AGENTS)
        trained = learner_state(algo)
        own = algo.save_to_path(str(tmp_path / "checkpoint_000004"))
    finally:
        algo.stop()

    # rebuilt from its own checkpoint (what Tune's --resume does), the continued run holds
    # its own weights and iteration, not the start checkpoint's
    resumed = ATGRPO.from_checkpoint(own)
    try:
        assert resumed.iteration == 4
        restored = learner_state(resumed)
        assert all(torch.equal(restored[m][k], v) for m in AGENTS for k, v in trained[m].items())
        assert any(not torch.equal(trained[m][k], v) for m in AGENTS for k, v in saved[m].items())
    finally:
        resumed.stop()
    shutil.rmtree(checkpoint)  # the start checkpoint is gone: a clear error names the key
    with pytest.raises(ValueError, match="start_from_checkpoint"):
        ATGRPO.from_checkpoint(own)


def test_a_start_checkpoint_that_is_not_a_checkpoint_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match="start_from_checkpoint"):
        config().training(start_from_checkpoint=str(tmp_path)).validate()
