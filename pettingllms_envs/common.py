"""Pieces every task of the suite shares: argument checks, reading code out of a response,
running a tool agent's program, and clipping text shown back to agents.

Why one module: the same rule ("the LAST complete ```python block counts", "a runner failure is
a penalised action, never a crash") must mean the same thing in every task, or a policy trained
on one task would be scored by different rules on another.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
from typing import Any, Callable, Collection, Mapping, Protocol, Sequence

import numpy as np

from pettingllms_envs.sandbox import (SandboxLimits, SandboxResult, SandboxUnavailableError,
                                      run_python, sandbox_capabilities)
from pettingllms_envs.sandbox.interpreter import check_packages, package_binds
from pettingllms_rllib.envs.instances import hash_split  # noqa: F401  (the tasks' split)
from pettingllms_rllib.envs import ParseResult, Role, StageOutcome, TextParallelEnv
from pettingllms_rllib.envs import quoting as envs_quoting
from pettingllms_rllib.envs.quoting import quote_block, quote_inline

logger = logging.getLogger(__name__)

#: ``code -> SandboxResult``: what runs a tool agent's program (the sandbox by default; a remote
#: executor or a fake in tests).
CodeRunner = Callable[[str], SandboxResult]
PYTHON_FENCE_TAGS = frozenset({"python", "py", "python3"})
REPORT_CHARS = 600
#: "full": the paper-style prompt with legend, rules and history; "compact": a few lines with
#: the state and the answer format, for ~100M-parameter models that lose the format in long
#: prompts. Every task accepts both.
PROMPT_STYLES = ("full", "compact")


# ------------------------------------------------------------------------------ text
def clip_text(text: str, limit: int = REPORT_CHARS) -> str:
    """:func:`pettingllms_rllib.envs.clip_text` with the tasks' default report length."""
    return envs_quoting.clip_text(text, limit)


def split_python_blocks(text: str) -> tuple[list[str], str]:
    """The complete ```python (or ```py / ```python3) fenced blocks of ``text``, and the text
    outside them (blocks in other languages and an unclosed block stay outside).

    A line scanner, not a regex, so hostile input (thousands of unclosed fences) stays linear.
    """
    blocks: list[str] = []
    outside: list[str] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        fence = stripped.startswith("```") and len(stripped) < 64
        tag = stripped.lstrip("`").strip().lower() if fence else ""
        if lang is None:
            if fence:
                lang, body = tag, [line]
            else:
                outside.append(line)
        elif fence and not tag:
            if lang in PYTHON_FENCE_TAGS:
                blocks.append("\n".join(part.rstrip("\r") for part in body[1:]))
            else:
                outside += body + [line]
            lang = None
        else:
            body.append(line)
    if lang is not None:
        outside += body
    return blocks, "\n".join(outside)


def extract_python_code(text: str) -> ParseResult:
    """The LAST complete ```python (or ```py / ```python3) fenced block of a response
    (:func:`split_python_blocks`)."""
    blocks, _ = split_python_blocks(text)
    if not blocks:
        return ParseResult(error="no complete ```python code block")
    if not blocks[-1].strip():
        return ParseResult(error="empty ```python code block")
    return ParseResult(value=blocks[-1])


# ------------------------------------------------------------------------------ running code
class ProgramVerdicts:
    """The sandbox's verdicts of recent programs, so a program runs once however often it
    is submitted.

    The K candidates of a tool stage are often the same program (a small model repeats
    itself), and each is scored on its own env clone: without this they would run K times.
    A tool program has no input but its code (stdin is empty), so ``(code, limits)`` names its
    run; identical programs share the first run's verdict (output, exit status, limit hit).
    Only the default sandbox's verdicts are kept: a user's ``code_runner`` may be stateful or
    remote, and a runner that raised left nothing to share. Least recently used entries go
    first beyond ``capacity`` (0 turns sharing off).
    """

    def __init__(self, capacity: int = 256):
        self.capacity = int(capacity)
        self._verdicts: collections.OrderedDict[tuple[str, SandboxLimits], SandboxResult] = (
            collections.OrderedDict())
        self._lock = threading.Lock()
        self.hits = self.runs = 0

    def run(self, code: str, limits: SandboxLimits) -> SandboxResult:
        key = (code, limits)
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                self.hits += 1
                return self._verdicts[key]
        result = run_python(code, limits=limits)
        with self._lock:
            self.runs += 1
            if self.capacity > 0:
                self._verdicts[key] = result
                while len(self._verdicts) > self.capacity:
                    self._verdicts.popitem(last=False)
        return result

    def clear(self) -> None:
        with self._lock:
            self._verdicts.clear()
            self.hits = self.runs = 0


