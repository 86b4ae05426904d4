"""``ATGRPOTorchLearner``: the AT-GRPO loss inside RLlib's TorchLearner.

The maths lives in :func:`pettingllms_rllib.core.loss.clipped_token_loss`; this class only
wires it to RLlib: per-module configs (so ``algorithm_config_overrides_per_module`` can set a
different ``lr`` or clip range per role), optimisers over the module's *trainable* parameters
only (for LoRA: its own adapter), metrics, and data parallelism over several learners.

Several learners (``num_learners > 1``): RLlib would wrap every module in its own DDP. That is
wrong for one LoRA adapter per role on one shared base (several DDP reducers on one model), and
it hangs whenever a module is missing from one learner's shard (that learner's reducer never
fires). So these learners average gradients themselves: after each backward, ONE all-reduce
(in buckets) over every trainable parameter of the whole MultiRLModule, in the same order on
every learner, with a presence flag per parameter so a module absent from a learner's shard
contributes zeros instead of a deadlock; trainable weights are broadcast from rank 0 once at
build, as DDP does. It does not overlap communication with the backward pass as DDP does.
"""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override

from pettingllms_rllib.core.loss import clipped_token_loss, logprob_mismatch
from pettingllms_rllib.engines import behaviour_logprobs_are_exact
from pettingllms_rllib.core.minibatching import (plan_minibatches,
                                                  rows_trained_before_any_update, split_rows)
# The learner metrics (``learners/<module>/...``), defined in metric_keys; NUM_GRADIENT_STEPS,
# NUM_SAMPLES_TRAINED, KL_TO_START and KL_TO_REFERENCE are also importable from here.
from pettingllms_rllib.metric_keys import (
    APPROX_KL_BEHAVIOUR,
    CLIP_FRACTION,
    DUAL_CLIP_FRACTION,
    ENTROPY,
    IMPORTANCE_TRUNCATED_FRACTION,
    IMPORTANCE_WEIGHT_MEAN,
    KL_TO_REFERENCE,
    KL_TO_START,
    LOGP_MISMATCH_KL,
    LOGP_MISMATCH_MAX,
    LOGP_MISMATCH_MEAN,
    NUM_GRADIENT_STEPS,
    NUM_RESPONSE_TOKENS,
    NUM_SAMPLES_TRAINED,
    POLICY_BEHAVIOUR_RATIO,
    POLICY_LOSS,
)
from pettingllms_rllib.models.rl_modules import TOKEN_ENTROPY, TOKEN_LOGP

#: Elements per all-reduce when averaging gradients (256 MiB of fp32): bounds the extra memory.
_ALLREDUCE_BUCKET_ELEMENTS = 1 << 26
#: Batch column: rows whose ratio denominator is their own training forward's log-probs (the
#: module's first step, run on the weights its update starts from), not a recomputed one.
PROXIMAL_FROM_FORWARD = "proximal_from_forward"


def _buckets(params: list[torch.nn.Parameter], max_elements: int):
    """Consecutive groups of parameters of at most ``max_elements`` (or one larger tensor)."""
    bucket, size = [], 0
    for param in params:
        if bucket and size + param.numel() > max_elements:
            yield bucket
            bucket, size = [], 0
        bucket.append(param)
        size += param.numel()
    if bucket:
        yield bucket


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    mask = mask.to(values.dtype)
    return float((values.detach() * mask).sum() / mask.sum().clamp(min=1.0))


def samples_per_row(module_batch) -> np.ndarray:
    """Samples in each row: the packed group size (``num_samples``), else 1 per row."""
    if "num_samples" in module_batch:
        counts = module_batch["num_samples"]
        return np.asarray(counts.cpu() if isinstance(counts, torch.Tensor) else counts)
    return np.ones(len(module_batch), dtype=np.int64)


