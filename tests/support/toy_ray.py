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
