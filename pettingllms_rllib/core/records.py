"""The sample record: one sampled response plus everything the learner and the metrics need.

A record is produced for every one of the K candidates at every reached (task, agent, turn),
whether or not it was the branch the episode continued from: in AT-GRPO all K are training
data (arXiv 2510.11062, Sec. 3.2).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import NamedTuple


class GroupKey(NamedTuple):
    """The AT-GRPO comparison group: candidates that answered *the same prompt*.

    ``task`` identifies the task instance (the tree root), ``agent`` the acting agent and
    ``turn`` the turn; ``stage`` disambiguates an agent acting in several stages of one turn.
    """

    task: str
    agent: str
    turn: int
    stage: int = 0


def prompt_fingerprint(prompt: str) -> str:
    """A short stable hash of a prompt; every member of a group must share it."""
    return hashlib.sha1(prompt.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


@dataclasses.dataclass
class SampleRecord:
    """One candidate response and its outcome on its own env clone.

    Attributes:
        group_key: the (task, agent, turn) group it is compared within.
        module_id: the RLModule that generated it (``policy_mapping_fn(agent)``).
        branch: index k in 0..K-1 of the candidate within its group.
        prompt_text / prompt_fingerprint: what the agent saw (fingerprint for invariants).
        prompt_ids / response_ids / behaviour_logprobs: tokens as generated (never re-tokenised)
            and their log-probs under the sampling policy.
        reward: ``alpha * reward_team + reward_local`` as returned by the env for this branch,
            plus ``reward_credit``.
        reward_credit: with ``stage_credit="turn"``, ``alpha * team`` of the stage that ended
            this candidate's turn when its own stage did not (None: no credit was given).
        success: whether the branch's env reports the task solved after this action.
        parse_error: the role parser's complaint, or None when the response parsed.
        selected: whether this branch was the greedy continuation of the episode.
        weights_version: the runner's weights version when it was sampled.
        finish_reason: "stop" (the model ended it) or "length" (cut off at max_new_tokens).
        advantage: filled in by :mod:`pettingllms_rllib.core.advantages`.
    """

    group_key: GroupKey
    module_id: str
    branch: int
    prompt_text: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    response_text: str
    reward: float
    reward_team: float
    reward_local: float
    success: bool
    parse_error: str | None
    selected: bool = False
    reward_credit: float | None = None
    weights_version: int = 0
    finish_reason: str = "stop"
    advantage: float = 0.0

    #: The agent that produced the response; defaults to the group's agent. It differs only
    #: for trajectory-level groups (vanilla GRPO), whose key spans all agents of a task.
    agent: str = ""

    def __post_init__(self):
        if not self.agent:
            self.agent = self.group_key.agent

    @property
    def prompt_fingerprint(self) -> str:
        return prompt_fingerprint(self.prompt_text)

    @property
    def num_response_tokens(self) -> int:
        return len(self.response_ids)
