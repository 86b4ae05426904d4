"""Tree sampler invariants on a scripted fake engine (no model, no Ray)."""

from collections import Counter, defaultdict

import pytest
from toy_env import ToyCounterEnv

from pettingllms_rllib.core.tree_sampler import TreeSampler
from pettingllms_rllib.engines.base import Completion
from pettingllms_rllib.envs import ParseResult, Role, StageOutcome, TextParallelEnv


class ScriptedEngine:
    """Answers with per-agent scripts: candidate k of each prompt is ``script[agent][k]``."""

    def __init__(self, scripts):
        self.scripts = scripts
        self.calls = []

    def __call__(self, module_id, prompts, num_samples):
        self.calls.append((module_id, list(prompts), num_samples))
        out = []
        for prompt in prompts:
            agent = prompt.split(":")[0]
            texts = self.scripts[agent][:num_samples]
            out.append([Completion(prompt_ids=(len(prompt),), response_ids=(k, k + 1),
                                   logprobs=(-0.5, -0.25), text=t, finish_reason="stop")
                        for k, t in enumerate(texts)])
        return out


def _roots(n, **env_kwargs):
    roots = {}
    for seed in range(n):
        env = ToyCounterEnv(**env_kwargs)
        env.reset(seed=seed)
        roots[f"task{seed}"] = env
    return roots


def test_every_group_has_exactly_k_members_sharing_one_prompt():
    engine = ScriptedEngine({"adder": ["0", "1", "2", "x"], "checker": ["0", "1", "2", "3"]})
    result = TreeSampler(engine, lambda a: "shared", num_branches=4).run(
        _roots(3, max_turns=3, target=100))
    groups = defaultdict(list)
    for record in result.records:
        groups[record.group_key].append(record)
    # 3 tasks x 3 turns x 2 agents, none terminates (target unreachable)
    assert len(groups) == 18
    for key, members in groups.items():
        assert len(members) == 4, key
        assert len({m.prompt_fingerprint for m in members}) == 1, key
        assert sorted(m.branch for m in members) == [0, 1, 2, 3]
        assert sum(m.selected for m in members) == 1


def test_each_branch_is_scored_on_its_own_clone():
    engine = ScriptedEngine({"adder": ["1", "2", "3", "4"], "checker": ["0"] * 4})
    roots = _roots(1, max_turns=1, target=100)
    start = roots["task0"].counter
    result = TreeSampler(engine, lambda a: "m", num_branches=4).run(roots)
    adder = [r for r in result.records if r.agent == "adder"]
    # local reward = counter after this branch's own addition; aliasing would accumulate.
    assert [r.reward_local for r in adder] == [start + 1, start + 2, start + 3, start + 4]
    assert roots["task0"].counter == start, "the root env must not be stepped"


def test_greedy_branch_is_the_state_the_next_stage_sees():
    engine = ScriptedEngine({"adder": ["3", "1", "5", "5"], "checker": ["0"] * 4})
    roots = _roots(1, max_turns=1, target=100)
    start = roots["task0"].counter
    result = TreeSampler(engine, lambda a: "m", num_branches=4).run(roots)
    adder = [r for r in result.records if r.agent == "adder"]
    assert [r.selected for r in adder] == [False, False, True, False]  # tie -> lowest k
    checker_prompt = next(r.prompt_text for r in result.records if r.agent == "checker")
    assert f"counter={start + 5}" in checker_prompt


def test_batched_engine_calls_one_per_module_per_stage():
    engine = ScriptedEngine({"adder": ["1"] * 2, "checker": ["0"] * 2})
    mapping = {"adder": "adder_policy", "checker": "checker_policy"}
    TreeSampler(engine, mapping.__getitem__, num_branches=2, stage_credit="none").run(
        _roots(4, max_turns=2, target=100))
    # 2 turns x 2 stages, each one call with all 4 tasks' prompts for the acting module
    assert [(m, len(p), n) for m, p, n in engine.calls] == [
        ("adder_policy", 4, 2), ("checker_policy", 4, 2)] * 2


