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


# ------------------------------------------------------------- async rollout and resource pools
def _timed(**at_grpo):
    """A result of iteration 3 with 41.23 s, of which the driver waited on generate 61% and
    on the learner 30% unless ``at_grpo`` says otherwise."""
    at = {"iteration_s": 41.23, "time_s": {"generate": 25.1, "learner": 12.4},
          "time_share": {"generate": 0.61, "learner": 0.3},
          "staleness_mean": {"planner": 0.0, "tool": 0.0},
          "staleness_max": {"planner": 0.0, "tool": 0.0}}
    at.update(at_grpo)
    return {"training_iteration": 3, "env_runners": {"success_rate": 0.5}, "at_grpo": at}


def test_a_synchronous_run_shows_no_staleness_and_plain_shares():
    assert progress_line(_timed(), 12) == (
        "iter 3/12 | success 0.50 | 41.2 s (generate 61%, learner 30%)")


def test_async_rollout_shows_staleness_and_labels_the_shares_as_waits():
    line = progress_line(_timed(time_s={"generate": 8.2, "learner": 28.9},
                                time_share={"generate": 0.2, "learner": 0.7},
                                staleness_mean={"planner": 1.0, "tool": 1.0},
                                staleness_max={"planner": 1.0, "tool": 1.0}), 12)
    assert line == ("iter 3/12 | success 0.50 | staleness 1.00 (max 1) | "
                    "41.2 s, overlapped (waited on generate 20%, learner 70%)")


def test_async_pools_show_pool_updates_and_the_learners_busy_share():
    line = progress_line(_timed(time_s={"generate": 2.0, "learner": 0.4},
                                time_share={"generate": 0.05, "learner": 0.01},
                                staleness_mean={"planner": 1.0, "tool": 0.5},
                                staleness_max={"planner": 1.0, "tool": float("nan")},
                                pool_update_s={"planner": 32.1, "tool": float("nan")}), 12)
    # the tool pool did not finish this iteration (NaN): left out; 32.1 / 41.23 = 78%
    assert line == ("iter 3/12 | success 0.50 | staleness planner 1.00 tool 0.50 (max 1) | "
                    "pool updates planner 32.1 s | "
                    "41.2 s, overlapped (waited on generate 5%, learner 1%; learner busy 78%)")


def test_synchronous_pools_show_their_updates_without_an_overlap_label():
    # the driver waited for the slowest pool: its learner time covers every pool's update
    line = progress_line(_timed(pool_update_s={"planner": 12.1, "tool": 9.0}))
    assert line.endswith("| pool updates planner 12.1 s tool 9.0 s | "
                         "41.2 s (generate 61%, learner 30%)")


def test_a_pool_busier_than_the_driver_waited_counts_as_overlapped_before_any_lag():
    # an async pooled run's second iteration: no trained row lagged yet, the pool ran 20 s
    # in the background while the driver waited 0.4 s on the learner
    line = progress_line(_timed(time_s={"generate": 2.0, "learner": 0.4},
                                time_share={"generate": 0.05, "learner": 0.01},
                                pool_update_s={"planner": 20.0}))
    assert "staleness" not in line
    assert line.endswith("41.2 s, overlapped (waited on generate 5%, learner 1%; "
                         "learner busy 49%)")


# ------------------------------------------------------------------------------- trial names
def test_trial_name_from_a_grid_point_is_short_readable_and_keeps_the_trial_id():
    from pettingllms_rllib.progress import grid_label, trial_name

    label = grid_label({"mapping": "per_role", "training.lr": 1e-5})
    assert label == "mapping=per_role,lr=1e-05"
    assert trial_name("ATGRPO_plan_path_v1", "a1b2c_00001", label) == (
        "ATGRPO_plan_path_v1_a1b2c_00001_mapping=per_role,lr=1e-05")
    assert trial_name("ATGRPO_plan_path_v1", "a1b2c_00001", "") == "ATGRPO_plan_path_v1_a1b2c_00001"


def test_grid_labels_name_clashing_keys_in_full_and_values_safely():
    from pettingllms_rllib.progress import grid_label

    assert grid_label({"training.lr": 1e-4, "llm.lr": 0.5}) == "training.lr=0.0001,llm.lr=0.5"
    assert grid_label({"llm.model": "Qwen/Qwen3 1.7B", "debugging.seed": 3,
                       "training.async_rollout": True, "environment.env_config": {"b": 1, "a": 2},
                       "training.max_staleness": None}) == (
        "model=Qwen_Qwen3_1.7B,seed=3,async_rollout=true,env_config=a+b,max_staleness=none")


def test_long_trial_names_drop_whole_pairs_and_stay_filesystem_safe():
    import re

    from pettingllms_rllib.progress import TRIAL_NAME_MAX_LENGTH, grid_label, trial_name

    point = {f"training.knob_{i}": "x" * 12 for i in range(8)}
    name = trial_name("ATGRPO_plan_path_v1", "a1b2c_00001", grid_label(point))
    assert len(name) <= TRIAL_NAME_MAX_LENGTH
    assert name.startswith("ATGRPO_plan_path_v1_a1b2c_00001_knob_0=xxxxxxxxxxxx,")
    assert re.search(r",\+\d$", name)  # how many pairs were left out
    assert re.fullmatch(r"[A-Za-z0-9._+=,-]+", name)
    one_long = trial_name("ATGRPO", "a1b2c_00001", "model=" + "y" * 300)
    assert len(one_long) == TRIAL_NAME_MAX_LENGTH
    assert one_long.startswith("ATGRPO_a1b2c_00001_model=")


def test_trial_names_are_tunes_creators_matching_the_grid_point_of_the_trial():
    import copy
    from types import SimpleNamespace

    from pettingllms_rllib.progress import TrialNames

    class Mapping:  # an object in the grid point, as AgentModuleMap is
        def __init__(self, roles):
            self.roles = roles

        def __repr__(self):
            return f"Mapping({self.roles})"

    points = [{"policies": {"shared": None}, "policy_mapping_fn": Mapping({"tool": "shared"})},
              {"policies": {"tool": None, "planner": None},
               "policy_mapping_fn": Mapping({"tool": "tool"})}]
    space = {"env": "plan_path_v1", "__grid__": {"grid_search": points}}
    names = TrialNames.for_param_space(space, [{"mapping": "shared"}, {"mapping": "per_role"}])

    def trial(index, config):
        return SimpleNamespace(trainable_name="ATGRPO", trial_id=f"a1b2c_{index:05d}",
                               config={"env": "plan_path_v1", **config})

    # Tune hands each trial a copy of its grid point
    assert names(trial(1, {"__grid__": copy.deepcopy(points[1])})) == (
        "ATGRPO_plan_path_v1_a1b2c_00001_mapping=per_role")
    assert names(trial(0, {"__grid__": copy.deepcopy(points[0])})) == (
        "ATGRPO_plan_path_v1_a1b2c_00000_mapping=shared")
    assert names(trial(2, {})) == "ATGRPO_plan_path_v1_a1b2c_00002"  # no grid
    # a point it was not told about: labelled from the config keys it can show
    assert TrialNames()(trial(3, {"__grid__": points[1]})) == (
        "ATGRPO_plan_path_v1_a1b2c_00003_policies=planner+tool")
