"""The engine spec (``engines/spec.py``): what generates for a team, read from a run's config,
written into every checkpoint and read back; the one factory ``eval`` and ``serve`` start
their engine from (``engines/checkpoint_engine.py``)."""

import dataclasses
import json
from pathlib import Path

import pytest

from pettingllms_rllib import checkpoints
from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.engines import CHECKPOINT_ENGINES, ENGINE_KINDS
from pettingllms_rllib.engines.checkpoint_engine import start_checkpoint_engine
from pettingllms_rllib.engines.spec import SPEC_VERSION, EngineSpec
from pettingllms_rllib.models.memory import DEFAULT_LORA

OLD_CHECKPOINT = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_ca19997_tiny"


def run_config(**llm) -> ATGRPOConfig:
    return (ATGRPOConfig().llm(**llm)
            .multi_agent(policies={"tool", "planner"},
                         policy_mapping_fn=lambda agent_id, *args, **kwargs: agent_id))


def test_the_spec_holds_the_runs_model_numerics_adapters_and_engine_settings():
    config = run_config(lora={"r": 4}, system_prompt="Be brief.", max_new_tokens=12,
                        temperature=0.7, model_dtype="float32", vllm_kv_cache_gib=0.25)
    spec = config.engine_spec
    assert spec.engine == "hf" and spec.policies == ("planner", "tool")
    assert spec.model == {"name_or_path": "smollm2-135m-instruct", "dtype": "float32",
                          "seed": 0}
    assert spec.lora == {**DEFAULT_LORA, "r": 4} == config.lora_kwargs
    assert (spec.system_prompt, spec.max_new_tokens, spec.temperature) == ("Be brief.", 12, 0.7)
    assert spec.vllm_kv_cache_gib == 0.25 and spec.vllm_gpu_memory_utilization == 0.5
    assert run_config().engine_spec.lora is None  # full fine-tuning


def test_a_spec_survives_its_json_and_another_version_is_refused_naming_both():
    spec = run_config(lora={"r": 4}, engine="vllm").engine_spec
    assert EngineSpec.from_json(spec.to_json()) == spec
    stored = json.loads(spec.to_json())
    assert stored["version"] == SPEC_VERSION
    stored["version"] = SPEC_VERSION + 1
    with pytest.raises(ValueError, match=f"version {SPEC_VERSION + 1} is not readable by this "
                                         f"library \\(it reads version {SPEC_VERSION}\\)"):
        EngineSpec.from_json(json.dumps(stored))


def test_a_checkpoint_written_before_specs_were_saved_gets_the_one_its_config_describes():
    assert checkpoints.read_engine_spec(OLD_CHECKPOINT) is None
    config = checkpoints.read_config(OLD_CHECKPOINT)
    spec = EngineSpec.of_checkpoint(None, config)
    assert spec == EngineSpec.from_config(config)
    assert spec.engine == "hf" and spec.policies == tuple(sorted(config["policies"]))


def test_a_checkpoint_carrying_a_spec_is_read_back_as_written(tmp_path):
    spec = run_config(lora={"r": 8}).engine_spec
    checkpoints.write_engine_spec(tmp_path, spec.to_json())
    assert (tmp_path / checkpoints.ENGINE_SPEC_FILE).is_file()
    assert EngineSpec.of_checkpoint(checkpoints.read_engine_spec(tmp_path), {}) == spec


def test_a_base_model_gets_the_hf_engine_without_adapters_or_system_prompt():
    spec = EngineSpec.for_base_model({"name_or_path": "tiny-random", "dtype": "float32"},
                                     ["b", "a"])
    assert (spec.engine, spec.policies, spec.lora, spec.system_prompt) == (
        "hf", ("a", "b"), None, None)
    assert spec.with_engine("vllm").engine == "vllm" and spec.with_engine(None) is spec


def test_every_engine_kind_that_generates_for_a_loaded_team_is_offered_to_eval_and_serve():
    assert CHECKPOINT_ENGINES == ("hf", "vllm")
    for name in CHECKPOINT_ENGINES:
        kind = ENGINE_KINDS[name]
        assert callable(kind.function(kind.checkpoint_function))


def test_an_unknown_engine_for_a_team_is_refused_listing_the_known_ones():
    @dataclasses.dataclass
    class Team:
        tokenizer: object = None
        engine_spec: EngineSpec = EngineSpec.for_base_model({"name_or_path": "x"}, ["m"])

    with pytest.raises(ValueError, match=r"unknown engine 'tgi'; known: \['hf', 'vllm'\]"):
        start_checkpoint_engine(Team(), "tgi")
