"""reasoning-gym (``reasoning_gym_v0``): any of its procedural datasets as a reasoner || tool task.

reasoning-gym (PyPI ``reasoning-gym``, Apache-2.0) generates instances of 100+ tasks from a seed,
with difficulty settings per dataset and its own answer checker, and downloads nothing. Here
an instance is one dataset entry drawn from the task seed; the checker's score of an answer
is the reward, so a reward is never decided by anything the agents print about themselves.

The workflow is math_v0's (``pettingllms_envs/math.py``): the reasoner answers in words, the
tool writes a Python program whose last printed line is its answer, both act in parallel, and
from turn 2 each sees the other's latest answer; the episode ends when their answers agree or
after ``max_turns``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
from typing import Any, Mapping

from pettingllms_envs.common import (CodeRunner, check_code_runner, check_float, check_int,
                                     check_prompt_style, check_sandbox_limits,
                                     extract_python_code, failure_headline, quote_inline,
                                     run_tool_program)
from pettingllms_envs.math import parse_program_output
from pettingllms_envs.sandbox import SandboxLimits
from pettingllms_rllib.envs import (ParseResult, Role, StageOutcome, TextParallelEnv,
                                    split_of_seed)

#: Packages a program of this task may never import (``sandbox: {packages: ...}`` naming one
#: is refused at start): ``reasoning_gym`` regenerates any instance, answer included, from
#: its seed.
SANDBOX_DATA_PACKAGES: tuple[str, ...] = ("reasoning_gym",)

logger = logging.getLogger(__name__)

#: How the prompts ask the reasoner for its answer: "The answer is ...", which ~100M-parameter
#: instruct models write unprompted (the bundled model: 0 of 32 held-out basic_arithmetic
#: answers with an ``Answer:`` label, greedy). An ``Answer:`` label is read too.
ANSWER_SENTENCE = "The answer is"
ANSWER_PREFIX = "Answer:"
#: The placeholder the prompts show (copied, it is a parse error, never an answer).
ANSWER_PLACEHOLDER = "<answer>"
MAX_ANSWER_CHARS = 200
#: Draws per seed before giving up on finding an instance of the seed's split.
MAX_SPLIT_DRAWS = 64


def available_datasets() -> list[str]:
    """The reasoning-gym dataset names this installation knows."""
    import reasoning_gym

    return sorted(reasoning_gym.factory.DATASETS)


def dataset_config_fields(dataset: str) -> list[str]:
    """The settings ``dataset`` accepts (its reasoning-gym config dataclass's fields)."""
    import reasoning_gym

    _, config_class = reasoning_gym.factory.DATASETS[dataset]
    return sorted(f.name for f in dataclasses.fields(config_class)
                  if f.name not in ("seed", "size"))


def split_of_question(question: str) -> str:
    """"train" or "test" by a SHA-256 bucket of the question, half each: small datasets repeat
    questions across seeds, and a question must never be in both splits."""
    digest = hashlib.sha256(("reasoning_gym:" + question).encode()).digest()
    return "test" if digest[0] < 128 else "train"


def parse_answer_line(text: str) -> ParseResult:
    """The reasoner's answer: what follows its last ``Answer:`` label, else its last "answer
    is", up to the end of that line (a closing full stop dropped)."""
    lowered = text.lower()
    start = lowered.rfind(ANSWER_PREFIX.lower())
    start = start + len(ANSWER_PREFIX) if start >= 0 else lowered.rfind("answer is")
    if start < 0:
        return ParseResult(error="no 'The answer is ...' or 'Answer: ...' line")
    if lowered.startswith("answer is", start):
        start += len("answer is")
    line = text[start:].strip().splitlines()
    answer = line[0].strip().rstrip(".").strip() if line else ""
    if not answer or answer == ANSWER_PLACEHOLDER:
        return ParseResult(error="empty answer line")
    if len(answer) > MAX_ANSWER_CHARS:
        return ParseResult(error=f"answer longer than {MAX_ANSWER_CHARS} characters")
    return ParseResult(value=answer)


_REASONER = Role("reasoner", f"solves the problem and ends with '{ANSWER_SENTENCE} ...'",
                 parse_answer_line)
_TOOL = Role("tool", "writes a Python program whose last printed line is the answer",
             extract_python_code)


@dataclasses.dataclass(frozen=True)
class _Answer:
    """An agent's latest answer (None: unusable) and what the other agent is shown of it
    (quoted, or a note)."""

    text: str | None
    report: str


class ReasoningGymEnv(TextParallelEnv):
    """Env card: ``reasoning_gym_v0``.

    Roles and workflow: ``reasoner`` || ``tool`` (one parallel stage per turn). The reasoner
    ends with "The answer is <answer>." or ``Answer: <answer>`` (the last such line counts;
    none, or the placeholder, is a parse error); the tool writes a ```python program, run in :mod:`pettingllms_envs.sandbox`,
    whose last printed line is its answer. From turn 2 each sees the other's latest answer.

    Reward: each agent's local reward is the dataset checker's score of its own answer
    (``score_answer``, in [0, 1]; ``invalid_action_penalty`` for an unusable response); team =
    the reasoner's score. ``success`` = the reasoner's score is 1. The episode terminates when
    both answers agree (same text after stripping and case folding), truncates after
    ``max_turns``.

    Instances: ``reset(seed=s)`` draws one entry of ``dataset`` from ``s`` (with
    ``dataset_config``); training seeds (< 1e9) only give questions of the train half, others
    of the test half (:func:`split_of_question`), redrawing from derived seeds.

    Args (keyword-only):
        dataset: a reasoning-gym dataset name (``basic_arithmetic``; :func:`available_datasets`).
        dataset_config: that dataset's settings, e.g. difficulty ({}; :func:`dataset_config_fields`).
        max_turns: turns T (2). alpha: team-reward weight (1.0).
        invalid_action_penalty: local reward of an unusable response (-1.0).
        sandbox_limits: :class:`SandboxLimits` or a dict of its fields.
        sandbox: ``{launcher: ..., packages: [...]}`` (None): the sandbox launcher
            (``unshare`` chooses the weaker one explicitly; see docs/sandbox.md) and the
            installed packages its programs may import besides the standard library;
            ``SANDBOX_DATA_PACKAGES`` and its own data are refused at construction.
        prompt_style: "compact" (default) or "full" (the roles and the episode rule explained).
        code_runner: advanced; ``code -> SandboxResult`` replacing the sandbox.
        single_agent: the reasoner alone, no tool (False).
    """

    metadata = {"name": "reasoning_gym_v0"}
    possible_agents = ["reasoner", "tool"]
    roles = {"reasoner": _REASONER, "tool": _TOOL}
    workflow = [("reasoner", "tool")]

    def __init__(self, *, dataset: str = "basic_arithmetic",
                 dataset_config: Mapping[str, Any] | None = None, max_turns: int = 2,
                 alpha: float = 1.0, invalid_action_penalty: float = -1.0,
                 sandbox_limits: SandboxLimits | Mapping[str, Any] | None = None,
                 sandbox: Mapping[str, Any] | None = None,
                 prompt_style: str = "compact", code_runner: CodeRunner | None = None,
                 single_agent: bool = False):
        known = available_datasets()
        if dataset not in known:
            raise ValueError(f"unknown reasoning-gym dataset {dataset!r}; available: {known}")
        self.dataset = dataset
        self.dataset_config = dict(dataset_config or {})
        unknown = sorted(set(self.dataset_config) - set(dataset_config_fields(dataset)))
        if unknown:
            raise ValueError(f"dataset_config keys {unknown} are not settings of {dataset!r}; "
                             f"accepted: {dataset_config_fields(dataset)}")
        self._checker = self._draw_dataset(0)  # also checks the settings' values
        self.sandbox_limits = check_sandbox_limits(
            sandbox_limits, sandbox=sandbox, data_packages=SANDBOX_DATA_PACKAGES,
            runner=code_runner)
        self.prompt_style = check_prompt_style(prompt_style)
        self.code_runner = check_code_runner(code_runner)
        self.single_agent = bool(single_agent)
        if self.single_agent:
            self.possible_agents = ["reasoner"]
            self.workflow = [("reasoner",)]
            self.roles = {"reasoner": _REASONER}
        super().__init__(alpha=check_float("alpha", alpha),
                         max_turns=check_int("max_turns", max_turns, minimum=1),
                         invalid_action_penalty=check_float("invalid_action_penalty",
                                                            invalid_action_penalty))
        self.entry: dict[str, Any] = {}
        self.answers: dict[str, _Answer] = {}

    def _draw_dataset(self, seed: int):
        import reasoning_gym

        try:
            return reasoning_gym.create_dataset(self.dataset, seed=seed, size=1,
                                                **self.dataset_config)
        except (AssertionError, TypeError, ValueError) as exc:
            raise ValueError(f"reasoning-gym {self.dataset!r} refused dataset_config "
                             f"{self.dataset_config}: {exc or type(exc).__name__}") from exc

    def clone(self) -> "ReasoningGymEnv":
        """An independent copy that shares the (read-only) checker dataset."""
        return copy.deepcopy(self, {id(self._checker): self._checker})

    # ------------------------------------------------------------------ hooks
    def _new_task(self, seed: int | None, options: Mapping[str, Any]) -> None:
        given = options.get("entry")
        if given is not None:
            self.entry = dict(given)
        else:
            self.entry = self._entry_for_seed(0 if seed is None else int(seed))
        self.answers = {agent: _Answer(None, "none yet") for agent in self.possible_agents}

    def _entry_for_seed(self, seed: int) -> dict[str, Any]:
        split = split_of_seed(seed)
        for draw in range(MAX_SPLIT_DRAWS):
            entry = self._draw_dataset(seed * MAX_SPLIT_DRAWS + draw)[0]
            if split_of_question(entry["question"]) == split:
                return entry
        raise RuntimeError(f"reasoning-gym {self.dataset!r}: no {split} question in "
                           f"{MAX_SPLIT_DRAWS} draws from seed {seed}")

    def _observe(self, agent: str) -> str:
        question = self.entry["question"].strip()
        other = "tool" if agent == "reasoner" else "reasoner"
        seen = []
        if self.turn and other in self.answers:
            said = ("The tool's program printed" if agent == "reasoner"
                    else "The reasoner answered")
            seen = [f"{said}: {self.answers[other].report}."]
        if agent == "tool":
            ask = "Write a ```python block that computes and prints the answer."
        else:
            ask = f"End with one line: {ANSWER_SENTENCE} {ANSWER_PLACEHOLDER}."
        if self.prompt_style == "compact":
            return "\n".join([f"Problem: {question}", *seen, ask])
        role = ("You are the tool agent: a reasoner solves the same problem in words."
                if agent == "tool" else
                "You are the reasoner" + ("." if self.single_agent else
                                          ": a tool agent solves the same problem with code."))
        lines = [f"Problem (turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}):",
                 question, role]
        if not self.single_agent:
            lines.append("The episode ends when both answers agree.")
        return "\n".join(lines + seen + [ask])

    def _apply_stage(self, stage: tuple[str, ...], parsed: Mapping[str, ParseResult],
                     raw: Mapping[str, str]) -> StageOutcome:
        local, feedback = {}, {}
        for agent in stage:
            answer = self._tool_answer(parsed[agent]) if agent == "tool" else (
                _Answer(parsed[agent].value, quote_inline(parsed[agent].value, 120))
                if parsed[agent].ok
                else _Answer(None, f"none ({parsed[agent].error})"))
            self.answers[agent] = answer
            if answer.text is None:
                local[agent] = self.invalid_action_penalty
                feedback[agent] = f"Unusable response: {answer.report}"
                continue
            local[agent] = self._score(answer.text)
            feedback[agent] = f"Score {local[agent]:g}."
        team = max(0.0, local.get("reasoner", 0.0))
        texts = [self.answers[a].text for a in self.possible_agents]
        agree = (not self.single_agent and None not in texts
                 and len({t.strip().casefold() for t in texts}) == 1)
        return StageOutcome(local=local, team=team, success=team == 1.0, terminated=agree,
                            feedback=feedback)

    def _score(self, answer: str) -> float:
        try:
            return float(self._checker.score_answer(answer, self.entry))
        except Exception as exc:  # a checker bug must not crash a run: the answer scores 0
            logger.warning("reasoning-gym %s: score_answer raised %r; scored 0",
                           self.dataset, exc)
            return 0.0

    def _tool_answer(self, parsed: ParseResult) -> _Answer:
        if not parsed.ok:
            return _Answer(None, f"none (no program ran: {parsed.error})")
        result, failure = run_tool_program(parsed.value, limits=self.sandbox_limits,
                                           runner=self.code_runner, task_name=self.dataset)
        if failure:
            return _Answer(None, f"none ({failure_headline(failure)})")
        output = parse_program_output(result.stdout)
        if not output.ok:
            return _Answer(None, f"none ({output.error})")
        return _Answer(output.value, quote_inline(output.value, 120))
