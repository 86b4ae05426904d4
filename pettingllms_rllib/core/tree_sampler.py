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

The reward contract (docs/custom_env.md, "The reward contract"): a reward an env pays to an
agent that did not act on that step belongs to that agent's most recent action, as PettingZoo's
AEC API accumulates an agent's rewards until it next acts. Such a reward arrives after the
action's K candidates were scored, so every candidate earns its own: each candidate's clone is
*played on* (one sampled answer per acting agent, batched over every candidate of every task)
until its agent acts again or the episode ends, and what the env pays the agent meanwhile is
the candidate's ``reward_credit``. Crediting the continued candidate alone would make the
group compare one played-on answer with K - 1 that were not, biasing it toward the greedy
choice. An env that never pays idle agents (``pays_idle_agents = False``, as
:class:`~pettingllms_rllib.envs.base.TextParallelEnv`) needs no play-on for that. With K = 1
(trajectories, evaluation) there is one candidate: the reward goes to the agent's last record.

Stage credit (``stage_credit``; beyond the paper, whose immediate reward is the default): a
candidate of a stage that is not the last of its turn (the tool before the planner, the
describer before the guesser) is scored before the team outcome is known. With stage credit,
each such candidate is played on to the end of its turn, and its team part there is the team
reward of the stage that ends the turn (``alpha * team``, in place of whatever team part the
env paid it on that step, so nothing is counted twice). The best credited candidate then
continues, from its own state after its stage: the play-on only scores it. Cost: one extra
answer per candidate for every later stage of the turn. ``"auto"`` (the default) is stage
credit wherever a stage does not end its turn, which costs nothing where agents act in
parallel; ``"turn"`` is the same but warns when it never applies.

