"""The smallest valid experiment YAML (one iteration of a tiny model on a 3x3 Plan-Path), for
the tests of experiment loading and of the refusals before Ray."""

GOOD = """
name: tiny
mapping: per_role
stop: {training_iteration: 1}
algorithm:
  environment: {env: plan_path_v1, env_config: {grid_size: 3, max_turns: 1}}
  llm: {model: tiny-random, max_new_tokens: 4}
  training: {num_branches: 2, num_tasks_per_iteration: 1}
"""
