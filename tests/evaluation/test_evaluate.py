"""The evaluator: a fixed evaluation set disjoint from training, deterministic greedy runs,
search on/off, the role swap, and the clear errors for wrong roles or an empty set."""

import csv
import json

import pytest

from pettingllms_rllib.envs import register_text_env
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT, split_of_seed
from pettingllms_rllib.envs.instances import TooFewInstancesError, instance_fingerprint
from pettingllms_rllib.evaluation.evaluate import (EvalSettings, Policies, RoleMismatchError,
                                                   base_policies, evaluate, run_evaluation,
                                                   swap_mapping)
from toy_env import ToyCounterEnv, ToyScoreEnv

TINY = {"hidden_size": 32, "intermediate_size": 64}


@pytest.fixture(scope="module")
def policies():
    register_text_env("toy_score_v0", ToyScoreEnv)
    return base_policies("tiny-random", ["writer", "reviewer"], tiny_model_config=TINY)


def settings(**overrides):
    fields = dict(env="toy_score_v0", env_config={"max_turns": 2}, num_tasks=3,
                  max_new_tokens=5)
    fields.update(overrides)
    return EvalSettings(**fields)


def test_the_evaluation_set_is_fixed_and_never_a_training_instance(policies):
    seeds = settings(num_tasks=5).eval_seeds
    assert seeds == settings(num_tasks=5).eval_seeds
    assert seeds[0] == TRAIN_SEED_LIMIT and seeds == sorted(seeds)
    assert {split_of_seed(s) for s in seeds} == {"test"}
    with pytest.raises(ValueError, match="training instances"):
        settings(first_seed=TRAIN_SEED_LIMIT - 1)


def test_the_evaluation_set_plays_each_instance_once_unless_repeats_are_allowed():
    register_text_env("toy_counter_v0", ToyCounterEnv)  # three instances: counter 0, 1 or 2
    counter = dict(env="toy_counter_v0", env_config={"max_turns": 2})
    env = ToyCounterEnv(max_turns=2)
    seeds = EvalSettings(**counter, num_tasks=3).eval_seeds
    assert len({instance_fingerprint(env, seed) for seed in seeds}) == 3
    assert seeds != list(range(TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 3))  # a repeat was skipped
    with pytest.raises(TooFewInstancesError, match="only 3 distinct instances"):
        _ = EvalSettings(**counter, num_tasks=4).eval_seeds
    repeated = EvalSettings(**counter, num_tasks=4, distinct_instances=False).eval_seeds
    assert repeated == list(range(TRAIN_SEED_LIMIT, TRAIN_SEED_LIMIT + 4))


@pytest.mark.parametrize("overrides,message", [
    ({"num_tasks": 0}, "empty evaluation set is an error"),
    ({"samples_per_task": 2}, "greedy decoding gives identical samples"),
    ({"search": True}, "needs K different candidates"),
    ({"decoding": "sample", "search": True, "num_branches": 1}, "num_branches >= 2"),
    ({"decoding": "beam"}, "accepted"),
])
def test_settings_that_cannot_give_a_fair_result_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        settings(**overrides)


def test_greedy_evaluation_on_a_fixed_seed_set_is_deterministic(policies):
    first = evaluate(policies, settings())
    second = evaluate(policies, settings())
    assert [e.task for e in first] == [f"toy_score_v0/seed={s}" for s in settings().eval_seeds]
    assert [(e.success, e.agent_return) for e in first] == [
        (e.success, e.agent_return) for e in second]


def test_sampling_gives_k_episodes_per_task_in_task_order(policies):
    episodes = evaluate(policies, settings(decoding="sample", samples_per_task=2))
    assert [e.task for e in episodes] == [t for s in settings().eval_seeds
                                         for t in [f"toy_score_v0/seed={s}"] * 2]


def test_search_branches_k_ways_per_turn_and_keeps_one_path(policies, monkeypatch):
    from pettingllms_rllib.engines.hf_engine import HFEngine

    asked = []
    original = HFEngine.generate_from_ids

    def counting(self, model, prompt_ids, num_samples):
        asked.append(num_samples)
        return original(self, model, prompt_ids, num_samples)

    monkeypatch.setattr(HFEngine, "generate_from_ids", counting)
    searched = evaluate(policies, settings(decoding="sample", search=True, num_branches=3))
    calls_with_search, asked[:] = list(asked), []
    plain = evaluate(policies, settings(decoding="sample"))
    assert set(calls_with_search) == {3} and set(asked) == {1}
    assert len(searched) == len(plain) == 3  # one episode (the greedy path) per task


