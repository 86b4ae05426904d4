"""RLlib-free maths and data types of AT-GRPO: records, grouped advantages, tree sampling, loss.

Nothing here imports Ray; only :mod:`pettingllms_rllib.core.loss` imports torch.
"""

from pettingllms_rllib.core.advantages import AdvantageConfig, AdvantageResult, group_advantages
from pettingllms_rllib.core.records import GroupKey, SampleRecord, prompt_fingerprint
from pettingllms_rllib.core.tree_sampler import EpisodeSummary, TreeSampler, TreeSampleResult

__all__ = [
    "AdvantageConfig", "AdvantageResult", "EpisodeSummary", "GroupKey", "SampleRecord",
    "TreeSampleResult", "TreeSampler", "group_advantages", "prompt_fingerprint",
]
