"""Learning curves over Tune run folders: seeds of one setting become one mean line + band."""

import json
from pathlib import Path
import statistics

import pandas as pd
import pytest

from pettingllms_rllib.cli import main
from pettingllms_rllib.plotting import (
    Trial, aggregate, group_trials, load_run_trials, plot_experiment, plot_runs)

COLUMNS = ("env_runners/success_rate", "env_runners/episode_turns_mean",
           "env_runners/agent/tool/episode_return_mean",
           "env_runners/agent/planner/episode_return_mean",
           "at_grpo/zero_variance_group_fraction",
           "learners/planner/policy_behaviour_ratio", "learners/tool/policy_behaviour_ratio",
           "learners/__all_modules__/num_env_steps_trained")


def base_params(**changes):
    """The shape of a real params.json (RLlib's AlgorithmConfig.to_dict): seed at top level."""
    params = {"env": "plan_path_v1", "env_config": {"grid_size": 3, "max_turns": 2},
              "lr": 2e-4, "seed": 0, "num_branches": 4,
              "callbacks": "<class 'ray.rllib.callbacks.callbacks.RLlibCallback'>",
              "policy_mapping_fn": "AgentModuleMap({'tool': 'tool', 'planner': 'planner'})"}
    params.update(changes)
    return params


def make_trial(run_dir, name, params, rows, columns=COLUMNS):
    """A Tune trial folder: progress.csv where column k of iteration i is ``rows[i] + k``."""
    trial = run_dir / name
    trial.mkdir(parents=True)
    frame = pd.DataFrame({"training_iteration": range(1, len(rows) + 1), "trial_id": name})
    for index, column in enumerate(columns):
        frame[column] = [row + index for row in rows]
    frame.to_csv(trial / "progress.csv", index=False)
    if params is not None:
        (trial / "params.json").write_text(json.dumps(params, indent=2))
    return trial


SEEDS = {0: [0.1, 0.2, 0.4], 1: [0.0, 0.3, 0.5], 2: [0.2, 0.4, 0.9]}


@pytest.fixture
def two_arms(tmp_path):
    """2 arms (lr) x 3 seeds in one run folder; arm B is arm A's numbers + 0.05."""
    run = tmp_path / "lr_sweep"
    for arm, (lr, shift) in enumerate(((1e-4, 0.0), (2e-4, 0.05))):
        for seed, rows in SEEDS.items():
            make_trial(run, f"ATGRPO_plan_path_v1_abc_0000{arm * 3 + seed}_{seed}",
                       base_params(lr=lr, seed=seed), [r + shift for r in rows])
    return run


def read_json(png):
    return json.loads(png.with_suffix(".json").read_text())


def test_two_arms_of_three_seeds_are_two_mean_lines(two_arms, tmp_path):
    png = plot_runs([two_arms], tmp_path / "out" / "curves.png")
    assert png.stat().st_size > 0
    curves = read_json(png)
    assert sorted(curves) == ["lr_sweep: lr=0.0001", "lr_sweep: lr=0.0002"]
    arm = curves["lr_sweep: lr=0.0001"]
    assert arm["seeds"] == [0, 1, 2] and len(arm["trials"]) == 3
    assert arm["training_iteration"] == [1, 2, 3]
    assert arm["band"] == "min-max over seeds"
    for i in range(3):
        values = [rows[i] for rows in SEEDS.values()]
        assert arm["success_rate"][i] == pytest.approx(statistics.mean(values))
        spread = arm["spread"]["success_rate"]
        assert spread["min"][i] == pytest.approx(min(values))
        assert spread["max"][i] == pytest.approx(max(values))
        assert spread["std"][i] == pytest.approx(statistics.stdev(values), abs=1e-6)
        assert spread["n"][i] == 3
        # every panel's column is averaged the same way (column k is offset by k)
        assert arm["episode_turns_mean"][i] == pytest.approx(statistics.mean(values) + 1)
        assert arm["planner/policy_behaviour_ratio"][i] == pytest.approx(
            statistics.mean(values) + 5)
    other = curves["lr_sweep: lr=0.0002"]
    assert other["success_rate"] == pytest.approx([m + 0.05 for m in arm["success_rate"]])
    assert {"tool/episode_return_mean", "planner/episode_return_mean",
            "zero_variance_group_fraction", "tool/policy_behaviour_ratio"} <= set(arm)
    assert not any("__all_modules__" in key for key in arm)


