"""Importing this registers the toy envs: for a process that finds a run's env through
``--import`` (``pettingllms-rllib serve``), as a user's own env module would."""

from pettingllms_rllib.envs import register_text_env
from toy_env import ToyScoreEnv

register_text_env("toy_score_v0", ToyScoreEnv, with_ray=False)
