"""HFEngine: shapes and order, chat templating, behaviour log-probs, stopping, seeding, batching."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch

from pettingllms_rllib.engines.base import Completion, SamplingConfig
from pettingllms_rllib.engines.hf_engine import HFEngine, sample_tokens
from pettingllms_rllib.envs import Prompt
from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm, load_tokenizer
from teacher_forcing import teacher_forced

TINY = ModelSpec("tiny-random", tiny_config={"hidden_size": 32, "intermediate_size": 64})
PROMPTS = ["Go from S to G.", "A much longer prompt: the grid has walls at (1, 2) and (3, 3); "
           "start at (0, 0), goal at (4, 4). Answer like: Moves: R D", "Hi"]


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm(TINY), load_tokenizer(TINY)


def engine(tokenizer, max_new_tokens=8, temperature=1.0, seed=0, **kwargs):
    return HFEngine(tokenizer, SamplingConfig(max_new_tokens=max_new_tokens,
                                              temperature=temperature, seed=seed), **kwargs)


def test_k_completions_per_prompt_in_prompt_order(tiny):
    model, tokenizer = tiny
    results = engine(tokenizer).generate(model, PROMPTS, num_samples=4)
    assert len(results) == len(PROMPTS)
    for prompt, group in zip(PROMPTS, results):
        assert len(group) == 4 and all(isinstance(c, Completion) for c in group)
        expected = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True,
                                                 return_dict=True)["input_ids"]
        assert all(c.prompt_ids == tuple(expected) for c in group)
        for c in group:
            assert len(c.response_ids) == len(c.logprobs) >= 1
            assert c.text == tokenizer.decode(list(c.response_ids), skip_special_tokens=True)
    assert len({len(g[0].prompt_ids) for g in results}) == 3  # really different lengths


def test_system_prompt_and_plain_text_fallback(tiny, monkeypatch):
    model, tokenizer = tiny
    with_system = engine(tokenizer, system_prompt="You plan paths.")
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": "You plan paths."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=True, return_dict=True)["input_ids"]
    assert with_system.encode_prompt("Hi") == list(expected)

    monkeypatch.setattr(tokenizer, "chat_template", None)
    plain = engine(tokenizer, system_prompt="Sys")
    assert plain.encode_prompt("Hi") == tokenizer("Sys\n\nHi")["input_ids"]
    [[completion]] = plain.generate(model, ["Hi"], 1)
    assert completion.prompt_ids == tuple(tokenizer("Sys\n\nHi")["input_ids"])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("max_batch_size", [None, 3])
def test_behaviour_logprobs_match_teacher_forced_learner(tiny, temperature, max_batch_size):
    model, tokenizer = tiny
    results = engine(tokenizer, max_new_tokens=12, temperature=temperature,
                     max_batch_size=max_batch_size).generate(model, PROMPTS, num_samples=3)
    completions = [c for group in results for c in group]
    for c, learner in zip(completions, teacher_forced(model, completions, temperature,
                                                      tokenizer.pad_token_id)):
        torch.testing.assert_close(torch.tensor(c.logprobs), learner, atol=2e-5, rtol=0)


def test_stop_tokens_end_rows_and_are_kept(tiny):
    model, tokenizer = tiny
    stop_ids = set(range(3, len(tokenizer), 10))  # ~10% of the vocabulary: some rows stop early
    results = engine(tokenizer, max_new_tokens=16, seed=5, stop_token_ids=stop_ids).generate(
        model, PROMPTS[:2], num_samples=8)
    completions = [c for group in results for c in group]
    reasons = {c.finish_reason for c in completions}
    assert reasons == {"stop", "length"}
    for c in completions:
        assert not stop_ids.intersection(c.response_ids[:-1])  # nothing after a stop token
        if c.finish_reason == "stop":
            assert c.response_ids[-1] in stop_ids
        else:
            assert len(c.response_ids) == 16 and c.response_ids[-1] not in stop_ids
    # Rows dropped from the batch mid-loop must not disturb the others' log-probs.
    for c, learner in zip(completions, teacher_forced(model, completions, 1.0,
                                                      tokenizer.pad_token_id)):
        torch.testing.assert_close(torch.tensor(c.logprobs), learner, atol=2e-5, rtol=0)


def test_all_rows_stopping_ends_the_loop(tiny):
    model, tokenizer = tiny
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        results = engine(tokenizer, max_new_tokens=20,
                         stop_token_ids=range(len(tokenizer))).generate(model, PROMPTS, 2)
    finally:
        handle.remove()
    assert len(calls) == 1  # the prefill; every row stopped at its first token
    assert all(len(c.response_ids) == 1 and c.finish_reason == "stop" for g in results for c in g)


def test_default_stop_ids_are_tokenizer_and_model_eos(tiny):
    model, tokenizer = tiny
    stop_ids = engine(tokenizer)._stop_ids(model).tolist()
    assert tokenizer.eos_token_id in stop_ids
    assert set(stop_ids) >= {model.generation_config.eos_token_id}


def test_same_seed_same_samples(tiny):
    model, tokenizer = tiny
    first = engine(tokenizer, seed=11).generate(model, PROMPTS, 2)
    again = engine(tokenizer, seed=11).generate(model, PROMPTS, 2)
    other = engine(tokenizer, seed=12).generate(model, PROMPTS, 2)
    assert first == again
    assert first != other
    repeated = engine(tokenizer, seed=11)
    repeated.generate(model, PROMPTS, 2)
    assert repeated.generate(model, PROMPTS, 2) != first  # the stream advances across calls


@contextlib.contextmanager
def forward_input_shapes(model):
    """Record the ``input_ids`` shape of every forward pass of ``model``."""
    shapes = []
    handle = model.register_forward_hook(
        lambda module, args, kwargs, output: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    try:
        yield shapes
    finally:
        handle.remove()


def test_max_new_tokens_and_one_prefill_per_loop(tiny):
    model, tokenizer = tiny
    with forward_input_shapes(model) as shapes:
        results = engine(tokenizer, max_new_tokens=5, stop_token_ids=()).generate(
            model, PROMPTS, num_samples=4)
    assert all(len(c.response_ids) == 5 and c.finish_reason == "length"
               for group in results for c in group)
    longest = max(len(group[0].prompt_ids) for group in results)
    # One prefill of the 3 distinct prompts, then 4 single-token steps of all 12 branches.
    assert shapes == [(3, longest)] + [(12, 1)] * 4


def test_max_batch_size_splits_into_loops(tiny):
    model, tokenizer = tiny
    with forward_input_shapes(model) as shapes:
        results = engine(tokenizer, max_new_tokens=3, stop_token_ids=(),
                         max_batch_size=5).generate(model, PROMPTS, num_samples=4)
    assert [len(group) for group in results] == [4, 4, 4]
    decode_batches = [rows for rows, width in shapes if width == 1]
    assert max(decode_batches) <= 5 and sum(decode_batches) == 12 * 2


def test_restores_training_mode_and_handles_edge_cases(tiny):
    model, tokenizer = tiny
    sampler = engine(tokenizer)
    model.train()
    try:
        sampler.generate(model, ["Hi"], 1)
        assert model.training
    finally:
        model.eval()
    assert sampler.generate(model, [], 3) == []
    with pytest.raises(ValueError):
        sampler.generate(model, ["Hi"], 0)
    with pytest.raises(ValueError):
        engine(tokenizer, max_batch_size=0)


def test_peft_wrapped_model(tiny):
    peft = pytest.importorskip("peft")
    model, tokenizer = tiny
    lora = peft.get_peft_model(load_causal_lm(TINY), peft.LoraConfig(
        r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    results = engine(tokenizer, max_new_tokens=6).generate(lora, PROMPTS[:2], 2)
    completions = [c for group in results for c in group]
    for c, learner in zip(completions, teacher_forced(lora, completions, 1.0,
                                                      tokenizer.pad_token_id)):
        torch.testing.assert_close(torch.tensor(c.logprobs), learner, atol=2e-5, rtol=0)


def test_sampler_follows_the_tempered_softmax():
    logits = torch.tensor([[0.0, 1.0, 2.0, float("-inf"), 0.5]]).repeat(100_000, 1)
    tokens, logprobs = sample_tokens(logits, 0.8, torch.Generator().manual_seed(0))
    expected = torch.softmax(logits[0] / 0.8, dim=-1)
    frequencies = torch.bincount(tokens, minlength=5).float() / len(tokens)
    torch.testing.assert_close(frequencies, expected, atol=5e-3, rtol=0)  # ~4 sigma
    assert frequencies[3] == 0
    torch.testing.assert_close(logprobs, torch.log_softmax(logits / 0.8, dim=-1)[
        torch.arange(len(tokens)), tokens])


def test_greedy_decoding_is_deterministic_and_picks_the_most_likely_tokens(tiny):
    model, tokenizer = tiny
    greedy = HFEngine(tokenizer, SamplingConfig(max_new_tokens=6, greedy=True, seed=None))
    first = greedy.generate(model, PROMPTS[:2], num_samples=2)
    second = greedy.generate(model, PROMPTS[:2], num_samples=2)
    for group_a, group_b in zip(first, second):
        assert len({c.response_ids for c in group_a + group_b}) == 1  # no randomness at all
    completion = first[0][0]
    ids = torch.tensor([list(completion.prompt_ids) + list(completion.response_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(completion.prompt_ids) - 1:-1]
    assert completion.response_ids[:len(logits)] == tuple(logits.argmax(-1).tolist())


def test_greedy_decoding_equals_transformers_generate_token_for_token(tiny):
    """The decode loop (preallocated cache, batched rows of different prompt lengths, finished
    rows pruned) reproduces transformers' own greedy ``generate`` on each prompt alone."""
    model, tokenizer = tiny
    greedy = HFEngine(tokenizer, SamplingConfig(max_new_tokens=10, greedy=True, seed=None),
                      stop_token_ids=[tokenizer.eos_token_id])
    results = greedy.generate(model, PROMPTS, num_samples=2)
    for group in results:
        completion = group[0]
        ids = torch.tensor([list(completion.prompt_ids)])
        with torch.no_grad():
            reference = model.generate(ids, attention_mask=torch.ones_like(ids),
                                       do_sample=False, max_new_tokens=10,
                                       eos_token_id=tokenizer.eos_token_id,
                                       pad_token_id=tokenizer.eos_token_id)
        expected = tuple(reference[0, ids.shape[1]:].tolist())
        stop = expected.index(tokenizer.eos_token_id) + 1 if (
            tokenizer.eos_token_id in expected) else len(expected)
        assert completion.response_ids == expected[:stop]