def test_seed_varied_through_a_tune_grid_is_removed_from_the_grid_point(tmp_path):
    """`grid:` puts the varying keys (seed included) under `__grid__`; arms = the rest."""
    run = tmp_path / "mapping_grid"
    for mapping in ("shared", "per_role"):
        for seed in (0, 1, 2):
            params = base_params(seed=0)
            del params["policy_mapping_fn"]
            params["__grid__"] = {"seed": seed, "policy_mapping_fn": f"Map({mapping})"}
            make_trial(run, f"t_{mapping}_{seed}", params, [seed / 10, 0.5])
    curves = read_json(plot_runs([run], tmp_path / "c.png"))
    assert sorted(curves) == ["mapping_grid: policy_mapping_fn=Map(per_role)",
                              "mapping_grid: policy_mapping_fn=Map(shared)"]
    for arm in curves.values():
        assert arm["seeds"] == [0, 1, 2]
        assert arm["success_rate"] == pytest.approx([0.1, 0.5])


def test_a_single_trial_is_a_plain_line_and_plot_experiment_still_works(tmp_path):
    run = tmp_path / "plan_path_cpu"
    make_trial(run, "only", base_params(), [0.1, 0.3])
    png = plot_experiment(run, run / "learning_curve.png")
    curves = read_json(png)
    assert list(curves) == ["plan_path_cpu"]
    (arm,) = curves.values()
    assert arm["training_iteration"] == [1, 2]
    assert arm["success_rate"] == pytest.approx([0.1, 0.3])
    assert arm["band"] == "none (single trial)"
    assert arm["spread"]["success_rate"]["std"] == [None, None]
    # A trial folder itself is accepted too.
    curves = read_json(plot_runs([run / "only"], tmp_path / "one.png"))
    assert [a["trials"] for a in curves.values()] == [["only"]]


def test_missing_columns_are_skipped_and_uneven_seeds_counted(tmp_path):
    run = tmp_path / "sparse"
    make_trial(run, "s0", base_params(seed=0), [0.2, 0.4, 0.6],
               columns=("env_runners/success_rate",))
    make_trial(run, "s1", base_params(seed=1), [0.4, 0.6],
               columns=("env_runners/success_rate", "at_grpo/zero_variance_group_fraction"))
    (run / "empty_trial").mkdir()
    (run / "empty_trial" / "progress.csv").write_text("")  # a trial that never reported
    curves = read_json(plot_runs([run], tmp_path / "sparse.png"))
    (arm,) = curves.values()
    assert arm["trials"] == ["s0", "s1"]
    assert arm["success_rate"] == pytest.approx([0.3, 0.5, 0.6])
    assert arm["spread"]["success_rate"]["n"] == [2, 2, 1]
    assert arm["zero_variance_group_fraction"] == pytest.approx([1.4, 1.6, None])
    assert arm["spread"]["zero_variance_group_fraction"]["n"] == [1, 1, None]
    assert "episode_turns_mean" not in arm
    assert not any(key.endswith("episode_return_mean") for key in arm)


def test_no_trials_raises_naming_the_folders(tmp_path):
    empty, other = tmp_path / "empty", tmp_path / "missing"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="empty.*missing"):
        plot_runs([empty, other], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_same_config_in_two_run_folders_stays_two_arms(two_arms, tmp_path):
    copy = tmp_path / "repeat"
    make_trial(copy, "t0", base_params(lr=1e-4, seed=0), [0.9, 0.9, 0.9])
    curves = read_json(plot_runs([two_arms, copy], tmp_path / "both.png"))
    assert len(curves) == 3 and curves["repeat"]["seeds"] == [0]


def test_same_named_run_folders_of_one_seed_each_aggregate_by_name(tmp_path):
    for seed, value in enumerate([0.2, 0.4, 0.6]):
        make_trial(tmp_path / f"seed={seed}" / "exp", "t", base_params(lr=1e-4, seed=seed),
                   [value])
    runs = [tmp_path / f"seed={seed}" / "exp" for seed in range(3)]
    groups = group_trials([t for run in runs for t in load_run_trials(run)], "name")
    assert [len(members) for members in groups.values()] == [3]
    assert len(group_trials([t for run in runs for t in load_run_trials(run)], "arm")) == 3


def test_group_by_choices(two_arms, tmp_path):
    trials = load_run_trials(two_arms)
    assert len(group_trials(trials, "trial")) == 6
    assert [len(v) for v in group_trials(trials, "run_dir").values()] == [6]
    by_seed = group_trials(trials, lambda trial: f"seed {trial.seed}")
    assert sorted(by_seed) == ["seed 0", "seed 1", "seed 2"]
    with pytest.raises(ValueError, match="arm.*name.*trial.*run_dir"):
        group_trials(trials, "colour")
    # Without params.json nothing shows two trials share a setting: each is its own arm.
    run = tmp_path / "no_params"
    make_trial(run, "a", None, [0.1])
    make_trial(run, "b", None, [0.2])
    assert sorted(group_trials(load_run_trials(run))) == ["no_params: a", "no_params: b"]


def test_cli_plot(two_arms, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(two_arms)]) == 0
    assert (two_arms / "learning_curve.png").stat().st_size > 0
    assert len(read_json(two_arms / "learning_curve.png")) == 2
    single = tmp_path / "single"
    make_trial(single, "t", base_params(), [0.5])
    assert main(["plot", str(two_arms), str(single)]) == 0
    assert len(read_json(tmp_path / "learning_curves.png")) == 3
    assert main(["plot", str(single), "--out", str(tmp_path / "o" / "p.png"),
                 "--group-by", "trial"]) == 0
    assert (tmp_path / "o" / "p.json").exists()
    (tmp_path / "nothing").mkdir()
    assert main(["plot", str(tmp_path / "nothing")]) == 2