def test_episode_ends_when_the_chosen_branch_solves_the_task():
    engine = ScriptedEngine({"adder": ["0", "50"], "checker": ["0", "0"]})
    roots = {}
    env = ToyCounterEnv(target=50, max_turns=3)
    env.reset(seed=0)
    env.counter = 0
    roots["t"] = env
    result = TreeSampler(engine, lambda a: "m", num_branches=2).run(roots)
    assert {r.group_key.agent for r in result.records} == {"adder"}
    assert result.episodes[0].success
    assert result.episodes[0].num_stages == 1


def test_parse_errors_are_records_with_penalty_not_exceptions():
    engine = ScriptedEngine({"adder": ["\x00garbage", "1"], "checker": ["?", "?"]})
    result = TreeSampler(engine, lambda a: "m", num_branches=2).run(
        _roots(1, max_turns=1, target=100, invalid_action_penalty=-3.0))
    errors = [r for r in result.records if r.parse_error]
    assert {r.agent for r in errors} == {"adder", "checker"}
    assert all(r.reward_local == -3.0 for r in errors)
    assert result.episodes[0].parse_errors["checker"] == 1


def test_parallel_stage_holds_other_agents_at_their_reference_answer():
    engine = ScriptedEngine({"adder": ["1", "2", "3"], "checker": ["9", "0", "4"]})
    roots = _roots(1, max_turns=1, target=100, parallel=True)
    start = roots["task0"].counter
    result = TreeSampler(engine, lambda a: "m", num_branches=3).run(roots)
    checker = [r for r in result.records if r.agent == "checker"]
    # checker scored against the adder's reference (candidate 0 -> counter start + 1)
    assert [r.reward_local for r in checker] == [-abs(9 - start - 1), -abs(0 - start - 1),
                                                 -abs(4 - start - 1)]
    assert Counter(r.agent for r in result.records) == {"adder": 3, "checker": 3}


def test_k_below_one_is_rejected():
    with pytest.raises(ValueError, match="num_branches"):
        TreeSampler(lambda *a: [], lambda a: "m", num_branches=0)


def test_k_of_one_is_a_plain_rollout_that_counts_every_action():
    """Evaluation without test-time search: one sample per agent per turn, each continues."""
    engine = ScriptedEngine({"adder": ["\x00garbage"], "checker": ["1"]})
    result = TreeSampler(engine, lambda a: "m", num_branches=1).run(
        _roots(1, max_turns=2, target=100))
    assert all(r.selected and r.branch == 0 for r in result.records)
    episode = result.episodes[0]
    assert episode.agent_actions == {"adder": 2, "checker": 2}
    assert episode.parse_errors == {"adder": 2, "checker": 0}


def test_engine_returning_wrong_sample_count_fails_loudly():
    engine = ScriptedEngine({"adder": ["1"], "checker": ["1"]})
    with pytest.raises(RuntimeError, match="expected K=2"):
        TreeSampler(engine, lambda a: "m", num_branches=2).run(_roots(1, target=100))


class _RaisingCounterEnv(ToyCounterEnv):
    """Raises inside ``step`` on its second turn (an env or sandbox bug in one task)."""

    def _apply_stage(self, stage, parsed, raw):
        if self.turn >= 1:
            raise RuntimeError("sandbox exploded")
        return super()._apply_stage(stage, parsed, raw)


def test_a_task_whose_env_keeps_raising_loses_the_failed_group_and_its_episode_only():
    engine = ScriptedEngine({"adder": ["0", "1"], "checker": ["0", "1"]})
    roots = _roots(2, max_turns=3, target=100)
    broken = _RaisingCounterEnv(max_turns=3, target=100)
    broken.reset(seed=7)
    roots["broken"] = broken
    result = TreeSampler(engine, lambda a: "m", num_branches=2).run(roots)
    assert result.dropped_tasks == ["broken"]
    # Its turn-0 groups were complete and stay; the turn-1 group whose env failed goes.
    broken_keys = {r.group_key for r in result.records if r.group_key.task == "broken"}
    assert {(k.agent, k.turn) for k in broken_keys} == {("adder", 0), ("checker", 0)}
    assert result.failed_groups == {"adder": 1}
    assert sorted(e.task for e in result.episodes) == ["task0", "task1"]
    assert all(e.num_turns == 3 for e in result.episodes)  # the others played to the end


