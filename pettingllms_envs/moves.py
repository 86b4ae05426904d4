"""Move lists, shared by the grid tasks (Plan-Path, Sokoban): U/D/L/R moves read from a
planner's answer or a tool program's output (pure functions; a bad answer is a
:class:`~pettingllms_rllib.envs.ParseResult` error, never an exception), and
:class:`MoveListEnv`, their common tool -> planner base: the role lines of the prompts and how
a planner's move list is applied."""

from __future__ import annotations

import dataclasses
import re

from pettingllms_envs.common import (
    ToolPlannerEnv, check_code_runner, check_float, check_int, check_prompt_style,
    check_sandbox_limits)
from pettingllms_rllib.envs import ParseResult, quote_inline

#: Move letter -> (row delta, col delta); row 0 is the top row.
MOVES: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_MOVE_WORDS = {"u": "U", "up": "U", "d": "D", "down": "D",
               "l": "L", "left": "L", "r": "R", "right": "R"}
_TOKEN = re.compile(r"[^\s,;]+")
_TOKEN_STRIP = "[](){}<>'\"`*.!?:-"
_COMPACT = re.compile(r"[UDLR]+")
_MOVES_LABEL = re.compile(r"\bmoves\s*:", re.IGNORECASE)
MAX_PARSED_MOVES = 10_000


def parse_move_tokens(text: str) -> ParseResult:
    """Read moves from free text: U/D/L/R letters or up/down/left/right words (any case),
    separated by spaces, commas or semicolons; brackets, quotes and ``*`` around tokens are
    ignored and an upper-case run like ``RRD`` is three moves. Any other token is an error."""
    moves: list[str] = []
    for match in _TOKEN.finditer(text):  # lazy: a bad first token costs nothing to reject
        token = match.group().strip(_TOKEN_STRIP)
        if not token:
            continue
        word = _MOVE_WORDS.get(token.lower()) if len(token) <= 5 else None
        if word:
            moves.append(word)
        elif len(token) <= MAX_PARSED_MOVES and _COMPACT.fullmatch(token):
            moves.extend(token)
        else:
            return ParseResult(error=f"not a move: {quote_inline(token, 40)}")
        if len(moves) > MAX_PARSED_MOVES:
            return ParseResult(error=f"more than {MAX_PARSED_MOVES} moves")
    if not moves:
        return ParseResult(error="no moves given")
    return ParseResult(value=tuple(moves))


def parse_planner_answer(text: str) -> ParseResult:
    """The planner's answer: the moves on the LAST line containing ``Moves:`` (any case)."""
    last = None
    for last in _MOVES_LABEL.finditer(text):
        pass
    if last is None:
        return ParseResult(error="no 'Moves:' line")
    line_end = text.find("\n", last.end())
    return parse_move_tokens(text[last.end(): line_end if line_end >= 0 else len(text)])


def parse_program_output(stdout: str) -> ParseResult:
    """The tool program's stdout: a ``Moves:`` line if there is one, else all of stdout."""
    if _MOVES_LABEL.search(stdout):
        return parse_planner_answer(stdout)
    result = parse_move_tokens(stdout)
    return result if result.ok or stdout.strip() else ParseResult(error="program printed nothing")


@dataclasses.dataclass(frozen=True)
class MoveListOutcome:
    """What applying a move list did: the part every grid task shares. Subclasses add where
    the moves led (:meth:`_where`) and what counts as done (:meth:`_done`)."""

    reward: float
    applied: tuple[str, ...]
    invalid_move: str | None
    ignored: int

    def describe(self) -> str:
        """One line for the tool's report and the planner's feedback."""
        parts = [f"{len(self.applied)} move(s) applied, {self._where()}"]
        if self.invalid_move:
            parts.append(self.invalid_move)
        if self.ignored:
            parts.append(f"{self.ignored} move(s) ignored")
        done = self._done()
        if done:
            parts.append(done)
        return "; ".join(parts)

    def _where(self) -> str:
        raise NotImplementedError

    def _done(self) -> str | None:
        """What to say when the moves finished the task, else None."""
        raise NotImplementedError


