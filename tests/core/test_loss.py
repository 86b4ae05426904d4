"""The clipped token-level loss equals hand-computed values."""

import math

import pytest
import torch

from pettingllms_rllib.core.loss import clipped_token_loss


def test_loss_matches_hand_computation_with_clipping_and_masking():
    logp = torch.log(torch.tensor([[0.5, 0.6, 0.9], [0.2, 0.1, 0.3]]))
    old = torch.log(torch.tensor([[0.5, 0.4, 0.5], [0.4, 0.2, 0.3]]))
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss, stats = clipped_token_loss(logp, old, adv, mask, clip_eps_low=0.2,
                                     clip_eps_high=0.28, dual_clip=3.0)
    # row 0 (A=+1): ratios 1.0, 1.5 -> clipped to 1.28; third token masked out.
    #   -min(1*1, 1*1) = -1 ; -min(1.5, 1.28) = -1.28
    # row 1 (A=-2): ratios 0.5, 0.5, 1.0 -> clip low 0.8:
    #   -min(0.5*-2, 0.8*-2) = -min(-1, -1.6) = 1.6 ; same 1.6 ; -min(-2,-2) = 2
    #   dual clip bound -c*A = 6 is not active.
    expected = (-1 - 1.28 + 1.6 + 1.6 + 2.0) / 5
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert stats.num_tokens == 5
    # Tokens whose clipped branch is binding: row0 tok1 (1.5 > 1.28, A>0), row1 tok0,1 (0.5 < 0.8, A<0)
    assert stats.clip_fraction == pytest.approx(3 / 5)


def test_dual_clip_bounds_negative_advantage_loss():
    logp = torch.log(torch.tensor([[0.9]]))
    old = torch.log(torch.tensor([[0.1]]))  # ratio 9
    loss, stats = clipped_token_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1),
                                     dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)  # min(9, 3 * 1)
    assert stats.dual_clip_fraction == 1.0
    loss_nodual, _ = clipped_token_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1),
                                        dual_clip=None)
    assert loss_nodual.item() == pytest.approx(9.0, rel=1e-5)


def test_ratio_one_gives_minus_mean_advantage_and_correct_gradient():
    logp = torch.log(torch.tensor([[0.3, 0.7]])).requires_grad_(True)
    loss, stats = clipped_token_loss(logp, logp.detach().clone(), torch.tensor([2.0]),
                                     torch.ones(1, 2))
    assert loss.item() == pytest.approx(-2.0)
    assert stats.mean_ratio == pytest.approx(1.0)
    loss.backward()
    # d/dlogp of -(exp(logp - old) * A) / 2 at ratio 1 = -A/2 per token
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0]]))


def test_kl_to_reference_uses_k3_estimator():
    logp = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))
    loss, stats = clipped_token_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1),
                                     ref_logp=ref, kl_coef=0.5)
    kl = 0.5 - math.log(0.5) - 1  # exp(ref - logp) - (ref - logp) - 1
    assert stats.kl_to_reference == pytest.approx(kl, rel=1e-5)
    assert loss.item() == pytest.approx(0.5 * kl, rel=1e-5)