#: The process's shared verdicts of tool programs run in the default sandbox.
PROGRAM_VERDICTS = ProgramVerdicts()


def run_tool_program(code: str, *, limits: SandboxLimits, runner: CodeRunner | None = None,
                     task_name: str = "task") -> tuple[SandboxResult | None, str | None]:
    """Run a tool agent's program; returns ``(result, None)`` or ``(None, reason)``.

    Identical programs under identical limits run once (:data:`PROGRAM_VERDICTS`).
    ``reason`` is set when the program could not be used: the runner raised (logged, never
    re-raised: an executor failure must not crash a training run) or the program failed
    (non-zero exit, signal, timeout). The caller scores that as an invalid action.
    """
    try:
        result = runner(code) if runner is not None else PROGRAM_VERDICTS.run(code, limits)
    except SandboxUnavailableError:
        raise  # no sandbox on this host: stop the run, never score it as the agent's failure
    except Exception as exc:
        logger.warning("%s: code runner raised %r", task_name, exc)
        return None, f"The program could not be run ({type(exc).__name__})."
    if not result.ok:
        return None, describe_program_failure(result)
    return result, None


def describe_program_failure(result: SandboxResult, limit: int = 300) -> str:
    """Why a program failed, for a prompt: the sandbox's reason, then the end of what the
    program wrote to stderr quoted (the traceback's last lines say most; the quote keeps
    printed text from reading as the env's own lines). The first line holds no byte of the
    program's."""
    tail = result.stderr.strip()
    text = "The program failed: " + result.failure_reason()
    if not tail:
        return text
    cut = tail[-limit:]
    return f"{text}\nIts stderr ended with: {quote_inline(cut, limit)}"


def failure_headline(failure: str) -> str:
    """The first line of :func:`run_tool_program`'s failure text: the sandbox's or the
    runner's own words, no byte of the program's (for one-line reports)."""
    return failure.partition("\n")[0]


