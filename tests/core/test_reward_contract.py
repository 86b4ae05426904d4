"""The reward contract (docs/custom_env.md, "The reward contract") on plain PettingZoo envs
written here as a user would, through ``wrap_parallel_env``, with a scripted engine (no model,
no Ray): every reward an env pays reaches training, the first role of a sequential env sees
the team outcome, a failing candidate drops its group and nothing else, and an env that breaks
the contract is stopped at the step that broke it."""

from collections import Counter, defaultdict

import gymnasium
import numpy as np
import pytest
from pettingzoo import ParallelEnv

from pettingllms_rllib.core.advantages import AdvantageConfig, group_advantages
from pettingllms_rllib.core.trajectory_sampler import TrajectorySampler
from pettingllms_rllib.core.tree_sampler import RolloutError, TreeSampler
from pettingllms_rllib.engines.base import Completion
from pettingllms_rllib.envs import (EnvContractError, NotATextEnvError, check_text_env,
                                    wrap_parallel_env)


class HintGame(ParallelEnv):
    """A two-role env the library never saw: ``hinter`` sees a secret number and says a hint,
    ``answerer`` sees only the hint and names the number. On the answerer's step the env pays
    the team outcome to BOTH agents (plain rewards, no reward_team/turn/stage infos); it says
    who acts next in ``infos["acting"]`` and reports ``parse_error`` as a bool."""

    metadata = {"name": "hint_game_v0"}
    possible_agents = ["hinter", "answerer"]

    def __init__(self, *, rounds: int = 1, nan_reward: bool = False):
        self.rounds, self.nan_reward = rounds, nan_reward

    def observation_space(self, agent):
        return gymnasium.spaces.Text(max_length=256)

    action_space = observation_space

    def _infos(self, **extra):
        return {a: {"acting": a == self.next, **extra.get(a, {})} for a in self.agents}

    def reset(self, seed=None, options=None):
        self.np_random = np.random.default_rng(seed)
        self.secret = str(int(self.np_random.integers(3)))
        self.hint, self.next, self.round = "", "hinter", 0
        self.agents = list(self.possible_agents)
        return self._observations(), self._infos()

    def _observations(self):
        return {"hinter": f"hinter:secret={self.secret}", "answerer": f"answerer:{self.hint}"}

    def step(self, actions):
        rewards = {a: 0.0 for a in self.agents}
        mover = self.next
        done = False
        if mover == "hinter":
            self.hint = actions["hinter"].strip()
            self.next = "answerer"
            extra = {"hinter": {"parse_error": not self.hint.isdigit()}}
        else:
            right = actions["answerer"].strip() == self.secret
            for agent in self.agents:
                rewards[agent] = float("nan") if self.nan_reward else float(right)
            self.next, self.round = "hinter", self.round + 1
            done = right or self.round >= self.rounds
            extra = {"answerer": {"parse_error": False}}
        infos = self._infos(**extra)
        observations = self._observations()
        terminations = {a: done for a in self.agents}
        truncations = {a: False for a in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


class ScriptedEngine:
    """The hinter answers its script (candidate k = script[k]); the answerer repeats the hint
    it was shown, so only the team outcome tells the hinter's candidates apart."""

    def __init__(self, hints):
        self.hints = hints
        self.calls = []

    def __call__(self, module_id, prompts, num_samples):
        self.calls.append((module_id, len(prompts), num_samples))
        out = []
        for prompt in prompts:
            agent, _, shown = prompt.partition(":")
            texts = self.hints[:num_samples] if agent == "hinter" else [shown] * num_samples
            out.append([Completion(prompt_ids=(1,), response_ids=(k,), logprobs=(-0.5,),
                                   text=t, finish_reason="stop") for k, t in enumerate(texts)])
        return out


def _roots(creator, seeds=(0, 1, 2)):
    roots = {}
    for seed in seeds:
        env = creator()
        env.reset(seed=seed)
        roots[f"t{seed}"] = env
    return roots


def _default_sampler(engine, **kwargs):
    """The sampler as ATGRPOConfig's defaults build it (stage_credit, K)."""
    from pettingllms_rllib import ATGRPOConfig

    config = ATGRPOConfig()
    kwargs.setdefault("stage_credit", config.stage_credit)
    return TreeSampler(engine, lambda agent: agent, num_branches=3, **kwargs), config


def test_only_the_team_outcome_tells_the_first_roles_candidates_apart_and_it_trains():
    engine = ScriptedEngine(["0", "1", "2"])
    sampler, config = _default_sampler(engine)
    result = sampler.run(_roots(wrap_parallel_env(HintGame)))
    hinter = [r for r in result.records if r.agent == "hinter"]
    # Each candidate's own step paid 0; what its clone's answerer then did is its reward.
    for record in hinter:
        secret = record.prompt_text.split("=")[1]
        assert record.reward == record.reward_credit == float(record.response_text == secret)
    advantages = group_advantages([r.reward for r in result.records],
                                  [r.group_key for r in result.records],
                                  [r.agent for r in result.records], config.advantage_config)
    by_agent = defaultdict(list)
    for record, advantage, keep in zip(result.records, advantages.advantages, advantages.keep):
        if keep:
            by_agent[record.agent].append(advantage)
    assert any(abs(a) > 0.1 for a in by_agent["hinter"]), "the first role got no signal"
    # The cost: one answerer answer (one token here) per hinter candidate of each task.
    assert result.num_play_on_tokens == 3 * 3
    # The greedy path continued the right hint, and the episode's first-role return holds
    # the team outcome the env paid it on the answerer's step.
    assert [e.agent_return["hinter"] for e in result.episodes] == [1.0, 1.0, 1.0]


def test_a_reward_paid_to_an_idle_agent_reaches_every_candidate_even_without_stage_credit():
    engine = ScriptedEngine(["0", "1", "2"])
    result = TreeSampler(engine, lambda a: a, num_branches=3, stage_credit="none").run(
        _roots(wrap_parallel_env(HintGame)))
    groups = defaultdict(list)
    for record in result.records:
        groups[record.group_key].append(record)
    for key, members in groups.items():
        if key.agent == "hinter":  # every candidate was played on, not the greedy one alone
            assert all(m.reward_credit is not None for m in members)
            assert sorted(m.reward for m in members) == [0.0, 0.0, 1.0]


def test_the_stage_is_inferred_from_who_acts_so_one_turn_holds_both_roles():
    env = wrap_parallel_env(HintGame)(rounds=2)
    env.reset(seed=0)
    assert (env.turn, env.stage_index) == (0, 0)
    env.step({"hinter": "9"})
    assert (env.turn, env.stage_index) == (0, 1)
    env.step({"answerer": "9"})
    assert (env.turn, env.stage_index) == (1, 0)


def test_with_one_trajectory_the_idle_reward_goes_to_the_agents_sampled_action():
    engine = ScriptedEngine(["1", "1"])
    env = wrap_parallel_env(HintGame)()
    env.reset(seed=0)
    secret = env.env.secret
    result = TreeSampler(engine, lambda a: a, num_branches=1).run({"t": env})
    (hinter,) = [r for r in result.records if r.agent == "hinter"]
    assert hinter.reward == float(secret == "1")
    trajectories = TrajectorySampler(engine, lambda a: a, num_trajectories=2).run({"t": env})
    assert {r.reward for r in trajectories.records if r.agent == "hinter"} == {
        float(secret == "1")}


def test_parse_error_false_and_none_mean_parsed_true_means_not():
    env = wrap_parallel_env(HintGame)()
    env.reset(seed=0)
    _, _, _, _, infos = env.step({"hinter": "not a digit"})
    assert infos["hinter"]["parse_error"] == "the env reported a parse error"
    env.reset(seed=0)
    _, _, _, _, infos = env.step({"hinter": "2"})
    assert infos["hinter"]["parse_error"] is None
    _, _, _, _, infos = env.step({"answerer": "2"})
    assert infos["answerer"]["parse_error"] is None


def test_a_nan_reward_stops_at_the_step_naming_the_agent():
    env = wrap_parallel_env(HintGame)(nan_reward=True)
    env.reset(seed=0)
    env.step({"hinter": "1"})
    with pytest.raises(EnvContractError, match=r"HintGame \(step 2\): paid 'hinter' the "
                                               r"reward nan; rewards must be finite"):
        env.step({"answerer": "1"})
    # The sampler never retries or skips it: the run stops.
    with pytest.raises(EnvContractError):
        TreeSampler(ScriptedEngine(["1", "2"]), lambda a: a, num_branches=2).run(
            _roots(lambda: wrap_parallel_env(HintGame)(nan_reward=True), seeds=(0,)))


class _Stranger(HintGame):
    def step(self, actions):
        observations, rewards, terminations, truncations, infos = super().step(actions)
        return observations, {**rewards, "referee": 1.0}, terminations, truncations, infos


class _Numbers(HintGame):
    def step(self, actions):
        observations, *rest = super().step(actions)
        return ({a: 7 for a in observations}, *rest)


def test_a_reward_for_an_unknown_agent_and_a_non_text_observation_are_refused():
    env = wrap_parallel_env(_Stranger)()
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"step 1\): paid a reward to 'referee', which "
                                               r"is not one of possible_agents"):
        env.step({"hinter": "1"})
    env = wrap_parallel_env(_Numbers)()
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"step 1\): returned a int observation for "
                                               r"'hinter'"):
        env.step({"hinter": "1"})


