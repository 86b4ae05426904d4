"""The placement-group bundles a Tune trial of ``ATGRPO`` reserves, and whether they fit.

RLlib's ``Algorithm.default_resource_request`` gives the main process, one bundle per env
runner (and evaluation runner) and one per learner. :func:`trial_bundles` changes what RLlib
cannot know: the GPU of a driver-local env runner, and with ``.resource_pools(...)`` each
pool's learners instead of ``.learners(...)``'s. ``ATGRPO.default_resource_request`` (which
``ATGRPOConfig.resource_request`` reads) applies it to RLlib's bundles.
:func:`resource_problems` compares a config's bundles with what a machine or cluster has, so
that a trial Ray could never place is refused before Ray starts (``ATGRPOConfig.check_resources``
and the CLI).
"""

from __future__ import annotations

import os
from typing import Sequence

#: What to change when a trial asks for more of a resource than there is.
_REMEDIES = {"CPU": "fewer runners or learners, fractional num_cpus_per_*, --num-cpus for a "
                    "local Ray, or --address for a cluster that has them",
             "GPU": "no GPU settings on a machine without GPUs, fractional num_gpus_per_*, or "
                    "--address for a cluster that has them"}


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


def machine_resources() -> dict[str, float]:
    """The CPUs and GPUs a local Ray started on this machine would have (Ray's own CPU count,
    which honours container limits; CUDA's visible devices)."""
    import torch

    try:
        from ray._private.utils import get_num_cpus

        cpus = float(get_num_cpus())
    except Exception:  # a Ray without the helper: the OS's count
        cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                     else os.cpu_count() or 1)
    gpus = float(torch.cuda.device_count()) if torch.cuda.is_available() else 0.0
    return {"CPU": cpus, "GPU": gpus}


def resource_problems(config, available: dict[str, float], where: str) -> list[str]:
    """Why a Tune trial of ``config`` could never start on ``available`` (``{"CPU": n, "GPU":
    m}``; Ray would wait for the placement group forever), one message per resource naming
    the settings that ask for it; [] when it fits."""
    request = config.resource_request()
    problems = []
    for resource in ("CPU", "GPU"):
        needed = sum(float(bundle.get(resource, 0)) for bundle in request)
        have = float(available.get(resource, 0) or 0)
        if needed > have + 1e-9:
            problems.append(
                f"a trial asks for {needed:g} {resource}(s) in all ({len(request)} Ray "
                f"bundle(s): {_settings_asking_for(config, resource)}) but {where} has "
                f"{have:g}; accepted: at most {have:g} in all ({_REMEDIES[resource]})")
    return problems


def _settings_asking_for(config, resource: str) -> str:
    """The settings that ask for CPUs or GPUs, with their values, for the error message."""
    word = "cpus" if resource == "CPU" else "gpus"
    parts = [f"env_runners.num_env_runners={config.num_env_runners} x "
             f"env_runners.num_{word}_per_env_runner="
             f"{getattr(config, f'num_{word}_per_env_runner')}"]
    if resource == "CPU":
        parts.insert(0, f"resources.num_cpus_for_main_process="
                        f"{config.num_cpus_for_main_process}")
    if config.evaluation_num_env_runners:
        parts.append(f"evaluation.evaluation_num_env_runners="
                     f"{config.evaluation_num_env_runners}")
    pools = config.parsed_resource_pools
    if pools is None:
        parts.append(f"learners.num_learners={config.num_learners} x "
                     f"learners.num_{word}_per_learner="
                     f"{getattr(config, f'num_{word}_per_learner')}")
    else:
        parts += [f"resource_pools.pools.{pool.name}: num_learners={pool.num_learners} x "
                  f"num_{word}_per_learner={getattr(pool, f'num_{word}_per_learner')}"
                  for pool in pools]
    return ", ".join(parts)