class ScoredOutcome(Protocol):
    """A task's score of one answer (e.g. a move list): its reward and a one-line account."""

    reward: float
    #: Whether the answer would solve the task from the current state.
    solved: bool

    def describe(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class ToolStageResult:
    """What a tool agent's turn produced: its local reward, the report the planner reads next
    (``report`` in the full prompt, ``compact_report`` in the compact one) and the feedback
    shown in the tool's ``infos``. The program's output appears in each only quoted
    (:mod:`pettingllms_rllib.envs.quoting`)."""

    reward: float
    report: str
    feedback: str
    compact_report: str


def score_tool_program(parsed: ParseResult, *, limits: SandboxLimits, runner: CodeRunner | None,
                       task_name: str, penalty: float, parse_output: Callable[[str], ParseResult],
                       simulate: Callable[[Any], ScoredOutcome], answer_kind: str,
                       if_used: str = "If played now",
                       compact_chars: int = 120) -> ToolStageResult:
    """The tool stage shared by the tool -> planner tasks (plan_path, sokoban, sudoku).

    The tool's program runs in the sandbox; its stdout is read by ``parse_output`` and scored
    by ``simulate`` (``answer -> outcome`` with ``.reward`` and ``.describe()``) *without
    changing the state*, so the
    tool earns exactly what the planner would earn by answering its output now. No code, a
    failed program or unreadable output costs ``penalty``; the reason goes into the report.
    The full report quotes stdout as a fenced block, the compact one (at most
    ``compact_chars`` of it) as one string literal.
    """
    if not parsed.ok:
        report = f"No program ran: {parsed.error}."
        return ToolStageResult(penalty, report, report, clip_text(report, compact_chars))
    result, failure = run_tool_program(parsed.value, limits=limits, runner=runner,
                                       task_name=task_name)
    if failure:
        return ToolStageResult(penalty, failure, failure, failure_headline(failure))
    answer = parse_output(result.stdout)
    printed = result.stdout.strip()
    report = "The program printed:\n" + quote_block(printed, REPORT_CHARS)
    compact = "The program printed: " + quote_inline(printed, compact_chars)
    if not answer.ok:
        note = f"(not {answer_kind}: {answer.error})"
        return ToolStageResult(penalty, f"{report}\n{note}", f"{report}\n{note}",
                               f"{compact} {note}")
    outcome = simulate(answer.value)
    return ToolStageResult(outcome.reward, report, f"{report}\n{if_used}: {outcome.describe()}.",
                           compact)


def tool_role(program_task: str) -> Role:
    """The tool of a tool -> planner task: writes a program that ``program_task``."""
    return Role(name="tool",
                description=f"Writes a Python program (in a ```python block) that "
                            f"{program_task}; the program runs in a sandbox.",
                parse=extract_python_code)


def planner_role(answer: str, parse: Callable[[str], ParseResult]) -> Role:
    """The planner of a tool -> planner task: reads the program's output, answers ``answer``."""
    return Role(name="planner",
                description=f"Reads the tool's program output and answers {answer}.",
                parse=parse)


class ToolPlannerEnv(TextParallelEnv):
    """Base of the tool -> planner tasks (plan_path, sokoban, sudoku): the shared workflow, stage
    dispatch and tool stage, so all three score a turn by the same rule.

    A subclass sets ``roles`` (or ``self.roles``), ``sandbox_limits``, ``code_runner``,
    ``tool_report`` and :attr:`answer_kind`, and implements :meth:`_parse_tool_output`,
    :meth:`_simulate` (score an answer without changing the state), :meth:`_apply_planner` and
    :meth:`_solved`. Team reward and success are "solved after this stage", which terminates.
    """

    possible_agents = ["tool", "planner"]
    workflow = [("tool",), ("planner",)]
    #: How the tool's output is named in its report ("not a move list: ...").
    answer_kind = "an answer"
    #: How the simulated score is introduced in the tool's feedback.
    simulated_as = "If played now"

    def _choose_team(self, single_agent: bool) -> None:
        """``single_agent=True`` is the single-agent baseline (arXiv 2510.11062, Table 1): the
        planner works alone, with the same turn budget and the same feedback on its moves, and
        no tool role. Subclasses call this before ``super().__init__``."""
        self.single_agent = bool(single_agent)
        if self.single_agent:
            self.possible_agents = ["planner"]
            self.workflow = [("planner",)]
            self.roles = {"planner": self.roles["planner"]}

    def _reset_tool_report(self) -> None:
        """What the planner's prompt says under "tool" before (or without) a tool run."""
        empty = ("(no tool agent: you work alone)" if getattr(self, "single_agent", False)
                 else "(the tool has not run yet)")
        self.tool_report = self.tool_report_compact = empty

    def compact_report_chars(self) -> int:
        """How much of the program's output the compact prompt quotes."""
        return 120

    def _parse_tool_output(self, stdout: str) -> ParseResult:
        raise NotImplementedError

    def _example_candidates(self) -> Sequence[tuple[str, str]]:
        """Format examples the prompts may show, in order of preference: pairs of what the
        tool's program would print and the planner's answer line, for the same answer."""
        return ()

    def example_answer(self) -> tuple[str, str]:
        """The first candidate example (printed output, planner line) that does not solve the
        current state, so copying the prompt's example never solves the instance."""
        candidates = list(self._example_candidates())
        if not candidates:
            raise NotImplementedError(f"{type(self).__name__} shows format examples in its "
                                      "prompts but defines no _example_candidates()")
        if self._solved():  # the episode is over: no answer can be rewarded for copying
            return candidates[0]
        planner = self.roles["planner"]
        for printed, line in candidates:
            parsed = planner.safe_parse(line)
            if parsed.ok and not self._simulate(parsed.value).solved:
                return printed, line
        raise RuntimeError(f"{self.metadata['name']}: every example answer solves this state")

    def prompt_examples(self) -> dict[str, str]:
        printed, line = self.example_answer()
        examples = {"planner": line}
        if "tool" in self.possible_agents:
            examples["tool"] = f"```python\nprint({printed!r})\n```"
        return {agent: text for agent, text in examples.items() if agent in self.agents}

    def _simulate(self, answer: Any) -> ScoredOutcome:
        raise NotImplementedError

    def _apply_planner(self, parsed: ParseResult) -> tuple[float, str]:
        raise NotImplementedError

    def _solved(self) -> bool:
        raise NotImplementedError

    def _program_preamble(self) -> str:
        """Trusted code the tool's program runs after (a helper it may call); "" = none."""
        return ""

    def _run_tool(self, parsed: ParseResult) -> tuple[float, str]:
        preamble = self._program_preamble()
        if preamble and parsed.ok:
            parsed = ParseResult(value=preamble + parsed.value)
        stage = score_tool_program(
            parsed, limits=self.sandbox_limits, runner=self.code_runner,
            task_name=self.metadata["name"], penalty=self.invalid_action_penalty,
            parse_output=self._parse_tool_output, simulate=self._simulate,
            answer_kind=self.answer_kind, if_used=self.simulated_as,
            compact_chars=self.compact_report_chars())
        self.tool_report, self.tool_report_compact = stage.report, stage.compact_report
        return stage.reward, stage.feedback

    def _apply_stage(self, stage: tuple[str, ...], parsed: Mapping[str, ParseResult],
                     raw: Mapping[str, str]) -> StageOutcome:
        agent = stage[0]
        if agent == "tool":
            local, feedback = self._run_tool(parsed["tool"])
        else:
            local, feedback = self._apply_planner(parsed["planner"])
        solved = self._solved()
        return StageOutcome(local={agent: local}, team=1.0 if solved else 0.0, success=solved,
                            terminated=solved, feedback={agent: feedback})


# ------------------------------------------------------------------------------ argument checks
def check_int(name: str, value: Any, *, minimum: int) -> int:
    """``value`` as an int, or a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_float(name: str, value: Any, *, non_negative: bool = False) -> float:
    """``value`` as a finite float (>= 0 if ``non_negative``), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if non_negative and value < 0:
        raise ValueError(f"{name} must be >= 0 (it is a magnitude), got {value!r}")
    return float(value)


def reward_coefficients(config_class: type, rewards: Any, keywords: dict[str, Any], *,
                        env_class: str, log: logging.Logger, signed: Collection[str] = ()):
    """A task's reward coefficients (``rewards:`` in its env config) as ``config_class``
    (a frozen dataclass of floats): a mapping of some of its fields over the defaults, an
    instance, or None (the defaults); each coefficient a finite float, >= 0 unless named in
    ``signed`` (a reward rather than a bonus or penalty), an unknown name refused with the
    known ones. Coefficients among the constructor's other ``keywords``
    (given as keywords of their own, as env configs did before ``rewards:``: an old
    checkpoint's) are popped from it and load as ``rewards`` entries, logged."""
    known = [field.name for field in dataclasses.fields(config_class)]
    moved = {name: keywords.pop(name) for name in known if name in keywords}
    if isinstance(rewards, config_class):
        rewards = dataclasses.asdict(rewards)
    if rewards is not None and not isinstance(rewards, Mapping):
        raise ValueError(f"rewards must be a mapping of some of {known}, got "
                         f"{type(rewards).__name__}")
    given = dict(rewards or {})
    if moved:
        clash = sorted(set(moved) & set(given))
        if clash:
            raise ValueError(f"{clash} given both as keywords and in rewards: give rewards only")
        log.warning("%s reward keywords %s are now entries of rewards: loaded as rewards=%s",
                    env_class, sorted(moved), moved)
        given.update(moved)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"unknown rewards key(s) {unknown}; accepted: {known}")
    return config_class(**{name: check_float(f"rewards.{name}", value,
                                             non_negative=name not in signed)
                           for name, value in given.items()})