TIME_COLUMNS = ("at_grpo/iteration_s", "at_grpo/time_s/generate", "at_grpo/time_s/env",
                "at_grpo/time_s/learner", "at_grpo/time_s/other")


def test_iteration_time_parts_are_plotted_and_exported(tmp_path):
    run = tmp_path / "timed"
    make_trial(run, "only", base_params(), [10.0, 20.0], columns=COLUMNS + TIME_COLUMNS)
    curves = read_json(plot_experiment(run, run / "learning_curve.png"))
    (arm,) = curves.values()
    offset = len(COLUMNS)  # column k of iteration i is rows[i] + k
    assert arm["iteration_s"] == pytest.approx([10.0 + offset, 20.0 + offset])
    assert arm["time_s/generate"] == pytest.approx([11.0 + offset, 21.0 + offset])
    assert set(arm) >= {"time_s/env", "time_s/learner", "time_s/other"}


def test_held_out_success_is_drawn_against_generated_tokens_where_it_was_evaluated(tmp_path):
    run = tmp_path / "evaluated"
    trial = make_trial(run, "only", base_params(), [0.0, 0.0, 0.0])
    frame = pd.read_csv(trial / "progress.csv")
    frame["env_runners/num_generated_tokens_lifetime"] = [1000, 2000, 3000]
    frame["evaluation/success_rate"] = [float("nan"), 0.25, float("nan")]
    frame["evaluation/untrained_success_rate"] = [0.1, 0.1, 0.1]
    frame.to_csv(trial / "progress.csv", index=False)
    (arm,) = read_json(plot_experiment(run, run / "learning_curve.png")).values()
    assert arm["held_out_success_rate"] == [None, 0.25, None]
    assert arm["held_out_untrained_success_rate"] == pytest.approx([0.1, 0.1, 0.1])


DIAGNOSTIC_COLUMNS = ("learners/tool/entropy", "learners/planner/entropy",
                      "learners/tool/kl_to_start", "at_grpo/advantage_std/tool",
                      "learners/tool/gradients_default_optimizer_global_norm",
                      "learners/tool/clip_fraction",
                      "env_runners/agent/planner/response_tokens_mean",
                      "at_grpo/reward_std/planner")


def test_learning_diagnostics_are_drawn_and_exported_per_module(tmp_path):
    run = tmp_path / "diagnosed"
    make_trial(run, "only", base_params(), [1.0, 2.0], columns=COLUMNS + DIAGNOSTIC_COLUMNS)
    (arm,) = read_json(plot_experiment(run, run / "learning_curve.png")).values()
    offset = len(COLUMNS)
    assert arm["tool/entropy"] == pytest.approx([1.0 + offset, 2.0 + offset])
    assert arm["planner/entropy"] == pytest.approx([2.0 + offset, 3.0 + offset])
    assert arm["tool/kl_to_start"] == pytest.approx([3.0 + offset, 4.0 + offset])
    assert {"tool/advantage_std", "tool/gradient_norm", "tool/clip_fraction",
            "planner/response_tokens_mean", "planner/reward_std"} <= set(arm)
    assert "planner/kl_to_start" not in arm  # never logged: not drawn, not invented


def test_reference_rates_are_drawn_on_the_held_out_panel_and_exported(two_arms, tmp_path):
    out = plot_runs([two_arms], tmp_path / "curves.png",
                    references={"best constant answer": 0.047, "untrained alone": 0.06})
    assert read_json(out)["__references__"] == {"best constant answer": 0.047,
                                                "untrained alone": 0.06}


@pytest.mark.parametrize("bad", ["0.05", "constant=", "constant=high"])
def test_cli_plot_refuses_a_malformed_reference(two_arms, tmp_path, bad):
    assert main(["plot", str(two_arms), "--out", str(tmp_path / "c.png"),
                 "--reference", bad]) == 2
    assert not (tmp_path / "c.png").exists()


