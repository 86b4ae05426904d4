"""What the team server accepts and how it refuses: every bad field is a 4xx naming the field
and what it accepts (no Ray, no model)."""

import json

import pytest

from pettingllms_rllib.serving.requests import (MAX_BRANCHES, RequestError, ServedTeam,
                                                check_length, decode_json, parse_chat_request,
                                                parse_episode_request)

TEAM = ServedTeam(base_model="smollm2-135m-instruct", mapping={"tool": "tool", "planner": "planner"},
                  env="plan_path_v1", env_config={"grid_size": 3, "max_turns": 2},
                  known_envs=["math_v0", "plan_path_v1"], temperature=0.7, max_new_tokens=16,
                  max_positions=2048)


def refusal(parse, body) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(body, TEAM)
    return info.value


def test_an_episode_defaults_to_the_trained_task_and_greedy_decoding():
    request = parse_episode_request({"seed": 7}, TEAM)
    assert (request.env, dict(request.env_config), request.seed) == (
        "plan_path_v1", {"grid_size": 3, "max_turns": 2}, 7)
    assert (request.search, request.decoding, request.temperature, request.max_new_tokens) == (
        1, "greedy", 0.7, 16)


def test_an_episode_env_config_updates_the_trained_one_and_replaces_it_for_another_env():
    same = parse_episode_request({"seed": 1, "env_config": {"max_turns": 1}}, TEAM)
    assert dict(same.env_config) == {"grid_size": 3, "max_turns": 1}
    other = parse_episode_request({"seed": 1, "env": "math_v0", "env_config": {"x": 1}}, TEAM)
    assert dict(other.env_config) == {"x": 1}


def test_search_samples_by_default_and_refuses_greedy():
    assert parse_episode_request({"seed": 1, "search": 4}, TEAM).decoding == "sample"
    error = refusal(parse_episode_request, {"seed": 1, "search": 4, "decoding": "greedy"})
    assert error.field == "search" and "sample" in error.message


@pytest.mark.parametrize("body,field,accepted", [
    ({"seed": -1}, "seed", ">= 0"),
    ({}, "seed", "required"),
    ({"seed": "7"}, "seed", "integer"),
    ({"seed": True}, "seed", "integer"),
    ({"seed": 1, "search": 0}, "search", ">= 1"),
    ({"seed": 1, "search": MAX_BRANCHES + 1}, "search", f"<= {MAX_BRANCHES}"),
    ({"seed": 1, "env": "chess_v9"}, "env", "plan_path_v1"),
    ({"seed": 1, "env_config": [1]}, "env_config", "object"),
    ({"seed": 1, "options": 3}, "options", "object"),
    ({"seed": 1, "decoding": "beam"}, "decoding", "greedy"),
    ({"seed": 1, "temperature": 0}, "temperature", "(0, 100]"),
    ({"seed": 1, "max_new_tokens": 0}, "max_new_tokens", ">= 1"),
    ({"seed": 1, "max_new_tokens": 5000}, "max_new_tokens", "<= 2047"),
    ({"seed": 1, "colour": "red"}, "colour", "accepted"),
    ([1, 2], "body", "object"),
])
def test_bad_episode_fields_are_refused_naming_the_field_and_what_it_accepts(body, field,
                                                                              accepted):
    error = refusal(parse_episode_request, body)
    assert error.status == 400
    assert error.field == field
    assert accepted in error.message


def test_a_chat_names_an_agent_or_base_colon_agent():
    for model in ("tool", "smollm2-135m-instruct:tool"):
        request = parse_chat_request(
            {"model": model, "messages": [{"role": "user", "content": "hi"}]}, TEAM)
        assert (request.agent, request.module_id, request.model) == ("tool", "tool", model)
        assert (request.max_tokens, request.temperature, request.n) == (16, 0.7, 1)
    assert parse_chat_request({"model": "planner", "temperature": 0, "max_completion_tokens": 5,
                               "messages": [{"role": "user", "content": "hi"}]},
                              TEAM).max_tokens == 5


@pytest.mark.parametrize("body,field,status", [
    ({"model": "critic", "messages": [{"role": "user", "content": "x"}]}, "model", 404),
    ({"messages": [{"role": "user", "content": "x"}]}, "model", 400),
    ({"model": "tool", "messages": []}, "messages", 400),
    ({"model": "tool", "messages": [{"role": "robot", "content": "x"}]}, "messages[0]", 400),
    ({"model": "tool", "messages": [{"role": "user", "content": 3}]}, "messages[0]", 400),
    ({"model": "tool", "messages": [{"role": "user", "content": "x"}], "stream": True},
     "stream", 400),
    ({"model": "tool", "messages": [{"role": "user", "content": "x"}], "temperature": -1},
     "temperature", 400),
    ({"model": "tool", "messages": [{"role": "user", "content": "x"}], "n": 0}, "n", 400),
    ({"model": "tool", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
     "max_tokens", 400),
    ({"model": "tool", "messages": [{"role": "user", "content": "x"}], "top_k": 3},
     "top_k", 400),
])
def test_bad_chat_fields_are_refused_naming_the_field(body, field, status):
    error = refusal(parse_chat_request, body)
    assert (error.field, error.status) == (field, status)


def test_the_unknown_model_error_lists_every_accepted_name():
    error = refusal(parse_chat_request,
                    {"model": "critic", "messages": [{"role": "user", "content": "x"}]})
    for name in ("planner", "tool", "smollm2-135m-instruct:planner",
                 "smollm2-135m-instruct:tool"):
        assert repr(name) in error.message


def test_malformed_json_is_a_400_on_the_body_in_openai_error_shape():
    with pytest.raises(RequestError) as info:
        decode_json(b'{"seed": 7')
    body = info.value.body()
    assert info.value.status == 400
    assert body["error"]["param"] == "body" and body["error"]["code"] == 400
    assert body["error"]["type"] == "invalid_request_error"
    json.dumps(body)
    assert decode_json(b'{"seed": 7}') == {"seed": 7}


def test_a_prompt_that_does_not_fit_the_context_is_refused():
    check_length(2000, 48, 2048, field="messages")
    with pytest.raises(RequestError, match="2000 prompt tokens \\+ 49 new tokens exceed"):
        check_length(2000, 49, 2048, field="messages")