def test_an_unwrapped_plain_env_is_refused_by_the_conformance_check_naming_the_wrapper():
    with pytest.raises(NotATextEnvError, match=r"use wrap_parallel_env\(HintGame\)"):
        check_text_env(HintGame)


class _Flaky(HintGame):
    """Raises on the answerer's step when the hint is ``boom`` (always) or ``once`` (the first
    time only, across clones: a transient sandbox failure)."""

    failures = Counter()

    def step(self, actions):
        if self.next == "answerer" and self.hint == "boom":
            raise RuntimeError("sandbox died")
        if self.next == "answerer" and self.hint == "once" and not _Flaky.failures["once"]:
            _Flaky.failures["once"] += 1
            raise RuntimeError("transient")
        return super().step(actions)


def _advantages_by_key(records):
    result = group_advantages([r.reward for r in records], [r.group_key for r in records],
                              [r.agent for r in records], AdvantageConfig())
    return {(r.group_key, r.branch): a for r, a in zip(records, result.advantages)}


def test_a_failing_candidate_drops_its_group_only_and_other_groups_are_unchanged():
    clean = TreeSampler(ScriptedEngine(["0", "1", "2"]), lambda a: a, num_branches=3).run(
        _roots(wrap_parallel_env(HintGame), seeds=(0, 1)))
    engine = ScriptedEngine(["0", "1", "boom"])
    roots = _roots(wrap_parallel_env(HintGame), seeds=(0, 1))
    roots.update({"bad": wrap_parallel_env(_Flaky)()})
    roots["bad"].reset(seed=2)
    engine_clean_for_good = ScriptedEngine(["0", "1", "boom"])
    baseline = TreeSampler(engine_clean_for_good, lambda a: a, num_branches=3).run(
        _roots(wrap_parallel_env(HintGame), seeds=(0, 1)))
    result = TreeSampler(engine, lambda a: a, num_branches=3).run(roots)
    # No row of the failed group reaches the learner; it is counted for its agent.
    assert not [r for r in result.records if r.group_key.task == "bad" and r.agent == "hinter"]
    assert result.failed_groups == {"hinter": 1}
    # The other tasks' groups and advantages are exactly those of a run without the bad task.
    good = [r for r in result.records if r.group_key.task != "bad"]
    assert _advantages_by_key(good) == _advantages_by_key(baseline.records)
    assert {r.group_key for r in clean.records} == {r.group_key for r in baseline.records}


