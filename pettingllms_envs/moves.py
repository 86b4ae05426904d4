"""Move lists, shared by the grid tasks (Plan-Path, Sokoban): U/D/L/R moves read from a
planner's answer or a tool program's output. Pure functions; a bad answer is a
:class:`~pettingllms_rllib.envs.ParseResult` error, never an exception."""

from __future__ import annotations

import re

from pettingllms_rllib.envs import ParseResult

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
            return ParseResult(error=f"not a move: {token[:40]!r}")
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
