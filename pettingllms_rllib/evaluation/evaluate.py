"""Evaluate a team of LLM agents on a task's fixed evaluation set.

The evaluation set is the first distinct instances of seeds ``TRAIN_SEED_LIMIT,
TRAIN_SEED_LIMIT + 1, ...``: instances no training run ever draws (runners draw seeds below the
limit, and every task splits its instances by their content and
:func:`~pettingllms_rllib.envs.base.split_of_seed`), each played once however small the task's
space (a seed repeating an earlier seed's instance is skipped:
:func:`~pettingllms_rllib.envs.instances.distinct_instance_seeds`), identical for every policy
evaluated.

One episode per (task, sample): each agent generates with its module (through the same
``policy_mapping_fn`` idea as training) and the env scores it. Two switches matter for fair
comparisons (arXiv 2510.11062, review discussion):

* ``search``: test-time best-of-K per turn (the tree sampler's greedy continuation, K branches
  scored on env copies) on or off; off is a plain rollout (K = 1).
* ``decoding``: greedy (deterministic; one sample per task) or sampling at a temperature
  (several samples per task give mean@k and pass@k).

Policies come from an AT-GRPO checkpoint (its modules and mapping) or from the untrained base
model (the prompt-only baseline); the role swap loads each trained module into the other role's
seat, and ``Policies.alone`` keeps one role's module for a task played by that role alone.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Any, Mapping

import torch

from pettingllms_rllib import checkpoints
# The checkpoint readers under their names from before pettingllms_rllib.checkpoints owned the
# layout, for callers that still import them from here.
from pettingllms_rllib.checkpoints import module_dirs as checkpoint_module_dirs  # noqa: F401
from pettingllms_rllib.checkpoints import read_config as read_checkpoint_config  # noqa: F401
from pettingllms_rllib.checkpoints import resolve as resolve_checkpoint  # noqa: F401
from pettingllms_rllib.checkpoints import training_budget as training_budget_of  # noqa: F401
from pettingllms_rllib.core.records import SampleRecord
from pettingllms_rllib.core.tree_sampler import EpisodeSummary, TreeSampler
from pettingllms_rllib.engines.base import SamplingConfig
from pettingllms_rllib.engines.spec import EngineSpec
from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT, task_name
from pettingllms_rllib.envs.registry import make_text_env

logger = logging.getLogger(__name__)

DECODINGS = ("greedy", "sample")


class RoleMismatchError(ValueError):
    """The policies were trained for other roles than the task's."""


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What to evaluate on and how (every field is recorded with the results).

    Attributes:
        env: registered text env id.
        env_config: its keyword arguments (as in training).
        num_tasks: evaluation instances, seeds ``first_seed .. first_seed + num_tasks - 1``.
        samples_per_task: episodes per instance (> 1 needs ``decoding="sample"``).
        decoding: "greedy" or "sample".
        temperature: sampling temperature (and the temperature of reported log-probs).
        search: best-of-K per turn at test time (needs ``decoding="sample"``).
        num_branches: K when ``search`` is on.
        max_new_tokens: response cap per turn.
        seed: seed of the sampler.
        first_seed: first evaluation seed; at least ``TRAIN_SEED_LIMIT`` so no training instance
            is ever evaluated.
        distinct_instances: skip a seed whose instance an earlier seed already produced, so
            ``num_tasks`` counts different instances (True); False plays seeds ``first_seed ..
            first_seed + num_tasks - 1`` as they come, repeats included (how evaluations
            before 2026-12-05's instance checks chose them).
    """

    env: str
    env_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_tasks: int = 32
    samples_per_task: int = 1
    decoding: str = "greedy"
    temperature: float = 1.0
    search: bool = False
    num_branches: int = 4
    max_new_tokens: int = 64
    seed: int = 0
    first_seed: int = TRAIN_SEED_LIMIT
    distinct_instances: bool = True

    def __post_init__(self):
        if self.decoding not in DECODINGS:
            raise ValueError(f"decoding={self.decoding!r}; accepted: {DECODINGS}")
        if self.num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1 (an empty evaluation set is an error, "
                             f"not a 0% result), got {self.num_tasks}")
        if self.samples_per_task < 1:
            raise ValueError(f"samples_per_task must be >= 1, got {self.samples_per_task}")
        if self.decoding == "greedy" and self.samples_per_task > 1:
            raise ValueError("greedy decoding gives identical samples; use samples_per_task=1 "
                             "or decoding='sample'")
        if self.search and self.decoding == "greedy":
            raise ValueError("test-time search needs K different candidates: use "
                             "decoding='sample' with search=True")
        if self.search and self.num_branches < 2:
            raise ValueError(f"search needs num_branches >= 2, got {self.num_branches}")
        if self.first_seed < TRAIN_SEED_LIMIT:
            raise ValueError(f"first_seed={self.first_seed} would evaluate on training "
                             f"instances; evaluation seeds start at {TRAIN_SEED_LIMIT}")

    @functools.cached_property
    def eval_seeds(self) -> list[int]:
        """The evaluation instances' seeds; with ``distinct_instances`` raises
        :class:`~pettingllms_rllib.envs.instances.TooFewInstancesError` when the task's
        evaluation split holds fewer than ``num_tasks`` distinct instances."""
        if not self.distinct_instances:
            return list(range(self.first_seed, self.first_seed + self.num_tasks))
        from pettingllms_rllib.envs.instances import distinct_instance_seeds

        return distinct_instance_seeds(make_text_env(self.env, self.env_config), self.num_tasks,
                                       first_seed=self.first_seed)


@dataclasses.dataclass
class Policies:
    """The modules that act and which agent uses which (module id -> causal LM)."""

    modules: dict[str, Any]
    mapping: dict[str, str]
    tokenizer: Any
    source: str
    model: str
    #: The system prompt the modules were trained with (every engine puts it before each
    #: prompt, so evaluation and serving must too); None for none.
    system_prompt: str | None = None
    #: What generates for these modules (``engines/spec.py``): the checkpoint's, or for a
    #: base model (or a hand-built team) the HF engine over its modules.
    engine_spec: EngineSpec | None = None

    def __post_init__(self):
        if self.engine_spec is None:
            self.engine_spec = dataclasses.replace(
                EngineSpec.for_base_model({"name_or_path": self.model}, self.modules),
                system_prompt=self.system_prompt)

    def causal_lm(self, module_id: str):
        """The module's causal LM, its adapter switched on (``engines.checkpoint_engine.Team``)."""
        return causal_lm_of(self.modules[module_id])

    def module_states(self) -> dict[str, Any]:
        """Module id -> its inference-only RLModule state (empty for base models: an engine
        holding its own weights loads the base model's)."""
        return {module_id: module.rl_module.get_state(inference_only=True)
                for module_id, module in self.modules.items()
                if isinstance(module, _ActivatedModel)}

    def check_roles(self, agents) -> None:
        """Refuse a task whose roles are not the ones these policies were trained for."""
        if set(agents) != set(self.mapping):
            raise RoleMismatchError(
                f"the policies from {self.source} were trained for roles "
                f"{sorted(self.mapping)} but the task's roles are {sorted(agents)}")

    def swapped(self) -> "Policies":
        """The role swap: each of the two roles acts with the other role's module."""
        return dataclasses.replace(self, mapping=swap_mapping(self.mapping),
                                   source=f"{self.source} (roles swapped)")

    def alone(self, role: str) -> "Policies":
        """Only ``role`` acts, with its trained module: the "planner alone" arm, played on a
        task whose only agent is ``role`` (e.g. plan_path's ``single_agent: true``). It asks
        whether the other role's help is needed at test time once a team is trained."""
        if role not in self.mapping:
            raise KeyError(f"no role {role!r} in the policies from {self.source}; roles: "
                           f"{sorted(self.mapping)}")
        module_id = self.mapping[role]
        return dataclasses.replace(self, modules={module_id: self.modules[module_id]},
                                   mapping={role: module_id},
                                   source=f"{self.source} ({role} alone)")


def with_module_from(policies: Policies, module_id: str, donor: Policies) -> Policies:
    """``policies`` with module ``module_id`` taken from ``donor`` (e.g. the planner trained in
    one run, the tool in another: the "each role trained alone, then together" ablation)."""
    if module_id not in policies.modules:
        raise KeyError(f"no module {module_id!r} to replace; modules: {sorted(policies.modules)}")
    if module_id not in donor.modules:
        raise KeyError(f"{donor.source} has no module {module_id!r}; it has "
                       f"{sorted(donor.modules)}")
    if donor.model != policies.model:
        raise ValueError(f"cannot combine modules of different base models "
                         f"({policies.model!r} and {donor.model!r}): they share one tokenizer")
    modules = {**policies.modules, module_id: donor.modules[module_id]}
    return dataclasses.replace(policies, modules=modules,
                               source=f"{policies.source} + {module_id} from {donor.source}")


def swap_mapping(mapping: Mapping[str, str]) -> dict[str, str]:
    """``{a: A, b: B}`` -> ``{a: B, b: A}`` (pure helper, used by :meth:`Policies.swapped`)."""
    if len(mapping) != 2:
        raise ValueError(f"the role swap needs exactly two roles, got {sorted(mapping)}")
    (role_a, module_a), (role_b, module_b) = sorted(mapping.items())
    return {role_a: module_b, role_b: module_a}


def base_policies(model: str | Mapping[str, Any], agents, *,
                  tiny_model_config: Mapping[str, Any] | None = None) -> Policies:
    """The untrained base model acting for every agent (the prompt-only baseline)."""
    from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm, load_tokenizer

    spec = ModelSpec.coerce(model if tiny_model_config is None else
                            {"name_or_path": model, "tiny_config": dict(tiny_model_config)})
    return Policies(modules={"base": load_causal_lm(spec)}, mapping={a: "base" for a in agents},
                    tokenizer=load_tokenizer(spec), source=f"base model {spec.name_or_path}",
                    model=spec.name_or_path,
                    engine_spec=EngineSpec.for_base_model(dataclasses.asdict(spec), ["base"]))


def checkpoint_policies(checkpoint: str | Path, config: dict | None = None) -> Policies:
    """The trained modules of a checkpoint, with the mapping they were trained with
    (``config``: the checkpoint's config when the caller has read it already)."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule

    from pettingllms_rllib.models.loading import ModelSpec, load_tokenizer

    checkpoint = Path(checkpoint).resolve()  # RLlib reads relative paths as URIs
    if config is None:
        config = checkpoints.read_config(checkpoint)
    env = make_text_env(config["env"], config["env_config"])
    mapping = {agent: config["policy_mapping_fn"](agent, None) for agent in env.possible_agents}
    modules = {}
    for module_dir in checkpoints.module_dirs(checkpoint):
        multi_module = MultiRLModule.from_checkpoint(str(module_dir))
        for module_id in sorted(multi_module.keys()):
            modules[module_id] = _ActivatedModel(multi_module[module_id])
    spec = ModelSpec(**ModelSpec.fields_of_config(config))
    return Policies(modules=modules, mapping=mapping, tokenizer=load_tokenizer(spec),
                    source=f"checkpoint {checkpoint}", model=config["llm_model"],
                    system_prompt=config.get("system_prompt"),
                    engine_spec=EngineSpec.of_checkpoint(
                        checkpoints.read_engine_spec(checkpoint), config))


class _ActivatedModel:
    """A module's causal LM, with its LoRA adapter switched on before every use."""

    def __init__(self, rl_module):
        self.rl_module = rl_module

    def get(self):
        self.rl_module.activate()
        return self.rl_module.causal_lm


def causal_lm_of(model):
    """The causal LM a ``Policies`` module generates with (its adapter switched on)."""
    return model.get() if isinstance(model, _ActivatedModel) else model


def evaluate(policies: Policies, settings: EvalSettings, *,
             transcript: list[dict[str, Any]] | None = None,
             engine: str | None = None) -> list[EpisodeSummary]:
    """Run every (task, sample) episode; episodes come back task by task, samples in order.
    ``engine`` generates instead of the one the policies' spec names (``"vllm"``: vLLM loads
    the checkpoint's weights, as ``serve --engine vllm`` does).

    ``transcript``, when given, receives one dict per generated response (with search: all K
    candidates, the continued one ``selected``): what each agent saw and said, and its score.
    Success rates say *whether* a team works; the transcript says *what* it learned to say.
    """
    from tqdm import tqdm

    from pettingllms_rllib.engines.checkpoint_engine import (prompt_generator,
                                                             start_checkpoint_engine)

    env = make_text_env(settings.env, dict(settings.env_config))
    policies.check_roles(env.possible_agents)
    generate_prompts = prompt_generator(
        start_checkpoint_engine(policies, engine), policies, SamplingConfig(
            max_new_tokens=int(settings.max_new_tokens), temperature=float(settings.temperature),
            seed=int(settings.seed), greedy=settings.decoding == "greedy"))

    # One bar over generated responses (a turn of every task is one batched call, so it moves
    # once per turn and agent); off when stderr is not a terminal (logs, CI).
    bar = tqdm(desc=f"eval {settings.env}", unit=" responses", disable=None, leave=False)

    def generate(module_id, prompts, num_samples):
        responses = generate_prompts(module_id, prompts, num_samples)
        bar.update(len(prompts) * num_samples)
        return responses

    sampler = TreeSampler(generate, lambda agent: policies.mapping[agent],
                          num_branches=settings.num_branches if settings.search else 1)
    by_task: dict[int, list[EpisodeSummary]] = {seed: [] for seed in settings.eval_seeds}
    with bar:
        _play(env, sampler, settings, by_task, transcript)
    return [episode for seed in settings.eval_seeds for episode in by_task[seed]]


def _play(env, sampler: TreeSampler, settings: EvalSettings,
          by_task: dict[int, list[EpisodeSummary]], transcript) -> None:
    """Every sample round over all evaluation tasks, batched; episodes into ``by_task``."""
    for sample in range(settings.samples_per_task):
        roots = {}
        for seed in settings.eval_seeds:
            root = env.clone()
            root.reset(seed=seed)
            roots[task_name(settings.env, seed)] = root
        with torch.no_grad():
            result = sampler.run(roots)
        seed_of = {task_name(settings.env, seed): seed for seed in settings.eval_seeds}
        for episode in result.episodes:  # by name: a task whose env raised is not among them
            by_task[seed_of[episode.task]].append(episode)
        if result.dropped_tasks:
            logger.warning("evaluation: %d task(s) dropped because their env raised: %s",
                           len(result.dropped_tasks), ", ".join(result.dropped_tasks))
        if transcript is not None:
            transcript.extend(transcript_entry(record, sample, env) for record in result.records)
        logger.info("evaluation sample %d/%d: success %.3f", sample + 1,
                    settings.samples_per_task,
                    sum(e.success for e in result.episodes) / max(1, len(result.episodes)))


def transcript_entry(record: SampleRecord, sample: int, env: Any = None) -> dict[str, Any]:
    """One generated response as ``transcripts.jsonl`` and the team server report it.

    ``action`` is what the env's parser read from the response (``env.roles[agent]``; JSON
    as it is, otherwise its ``repr``), None when it did not parse or the env has no role
    parsers (a wrapped PettingZoo env parses inside its own ``step``).
    """
    key = record.group_key
    return {"task": key.task, "sample": sample, "agent": key.agent, "turn": key.turn,
            "stage": key.stage, "branch": record.branch, "selected": record.selected,
            "prompt": record.prompt_text, "response": record.response_text,
            "action": _parsed_action(env, record.agent, record.response_text),
            "reward": record.reward, "reward_team": record.reward_team,
            "reward_local": record.reward_local, "success": record.success,
            "parse_error": record.parse_error}


def write_transcript(path: str | Path, entries: list[dict[str, Any]]) -> None:
    """Write :func:`transcript_entry` dicts as JSON lines: ``eval``'s ``transcripts.jsonl``
    and each held-out evaluation's file during training."""
    import json

    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(entry) + "\n" for entry in entries)


