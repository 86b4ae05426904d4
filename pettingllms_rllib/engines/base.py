"""The generation-engine protocol shared by the HF (CPU/GPU) and vLLM (GPU) engines.

An engine turns a batch of prompts into ``num_samples`` completions each and returns what the
learner needs to compute importance ratios without ever re-tokenising model output: the prompt
token ids (chat template applied), the response token ids and the per-token log-probabilities
under the *behaviour* policy at the sampling temperature the learner also uses.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Protocol, Sequence

from pettingllms_rllib.envs.base import answer_prefix_of


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How responses are sampled.

    Only temperature is supported (no top-k/top-p, no repetition penalty): the learner computes
    log-probs of the full softmax at the same temperature, so behaviour and learner log-probs
    agree and the PPO ratio starts at 1.

    Attributes:
        max_new_tokens: hard cap on response length in tokens.
        temperature: softmax temperature (> 0) used for sampling *and* for the learner's log-probs.
        seed: base seed of the sampler's torch generator (None = nondeterministic).
        greedy: take the most likely token instead of sampling (evaluation only: every one of
            K samples would be the same, and training needs samples). Log-probs are still
            reported at ``temperature``.
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    seed: int | None = None
    greedy: bool = False

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclasses.dataclass(frozen=True)
class Completion:
    """One sampled response to one prompt.

    ``response_ids`` include the end-of-sequence token when the model stopped by itself
    (``finish_reason == "stop"``) so the learner also trains the decision to stop;
    ``logprobs[i]`` is the behaviour log-prob of ``response_ids[i]``.
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str


#: Where a message's text goes while the chat template is rendered: private-use characters,
#: which no env prompt holds (prompts are printable ASCII) and no chat template writes.
_CONTENT_SLOT = "\ue000pettingllms-message-{}\ue000"
#: Roles whose text is the run's own configuration, parsed with the template's control tokens.
TRUSTED_ROLES = ("system",)


def encode_untrusted_text(tokenizer, text: str) -> list[int]:
    """Token ids of text an agent, a program or a client wrote: a special token's spelling in
    it (``<|im_start|>``) is encoded as the characters it is made of, never as the control
    token, so printed ChatML cannot open a forged turn (docs/sandbox.md, "What a program's
    output can do")."""
    return list(tokenizer(str(text), add_special_tokens=False,
                          split_special_tokens=True)["input_ids"])


