"""Gradient all-reduce buckets: consecutive, bounded, and covering every parameter once."""

import torch

from pettingllms_rllib.algorithms.learner import _buckets


def test_buckets_keep_order_cover_everything_and_stay_under_the_bound():
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (3, 4, 2, 7, 1)]
    buckets = list(_buckets(params, max_elements=7))
    assert [p for bucket in buckets for p in bucket] == params
    assert [[p.numel() for p in b] for b in buckets] == [[3, 4], [2], [7], [1]]


def test_a_tensor_larger_than_the_bound_gets_a_bucket_of_its_own():
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (2, 10, 2)]
    assert [[p.numel() for p in b] for b in _buckets(params, max_elements=4)] == [[2], [10], [2]]