def test_the_kv_cache_is_allocated_once_and_written_in_place(tiny):
    from pettingllms_rllib.engines.hf_engine import (PreallocatedLayer, _cache_kwarg,
                                                     preallocated_cache)

    model, _ = tiny
    cache = preallocated_cache(model, capacity=12)
    cache_arg = {_cache_kwarg(model): cache}
    assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **cache_arg)
        storage = cache.layers[0]._keys.data_ptr()
        for step in range(3):
            model(input_ids=torch.tensor([[9]]), use_cache=True, **cache_arg,
                  position_ids=torch.tensor([[4 + step]]))
    assert cache.layers[0]._keys.data_ptr() == storage
    assert cache.get_seq_length() == 7 and cache.layers[0].keys.shape[2] == 7
    with pytest.raises(RuntimeError, match="capacity"):
        with torch.no_grad():
            model(input_ids=torch.ones((1, 6), dtype=torch.long), use_cache=True,
                  **cache_arg, position_ids=torch.arange(7, 13).unsqueeze(0))


def test_an_answer_prefix_is_prompt_tokens_and_starts_the_completion_text(tiny):
    model, tokenizer = tiny
    prompt = Prompt("Go from S to G.", answer_prefix="Moves:")
    plain_ids = engine(tokenizer).encode_prompt("Go from S to G.")
    prefix_ids = tokenizer("Moves:", add_special_tokens=False)["input_ids"]
    assert engine(tokenizer).encode_prompt(prompt) == plain_ids + prefix_ids
    [group, plain_group] = engine(tokenizer).generate(model, [prompt, "Go from S to G."], 3)
    for completion in group:
        # The prefix is context the model continues, never a token it is trained to choose.
        assert completion.prompt_ids == tuple(plain_ids + prefix_ids)
        assert completion.text == "Moves:" + tokenizer.decode(list(completion.response_ids),
                                                              skip_special_tokens=True)
        assert len(completion.logprobs) == len(completion.response_ids)
    assert all(c.prompt_ids == tuple(plain_ids) and not c.text.startswith("Moves:")
               for c in plain_group)


def test_a_bf16_prefill_keeps_the_last_position_by_index_and_fp32_by_count(tiny):
    """In bf16 the prefill asks for the last position's logits by index (a contiguous copy:
    the strided view hit a CPU bf16 matmul that expanded the LM head), with the same logits;
    fp32 keeps the count, so its numbers are unchanged."""
    from pettingllms_rllib.engines.hf_engine import _last_position

    model, tokenizer = tiny
    assert _last_position(model, 7) == 1
    bf16 = load_causal_lm(dataclasses.replace(TINY, dtype="bfloat16"))
    keep = _last_position(bf16, 7)
    assert isinstance(keep, torch.Tensor) and keep.tolist() == [6]
    ids = torch.tensor([tokenizer("a b c d e f g")["input_ids"][:7]] * 3)
    with torch.no_grad():
        by_index = bf16(input_ids=ids, logits_to_keep=keep).logits
        by_count = bf16(input_ids=ids, logits_to_keep=1).logits
    assert by_index.shape == by_count.shape == (3, 1, bf16.config.vocab_size)
    assert torch.equal(by_index, by_count)
