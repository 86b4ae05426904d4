"""The one owner of the checkpoint layout: every file and folder name RLlib and Tune give a
checkpoint, and the reads that depend on them.

Why one module: evaluation, serving, the CLI, the config checks and the resource pools all need
to find a checkpoint's config, modules or iteration, and each spelled RLlib's names itself, so a
layout change (a new RLlib version, the pooled learner group) had to be found in five places,
and evaluation imported the algorithms package only for a folder name. Here the layout is
written down once, below algorithms, evaluation and serving; this module imports neither Ray
nor torch, so reading a checkpoint's config or budget needs no cluster.

The layout it reads (Ray 2.x's new API stack; Tune numbers the saves of a trial)::

    <experiment>/<trial>/                         a Tune trial folder
        result.json                               one JSON line per iteration (Tune)
        checkpoint_000003/                        an algorithm checkpoint (Tune names it)
            rllib_checkpoint.json                 RLlib's metadata of an Algorithm checkpoint
            class_and_ctor_args.pkl               the class and its config (read without Ray)
            algorithm_state.pkl                   the algorithm's state, its iteration among it
            engine_spec.json                      what generates for its modules (this library;
                                                  checkpoints before 2026-12-06 lack it)
            learner_group/
                learner/rl_module/                the MultiRLModule, one sub-folder per module
                pools/<pool>/learner/rl_module/   ... or, with resource pools, one per pool
                pooled_state.pkl                  the pooled group's weights version
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from pettingllms_rllib.metric_keys import ENV_RUNNERS, NUM_GENERATED_TOKENS
from pettingllms_rllib.trial_results import ITERATION_KEY, RESULT_FILE

__all__ = [
    "ALGORITHM_STATE_FILE", "CHECKPOINT_PREFIX", "CTOR_ARGS_FILE", "LEARNER_DIR",
    "LEARNER_GROUP_DIR", "METADATA_FILE", "POOLED_STATE_FILE", "POOLS_DIR", "RL_MODULE_DIR",
    "ENGINE_SPEC_FILE", "checkpoint_iteration", "is_algorithm_checkpoint", "module_dirs",
    "read_config", "read_engine_spec", "resolve", "training_budget", "trial_checkpoints",
    "write_engine_spec",
]

#: How Tune names a trial's checkpoint folders: this prefix and the save's number, zero-padded
#: (``checkpoint_000003``), so sorting by name sorts by save and the last one is the newest.
CHECKPOINT_PREFIX = "checkpoint_"
#: RLlib's metadata file, written only into an Algorithm's checkpoint folder
#: (``Algorithm.METADATA_FILE_NAME``).
METADATA_FILE = "rllib_checkpoint.json"
#: The class and constructor arguments of a checkpointed object (RLlib's
#: ``Checkpointable.CLASS_AND_CTOR_ARGS_FILE_NAME``); for an algorithm, its config dict. RLlib
#: writes one into every component's folder too (``learner_group/`` has its own).
CTOR_ARGS_FILE = "class_and_ctor_args.pkl"
#: The algorithm's own state, its ``training_iteration`` among it (``Algorithm.STATE_FILE_NAME``
#: with the pickle format's extension).
ALGORITHM_STATE_FILE = "algorithm_state.pkl"
#: The learner group's component folder in an algorithm checkpoint
#: (``ray.rllib.core.COMPONENT_LEARNER_GROUP``).
LEARNER_GROUP_DIR = "learner_group"
#: The learner's component folder in a learner-group checkpoint
#: (``ray.rllib.core.COMPONENT_LEARNER``).
LEARNER_DIR = "learner"
#: The MultiRLModule's component folder in a learner checkpoint, one sub-folder per module
#: (``ray.rllib.core.COMPONENT_RL_MODULE``).
RL_MODULE_DIR = "rl_module"
#: The run's :class:`~pettingllms_rllib.engines.spec.EngineSpec` as JSON, written by ``ATGRPO``
#: beside RLlib's files in every algorithm checkpoint.
ENGINE_SPEC_FILE = "engine_spec.json"
#: The sub-folder of ``learner_group/`` holding one LearnerGroup checkpoint per resource pool
#: (written by :class:`~pettingllms_rllib.algorithms.resource_pools.PooledLearnerGroup`).
POOLS_DIR = "pools"
#: The pooled group's own state (its weights version and pool names) inside ``learner_group/``.
POOLED_STATE_FILE = "pooled_state.pkl"


def is_algorithm_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is an algorithm checkpoint folder: one whose config can be read
    (:data:`CTOR_ARGS_FILE`) and that RLlib marked as a whole checkpoint
    (:data:`METADATA_FILE`; a component folder such as ``learner_group/`` has the former
    only). A trial or experiment folder holds neither."""
    path = Path(path)
    return (path / CTOR_ARGS_FILE).is_file() and (path / METADATA_FILE).is_file()


