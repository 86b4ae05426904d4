"""The vanilla-GRPO baseline: K independent trajectories per task, grouped by task only.

This is the multi-agent GRPO that AT-GRPO is compared against (arXiv 2510.11062, Sec. 3.1 and
Table 3, "trajectory-level grouping"): every task instance is played K times from its start,
each agent sampling ONE response per turn and continuing with it; every response of
trajectory k is then rewarded with its agent's return over the whole trajectory, and all
responses of the task's K trajectories form ONE group. Their prompts differ after the first
turn, which is exactly the flaw AT-GRPO's (task, agent, turn) grouping removes; this sampler
exists so that the comparison runs through the same algorithm, learner and metrics, differing
only in how candidates are produced and grouped (``ATGRPOConfig.rollout = "trajectories"``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

from pettingllms_rllib.core.records import GroupKey
from pettingllms_rllib.core.tree_sampler import GenerateFn, TreeSampler, TreeSampleResult
from pettingllms_rllib.envs.base import TextParallelEnv

#: The agent and turn of every trajectory-level group key: one group per task.
WHOLE_TASK_AGENT = "*"
WHOLE_TASK_TURN = -1


def trajectory_copy_name(task: str, index: int) -> str:
    return f"{task}#trajectory={index}"


class TrajectorySampler:
    """Samples K independent trajectories per task and groups their records by task."""

    def __init__(self, generate: GenerateFn, module_for_agent: Callable[[str], str], *,
                 num_trajectories: int, max_stages: int = 10_000):
        if int(num_trajectories) < 2:
            raise ValueError(f"num_trajectories (K) must be >= 2 for a group baseline, "
                             f"got {num_trajectories}")
        self.num_trajectories = int(num_trajectories)
        self._rollout = TreeSampler(generate, module_for_agent, num_branches=1,
                                    max_stages=max_stages)

    def run(self, roots: Mapping[str, TextParallelEnv], *,
            weights_version: int = 0) -> TreeSampleResult:
        """Play every root K times (each copy from the root's state) and regroup the records.

        The episodes returned are all K trajectories of every task (metrics average over them).
        """
        origin = {trajectory_copy_name(task, k): (task, k)
                  for task in roots for k in range(self.num_trajectories)}
        copies = {name: roots[task] for name, (task, _) in origin.items()}
        result = self._rollout.run(copies, weights_version=weights_version)
        return regroup_by_task(result, origin)


def regroup_by_task(result: TreeSampleResult,
                    origin: Mapping[str, tuple[str, int]]) -> TreeSampleResult:
    """Turn per-trajectory records into trajectory-level GRPO data (pure; no model, no env).

    ``origin`` maps each copy's name to its (task, trajectory index). Each record's reward
    becomes its agent's return over its trajectory, its group key ``(task, "*", -1)`` and its
    branch the trajectory's index, so one group holds every response of the task's K
    trajectories.
    """
    task_of_copy = {copy: task for copy, (task, _) in origin.items()}
    # A task with a failed copy loses its whole group: GRPO needs all K trajectories.
    dropped = sorted({task_of_copy[copy] for copy in result.dropped_tasks})
    returns = {episode.task: episode.agent_return for episode in result.episodes}
    records = []
    for record in result.records:
        copy = record.group_key.task
        task, index = origin[copy]
        if task in dropped:
            continue
        trajectory_return = float(returns[copy].get(record.agent, 0.0))
        records.append(dataclasses.replace(
            record, group_key=GroupKey(task, WHOLE_TASK_AGENT, WHOLE_TASK_TURN),
            branch=index, reward=trajectory_return))
    episodes = [dataclasses.replace(episode, task=task_of_copy[episode.task])
                for episode in result.episodes if task_of_copy[episode.task] not in dropped]
    return TreeSampleResult(records=records, episodes=episodes, dropped_tasks=dropped,
                            failed_groups=result.failed_groups, num_groups=result.num_groups,
                            num_play_on_tokens=result.num_play_on_tokens)
