"""Grouped GRPO advantages, checked against numbers computed by hand."""

import numpy as np
import pytest

from pettingllms_rllib.core.advantages import AdvantageConfig, group_advantages


def test_std_normalised_group_matches_hand_computation():
    # rewards 1, 2, 3, 6: mean 3, unbiased std sqrt(((4 + 1 + 0 + 9) / 3)) = sqrt(14/3)
    result = group_advantages([1, 2, 3, 6], ["g"] * 4)
    std = np.sqrt(14 / 3)
    np.testing.assert_allclose(result.advantages, [-2 / std, -1 / std, 0, 3 / std], rtol=1e-5)
    assert result.num_groups == 1 and result.zero_variance_fraction == 0.0


def test_groups_are_normalised_independently():
    result = group_advantages([0, 1, 10, 30], ["a", "a", "b", "b"])
    # each two-member group: values -+ (d/2) / (d/sqrt(2)) = -+ 1/sqrt(2)
    np.testing.assert_allclose(result.advantages, [-1 / np.sqrt(2), 1 / np.sqrt(2)] * 2,
                               rtol=1e-5)


def test_singleton_and_zero_variance_groups_get_zero_advantage_and_are_counted():
    result = group_advantages([5, 2, 2, 2, 1, 3], ["single", "flat", "flat", "flat", "x", "x"])
    np.testing.assert_allclose(result.advantages[:4], 0.0)
    assert result.num_groups == 3
    assert result.num_zero_variance_groups == 2
    assert result.zero_variance_fraction == pytest.approx(2 / 3)
    assert result.keep.all()


def test_drop_zero_variance_removes_those_records_only():
    result = group_advantages([2, 2, 1, 3], ["flat", "flat", "x", "x"],
                              config=AdvantageConfig(drop_zero_variance=True))
    assert result.keep.tolist() == [False, False, True, True]


def test_mean_only_normalisation_centres_without_scaling():
    result = group_advantages([1, 2, 6], ["g"] * 3, config=AdvantageConfig(normalization="mean"))
    np.testing.assert_allclose(result.advantages, [-2, -1, 3])


def test_agent_scope_scales_by_the_agents_std_over_the_batch():
    rewards = [0, 2, 10, 10, 4, 6]
    keys = [("t1", "a"), ("t1", "a"), ("t2", "a"), ("t2", "a"), ("t1", "b"), ("t1", "b")]
    agents = ["a", "a", "a", "a", "b", "b"]
    result = group_advantages(rewards, keys, agents, AdvantageConfig(scale_scope="agent"))
    std_a = np.std([0, 2, 10, 10], ddof=1)
    std_b = np.std([4, 6], ddof=1)
    np.testing.assert_allclose(result.advantages,
                               [-1 / std_a, 1 / std_a, 0, 0, -1 / std_b, 1 / std_b], rtol=1e-5)


def test_bad_options_are_rejected_with_accepted_values():
    with pytest.raises(ValueError, match="accepted"):
        AdvantageConfig(normalization="zscore")
    with pytest.raises(ValueError, match="accepted"):
        AdvantageConfig(scale_scope="team")
    with pytest.raises(ValueError, match="group keys"):
        group_advantages([1, 2], ["g"])


def test_mean_group_reward_std_averages_the_within_group_spread():
    from pettingllms_rllib.core.advantages import mean_group_reward_std

    rewards = [0.0, 2.0, 1.0, 1.0, 5.0]
    keys = ["a", "a", "b", "b", "c"]  # std 1, 0 and 0 (a singleton)
    assert mean_group_reward_std(rewards, keys) == pytest.approx(1.0 / 3)
    assert np.isnan(mean_group_reward_std([], []))
    with pytest.raises(ValueError, match="2 rewards for 1 group keys"):
        mean_group_reward_std([1.0, 2.0], ["a"])
