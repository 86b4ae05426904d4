"""RLModules that wrap HF causal LMs, for full fine-tuning and for one LoRA adapter per module.

* :class:`CausalLMRLModule`: one full model per ModuleID (``model_config`` says which).
* :class:`LoRAAdapterRLModule`: a *view* onto one adapter of a shared peft model.
* :class:`SharedBaseLoRAMultiRLModule`: builds ONE base model and one LoRA adapter per
  ModuleID, so "one adapter per role on one base" costs one base model's memory.

Generation is not an RLModule forward pass (it is an autoregressive loop in an engine); the
runner hands :attr:`causal_lm` to its engine after :meth:`activate`. ``forward_train`` returns
the log-probs of the response tokens only (see :mod:`pettingllms_rllib.models.logprobs`).

``model_config`` keys (filled by ``ATGRPOConfig`` from its ``.llm()`` section):
``model`` (a :class:`~pettingllms_rllib.models.loading.ModelSpec` field dict), ``temperature``,
``logprob_chunk_size``, ``gradient_checkpointing``, ``autocast_dtype``, ``entropy_gradient``
(an entropy bonus trains on the entropy output), ``reference_copy`` (full fine-tuning with a KL
penalty) and, for LoRA, ``lora`` (``peft.LoraConfig`` keyword arguments).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from pettingllms_rllib.models.loading import ModelSpec, load_causal_lm
from pettingllms_rllib.models.precision import learner_dtypes
from pettingllms_rllib.models.memory import DEFAULT_LORA, lora_kwargs  # noqa: F401 (tested)
from pettingllms_rllib.models.logprobs import packed_response_logprobs, response_logprobs

TOKEN_LOGP = "token_logp"
#: ``forward_train`` output: the policy's entropy at each response position (differentiable
#: when the module's config has ``entropy_gradient``, for an entropy bonus; else detached).
TOKEN_ENTROPY = "token_entropy"


def _maybe_checkpoint_activations(causal_lm, config: dict, inference_only: bool) -> None:
    """Enable decoder gradient checkpointing on learner copies when the config asks for it."""
    if config.get("gradient_checkpointing") and not inference_only:
        causal_lm.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False})


def _to_torch_state(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in state.items()}


class CausalLMRLModule(TorchRLModule):
    """One HF causal LM per ModuleID; all its parameters are trainable (full fine-tuning)."""

    @override(TorchRLModule)
    def setup(self):
        config = self.model_config or {}
        spec = ModelSpec.coerce(config.get("model"))
        weights, autocast = learner_dtypes(spec.dtype_choice,
                                           trains_all_weights=not self.inference_only)
        self.causal_lm = load_causal_lm(dataclasses.replace(spec, dtype=weights))
        _maybe_checkpoint_activations(self.causal_lm, config, self.inference_only)
        self._read_logprob_settings(config, default_autocast=autocast)
        #: The frozen starting model, the KL penalty's reference (``kl_coef > 0``): learners
        #: only, never part of the module's state or its trainable parameters.
        self.reference_lm = None
        if config.get("reference_copy") and not self.inference_only:
            self.reference_lm = load_causal_lm(dataclasses.replace(spec, dtype=weights))
            self.reference_lm.requires_grad_(False)

    def _read_logprob_settings(self, config: dict, default_autocast: str | None = None) -> None:
        """``default_autocast``: the autocast that ``model_dtype: auto`` asks for (a learner
        holding fp32 master weights); an explicit ``autocast_dtype`` wins."""
        self.temperature = float(config.get("temperature", 1.0))
        self.logprob_chunk_size = int(config.get("logprob_chunk_size", 1024))
        self.entropy_gradient = bool(config.get("entropy_gradient", False))
        #: LoRA layers whose fp32 adapters compute in bf16 in this module's forward.
        self._uncast_layers: list = []
        dtype_name = config.get("autocast_dtype") or default_autocast
        self.autocast_dtype = None if dtype_name is None else getattr(torch, dtype_name)

    def activate(self) -> None:
        """Make this module's weights the ones the shared network computes with (LoRA hook)."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.causal_lm.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def no_sync(self):
        """RLlib enters DDP's ``no_sync`` around the optimizer step when several learners run.
        These modules are never DDP-wrapped (``ATGRPOTorchLearner`` averages gradients itself),
        so there is nothing to suspend."""
        yield

    @override(TorchRLModule)
    def _forward(self, batch, **kwargs):
        self.activate()
        return self._response_logprobs(batch)

    def starting_logprobs(self, batch) -> torch.Tensor | None:
        """Log-probs of the batch's response tokens under the policy training started from
        (no gradient): the KL penalty's reference and the ``kl_to_start`` diagnostic's. None
        when the module keeps no copy of it (full fine-tuning with ``kl_coef = 0``: a second
        model in memory for a diagnostic alone is not worth it)."""
        if self.reference_lm is None:
            return None
        return self.detached_logprobs(batch, causal_lm=self.reference_lm)

    def detached_logprobs(self, batch, causal_lm=None) -> torch.Tensor:
        """``forward_train``'s log-probs without gradient or entropy (three fewer passes over
        each chunk's logits): a reference the loss compares against, such as the learner's
        pre-update log-probs (the ratio's denominator) or the starting policy's. With the
        module's own weights (no ``causal_lm``) it activates them first, as ``forward_train``
        does."""
        if causal_lm is None:
            self.activate()
        with torch.no_grad():
            return self._response_logprobs(batch, causal_lm, with_entropy=False)[TOKEN_LOGP]

    def _response_logprobs(self, batch, causal_lm=None,
                           with_entropy: bool = True) -> dict[str, torch.Tensor]:
        causal_lm = self.causal_lm if causal_lm is None else causal_lm
        input_ids = batch["input_ids"].long()
        autocast = (contextlib.nullcontext() if self.autocast_dtype is None else
                    torch.autocast(device_type=input_ids.device.type, dtype=self.autocast_dtype))
        diagnostics: dict | None = {} if with_entropy else None
        uncast = (_adapter_inputs_uncast(self._uncast_layers) if self._uncast_layers
                  else contextlib.nullcontext())
        with autocast, uncast:
            if "segment_ids" in batch:  # shared-prefix rows (core.batching.pack_records)
                logp = packed_response_logprobs(
                    causal_lm, input_ids, batch["position_ids"], batch["segment_ids"],
                    batch["response_mask"], temperature=self.temperature,
                    chunk_size=self.logprob_chunk_size, entropy_out=diagnostics,
                    entropy_grad=self.entropy_gradient)
            else:
                logp = response_logprobs(
                    causal_lm, input_ids, batch["attention_mask"].long(),
                    batch["response_mask"], temperature=self.temperature,
                    chunk_size=self.logprob_chunk_size, entropy_out=diagnostics,
                    entropy_grad=self.entropy_gradient)
        if diagnostics is None:
            return {TOKEN_LOGP: logp.float()}
        return {TOKEN_LOGP: logp.float(), TOKEN_ENTROPY: diagnostics["entropy"].float()}

    # RLlib's default get_state converts to numpy, which fails on bf16: keep torch tensors.
    @override(TorchRLModule)
    def get_state(self, components=None, *, not_components=None, inference_only=False, **kwargs):
        return {k: v.detach().cpu() for k, v in self.causal_lm.state_dict().items()}

    @override(TorchRLModule)
    def set_state(self, state) -> None:
        self.causal_lm.load_state_dict(_to_torch_state(state))