def trial_checkpoints(trial_dir: str | Path) -> list[Path]:
    """A trial folder's ``checkpoint_*`` entries, oldest first (``[]`` for none)."""
    return sorted(Path(trial_dir).glob(f"{CHECKPOINT_PREFIX}*"), key=lambda p: p.name)


def resolve(path: str | Path) -> Path:
    """``path`` itself when it is an algorithm checkpoint; for a trial folder its newest
    ``checkpoint_*`` (Tune numbers them by save, the highest is the latest); for an
    experiment folder with one trial, that trial's newest. Raises ``FileNotFoundError``
    naming what was found."""
    path = Path(path)
    if is_algorithm_checkpoint(path):
        return path
    trials = [path] if trial_checkpoints(path) else sorted(
        p for p in path.iterdir() if p.is_dir() and trial_checkpoints(p)) \
        if path.is_dir() else []
    if len(trials) > 1:
        raise FileNotFoundError(f"{path} holds {len(trials)} trials; pass one of them: "
                                + ", ".join(t.name for t in trials))
    if not trials:
        raise FileNotFoundError(f"no checkpoint under {path}: pass a {CHECKPOINT_PREFIX}* "
                                f"folder, a trial folder or an experiment folder with one trial")
    return trial_checkpoints(trials[0])[-1]


def read_config(checkpoint: str | Path) -> dict[str, Any]:
    """The AT-GRPO config dict stored in an algorithm checkpoint (no Ray cluster needed)."""
    path = Path(checkpoint) / CTOR_ARGS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint} is not an AT-GRPO algorithm checkpoint "
                                f"({path.name} is missing); pass a {CHECKPOINT_PREFIX}* folder")
    with open(path, "rb") as handle:
        stored = pickle.load(handle)
    (config,) = stored["ctor_args_and_kwargs"][0]
    return config


def write_engine_spec(checkpoint: str | Path, spec_json: str) -> None:
    """Write the run's engine spec (``EngineSpec.to_json()``) into an algorithm checkpoint."""
    (Path(checkpoint) / ENGINE_SPEC_FILE).write_text(spec_json)


def read_engine_spec(checkpoint: str | Path) -> str | None:
    """The engine spec JSON of an algorithm checkpoint, or None for one written before the
    spec was saved (the caller derives it from :func:`read_config`)."""
    path = Path(checkpoint) / ENGINE_SPEC_FILE
    return path.read_text() if path.is_file() else None


def module_dirs(checkpoint: str | Path) -> list[Path]:
    """The MultiRLModule folders of an algorithm checkpoint: one
    (``learner_group/learner/rl_module``), or with resource pools one per pool
    (``learner_group/pools/<pool>/learner/rl_module``, in pool-name order)."""
    group = Path(checkpoint) / LEARNER_GROUP_DIR
    pooled = sorted((group / POOLS_DIR).glob(f"*/{LEARNER_DIR}/{RL_MODULE_DIR}"))
    if pooled:
        return pooled
    single = group / LEARNER_DIR / RL_MODULE_DIR
    if not single.is_dir():
        raise FileNotFoundError(
            f"{checkpoint} holds no trained modules (neither "
            f"{LEARNER_GROUP_DIR}/{LEARNER_DIR}/{RL_MODULE_DIR} nor "
            f"{LEARNER_GROUP_DIR}/{POOLS_DIR}/<pool>/{LEARNER_DIR}/{RL_MODULE_DIR})")
    return [single]


def checkpoint_iteration(checkpoint: str | Path) -> int | None:
    """The training iteration an algorithm checkpoint was saved at (None without its
    :data:`ALGORITHM_STATE_FILE`)."""
    state = Path(checkpoint) / ALGORITHM_STATE_FILE
    if not state.is_file():
        return None
    with open(state, "rb") as handle:
        return int(pickle.load(handle)[ITERATION_KEY])


def training_budget(checkpoint: str | Path) -> dict[str, Any] | None:
    """Iterations and generated tokens up to a checkpoint: its iteration from the checkpoint,
    the tokens summed over its trial's ``result.json`` rows up to that iteration (None when
    the checkpoint is not inside a Tune trial folder)."""
    checkpoint = Path(checkpoint).resolve()
    results = checkpoint.parent / RESULT_FILE
    if not results.is_file():
        return None
    iteration = checkpoint_iteration(checkpoint)
    if iteration is None:
        return None
    tokens = 0
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get(ITERATION_KEY, 0) <= iteration:
            tokens += int(row.get(ENV_RUNNERS, {}).get(NUM_GENERATED_TOKENS, 0) or 0)
    return {"iterations": iteration, "generated_tokens": tokens}
