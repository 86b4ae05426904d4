"""The learner's view of sampled completions, shared by the engine tests."""

from __future__ import annotations

import torch

from pettingllms_rllib.models.logprobs import response_logprobs


def teacher_forced(model, completions, temperature, pad_id):
    """Per-completion learner log-probs of the response tokens (right-padded learner layout)."""
    rows = [list(c.prompt_ids) + list(c.response_ids) for c in completions]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    for i, (row, c) in enumerate(zip(rows, completions)):
        input_ids[i, :len(row)] = torch.tensor(row)
        attention_mask[i, :len(row)] = 1
        response_mask[i, len(c.prompt_ids):len(row)] = 1
    with torch.no_grad():
        logprobs = response_logprobs(model, input_ids, attention_mask, response_mask,
                                     temperature=temperature)
    return [logprobs[i, len(c.prompt_ids):len(rows[i])] for i, c in enumerate(completions)]
