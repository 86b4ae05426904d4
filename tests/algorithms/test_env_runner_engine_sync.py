"""LLMEnvRunner with engine="vllm", on a recording fake engine (no vLLM, no Ray cluster):
``set_state`` pushes every module's weights into the engine, and a runner whose engine did not
take the update refuses to sample."""

import pytest
import torch
from ray.rllib.core import COMPONENT_RL_MODULE
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from toy_env import ToyScoreEnv

from pettingllms_rllib.algorithms import ATGRPOConfig
from pettingllms_rllib.algorithms.env_runner import LLMEnvRunner
from pettingllms_rllib.engines.base import Completion, SamplingConfig
from pettingllms_rllib.engines.weight_sync import EngineWeightsLagError
from pettingllms_rllib.envs import register_text_env
from pettingllms_rllib.experiment import multi_agent_kwargs

AGENTS = ["writer", "reviewer"]


class RecordingEngine:
    """Stands in for VLLMEngine: records sync calls; ``stuck`` ones never finish a sync."""

    def __init__(self, stuck=False):
        self.stuck = stuck
        self.sampling = SamplingConfig(max_new_tokens=4, temperature=1.0)
        self.weights_version = 0
        self.calls = []

    def load_adapter(self, module_id, state, lora_kwargs, version):
        self.calls.append(("adapter", module_id, version, sorted(state)[:1], lora_kwargs["r"]))

    def load_full_weights(self, state):
        self.calls.append(("full", len(state)))

    def finish_sync(self, version):
        self.calls.append(("finish", version))
        if not self.stuck:
            self.weights_version = version

    def generate(self, model, prompts, num_samples, sampling=None):
        greedy = sampling is not None and sampling.greedy
        self.calls.append(("generate", model, len(prompts), num_samples) + (
            ("greedy",) if greedy else ()))
        return [[Completion((1, 2), (3,), (-0.5,), "42", "stop")] * num_samples
                for _ in prompts]


@pytest.fixture
def make_runner(monkeypatch):
    register_text_env("toy_score_v0", ToyScoreEnv)
    monkeypatch.setattr("pettingllms_rllib.engines.vllm_engine.vllm_installed", lambda: True)

    def build(*, lora, mapping="per_role", stuck=False):
        modules = ["shared"] if mapping == "shared" else sorted(AGENTS)
        if lora:  # one engine serves every adapter; full fine-tuning: one engine per module
            engine = RecordingEngine(stuck=stuck)
            engines = {m: engine for m in modules}
        else:
            engines = {m: RecordingEngine(stuck=stuck) for m in modules}
        monkeypatch.setattr("pettingllms_rllib.engines.vllm_engine.start_vllm_engines",
                            lambda config, tokenizer, sampling: engines)
        config = (ATGRPOConfig()
                  .environment("toy_score_v0", env_config={"max_turns": 1})
                  .llm(model="tiny-random", engine="vllm", max_new_tokens=4,
                       lora={"r": 4} if lora else None)
                  .training(num_branches=2, num_tasks_per_iteration=1)
                  .multi_agent(**multi_agent_kwargs(mapping, AGENTS)))
        config.validate_at_grpo()
        return LLMEnvRunner(config=config), engines

    return build


def state(modules, version):
    return {WEIGHTS_SEQ_NO: version,
            COMPONENT_RL_MODULE: {m: {"w": torch.zeros(2)} for m in modules}}


def test_a_vllm_runner_holds_no_torch_module_only_the_engines(make_runner):
    runner, engines = make_runner(lora=True)
    assert runner.module is None and runner.engine.engines == engines


def test_set_state_loads_every_modules_adapter_then_finishes_the_sync(make_runner):
    runner, engines = make_runner(lora=True)
    engine = engines["writer"]
    runner.set_state(state(["reviewer", "writer"], 1))
    assert engine.calls == [("adapter", "reviewer", 1, ["w"], 4),
                            ("adapter", "writer", 1, ["w"], 4), ("finish", 1)]
    assert runner.weights_version == engine.weights_version == 1


def test_each_agent_generates_with_its_own_adapter(make_runner):
    runner, engines = make_runner(lora=True)
    engine = engines["writer"]
    runner.set_state(state(["reviewer", "writer"], 1))
    out = runner.sample(task_seeds=[7])
    used = {call[1] for call in engine.calls if call[0] == "generate"}
    assert used == {"writer", "reviewer"} and out["weights_version"] == 1


def test_full_finetuning_reloads_each_modules_own_engine_and_generates_with_the_base_name(
        make_runner):
    runner, engines = make_runner(lora=False, mapping="per_role")
    runner.set_state(state(["writer"], 2))  # only the writer trained this iteration
    runner.sample(task_seeds=[7])
    assert ("full", 1) in engines["writer"].calls and ("full", 1) not in engines["reviewer"].calls
    for engine in engines.values():  # the unchanged reviewer's engine serves version 2 too
        assert ("finish", 2) in engine.calls and engine.weights_version == 2
        assert {call[1] for call in engine.calls if call[0] == "generate"} == {None}


def test_a_runner_whose_engine_lags_the_learner_refuses_to_sample(make_runner):
    runner, _ = make_runner(lora=True, stuck=True)
    runner.set_state(state(["reviewer", "writer"], 3))
    with pytest.raises(EngineWeightsLagError, match="serves weights version 0 .* version 3"):
        runner.sample(task_seeds=[7])


def test_an_older_state_than_the_served_one_is_ignored(make_runner):
    runner, engines = make_runner(lora=True)
    engine = engines["writer"]
    runner.set_state(state(["reviewer", "writer"], 4))
    engine.calls.clear()
    runner.set_state(state(["reviewer", "writer"], 2))
    assert engine.calls == [] and runner.weights_version == 4


def test_published_full_weights_are_loaded_from_disk_into_each_modules_engine(
        make_runner, tmp_path):
    from pettingllms_rllib.engines.weight_sync import publish_full_weights
    from pettingllms_rllib.models.loading import load_causal_lm

    runner, engines = make_runner(lora=False, mapping="per_role")
    model = load_causal_lm("tiny-random")
    folder = publish_full_weights(model, tmp_path, "writer", 5)
    assert runner.load_published_weights({"writer": folder}, 5) == 5
    assert ("full", len(model.state_dict())) in engines["writer"].calls
    assert all(engine.weights_version == 5 for engine in engines.values())
    assert runner.weights_version == 5


def test_held_out_evaluation_decodes_greedily_on_the_vllm_engine_and_training_samples(
        make_runner):
    runner, engines = make_runner(lora=True)
    engine = engines["writer"]
    runner.set_state(state(["reviewer", "writer"], 1))
    played = runner.evaluate([7])
    calls = [call for call in engine.calls if call[0] == "generate"]
    assert calls and all(call[-1] == "greedy" and call[3] == 1 for call in calls)
    assert len(played.episodes) == 1
    engine.calls.clear()
    runner.sample(task_seeds=[7])
    assert all(call[-1] != "greedy" for call in engine.calls if call[0] == "generate")
