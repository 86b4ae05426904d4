"""The RLlib plugin: ``ATGRPOConfig``, ``ATGRPO``, ``ATGRPOTorchLearner``, ``LLMEnvRunner``."""

from pettingllms_rllib.algorithms.at_grpo import ATGRPO, WeightsLagError
from pettingllms_rllib.algorithms.config import ATGRPOConfig

__all__ = ["ATGRPO", "ATGRPOConfig", "WeightsLagError"]