def encode_chat(tokenizer, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of a chat with the generation prompt, where only the chat template's own
    text can produce control tokens: each message's text (but a system message's, the run's
    configuration) is untrusted (:func:`encode_untrusted_text`).

    The template is rendered with a placeholder for each untrusted text, its text is split at
    its control tokens, and each run of text between two control tokens (template text and
    message text together, as a tokenizer would see it) is encoded without special tokens.
    That is how a tokenizer encodes a whole rendered chat, so for text holding no special
    token's spelling the ids are exactly ``apply_chat_template(..., tokenize=True)``'s
    (``tests/engines/test_untrusted_text.py``)."""
    slots = [dict(m, content=_CONTENT_SLOT.format(i)) if m["role"] not in TRUSTED_ROLES
             else dict(m) for i, m in enumerate(messages)]
    rest = tokenizer.apply_chat_template(slots, add_generation_prompt=True, tokenize=False)
    pieces: list[tuple[str, bool]] = []  # (text, whether the template wrote it)
    for index, message in enumerate(messages):
        if message["role"] in TRUSTED_ROLES:
            continue
        before, found, rest = rest.partition(_CONTENT_SLOT.format(index))
        if not found:
            raise ValueError(f"the chat template does not write message {index}'s text "
                             "where it renders the message")
        pieces += [(before, True), (str(message["content"]), False)]
    pieces.append((rest, True))
    controls = dict(tokenizer.added_tokens_encoder)
    splitter = (re.compile("|".join(re.escape(t) for t in sorted(controls, key=len, reverse=True)))
                if controls else None)
    ids: list[int] = []
    run: list[str] = []

    def flush() -> None:
        if "".join(run):
            ids.extend(encode_untrusted_text(tokenizer, "".join(run)))
        run.clear()

    for text, from_template in pieces:
        start = 0
        for match in (splitter.finditer(text) if from_template and splitter else ()):
            run.append(text[start:match.start()])
            flush()
            ids.append(int(controls[match.group()]))
            start = match.end()
        run.append(text[start:])
    flush()
    return ids


def encode_chat_prompt(tokenizer, prompt: str, system_prompt: str | None = None) -> list[int]:
    """Token ids of one prompt as every engine shows it to the model: the chat template with the
    generation prompt when the tokenizer has one, the plain text otherwise, then the prompt's
    answer prefix when it is a :class:`~pettingllms_rllib.envs.base.Prompt` with one. The
    prompt's text is untrusted (it holds other agents' answers and programs' output):
    :func:`encode_untrusted_text`.

    All engines encode through this one function, so the HF and vLLM engines (and the learner,
    which receives these ids) always agree on the prompt tokens.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = []
        if system_prompt is not None:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": str(prompt)})
        ids = encode_chat(tokenizer, messages)
    else:
        text = prompt if system_prompt is None else f"{system_prompt}\n\n{prompt}"
        ids = tokenizer(str(text), add_special_tokens=True,
                        split_special_tokens=True)["input_ids"]
    if len(ids) == 0:
        raise ValueError(f"prompt {prompt!r} encodes to no tokens; the model needs one")
    prefix = answer_prefix_of(prompt)
    if prefix:  # the start of the answer, after the generation prompt (envs.base.Prompt)
        return list(ids) + list(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    return list(ids)


def with_answer_prefixes(prompts: Sequence[str],
                         results: Sequence[Sequence[Completion]]) -> list[list[Completion]]:
    """``results`` with each completion's text starting with its prompt's answer prefix: the
    whole answer, as the env parses it (the prefix's tokens are in ``prompt_ids``, so the
    learner trains only what the model wrote). Every engine's ``generate`` ends with this."""
    out = []
    for prompt, completions in zip(prompts, results, strict=True):
        prefix = answer_prefix_of(prompt)
        out.append([dataclasses.replace(c, text=prefix + c.text) for c in completions]
                   if prefix else list(completions))
    return out


def encode_requests(tokenizer, prompts: Sequence[str], num_samples: int,
                    system_prompt: str | None = None) -> list[list[int]]:
    """Check a generate request and encode its prompts (shared by every engine)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    return [encode_chat_prompt(tokenizer, prompt, system_prompt) for prompt in prompts]


class ModuleEngine(Protocol):
    """What an env runner generates with: the weights of every module it serves, and a way to
    sample from each. Both kinds implement it over their own state, so the runner never asks
    which kind it holds: :class:`~pettingllms_rllib.engines.hf_engine.HFModuleEngine` (torch
    inference copies of the modules) and
    :class:`~pettingllms_rllib.engines.vllm_engine.VLLMModuleEngine` (vLLM serves them).
    :func:`~pettingllms_rllib.engines.start_module_engine` builds one by name.
    """

    @property
    def served_weights_version(self) -> int:
        """The oldest weights version any module is served with."""
        ...

    def generate(self, module_id: str, prompts: Sequence[str], num_samples: int, *,
                 greedy: bool = False) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``num_samples`` completions of ``module_id``, in prompt
        order; ``greedy`` decodes the most likely tokens (held-out evaluation)."""
        ...

    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Serve ``weights`` (module id -> state; modules left out did not change) as weights
        ``version``. Called for every state the runner accepts, with an empty mapping when
        the state carried a version only."""
        ...

    def close(self) -> None:
        """Release what the engine holds (GPU memory, temporary files)."""
        ...


class Engine(Protocol):
    """Generates ``num_samples`` completions for every prompt in one batched call.

    ``model`` is whatever the engine generates with: the (peft-wrapped) torch model for
    :class:`~pettingllms_rllib.engines.hf_engine.HFEngine`, the served adapter's name (or None
    for the base weights) for :class:`~pettingllms_rllib.engines.vllm_engine.VLLMEngine`.
    """

    sampling: SamplingConfig

    def generate(self, model: Any, prompts: Sequence[str],
                 num_samples: int) -> list[list[Completion]]:
        """Return ``len(prompts)`` lists of ``num_samples`` completions each, in prompt order."""
        ...
