"""Records -> one padded training batch per module (pure numpy).

Two layouts. Per row (:func:`pad_records`): each row is ``prompt_ids + response_ids``
right-padded to the module's longest row. Shared prefix (:func:`pack_records`, the default for
training): one row per distinct prompt, holding the prompt once and every response to it after
it. In both, only response positions carry a loss (``response_mask``) and ``old_logp`` sits at
the same positions as the tokens it scores. In shared mode a module receives every agent's
records, but each record keeps the advantage computed in its own (task, agent, turn) group.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Collection, Sequence

import numpy as np

from pettingllms_rllib.core.records import SampleRecord

BATCH_COLUMNS = ("input_ids", "attention_mask", "response_mask", "old_logp", "advantages",
                 "rewards", "weights_version")


def _check_logprobs(record: SampleRecord) -> None:
    if len(record.behaviour_logprobs) != len(record.response_ids):
        raise ValueError(f"record {record.group_key}: {len(record.response_ids)} response "
                         f"tokens but {len(record.behaviour_logprobs)} log-probs")


def pad_records(records: Sequence[SampleRecord], pad_token_id: int = 0) -> dict[str, np.ndarray]:
    """Pad one module's records into the arrays the learner consumes."""
    if not records:
        raise ValueError("cannot build a batch from zero records")
    length = max(len(r.prompt_ids) + len(r.response_ids) for r in records)
    rows = len(records)
    batch = {
        "input_ids": np.full((rows, length), pad_token_id, dtype=np.int64),
        "attention_mask": np.zeros((rows, length), dtype=np.int64),
        "response_mask": np.zeros((rows, length), dtype=np.float32),
        "old_logp": np.zeros((rows, length), dtype=np.float32),
        "advantages": np.array([r.advantage for r in records], dtype=np.float32),
        "rewards": np.array([r.reward for r in records], dtype=np.float32),
        "weights_version": np.array([r.weights_version for r in records], dtype=np.int64),
    }
    for row, record in enumerate(records):
        _check_logprobs(record)
        start, end = len(record.prompt_ids), len(record.prompt_ids) + len(record.response_ids)
        batch["input_ids"][row, :end] = record.prompt_ids + record.response_ids
        batch["attention_mask"][row, :end] = 1
        batch["response_mask"][row, start:end] = 1.0
        batch["old_logp"][row, start:end] = record.behaviour_logprobs
    return batch


def records_to_train(records: Sequence[SampleRecord], keep: Sequence[bool], *,
                     frozen_modules: Collection[str] = (),
                     mask_truncated: bool = False) -> list[SampleRecord]:
    """The records the learner trains on: those the advantage step kept, of modules that are
    not frozen and, with ``mask_truncated`` (DAPO's overlong filtering, arXiv 2503.14476
    Sec. 3.4), not cut off at the token limit (``finish_reason == "length"``). A masked record
    still counted in its group's statistics; only its own loss is left out."""
    frozen = set(frozen_modules)
    return [record for record, kept in zip(records, keep, strict=True)
            if kept and record.module_id not in frozen
            and not (mask_truncated and record.finish_reason == "length")]


def batches_per_module(records: Sequence[SampleRecord], pad_token_id: int = 0, *,
                       shared_prefix: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Route records to their module (``policy_mapping_fn(agent)``) and pad each module's set,
    one row per record, or with ``shared_prefix`` one packed row per distinct prompt
    (:func:`pack_records`)."""
    by_module: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        if record.response_ids:
            by_module[record.module_id].append(record)
    build = pack_records if shared_prefix else pad_records
    return {module: build(rs, pad_token_id) for module, rs in sorted(by_module.items())}


#: Columns of a shared-prefix (packed) batch: one row per distinct prompt of a module.
PACKED_COLUMNS = ("input_ids", "position_ids", "segment_ids", "response_mask", "old_logp",
                  "advantages", "num_samples", "weights_version")
#: ``segment_ids`` of the shared prompt and of padding; responses are numbered 1..n.
PROMPT_SEGMENT, PADDING_SEGMENT = 0, -1


def group_by_prompt(records: Sequence[SampleRecord]) -> list[list[SampleRecord]]:
    """Records that share identical prompt token ids, in order of first appearance.

    An AT-GRPO group (task, agent, turn) answers one prompt, so its K candidates land in one
    bucket; a module in shared mode keeps different agents' prompts apart, and vanilla GRPO's
    trajectory groups (several prompts) split into one bucket per prompt.
    """
    buckets: dict[tuple[int, ...], list[SampleRecord]] = {}
    for record in records:
        buckets.setdefault(tuple(record.prompt_ids), []).append(record)
    return list(buckets.values())


def pack_records(records: Sequence[SampleRecord],
                 pad_token_id: int = 0) -> dict[str, np.ndarray]:
    """Pack one module's records into shared-prefix rows: ``prompt, response_1 .. response_n``.

    Every row holds one distinct prompt once, followed by all responses to it; the learner lets
    each response attend to the prompt and to its own earlier tokens only (``segment_ids``) and
    gives its tokens the positions they have in a ``prompt + response`` row (``position_ids``).
    The prompt is so computed once per group instead of once per candidate (K times fewer
    prompt tokens), with exactly the per-row log-probs and gradients. ``advantages`` is per
    token here (each response carries its own); ``num_samples`` counts the responses of a row,
    which is what ``minibatch_size`` counts; ``weights_version`` is the oldest weights version
    a row's responses were sampled with.
    """
    if not records:
        raise ValueError("cannot build a batch from zero records")
    for record in records:
        _check_logprobs(record)
    buckets = group_by_prompt(records)
    length = max(len(group[0].prompt_ids) + sum(len(r.response_ids) for r in group)
                 for group in buckets)
    rows = len(buckets)
    batch = {
        "input_ids": np.full((rows, length), pad_token_id, dtype=np.int64),
        "position_ids": np.zeros((rows, length), dtype=np.int64),
        "segment_ids": np.full((rows, length), PADDING_SEGMENT, dtype=np.int64),
        "response_mask": np.zeros((rows, length), dtype=np.float32),
        "old_logp": np.zeros((rows, length), dtype=np.float32),
        "advantages": np.zeros((rows, length), dtype=np.float32),
        "num_samples": np.array([len(group) for group in buckets], dtype=np.int64),
        # The oldest weights any response of the row was sampled with (asynchronous training
        # corrects rows sampled with older weights than the learner's; core/loss.py).
        "weights_version": np.array([min(r.weights_version for r in group)
                                     for group in buckets], dtype=np.int64),
    }
    for row, group in enumerate(buckets):
        prompt = group[0].prompt_ids
        end = len(prompt)
        batch["input_ids"][row, :end] = prompt
        batch["position_ids"][row, :end] = np.arange(end)
        batch["segment_ids"][row, :end] = PROMPT_SEGMENT
        for segment, record in enumerate(group, start=1):
            start, end = end, end + len(record.response_ids)
            batch["input_ids"][row, start:end] = record.response_ids
            batch["position_ids"][row, start:end] = np.arange(len(prompt), len(prompt)
                                                              + len(record.response_ids))
            batch["segment_ids"][row, start:end] = segment
            batch["response_mask"][row, start:end] = 1.0
            batch["old_logp"][row, start:end] = record.behaviour_logprobs
            batch["advantages"][row, start:end] = record.advantage
    return batch
