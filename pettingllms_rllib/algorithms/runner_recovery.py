"""Env runners lost while ``ATGRPO`` samples or syncs weights: restarted and resampled, or
named in the error that stops the run.

With ``restart_failed_env_runners`` (RLlib's default) Ray restarts a dead runner; it is given
the learner's current weights (RLlib's own ``restore_env_runners`` would copy the driver's
local runner, which holds no module when the runners are remote) and its share of tasks is
sampled again. Restarts off, the run stops with :class:`EnvRunnerLostError`, which says how
to turn them on. A failure of the env itself (a rollout, contract or import error) stops the
run as itself: restarting the runner would meet the same env.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, MutableMapping, Sequence

from ray.exceptions import RayError

from pettingllms_rllib.core.tree_sampler import RolloutError
from pettingllms_rllib.envs.base import EnvContractError
from pettingllms_rllib.envs.registry import EnvImportError

#: The algorithm's logger: these lines read ``pettingllms_rllib.algorithms.at_grpo: ...`` as
#: they did before they moved here, so filters and searches of a run's log still match them.
logger = logging.getLogger("pettingllms_rllib.algorithms.at_grpo")


class EnvRunnerLostError(RuntimeError):
    """Env runners failed while sampling and could not be restarted (or restarts are off)."""


def _restarts_off(doing: str, exc: BaseException) -> str:
    return (f"an env runner failed while {doing} and restart_failed_env_runners is off (turn "
            f"it on with .fault_tolerance(restart_failed_env_runners=True)): "
            f"{type(exc).__name__}: {str(exc)[:300]}")


#: Failures of the env itself that a runner raises: the run stops with them as they are, not
#: as a lost runner (restarting one would meet the same env).
_ENV_FAILURES = (RolloutError, EnvContractError, EnvImportError)


def _raise_env_failure(exc: BaseException) -> None:
    """Re-raise the env failure a runner's ``RayTaskError`` carries, if it carries one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, _ENV_FAILURES):
        raise cause from exc


@contextmanager
def sampling_failures() -> Iterator[None]:
    """Around a call that collects the runners' samples: with restarts off RLlib re-raises a
    runner's death, which stops the run as the env's own failure or as a lost runner."""
    try:
        yield
    except RayError as exc:
        _raise_env_failure(exc)
        raise EnvRunnerLostError(_restarts_off("sampling", exc)) from exc


@contextmanager
def weight_sync_failures() -> Iterator[None]:
    """Around a weight sync: with restarts off, a runner that died while receiving the
    weights stops the run as a lost runner."""
    try:
        yield
    except RayError as exc:
        raise EnvRunnerLostError(_restarts_off("receiving weights", exc)) from exc


def _lost_runners(outputs: Sequence[dict[str, Any]], num_remote: int) -> list[int]:
    """Indices (1-based, as RLlib numbers remote runners) of runners with no output."""
    return sorted(set(range(1, num_remote + 1)) - {int(o["worker_index"]) for o in outputs})


class RunnerRecovery:
    """Restarted runners taken back with the learner's weights, and the shares of lost or
    restarted runners sampled again.

    Built for each use from the algorithm's parts (``config``: ``is_online``,
    ``restart_failed_env_runners``, ``env_runner_restore_timeout_s``; ``counters``: the
    algorithm's ``_counters``), so it always sees the algorithm's current groups.
    """

    def __init__(self, env_runner_group, learner_group, config,
                 counters: MutableMapping[str, int]) -> None:
        self._group = env_runner_group
        self._learner_group = learner_group
        self._config = config
        self._counters = counters

    def restore(self, env_runner_group) -> list[int]:
        """Take back runners that Ray restarted, and give them the learner's current weights
        (with their version) before they sample. RLlib's own version copies the state of the
        driver's local runner, which holds no module when the runners are remote."""
        restored = env_runner_group.probe_unhealthy_env_runners() if self._config.is_online \
            else []
        if not restored:
            return []
        self._counters["total_num_restored_workers"] += len(restored)
        env_runner_group.sync_weights(from_worker_or_learner_group=self._learner_group,
                                      to_worker_indices=restored, inference_only=True)
        logger.info("env runners %s restarted and given the current weights", restored)
        return restored

    def complete(self, outputs: list[dict[str, Any]], remote: int, sample: Callable,
                 oldest_allowed_version: int | None) -> tuple[list[dict[str, Any]], int]:
        """The outputs of every runner, and how many runners are still missing: the shares of
        runners that died mid-sample and of runners Ray restarted (answering with weights
        older than ``oldest_allowed_version``) are sampled again (``sample`` is the
        per-runner function)."""
        lost = _lost_runners(outputs, remote)
        if lost:
            outputs += self._resample_lost(lost, sample)
        outputs = self._resample_restarted(outputs, sample, oldest_allowed_version)
        if not outputs:
            raise EnvRunnerLostError(f"every env runner ({list(range(1, remote + 1))}) failed "
                                     "while sampling; their logs hold the error")
        return outputs, len(_lost_runners(outputs, remote))

    def _resample_restarted(self, outputs: list[dict[str, Any]], sample,
                            expected: int | None) -> list[dict[str, Any]]:
        """A runner that Ray restarted between two calls answers with its initial weights
        (version 0) before RLlib ever saw it fail: its tasks are sampled again once it holds
        the current weights. Restarts off: the weights check raises as for any lag."""
        stale = sorted(int(o["worker_index"]) for o in outputs
                       if expected is not None and o["weights_version"] < expected)
        if not stale or not self._config.restart_failed_env_runners:
            return outputs
        logger.warning("env runners %s answered with initial weights (restarted by Ray); "
                       "syncing the current weights and sampling their tasks again", stale)
        group = self._group
        group.sync_weights(from_worker_or_learner_group=self._learner_group,
                           to_worker_indices=stale, inference_only=True)
        again = list(group.foreach_env_runner(sample, local_env_runner=False,
                                              remote_worker_ids=stale))
        return [o for o in outputs if int(o["worker_index"]) not in stale] + again

    def _resample_lost(self, lost: list[int], sample) -> list[dict[str, Any]]:
        """The runners in ``lost`` failed mid-sample (a crash, a kill, an OOM). With
        ``restart_failed_env_runners`` RLlib restarts them; they get the learner's current
        weights before they sample their share again. Without it, or if they fail again, the
        error names them (instead of an empty result further down)."""
        group = self._group
        if not self._config.restart_failed_env_runners:
            raise EnvRunnerLostError(
                f"env runners {lost} failed while sampling and restart_failed_env_runners is "
                f"off (turn it on with .fault_tolerance(restart_failed_env_runners=True)); "
                f"their logs hold the error")
        # Ray restarts the actor on its own; RLlib takes it back once it answers a probe. A
        # restarting runner loads its model first, so keep probing for a while.
        deadline = time.monotonic() + float(self._config.env_runner_restore_timeout_s)
        restored: list[int] = []
        while True:
            restored += self.restore(group)
            if set(lost) <= set(restored) or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        again = [index for index in lost if index in restored]
        logger.warning("env runners %s failed while sampling; restarted %s and sampling their "
                       "tasks again", lost, again)
        outputs = list(group.foreach_env_runner(sample, local_env_runner=False,
                                                remote_worker_ids=again)) if again else []
        still = sorted(set(lost) - {o["worker_index"] for o in outputs})
        if still:
            logger.warning("env runners %s are still down: this iteration trains without "
                           "their tasks", still)
        return outputs