def refuse_unexpected_keywords(env_class: str, keywords: Mapping[str, Any]) -> None:
    """The constructor's keywords left after the retired ones were taken out: a TypeError
    naming them, as Python would for an unknown keyword argument."""
    if keywords:
        raise TypeError(f"{env_class} got unexpected keyword arguments {sorted(keywords)}")


#: ``sandbox:`` keys a task's env_config accepts (:func:`check_sandbox_limits`).
SANDBOX_KEYS = ("launcher", "packages")


def check_sandbox_limits(limits: SandboxLimits | Mapping[str, Any] | None,
                         default: SandboxLimits | None = None, *,
                         sandbox: Mapping[str, Any] | None = None,
                         data_packages: Sequence[str] = (),
                         runner: Any = None) -> SandboxLimits:
    """Accept :class:`SandboxLimits`, a dict of its fields (YAML configs) or None (``default``,
    else 3 s wall and CPU, 256 MB).

    ``sandbox`` is the task's ``sandbox:`` env_config entry: ``launcher`` (one of
    ``LAUNCHERS``; ``unshare`` chooses the weaker launcher explicitly) and ``packages`` (the
    installed packages its programs may import besides the standard library). A package in
    ``data_packages`` (the task's own data, answers or generators) or of the project itself is
    refused here, at start. Where the default sandbox runs the programs (``runner`` is None)
    the launcher is probed now, so a host where it does not work stops the run before any
    rollout (:class:`~pettingllms_envs.sandbox.SandboxUnavailableError`, with the probe's
    reason and the fix), and each package must be installed for the sandbox's interpreter.
    """
    if limits is None:
        limits = default or SandboxLimits(wall_time_s=3.0, cpu_time_s=3.0, memory_mb=256)
    elif isinstance(limits, Mapping):
        try:
            limits = SandboxLimits(**dict(limits))
        except TypeError as exc:
            raise ValueError(f"bad sandbox_limits: {exc}") from exc
    elif not isinstance(limits, SandboxLimits):
        raise ValueError(f"sandbox_limits must be SandboxLimits or a dict, got "
                         f"{type(limits).__name__}")
    if sandbox is not None:
        if not isinstance(sandbox, Mapping):
            raise ValueError(f"sandbox must be a mapping with keys {SANDBOX_KEYS}, got "
                             f"{type(sandbox).__name__}")
        unknown = sorted(set(sandbox) - set(SANDBOX_KEYS))
        if unknown:
            raise ValueError(f"sandbox: unknown keys {unknown}; accepted: {list(SANDBOX_KEYS)}")
        try:
            limits = dataclasses.replace(limits, **dict(sandbox))
        except TypeError as exc:
            raise ValueError(f"bad sandbox: {exc}") from exc
    check_packages(limits.packages, data_packages)
    if runner is None:
        caps = sandbox_capabilities(None, limits.launcher)
        package_binds(caps.python, limits.packages)
    return limits


