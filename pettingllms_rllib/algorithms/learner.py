"""``ATGRPOTorchLearner``: the AT-GRPO loss inside RLlib's TorchLearner.

The maths lives in :func:`pettingllms_rllib.core.loss.clipped_token_loss`; this class only
wires it to RLlib: per-module configs (so ``algorithm_config_overrides_per_module`` can set a
different ``lr`` or clip range per role), optimisers over the module's *trainable* parameters
only (for LoRA: its own adapter), and metrics.
"""

from __future__ import annotations

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override

from pettingllms_rllib.core.loss import clipped_token_loss
from pettingllms_rllib.models.rl_modules import TOKEN_LOGP


class ATGRPOTorchLearner(TorchLearner):
    """Clipped token-level GRPO loss per module, AdamW over trainable parameters."""

    @override(TorchLearner)
    def build(self) -> None:
        self._check_device_memory()
        super().build()

    def _check_device_memory(self) -> None:
        """On a GPU learner, refuse a model that cannot fit before any weights are placed, with
        the estimate in the error instead of an out-of-memory crash mid-run."""
        from ray.rllib.utils.framework import get_device

        from pettingllms_rllib.models import memory

        device = get_device(self.config, self.config.num_gpus_per_learner)
        if device.type != "cuda":
            return
        try:
            shape = memory.model_shape(self.config.model_spec_dict)
        except ValueError:  # an architecture the estimator does not know: nothing to check
            return
        if shape is None:
            return
        estimate = self.config.learner_memory_estimate(shape, len(self.config.policies))
        total = memory.available_gpu_bytes(device.index or 0)
        memory.check_fits(estimate, int(total * min(1.0, float(self.config.num_gpus_per_learner))),
                          what=f"learner on {device}", hint="see docs/gpu.md")

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        params = list(self._module[module_id].trainable_parameters())
        self.register_optimizer(module_id=module_id, optimizer=torch.optim.AdamW(params),
                                params=params, lr_or_lr_schedule=config.lr)

    @override(TorchLearner)
    def get_parameters(self, module) -> list[torch.nn.Parameter]:
        return list(module.trainable_parameters())

    @override(TorchLearner)
    def compute_gradients(self, loss_per_module, **kwargs):
        grads = super().compute_gradients(loss_per_module, **kwargs)
        # A module absent from this minibatch has no gradient; TorchLearner.apply_gradients
        # would crash on None (DESIGN.md Sec. 7).
        return {ref: grad for ref, grad in grads.items() if grad is not None}

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss, stats = clipped_token_loss(
            fwd_out[TOKEN_LOGP], batch["old_logp"], batch["advantages"], batch["response_mask"],
            clip_eps_low=config.clip_eps_low, clip_eps_high=config.clip_eps_high,
            dual_clip=config.dual_clip)
        self.metrics.log_dict({
            (module_id, "policy_loss"): stats.policy_loss,
            (module_id, "clip_fraction"): stats.clip_fraction,
            (module_id, "dual_clip_fraction"): stats.dual_clip_fraction,
            (module_id, "policy_behaviour_ratio"): stats.mean_ratio,
            (module_id, "approx_kl_behaviour"): stats.approx_kl_behaviour,
            (module_id, "num_response_tokens"): stats.num_tokens,
        }, window=1)
        return loss