def trimmed_rows(module_batch, rows: np.ndarray) -> SampleBatch:
    """The given rows of a module's batch, without the padding columns they all share at the
    right (rows are padded to the module's longest; a minibatch only to its own)."""
    index = torch.as_tensor(rows, dtype=torch.long)
    columns = {key: value[index.to(value.device)] for key, value in module_batch.items()}
    real = (columns["segment_ids"] >= 0) if "segment_ids" in columns else (
        columns["attention_mask"] > 0)
    width = int(real.any(dim=0).nonzero().max()) + 1 if real.any() else 1
    return SampleBatch({key: value[:, :width] if value.dim() == 2 else value
                        for key, value in columns.items()})


class ATGRPOTorchLearner(TorchLearner):
    """Clipped token-level GRPO loss per module, AdamW over trainable parameters."""

    @override(TorchLearner)
    def _create_iterator_if_necessary(self, *, training_data, num_total_minibatches=0,
                                      num_epochs=1, minibatch_size=None,
                                      shuffle_batch_per_epoch=False, **kwargs):
        """Per-module minibatches (``core/minibatching.py``) instead of RLlib's cyclic
        iterator: each module's rows are used exactly ``num_epochs`` times, and a minibatch is
        whole rows (shared-prefix groups) of at most ``minibatch_size`` samples."""
        if training_data.data_iterators:
            raise ValueError("ATGRPOTorchLearner trains from batches, not Ray Data iterators")
        batch = self._make_batch_if_necessary(training_data=training_data)
        batches = {module_id: module_batch for module_id, module_batch
                   in batch.policy_batches.items()
                   if self.should_module_be_updated(module_id, batch) and len(module_batch)}
        rng = np.random.default_rng([int(self.config.seed or 0), int(self._weights_seq_no)])
        steps = plan_minibatches({m: samples_per_row(b) for m, b in batches.items()},
                                 num_epochs=num_epochs, minibatch_size=minibatch_size,
                                 shuffle=bool(shuffle_batch_per_epoch), rng=rng)
        for module_id, module_batch in batches.items():
            counts = samples_per_row(module_batch)
            self.metrics.log_dict({
                (module_id, NUM_GRADIENT_STEPS): sum(module_id in step for step in steps),
                (module_id, NUM_SAMPLES_TRAINED): int(sum(
                    counts[step[module_id]].sum() for step in steps if module_id in step)),
            }, window=1)
        self._kl_to_start_pending = set(batches)
        self._mismatch_pending = set(batches)
        for module_id, module_batch in batches.items():
            self._attach_proximal_logprobs(module_id, module_batch, minibatch_size,
                                           rows_trained_before_any_update(steps, module_id))
        num_steps = self._agreed_num_steps(len(steps))
        # Built one step at a time: each minibatch is a copy of its rows.
        for step in steps:
            yield MultiAgentBatch({m: trimmed_rows(batches[m], rows) for m, rows in step.items()},
                                  env_steps=batch.env_steps())
        for _ in range(num_steps - len(steps)):
            yield MultiAgentBatch({}, env_steps=0)

    @property
    def behaviour_logprobs_are_exact(self) -> bool:
        """Whether the engines' log-probs are this learner's own up to fp32 rounding (HF
        generation, fp32 everywhere); if not (bf16, vLLM), every row's ratio denominator is
        recomputed here. Decided once, in :meth:`build`."""
        return self._behaviour_exact

    def _attach_proximal_logprobs(self, module_id, module_batch, minibatch_size,
                                  from_forward: np.ndarray) -> None:
        """The decoupled PPO objective where the sampler's log-probs are not the learner's
        (``core/loss.py``): rows sampled by another numeric path (bf16, vLLM: every row) or
        with older weights (asynchronous training: the stale rows) get as ``old_logp`` this
        learner's own log-probs before the update (no gradient), and the engine's log-probs
        move to ``behaviour_logp`` for the truncated importance weight. Other rows keep the
        engine's log-probs in both, so their weight is exactly 1; a batch with nothing to
        recompute is left as it is (fp32 HF on-policy: today's algorithm, exactly).

        Rows in ``from_forward`` (the module's first step, trained once:
        :func:`~pettingllms_rllib.core.minibatching.rows_trained_before_any_update`) are not
        recomputed: their training forward runs on the pre-update weights, so the loss takes
        its detached log-probs as their denominator (:data:`PROXIMAL_FROM_FORWARD`). The
        recomputed rows give the behaviour/learner gap metrics; with none, the first step
        does (``compute_loss_for_module``)."""
        counts = samples_per_row(module_batch)
        if not self.behaviour_logprobs_are_exact:
            rows = np.arange(len(counts))
        elif "weights_version" in module_batch:
            start_version = int(self._weights_seq_no) - 1  # Learner.update counted this one
            versions = module_batch["weights_version"]
            rows = torch.nonzero(versions.to("cpu") < start_version).flatten().numpy()
        else:
            rows = np.arange(0)
        if len(rows) == 0:
            return
        reused = np.intersect1d(rows, from_forward)
        rows = np.setdiff1d(rows, reused)
        proximal = module_batch["old_logp"].clone()
        with torch.no_grad():
            for part in split_rows(counts, rows, minibatch_size):
                piece = trimmed_rows(module_batch, part)
                logp = self._module[module_id].detached_logprobs(piece)
                index = torch.as_tensor(part, dtype=torch.long, device=proximal.device)
                mask = piece["response_mask"].to(logp.dtype)
                proximal[index, :logp.shape[1]] = (logp * mask).to(proximal.dtype)
        behaviour = module_batch["old_logp"]
        if len(rows):
            index = torch.as_tensor(rows, dtype=torch.long, device=proximal.device)
            self._log_mismatch(module_id, proximal[index], behaviour[index],
                               module_batch["response_mask"][index])
        if len(reused):
            flag = torch.zeros(len(counts), dtype=torch.bool, device=proximal.device)
            flag[torch.as_tensor(reused, dtype=torch.long, device=proximal.device)] = True
            module_batch[PROXIMAL_FROM_FORWARD] = flag
        module_batch["behaviour_logp"] = behaviour
        module_batch["old_logp"] = proximal

    def _log_mismatch(self, module_id, learner_logp, behaviour_logp, mask) -> None:
        """The behaviour/learner log-prob gap of one module in this update (once per update)."""
        self._mismatch_pending.discard(module_id)
        gap = logprob_mismatch(learner_logp, behaviour_logp, mask)
        self.metrics.log_dict({(module_id, LOGP_MISMATCH_MEAN): gap.mean_abs,
                               (module_id, LOGP_MISMATCH_MAX): gap.max_abs,
                               (module_id, LOGP_MISMATCH_KL): gap.kl}, window=1)

    def _agreed_num_steps(self, local_steps: int) -> int:
        """With several learners every one must take the same number of steps (each step ends
        in a gradient all-reduce): the largest shard's count; shorter shards add empty steps,
        which contribute zero gradients."""
        if self.config.num_learners <= 1:
            return local_steps
        import torch.distributed as dist

        count = torch.tensor([local_steps], dtype=torch.long, device=self._device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return int(count.item())

    @override(TorchLearner)
    def build(self) -> None:
        self._check_device_memory()
        self._kl_to_start_pending: set = set()  # modules whose kl_to_start this update owes
        self._mismatch_pending: set = set()  # modules whose logp_mismatch this update owes
        self._behaviour_exact = behaviour_logprobs_are_exact(
            self.config.engine, self.config.model_dtype, self.config.autocast_dtype)
        super().build()

    def _check_device_memory(self) -> None:
        """On a GPU learner, refuse a model that cannot fit before any weights are placed, with
        the estimate in the error instead of an out-of-memory crash mid-run."""
        from ray.rllib.utils.framework import get_device

        from pettingllms_rllib.models import memory, preflight

        device = get_device(self.config, self.config.num_gpus_per_learner)
        if device.type != "cuda":
            return
        try:
            shape = memory.model_shape(self.config.model_spec_dict)
        except ValueError:  # an architecture the estimator does not know: nothing to check
            return
        if shape is None:
            return
        total = memory.available_gpu_bytes(device.index or 0)
        preflight.check_learner_memory(
            self.config, shape, int(total * min(1.0, float(self.config.num_gpus_per_learner))),
            what=f"learner on {device}", hint="see docs/gpu.md")

    @override(TorchLearner)
    def _make_modules_ddp_if_necessary(self) -> None:
        """No DDP wrappers (see the module docstring); start every learner from rank 0's
        trainable weights instead."""
        if self.config.num_learners <= 1:
            return
        import torch.distributed as dist

        # Fixed at build: the same parameters, in the same order, in every all-reduce.
        self._averaged_params = self._trainable_in_order()
        with torch.no_grad():
            for param in self._averaged_params:
                dist.broadcast(param.data, src=0)

    def _trainable_in_order(self) -> list[torch.nn.Parameter]:
        """Every module's trainable parameters, in an order identical on every learner."""
        seen, params = set(), []
        for module_id in sorted(self._module.keys()):
            for param in self._module[module_id].trainable_parameters():
                if id(param) not in seen:
                    seen.add(id(param))
                    params.append(param)
        return params

    def _average_gradients_across_learners(self) -> None:
        import torch.distributed as dist

        params = self._averaged_params
        world = dist.get_world_size()
        present = torch.tensor([float(p.grad is not None) for p in params],
                               device=params[0].device)
        dist.all_reduce(present)
        for bucket in _buckets(params, _ALLREDUCE_BUCKET_ELEMENTS):
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                              .reshape(-1).float() for p in bucket])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for param in bucket:
                count = param.numel()
                param.grad = flat[offset:offset + count].view_as(param).to(param.dtype)
                offset += count
        for param, seen_anywhere in zip(params, present.tolist()):
            if seen_anywhere == 0:  # no learner had data for it: leave it untouched
                param.grad = None

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        if self._device is not None and self._device.type == "cuda":
            # Hand the update's cached activation blocks back to the device, so a colocated
            # engine (same GPU, same or another process) can use them until the next update.
            torch.cuda.empty_cache()

    def publish_full_weights(self, root: str, module_ids: list[str],
                             weights_version: int) -> dict[str, str]:
        """Write the given modules' full models under ``root`` (learner 0 only: all learners
        hold the same weights) and return module -> folder (empty on other learners). With
        resource pools a learner writes only the modules it holds."""
        from pettingllms_rllib.engines.weight_sync import publish_full_weights

        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return {}
        return {module_id: publish_full_weights(self._module[module_id].causal_lm, root,
                                                module_id, weights_version)
                for module_id in module_ids if module_id in self._module.keys()}

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
        super().compute_gradients(loss_per_module, **kwargs)
        if self.config.num_learners > 1:
            self._average_gradients_across_learners()
        # A module absent from this minibatch has no gradient; TorchLearner.apply_gradients
        # would crash on None (ray 2.60).
        return {ref: param.grad for ref, param in self._params.items() if param.grad is not None}

    @override(TorchLearner)
    def postprocess_gradients_for_module(self, *, module_id, config=None,
                                         module_gradients_dict):
        """A module absent from this minibatch has no gradients: nothing to clip, and RLlib's
        ``gradients_default_optimizer_global_norm`` (window 1) must not be overwritten with
        the 0 of an empty set, so it stays the norm of the module's last minibatch."""
        if not module_gradients_dict:
            return {}
        return super().postprocess_gradients_for_module(
            module_id=module_id, config=config, module_gradients_dict=module_gradients_dict)

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        kl_coef = float(config.kl_coef)
        reference = None
        if kl_coef > 0:
            reference = self._module[module_id].starting_logprobs(batch)
            if reference is None:
                raise RuntimeError(f"module {module_id!r} has kl_coef={kl_coef} but keeps no "
                                   "reference model (its RLModule loaded no reference copy)")
        old_logp = batch["old_logp"]
        if PROXIMAL_FROM_FORWARD in batch:  # the first step: the forward is pre-update
            reuse = batch[PROXIMAL_FROM_FORWARD].bool().unsqueeze(-1)
            old_logp = torch.where(reuse, fwd_out[TOKEN_LOGP].detach(), old_logp)
        loss, stats = clipped_token_loss(
            fwd_out[TOKEN_LOGP], old_logp, batch["advantages"], batch["response_mask"],
            clip_eps_low=config.clip_eps_low, clip_eps_high=config.clip_eps_high,
            dual_clip=config.dual_clip, ref_logp=reference, kl_coef=kl_coef,
            behaviour_logp=batch["behaviour_logp"] if "behaviour_logp" in batch else None,
            importance_cap=float(config.importance_sampling_cap),
            entropy=fwd_out[TOKEN_ENTROPY], entropy_coef=float(config.entropy_coef))
        if reference is not None:
            self.metrics.log_value((module_id, KL_TO_REFERENCE), stats.kl_to_reference,
                                   window=1)
        self.metrics.log_dict({
            (module_id, POLICY_LOSS): stats.policy_loss,
            (module_id, CLIP_FRACTION): stats.clip_fraction,
            (module_id, DUAL_CLIP_FRACTION): stats.dual_clip_fraction,
            (module_id, POLICY_BEHAVIOUR_RATIO): stats.mean_ratio,
            (module_id, APPROX_KL_BEHAVIOUR): stats.approx_kl_behaviour,
            (module_id, IMPORTANCE_WEIGHT_MEAN): stats.importance_weight_mean,
            (module_id, IMPORTANCE_TRUNCATED_FRACTION): stats.importance_truncated_fraction,
            (module_id, NUM_RESPONSE_TOKENS): stats.num_tokens,
            (module_id, ENTROPY): _masked_mean(fwd_out[TOKEN_ENTROPY], batch["response_mask"]),
        }, window=1)
        if module_id in self._mismatch_pending:  # nothing recomputed: this minibatch's gap,
            # its log-probs being the weights the update starts from (the module's first step)
            self._log_mismatch(module_id, fwd_out[TOKEN_LOGP].detach(),
                               batch["behaviour_logp"] if "behaviour_logp" in batch
                               else batch["old_logp"], batch["response_mask"])
        if module_id in self._kl_to_start_pending:
            self._kl_to_start_pending.discard(module_id)
            if reference is not None:  # the same estimate, already computed
                self.metrics.log_value((module_id, KL_TO_START), stats.kl_to_reference,
                                       window=1)
            else:
                self._log_kl_to_start(module_id, batch, fwd_out)
        return loss

    def _log_kl_to_start(self, module_id, batch, fwd_out) -> None:
        """``kl_to_start``: how far the policy has moved from where training began, as the k3
        estimate ``E[exp(r) - r - 1]``, ``r = logp_start - logp``, over the response tokens of
        the module's first minibatch of the update (one extra no-grad forward per module and
        update; the tokens are samples of the current policy, up to the clip). Only modules
        that hold their starting policy log it: LoRA adapters (the base with the adapters
        off) and, with ``kl_coef > 0``, fully fine-tuned modules (their frozen copy)."""
        start = self._module[module_id].starting_logprobs(batch)
        if start is None:
            return
        mask = batch["response_mask"].to(torch.float32)
        diff = (start - fwd_out[TOKEN_LOGP].detach()).float() * mask  # padding: exp(0) - 1 = 0
        self.metrics.log_value((module_id, KL_TO_START),
                               _masked_mean(torch.exp(diff) - diff - 1.0, mask), window=1)