def _parsed_action(env: Any, agent: str, response: str) -> Any:
    import json

    role = getattr(env, "roles", {}).get(agent) if env is not None else None
    if role is None:
        return None
    parsed = role.safe_parse(response)
    if not parsed.ok:
        return None
    try:
        json.dumps(parsed.value)
        return parsed.value
    except (TypeError, ValueError):
        return repr(parsed.value)


def run_evaluation(policies: Policies, settings: EvalSettings, out_dir: str | Path, *,
                   label: str, arm: str | None = None, seed: int | None = None,
                   training_budget: Mapping[str, Any] | None = None,
                   engine: str | None = None) -> dict[str, Any]:
    """Evaluate, then write ``eval.json`` (settings + summary + the best constant answer on
    the same instances, searched over this run's responses and the prompts' examples: see
    ``constant_answers.py``), ``episodes.csv`` (one row per episode) and ``transcripts.jsonl``
    (every response, see :func:`evaluate`) into ``out_dir``; returns the record. Format: see
    ``metrics.summarize``."""
    import csv
    import json

    from pettingllms_rllib.evaluation.constant_answers import best_constant_answer
    from pettingllms_rllib.evaluation.metrics import episodes_csv_rows, summarize

    transcript: list[dict[str, Any]] = []
    episodes = evaluate(policies, settings, transcript=transcript, engine=engine)
    summary = summarize(episodes, samples_per_task=settings.samples_per_task)
    responses: dict[str, list[str]] = {}
    for entry in transcript:
        responses.setdefault(entry["agent"], []).append(entry["response"])
    constant = best_constant_answer(settings.env, settings.env_config, settings.eval_seeds,
                                    responses)
    record = {
        "label": label, "arm": arm or label, "seed": seed,
        "task": settings.env, "env_config": dict(settings.env_config),
        "checkpoint": policies.source, "model": policies.model,
        "mapping": dict(policies.mapping),
        "engine": policies.engine_spec.with_engine(engine).engine,
        "decoding": settings.decoding,
        # greedy decoding uses no temperature: record what was used, not the flag's default
        "temperature": settings.temperature if settings.decoding == "sample" else None,
        "search": settings.search,
        "num_branches": settings.num_branches if settings.search else 1,
        "eval_seeds": settings.eval_seeds, "num_tasks": settings.num_tasks,
        "distinct_instances": settings.distinct_instances,
        "samples_per_task": settings.samples_per_task,
        "max_new_tokens": settings.max_new_tokens,
        "training_budget": None if training_budget is None else dict(training_budget),
        "summary": summary,
        "best_constant_answer": constant.to_record(),
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval.json").write_text(json.dumps(record, indent=1))
    rows = episodes_csv_rows(episodes)
    with open(out_dir / "episodes.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    write_transcript(out_dir / "transcripts.jsonl", transcript)
    return record
