"""Resource pools: each model trains in its own learner group, on its own learners.

PettingLLMs' router (arXiv 2510.11062, Sec. 4, "specialised" mode) sends each model's data
only to that model's update unit in its own resource pool. RLlib has one ``LearnerGroup`` per
``Algorithm``, in which every learner holds every module; :class:`PooledLearnerGroup` is a
facade over one RLlib ``LearnerGroup`` per pool, each built with only its pool's modules
(``rl_module_spec``) and its pool's learner resources and optimiser settings:

* ``update`` routes each module's batch to its pool and runs the pools' updates at the same time
  (one driver thread per pool; a pool with remote learners trains in its own processes);
  every pool then carries the same weights version (the group's update count), so env runners
  and engines keep one version number whatever the number of pools;
* with ``async_rollout``, ``start_update`` / ``finished_updates`` / ``publish`` let each pool
  update on its own schedule instead (``pool_schedule.py``): the group's version still counts
  publications, and a pool's learners carry the version its weights were last published with;
* ``get_state`` / ``set_state`` merge and split states by module, so RLlib's ``sync_weights``
  (one request per runner carrying every pool's trained modules) and ``Algorithm.get_state``
  work unchanged;
* a checkpoint holds one ordinary ``LearnerGroup`` checkpoint per pool under
  ``learner_group/pools/<pool>/`` (:mod:`pettingllms_rllib.checkpoints` owns both layouts;
  ``evaluation.evaluate.checkpoint_policies`` reads both).

Without ``.resource_pools(...)`` nothing here is used: one RLlib ``LearnerGroup`` holds every
module, as before.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import pickle
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Collection, Mapping

from ray.rllib.core import (COMPONENT_LEARNER, COMPONENT_METRICS_LOGGER, COMPONENT_OPTIMIZER,
                            COMPONENT_RL_MODULE)
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from pettingllms_rllib.checkpoints import POOLED_STATE_FILE, POOLS_DIR

logger = logging.getLogger(__name__)

#: RLlib's component path of a learner group's module weights (``learner/rl_module``); one
#: module's is this plus ``/<module id>``.
_MODULES_COMPONENT = f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}"


@dataclasses.dataclass(frozen=True)
class ResourcePool:
    """One named pool: the modules it trains and the learners it trains them on.

    Attributes:
        name: the pool's name (a folder name in checkpoints).
        modules: the module ids (policies) this pool holds; every module is in exactly one.
        num_learners: learner processes of this pool (0 = one learner inside the driver, as
            RLlib's ``num_learners=0``); with several, gradients are averaged among this
            pool's learners only.
        num_cpus_per_learner: CPUs Ray reserves for each of them (1).
        num_gpus_per_learner: GPUs for each of them (0).
        lr: this pool's learning rate (None = the config's ``lr`` and its per-module
            overrides).
    """

    name: str
    modules: tuple[str, ...]
    num_learners: int = 0
    num_cpus_per_learner: float = 1.0
    num_gpus_per_learner: float = 0.0
    lr: float | None = None

    #: The keys a pool's mapping accepts.
    KEYS = ("modules", "num_learners", "num_cpus_per_learner", "num_gpus_per_learner", "lr")

    def bundles(self) -> list[dict[str, float]]:
        """The placement-group bundles of this pool's remote learners (none when local)."""
        return [{"CPU": float(self.num_cpus_per_learner), "GPU": float(self.num_gpus_per_learner)}
                for _ in range(int(self.num_learners))]


def parse_pools(pools: Mapping[str, Any]) -> tuple[list[ResourcePool], list[str]]:
    """The pools of a ``resource_pools`` mapping, and the problems found reading it (each
    naming the pool, the key and what is accepted)."""
    from pettingllms_rllib.algorithms.config_fields import Field, check_value

    if not isinstance(pools, Mapping) or not pools:
        return [], [f"resource_pools: {pools!r} is not accepted; expected a non-empty mapping "
                    "of pool name -> {modules: [...], num_learners: ..., ...}"]
    fields = {"num_learners": Field(int, minimum=0), "num_cpus_per_learner": Field(float, minimum=0),
              "num_gpus_per_learner": Field(float, minimum=0),
              "lr": Field(float, above=0, optional=True)}
    parsed, problems = [], []
    for name, settings in pools.items():
        where = f"resource_pools.{name}"
        if not isinstance(name, str) or not name or "/" in name:
            problems.append(f"resource_pools: pool name {name!r} is not accepted; expected "
                            "non-empty text without '/'")
            continue
        if not isinstance(settings, Mapping):
            problems.append(f"{where}: {settings!r} is not accepted; expected a mapping with "
                            f"keys {list(ResourcePool.KEYS)}")
            continue
        unknown = sorted(set(settings) - set(ResourcePool.KEYS))
        if unknown:
            problems.append(f"{where}: unknown keys {unknown}; accepted: {list(ResourcePool.KEYS)}")
            continue
        modules = settings.get("modules")
        if (not isinstance(modules, (list, tuple)) or not modules
                or not all(isinstance(m, str) for m in modules)):
            problems.append(f"{where}.modules: {modules!r} is not accepted; a pool holds at "
                            "least one module: expected a non-empty list of module ids")
            continue
        bad = [check_value(f"{where}.{key}", settings[key], field)
               for key, field in fields.items() if key in settings]
        bad = [b for b in bad if b]
        if bad:
            problems += bad
            continue
        parsed.append(ResourcePool(name=name, modules=tuple(modules),
                                   **{k: settings[k] for k in fields if k in settings}))
    return parsed, problems