def test_a_task_with_other_roles_is_refused_naming_both_role_sets(policies):
    with pytest.raises(RoleMismatchError,
                       match=r"trained for roles \['reviewer', 'writer'\].*roles are "
                             r"\['planner', 'tool'\]"):
        evaluate(policies, settings(env="plan_path_v1", env_config={"grid_size": 3}))


def test_the_role_swap_seats_each_module_in_the_other_role():
    assert swap_mapping({"tool": "tool_m", "planner": "planner_m"}) == {
        "planner": "tool_m", "tool": "planner_m"}
    policies = Policies(modules={"a": object(), "b": object()},
                        mapping={"writer": "a", "reviewer": "b"}, tokenizer=None,
                        source="x", model="m")
    swapped = policies.swapped()
    assert swapped.modules["a"] is policies.modules["a"]  # same weights, other seat
    assert swapped.mapping == {"writer": "b", "reviewer": "a"}
    with pytest.raises(ValueError, match="exactly two roles"):
        swap_mapping({"a": "x"})


def test_one_role_alone_keeps_only_that_roles_module():
    policies = Policies(modules={"a": object(), "b": object()},
                        mapping={"writer": "a", "reviewer": "b"}, tokenizer=None,
                        source="x", model="m")
    alone = policies.alone("reviewer")
    assert alone.mapping == {"reviewer": "b"}
    assert alone.modules == {"b": policies.modules["b"]}
    assert alone.source == "x (reviewer alone)"
    with pytest.raises(KeyError, match=r"no role 'planner'.*\['reviewer', 'writer'\]"):
        policies.alone("planner")


