"""The placement-group bundles a Tune trial of ``ATGRPO`` reserves.

RLlib's ``Algorithm.default_resource_request`` gives the main process, one bundle per env
runner (and evaluation runner) and one per learner. :func:`trial_bundles` changes what RLlib
cannot know: the GPU of a driver-local env runner, and with ``.resource_pools(...)`` each
pool's learners instead of ``.learners(...)``'s. ``ATGRPO.default_resource_request`` (which
``ATGRPOConfig.resource_request`` reads) applies it to RLlib's bundles.
"""

from __future__ import annotations

from typing import Sequence


def trial_bundles(config, rllib_bundles: Sequence[dict]) -> list[dict]:
    """RLlib's bundles plus the GPU of a driver-local env runner: with ``num_env_runners=0``
    the runner generates inside the main process, which RLlib would give only the learner's
    GPU. With resource pools, each pool's learners replace ``.learners(...)``'s.

    When the learner is local too (``num_learners=0``), runner and learner are *colocated*
    in the main process and share its GPU: the bundle holds the larger of the two requests,
    not their sum (with vLLM, ``vllm_gpu_memory_utilization`` leaves the learner its room).
    """
    bundles = [dict(bundle) for bundle in rllib_bundles]
    pools = config.parsed_resource_pools
    if pools is not None:
        bundles = _pooled_bundles(config, bundles, pools)
    runner_gpus = float(config.num_gpus_per_env_runner or 0)
    if config.num_env_runners == 0 and runner_gpus > 0:
        bundles[0]["GPU"] = max(float(bundles[0].get("GPU", 0)), runner_gpus)
    return bundles


def _pooled_bundles(config, bundles: list[dict], pools) -> list[dict]:
    """The main bundle (with the GPUs of pools whose learner runs in it), the env
    runners' bundles, and one bundle per remote learner of every pool."""
    num_learner_bundles = int(config.num_learners)
    kept = bundles[:len(bundles) - num_learner_bundles] if num_learner_bundles else bundles
    main = dict(kept[0])
    local = [pool for pool in pools if int(pool.num_learners) == 0]
    main["GPU"] = sum(float(pool.num_gpus_per_learner) for pool in local)
    main["CPU"] = max(float(config.num_cpus_for_main_process),
                      max((float(pool.num_cpus_per_learner) for pool in local), default=0.0))
    return [main] + kept[1:] + [bundle for pool in pools for bundle in pool.bundles()]