def assignment_problems(pools: Collection[ResourcePool], policies: Collection[str]) -> list[str]:
    """Every module in exactly one pool, and no pool naming a module that does not exist."""
    problems = []
    owners: dict[str, list[str]] = {}
    for pool in pools:
        for module_id in pool.modules:
            owners.setdefault(module_id, []).append(pool.name)
        unknown = sorted(set(pool.modules) - set(policies))
        if unknown:
            problems.append(f"resource_pools.{pool.name}.modules names {unknown}, which are not "
                            f"among the policies {sorted(policies)}")
    for module_id, names in sorted(owners.items()):
        if len(names) > 1:
            problems.append(f"module {module_id!r} is assigned to several pools {names}; "
                            "each module trains in exactly one pool")
    missing = sorted(set(policies) - set(owners))
    if missing:
        problems.append(f"modules {missing} are assigned to no pool; accepted pools: "
                        f"{sorted(p.name for p in pools)}")
    return problems


def pool_config(config, pool: ResourcePool):
    """The config one pool's LearnerGroup is built from: the pool's learners, resources and
    learning rate, and only its modules as policies."""
    copy = config.copy(copy_frozen=False)
    copy.learners(num_learners=int(pool.num_learners),
                  num_cpus_per_learner=float(pool.num_cpus_per_learner),
                  num_gpus_per_learner=float(pool.num_gpus_per_learner))
    if pool.lr is not None:
        copy.lr = float(pool.lr)
        overrides = dict(copy.algorithm_config_overrides_per_module or {})
        for module_id in pool.modules:
            overrides[module_id] = {**overrides.get(module_id, {}), "lr": float(pool.lr)}
        copy.algorithm_config_overrides_per_module = overrides
    copy.policies = {module_id: config.policies[module_id] for module_id in pool.modules} \
        if isinstance(config.policies, dict) else set(pool.modules)
    copy.resource_pool_specs = None  # a pool is one plain LearnerGroup
    return copy


def restrict_spec(spec: MultiRLModuleSpec, module_ids: Collection[str]) -> MultiRLModuleSpec:
    """The same MultiRLModule spec (every field but the modules kept, e.g. the class, the shared
    model config, what to load) with only ``module_ids``; ``spec`` is left as it is."""
    restricted = copy.copy(spec)  # not dataclasses.replace: it re-passes a deprecated field
    restricted.rl_module_specs = {m: spec.rl_module_specs[m] for m in module_ids}
    return restricted