class LoRAAdapterRLModule(CausalLMRLModule):
    """One LoRA adapter of a shared peft model; its state is the adapter weights only."""

    @override(CausalLMRLModule)
    def setup(self):
        config = self.model_config or {}
        self.causal_lm = None  # bound by SharedBaseLoRAMultiRLModule
        self.reference_lm = None  # the base with the adapters off is the reference
        self.adapter_name: str | None = None
        self._read_logprob_settings(config)

    def bind(self, peft_model, adapter_name: str, compute_dtype: torch.dtype | None = None) -> None:
        """``compute_dtype``: the dtype a learner's adapters compute in when it is not their
        own (fp32 adapters on a bf16 base: :func:`_adapter_inputs_uncast`); applied as
        autocast unless the config names an ``autocast_dtype``."""
        self.causal_lm = peft_model
        self.adapter_name = adapter_name
        if compute_dtype is not None:
            self._uncast_layers = _lora_layers(peft_model)
            if self.autocast_dtype is None:
                self.autocast_dtype = compute_dtype

    @override(CausalLMRLModule)
    def activate(self) -> None:
        self.causal_lm.base_model.set_adapter(self.adapter_name)
        self._keep_every_adapter_trainable()

    def _keep_every_adapter_trainable(self) -> None:
        """peft's set_adapter (also run when ``disable_adapter()`` exits) turns requires_grad
        off for every other adapter; another module of the same base may still need its
        gradients in this very update, and a leaf that no longer requires grad gets none from
        the backward pass (peft behaviour)."""
        for name, param in self.causal_lm.named_parameters():
            if "lora_" in name:
                param.requires_grad_(True)

    @override(CausalLMRLModule)
    def starting_logprobs(self, batch) -> torch.Tensor:
        """The frozen base model is the starting policy: the same forward with the adapters
        switched off (no gradient, no copy)."""
        try:
            with self.causal_lm.disable_adapter():
                return self.detached_logprobs(batch, causal_lm=self.causal_lm)
        finally:
            self._keep_every_adapter_trainable()

    @override(CausalLMRLModule)
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        tag = f".{self.adapter_name}."
        return [p for n, p in self.causal_lm.named_parameters() if "lora_" in n and tag in n]

    @override(CausalLMRLModule)
    def get_state(self, components=None, *, not_components=None, inference_only=False, **kwargs):
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.causal_lm, adapter_name=self.adapter_name)
        return {k: v.detach().cpu() for k, v in state.items()}

    @override(CausalLMRLModule)
    def set_state(self, state) -> None:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.causal_lm, _to_torch_state(state),
                                           adapter_name=self.adapter_name)
        unexpected = getattr(result, "unexpected_keys", None)
        if unexpected:
            raise RuntimeError(f"adapter {self.adapter_name!r}: unexpected keys {unexpected[:5]}")


