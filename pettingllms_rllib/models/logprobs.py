"""Teacher-forced log-probs of response tokens without materialising full-vocabulary logits.

The learner's memory on small LMs is dominated by the logits: for SmolLM2 (49k vocabulary) a
batch of 16 x 256 tokens holds 16 * 256 * 49152 fp32 logits = 0.8 GB, and ``log_softmax`` plus
backward keep several such tensors alive. Only response tokens enter the loss, so here the decoder
body runs on the whole sequence but the LM head runs only on the hidden states that predict a
response token, in chunks, each chunk under activation checkpointing so that backward
recomputes one chunk's logits at a time instead of keeping all of them.

Layout used across the library: rows are ``prompt + response`` (padding anywhere outside the
real tokens, usually on the right), ``response_mask[b, t] = 1`` where ``input_ids[b, t]`` is a
response token. The log-prob at ``t`` is that of ``input_ids[b, t]`` given ``input_ids[b, :t]``,
under ``softmax(logits / temperature)``: the same distribution the engine sampled from.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["response_logprobs", "packed_response_logprobs", "shared_prefix_attention_mask",
           "reference_response_logprobs", "position_ids_from_mask", "unwrap_peft"]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so a left-padded row gets the positions it would
    have unpadded (the engine pads left, the learner pads right; both must agree)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def unwrap_peft(causal_lm):
    """The transformers model under an optional peft wrapper.

    ``PeftModel.get_base_model()`` returns the model whose layers peft has replaced in place, so
    the active LoRA adapter (and ``disable_adapter()``) still apply when calling its parts.
    """
    get_base_model = getattr(causal_lm, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else causal_lm


def _check_inputs(input_ids, attention_mask, response_mask, temperature, chunk_size):
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, L], got shape {tuple(input_ids.shape)}")
    if attention_mask.shape != input_ids.shape or response_mask.shape != input_ids.shape:
        raise ValueError("input_ids, attention_mask and response_mask must have one shape, got "
                         f"{tuple(input_ids.shape)}, {tuple(attention_mask.shape)}, "
                         f"{tuple(response_mask.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    response = response_mask.bool()
    if response[:, 0].any():
        raise ValueError("a response token at position 0 has no prefix to condition on")
    if (response & ~attention_mask.bool()).any():
        raise ValueError("response_mask marks positions that attention_mask masks out")


def _softcap(config) -> float | None:
    """Gemma-style final logit soft-capping, which must be applied before the temperature."""
    return getattr(config, "final_logit_softcapping", None) or None


def _chunk_logprobs(head, states, targets, temperature: float, softcap: float | None,
                    entropy_grad: bool, with_entropy: bool = True):
    """Log-probs of ``targets`` and the entropy of each position's distribution (detached
    unless ``entropy_grad``: only an entropy bonus in the loss needs its gradient; None
    without ``with_entropy``, which saves three passes over the ``chunk x vocab`` logits)."""
    logits = head(states).float()
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if temperature != 1.0:  # skipping the no-op division saves one chunk x vocab tensor
        logits = logits / temperature
    log_norm = torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            # H = logsumexp - sum(p * logits), at the sampling temperature
            entropy = log_norm - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    # gather - logsumexp: the same value as log_softmax(...).gather without a second [N, V] tensor.
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm, entropy


def _head_logprobs(model, head, states: torch.Tensor, targets: torch.Tensor,
                   temperature: float, chunk_size: int, entropy_grad: bool = False,
                   with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``targets`` [N] given hidden ``states`` [N, H], through the LM head in
    checkpointed chunks (see the module docstring), and each position's entropy [N] (None
    without ``with_entropy``)."""
    softcap = _softcap(model.config)
    use_checkpoint = torch.is_grad_enabled() and states.requires_grad
    logps, entropies = [], []
    for start in range(0, states.shape[0], chunk_size):
        chunk = (head, states[start:start + chunk_size], targets[start:start + chunk_size],
                 temperature, softcap, entropy_grad, with_entropy)
        if use_checkpoint:
            logp, entropy = checkpoint(_chunk_logprobs, *chunk, use_reentrant=False)
        else:
            logp, entropy = _chunk_logprobs(*chunk)
        logps.append(logp)
        entropies.append(entropy)
    if not logps:
        empty = states.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    return torch.cat(logps), (torch.cat(entropies) if with_entropy else None)


