"""Pieces every task shares: argument checks and the tool stage of tool -> planner tasks."""

import dataclasses

import pytest

from pettingllms_envs.common import (
    check_sandbox_limits,
    clip_text,
    extract_python_code,
    score_tool_program,
)
from pettingllms_envs.sandbox import SandboxLimits, SandboxResult
from pettingllms_rllib.envs import ParseResult


@dataclasses.dataclass
class Outcome:
    reward: float

    def describe(self) -> str:
        return f"worth {self.reward}"


def _printed(stdout: str, *, exit_code: int = 0):
    def runner(code: str) -> SandboxResult:
        return SandboxResult(stdout=stdout, stderr="boom" if exit_code else "",
                             exit_code=exit_code, timed_out=False, killed_by_signal=None,
                             output_truncated=False, network_isolated=True, wall_time_s=0.0)
    return runner


def _score(parsed: ParseResult, runner):
    def parse_output(text: str) -> ParseResult:
        return ParseResult(value=int(text)) if text.strip().isdigit() else ParseResult(
            error="not a number")
    return score_tool_program(parsed, limits=SandboxLimits(), runner=runner, task_name="t",
                              penalty=-1.0, parse_output=parse_output,
                              simulate=lambda value: Outcome(value / 10), answer_kind="a number")


def test_tool_earns_what_its_output_would_score():
    stage = _score(extract_python_code("```python\nprint(7)\n```"), _printed("7\n"))
    assert stage.reward == pytest.approx(0.7)
    assert stage.report == "The program printed:\n```\n7\n```"
    assert stage.feedback.endswith("If played now: worth 0.7.")


@pytest.mark.parametrize("parsed,runner,reason", [
    (ParseResult(error="no complete ```python code block"), _printed("7"), "No program ran"),
    (ParseResult(value="x"), _printed("", exit_code=1), "The program failed: exit code 1"),
    (ParseResult(value="x"), _printed("seven"), "(not a number: not a number)"),
])
def test_unusable_programs_cost_the_penalty_and_say_why(parsed, runner, reason):
    stage = _score(parsed, runner)
    assert stage.reward == -1.0 and reason in stage.report and stage.report == stage.feedback


def test_a_broken_executor_is_a_penalty_not_a_crash():
    def broken(code):
        raise OSError("executor down")
    stage = _score(ParseResult(value="print(1)"), broken)
    assert stage.reward == -1.0 and "OSError" in stage.report


def test_sandbox_limits_come_from_yaml_dicts_with_clear_errors():
    assert check_sandbox_limits({"wall_time_s": 1}).wall_time_s == 1
    assert check_sandbox_limits(None).memory_mb == 256
    with pytest.raises(ValueError, match="bad sandbox_limits"):
        check_sandbox_limits({"wall_seconds": 1})
    with pytest.raises(ValueError, match="SandboxLimits or a dict"):
        check_sandbox_limits("fast")


def test_clip_text_marks_the_cut():
    assert clip_text("abc", 5) == "abc"
    assert clip_text("abcdef", 3) == "abc ...[truncated]"
