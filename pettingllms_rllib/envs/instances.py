"""What makes two task seeds the same instance, and evaluation sets without repeats.

A policy tells instances apart only by what it is shown. Two seeds whose reset observations
are identical for every agent are the same task to it, whatever the env calls them; so an
evaluation instance that a training seed also produces is not held out, and an evaluation set
that plays one instance twice counts one result twice in its success rate and its interval.
Small procedural spaces hit both: a 4x4 open Plan-Path grid has 144 off-axis instances.

:func:`instance_fingerprint` is that identity; :func:`shared_instances` finds evaluation
instances a training seed also produces (``check_splits_disjoint`` in
:mod:`~pettingllms_rllib.envs.conformance` turns it into a conformance check) and
:func:`distinct_instance_seeds` picks an evaluation set of distinct instances.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT, TextParallelEnv

#: How many seeds :func:`distinct_instance_seeds` reads per instance asked for before it
#: concludes that the split has fewer distinct instances.
SEEDS_SCANNED_PER_INSTANCE = 20


class TooFewInstancesError(ValueError):
    """The evaluation split has fewer distinct instances than an evaluation asks for."""


def instance_fingerprint(env: TextParallelEnv, seed: int) -> str:
    """A SHA-256 of every agent's first observation after ``env.reset(seed=seed)``.

    Equal fingerprints mean the policy is shown the same task. Resets ``env``.
    """
    observations, _ = env.reset(seed=int(seed))
    shown = {str(agent): str(text) for agent, text in observations.items()}
    payload = json.dumps(shown, sort_keys=True).encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(payload).hexdigest()


def shared_instances(env: TextParallelEnv, train_seeds: Iterable[int],
                     test_seeds: Iterable[int]) -> dict[int, int]:
    """Each test seed whose instance a training seed also produces -> that training seed."""
    train_of: dict[str, int] = {}
    for seed in train_seeds:
        train_of.setdefault(instance_fingerprint(env, seed), int(seed))
    shared = {}
    for seed in test_seeds:
        match = train_of.get(instance_fingerprint(env, seed))
        if match is not None:
            shared[int(seed)] = match
    return shared


def distinct_instance_seeds(env: TextParallelEnv, num_instances: int, *,
                            first_seed: int = TRAIN_SEED_LIMIT,
                            max_seeds: int | None = None) -> list[int]:
    """The first ``num_instances`` seeds from ``first_seed`` on whose instances all differ.

    A seed whose instance an earlier one already produced is skipped, so on a large space this
    is ``first_seed, first_seed + 1, ...`` and on a small one it reaches further. At most
    ``max_seeds`` seeds (default ``SEEDS_SCANNED_PER_INSTANCE * num_instances``) are read;
    :class:`TooFewInstancesError` says how many distinct instances they held.
    """
    if num_instances < 1:
        raise ValueError(f"num_instances must be >= 1, got {num_instances}")
    limit = SEEDS_SCANNED_PER_INSTANCE * num_instances if max_seeds is None else int(max_seeds)
    seen: set[str] = set()
    chosen: list[int] = []
    for seed in range(int(first_seed), int(first_seed) + limit):
        fingerprint = instance_fingerprint(env, seed)
        if fingerprint not in seen:
            seen.add(fingerprint)
            chosen.append(seed)
            if len(chosen) == num_instances:
                return chosen
    raise TooFewInstancesError(
        f"{type(env).__name__}: the {limit} seeds from {first_seed} on hold only {len(chosen)} "
        f"distinct instances, fewer than the {num_instances} asked for; evaluate fewer "
        f"instances, give this split more instances (a larger task size, a larger test share) "
        f"or allow repeated instances")


def hash_split(key: str, test_fraction: float) -> str:
    """``"test"`` for a stable ``test_fraction`` share of keys, else ``"train"``: the first 8
    bytes of ``sha256(key)`` read as a number in [0, 1) are compared with the fraction, so a
    key's split never depends on the process, the file order or the other keys, and a larger
    fraction only moves keys into the test split. Envs split instances by content with it
    (an instance's key in the split its seed asks for: :func:`split_of_seed`)."""
    digest = hashlib.sha256(key.encode("utf-8", errors="replace")).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2.0 ** 64 < test_fraction else "train"
