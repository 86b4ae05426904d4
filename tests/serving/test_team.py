"""The team behind the server, without Ray: a served episode is the one ``eval`` plays, a
batch gives each request what it gets alone, each agent answers with its own module, and a
bad request or a raising env fails alone."""

import copy
import json

import pytest
import torch

from pettingllms_rllib.engines.base import SamplingConfig
from pettingllms_rllib.engines.hf_engine import HFEngine
from pettingllms_rllib.envs import register_text_env
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT
from pettingllms_rllib.envs.registry import registered_env_ids
from pettingllms_rllib.evaluation.evaluate import (EvalSettings, Policies, base_policies,
                                                   evaluate, run_evaluation)
from pettingllms_rllib.serving.requests import (RequestError, ServedTeam, parse_chat_request,
                                                parse_episode_request)
from pettingllms_rllib.serving.team import TeamService
from toy_env import ToyScoreEnv

TINY = {"hidden_size": 32, "intermediate_size": 64}
SEED = TRAIN_SEED_LIMIT + 3


class RaisingScoreEnv(ToyScoreEnv):
    """The toy env with an env bug on task seed 13 (its first step raises)."""

    metadata = {"name": "toy_raising_v0"}

    def _apply_stage(self, stage, parsed, raw):
        if self.task_seed == 13:
            raise RuntimeError("an env bug")
        return super()._apply_stage(stage, parsed, raw)


@pytest.fixture(scope="module")
def service():
    """Two agents on two different tiny models (the reviewer's weights perturbed)."""
    register_text_env("toy_score_v0", ToyScoreEnv)
    register_text_env("toy_raising_v0", RaisingScoreEnv)
    base = base_policies("tiny-random", ["writer", "reviewer"], tiny_model_config=TINY)
    writer = base.modules["base"]
    reviewer = copy.deepcopy(writer)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in reviewer.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator))
    policies = Policies(modules={"writer": writer, "reviewer": reviewer},
                        mapping={"writer": "writer", "reviewer": "reviewer"},
                        tokenizer=base.tokenizer, source="test", model="tiny-random")
    team = ServedTeam(base_model="tiny-random", mapping=policies.mapping, env="toy_score_v0",
                      env_config={"max_turns": 2}, known_envs=registered_env_ids(),
                      temperature=1.0, max_new_tokens=5,
                      max_positions=writer.config.max_position_embeddings)
    return TeamService(policies, team)


def episode(service, **body):
    return service.prepare_episode(parse_episode_request(body, service.team))


def chat(service, **body):
    return service.prepare_chat(parse_chat_request(body, service.team))