def _adapters_in_base_dtype(peft_model, dtype: torch.dtype) -> None:
    """An env runner's inference copy: its LoRA adapters in the base's dtype. PEFT keeps
    adapters fp32 (right for the learner, whose AdamW updates them), so on a bf16 base every
    LoRA layer casts its input to fp32 and its output back: ``aten::copy_`` took 26% of a
    main-job generate call's CPU time in bf16 (bench/precision.py ``profile``). Runners only
    generate; the fp32 weights the learner sends are cast on load. A no-op on an fp32 base
    (the exact path keeps fp32 adapters)."""
    for name, parameter in peft_model.named_parameters():
        if "lora_" in name and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)


def _lora_layers(peft_model) -> list:
    """The PEFT tuner layers of ``peft_model`` (each adapted linear)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [layer for layer in peft_model.modules() if isinstance(layer, BaseTunerLayer)]


@contextlib.contextmanager
def _adapter_inputs_uncast(layers: list):
    """A learner's forward on a bf16 base: its adapters stay fp32 (the master weights AdamW
    updates) but compute in bf16 under the module's autocast, as the runners' copies do.
    PEFT would otherwise cast every adapted layer's input to fp32 and back and run the adapter
    matmuls in fp32, most of what kept the learner from the base model's bf16 speed-up
    (bench/RESULTS.md "Arithmetic"). Only inside the module's own forward: anything else that
    runs this copy (``eval`` generates with a checkpoint's learner modules) gets PEFT's casts,
    which its fp32 adapters need without autocast. Autocast casts the adapter weights to bf16
    once per forward and sends their gradients back in fp32."""
    for layer in layers:
        layer.cast_input_dtype_enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.cast_input_dtype_enabled = True


class SharedBaseLoRAMultiRLModule(MultiRLModule):
    """One frozen base LM shared by every ModuleID, with one LoRA adapter per ModuleID."""

    @override(MultiRLModule)
    def setup(self):
        from peft import LoraConfig, get_peft_model

        specs = self.rl_module_specs
        module_ids = sorted(specs)
        config = {**(self.model_config or {}), **(specs[module_ids[0]].model_config or {})}
        base = load_causal_lm(ModelSpec.coerce(config.get("model")))
        for param in base.parameters():
            param.requires_grad_(False)
        _maybe_checkpoint_activations(base, config, self.inference_only)
        lora_config = LoraConfig(**lora_kwargs(config.get("lora") or {}))
        peft_model = get_peft_model(base, lora_config, adapter_name=module_ids[0])
        for module_id in module_ids[1:]:
            peft_model.add_adapter(module_id, lora_config)
        compute_dtype = None
        if self.inference_only:
            _adapters_in_base_dtype(peft_model, base.dtype)
        elif base.dtype != torch.float32:
            compute_dtype = base.dtype
        self._rl_modules = {}
        for module_id in module_ids:
            module = specs[module_id].build()
            module.bind(peft_model, module_id, compute_dtype)
            self._rl_modules[module_id] = module
        self.framework = "torch"
