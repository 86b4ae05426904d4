"""Records are routed to their module and padded with response-only masks."""

import numpy as np
import pytest

from pettingllms_rllib.core.batching import batches_per_module, pad_records, records_to_train
from pettingllms_rllib.core.records import GroupKey, SampleRecord


def _record(agent, module, prompt, response, advantage=0.0):
    return SampleRecord(group_key=GroupKey("t", agent, 0), module_id=module, branch=0,
                        prompt_text="p", prompt_ids=tuple(prompt), response_ids=tuple(response),
                        behaviour_logprobs=tuple(-0.1 * (i + 1) for i in range(len(response))),
                        response_text="r", reward=1.0, reward_team=0.0, reward_local=1.0,
                        success=False, parse_error=None, advantage=advantage)


def test_padding_places_response_mask_and_old_logp_on_response_positions():
    batch = pad_records([_record("a", "m", [5, 6, 7], [8, 9], 0.5),
                         _record("a", "m", [5], [10, 11, 12], -1.0)])
    np.testing.assert_array_equal(batch["input_ids"], [[5, 6, 7, 8, 9], [5, 10, 11, 12, 0]])
    np.testing.assert_array_equal(batch["attention_mask"], [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(batch["response_mask"], [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]])
    np.testing.assert_allclose(batch["old_logp"][0], [0, 0, 0, -0.1, -0.2])
    np.testing.assert_allclose(batch["old_logp"][1], [0, -0.1, -0.2, -0.3, 0])
    np.testing.assert_allclose(batch["advantages"], [0.5, -1.0])


def test_shared_module_receives_every_agents_records():
    records = [_record("tool", "shared", [1], [2]), _record("planner", "shared", [1], [3]),
               _record("planner", "solo", [1], [4])]
    batches = batches_per_module(records)
    assert sorted(batches) == ["shared", "solo"]
    assert len(batches["shared"]["input_ids"]) == 2


def test_mismatched_logprobs_are_an_error():
    record = _record("a", "m", [1], [2, 3])
    record.behaviour_logprobs = (-0.1,)
    with pytest.raises(ValueError, match="log-probs"):
        pad_records([record])


def test_the_learner_trains_kept_records_of_unfrozen_modules_and_masks_truncated_ones_on_request():
    import dataclasses

    full = _record("a", "m", [1], [2])
    cut = dataclasses.replace(_record("a", "m", [1], [3]), finish_reason="length")
    dropped = _record("a", "m", [1], [4])
    frozen = _record("b", "frozen", [1], [5])
    records, keep = [full, cut, dropped, frozen], [True, True, False, True]
    assert records_to_train(records, keep, frozen_modules={"frozen"}) == [full, cut]
    assert records_to_train(records, keep, frozen_modules={"frozen"},
                            mask_truncated=True) == [full]
    with pytest.raises(ValueError):  # one keep flag per record
        records_to_train(records, keep[:2])


def test_every_row_carries_the_oldest_weights_version_its_responses_were_sampled_with():
    import dataclasses

    from pettingllms_rllib.core.batching import pack_records

    old, new = (dataclasses.replace(_record("a", "m", [5, 6], [7]), weights_version=3),
                dataclasses.replace(_record("a", "m", [5, 6], [8]), weights_version=4))
    other = dataclasses.replace(_record("a", "m", [9], [1]), weights_version=4)
    np.testing.assert_array_equal(pad_records([old, new, other])["weights_version"], [3, 4, 4])
    np.testing.assert_array_equal(pack_records([old, new, other])["weights_version"], [3, 4])
