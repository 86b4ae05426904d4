"""Records -> one padded training batch per module (pure numpy).

Each row is ``prompt_ids + response_ids`` right-padded to the module's longest row. Only response
positions carry a loss (``response_mask``); ``old_logp`` sits at the same positions as the tokens
it scores, and the response's advantage is broadcast to its tokens by the loss. In shared mode a
module receives every agent's records, but each record keeps the advantage computed in its own
(task, agent, turn) group.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from pettingllms_rllib.core.records import SampleRecord

BATCH_COLUMNS = ("input_ids", "attention_mask", "response_mask", "old_logp", "advantages",
                 "rewards")


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
    }
    for row, record in enumerate(records):
        if len(record.behaviour_logprobs) != len(record.response_ids):
            raise ValueError(f"record {record.group_key}: {len(record.response_ids)} response "
                             f"tokens but {len(record.behaviour_logprobs)} log-probs")
        start, end = len(record.prompt_ids), len(record.prompt_ids) + len(record.response_ids)
        batch["input_ids"][row, :end] = record.prompt_ids + record.response_ids
        batch["attention_mask"][row, :end] = 1
        batch["response_mask"][row, start:end] = 1.0
        batch["old_logp"][row, start:end] = record.behaviour_logprobs
    return batch


def batches_per_module(records: Sequence[SampleRecord],
                       pad_token_id: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Route records to their module (``policy_mapping_fn(agent)``) and pad each module's set."""
    by_module: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        if record.response_ids:
            by_module[record.module_id].append(record)
    return {module: pad_records(rs, pad_token_id) for module, rs in sorted(by_module.items())}