def test_a_task_whose_episode_never_ends_is_dropped_at_the_stage_cap(caplog):
    engine = ScriptedEngine({"adder": ["0", "0"], "checker": ["0", "0"]})
    roots = _roots(1, max_turns=2, target=100)
    endless = ToyCounterEnv(max_turns=10_000, target=100)
    endless.reset(seed=3)
    roots["endless"] = endless
    result = TreeSampler(engine, lambda a: "m", num_branches=2, max_stages=8).run(roots)
    assert result.dropped_tasks == ["endless"]
    assert {r.group_key.task for r in result.records} == {"task0"}
    assert "still running after 8 stages" in caplog.text


class _RelayEnv(TextParallelEnv):
    """Describer then guesser; the team wins when the guess is the secret word. The
    describer's own stage pays nothing, so only the turn's end says whether its clue helped."""

    metadata = {"name": "relay_v0"}
    possible_agents = ["describer", "guesser"]
    roles = {"describer": Role("describer", "clue", lambda t: ParseResult(value=t.strip())),
             "guesser": Role("guesser", "guess", lambda t: ParseResult(value=t.strip()))}
    workflow = [("describer",), ("guesser",)]

    def _new_task(self, seed, options):
        self.secret, self.clue = "red", ""

    def _observe(self, agent):
        return f"{agent}:{self.clue}"

    def _apply_stage(self, stage, parsed, raw):
        if stage == ("describer",):
            self.clue = parsed["describer"].value
            return StageOutcome(local={"describer": 0.0}, team=0.0, success=False)
        solved = parsed["guesser"].value == self.secret
        return StageOutcome(local={"guesser": 0.0}, team=float(solved), success=solved,
                            terminated=True)


class _EchoingGuesser(ScriptedEngine):
    """The describer answers its script; the guesser repeats the clue its prompt shows."""

    def __call__(self, module_id, prompts, num_samples):
        self.calls.append((module_id, list(prompts), num_samples))
        out = []
        for prompt in prompts:
            agent, _, clue = prompt.partition(":")
            texts = (self.scripts["describer"][:num_samples] if agent == "describer"
                     else [clue] * num_samples)
            out.append([Completion(prompt_ids=(1,), response_ids=(k,), logprobs=(-0.5,),
                                   text=t, finish_reason="stop") for k, t in enumerate(texts)])
        return out


def _relay_run(stage_credit, alpha=2.0):
    engine = _EchoingGuesser({"describer": ["blue", "red"]})
    env = _RelayEnv(alpha=alpha, max_turns=1)
    env.reset(seed=0)
    result = TreeSampler(engine, lambda agent: agent, num_branches=2,
                         stage_credit=stage_credit).run({"t": env})
    return engine, result


def test_turn_credit_adds_alpha_times_the_team_reward_the_rest_of_the_turn_reached():
    engine, result = _relay_run("turn")
    describer = [r for r in result.records if r.group_key.agent == "describer"]
    assert [(r.response_text, r.reward, r.reward_credit) for r in describer] == [
        ("blue", 0.0, 0.0), ("red", 2.0, 2.0)]  # immediate 0 + alpha * team of the guess
    assert describer[1].selected and result.episodes[0].success
    # One batched K=1 continuation call for both candidates, between the two K=2 stages.
    assert [(module, len(prompts), n) for module, prompts, n in engine.calls] == [
        ("describer", 1, 2), ("guesser", 2, 1), ("guesser", 1, 2)]
    groups = Counter(r.group_key for r in result.records)
    assert sorted(groups.values()) == [2, 2]  # group sizes stay K


def test_without_stage_credit_the_earlier_stage_gets_only_its_own_reward():
    engine, result = _relay_run("none")
    describer = [r for r in result.records if r.group_key.agent == "describer"]
    assert [(r.reward, r.reward_credit) for r in describer] == [(0.0, None), (0.0, None)]
    assert len(engine.calls) == 2  # no continuation calls
    assert describer[0].selected  # a tie goes to the lowest k


def test_the_last_stage_of_a_turn_gets_no_credit():
    _, result = _relay_run("turn")
    assert all(r.reward_credit is None for r in result.records if r.group_key.agent == "guesser")


def test_an_unknown_stage_credit_is_refused():
    with pytest.raises(ValueError,
                       match=r"stage_credit='episode'; accepted: \('auto', 'none', 'turn'\)"):
        TreeSampler(lambda *a: [], lambda a: a, num_branches=2, stage_credit="episode")