def test_iterations_one_seed_did_not_log_still_come_in_order():
    column = "learners/planner/entropy"
    first = pd.DataFrame({"training_iteration": [1, 2, 3, 4], column: [0.5, None, None, 0.2]})
    second = pd.DataFrame({"training_iteration": [1, 2, 3, 4], column: [0.4, 0.3, None, 0.1]})
    stats = aggregate([Trial(Path("a"), "a", first, None), Trial(Path("b"), "b", second, None)],
                      column)
    assert stats["training_iteration"] == [1, 2, 4]
    assert stats["mean"] == [0.45, 0.3, 0.15] and stats["n"] == [2, 1, 2]


# ------------------------------------------------------------------ short runs, told-apart agents
def _two_iteration_run(run, name="only", shift=0.0, lr=2e-4):
    """A 2-row progress.csv as a 2-iteration train writes it: KL from the start only from
    iteration 2 (nothing to compare against before the first update)."""
    trial = run / name
    trial.mkdir(parents=True)
    pd.DataFrame({
        "training_iteration": [1, 2],
        "env_runners/success_rate": [0.25 + shift, 0.5 + shift],
        "env_runners/agent/planner/episode_return_mean": [0.2, 0.4],
        "env_runners/agent/tool/episode_return_mean": [0.1, 0.3],
        "learners/planner/kl_to_start": [float("nan"), 0.01],
        "learners/tool/kl_to_start": [float("nan"), 0.02],
    }).to_csv(trial / "progress.csv", index=False)
    (trial / "params.json").write_text(json.dumps(base_params(lr=lr)))


def _panel(fig, title):
    from pettingllms_rllib.plotting import PANELS

    return fig.axes[PANELS.index(title)]


def test_a_two_iteration_run_draws_markers_integer_ticks_and_a_colour_per_agent(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from pettingllms_rllib.plotting import draw_runs

    _two_iteration_run(tmp_path / "short")
    fig, summary = draw_runs([tmp_path / "short"])
    try:
        returns = _panel(fig, "per-agent episode return")
        lines = {line.get_label(): line for line in returns.get_lines()}
        assert sorted(lines) == ["short: planner", "short: tool"]
        planner, tool = lines["short: planner"], lines["short: tool"]
        assert to_hex(planner.get_color()) != to_hex(tool.get_color())
        assert planner.get_marker() not in (None, "", "None")
        assert planner.get_marker() != tool.get_marker()
        assert planner.get_markersize() >= 5  # few iterations: markers large enough to see
        legend = [text.get_text() for text in returns.get_legend().get_texts()]
        assert legend == ["short: planner", "short: tool"]
        # one logged point (iteration 2 only) is a visible marker, not an empty line
        kl = {line.get_label(): line for line in
              _panel(fig, "KL from the starting policy (per module)").get_lines()}
        assert list(kl["short: planner"].get_xdata()) == [2]
        assert kl["short: planner"].get_marker() not in (None, "", "None")
        assert to_hex(kl["short: planner"].get_color()) == to_hex(planner.get_color())
        # iteration axes: whole iterations, half an iteration of margin
        success = _panel(fig, "success rate")
        assert success.get_xlim() == pytest.approx((0.5, 2.5))
        assert [t for t in success.get_xticks() if 0.5 <= t <= 2.5] == [1, 2]
        assert summary["short"]["training_iteration"] == [1, 2]
        # the arms' key has its own axes: no panel lies under it
        assert len(fig.axes) == 16 and not fig.axes[15].axison
    finally:
        plt.close(fig)


def test_agents_of_several_arms_are_shades_of_their_arms_colour(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from pettingllms_rllib.plotting import draw_runs

    _two_iteration_run(tmp_path / "sweep", "a", lr=1e-4)
    _two_iteration_run(tmp_path / "sweep", "b", shift=0.1, lr=2e-4)
    fig, _ = draw_runs([tmp_path / "sweep"])
    try:
        lines = {line.get_label(): to_hex(line.get_color())
                 for line in _panel(fig, "per-agent episode return").get_lines()}
        assert sorted(lines) == ["sweep: lr=0.0001: planner", "sweep: lr=0.0001: tool",
                                 "sweep: lr=0.0002: planner", "sweep: lr=0.0002: tool"]
        assert len(set(lines.values())) == 4  # every (arm, agent) its own colour
        arm_colours = {line.get_label(): to_hex(line.get_color())
                       for line in _panel(fig, "success rate").get_lines()}
        assert len(set(arm_colours.values())) == 2
    finally:
        plt.close(fig)
