"""The record every code problem source produces: :class:`CodeProblem`, with its hidden tests
as :class:`TestCase` records.

Why a module of its own: the dataset loaders (:mod:`pettingllms_envs.code_data`) and the
generated set (:mod:`pettingllms_envs.code_generated`) both build these records, and the
loaders offer the generated set as a built-in dataset. With the records below both, the
loaders import the generator and the generator imports only this module: no import cycle.
The judge (:mod:`pettingllms_envs.code_judge`) and the env read the same records.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

PROBLEM_KINDS = ("stdio", "function")
_ENTRY_POINT = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?$")


@dataclasses.dataclass(frozen=True)
class TestCase:
    """One test. stdio problems: ``input`` is stdin and ``output`` the expected stdout.
    Function problems: ``input`` is the call or its argument list (``f(1, 2)`` or ``1, 2``) and
    ``output`` the expected return value as a Python literal; or ``script`` holds statements
    that use ``candidate`` (the function) and pass when nothing raises (HumanEval asserts)."""

    input: str = ""
    output: str = ""
    script: str | None = None

    __test__ = False  # not a pytest class

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"TestCase.{name} must be str, got "
                                f"{type(getattr(self, name)).__name__}")
        if self.script is not None and (not isinstance(self.script, str)
                                        or not self.script.strip()):
            raise ValueError("TestCase.script must be non-empty text or None")

    def __deepcopy__(self, memo: dict) -> "TestCase":
        return self  # immutable

    def to_record(self) -> dict[str, str]:
        return {"script": self.script} if self.script is not None else {
            "input": self.input, "output": self.output}


@dataclasses.dataclass(frozen=True)
class CodeProblem:
    """A coding problem. ``tests`` are the hidden tests (never shown to agents).

    ``kind`` is ``"stdio"`` (read stdin, print) or ``"function"`` (define ``entry_point``: a
    function name, or ``Class.method`` for LeetCode-style ``class Solution``).
    ``starter_code`` is shown to the coder (for HumanEval it is the prompt itself);
    ``reference`` is a correct submission (what a coder would write) or None.
    """

    id: str
    prompt: str
    kind: str
    tests: tuple[TestCase, ...]
    entry_point: str | None = None
    starter_code: str = ""
    reference: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", tuple(self.tests))
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"problem id must be non-empty text, got {self.id!r}")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"{self.id}: empty problem statement")
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"{self.id}: kind {self.kind!r} not in {PROBLEM_KINDS}")
        if not self.tests or not all(isinstance(t, TestCase) for t in self.tests):
            raise ValueError(f"{self.id}: needs at least one TestCase")
        if self.kind == "function":
            if not isinstance(self.entry_point, str) or not _ENTRY_POINT.match(self.entry_point):
                raise ValueError(f"{self.id}: function problems need an entry_point like 'f' or "
                                 f"'Solution.f', got {self.entry_point!r}")
        elif self.entry_point is not None or any(t.script is not None for t in self.tests):
            raise ValueError(f"{self.id}: stdio problems take no entry_point or script tests")
        if not isinstance(self.starter_code, str) or not isinstance(self.source, str):
            raise TypeError(f"{self.id}: starter_code and source must be text")
        if self.reference is not None and (not isinstance(self.reference, str)
                                           or not self.reference.strip()):
            raise ValueError(f"{self.id}: reference must be non-empty code or None")

    def __deepcopy__(self, memo: dict) -> "CodeProblem":
        return self  # immutable: clones share it

    def to_record(self) -> dict[str, Any]:
        """The JSON-able form used by :func:`~pettingllms_envs.code_data.write_records`."""
        return {"id": self.id, "prompt": self.prompt, "kind": self.kind,
                "tests": [t.to_record() for t in self.tests], "entry_point": self.entry_point,
                "starter_code": self.starter_code, "reference": self.reference,
                "source": self.source}
