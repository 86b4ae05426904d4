"""The AT-GRPO policy loss as a pure torch function (no RLlib, no model).

Token-level clipped surrogate with asymmetric clipping (DAPO's clip-higher) and dual clip for
negative advantages (Ye et al. 2020, arXiv 1912.09729), averaged over all response tokens of the
(mini)batch ("token-mean"), as in arXiv 2510.11062 Eq. 3:

    rho_t   = exp(logp_t - old_logp_t)
    l_t     = -min(rho_t * A, clip(rho_t, 1 - eps_low, 1 + eps_high) * A)
    l_t     = min(l_t, -c * A)            where A < 0   (dual clip, c = dual_clip)
    loss    = sum_t mask_t * (l_t + beta * kl_t) / sum_t mask_t     (beta = kl_coef)

Off-policy data (asynchronous training, where a response was sampled with weights older than
the learner's): ``old_logp`` is then the learner's own log-prob before this update (the
"proximal" policy, computed without gradient), and each token's loss is weighted by the
truncated importance ratio to the behaviour policy that really sampled it (token-level TIS,
as in the decoupled PPO objective of AReaL, arXiv 2505.24298):

    w_t     = min(exp(old_logp_t - behaviour_logp_t), C)      (no gradient)
    l_t     = w_t * l_t

With ``behaviour_logp`` left out, or equal to ``old_logp``, every ``w_t`` is exactly 1.

An optional entropy bonus (PPO's entropy term, Schulman et al. 2017, arXiv 1707.06347 Eq. 9;
off in the paper) rewards spread in the current policy at the sampled positions:

    l_t     = l_t - gamma * H_t            (gamma = entropy_coef, H_t the policy's entropy)

It is added after the importance weighting, unweighted: it regularises the current policy
where it stands, it is not an estimate under the behaviour policy.

``kl_t`` is the k3 estimator ``exp(ref - logp) - (ref - logp) - 1`` of KL(pi || pi_ref), only
when reference log-probs are given. The advantage of a response is broadcast to all its tokens;
prompt tokens and other agents' text are excluded by ``mask``.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class LossStats:
    """Detached diagnostics of one loss evaluation (all token-means over the mask)."""

    policy_loss: float
    clip_fraction: float
    dual_clip_fraction: float
    mean_ratio: float
    approx_kl_behaviour: float
    kl_to_reference: float
    num_tokens: int
    importance_weight_mean: float = 1.0
    importance_truncated_fraction: float = 0.0


def clipped_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, *, clip_eps_low: float = 0.2,
                       clip_eps_high: float = 0.28, dual_clip: float | None = 3.0,
                       ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0,
                       behaviour_logp: torch.Tensor | None = None,
                       importance_cap: float = 2.0, entropy: torch.Tensor | None = None,
                       entropy_coef: float = 0.0) -> tuple[torch.Tensor, LossStats]:
    """Return ``(loss, stats)``.

    Args:
        logp: [B, L] log-probs of the taken tokens under the current policy (differentiable).
        old_logp: [B, L] log-probs the ratio is taken against: the engine's behaviour log-probs
            (on-policy data), or the learner's own before this update (off-policy data).
        advantages: [B] (one per response, broadcast) or [B, L].
        mask: [B, L], 1 for response tokens that are trained on.
        clip_eps_low / clip_eps_high: the ratio is clipped to [1 - low, 1 + high].
        dual_clip: c > 1 bounding the loss for A < 0 at -c*A; None disables it.
        ref_logp / kl_coef: optional KL penalty to a reference policy.
        behaviour_logp: [B, L] the log-probs of the policy that sampled the tokens, when it is
            not the one ``old_logp`` holds: tokens are weighted by the truncated importance
            ratio ``min(exp(old_logp - behaviour_logp), importance_cap)``.
        importance_cap: C, the truncation of that ratio (> 0).
        entropy / entropy_coef: [B, L] the current policy's entropy at each position
            (differentiable) and the bonus's weight (>= 0; 0 = no bonus, the default).
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if not importance_cap > 0:
        raise ValueError(f"importance_cap must be > 0, got {importance_cap}")
    if not entropy_coef >= 0:
        raise ValueError(f"entropy_coef must be >= 0, got {entropy_coef}")
    if entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs the policy's entropy per position")
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1).expand_as(logp)
    log_ratio = (logp - old_logp.to(logp.dtype)) * mask
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    per_token = -torch.minimum(ratio * adv, clipped_ratio * adv)
    dual_active = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip is not None:
        bound = -dual_clip * adv
        dual_active = (adv < 0) & (per_token > bound)
        per_token = torch.where(adv < 0, torch.minimum(per_token, bound), per_token)
    kl = torch.zeros_like(per_token)
    if ref_logp is not None:
        diff = (ref_logp.to(logp.dtype) - logp) * mask
        kl = torch.exp(diff) - diff - 1.0
        per_token = per_token + kl_coef * kl
    weight = torch.ones_like(per_token)
    truncated = torch.zeros_like(mask, dtype=torch.bool)
    if behaviour_logp is not None:
        with torch.no_grad():
            raw = torch.exp((old_logp.to(logp.dtype) - behaviour_logp.to(logp.dtype)) * mask)
            truncated = raw > importance_cap
            weight = torch.clamp(raw, max=importance_cap)
        per_token = weight * per_token
    if entropy_coef > 0:
        per_token = per_token - entropy_coef * entropy.to(logp.dtype)
    num_tokens = mask.sum()
    denom = num_tokens.clamp(min=1.0)
    loss = (per_token * mask).sum() / denom

    with torch.no_grad():
        clipped = ((ratio < 1.0 - clip_eps_low) & (adv < 0)) | ((ratio > 1.0 + clip_eps_high) & (adv > 0))
        stats = LossStats(
            policy_loss=float(loss.detach()),
            clip_fraction=float((clipped.to(mask.dtype) * mask).sum() / denom),
            dual_clip_fraction=float((dual_active.to(mask.dtype) * mask).sum() / denom),
            mean_ratio=float((ratio * mask).sum() / denom),
            approx_kl_behaviour=float((((ratio - 1.0) - log_ratio) * mask).sum() / denom),
            kl_to_reference=float((kl * mask).sum() / denom),
            num_tokens=int(num_tokens),
            importance_weight_mean=float((weight * mask).sum() / denom),
            importance_truncated_fraction=float((truncated.to(mask.dtype) * mask).sum() / denom),
        )
    return loss, stats


@dataclasses.dataclass(frozen=True)
class LogpMismatch:
    """How far the learner's log-probs of sampled tokens are from the sampler's (token means
    over the mask; ``kl`` is the k3 estimate of KL(behaviour || learner), the tokens being
    samples of the behaviour policy)."""

    mean_abs: float
    max_abs: float
    kl: float


def logprob_mismatch(learner_logp: torch.Tensor, behaviour_logp: torch.Tensor,
                     mask: torch.Tensor) -> LogpMismatch:
    """The behaviour/learner gap of the same tokens: with ``r = learner - behaviour``,
    ``mean |r|``, ``max |r|`` and ``mean(exp(r) - r - 1)`` over ``mask``."""
    with torch.no_grad():
        mask = mask.to(torch.float32)
        r = (learner_logp.float() - behaviour_logp.float()) * mask
        denom = mask.sum().clamp(min=1.0)
        return LogpMismatch(mean_abs=float(r.abs().sum() / denom),
                            max_abs=float(r.abs().max()) if r.numel() else 0.0,
                            kl=float(((torch.exp(r) - r - 1.0) * mask).sum() / denom))