def test_entropy_bonus_lowers_each_token_loss_by_coef_times_entropy_over_the_mask():
    logp = torch.log(torch.tensor([[0.5, 0.6, 0.9]]))
    entropy = torch.tensor([[1.0, 2.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    plain, _ = clipped_token_loss(logp, logp, torch.tensor([1.0]), mask)
    bonus, _ = clipped_token_loss(logp, logp, torch.tensor([1.0]), mask, entropy=entropy,
                                  entropy_coef=0.1)
    # the masked third token's entropy never counts
    assert bonus.item() == pytest.approx(plain.item() - 0.1 * (1.0 + 2.0) / 2, rel=1e-6)
    # off by default: the entropy alone changes nothing
    same, _ = clipped_token_loss(logp, logp, torch.tensor([1.0]), mask, entropy=entropy)
    assert same.item() == plain.item()


def test_a_step_on_the_entropy_bonus_alone_spreads_the_policy():
    logits = torch.tensor([[[4.0, 0.0, -1.0]]], requires_grad=True)  # [B=1, L=1, V=3]
    log_probs = torch.log_softmax(logits, -1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    loss, _ = clipped_token_loss(log_probs[..., 0], log_probs[..., 0].detach(),
                                 torch.tensor([0.0]), torch.ones(1, 1), entropy=entropy,
                                 entropy_coef=1.0)
    loss.backward()
    with torch.no_grad():
        stepped = torch.log_softmax(logits - 0.5 * logits.grad, -1)
        after = -(stepped.exp() * stepped).sum(-1)
    assert after.item() > entropy.item()


def test_an_entropy_bonus_without_the_entropy_or_below_zero_is_refused():
    args = (torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1))
    with pytest.raises(ValueError, match="needs the policy's entropy"):
        clipped_token_loss(*args, entropy_coef=0.1)
    with pytest.raises(ValueError, match="entropy_coef must be >= 0"):
        clipped_token_loss(*args, entropy=torch.zeros(1, 1), entropy_coef=-0.1)


def test_empty_mask_gives_zero_loss_not_nan():
    loss, stats = clipped_token_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0]),
                                     torch.zeros(1, 2))
    assert loss.item() == 0.0 and stats.num_tokens == 0


def test_invalid_dual_clip_is_rejected():
    with pytest.raises(ValueError, match="dual_clip"):
        clipped_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1),
                           dual_clip=0.5)


# ---- off-policy data: truncated importance weights to the behaviour policy (async training)
def test_importance_weights_are_one_when_behaviour_and_learner_agree():
    logp = torch.log(torch.tensor([[0.5, 0.6, 0.9]])).requires_grad_()
    old = torch.log(torch.tensor([[0.5, 0.4, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    plain, plain_stats = clipped_token_loss(logp, old, torch.tensor([1.0]), mask)
    weighted, stats = clipped_token_loss(logp, old, torch.tensor([1.0]), mask,
                                         behaviour_logp=old.clone())
    assert weighted.item() == plain.item()
    assert stats.importance_weight_mean == 1.0 and stats.importance_truncated_fraction == 0.0
    assert plain_stats.importance_weight_mean == 1.0


def test_each_token_is_weighted_by_its_truncated_ratio_to_the_behaviour_policy():
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    proximal = torch.log(torch.tensor([[0.5, 0.5]]))  # ratio to the learner's own: 1
    behaviour = torch.log(torch.tensor([[0.25, 0.05]]))  # raw weights 2 and 10
    loss, stats = clipped_token_loss(logp, proximal, torch.tensor([1.0]), torch.ones(1, 2),
                                     behaviour_logp=behaviour, importance_cap=3.0)
    # -min(1*1, 1*1) per token, weighted by 2 and min(10, 3) = 3: mean of -2 and -3.
    assert loss.item() == pytest.approx(-2.5, rel=1e-5)
    assert stats.importance_weight_mean == pytest.approx(2.5, rel=1e-5)
    assert stats.importance_truncated_fraction == pytest.approx(0.5)


def test_importance_weights_carry_no_gradient():
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_()
    behaviour = torch.log(torch.tensor([[0.25]])).requires_grad_()
    loss, _ = clipped_token_loss(logp, torch.log(torch.tensor([[0.5]])), torch.tensor([1.0]),
                                 torch.ones(1, 1), behaviour_logp=behaviour)
    loss.backward()
    assert behaviour.grad is None
    assert logp.grad.item() == pytest.approx(-2.0, rel=1e-5)  # d(-2 * exp(logp - prox))/dlogp


def test_importance_cap_must_be_positive():
    with pytest.raises(ValueError, match="importance_cap"):
        clipped_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1),
                           behaviour_logp=torch.zeros(1, 1), importance_cap=0.0)