class PooledLearnerGroup(Checkpointable):
    """A facade over one RLlib LearnerGroup per resource pool (see the module docstring).

    It inherits nothing from ``LearnerGroup``: it holds its pools and answers every public
    ``LearnerGroup`` method itself (tests/algorithms/test_pooled_learner_group.py checks this
    against the pinned RLlib's source). RLlib dispatches on the type, though:
    ``EnvRunnerGroup.sync_weights`` reads a learner group's weights only from an
    ``isinstance(..., LearnerGroup)`` source. ``LearnerGroup`` is an abstract base class, so
    the class is registered as its virtual subclass below: ``isinstance`` holds, and no
    ``LearnerGroup`` code or state is used. ``Algorithm`` checkpoints it as the
    ``Checkpointable`` it is."""

    def __init__(self, *, config, module_spec: MultiRLModuleSpec, pools: list[ResourcePool],
                 make_learner_group=LearnerGroup):
        """Build one learner group per pool.

        Args:
            config: the algorithm's config.
            module_spec: the MultiRLModule spec of every module.
            pools: the pools (``ATGRPOConfig.parsed_resource_pools``).
            make_learner_group: what builds one pool's group from ``config=`` and
                ``module_spec=`` (RLlib's ``LearnerGroup``; tests pass a stand-in).
        """
        self.config = config.copy(copy_frozen=False)
        self._module_spec = module_spec
        self._weights_seq_no = 0
        #: Seconds each pool's last update took (the overlap is in ``update``'s wall time).
        self.last_update_seconds: dict[str, float] = {}
        self.pool_specs = {pool.name: pool for pool in pools}
        self.pool_of_module = {m: pool.name for pool in pools for m in pool.modules}
        self.pools: dict[str, LearnerGroup] = {}
        #: Background updates (``start_update``) whose results were not collected yet.
        self._in_flight: dict[str, Future] = {}
        self._executor = ThreadPoolExecutor(max_workers=len(pools),
                                            thread_name_prefix="resource-pool")
        for pool in pools:
            logger.info("resource pool %r: modules %s on %d learner(s)", pool.name,
                        list(pool.modules), pool.num_learners)
            self.pools[pool.name] = make_learner_group(
                config=pool_config(config, pool),
                module_spec=restrict_spec(module_spec, pool.modules))

    # ------------------------------------------------------------------ LearnerGroup API
    @property
    def is_remote(self) -> bool:
        return any(pool.is_remote for pool in self.pools.values())

    @property
    def is_local(self) -> bool:
        return not self.is_remote

    def __len__(self) -> int:
        return sum(len(pool) for pool in self.pools.values())

    @property
    def weights_seq_no(self) -> int:
        """The weights version every pool's learners carry: the number of updates."""
        return self._weights_seq_no

    def update(self, *, batch: MultiAgentBatch, timesteps=None, **kwargs) -> list[dict]:
        """Send each module's rows to its pool only, and update the pools concurrently.

        A pool none of whose modules has rows this time does not train, but its learners
        take the new weights version too (their weights did not change)."""
        per_pool: dict[str, dict] = {}
        for module_id, module_batch in batch.policy_batches.items():
            per_pool.setdefault(self.pool_of_module[module_id], {})[module_id] = module_batch
        version = self._weights_seq_no + 1

        def train(name: str, module_batches: dict):
            started = time.perf_counter()
            results = self.pools[name].update(
                batch=MultiAgentBatch(module_batches,
                                      env_steps=sum(len(b) for b in module_batches.values())),
                timesteps=timesteps, **kwargs)
            return results, time.perf_counter() - started

        futures = {name: self._executor.submit(train, name, module_batches)
                   for name, module_batches in per_pool.items()}
        results, self.last_update_seconds = [], {}
        for name, future in futures.items():
            pool_results, seconds = future.result()
            results += pool_results
            self.last_update_seconds[name] = seconds
        for name, pool in self.pools.items():
            if name not in futures:
                pool.foreach_learner(lambda learner, v=version: learner.set_state(
                    {WEIGHTS_SEQ_NO: v}))
        self._weights_seq_no = version
        return results

    # ------------------------------------------------------------------ per-pool updates
    def start_update(self, name: str, module_batches: dict, **kwargs) -> None:
        """Start one pool's update in the background (``async_rollout`` with pools, see
        ``pool_schedule.py``): it may run across iterations while the other pools update and
        publish. Its weights reach the runners only through :meth:`publish`."""
        if self.is_updating(name):
            raise RuntimeError(f"resource pool {name!r} is still updating; collect its result "
                               "(finished_updates) before starting another")

        def train():
            started = time.perf_counter()
            results = self.pools[name].update(
                batch=MultiAgentBatch(module_batches,
                                      env_steps=sum(len(b) for b in module_batches.values())),
                **kwargs)
            return results, time.perf_counter() - started

        self._in_flight[name] = self._executor.submit(train)

    def is_updating(self, name: str) -> bool:
        """Whether the pool has a background update whose result was not collected yet."""
        return name in self._in_flight

    def finished_updates(self, wait_for: Collection[str] = ()) -> dict[str, tuple[list, float]]:
        """The results and seconds of every background update that has finished, after
        waiting for the pools in ``wait_for``; those pools are free to start again. A failed
        update raises here, naming its pool."""
        for name in wait_for:
            if name in self._in_flight:
                self._in_flight[name].exception()  # waits; the error is raised below
        done = {}
        for name in [n for n, future in self._in_flight.items() if future.done()]:
            future = self._in_flight.pop(name)
            try:
                done[name] = future.result()
            except Exception as exc:
                raise RuntimeError(f"the update of resource pool {name!r} failed: {exc}") from exc
        return done

    def publish(self, names: Collection[str]) -> int:
        """A new weights version for the pools in ``names`` (their updates are in): the
        group's version goes up by one and their learners carry it, so a later update of such
        a pool treats rows sampled before it as stale; the other pools keep the version their
        weights were published with. Returns the new version."""
        self._weights_seq_no += 1
        for name in names:
            self.pools[name].foreach_learner(lambda learner, v=self._weights_seq_no:
                                             learner.set_state({WEIGHTS_SEQ_NO: v}))
        return self._weights_seq_no

    def _wait_for_updates(self, names: Collection[str] | None = None) -> None:
        """Wait until the named pools (all: None) have no update running, so that their
        state is read between updates, never during one; results stay to be collected."""
        for name, future in list(self._in_flight.items()):
            if names is None or name in names:
                future.exception()

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict:
        """One learner state for all pools: module weights and optimiser states merged by
        module, and the group's weights version (the learners' metrics stay with their pool:
        they cannot be merged without mixing them up). A pool with a background update running
        is read once that update is done."""
        state: dict[str, Any] = {}
        if not self._check_component(COMPONENT_LEARNER, components, not_components):
            return state
        merged: dict[str, Any] = {WEIGHTS_SEQ_NO: self._weights_seq_no}
        for name, pool in self.pools.items():
            if not self._asks_for_pool(name, components):
                continue
            self._wait_for_updates([name])
            part = pool.get_state(components=components, not_components=not_components,
                                  **kwargs).get(COMPONENT_LEARNER, {})
            for key, value in part.items():
                if key in (COMPONENT_RL_MODULE, COMPONENT_OPTIMIZER):
                    merged.setdefault(key, {}).update(value)
                elif key not in (WEIGHTS_SEQ_NO, COMPONENT_METRICS_LOGGER):
                    merged.setdefault(key, value)
        state[COMPONENT_LEARNER] = merged
        return state

    def _asks_for_pool(self, name: str, components) -> bool:
        """Whether a components request (RLlib's ``learner/rl_module/<module>`` paths) names
        any of the pool's modules, or is not about single modules at all."""
        if components is None:
            return True
        requested = [components] if isinstance(components, str) else list(components)
        prefix = f"{_MODULES_COMPONENT}/"
        named = [c[len(prefix):].split("/")[0] for c in requested if c.startswith(prefix)]
        if len(named) < len(requested):
            return True
        return any(self.pool_of_module.get(m) == name for m in named)

    def set_state(self, state: dict) -> None:
        """Split a merged learner state by module and give each pool its share."""
        if COMPONENT_LEARNER not in state:
            return
        self._wait_for_updates()
        learner = state[COMPONENT_LEARNER]
        version = int(learner.get(WEIGHTS_SEQ_NO, 0))
        for name, pool in self.pools.items():
            modules = set(self.pool_specs[name].modules)
            part = {key: value for key, value in learner.items()
                    if key not in (COMPONENT_RL_MODULE, COMPONENT_OPTIMIZER,
                                   COMPONENT_METRICS_LOGGER)}
            if COMPONENT_RL_MODULE in learner:
                part[COMPONENT_RL_MODULE] = {m: s for m, s in learner[COMPONENT_RL_MODULE].items()
                                             if m in modules}
            if COMPONENT_OPTIMIZER in learner:
                part[COMPONENT_OPTIMIZER] = {k: s for k, s in learner[COMPONENT_OPTIMIZER].items()
                                             if s.get("module_id") in modules}
            pool.set_state({COMPONENT_LEARNER: part})
        if version > 0:
            self._weights_seq_no = version

    def get_weights(self, module_ids: Collection[str] | None = None) -> dict:
        """The modules' weights (all, or those in ``module_ids``), each from its pool."""
        components = (_MODULES_COMPONENT if module_ids is None else
                      [f"{_MODULES_COMPONENT}/{module_id}" for module_id in module_ids])
        return self.get_state(components)[COMPONENT_LEARNER].get(COMPONENT_RL_MODULE, {})

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Give each pool its modules' weights."""
        self.set_state({COMPONENT_LEARNER: {COMPONENT_RL_MODULE: dict(weights)}})

    def load_module_state(self, *, multi_rl_module_ckpt_dir=None, modules_to_load=None,
                          rl_module_ckpt_dirs=None) -> None:
        """Load modules from checkpoints (``load_state_path`` in a module spec, read when the
        algorithm is built): each pool loads its own modules only."""
        for name, pool in self.pools.items():
            modules = set(self.pool_specs[name].modules)
            wanted = modules if modules_to_load is None else modules & set(modules_to_load)
            dirs = {m: d for m, d in (rl_module_ckpt_dirs or {}).items() if m in modules}
            if (multi_rl_module_ckpt_dir and wanted) or dirs:
                pool.load_module_state(
                    multi_rl_module_ckpt_dir=multi_rl_module_ckpt_dir if wanted else None,
                    modules_to_load=wanted if multi_rl_module_ckpt_dir else None,
                    rl_module_ckpt_dirs=dirs)

    def foreach_learner(self, func, **kwargs) -> list:
        """``func`` on every learner of every pool: the call results, pool by pool."""
        return [result for pool in self.pools.values()
                for result in pool.foreach_learner(func, **kwargs)]

    def foreach_learner_of_pool(self, name: str, func, **kwargs):
        """``func`` on the learners of one pool only."""
        return self.pools[name].foreach_learner(func, **kwargs)

    def get_stats(self) -> dict[str, Any]:
        """RLlib's learner-group stats, summed over the pools."""
        stats = [pool.get_stats() for pool in self.pools.values()]
        return {key: sum(part[key] for part in stats) for key in stats[0]} if stats else {}

    def add_module(self, *, module_id, **kwargs):
        """Refused: which pool a module trains in is fixed when the run is configured."""
        raise NotImplementedError(
            f"cannot add module {module_id!r} to a run with resource_pools "
            f"{sorted(self.pool_specs)}: each module's pool is fixed by the config; add the "
            "policy to the config and its pool's modules instead")

    def remove_module(self, module_id, **kwargs):
        """Refused, as :meth:`add_module`."""
        raise NotImplementedError(
            f"cannot remove module {module_id!r} from a run with resource_pools "
            f"{sorted(self.pool_specs)}: each module's pool is fixed by the config")

    # ------------------------------------------------------------------ checkpoints
    def save_to_path(self, path=None, *, state=None, filesystem=None, use_msgpack=False) -> str:
        """One ordinary LearnerGroup checkpoint per pool under ``path/pools/<pool>``, plus the
        group's weights version. A given ``state`` (RLlib passes the merged one) is not used:
        each pool saves its own, with its learners' own metrics and counters, which a merged
        state cannot hold apart."""
        if path is None:
            import tempfile

            path = tempfile.mkdtemp()
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        self._wait_for_updates()
        for name, pool in self.pools.items():
            pool.save_to_path(root / POOLS_DIR / name, filesystem=filesystem,
                              use_msgpack=use_msgpack)
        with open(root / POOLED_STATE_FILE, "wb") as handle:
            pickle.dump({WEIGHTS_SEQ_NO: self._weights_seq_no,
                         "pools": sorted(self.pools)}, handle)
        return str(root)

    def restore_from_path(self, path, *, component=None, filesystem=None, **kwargs) -> None:
        """Restore every pool from its own folder (a whole pooled checkpoint only)."""
        root = Path(path)
        if component is not None:
            raise ValueError(f"a pooled learner group restores whole checkpoints only, not the "
                             f"component {component!r}")
        stored = root / POOLED_STATE_FILE
        if not stored.is_file():
            raise FileNotFoundError(f"{root} is not a pooled learner-group checkpoint "
                                    f"({POOLED_STATE_FILE} is missing); was it saved with the "
                                    "same resource_pools?")
        with open(stored, "rb") as handle:
            saved = pickle.load(handle)
        if sorted(saved["pools"]) != sorted(self.pools):
            raise ValueError(f"checkpoint {root} holds pools {saved['pools']} but this config "
                             f"has {sorted(self.pools)}")
        self._wait_for_updates()
        for name, pool in self.pools.items():
            pool.restore_from_path(root / POOLS_DIR / name, filesystem=filesystem, **kwargs)
        self._weights_seq_no = int(saved[WEIGHTS_SEQ_NO])

    def get_checkpointable_components(self) -> list:
        return []  # the pools are saved by save_to_path itself

    def get_ctor_args_and_kwargs(self):
        return (), {"config": self.config, "module_spec": self._module_spec,
                    "pools": list(self.pool_specs.values())}

    def shutdown(self) -> None:
        self._wait_for_updates()
        for pool in self.pools.values():
            pool.shutdown()
        self._executor.shutdown(wait=False)


# RLlib recognises a learner group by ``isinstance(..., LearnerGroup)`` (see the class).
LearnerGroup.register(PooledLearnerGroup)
