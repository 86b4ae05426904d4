"""pettingllms-rllib: AT-GRPO (agent- and turn-wise grouped GRPO) as a Ray RLlib algorithm.

Heavy imports (Ray, torch) are deferred: ``from pettingllms_rllib import ATGRPOConfig`` pulls
in RLlib, while ``pettingllms_rllib.core`` and ``pettingllms_rllib.envs`` stay light.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("ATGRPO", "ATGRPOConfig"):
        from pettingllms_rllib import algorithms

        return getattr(algorithms, name)
    raise AttributeError(f"module 'pettingllms_rllib' has no attribute {name!r}")
