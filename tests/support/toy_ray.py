"""What the Ray integration tests share: the toy env's agents, a tiny llama, a Ray session."""

from pathlib import Path

AGENTS = ["writer", "reviewer"]
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1}
#: The ``algorithm.llm`` and ``algorithm.training`` sections of an experiment YAML that trains
#: the smallest model for a CLI test: a one-layer tiny llama, 4 new tokens, K = 2, one task per
#: iteration, every group trained (indented for a YAML ``algorithm:`` block).
TINY_RUN_SECTIONS = """
  llm:
    model: tiny-random
    tiny_model_config: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                        num_attention_heads: 2, num_key_value_heads: 1}
    max_new_tokens: 4
  training: {num_branches: 2, num_tasks_per_iteration: 1, drop_zero_variance_groups: false}
"""


def toy_ray_session(num_cpus: int = 2):
    """Generator for a module-scoped fixture: Ray with ``toy_score_v0`` registered here and
    importable by every Ray worker (this folder on their PYTHONPATH)."""
    import ray

    from pettingllms_rllib.envs import register_text_env
    from toy_env import ToyScoreEnv

    register_text_env("toy_score_v0", ToyScoreEnv)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}})
    yield
    ray.shutdown()


def per_role_lora_checkpoint(folder, *, tiny_model_config, env_config, **llm) -> str:
    """One iteration of per-role LoRA on ``toy_score_v0`` in a Ray session of its own, saved to
    ``folder``; the reviewer's adapter is then pushed far from the writer's (random LoRA B), so
    the two agents' answers differ when the checkpoint is served."""
    import ray
    import torch

    from pettingllms_rllib.algorithms import ATGRPOConfig
    from pettingllms_rllib.envs import register_text_env
    from pettingllms_rllib.experiment import multi_agent_kwargs
    from toy_env import ToyScoreEnv

    register_text_env("toy_score_v0", ToyScoreEnv)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        algo = (ATGRPOConfig()
                .environment("toy_score_v0", env_config=env_config)
                .llm(model="tiny-random", tiny_model_config=tiny_model_config,
                     max_new_tokens=6, lora={"r": 4, "lora_alpha": 8}, **llm)
                .training(num_branches=2, num_tasks_per_iteration=2, lr=1e-2)
                .multi_agent(**multi_agent_kwargs("per_role", AGENTS))
                .debugging(seed=0)).build_algo()
        try:
            algo.train()
            reviewer = algo.learner_group._learner.module["reviewer"]
            generator = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for name, parameter in reviewer.named_parameters():
                    if "lora_B" in name:
                        parameter.copy_(torch.randn(parameter.shape, generator=generator))
            return algo.save_to_path(str(folder))
        finally:
            algo.stop()
    finally:
        ray.shutdown()


def runner_holds(runner_value, learner_value) -> bool:
    """Whether an env runner's copy of a weight is the learner's: equal once cast to the
    runner's dtype. Runner copies hold LoRA adapters in the base's dtype (bf16 under
    ``model_dtype: auto`` on a CPU with AMX or AVX512-BF16; ``models/rl_modules.py``), the
    learner fp32 ones, so an fp32 machine compares them exactly."""
    import torch

    runner_value, learner_value = torch.as_tensor(runner_value), torch.as_tensor(learner_value)
    return torch.equal(runner_value, learner_value.to(runner_value.dtype))
