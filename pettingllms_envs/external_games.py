"""Cooperative games that nobody here wrote, registered as text envs (issue 41, item 5).

OpenSpiel games played through :mod:`pettingllms_rllib.envs.openspiel_env` with a shared team
payoff (``payoffs="team"``: every player is paid the players' mean payoff). Prompts are kept
short for SmolLM2-135M on a CPU. List this module under ``imports:`` in an experiment file
(``tune_configs/bargaining_cpu.yaml``).

* ``bargaining_team_v0``: OpenSpiel's ``bargaining`` (1,000 deals: 804 train / 196 test) with
  ``max_turns=2``: the proposer offers a split of a pool of books, hats and basketballs (an
  offer names the items the proposer keeps; the responder gets the rest), then the responder
  answers ``Agree`` (the split is paid) or anything else (the lowest-id legal move, a
  counter-offer, which ends the game with no deal: 0 to both). Each sees only its own values.
  Team payoff: the mean of both players' values for what they end with (at most 10). The
  proposer's answer starts with the prefix ``Offer: Book: `` (``envs.base.Prompt``); the
  prompts show no list of legal moves (up to 48 offers: too long for the model and the CPU).
  The skill: keep the items you value, leave the ones you do not (the partner's values are
  hidden, so the items worth nothing to you are the best guess of what it values), and
  accept a split that is good for the team.
* ``tiny_bridge_team_v0``: OpenSpiel's ``tiny_bridge_2p`` (uncontested bidding of two
  partners, 420 deals: 345 / 75); the contract's score, shared. Sized, not trained: a
  constant bid scores too well (docs/RESULTS.md, "An external game: OpenSpiel bargaining").
"""

from __future__ import annotations

import functools

from pettingllms_rllib.envs.base import Prompt
from pettingllms_rllib.envs.openspiel_env import OpenSpielTextEnv, openspiel_env_creator
from pettingllms_rllib.envs.registry import register_text_env
from pettingllms_rllib.envs.wrappers import wrap_parallel_env

SHORT_TEMPLATE = ("You are {role}.\n{observation}\n"
                  "Legal moves:\n{moves}\n{instructions}")

OFFER_PREFIX = "Offer: Book: "
REPLY_PREFIX = "My one-word reply:"
PROPOSER_TASK = ("Split the pool with your partner, who has other values that you cannot see. "
                 "Team score: your values of what you keep plus the partner's values of the "
                 "rest. Name the items you keep.")
RESPONDER_TASK = ("Team score: the proposer's values of what it keeps plus your values of the "
                  "rest. Reply with one word: No (no deal, score 0) or Agree (accept the "
                  "split).")


class BargainingTextEnv(OpenSpielTextEnv):
    """OpenSpiel's bargaining with role-specific short prompts (module docstring)."""

    def _prompt(self, state, player: int):
        lines = [line for line in self._observation_text(state, player).splitlines()
                 if not line.startswith(("Agreement reached", "Number of offers"))]
        observation = "\n".join(line.replace("P0 offers: Offer:", "The proposer keeps:")
                                .replace("P1 offers: Offer:", "The responder keeps:")
                                for line in lines)
        role = self.possible_agents[player]
        acting = not state.is_terminal() and player in self._acting_players(state)
        task = PROPOSER_TASK if player == 0 else RESPONDER_TASK
        text = f"You are the {role}.\n{observation}\n{task}"
        if acting and player == 0 and state.move_number() <= 1:
            return Prompt(text, answer_prefix=OFFER_PREFIX)
        if acting and player == 1:
            return Prompt(text, answer_prefix=REPLY_PREFIX)
        return text


def bargaining_text_env(**kwargs):
    """:class:`BargainingTextEnv` wrapped as a text env (``kwargs``: its arguments)."""
    return wrap_parallel_env(functools.partial(BargainingTextEnv, "bargaining"))(**kwargs)


register_text_env(
    "bargaining_team_v0",
    functools.partial(bargaining_text_env, payoffs="team", roles=("proposer", "responder"),
                      success_threshold=7.0, game_params={"max_turns": 2},
                      invalid_action_penalty=-1.0))

register_text_env(
    "tiny_bridge_team_v0",
    openspiel_env_creator("tiny_bridge_2p", payoffs="team", roles=("opener", "responder"),
                          success_threshold=20.0, invalid_action_penalty=-1.0,
                          prompt_template=SHORT_TEMPLATE,
                          instructions="You and your partner bid together. Answer with one "
                                       "legal move."))