def test_the_eval_command_plays_one_role_alone_on_the_one_agent_task(policies, tmp_path):
    from pettingllms_rllib.cli import main

    common = ["eval", "--base-model", "tiny-random", "--env", "toy_score_v0", "--num-tasks", "2",
              "--max-new-tokens", "4", "--role-alone", "writer"]
    out = tmp_path / "alone"
    assert main(common + ["--env-config", '{"max_turns": 1}',
                          "--env-override", '{"writer_only": true}', "--out", str(out)]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["mapping"] == {"writer": "base"}
    assert record["env_config"] == {"max_turns": 1, "writer_only": True}
    # The two-agent task still has a reviewer, whom nobody plays: refused, not half-played.
    assert main(common + ["--out", str(tmp_path / "both")]) == 2
    assert main(common + ["--env-override", "[1]", "--out", str(tmp_path / "list")]) == 2


def test_run_evaluation_writes_the_record_and_one_csv_row_per_episode(policies, tmp_path):
    record = run_evaluation(policies, settings(decoding="sample", samples_per_task=2),
                            tmp_path / "out", label="base", arm="prompt_only")
    stored = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert stored == json.loads(json.dumps(record))
    assert stored["arm"] == "prompt_only" and stored["training_budget"] is None
    assert stored["summary"]["num_episodes"] == 6 and "2" in stored["summary"]["pass_at_k"]
    rows = (tmp_path / "out" / "episodes.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 6


def test_the_transcript_holds_every_response_and_marks_the_continued_candidates(policies,
                                                                               tmp_path):
    run_evaluation(policies, settings(decoding="sample", search=True, num_branches=3),
                   tmp_path / "out", label="searched")
    lines = (tmp_path / "out" / "transcripts.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    groups = {(e["task"], e["sample"], e["agent"], e["turn"], e["stage"]) for e in entries}
    assert len(entries) == 3 * len(groups)  # K candidates per acted (task, agent, turn)
    assert sorted(e["branch"] for e in entries) == sorted(list(range(3)) * len(groups))
    for group in groups:  # exactly one candidate of each group continued the episode
        assert sum(e["selected"] for e in entries
                   if (e["task"], e["sample"], e["agent"], e["turn"], e["stage"]) == group) == 1
    assert {e["task"] for e in entries} == {f"toy_score_v0/seed={s}" for s in
                                            settings().eval_seeds}
    assert all(e["prompt"] and isinstance(e["response"], str) for e in entries)
    for e in entries:  # the toy roles read any non-empty text as the action itself
        assert e["action"] == (e["response"] if e["parse_error"] is None else None)
    with open(tmp_path / "out" / "episodes.csv") as handle:  # the greedy path's actions
        actions = sum(int(value) for row in csv.DictReader(handle)
                      for column, value in row.items() if column.endswith("/actions"))
    assert sum(e["selected"] for e in entries) == actions


def test_the_eval_command_evaluates_the_base_model_and_fails_cleanly(policies, tmp_path):
    from pettingllms_rllib.cli import main

    out = tmp_path / "cli"
    assert main(["eval", "--base-model", "tiny-random", "--env", "toy_score_v0",
                 "--env-config", '{"max_turns": 1}', "--num-tasks", "2",
                 "--max-new-tokens", "4", "--out", str(out)]) == 0
    assert json.loads((out / "eval.json").read_text())["summary"]["num_tasks"] == 2
    assert main(["eval", "--base-model", "tiny-random", "--env", "toy_score_v0",
                 "--num-tasks", "0", "--out", str(tmp_path / "empty")]) == 2
    assert main(["eval", "--env", "toy_score_v0", "--out", str(tmp_path / "x")]) == 2


def test_the_untrained_model_is_evaluated_on_a_training_configs_task(policies, tmp_path, caplog):
    from pettingllms_rllib.cli import main

    config = tmp_path / "toy.yaml"
    config.write_text("name: toy\nmapping: per_role\nalgorithm:\n"
                      "  environment: {env: toy_score_v0, env_config: {max_turns: 1}}\n"
                      "  llm: {model: tiny-random, max_new_tokens: 3,\n"
                      "        tiny_model_config: {hidden_size: 32, intermediate_size: 64}}\n")
    out = tmp_path / "base"
    assert main(["eval", "--base-model", "tiny-random", "--config", str(config),
                 "--num-tasks", "2", "--out", str(out)]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["task"] == "toy_score_v0" and record["env_config"] == {"max_turns": 1}
    assert record["max_new_tokens"] == 3
    # --env-config and --max-new-tokens still win over the config's
    assert main(["eval", "--base-model", "tiny-random", "--config", str(config),
                 "--env-config", '{"max_turns": 2}', "--max-new-tokens", "2",
                 "--num-tasks", "1", "--out", str(out)]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["env_config"] == {"max_turns": 2} and record["max_new_tokens"] == 2
    # --env naming another task: the config's env kwargs belong to its own env, not this one
    register_text_env("toy_score_other_v0", ToyScoreEnv)
    assert main(["eval", "--base-model", "tiny-random", "--config", str(config),
                 "--env", "toy_score_other_v0", "--num-tasks", "1", "--out", str(out)]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["task"] == "toy_score_other_v0" and record["env_config"] == {}
    # a checkpoint carries its own config; a missing config file is named
    assert main(["eval", "--checkpoint", str(tmp_path), "--config", str(config),
                 "--out", str(tmp_path / "x")]) == 2
    assert "checkpoint carries its own training config" in caplog.text
    assert main(["eval", "--base-model", "tiny-random", "--config", str(tmp_path / "no.yaml"),
                 "--out", str(tmp_path / "y")]) == 2
    assert "no.yaml" in caplog.text


def test_a_module_can_come_from_another_run_of_the_same_base_model():
    from pettingllms_rllib.evaluation.evaluate import with_module_from

    mine = Policies(modules={"tool": "t1", "planner": "p1"},
                    mapping={"tool": "tool", "planner": "planner"}, tokenizer=None,
                    source="run A", model="m")
    donor = Policies(modules={"tool": "t2", "planner": "p2"}, mapping=mine.mapping,
                     tokenizer=None, source="run B", model="m")
    combined = with_module_from(mine, "planner", donor)
    assert combined.modules == {"tool": "t1", "planner": "p2"}
    with pytest.raises(KeyError, match="no module 'coder'"):
        with_module_from(mine, "coder", donor)
    with pytest.raises(ValueError, match="different base models"):
        with_module_from(mine, "planner", Policies(**{**donor.__dict__, "model": "other"}))


def test_the_progress_bar_counts_every_generated_response(policies, monkeypatch):
    import tqdm

    counted = []

    class RecordingBar(tqdm.tqdm):
        def update(self, n=1):
            counted.append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm, "tqdm", RecordingBar)
    transcript = []
    evaluate(policies, settings(decoding="sample", search=True, num_branches=3),
             transcript=transcript)
    assert sum(counted) == len(transcript) > 0


def test_a_parsed_action_that_is_not_json_is_reported_by_its_repr():
    from pettingllms_rllib.envs import ParseResult, Role
    from pettingllms_rllib.evaluation.evaluate import _parsed_action

    class Env:
        roles = {"a": Role("a", "", lambda text: ParseResult(value={1, 2})),
                 "b": Role("b", "", lambda text: ParseResult(value=[1, "x"])),
                 "c": Role("c", "", lambda text: ParseResult(error="no"))}

    assert _parsed_action(Env(), "a", "x") == "{1, 2}"
    assert _parsed_action(Env(), "b", "x") == [1, "x"]
    assert _parsed_action(Env(), "c", "x") is None
    assert _parsed_action(object(), "a", "x") is None  # a wrapped env parses in its step
