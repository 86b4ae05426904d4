"""The held-out evaluation of ``ATGRPO`` (``evaluation_interval``, ``evaluation_duration``).

The same fixed evaluation instances every time, greedy, no branching, with the untrained
team's numbers beside them (``untrained_*``), and one transcript per evaluation in the logdir.
Kept apart from the algorithm so ``ATGRPO.evaluate`` is the thin RLlib override: the
algorithm hands over the runner group to play on and the logdir to write to, nothing else.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from ray.rllib.utils.metrics import NUM_EPISODES

from pettingllms_rllib.metric_keys import (
    AGENT,
    EVALUATION_AGENT_PARSE_ERROR_RATE,
    EVALUATION_AGENT_RETURN_MEAN,
    EVALUATION_SUCCESS_CI95_HIGH,
    EVALUATION_SUCCESS_CI95_LOW,
    EVALUATION_SUCCESS_RATE,
    EVALUATION_TURNS_MEAN,
    EVALUATION_UNTRAINED_SUCCESS_RATE,
)

#: The algorithm's logger: these lines read ``pettingllms_rllib.algorithms.at_grpo: ...`` as
#: they did before they moved here, so filters and searches of a run's log still match them.
logger = logging.getLogger("pettingllms_rllib.algorithms.at_grpo")

#: Folder under the algorithm's logdir (under Tune: the trial folder) that holds one JSONL
#: transcript per held-out evaluation, ``iteration_<n>.jsonl`` after n updates.
HELD_OUT_TRANSCRIPTS_DIR = "evaluation_transcripts"


def evaluation_result(summary: dict[str, Any]) -> dict[str, Any]:
    """The ``evaluation/`` result keys (metric_keys) <- ``evaluation.metrics.summarize``'s
    summary of the held-out episodes."""
    return {EVALUATION_SUCCESS_RATE: summary["success_rate"],
            EVALUATION_SUCCESS_CI95_LOW: summary["success_ci95"][0],
            EVALUATION_SUCCESS_CI95_HIGH: summary["success_ci95"][1],
            EVALUATION_TURNS_MEAN: summary["turns_mean"],
            NUM_EPISODES: summary["num_episodes"],
            AGENT: {agent: {EVALUATION_AGENT_PARSE_ERROR_RATE: stats["parse_error_rate"],
                            EVALUATION_AGENT_RETURN_MEAN: stats["return_mean"]}
                    for agent, stats in summary["agents"].items()}}


def nan_evaluation_result(agents: Sequence[str]) -> dict[str, Any]:
    """An ``evaluation_result`` of NaNs for ``agents``: the columns an iteration without an
    evaluation carries (Tune's progress.csv keeps only the first row's columns)."""
    nan = float("nan")
    return {EVALUATION_SUCCESS_RATE: nan, EVALUATION_SUCCESS_CI95_LOW: nan,
            EVALUATION_SUCCESS_CI95_HIGH: nan, EVALUATION_TURNS_MEAN: nan, NUM_EPISODES: nan,
            AGENT: {agent: {EVALUATION_AGENT_PARSE_ERROR_RATE: nan,
                            EVALUATION_AGENT_RETURN_MEAN: nan} for agent in agents}}


class HeldOutEvaluation:
    """One run's held-out instances, its untrained baseline and its transcripts.

    ``config`` is the algorithm's config (``env``, ``env_config``, ``evaluation_interval``,
    ``evaluation_duration``); every call names the runner group to play on (the evaluation
    group, or the training group when there is none) and the logdir to write to.
    """

    def __init__(self, config) -> None:
        self._config = config
        self._seeds: list[int] | None = None
        #: The held-out evaluation of the untrained team (before any update), when
        #: ``evaluation_interval`` is set: the baseline of every later evaluation. Not
        #: measured when starting from a checkpoint (the checkpoint's own run measured it).
        self.untrained: dict[str, Any] | None = None
        #: The evaluation columns of an iteration that does not evaluate (all NaN).
        self._nan_columns: dict[str, Any] = {}

    def start(self, group_to_play_on, logdir: str, *, measure_untrained: bool) -> None:
        """At the algorithm's setup: the untrained team's evaluation (``measure_untrained``),
        then the NaN columns, both only when ``evaluation_interval`` is set.
        ``group_to_play_on()`` returns the runner group, holding the learner's weights; it is
        called only when the untrained team is played."""
        if not self._config.evaluation_interval:
            return
        if measure_untrained:
            logger.info("held-out evaluation of the untrained team: %d tasks, greedy",
                        int(self._config.evaluation_duration))
            self.untrained = self.play(group_to_play_on(), logdir, after_iteration=0)
            logger.info("held-out success of the untrained team: %.3f",
                        self.untrained[EVALUATION_SUCCESS_RATE])
        self._nan_columns = nan_evaluation_result(self._env_agents())

    def seeds(self) -> list[int]:
        """The fixed held-out instances: the first ``evaluation_duration`` distinct evaluation
        instances, the same instances ``pettingllms-rllib eval`` starts with."""
        if self._seeds is None:
            from pettingllms_rllib.envs.instances import distinct_instance_seeds
            from pettingllms_rllib.envs.registry import make_text_env

            env = make_text_env(self._config.env, self._config.env_config)
            self._seeds = distinct_instance_seeds(env, int(self._config.evaluation_duration))
        return self._seeds

    def play(self, group, logdir: str, after_iteration: int) -> dict[str, Any]:
        """Play the held-out instances on ``group`` with the weights after ``after_iteration``
        updates (0: the untrained team), write their transcript and return the evaluation
        metrics."""
        from pettingllms_rllib.evaluation.metrics import summarize

        seeds = self.seeds()
        if group.num_remote_env_runners() == 0:
            parts = [group.local_env_runner.evaluate(seeds)]
        else:
            shares = np.array_split(np.asarray(seeds), group.num_remote_env_runners())
            parts = group.foreach_env_runner(
                lambda runner: runner.evaluate(
                    [int(s) for s in shares[(runner.worker_index or 1) - 1]]),
                local_env_runner=False)
        self._write_transcript(logdir, after_iteration,
                               [entry for part in parts for entry in part.transcript])
        return evaluation_result(summarize([e for part in parts for e in part.episodes],
                                           samples_per_task=1))

    def untrained_columns(self) -> dict[str, Any]:
        """The untrained team's success beside every evaluation (NaN when not measured)."""
        base = self.untrained or {}
        return {EVALUATION_UNTRAINED_SUCCESS_RATE: base.get(EVALUATION_SUCCESS_RATE,
                                                            float("nan"))}

    def columns_without_evaluation(self) -> dict[str, Any]:
        """The evaluation results of an iteration that does not evaluate: NaNs, and the
        untrained team's success."""
        return {**self._nan_columns, **self.untrained_columns()}

    @staticmethod
    def _write_transcript(logdir: str, after_iteration: int,
                          entries: list[dict[str, Any]]) -> None:
        """``<logdir>/evaluation_transcripts/iteration_<n>.jsonl``: every held-out response of
        one evaluation (``eval``'s transcript format). Under Tune the logdir is the trial's
        working directory, which the CLI syncs into the trial folder (``sync_artifacts``). A
        failed write (a full disk) is logged and costs only the transcript."""
        from pettingllms_rllib.evaluation.evaluate import write_transcript

        folder = Path(logdir) / HELD_OUT_TRANSCRIPTS_DIR
        path = folder / f"iteration_{after_iteration:06d}.jsonl"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_transcript(path, entries)
        except OSError as exc:
            logger.warning("could not write the held-out transcript %s (%s)", path, exc)

    def _env_agents(self) -> list[str]:
        """The task's agents (the per-agent evaluation columns), from a fresh env."""
        from pettingllms_rllib.envs.registry import make_text_env

        return list(make_text_env(self._config.env, self._config.env_config).possible_agents)
