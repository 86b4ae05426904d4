"""The best constant answer: what a team scores that says the same thing whatever it is asked.

A trained policy can look like it learned when it only found one string that is often right
(the 135M model answered every Plan-Path instance with the prompt's own example, ``R D``, and
solved 3/32). Every evaluation therefore reports, next to the team, the success rate of the
best *constant* team on the same instances: one fixed response per role, played on every
instance and every turn, searched over the responses the evaluated policies actually produced
and the examples the prompts show. A policy that does not beat it has not shown a skill.

Search: coordinate ascent over roles (start from each role's most frequent response; for each
role in turn, try every candidate with the other roles fixed; keep the best; repeat until a
pass improves nothing). Exhaustive search over the product of roles is too large, and the
ascent finds a lower bound of the best constant's score, which is what the comparison needs
(a trained team that does not beat a constant found this way does not beat the best one).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Mapping, Sequence

from pettingllms_rllib.envs.base import INFO_SUCCESS
from pettingllms_rllib.envs.registry import make_text_env


@dataclasses.dataclass(frozen=True)
class ConstantTeamResult:
    """The best constant team found: each role's fixed response and its success rate."""

    answers: dict[str, str]
    success_rate: float
    num_successes: int
    num_tasks: int
    num_candidates: dict[str, int]

    def to_record(self) -> dict:
        return dataclasses.asdict(self)


def play_constant_team(env, seeds: Sequence[int], answers: Mapping[str, str]) -> int:
    """Episodes solved when every acting agent answers ``answers[agent]`` on every turn."""
    solved = 0
    for seed in seeds:
        env.reset(seed=int(seed))
        success = False
        while env.agents:
            _, _, _, _, infos = env.step({agent: answers.get(agent, "")
                                          for agent in env.acting_agents()})
            success = success or any(info.get(INFO_SUCCESS) for info in infos.values())
        solved += int(success)
    return solved


def prompt_example_candidates(env, seeds: Sequence[int]) -> dict[str, list[str]]:
    """Every example answer the prompts show on these instances (first turn), per agent."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for seed in seeds:
        env.reset(seed=int(seed))
        for agent, text in env.prompt_examples().items():
            found[agent].append(text)
    return found


def best_constant_answer(env_id: str, env_config: Mapping, seeds: Sequence[int],
                         responses: Mapping[str, Iterable[str]], *,
                         max_candidates_per_role: int = 64,
                         max_passes: int = 3) -> ConstantTeamResult:
    """Search a constant team (see the module docstring).

    Args:
        env_id / env_config / seeds: the task and the evaluation instances.
        responses: agent -> responses it produced (repeats count: the most frequent are tried
            first); the prompts' own examples on these instances are added.
        max_candidates_per_role: the most frequent distinct candidates tried per role.
        max_passes: coordinate-ascent passes over the roles.
    """
    env = make_text_env(env_id, dict(env_config))
    counts: dict[str, collections.Counter] = {agent: collections.Counter()
                                              for agent in env.possible_agents}
    for agent, texts in responses.items():
        if agent in counts:
            counts[agent].update(texts)
    for agent, texts in prompt_example_candidates(env, seeds).items():
        counts[agent].update(texts)
    candidates = {agent: [text for text, _ in counter.most_common(max_candidates_per_role)]
                  or [""] for agent, counter in counts.items()}
    current = {agent: options[0] for agent, options in candidates.items()}
    best = play_constant_team(env, seeds, current)
    for _ in range(max_passes):
        improved = False
        for agent, options in candidates.items():
            for option in options:
                if option == current[agent]:
                    continue
                trial = {**current, agent: option}
                score = play_constant_team(env, seeds, trial)
                if score > best:
                    best, current, improved = score, trial, True
        if not improved:
            break
    return ConstantTeamResult(answers=current, success_rate=best / max(1, len(seeds)),
                              num_successes=best, num_tasks=len(seeds),
                              num_candidates={a: len(o) for a, o in candidates.items()})
