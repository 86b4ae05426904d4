"""The per-iteration line: every field a user needs to see whether training works."""

from pettingllms_rllib.progress import progress_line

RESULT = {
    "training_iteration": 3,
    "env_runners": {"num_generated_tokens_lifetime": 5210, "success_rate": 0.625,
                    "agent": {"tool": {"episode_return_mean": 1.1, "parse_error_rate": 0.0625},
                              "reasoner": {"episode_return_mean": 1.3,
                                           "parse_error_rate": 0.0}}},
    "evaluation": {"success_rate": 0.8125, "untrained_success_rate": 0.5},
    "at_grpo": {"zero_variance_group_fraction": 0.25, "iteration_s": 41.23,
                "time_share": {"generate": 0.61, "learner": 0.3}},
}


def test_a_full_result_gives_every_field_in_one_line():
    assert progress_line(RESULT, stop_iteration=12) == (
        "iter 3/12 | tokens 5,210 | success 0.62 | held-out 0.81 (untrained 0.50) | "
        "return reasoner 1.30 tool 1.10 | parse errors reasoner 0.00 tool 0.06 | "
        "zero-var 0.25 | 41.2 s (generate 61%, learner 30%)")


def test_missing_or_nan_fields_are_left_out():
    result = {"training_iteration": 1, "evaluation": {"success_rate": float("nan")},
              "env_runners": {"success_rate": 0.5}}
    assert progress_line(result) == "iter 1 | success 0.50"


def test_dropped_groups_show_per_agent_only_when_there_are_some():
    runners = {"success_rate": 0.5,
               "agent": {"tool": {"rollout_errors": 2}, "reasoner": {"rollout_errors": 0}}}
    line = progress_line({"training_iteration": 2, "env_runners": runners})
    assert line == "iter 2 | success 0.50 | rollout errors tool 2"
    runners["agent"]["tool"]["rollout_errors"] = 0
    assert "rollout errors" not in progress_line({"training_iteration": 2,
                                                  "env_runners": runners})


def test_the_behaviour_learner_gap_shows_only_above_its_warning_level():
    from pettingllms_rllib.metric_keys import LOGP_MISMATCH_WARNING

    result = {"training_iteration": 3, "learners": {
        "reasoner": {"logp_mismatch_mean": LOGP_MISMATCH_WARNING * 2},
        "tool": {"logp_mismatch_mean": LOGP_MISMATCH_WARNING / 2},
        "__all_modules__": 7}}
    line = progress_line(result)
    assert f"logp mismatch reasoner {LOGP_MISMATCH_WARNING * 2:.2f}" in line
    assert "tool" not in line
    result["learners"]["reasoner"]["logp_mismatch_mean"] = LOGP_MISMATCH_WARNING / 2
    assert "logp mismatch" not in progress_line(result)
