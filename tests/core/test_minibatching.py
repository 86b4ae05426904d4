"""Per-module minibatch plans: each module's rows are used exactly num_epochs times."""

from collections import Counter

import numpy as np
import pytest

from pettingllms_rllib.core.minibatching import (plan_minibatches, rows_trained_before_any_update,
                                                  split_rows)


def rows_seen(steps, module_id):
    return Counter(int(r) for step in steps if module_id in step for r in step[module_id])


@pytest.mark.parametrize("num_epochs", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_row_of_every_module_is_used_exactly_num_epochs_times(num_epochs, shuffle):
    sizes = {"tool": [1] * 4, "planner": [1] * 28}
    steps = plan_minibatches(sizes, num_epochs=num_epochs, minibatch_size=8, shuffle=shuffle,
                             rng=np.random.default_rng(0))
    for module_id, rows in sizes.items():
        assert rows_seen(steps, module_id) == {r: num_epochs for r in range(len(rows))}
    # the small module takes one step an epoch, the large one four: it is never cycled again
    assert sum("tool" in step for step in steps) == num_epochs
    assert sum("planner" in step for step in steps) == 4 * num_epochs
    assert len(steps) == 4 * num_epochs


def test_minibatches_are_whole_groups_of_at_most_minibatch_size_samples():
    sizes = [4, 4, 2, 4, 3, 9]
    pieces = split_rows(sizes, range(len(sizes)), minibatch_size=8)
    assert [p.tolist() for p in pieces] == [[0, 1], [2, 3], [4], [5]]  # a 9-group goes alone
    assert split_rows(sizes, range(len(sizes)), minibatch_size=None)[0].tolist() == list(range(6))


def test_shuffling_permutes_rows_within_a_module_per_epoch():
    steps = plan_minibatches({"m": [1] * 16}, num_epochs=2, minibatch_size=16, shuffle=True,
                             rng=np.random.default_rng(1))
    first, second = steps[0]["m"].tolist(), steps[1]["m"].tolist()
    assert sorted(first) == sorted(second) == list(range(16)) and first != second


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="num_epochs"):
        plan_minibatches({"m": [1]}, num_epochs=0, minibatch_size=1)
    with pytest.raises(ValueError, match="minibatch_size"):
        split_rows([1], [0], minibatch_size=0)
    with pytest.raises(ValueError, match="rng"):
        plan_minibatches({"m": [1]}, num_epochs=1, minibatch_size=1, shuffle=True)


def test_the_first_steps_rows_are_trained_before_any_update_when_no_later_step_repeats_them():
    sizes = {"a": [4, 4, 4], "b": [4]}
    steps = plan_minibatches(sizes, num_epochs=1, minibatch_size=8)
    assert rows_trained_before_any_update(steps, "a").tolist() == [0, 1]
    assert rows_trained_before_any_update(steps, "b").tolist() == [0]
    assert rows_trained_before_any_update(steps, "absent").tolist() == []
    # A second epoch trains every row again, on updated weights: none qualifies.
    twice = plan_minibatches(sizes, num_epochs=2, minibatch_size=8)
    assert rows_trained_before_any_update(twice, "a").tolist() == []
    assert rows_trained_before_any_update(twice, "b").tolist() == []
