"""Grouped GRPO advantages for AT-GRPO.

GRPO's baseline is the mean reward of K answers to the *same prompt*. In a multi-agent,
multi-turn episode every (task, agent, turn) has its own prompt, so AT-GRPO groups candidates
by that triple (arXiv 2510.11062, Sec. 3.2, Eq. 2):

    A_k = (r_k - mean_g(r)) / (std_g(r) + eps)     (unbiased std over the group g)

A singleton group or a group whose rewards are all equal carries no comparison signal and gets
A = 0; the fraction of such groups is reported every iteration because it is the first thing to
look at when learning stalls.

Variants (all pure functions of the rewards and keys):

* ``normalization="std"`` (default): the formula above.
* ``normalization="mean"`` (Dr. GRPO, arXiv 2503.20783): ``A = r - mean_g``, no std division,
  which removes the per-group difficulty bias of the std.
* ``scale_scope="agent"`` (Dr. MAS-style per-agent normalisation): the group mean is still
  the baseline, but the scale is the std of *all* of that agent's rewards in the batch, so
  agents with very different reward scales get comparably sized updates without amplifying
  tiny within-group differences.
* ``drop_zero_variance=True`` (DAPO, arXiv 2503.14476): records of zero-variance groups are
  dropped from the batch instead of being trained on with A = 0 (they would only add tokens
  to the token-mean denominator).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Hashable, Sequence

import numpy as np

NORMALIZATIONS = ("std", "mean")
SCALE_SCOPES = ("group", "agent")


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
    """How group rewards become advantages (see the module docstring).

    Attributes:
        normalization: "std" divides by the group's (or agent's) std; "mean" only centres.
        scale_scope: "group" uses the group's std; "agent" uses the agent's std over the batch.
        drop_zero_variance: drop zero-variance and singleton groups from training (DAPO).
        eps: added to the std to avoid division by ~0.
    """

    normalization: str = "std"
    scale_scope: str = "group"
    drop_zero_variance: bool = False
    eps: float = 1e-6

    def __post_init__(self):
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization={self.normalization!r}; accepted: {NORMALIZATIONS}")
        if self.scale_scope not in SCALE_SCOPES:
            raise ValueError(f"scale_scope={self.scale_scope!r}; accepted: {SCALE_SCOPES}")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")


@dataclasses.dataclass(frozen=True)
class AdvantageResult:
    """Per-record advantages, which records to train on, and group statistics."""

    advantages: np.ndarray
    keep: np.ndarray
    num_groups: int
    num_zero_variance_groups: int

    @property
    def zero_variance_fraction(self) -> float:
        return self.num_zero_variance_groups / self.num_groups if self.num_groups else 0.0


def _unbiased_std(values: np.ndarray) -> float:
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def group_advantages(rewards: Sequence[float], group_keys: Sequence[Hashable],
                     agents: Sequence[Hashable] | None = None,
                     config: AdvantageConfig = AdvantageConfig()) -> AdvantageResult:
    """Compute grouped advantages for parallel lists of rewards and group keys.

    ``agents`` is required only for ``scale_scope="agent"``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if len(rewards) != len(group_keys):
        raise ValueError(f"{len(rewards)} rewards but {len(group_keys)} group keys")
    if config.scale_scope == "agent" and (agents is None or len(agents) != len(rewards)):
        raise ValueError("scale_scope='agent' needs one agent id per reward")

    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(group_keys):
        members[key].append(index)

    agent_std: dict[Hashable, float] = {}
    if config.scale_scope == "agent":
        by_agent: dict[Hashable, list[int]] = defaultdict(list)
        for index, agent in enumerate(agents):
            by_agent[agent].append(index)
        agent_std = {a: _unbiased_std(rewards[idx]) for a, idx in by_agent.items()}

    advantages = np.zeros_like(rewards)
    keep = np.ones(len(rewards), dtype=bool)
    zero_variance = 0
    for key, idx in members.items():
        group = rewards[idx]
        if len(idx) < 2 or _unbiased_std(group) == 0.0:
            zero_variance += 1
            if config.drop_zero_variance:
                keep[idx] = False
            continue  # advantages stay 0: no comparison signal
        centred = group - group.mean()
        if config.normalization == "mean":
            advantages[idx] = centred
        elif config.scale_scope == "agent":
            advantages[idx] = centred / (agent_std[agents[idx[0]]] + config.eps)
        else:
            advantages[idx] = centred / (_unbiased_std(group) + config.eps)
    return AdvantageResult(advantages=advantages, keep=keep, num_groups=len(members),
                           num_zero_variance_groups=zero_variance)


def mean_group_reward_std(rewards: Sequence[float], group_keys: Sequence[Hashable]) -> float:
    """Mean over groups of the rewards' population std within the group (NaN with no groups).

    The comparison signal before normalisation: after it every non-degenerate group has the
    same advantage spread (sqrt((K-1)/K) of unit sample std), so the advantage std says only
    how many groups were kept; this says how different the K candidates' rewards were.
    """
    if len(rewards) != len(group_keys):
        raise ValueError(f"{len(rewards)} rewards for {len(group_keys)} group keys")
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for reward, key in zip(rewards, group_keys):
        groups[key].append(float(reward))
    if not groups:
        return float("nan")
    return float(np.mean([np.std(values) for values in groups.values()]))