def _decoder_and_head(causal_lm):
    model = unwrap_peft(causal_lm)
    head = model.get_output_embeddings()
    if head is None:
        raise TypeError(f"{type(model).__name__} has no output embeddings (LM head)")
    return model, model.get_decoder(), head


def response_logprobs(causal_lm, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      response_mask: torch.Tensor, *, temperature: float = 1.0,
                      chunk_size: int = 1024, entropy_out: dict | None = None,
                      entropy_grad: bool = False) -> torch.Tensor:
    """Log-prob of every response token given its prefix; 0 at non-response positions.

    Args:
        causal_lm: a transformers causal LM, or a peft model wrapping one (the active adapter
            applies).
        input_ids: ``[B, L]`` prompt + response token ids, padded.
        attention_mask: ``[B, L]``, 1 on real tokens.
        response_mask: ``[B, L]``, 1 on response tokens (never at position 0).
        temperature: divides the logits, as in sampling.
        chunk_size: how many response tokens go through the LM head at once; bounds the largest
            activation at ``chunk_size x vocab`` floats.
        entropy_out: a dict that receives ``"entropy"``: ``[B, L]`` entropy of the policy's
            distribution (at ``temperature``) at each response position, 0 elsewhere.
        entropy_grad: keep that entropy's gradient (an entropy bonus in the loss); by default
            it is detached, a diagnostic only.

    Returns:
        ``[B, L]`` float32 log-probs, differentiable w.r.t. the model's trainable parameters.
    """
    _check_inputs(input_ids, attention_mask, response_mask, temperature, chunk_size)
    model, decoder, head = _decoder_and_head(causal_lm)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask,
                     position_ids=position_ids_from_mask(attention_mask),
                     use_cache=False).last_hidden_state
    # Hidden state at t-1 predicts the token at t.
    predicts_response = response_mask[:, 1:].bool()
    states = hidden[:, :-1][predicts_response]
    targets = input_ids[:, 1:][predicts_response]

    flat, entropy = _head_logprobs(model, head, states, targets, temperature, chunk_size,
                                   entropy_grad, with_entropy=entropy_out is not None)
    if entropy_out is not None:
        entropy_out["entropy"] = torch.nn.functional.pad(torch.zeros(
            predicts_response.shape, device=hidden.device).masked_scatter(
                predicts_response, entropy), (1, 0))
    shifted = torch.zeros(predicts_response.shape, dtype=torch.float32, device=hidden.device)
    shifted = shifted.masked_scatter(predicts_response, flat)
    return torch.nn.functional.pad(shifted, (1, 0))


#: Attention implementations that accept the custom 4-D mask of a shared-prefix row.
SHARED_PREFIX_ATTENTION = ("sdpa", "eager")


