"""Per-module minibatch plans: every row is trained on exactly ``num_epochs`` times.

RLlib's ``MiniBatchCyclicIterator`` cuts every module's batch into minibatches of the same
row count and keeps cycling *all* modules until the module with the most rows has finished its
epochs, so a module with fewer rows is trained again on rows it has already used (off-policy
updates nobody asked for, and a different number of passes per role than in shared mode). This
plan instead splits each module's rows into its own minibatches: step i updates every module
that has an i-th minibatch, and a module whose minibatches are used up sits the remaining steps
out. Rows are whole shared-prefix groups (``core.batching.pack_records``) or single samples;
``minibatch_size`` counts *samples*, and a minibatch holds whole rows of at most that many
samples (a row larger than it goes alone).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

#: One step of the plan: module id -> the row indices of its minibatch in this step.
Step = dict[str, np.ndarray]


def split_rows(samples_per_row: Sequence[int], order: Sequence[int],
               minibatch_size: int | None) -> list[np.ndarray]:
    """Cut ``order`` (row indices) into consecutive minibatches of at most ``minibatch_size``
    samples each; ``None`` = one minibatch of every row."""
    order = np.asarray(order, dtype=np.int64)
    if minibatch_size is None:
        return [order] if len(order) else []
    if minibatch_size < 1:
        raise ValueError(f"minibatch_size must be >= 1 or None, got {minibatch_size}")
    pieces, current, filled = [], [], 0
    for row in order.tolist():
        size = int(samples_per_row[row])
        if current and filled + size > minibatch_size:
            pieces.append(np.asarray(current, dtype=np.int64))
            current, filled = [], 0
        current.append(row)
        filled += size
    if current:
        pieces.append(np.asarray(current, dtype=np.int64))
    return pieces


def plan_minibatches(samples_per_row: Mapping[str, Sequence[int]], *, num_epochs: int,
                     minibatch_size: int | None, shuffle: bool = False,
                     rng: np.random.Generator | None = None) -> list[Step]:
    """The gradient steps of one update over every module's rows.

    Args:
        samples_per_row: module id -> samples in each of its rows (1 per row in the per-row
            layout, the group size in the shared-prefix layout).
        num_epochs: passes over each module's rows.
        minibatch_size: samples per minibatch, per module; None = a module's whole batch.
        shuffle: reshuffle each module's rows at the start of every epoch (needs ``rng``).
        rng: the generator of the shuffles.

    Returns:
        The steps, in order; each maps the modules it updates to their row indices. Every row
        of every module appears in exactly ``num_epochs`` steps.
    """
    if int(num_epochs) < 1:
        raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
    if shuffle and rng is None:
        raise ValueError("shuffle=True needs an rng")
    steps: list[Step] = []
    for _ in range(int(num_epochs)):
        per_module = {}
        for module_id, sizes in sorted(samples_per_row.items()):
            order = np.arange(len(sizes))
            if shuffle:
                order = rng.permutation(order)
            per_module[module_id] = split_rows(sizes, order, minibatch_size)
        for i in range(max((len(p) for p in per_module.values()), default=0)):
            steps.append({m: pieces[i] for m, pieces in per_module.items() if i < len(pieces)})
    return steps


def rows_trained_before_any_update(steps: Sequence[Step], module_id: str) -> np.ndarray:
    """The rows of ``module_id``'s first step that no later step trains again.

    That step's forward runs on the weights the module's update starts from, so for these rows
    it *is* the decoupled objective's ratio denominator (the learner's own pre-update
    log-probs) and needs no separate no-gradient pass. A row a later epoch trains again keeps
    its recompute: by then its forward runs on updated weights.
    """
    first = next((step[module_id] for step in steps if module_id in step), None)
    if first is None:
        return np.zeros(0, dtype=np.int64)
    later = [step[module_id] for step in steps if module_id in step][1:]
    again = np.concatenate(later) if later else np.zeros(0, dtype=np.int64)
    return np.setdiff1d(np.asarray(first, dtype=np.int64), again)
