"""A tool program runs once however many candidates submit it, with unchanged rewards.

The K candidates of a tool stage are scored on their own env clones; identical programs share
one sandbox run (``pettingllms_envs/common.py: ProgramVerdicts``). The rewards, reports and observations of
a whole tree must be identical with and without the sharing.
"""


import pettingllms_envs.common as common
from pettingllms_envs.common import ProgramVerdicts
from pettingllms_envs.plan_path import PlanPathEnv, shortest_path
from pettingllms_envs.sandbox import SandboxLimits, run_python
from pettingllms_rllib.core.tree_sampler import TreeSampler
from pettingllms_rllib.engines.base import Completion

FAST = SandboxLimits(wall_time_s=5.0, cpu_time_s=2.0)


def program(moves: str) -> str:
    return f"```python\nprint({moves!r})\n```"


def scripted_generate(texts_for):
    """An engine that answers each prompt with fixed texts (the tool's K programs repeat)."""
    def generate(module_id, prompts, num_samples):
        return [[Completion(prompt_ids=(1,), response_ids=(2,), logprobs=(-0.5,), text=text,
                            finish_reason="stop")
                 for text in texts_for(module_id, prompt, num_samples)] for prompt in prompts]
    return generate


def texts_for(module_id, prompt, num_samples):
    if module_id == "tool":  # two distinct programs among four candidates, one failing
        return [program("R D"), program("R D"), "```python\nraise SystemExit(3)\n```",
                program("R D")][:num_samples]
    return ["Moves: R D", "Moves: D R", "no answer", "Moves: R"][:num_samples]


def roots():
    envs = {}
    for seed in range(3):
        env = PlanPathEnv(grid_size=3, wall_prob=0.0, max_turns=2, sandbox_limits=FAST)
        env.reset(seed=seed)
        envs[f"task{seed}"] = env
    return envs


def tree(monkeypatch, verdicts: ProgramVerdicts):
    runs = []

    def counting_run_python(code, **kwargs):
        runs.append(code)
        return run_python(code, **kwargs)

    monkeypatch.setattr(common, "PROGRAM_VERDICTS", verdicts)
    monkeypatch.setattr(common, "run_python", counting_run_python)
    sampler = TreeSampler(scripted_generate(texts_for), lambda agent: agent, num_branches=4)
    result = sampler.run(roots())
    return result, runs


def test_shared_verdicts_give_the_same_tree_with_fewer_sandbox_runs(monkeypatch):
    shared, shared_runs = tree(monkeypatch, ProgramVerdicts())
    alone, alone_runs = tree(monkeypatch, ProgramVerdicts(capacity=0))
    assert [r.reward for r in shared.records] == [r.reward for r in alone.records]
    assert [r.prompt_text for r in shared.records] == [r.prompt_text for r in alone.records]
    assert [(e.success, e.agent_return) for e in shared.episodes] == [
        (e.success, e.agent_return) for e in alone.episodes]
    tool_records = [r for r in alone.records if r.agent == "tool"]
    assert len(alone_runs) == len(tool_records)  # without sharing: one run per candidate
    assert sorted(set(shared_runs)) == sorted(set(alone_runs))
    assert len(shared_runs) == len(set(shared_runs)) == 2  # each distinct program once


def test_verdicts_are_kept_per_program_and_limits_and_bounded():
    verdicts = ProgramVerdicts(capacity=2)
    first = verdicts.run("print(1)", FAST)
    assert verdicts.run("print(1)", FAST) is first and verdicts.hits == 1
    other_limits = SandboxLimits(wall_time_s=4.0, cpu_time_s=2.0)
    assert verdicts.run("print(1)", other_limits) is not first
    verdicts.run("print(2)", FAST)  # the third entry evicts the least recently used one
    assert verdicts.runs == 3
    verdicts.run("print(1)", FAST)
    assert verdicts.runs == 4 and first.stdout == "1\n"


def test_a_user_code_runner_is_called_for_every_candidate(monkeypatch):
    calls = []

    def runner(code):
        calls.append(code)
        return run_python(code, limits=FAST)

    env = PlanPathEnv(grid_size=3, wall_prob=0.0, max_turns=1, sandbox_limits=FAST,
                      code_runner=runner)
    env.reset(seed=0)
    moves = " ".join(shortest_path(env.task.grid, env.position, env.task.goal))
    for _ in range(2):
        env.clone().step({"tool": program(moves), "planner": ""})
    assert len(calls) == 2
