"""Quoting untrusted text into a prompt: another agent's answer, a program's output.

Why: a policy is optimised to raise its reward, and what one agent or one program writes is
shown to another agent. Rendered raw, a printed line such as ``Problem: ...`` or ``You are the
planner ...`` sits beside the env's own lines and reads as the env speaking (prompt injection
between agents). Every such text is therefore shown *inside a delimited block that the prompt
names as someone's output*, and the block cannot be closed from inside:

- :func:`quote_inline` renders it as one JSON string literal (``"12"``): quotes and newlines are
  escaped, so the text can neither end the literal nor start a line of its own.
- :func:`quote_block` renders it as a fenced block whose fence is longer than any run of
  backticks in the text (the CommonMark rule), so the text cannot end the block early.

Special tokens (``<|im_start|>``) are a separate layer: the engines encode every prompt's text
with special tokens split (``engines/base.encode_untrusted_text``), so printed ChatML never
becomes a role token whichever way it is quoted. ``docs/custom_env.md`` asks user envs to quote
the same way; the shipped tasks all do (``tests/tasks/test_quoting.py``).
"""

from __future__ import annotations

import json
import re

#: What a clipped text ends with, so an agent sees the text was cut.
TRUNCATION_MARK = " ...[truncated]"

_BACKTICK_RUN = re.compile(r"`+")


def clip_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a visible marker (for prompts and feedback)."""
    return text if len(text) <= limit else text[:limit] + TRUNCATION_MARK


def quote_inline(text: str, limit: int) -> str:
    """``text`` clipped to ``limit`` characters as one JSON string literal: a single line
    that no quote, backslash or newline inside the text can end early."""
    return json.dumps(clip_text(text, limit), ensure_ascii=False)


def quote_block(text: str, limit: int, *, info: str = "") -> str:
    """``text`` clipped to ``limit`` characters inside a fenced block (```` ```info ````) whose
    fence is one backtick longer than the longest backtick run in the text (at least three),
    so nothing inside can close it. An empty text shows as ``(empty)`` inside the block."""
    body = clip_text(text.strip("\n"), limit)
    longest = max((len(run) for run in _BACKTICK_RUN.findall(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body if body.strip() else '(empty)'}\n{fence}"
