"""Weight-sync bookkeeping that needs neither vLLM nor a GPU: adapter ids, folders, lag checks."""

import json

import pytest
import torch

from pettingllms_rllib.engines.vllm_engine import VLLM_LORA_RANKS, vllm_lora_rank
from pettingllms_rllib.engines.weight_sync import (AdapterTable, EngineWeightsLagError,
                                                   check_engine_version, write_lora_adapter)
from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm
from pettingllms_rllib.models.memory import DEFAULT_LORA

TINY = ModelSpec("tiny-random", tiny_config={"hidden_size": 32, "intermediate_size": 64})


def test_every_publish_gets_a_strictly_larger_id_and_returns_the_adapter_it_replaces():
    table = AdapterTable()
    first, replaced = table.publish("planner", 0, "/a")
    assert replaced is None and first.lora_int_id >= 1  # vLLM reserves id 0
    second, _ = table.publish("tool", 0, "/b")
    third, replaced = table.publish("planner", 1, "/c")
    assert first.lora_int_id < second.lora_int_id < third.lora_int_id
    assert replaced == first  # the caller drops exactly the stale planner adapter
    assert table.served("planner") == third and table.served("tool") == second
    assert third.name == "planner@v1" and table.module_ids == ["planner", "tool"]


def test_republishing_the_same_version_still_gets_a_fresh_id():
    """vLLM caches adapters by id, so even a re-sync of one version must not reuse an id."""
    table = AdapterTable()
    a, _ = table.publish("planner", 2, "/a")
    b, replaced = table.publish("planner", 2, "/b")
    assert b.lora_int_id > a.lora_int_id and replaced == a


def test_a_version_going_backwards_is_refused():
    table = AdapterTable()
    table.publish("planner", 3, "/a")
    with pytest.raises(ValueError, match="older than the served version 3"):
        table.publish("planner", 2, "/b")


def test_asking_for_an_unloaded_adapter_names_the_loaded_ones():
    table = AdapterTable()
    table.publish("tool", 0, "/a")
    with pytest.raises(KeyError, match=r"'planner'.*\['tool'\]"):
        table.served("planner")
    assert "tool" in table and "planner" not in table


def test_an_engine_behind_the_learner_fails_loudly_and_one_in_step_passes():
    with pytest.raises(EngineWeightsLagError, match="serves weights version 2 .* version 3"):
        check_engine_version(2, 3, where="env runner 1")
    check_engine_version(3, 3, where="env runner 1")


def test_a_written_adapter_folder_loads_back_into_peft_with_identical_weights(tmp_path):
    from peft import PeftModel, get_peft_model, get_peft_model_state_dict
    from peft import LoraConfig

    lora = {**DEFAULT_LORA, "r": 4, "lora_alpha": 8}
    model = get_peft_model(load_causal_lm(TINY), LoraConfig(**lora), adapter_name="planner")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    state = get_peft_model_state_dict(model, adapter_name="planner")
    folder = write_lora_adapter(state, lora, tmp_path / "planner")
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["target_modules"] == sorted(lora["target_modules"])
    reloaded = PeftModel.from_pretrained(load_causal_lm(TINY), str(folder))
    again = get_peft_model_state_dict(reloaded)
    assert state.keys() == again.keys()
    assert all(torch.equal(state[k], again[k]) for k in state)


def test_an_empty_adapter_state_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no tensors"):
        write_lora_adapter({}, DEFAULT_LORA, tmp_path / "empty")


def test_adapter_ranks_round_up_to_the_ranks_vllm_reserves():
    assert [vllm_lora_rank(r) for r in (1, 4, 8, 9, 64)] == [1, 8, 8, 16, 64]
    with pytest.raises(ValueError, match="exceeds"):
        vllm_lora_rank(VLLM_LORA_RANKS[-1] + 1)


def test_published_full_weights_read_back_identical_and_only_the_latest_version_stays(tmp_path):
    from pettingllms_rllib.engines.weight_sync import (full_weights_folder, publish_full_weights,
                                                       read_full_weights)

    model = load_causal_lm(TINY)
    first = publish_full_weights(model, tmp_path, "planner", 1)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(1.0)
    second = publish_full_weights(model, tmp_path, "planner", 2)
    assert second == str(full_weights_folder(tmp_path, "planner", 2))
    assert [p.name for p in (tmp_path / "planner").iterdir()] == ["v00000002"]  # no temp left
    state = read_full_weights(second)
    expected = model.state_dict()
    # Every entry under its own name, the tied lm_head included (vLLM's CPU backend needs it).
    assert state.keys() == expected.keys() and "lm_head.weight" in state
    for key, value in state.items():
        assert torch.equal(value, expected[key]), key
    assert not (tmp_path / "planner" / first.split("/")[-1]).exists()


def test_reading_a_folder_without_weights_says_so(tmp_path):
    from pettingllms_rllib.engines.weight_sync import read_full_weights

    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        read_full_weights(tmp_path)
