"""AT-GRPO tree sampling over any env that honours the text-env protocol.

At every stage of every turn, each acting agent answers the *same* observation K times (one
engine call with n=K); each candidate is stepped on its **own clone** of the env and scored from
that clone; all K candidates become training records in the group (task, agent, turn); the
episode continues from the best candidate (greedy, ties to the lowest k). This follows
arXiv 2510.11062, Sec. 3.2 / Alg. 1 (not the released code, which aliases env copies across
branches and merges problems into one group).

Parallel stages (several agents acting at once, e.g. coder || tester) need a choice the paper
leaves open: while agent i's K candidates are scored, the other acting agents are held at their
candidate 0 (a fixed reference answer, so i's candidates are compared under identical
conditions); the continuation is a fresh clone stepped with every agent's best candidate.
For sequential stages the continuation *is* the chosen clone.

Tasks are stepped in lockstep so that each stage issues one batched engine call per module
over every live task's prompts: that is where generation throughput comes from on any engine.

Stage credit (``stage_credit="turn"``; beyond the paper, whose immediate reward is the
default): a candidate of a stage that is not the last of its turn (the tool before the
planner, the describer before the guesser) is scored before the team outcome is known, so
its group carries only what its own stage pays. With turn credit, each such candidate's clone
plays the rest of the turn with one sampled answer per acting agent (K = 1; one batched engine
call per module and stage over every candidate of every task), and the candidate's reward
gains ``alpha * team`` of the stage that ends the turn. The best credited candidate then
continues, from its own state after its stage: the continuation only scores it. Cost: one
extra answer per candidate for every later stage of the turn.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from typing import Callable, Mapping, Sequence

import numpy as np

from pettingllms_rllib.core.records import GroupKey, SampleRecord
from pettingllms_rllib.engines.base import Completion
from pettingllms_rllib.envs.base import TextParallelEnv

#: ``generate(module_id, prompts, num_samples) -> [[Completion] * num_samples] * len(prompts)``
GenerateFn = Callable[[str, Sequence[str], int], list[list[Completion]]]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class EpisodeSummary:
    """The greedy path of one task instance (what a deployed team would have done)."""

    task: str
    success: bool = False
    num_turns: int = 0
    num_stages: int = 0
    agent_return: dict[str, float] = dataclasses.field(default_factory=dict)
    agent_reward_team: dict[str, float] = dataclasses.field(default_factory=dict)
    agent_reward_local: dict[str, float] = dataclasses.field(default_factory=dict)
    parse_errors: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Actions each agent took on the greedy path (the denominator of its parse-error rate).
    agent_actions: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TreeSampleResult:
    records: list[SampleRecord]
    episodes: list[EpisodeSummary]
    #: Tasks whose env raised (an env or sandbox bug): dropped with all their records.
    dropped_tasks: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Live:
    task: str
    env: TextParallelEnv
    observations: Mapping[str, str]
    summary: EpisodeSummary


@dataclasses.dataclass
class _Branch:
    """One candidate of one acting agent, stepped on its own clone."""

    agent: str
    env: TextParallelEnv
    reward: Mapping[str, float]
    info: Mapping[str, dict]
    record: SampleRecord


#: How a candidate of an earlier stage of a turn is rewarded (module docstring).
STAGE_CREDITS = ("none", "turn")


class TreeSampler:
    """Runs AT-GRPO tree rollouts for a batch of task instances.

    Args:
        generate: batched generation callback (see :data:`GenerateFn`).
        module_for_agent: the policy mapping, agent id -> module id.
        num_branches: K, candidates per (task, agent, turn). Training needs K >= 2 (a group
            baseline; ``ATGRPOConfig`` checks it); K = 1 is a plain rollout (evaluation without
            test-time search).
        max_stages: safety cap on stages per episode (the env's own turn budget normally ends
            it); a task still running after it is dropped with a warning, since its env
            never terminates (``check_text_env`` catches such an env before training).
        stage_credit: "none" (the paper: each candidate's reward is its own stage's) or
            "turn" (candidates of earlier stages also get ``alpha * team`` of the turn's end,
            module docstring).
    """

    def __init__(self, generate: GenerateFn, module_for_agent: Callable[[str], str], *,
                 num_branches: int, max_stages: int = 10_000, stage_credit: str = "none"):
        if int(num_branches) < 1:
            raise ValueError(f"num_branches (K) must be >= 1, got {num_branches}")
        if stage_credit not in STAGE_CREDITS:
            raise ValueError(f"stage_credit={stage_credit!r}; accepted: {STAGE_CREDITS}")
        self.generate = generate
        self.module_for_agent = module_for_agent
        self.num_branches = int(num_branches)
        self.max_stages = max_stages
        self.stage_credit = stage_credit

    def run(self, roots: Mapping[str, TextParallelEnv], *,
            weights_version: int = 0) -> TreeSampleResult:
        """Sample trees from ``roots`` (task id -> env already ``reset`` to its instance).

        The root envs are not modified; every step happens on clones.
        """
        live = []
        for task, env in roots.items():
            if not env.agents:
                raise ValueError(f"task {task!r}: env is not reset (no live agents)")
            state = env.clone()
            live.append(_Live(task, state, state.current_observations(), EpisodeSummary(task=task)))
        records: list[SampleRecord] = []
        summaries = [item.summary for item in live]
        dropped: list[str] = []
        for _ in range(self.max_stages):
            if not live:
                break
            candidates = self._generate_candidates(live)
            branched: list[tuple[_Live, dict[str, list[_Branch]]]] = []
            for item in live:
                try:
                    branched.append((item, self._branch(item, candidates[item.task], records,
                                                        weights_version)))
                except Exception as exc:  # one task's env bug must not end the iteration
                    self._drop(item, exc, dropped)
            if self.stage_credit == "turn":
                self._credit_turn_ends(branched, dropped)
            for item, branches in branched:
                if item.task in dropped:
                    continue
                try:
                    self._continue(item, branches)
                except Exception as exc:
                    self._drop(item, exc, dropped)
            live = [item for item in live if item.task not in dropped and item.env.agents]
        for item in live:  # the cap was hit: an env that never ends its episode
            logger.warning("task %s: its episode was still running after %d stages (does the "
                           "env ever terminate or truncate?); the task is dropped from this "
                           "iteration", item.task, self.max_stages)
            dropped.append(item.task)
        if dropped:
            records = [r for r in records if r.group_key.task not in dropped]
            summaries = [s for s in summaries if s.task not in dropped]
        return TreeSampleResult(records=records, episodes=summaries, dropped_tasks=dropped)

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _drop(item: _Live, exc: Exception, dropped: list[str]) -> None:
        """One task's env bug must not end the iteration: the task is dropped from it."""
        logger.warning("task %s: its env raised %s: %s; the task is dropped from this "
                       "iteration", item.task, type(exc).__name__, exc, exc_info=True)
        if item.task not in dropped:
            dropped.append(item.task)

    def _generate_candidates(
            self, live: Sequence[_Live]) -> dict[str, dict[str, list[Completion]]]:
        """One engine call per module over all live tasks' acting agents."""
        by_module: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for item in live:
            for agent in item.env.acting_agents():
                module = self.module_for_agent(agent)
                by_module[module].append((item.task, agent, item.observations[agent]))
        candidates: dict[str, dict[str, list[Completion]]] = defaultdict(dict)
        for module, requests in by_module.items():
            outputs = self.generate(module, [prompt for _, _, prompt in requests],
                                    self.num_branches)
            if len(outputs) != len(requests):
                raise RuntimeError(f"engine returned {len(outputs)} results for "
                                   f"{len(requests)} prompts (module {module!r})")
            for (task, agent, _), completions in zip(requests, outputs):
                if len(completions) != self.num_branches:
                    raise RuntimeError(f"engine returned {len(completions)} samples, "
                                       f"expected K={self.num_branches}")
                candidates[task][agent] = list(completions)
        return candidates

    def _branch(self, item: _Live, candidates: Mapping[str, list[Completion]],
                records: list[SampleRecord], weights_version: int) -> dict[str, list[_Branch]]:
        """Step every acting agent's K candidates on their own clones of ``item.env`` and
        record them all (agent -> its K branches)."""
        state = item.env
        stage = state.acting_agents()
        turn, stage_index = state.turn, state.stage_index
        reference = {agent: candidates[agent][0].text for agent in stage}
        branches: dict[str, list[_Branch]] = {}
        for agent in stage:
            branches[agent] = []
            for branch, completion in enumerate(candidates[agent]):
                branch_env = state.clone()
                _, reward, _, _, info = branch_env.step({**reference, agent: completion.text})
                record = SampleRecord(
                    group_key=GroupKey(item.task, agent, turn, stage_index),
                    module_id=self.module_for_agent(agent), branch=branch,
                    prompt_text=item.observations[agent],
                    prompt_ids=tuple(completion.prompt_ids),
                    response_ids=tuple(completion.response_ids),
                    behaviour_logprobs=tuple(completion.logprobs),
                    response_text=completion.text, reward=float(reward[agent]),
                    reward_team=float(info[agent]["reward_team"]),
                    reward_local=float(info[agent]["reward_local"]),
                    success=bool(info[agent]["success"]), parse_error=info[agent]["parse_error"],
                    weights_version=weights_version, finish_reason=completion.finish_reason)
                records.append(record)
                branches[agent].append(_Branch(agent, branch_env, reward, info, record))
        return branches

    def _continue(self, item: _Live, branches: Mapping[str, list[_Branch]]) -> None:
        """Mark each agent's best candidate (by its record's reward, ties to the lowest k) and
        continue the episode from it."""
        stage = tuple(branches)
        best = {agent: int(np.argmax([b.record.reward for b in branches[agent]]))
                for agent in stage}
        for agent in stage:
            branches[agent][best[agent]].record.selected = True
        if len(stage) == 1:
            chosen = branches[stage[0]][best[stage[0]]]  # the chosen clone continues
            next_env, reward, info = chosen.env, chosen.reward, chosen.info
        else:
            next_env = item.env.clone()
            _, reward, _, _, info = next_env.step(
                {agent: branches[agent][best[agent]].record.response_text for agent in stage})
        self._account(item.summary, stage, reward, info, next_env)
        item.env = next_env
        item.observations = next_env.current_observations() if next_env.agents else {}

    def _credit_turn_ends(self, branched: Sequence[tuple[_Live, dict[str, list[_Branch]]]],
                          dropped: list[str]) -> None:
        """``stage_credit="turn"``: play the rest of the turn from a clone of every candidate
        whose stage did not end it (one sampled answer per acting agent, batched over all
        candidates of all tasks), then add ``alpha * team`` of the turn's last stage to the
        candidate's reward."""
        open_ends: list[tuple[str, TextParallelEnv, SampleRecord]] = []
        for item, branches in branched:
            for candidates in branches.values():
                for branch in candidates:
                    if branch.env.agents and branch.env.stage_index != 0:
                        open_ends.append((item.task, branch.env.clone(), branch.record))
        while open_ends:
            by_module: dict[str, list[tuple[int, str]]] = defaultdict(list)
            for index, (_, env, _) in enumerate(open_ends):
                for agent in env.acting_agents():
                    by_module[self.module_for_agent(agent)].append((index, agent))
            answers: dict[int, dict[str, str]] = defaultdict(dict)
            for module, requests in by_module.items():
                prompts = [open_ends[i][1].current_observations()[agent] for i, agent in requests]
                for (index, agent), completions in zip(requests,
                                                       self.generate(module, prompts, 1)):
                    answers[index][agent] = completions[0].text
            still_open = []
            for index, (task, env, record) in enumerate(open_ends):
                if task in dropped:
                    continue
                try:
                    _, _, _, _, info = env.step(answers[index])
                except Exception as exc:
                    logger.warning("task %s: its env raised %s while crediting a turn: %s; "
                                   "the task is dropped from this iteration", task,
                                   type(exc).__name__, exc, exc_info=True)
                    dropped.append(task)
                    continue
                if env.agents and env.stage_index != 0:
                    still_open.append((task, env, record))
                else:  # the turn is over: the team reward its last stage paid
                    team = max(float(info[agent]["reward_team"]) for agent in answers[index])
                    record.reward_credit = float(env.alpha) * team
                    record.reward += record.reward_credit
            open_ends = still_open

    @staticmethod
    def _account(summary: EpisodeSummary, stage: Sequence[str], reward: Mapping[str, float],
                 info: Mapping[str, dict], env: TextParallelEnv) -> None:
        """Add one stage to the episode's summary: the env's own mixed reward and its parts
        (the mixing ``alpha * team + local`` is the env's, never recomputed here)."""
        summary.num_stages += 1
        summary.num_turns = env.turn + (1 if env.stage_index else 0)
        for agent in stage:
            agent_info = info[agent]
            team, local = float(agent_info["reward_team"]), float(agent_info["reward_local"])
            summary.agent_reward_team[agent] = summary.agent_reward_team.get(agent, 0.0) + team
            summary.agent_reward_local[agent] = summary.agent_reward_local.get(agent, 0.0) + local
            summary.agent_return[agent] = (summary.agent_return.get(agent, 0.0)
                                           + float(reward[agent]))
            summary.parse_errors[agent] = (summary.parse_errors.get(agent, 0)
                                           + int(agent_info["parse_error"] is not None))
            summary.agent_actions[agent] = summary.agent_actions.get(agent, 0) + 1
            summary.success = bool(agent_info["success"])