def test_a_greedy_episode_is_the_one_eval_plays_for_that_seed(service, tmp_path):
    (served,) = service.play([episode(service, seed=SEED)])
    settings = EvalSettings(env="toy_score_v0", env_config={"max_turns": 2}, num_tasks=1,
                            max_new_tokens=5, first_seed=SEED)
    record = run_evaluation(service.policies, settings, tmp_path, label="eval")
    evaluated = [json.loads(line) for line in
                 (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert served["transcript"] == evaluated
    assert all("action" in entry for entry in evaluated)
    assert served["task"] == f"toy_score_v0/seed={SEED}"
    assert served["success"] == bool(record["summary"]["success_rate"])
    (summary,) = evaluate(service.policies, settings)
    assert served["agent_return"] == summary.agent_return
    assert served["turns"] == summary.num_turns == 2


def test_a_batch_gives_every_episode_what_it_gets_alone(service):
    seeds = [5, 6, 5, SEED]
    alone = [service.play([episode(service, seed=s)])[0] for s in seeds]
    batched = service.play([episode(service, seed=s) for s in seeds])
    assert batched == alone
    assert batched[0]["transcript"] != batched[1]["transcript"]  # different instances


def test_a_sampled_episode_sent_alone_replays_from_its_sampling_seed(service):
    body = dict(seed=5, decoding="sample", temperature=2.0, max_new_tokens=8)
    first = service.play([episode(service, sampling_seed=3, **body)])[0]["transcript"]
    again = service.play([episode(service, sampling_seed=3, **body)])[0]["transcript"]
    other = service.play([episode(service, sampling_seed=4, **body)])[0]["transcript"]
    assert first == again
    assert [e["response"] for e in first] != [e["response"] for e in other]


def test_an_engine_session_continues_one_random_stream(service):
    from pettingllms_rllib.engines.checkpoint_engine import start_checkpoint_engine

    sampling = SamplingConfig(max_new_tokens=8, temperature=2.0, seed=1)
    ids = [service.policies.tokenizer("topic 3")["input_ids"]]
    session = start_checkpoint_engine(service.policies).session(sampling)
    first, second = (session("writer", ids, 1)[0][0].text for _ in range(2))
    assert first != second  # the same prompt twice: the second call draws afresh
    assert start_checkpoint_engine(service.policies).session(sampling)("writer", ids, 1)[0][0] \
        .text == first  # a new session replays from the seed


def test_search_returns_every_candidate_and_marks_the_one_that_continued(service):
    (served,) = service.play([episode(service, seed=5, search=3, sampling_seed=2)])
    groups = {(e["agent"], e["turn"]) for e in served["transcript"]}
    assert len(served["transcript"]) == 3 * len(groups) == 3 * 4
    for group in groups:
        assert sum(e["selected"] for e in served["transcript"]
                   if (e["agent"], e["turn"]) == group) == 1


def test_each_agent_answers_a_chat_with_its_own_module(service):
    prompt = "You are the writer. Topic 3, turn 0. Writer said: "
    answers = {}
    for agent in ("writer", "reviewer"):
        (completion,) = service.complete([chat(
            service, model=agent, temperature=0, max_tokens=6,
            messages=[{"role": "user", "content": prompt}])])
        engine = HFEngine(service.policies.tokenizer,
                          SamplingConfig(max_new_tokens=6, greedy=True))
        (expected,) = engine.generate(service.policies.modules[agent], [prompt], 1)
        assert completion["choices"][0]["message"]["content"] == expected[0].text
        assert completion["usage"]["completion_tokens"] == len(expected[0].response_ids)
        assert completion["model"] == agent
        answers[agent] = expected[0].text
    assert answers["writer"] != answers["reviewer"]


def test_a_batch_of_chats_gives_each_what_it_gets_alone(service):
    bodies = [dict(model=model, temperature=0, max_tokens=4,
                   messages=[{"role": "user", "content": f"topic {i}"}])
              for i, model in enumerate(["writer", "reviewer", "writer", "tiny-random:writer"])]
    alone = [service.complete([chat(service, **body)])[0] for body in bodies]
    batched = service.complete([chat(service, **body) for body in bodies])
    content = [[c["message"] for c in r["choices"]] for r in batched]
    assert content == [[c["message"] for c in r["choices"]] for r in alone]


def test_a_system_message_and_every_turn_of_a_longer_chat_reach_the_model(service):
    one = chat(service, model="writer", messages=[{"role": "user", "content": "hi"}])
    with_system = chat(service, model="writer", messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    longer = chat(service, model="writer", messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"}])
    decode = service.policies.tokenizer.decode
    assert "Be brief." in decode(with_system.prompt_ids) and "Be brief." not in \
        decode(one.prompt_ids)
    assert all(word in decode(longer.prompt_ids) for word in ("hi", "hello", "again"))
    (completion,) = service.complete([longer])
    assert completion["usage"]["prompt_tokens"] == len(longer.prompt_ids)


@pytest.mark.parametrize("body,field,status", [
    ({"seed": 1, "env_config": {"colour": "red"}}, "env_config", 400),
    ({"seed": 1, "env": "plan_path_v1", "env_config": {"grid_size": 3}}, "env", 422),
])
def test_an_episode_the_env_cannot_play_is_refused_before_any_batch(service, body, field,
                                                                    status):
    with pytest.raises(RequestError) as info:
        episode(service, **body)
    assert (info.value.field, info.value.status) == (field, status)


def test_a_chat_longer_than_the_context_is_refused(service):
    with pytest.raises(RequestError, match="exceed the model's context") as info:
        chat(service, model="writer", max_tokens=5,
             messages=[{"role": "user", "content": "word " * 3000}])
    assert info.value.field == "messages"


def test_an_env_that_raises_fails_its_own_episode_only(service):
    raising, fine = service.play([
        episode(service, env="toy_raising_v0", env_config={"max_turns": 2}, seed=seed)
        for seed in (13, 14)])
    assert raising["error"]["code"] == 500 and "toy_raising_v0/seed=13" in \
        raising["error"]["message"]
    assert "error" not in fine and len(fine["transcript"]) == 4


def test_models_lists_every_agent_by_both_names(service):
    listed = {entry["id"]: entry["module"] for entry in service.models()["data"]}
    assert listed == {"writer": "writer", "reviewer": "reviewer",
                      "tiny-random:writer": "writer", "tiny-random:reviewer": "reviewer"}