def test_a_transient_failure_is_replayed_once_and_the_group_kept():
    _Flaky.failures.clear()
    result = TreeSampler(ScriptedEngine(["once", "1"]), lambda a: a, num_branches=2).run(
        _roots(wrap_parallel_env(_Flaky), seeds=(0,)))
    assert _Flaky.failures["once"] == 1
    assert result.failed_groups == {}
    assert len([r for r in result.records if r.agent == "hinter"]) == 2


def test_a_run_where_most_groups_fail_stops_with_the_envs_traceback():
    with pytest.raises(RolloutError, match=r"(?s)groups failed this iteration.*sandbox died"):
        TreeSampler(ScriptedEngine(["boom", "boom"]), lambda a: a, num_branches=2).run(
            _roots(wrap_parallel_env(_Flaky)))


class _Together(HintGame):
    """Both agents act on every step (no ``acting`` infos): no stage precedes another."""

    def _infos(self, **extra):
        return {a: dict(extra.get(a, {})) for a in self.agents}


def test_explicit_turn_credit_on_an_env_where_it_never_applies_warns_once(caplog):
    import pettingllms_rllib.core.tree_sampler as tree_sampler

    tree_sampler._warned_uncredited = False
    for _ in range(2):
        TreeSampler(ScriptedEngine(["1", "2"]), lambda a: a, num_branches=2,
                    stage_credit="turn").run(_roots(wrap_parallel_env(_Together), seeds=(0,)))
    assert caplog.text.count("stage_credit='turn' credited nothing") == 1
    assert "must report infos[agent]['acting']" in caplog.text


class _Unclonable(HintGame):
    def clone(self):
        raise RuntimeError("holds a socket")


def test_an_env_that_cannot_be_cloned_is_refused_before_any_candidate():
    env = wrap_parallel_env(HintGame)()
    env.reset(seed=0)
    env.env = _Unclonable()
    env.env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"task 't': ParallelTextEnv.clone\(\) raised "
                                               r"RuntimeError: holds a socket; tree sampling"):
        TreeSampler(ScriptedEngine(["1", "2"]), lambda a: a, num_branches=2).run({"t": env})