def check_prompt_style(style: Any) -> str:
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt_style={style!r}; accepted: {PROMPT_STYLES}")
    return style


def check_code_runner(runner: Any) -> CodeRunner | None:
    """None or a callable ``code -> SandboxResult``."""
    if runner is not None and not callable(runner):
        raise ValueError("code_runner must be callable (code -> SandboxResult)")
    return runner


#: Move-list examples for the prompts of move tasks (plan_path, sokoban), in order of
#: preference; the first that does not solve the current state is shown.
EXAMPLE_MOVES = ("R D", "D R", "L U", "U L", "R R", "D D", "L L", "U U")


def check_hub_location(split: Any, config: Any) -> None:
    """A data source's ``split`` (a split name) and ``config`` (None or a config name), the
    hub dataset's coordinates in a task's ``dataset:`` mapping."""
    if not isinstance(split, str) or not split:
        raise ValueError(f"dataset split must be a split name, got {split!r}")
    if config is not None and (not isinstance(config, str) or not config):
        raise ValueError(f"dataset config must be None or a config name, got {config!r}")


def data_source(data_class: type, dataset: Any, keywords: dict[str, Any], *,
                renamed: Mapping[str, str], env_class: str, log: logging.Logger):
    """A task's data source (``dataset:`` in its env config) as ``data_class``, a frozen
    dataclass whose first field is ``source``: an instance, a mapping of its fields (an unknown
    key refused with the accepted ones), or a bare source name. Data keywords among the
    constructor's other ``keywords`` (an env config written before the mapping, an old
    checkpoint's: ``dataset`` a name beside flat keywords, each the field ``renamed`` maps it
    to) are popped from it and load as the same source, logged with its new spelling, as
    :func:`reward_coefficients` does for rewards; flat keywords beside a mapping are
    refused."""
    fields = [field.name for field in dataclasses.fields(data_class)]
    retired = {key: keywords.pop(key) for key in renamed if key in keywords}
    if retired and not isinstance(dataset, str):
        raise ValueError(f"the retired keywords {sorted(retired)} and dataset={dataset!r} "
                         f"exclude each other: give them inside dataset, as "
                         f"{sorted(renamed[key] for key in retired)}")
    if isinstance(dataset, data_class):
        return dataset
    if isinstance(dataset, Mapping):
        unknown = sorted(set(dataset) - set(fields), key=str)
        if unknown:
            raise ValueError(f"dataset has unknown keys {unknown}; accepted: {fields}")
        return data_class(**dataset)
    if not isinstance(dataset, str):
        raise ValueError(f"dataset must be a source name, a mapping of {fields} or a "
                         f"{data_class.__name__}, got {dataset!r}")
    data = data_class(source=dataset, **{renamed[key]: value for key, value in retired.items()})
    if retired:
        default = data_class()
        spelled = {"source": data.source, **{name: getattr(data, name) for name in fields[1:]
                                             if getattr(data, name) != getattr(default, name)}}
        log.warning("%s data keywords %s are retired: this is dataset=%r", env_class,
                    sorted(retired), spelled)
    return data