class MoveListEnv(ToolPlannerEnv):
    """A tool -> planner task whose answer is a move list; each subclass's env card says what
    the moves do and how they score.

    Roles and workflow (sequential, one turn = both stages): ``tool`` then ``planner``
    (``workflow = [("tool",), ("planner",)]``).

    * ``tool``: writes a program in a ```python fenced block that prints a move list (e.g.
      ``print("R D D")``). It runs in :mod:`~pettingllms_envs.sandbox` with ``sandbox_limits``.
      Local reward: the score the printed moves *would* earn if the planner played them now
      (simulated; the state does not change), or ``invalid_action_penalty`` if there is no
      code block, the program fails or times out, or its output is not a move list.
    * ``planner``: sees the tool's latest output (or error) and answers a line
      ``Moves: R D ...`` (the last such line counts; letters U/D/L/R or words
      up/down/left/right, any case, separated by spaces or commas). No such line or no moves:
      parse error, ``invalid_action_penalty``, state unchanged. Otherwise at most
      ``max_moves_per_turn`` moves are applied and the local reward is their simulated score.

    Subclasses say what the program computes and where the moves lead (:meth:`_role_lines`),
    simulate a move list (``_simulate``, returning an outcome with ``reward``, ``applied`` and
    ``describe()``) and take its end state (:meth:`_take_outcome`); they keep ``moves_taken``.
    """

    #: The answers' fixed starts when ``prefill_answers`` is on: the planner's label, and the
    #: tool's code fence (with ``print('`` too in the compact prompt, which asks for a printed
    #: move list).
    PLANNER_PREFIX = "Moves:"
    TOOL_PREFIX = "```python\n"
    COMPACT_TOOL_PREFIX = "```python\nprint('"

    def __init__(self, *, alpha: float, max_turns: int, invalid_action_penalty: float,
                 max_moves_per_turn: int, sandbox_limits, prompt_style: str, code_runner,
                 single_agent: bool, max_observation_chars: int, prefill_answers: bool = False,
                 sandbox=None, data_packages: tuple[str, ...] = ()):
        """Check the settings every move-list task shares (each env card documents them), then
        start the base env; a subclass checks its own settings first."""
        if not isinstance(prefill_answers, bool):
            raise ValueError(f"prefill_answers must be true or false, got {prefill_answers!r}")
        self.prefill_answers = prefill_answers
        check_int("max_turns", max_turns, minimum=1)
        self.max_moves_per_turn = check_int("max_moves_per_turn", max_moves_per_turn, minimum=1)
        self.sandbox_limits = check_sandbox_limits(sandbox_limits, sandbox=sandbox,
                                                   data_packages=data_packages,
                                                   runner=code_runner)
        self.prompt_style = check_prompt_style(prompt_style)
        self.code_runner = check_code_runner(code_runner)
        self._choose_team(single_agent)
        super().__init__(alpha=check_float("alpha", alpha), max_turns=max_turns,
                         invalid_action_penalty=check_float("invalid_action_penalty",
                                                             invalid_action_penalty),
                         max_observation_chars=max_observation_chars)
        self.moves_taken: list[str] = []
        self._reset_tool_report()

    def _role_lines(self, agent: str, *, program: str, goal: str) -> list[str]:
        """The role part of the full prompt: the tool's program ``program`` (what it computes,
        ending in " and "), the planner's ``goal`` (where the moves must lead)."""
        example, example_line = self.example_answer()
        if agent == "tool":
            return ["You are the tool agent. Write a Python program in a ```python fenced block "
                    f"that {program}prints the moves on one line, e.g. print({example!r}). It "
                    f"runs in a sandbox with a {self.sandbox_limits.wall_time_s:g} s limit."]
        return [f"Tool agent's latest result:\n{self.tool_report}",
                f"You are the planner. Decide the moves {goal} (at most "
                f"{self.max_moves_per_turn}) and end with one line 'Moves: <moves>', "
                f"e.g. '{example_line}'."]

    def answer_prefix(self, agent: str) -> str:
        """With ``prefill_answers``, the model continues ``Moves:`` (planner) or the code
        fence (tool) and only chooses the moves: format and content are not learned together
        (docs/design.md, "Answer prefixes")."""
        if not self.prefill_answers:
            return ""
        if agent == "planner":
            return self.PLANNER_PREFIX
        return self.COMPACT_TOOL_PREFIX if self.prompt_style == "compact" else self.TOOL_PREFIX

    def _compact_role_lines(self, agent: str) -> list[str]:
        """The role part of the compact prompt (``prompt_style="compact"``)."""
        example, example_line = self.example_answer()
        if agent == "tool":
            return [f"Write a ```python block that prints the moves, like: print({example!r})"]
        return [f"Tool: {self.tool_report_compact}",
                f"Answer with one line like: {example_line}"]

    def _parse_tool_output(self, stdout: str) -> ParseResult:
        return parse_program_output(stdout)

    def _apply_planner(self, parsed: ParseResult) -> tuple[float, str]:
        if not parsed.ok:
            return self.invalid_action_penalty, f"Answer not understood: {parsed.error}."
        outcome = self._simulate(parsed.value)
        self._take_outcome(outcome)
        self.moves_taken.extend(outcome.applied)
        return outcome.reward, outcome.describe() + "."

    def _take_outcome(self, outcome) -> None:
        """Move to where ``outcome`` ended (the agent's position, the level's state)."""
        raise NotImplementedError
