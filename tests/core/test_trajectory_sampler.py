"""Vanilla GRPO (K independent trajectories, one group per task) against AT-GRPO's
(task, agent, turn) groups, on the same tasks and the same scripted engine."""

from collections import Counter, defaultdict

import pytest

from pettingllms_rllib.core.advantages import AdvantageConfig, group_advantages
from pettingllms_rllib.core.trajectory_sampler import TrajectorySampler
from pettingllms_rllib.core.tree_sampler import TreeSampler
from pettingllms_rllib.engines.base import Completion
from toy_env import ToyCounterEnv


class CyclingEngine:
    """Sample i of a call answers ``values[(call + i) % len(values)]``: trajectories differ."""

    def __init__(self, values):
        self.values, self.calls = values, 0

    def __call__(self, module_id, prompts, num_samples):
        out = []
        for prompt in prompts:
            self.calls += 1
            out.append([Completion((len(prompt),), (1, 2), (-0.5, -0.5),
                                   str(self.values[(self.calls + i) % len(self.values)]), "stop")
                        for i in range(num_samples)])
        return out


def roots(n=2):
    envs = {}
    for seed in range(n):
        env = ToyCounterEnv(max_turns=3, target=50)
        env.reset(seed=seed)
        envs[f"task{seed}"] = env
    return envs


def test_vanilla_grpo_forms_one_group_per_task_spanning_agents_turns_and_trajectories():
    result = TrajectorySampler(CyclingEngine([1, 2, 3, 4]), lambda a: "m",
                               num_trajectories=3).run(roots())
    groups = defaultdict(list)
    for record in result.records:
        groups[record.group_key].append(record)
    assert set(groups) == {("task0", "*", -1, 0), ("task1", "*", -1, 0)}
    for records in groups.values():
        assert {r.agent for r in records} == {"adder", "checker"}  # agents kept on the record
        assert {r.branch for r in records} == {0, 1, 2}             # the 3 trajectories
        assert len({r.prompt_fingerprint for r in records}) > 1     # prompts differ in a group
    # Every response is rewarded with its agent's return over its own trajectory.
    returns = defaultdict(list)
    for episode in result.episodes:
        returns[episode.task].append(episode.agent_return)
    assert Counter(e.task for e in result.episodes) == {"task0": 3, "task1": 3}
    for record in result.records:
        assert record.reward == returns[record.group_key.task][record.branch][record.agent]


def test_at_grpo_forms_task_agent_turn_groups_of_k_identical_prompts_on_the_same_tasks():
    result = TreeSampler(CyclingEngine([1, 2, 3, 4]), lambda a: "m", num_branches=3).run(roots())
    groups = defaultdict(list)
    for record in result.records:
        groups[record.group_key].append(record)
    assert all(key.agent in ("adder", "checker") and key.turn >= 0 for key in groups)
    for records in groups.values():
        assert len(records) == 3 and len({r.prompt_fingerprint for r in records}) == 1


def test_trajectory_groups_normalise_advantages_across_the_whole_task():
    result = TrajectorySampler(CyclingEngine([1, 2, 3, 4]), lambda a: "m",
                               num_trajectories=4).run(roots(1))
    rewards = [r.reward for r in result.records]
    advantages = group_advantages(rewards, [r.group_key for r in result.records],
                                  [r.agent for r in result.records], AdvantageConfig())
    assert advantages.num_groups == 1
    assert abs(float(sum(advantages.advantages))) < 1e-6  # centred over the single task group


def test_fewer_than_two_trajectories_are_refused():
    with pytest.raises(ValueError, match="num_trajectories"):
        TrajectorySampler(CyclingEngine([1]), lambda a: "m", num_trajectories=1)