def shared_prefix_attention_mask(segment_ids: torch.Tensor, *, boolean: bool,
                                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``[G, 1, L, L]`` attention mask of packed rows ``prompt, response_1 .. response_n``.

    ``segment_ids[g, t]`` is 0 on the prompt, k on response k and -1 on padding. A token sees
    earlier tokens of its own segment and, for responses, the whole prompt before it: exactly
    what it sees in its own ``prompt + response`` row. Every position also sees itself, so no
    row of the mask is empty (an all-masked softmax row is NaN in SDPA, and a NaN in a padding
    row would reach real gradients through the attention backward). ``boolean`` gives True =
    attend (SDPA); otherwise an additive mask of ``dtype`` (eager attention).
    """
    length = segment_ids.shape[1]
    query, key = segment_ids.unsqueeze(2), segment_ids.unsqueeze(1)
    positions = torch.arange(length, device=segment_ids.device)
    causal = positions.unsqueeze(1) >= positions.unsqueeze(0)
    allowed = causal & (query >= 0) & (key >= 0) & ((key == 0) | (key == query))
    allowed |= torch.eye(length, dtype=torch.bool, device=segment_ids.device)
    allowed = allowed.unsqueeze(1)
    if boolean:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min)


def packed_response_logprobs(causal_lm, input_ids: torch.Tensor, position_ids: torch.Tensor,
                             segment_ids: torch.Tensor, response_mask: torch.Tensor, *,
                             temperature: float = 1.0, chunk_size: int = 1024,
                             entropy_out: dict | None = None,
                             entropy_grad: bool = False) -> torch.Tensor:
    """:func:`response_logprobs` for shared-prefix rows (``core.batching.pack_records``).

    The prompt of a row runs through the decoder once and its n responses on top of it, each
    masked from the others (:func:`shared_prefix_attention_mask`) and placed at the positions
    it has after the prompt, so every response token gets the log-prob, and every parameter the
    gradient, of the per-row computation; the prompt's activations receive the sum of the
    responses' gradients, as its n copies would. The first token of a response is predicted
    by the prompt's last hidden state, the others by their own previous token.

    Args:
        causal_lm: a transformers causal LM (SDPA or eager attention), optionally peft-wrapped.
        input_ids / position_ids / segment_ids / response_mask: ``[G, L]`` packed rows.
        temperature / chunk_size / entropy_out / entropy_grad: as in
            :func:`response_logprobs`.

    Returns:
        ``[G, L]`` float32 log-probs at response positions, 0 elsewhere.
    """
    shapes = {tuple(t.shape) for t in (input_ids, position_ids, segment_ids, response_mask)}
    if input_ids.dim() != 2 or len(shapes) != 1:
        raise ValueError(f"packed columns must share one [G, L] shape, got {sorted(shapes)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    model, decoder, head = _decoder_and_head(causal_lm)
    implementation = getattr(model.config, "_attn_implementation", "eager")
    if implementation not in SHARED_PREFIX_ATTENTION:
        raise ValueError(f"shared-prefix training needs one of {SHARED_PREFIX_ATTENTION} "
                         f"attention, the model uses {implementation!r}; set "
                         f"training(shared_prefix_training=False)")
    segments = segment_ids.long()
    response = response_mask.bool()
    if (response & (segments <= 0)).any():
        raise ValueError("response_mask marks prompt or padding positions")
    mask = shared_prefix_attention_mask(segments, boolean=implementation == "sdpa",
                                        dtype=decoder.dtype if hasattr(decoder, "dtype")
                                        else torch.float32)
    hidden = decoder(input_ids=input_ids, attention_mask=mask, position_ids=position_ids.long(),
                     use_cache=False).last_hidden_state

    rows, cols = response.nonzero(as_tuple=True)
    prompt_last = (segments == 0).sum(dim=1) - 1
    previous = (cols - 1).clamp(min=0)
    continues = segments[rows, previous] == segments[rows, cols]
    predictor = torch.where(continues, previous, prompt_last[rows])
    if (predictor < 0).any():
        raise ValueError("a response in a packed row has no prompt to condition on")
    flat, entropy = _head_logprobs(model, head, hidden[rows, predictor], input_ids[rows, cols],
                                   temperature, chunk_size, entropy_grad,
                                   with_entropy=entropy_out is not None)
    if entropy_out is not None:
        entropy_out["entropy"] = torch.zeros(response.shape, device=hidden.device).index_put(
            (rows, cols), entropy)
    out = torch.zeros(response.shape, dtype=torch.float32, device=hidden.device)
    return out.index_put((rows, cols), flat)


def reference_response_logprobs(causal_lm, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                response_mask: torch.Tensor, *,
                                temperature: float = 1.0) -> torch.Tensor:
    """The straightforward full-logits version of :func:`response_logprobs`.

    Kept as the executable definition the efficient version is tested against and as the
    baseline of the learner-memory benchmark; it needs ``B x L x vocab`` floats, do not train
    with it.
    """
    _check_inputs(input_ids, attention_mask, response_mask, temperature, 1)
    logits = causal_lm(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=position_ids_from_mask(attention_mask),
                       use_cache=False).logits.float()
    logprobs = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    picked = logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    picked = picked * response_mask[:, 1:].to(picked.dtype)
    return torch.nn.functional.pad(picked, (1, 0))