def named_variant(variant: Any, retired_flags: Mapping[str, Any] | None, *,
                  variants: Mapping[str, Any], env_name: str, env_class: str, env_id: str,
                  log: logging.Logger):
    """A task's named prompt variant (``variant:`` in its env config; ``variants`` maps the
    shipped names to instances of one frozen dataclass, whose fields are the prompt flags
    env configs set before the names). An instance of that class is taken as given (an
    experiment in Python). An env config written before the names (an old checkpoint) passes
    its flags as ``retired_flags`` with the default ``variant="paper"``: it loads as the
    variant they spell exactly (logged); any other combination is refused, naming the
    variants and what each sets."""
    variant_type = type(variants["paper"])
    if isinstance(variant, variant_type) and not retired_flags:
        return variant
    if not isinstance(variant, variant_type) and (not isinstance(variant, str)
                                                  or variant not in variants):
        raise ValueError(f"unknown {env_name} variant {variant!r}; known: {list(variants)}")
    if not retired_flags:
        return variants[variant]
    unknown = sorted(set(retired_flags) - {f.name for f in dataclasses.fields(variant_type)})
    if unknown:
        raise TypeError(f"{env_class} got unexpected keyword arguments {unknown}")
    if variant != "paper":
        raise ValueError(f"variant={variant!r} and the retired prompt flags "
                         f"{sorted(retired_flags)} exclude each other: give the variant only")
    try:
        spelled, why = variant_type(**retired_flags), ""
    except ValueError as exc:  # not even a valid combination: say why, then what is shipped
        spelled, why = None, f"{exc}; "
    for name, known in variants.items():
        if known == spelled:
            log.warning("%s prompt flags %s are retired: this is variant=%r", env_name,
                        sorted(retired_flags), name)
            return known
    default = variant_type()
    described = {name: {f: v for f, v in dataclasses.asdict(known).items()
                        if v != getattr(default, f)} for name, known in variants.items()}
    raise ValueError(f"the prompt flags {dict(retired_flags)} are no shipped {env_name} variant "
                     f"({why}the flags were retired; {env_id} takes variant=one of {described})")


def move_examples(moves: Sequence[str] = EXAMPLE_MOVES) -> list[tuple[str, str]]:
    """(printed, planner line) pairs for :meth:`ToolPlannerEnv._example_candidates`."""
    return [(m, f"Moves: {m}") for m in moves]