Failures: an env step or clone that raises for one candidate (an env bug, a sandbox that
died) is replayed once from the stored state; if it fails again the candidate's whole group is
dropped (a zero-filled member would bias every other candidate's advantage) and counted per
agent in ``failed_groups``. When more than ``max_failed_group_share`` of a run's groups fail,
the run stops with the env's traceback (:class:`RolloutError`). A violated env contract
(:class:`~pettingllms_rllib.envs.base.EnvContractError`: a NaN reward, a reward for an unknown
agent) is never retried: it stops the run at once.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections import Counter, defaultdict
from typing import Callable, Mapping, Sequence

from pettingllms_rllib.core.records import GroupKey, SampleRecord
from pettingllms_rllib.engines.base import Completion
from pettingllms_rllib.envs.base import (INFO_PARSE_ERROR, INFO_REWARD_LOCAL, INFO_REWARD_TEAM,
                                         INFO_SUCCESS, EnvContractError, TextParallelEnv,
                                         mixed_reward)

#: ``generate(module_id, prompts, num_samples) -> [[Completion] * num_samples] * len(prompts)``
GenerateFn = Callable[[str, Sequence[str], int], list[list[Completion]]]

logger = logging.getLogger(__name__)

#: How a candidate of an earlier stage of a turn is rewarded (module docstring).
STAGE_CREDITS = ("auto", "none", "turn")
#: The share of a run's (task, agent, turn) groups that may fail (dropped after one replay)
#: before the run stops with the env's traceback.
MAX_FAILED_GROUP_SHARE = 0.5
_warned_uncredited = False


class RolloutError(RuntimeError):
    """More groups failed in one run than ``max_failed_group_share`` allows; the message
    holds the last failure's traceback."""


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
    #: Tasks whose episode could not be finished (its continuation failed twice, or it never
    #: ended): their episodes are left out; the records of their complete groups are kept,
    #: except for an episode that never ended, whose records all go.
    dropped_tasks: list[str] = dataclasses.field(default_factory=list)
    #: Agent -> groups dropped because a candidate's env failed twice (module docstring).
    failed_groups: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Groups sampled, failed ones included (the denominator of the failure share).
    num_groups: int = 0
    #: Tokens generated to play candidates on (stage credit, rewards paid to idle agents):
    #: generation the records do not hold.
    num_play_on_tokens: int = 0


@dataclasses.dataclass
class _Live:
    task: str
    env: TextParallelEnv
    observations: Mapping[str, str]
    summary: EpisodeSummary
    #: Each agent's record on the greedy path (K = 1: where an idle agent's reward goes).
    last_record: dict[str, SampleRecord] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Branch:
    """One candidate of one acting agent, stepped on its own clone (``env`` None: failed)."""

    agent: str
    env: TextParallelEnv | None
    reward: Mapping[str, float]
    info: Mapping[str, dict]
    record: SampleRecord


@dataclasses.dataclass
class _Stage:
    """One task's stage: every acting agent's K branches and the agents whose group failed."""

    item: _Live
    branches: dict[str, list[_Branch]]
    failed: set[str]


@dataclasses.dataclass
class _PlayOn:
    """A candidate's clone played on to collect what it earns after its own step."""

    stage: _Stage
    branch: _Branch
    env: TextParallelEnv
    turn_open: bool
    actions: list[dict[str, str]] = dataclasses.field(default_factory=list)


def _pays_idle_agents(env) -> bool:
    return bool(getattr(env, "pays_idle_agents", True))


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
        stage_credit: "none" (the paper's immediate reward; the default here: evaluation and
            serving search without it), "auto" or "turn" (module docstring; training takes
            ATGRPOConfig's, "auto" by default).
        max_failed_group_share: the share of groups that may fail before the run stops.
    """

    def __init__(self, generate: GenerateFn, module_for_agent: Callable[[str], str], *,
                 num_branches: int, max_stages: int = 10_000, stage_credit: str = "none",
                 max_failed_group_share: float = MAX_FAILED_GROUP_SHARE):
        if int(num_branches) < 1:
            raise ValueError(f"num_branches (K) must be >= 1, got {num_branches}")
        if stage_credit not in STAGE_CREDITS:
            raise ValueError(f"stage_credit={stage_credit!r}; accepted: {STAGE_CREDITS}")
        self.generate = generate
        self.module_for_agent = module_for_agent
        self.num_branches = int(num_branches)
        self.max_stages = max_stages
        self.stage_credit = stage_credit
        self.max_failed_group_share = float(max_failed_group_share)

    @property
    def _credits_turns(self) -> bool:
        return self.stage_credit != "none" and self.num_branches > 1

    def run(self, roots: Mapping[str, TextParallelEnv], *,
            weights_version: int = 0) -> TreeSampleResult:
        """Sample trees from ``roots`` (task id -> env already ``reset`` to its instance).

        The root envs are not modified; every step happens on clones.
        """
        live = []
        for task, env in roots.items():
            if not env.agents:
                raise ValueError(f"task {task!r}: env is not reset (no live agents)")
            try:
                state = env.clone()
            except Exception as exc:
                raise EnvContractError(
                    f"task {task!r}: {type(env).__name__}.clone() raised {type(exc).__name__}: "
                    f"{exc}; tree sampling scores each candidate on its own clone, so define "
                    "clone() (an independent copy in the same state, RNG included)") from exc
            live.append(_Live(task, state, state.current_observations(), EpisodeSummary(task=task)))
        records: list[SampleRecord] = []
        summaries = [item.summary for item in live]
        ended: list[str] = []
        self._failures: Counter = Counter()
        self._last_failure: BaseException | None = None
        self._saw_open_turn = False
        self._play_on_tokens = 0
        num_groups = 0
        for _ in range(self.max_stages):
            if not live:
                break
            candidates = self._generate_candidates(live)
            stages = [self._branch(item, candidates[item.task], weights_version) for item in live]
            num_groups += sum(len(stage.branches) for stage in stages)
            if self.num_branches > 1:
                self._play_on(stages)
            for stage in stages:
                records.extend(branch.record for agent, branches in stage.branches.items()
                               if agent not in stage.failed for branch in branches)
                try:
                    self._continue(stage)
                except EnvContractError:
                    raise
                except Exception as exc:
                    self._end(stage.item, exc, ended)
            live = [item for item in live if item.task not in ended and item.env.agents]
        never_ended = [item.task for item in live]
        for task in never_ended:
            logger.warning("task %s: its episode was still running after %d stages (does the "
                           "env ever terminate or truncate?); the task is dropped from this "
                           "iteration", task, self.max_stages)
        records = [r for r in records if r.group_key.task not in never_ended]
        dropped = ended + never_ended
        summaries = [s for s in summaries if s.task not in dropped]
        self._check_failure_share(num_groups)
        self._warn_if_nothing_credited()
        return TreeSampleResult(records=records, episodes=summaries, dropped_tasks=dropped,
                                failed_groups=dict(self._failures), num_groups=num_groups,
                                num_play_on_tokens=self._play_on_tokens)

    # ------------------------------------------------------------------ failures
    def _step_clone(self, state: TextParallelEnv, actions: Mapping[str, str], where: str):
        """Step a fresh clone of ``state``; a failure is replayed once on another clone."""
        for attempt in (1, 2):
            try:
                env = state.clone()
                _, reward, _, _, info = env.step(dict(actions))
                return env, reward, info
            except EnvContractError:
                raise
            except Exception as exc:
                if attempt == 2:
                    raise
                logger.warning("%s: the env raised %s: %s; replaying once from the stored "
                               "state", where, type(exc).__name__, exc)

    def _fail_group(self, stage: _Stage, agent: str, exc: BaseException) -> None:
        if agent in stage.failed:
            return
        logger.warning("task %s: %s's group is dropped: its env failed twice (%s: %s)",
                       stage.item.task, agent, type(exc).__name__, exc, exc_info=exc)
        stage.failed.add(agent)
        self._failures[agent] += 1
        self._last_failure = exc

    def _end(self, item: _Live, exc: BaseException, ended: list[str]) -> None:
        """The task's episode cannot go on: its summary is left out, its groups so far kept."""
        logger.warning("task %s: its episode cannot continue (%s: %s); its complete groups are "
                       "kept, its episode is left out of this iteration's metrics",
                       item.task, type(exc).__name__, exc, exc_info=exc)
        self._last_failure = self._last_failure or exc
        if item.task not in ended:
            ended.append(item.task)

    def _check_failure_share(self, num_groups: int) -> None:
        failed = sum(self._failures.values())
        if num_groups and failed / num_groups > self.max_failed_group_share:
            trace = "".join(traceback.format_exception(self._last_failure))
            raise RolloutError(
                f"{failed} of {num_groups} groups failed this iteration (more than "
                f"max_failed_group_share={self.max_failed_group_share}; per agent: "
                f"{dict(self._failures)}): the env or its sandbox is broken. The last "
                f"failure:\n{trace}") from self._last_failure

    def _warn_if_nothing_credited(self) -> None:
        global _warned_uncredited
        if (self.stage_credit == "turn" and self.num_branches > 1 and not self._saw_open_turn
                and not _warned_uncredited):
            _warned_uncredited = True
            logger.warning(
                "stage_credit='turn' credited nothing: every stage of this env ended its "
                "turn (its agents act in parallel, or it does not say who acts). An env whose "
                "roles act one after another must report infos[agent]['acting'] (who acts "
                "next); the wrapper then infers turns and stages (docs/custom_env.md)")

    # ------------------------------------------------------------------ internals
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
                weights_version: int) -> _Stage:
        """Step every acting agent's K candidates on their own clones of ``item.env`` and
        record them all (agent -> its K branches)."""
        state = item.env
        acting = state.acting_agents()
        turn, stage_index = state.turn, state.stage_index
        reference = {agent: candidates[agent][0].text for agent in acting}
        stage = _Stage(item, {}, set())
        for agent in acting:
            stage.branches[agent] = []
            for branch, completion in enumerate(candidates[agent]):
                where = f"task {item.task}, {agent}'s candidate {branch} (turn {turn})"
                record = SampleRecord(
                    group_key=GroupKey(item.task, agent, turn, stage_index),
                    module_id=self.module_for_agent(agent), branch=branch,
                    prompt_text=item.observations[agent],
                    prompt_ids=tuple(completion.prompt_ids),
                    response_ids=tuple(completion.response_ids),
                    behaviour_logprobs=tuple(completion.logprobs),
                    response_text=completion.text, reward=0.0, reward_team=0.0,
                    reward_local=0.0, success=False, parse_error=None,
                    weights_version=weights_version, finish_reason=completion.finish_reason)
                try:
                    env, reward, info = self._step_clone(
                        state, {**reference, agent: completion.text}, where)
                except EnvContractError:
                    raise
                except Exception as exc:
                    self._fail_group(stage, agent, exc)
                    stage.branches[agent].append(_Branch(agent, None, {}, {}, record))
                    continue
                record.reward = float(reward[agent])
                record.reward_team = float(info[agent][INFO_REWARD_TEAM])
                record.reward_local = float(info[agent][INFO_REWARD_LOCAL])
                record.success = bool(info[agent][INFO_SUCCESS])
                record.parse_error = info[agent][INFO_PARSE_ERROR]
                stage.branches[agent].append(_Branch(agent, env, reward, info, record))
        return stage

    def _play_on(self, stages: Sequence[_Stage]) -> None:
        """Give every candidate what it earns after its own step (module docstring): play its
        clone on, one sampled answer per acting agent (batched over all candidates of all
        tasks), until its agent acts again, its turn's credit is settled, or the episode
        ends; then add the credit to the candidate's reward."""
        playing: list[_PlayOn] = []
        for stage in stages:
            for agent, branches in stage.branches.items():
                if agent in stage.failed:
                    continue
                group = []
                for branch in branches:
                    env = branch.env
                    turn_open = bool(self._credits_turns and env.agents and env.stage_index != 0)
                    self._saw_open_turn |= turn_open
                    if self._keeps_playing(agent, env, turn_open):
                        group.append(_PlayOn(stage, branch, env.clone(), turn_open))
                if group:
                    for branch in branches:
                        branch.record.reward_credit = 0.0
                    playing.extend(group)
        while playing:
            answers = self._sample_answers(playing)
            still_playing = []
            for play, actions in zip(playing, answers):
                stage, agent = play.stage, play.branch.agent
                if agent in stage.failed:
                    continue
                acting = play.env.acting_agents()
                try:
                    rewards, infos = self._play_step(play, actions)
                except EnvContractError:
                    raise
                except Exception as exc:
                    self._fail_group(stage, agent, exc)
                    continue
                record = play.branch.record
                if agent not in acting:
                    record.reward_credit += float(rewards.get(agent, 0.0))
                if play.turn_open and (not play.env.agents or play.env.stage_index == 0):
                    team_end = max(float(infos[a][INFO_REWARD_TEAM]) for a in acting)
                    own_team = float(infos.get(agent, {}).get(INFO_REWARD_TEAM, 0.0))
                    record.reward_credit += (mixed_reward(play.env.alpha, team_end, 0.0)
                                             - mixed_reward(play.env.alpha, own_team, 0.0))
                    play.turn_open = False
                if self._keeps_playing(agent, play.env, play.turn_open):
                    still_playing.append(play)
            playing = still_playing
        for stage in stages:
            for agent, branches in stage.branches.items():
                if agent in stage.failed:
                    continue
                for branch in branches:
                    if branch.record.reward_credit is not None:
                        branch.record.reward += branch.record.reward_credit

    @staticmethod
    def _keeps_playing(agent: str, env: TextParallelEnv, turn_open: bool) -> bool:
        return bool(env.agents) and agent not in env.acting_agents() and (
            turn_open or _pays_idle_agents(env))

    def _sample_answers(self, playing: Sequence[_PlayOn]) -> list[dict[str, str]]:
        """One sampled answer per acting agent of every played-on clone, one engine call per
        module."""
        by_module: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for index, play in enumerate(playing):
            for agent in play.env.acting_agents():
                by_module[self.module_for_agent(agent)].append((index, agent))
        answers: list[dict[str, str]] = [{} for _ in playing]
        for module, requests in by_module.items():
            prompts = [playing[i].env.current_observations()[agent] for i, agent in requests]
            for (index, agent), completions in zip(requests, self.generate(module, prompts, 1)):
                answers[index][agent] = completions[0].text
                self._play_on_tokens += len(completions[0].response_ids)
        return answers

    def _play_step(self, play: _PlayOn, actions: dict[str, str]):
        """Step a played-on clone; a failure is replayed once from the candidate's stored
        state with the same answers."""
        try:
            _, rewards, _, _, infos = play.env.step(dict(actions))
        except EnvContractError:
            raise
        except Exception as exc:
            logger.warning("task %s: the env raised %s while playing on %s's candidate: %s; "
                           "replaying once", play.stage.item.task, type(exc).__name__,
                           play.branch.agent, exc)
            play.env = play.branch.env.clone()
            for past in play.actions:
                play.env.step(dict(past))
            _, rewards, _, _, infos = play.env.step(dict(actions))
        play.actions.append(dict(actions))
        return rewards, infos

    def _continue(self, stage: _Stage) -> None:
        """Mark each agent's best candidate (by its record's reward, ties to the lowest k)
        and continue the episode from it; failed candidates are never continued."""
        item = stage.item
        agents = tuple(stage.branches)
        best = {}
        for agent in agents:
            usable = [b for b in stage.branches[agent] if b.env is not None]
            if not usable:
                raise RuntimeError(f"every candidate of {agent} failed")
            best[agent] = max(usable, key=lambda b: b.record.reward)
            best[agent].record.selected = True
        if len(agents) == 1:
            chosen = best[agents[0]]  # the chosen clone continues
            next_env, reward, info = chosen.env, chosen.reward, chosen.info
        else:
            next_env, reward, info = self._step_clone(
                item.env, {agent: best[agent].record.response_text for agent in agents},
                f"task {item.task}, continuation (turn {item.env.turn})")
        self._account(item, agents, reward, info, next_env)
        for agent in agents:
            item.last_record[agent] = best[agent].record
        item.env = next_env
        item.observations = next_env.current_observations() if next_env.agents else {}

    def _account(self, item: _Live, stage: Sequence[str], reward: Mapping[str, float],
                 info: Mapping[str, dict], env: TextParallelEnv) -> None:
        """Add one stage to the episode's summary: the env's own mixed reward and its parts
        (the mixing ``alpha * team + local`` is the env's, never recomputed here), for idle
        agents too; with K = 1 an idle agent's reward also goes to its last record."""
        summary = item.summary
        summary.num_stages += 1
        summary.num_turns = env.turn + (1 if env.stage_index else 0)
        paid = [a for a in reward if a in stage or _pays_idle_agents(env)]
        for agent in paid:
            agent_info = info.get(agent, {})
            value = float(reward[agent])
            team = float(agent_info.get(INFO_REWARD_TEAM, 0.0))
            local = float(agent_info.get(INFO_REWARD_LOCAL, value))
            summary.agent_reward_team[agent] = summary.agent_reward_team.get(agent, 0.0) + team
            summary.agent_reward_local[agent] = summary.agent_reward_local.get(agent, 0.0) + local
            summary.agent_return[agent] = summary.agent_return.get(agent, 0.0) + value
            last = item.last_record.get(agent)
            if agent not in stage and value and self.num_branches == 1 and last is not None:
                last.reward += value
                last.reward_credit = (last.reward_credit or 0.0) + value
        for agent in stage:
            agent_info = info[agent]
            summary.parse_errors[agent] = (summary.parse_errors.get(agent, 0)
                                           + int(agent_info[INFO_PARSE_ERROR] is not None))
            summary.agent_actions[agent] = summary.agent_actions.get(agent, 0) + 1
            summary.success = bool(agent_info[INFO_SUCCESS])
