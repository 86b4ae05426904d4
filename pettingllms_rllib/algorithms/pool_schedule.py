"""Per-module staleness: with ``async_rollout`` and resource pools, each pool updates on its own
schedule, so a slower pool does not hold back the other pools' modules.

The synchronous algorithm and the one-group ``async_rollout`` update every module once per
iteration and wait for the slowest. With pools, :class:`PoolSchedule` instead runs each pool's
update in the background across iterations (``PooledLearnerGroup.start_update``). One iteration
of ``ATGRPO`` then is:

1. collect the sample the runners started last iteration (the runners are idle now);
2. collect every pool update that has finished and **publish** those pools' weights to the
   runners under a new weights version (one request per runner); a pool still updating while
   it already holds rows waiting from the previous sample is waited for here, so no pool falls
   more than one sample behind (back-pressure: its waiting rows would otherwise pile up);
3. start the next sample, with the weights just published;
4. advantages over the collected sample, its rows queued per pool;
5. every pool not updating starts an update on all its queued rows.

Staleness is counted per module: the number of times a module's weights were published after
the sample a row came from (:class:`PublishLog`). A row waits for at most one update of its
pool, which is published before the row is trained, so rows lag their module by at most one
version (``max_staleness`` 1); the learner corrects them with truncated importance weights
(``core/loss.py``) because each pool's learners carry the version their weights were last
published with. Nothing here touches Ray or a model: the group is anything with
``PooledLearnerGroup``'s per-pool update methods (the tests drive it with stand-ins).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Collection, Mapping, Sequence

from pettingllms_rllib.core.records import SampleRecord


class WeightsLagError(RuntimeError):
    """A runner sampled with older weights than the learner last synced to it, or a row would
    be trained further behind its module's weights than ``max_staleness`` allows."""


class PublishLog:
    """The weights versions at which each module's weights were published to the runners."""

    def __init__(self) -> None:
        self._versions: dict[str, list[int]] = defaultdict(list)

    def record(self, modules: Collection[str], version: int) -> None:
        """The weights of ``modules`` reached the runners as ``version``."""
        for module_id in modules:
            self._versions[module_id].append(int(version))

    def missed(self, module_id: str, sampled_version: int) -> int:
        """How many publications of the module's weights came after a row sampled with the
        runners' weights version ``sampled_version``: the row's staleness for that module."""
        return sum(version > sampled_version for version in self._versions.get(module_id, ()))


class PoolSchedule:
    """Queues each pool's rows and starts, collects and publishes its updates (see the module
    docstring for the order within an iteration).

    Args:
        group: the pooled learner group (``start_update``, ``is_updating``,
            ``finished_updates``, ``publish``, ``pool_of_module``, ``pool_specs``).
        max_staleness: the most versions a trained row may lag its module's weights.
    """

    def __init__(self, group: Any, max_staleness: int) -> None:
        self.group = group
        self.max_staleness = int(max_staleness)
        self.log = PublishLog()
        #: Rows per pool waiting for the pool's next update.
        self.queued: dict[str, list[SampleRecord]] = defaultdict(list)

    def collect(self) -> dict[str, tuple[list, float]]:
        """The results and seconds of the pool updates that have finished; a pool that is
        still updating while rows wait for it is waited for (back-pressure)."""
        behind = [name for name, rows in self.queued.items()
                  if rows and self.group.is_updating(name)]
        return self.group.finished_updates(wait_for=behind)

    def publish(self, pools: Collection[str]) -> tuple[int, list[str]] | None:
        """A new weights version for ``pools`` (their updates are in): the version and the
        modules whose weights the runners must now receive; None when ``pools`` is empty."""
        if not pools:
            return None
        version = self.group.publish(sorted(pools))
        modules = [m for name in sorted(pools) for m in self.group.pool_specs[name].modules]
        self.log.record(modules, version)
        return version, modules

    def queue(self, records: Sequence[SampleRecord]) -> None:
        """Rows to train, each waiting for the next update of its module's pool."""
        for record in records:
            self.queued[self.group.pool_of_module[record.module_id]].append(record)

    def staleness(self, record: SampleRecord) -> int:
        """How many versions the row lags its module's published weights."""
        return self.log.missed(record.module_id, int(record.weights_version))

    def start_idle(self, make_batches: Callable[[list[SampleRecord]], Mapping[str, Any]],
                   **update_kwargs) -> dict[str, list[int]]:
        """Start every pool that is not updating on all its queued rows (``make_batches``
        turns rows into the per-module batches). Returns the started rows' staleness per
        module. Rows lagging more than ``max_staleness`` raise :class:`WeightsLagError`
        (they cannot occur unless a runner missed a publication)."""
        started: dict[str, list[int]] = {}
        for name in sorted(self.queued):
            rows = self.queued[name]
            if not rows or self.group.is_updating(name):
                continue
            lags = [self.staleness(record) for record in rows]
            if max(lags) > self.max_staleness:
                raise WeightsLagError(
                    f"resource pool {name!r} would train rows {max(lags)} versions behind their "
                    f"module's weights; max_staleness is {self.max_staleness}")
            for record, lag in zip(rows, lags):
                started.setdefault(record.module_id, []).append(lag)
            self.group.start_update(name, dict(make_batches(rows)), **update_kwargs)
            self.queued[name] = []
        return started
