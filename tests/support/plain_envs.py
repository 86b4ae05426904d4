"""Plain PettingZoo envs with text spaces, written as a user would write them: no
pettingllms_rllib base class, no protocol methods. ``tests/envs/test_wrappers.py`` and
``tests/integration/test_wrapped_envs.py`` wrap them (``wrap_parallel_env`` / ``wrap_aec_env``)."""

import gymnasium
import numpy as np
from pettingzoo import AECEnv, ParallelEnv

TEXT = gymnasium.spaces.Text(max_length=256)
WORDS = ("apple", "river", "candle", "tiger")


class ClueGame(ParallelEnv):
    """Sequential: the describer writes a clue, then the guesser names the word. Says who acts
    in ``infos["acting"]`` and splits its reward into team and local parts."""

    metadata = {"name": "clue_game_v0"}
    possible_agents = ["describer", "guesser"]

    def __init__(self, max_rounds: int = 2):
        self.max_rounds = max_rounds
        self.seen: list[dict] = []

    def observation_space(self, agent):
        return TEXT

    def action_space(self, agent):
        return TEXT

    def _obs(self):
        return {"describer": f"Secret word: {self.word}. Write 'Clue: ...'.",
                "guesser": f"Clue: {self.clue}. Answer 'Guess: <word>'."}

    def reset(self, seed=None, options=None):
        self.np_random = np.random.default_rng(seed)
        self.word = WORDS[int(self.np_random.integers(len(WORDS)))]
        self.clue, self.round, self.next = "(none)", 0, "describer"
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {"acting": a == "describer"} for a in self.agents}

    def step(self, actions):
        self.seen.append(dict(actions))
        mover, rewards = self.next, {a: 0.0 for a in self.agents}
        infos = {a: {} for a in self.agents}
        solved = False
        if mover == "describer":
            self.clue = actions["describer"].partition("Clue:")[2].strip() or "(none)"
            self.next = "guesser"
        else:
            guess = actions["guesser"].partition("Guess:")[2].strip().lower()
            solved = guess == self.word
            rewards["guesser"] = 1.0 if solved else 0.0
            infos["guesser"].update(reward_team=rewards["guesser"], reward_local=0.0,
                                    parse_error=None if guess else "no 'Guess:' line")
            self.round += 1
            self.next = "describer"
        done = solved or self.round >= self.max_rounds
        for agent in self.agents:
            infos[agent].update(acting=not done and agent == self.next, success=solved)
        terminations = {a: solved for a in self.agents}
        truncations = {a: done and not solved for a in self.agents}
        observations = self._obs()
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


class VoteGame(ParallelEnv):
    """Parallel, and as bare as PettingZoo allows: no protocol keys in infos at all; both
    agents answer every step; each is paid 1 for saying the shown number."""

    metadata = {"name": "vote_game_v0"}
    possible_agents = ["left", "right"]

    def observation_space(self, agent):
        return TEXT

    def action_space(self, agent):
        return TEXT

    def reset(self, seed=None, options=None):
        self.np_random = np.random.default_rng(seed)
        self.number, self.steps = int(self.np_random.integers(10)), 0
        self.agents = list(self.possible_agents)
        return {a: f"Say {self.number}." for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.steps += 1
        rewards = {a: float(actions[a].strip() == str(self.number)) for a in self.agents}
        self.number = int(self.np_random.integers(10))
        done = self.steps >= 2
        result = ({a: f"Say {self.number}." for a in self.agents}, rewards,
                  {a: False for a in self.agents}, {a: done for a in self.agents},
                  {a: {} for a in self.agents})
        if done:
            self.agents = []
        return result


class RelayAEC(AECEnv):
    """Turn-based AEC: ``first`` then ``second``; the second is paid when it repeats what the
    first said. One round."""

    metadata = {"name": "relay_aec_v0"}
    possible_agents = ["first", "second"]

    def observation_space(self, agent):
        return TEXT

    def action_space(self, agent):
        return TEXT

    def reset(self, seed=None, options=None):
        self.np_random = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.said = f"token{int(self.np_random.integers(100))}"
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = dict(self.rewards)
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = "first"

    def observe(self, agent):
        return f"{agent}: the word is {self.said}."

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self.rewards = {a: 0.0 for a in self.agents}
        if agent == "first":
            self.said = action.strip() or self.said
            self.agent_selection = "second"
        else:
            right = action.strip() == self.said
            self.rewards["second"] = 1.0 if right else 0.0
            self.infos = {a: {"success": right} for a in self.agents}
            self.terminations = {a: True for a in self.agents}
            self.agent_selection = "first"
        self._accumulate_rewards()
