"""A tiny scripted text env for testing the tree sampler without a model.

``adder`` answers an integer that is added to a counter; ``checker`` answers what it believes the
counter is. The adder's local reward is the counter *after* its own step, so a branch that was
stepped on a shared (aliased) env instead of its own clone would see other branches' additions.
"""

from pettingllms_rllib.envs import ParseResult, Role, StageOutcome, TextParallelEnv


def _parse_int(text: str) -> ParseResult:
    try:
        return ParseResult(value=int(text.strip()))
    except ValueError:
        return ParseResult(error="not an integer")


class ToyCounterEnv(TextParallelEnv):
    metadata = {"name": "toy_counter_v0"}
    possible_agents = ["adder", "checker"]
    roles = {"adder": Role("adder", "adds a number", _parse_int),
             "checker": Role("checker", "reports the counter", _parse_int)}
    workflow = [("adder",), ("checker",)]

    def __init__(self, *, target: int = 5, parallel: bool = False, **kwargs):
        if parallel:
            self.workflow = [("adder", "checker")]
        super().__init__(**kwargs)
        self.target = target
        self.counter = 0

    def _new_task(self, seed, options):
        self.counter = int(self.np_random.integers(0, 3))

    def _observe(self, agent):
        return f"{agent}: counter={self.counter} target={self.target} turn={self.turn}"

    def _apply_stage(self, stage, parsed, raw):
        local = {}
        if "adder" in stage:
            if parsed["adder"].ok:
                self.counter += parsed["adder"].value
                local["adder"] = float(self.counter)
            else:
                local["adder"] = self.invalid_action_penalty
        if "checker" in stage:
            result = parsed["checker"]
            local["checker"] = (-abs(result.value - self.counter) if result.ok
                                else self.invalid_action_penalty)
        solved = self.counter == self.target
        return StageOutcome(local=local, team=float(solved), success=solved, terminated=solved)


def _any_text(text: str) -> ParseResult:
    return ParseResult(value=text) if text.strip() else ParseResult(error="empty")


class ToyScoreEnv(TextParallelEnv):
    """Rewards arbitrary text with a fixed pseudo-random score, so even a random tiny model's
    K samples get different rewards (a non-zero GRPO signal for integration tests)."""

    metadata = {"name": "toy_score_v0"}
    possible_agents = ["writer", "reviewer"]
    roles = {"writer": Role("writer", "writes", _any_text),
             "reviewer": Role("reviewer", "reviews", _any_text)}
    workflow = [("writer",), ("reviewer",)]

    def __init__(self, *, writer_only: bool = False, **kwargs):
        if writer_only:  # the one-agent variant, for "one role alone" evaluations
            self.possible_agents = ["writer"]
            self.workflow = [("writer",)]
        super().__init__(**kwargs)
        self.topic = 0

    def _new_task(self, seed, options):
        self.topic = int(self.np_random.integers(0, 100))

    def _observe(self, agent):
        last = self.last_responses.get("writer", "")[:40]
        return f"You are the {agent}. Topic {self.topic}, turn {self.turn}. Writer said: {last}"

    def _apply_stage(self, stage, parsed, raw):
        local = {a: (sum(map(ord, raw[a])) % 11) / 10 if parsed[a].ok
                 else self.invalid_action_penalty for a in stage}
        return StageOutcome(local=local, team=0.0, success=False)
