"""Learning curves from Tune's ``progress.csv`` files: success, per-agent reward, zero-variance.

One PNG per experiment folder, one line per trial; also a ``learning_curve.json`` beside it
with the plotted numbers, so a reader can quote them without reopening the CSVs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

SUCCESS = "env_runners/success_rate"
ZERO_VARIANCE = "at_grpo/zero_variance_group_fraction"
AGENT_REWARD_PREFIX = "env_runners/agent/"
AGENT_REWARD_SUFFIX = "/episode_return_mean"


def load_trials(run_dir: Path) -> dict[str, pd.DataFrame]:
    """Trial name -> its progress dataframe (trials without rows are skipped)."""
    trials = {}
    for csv in sorted(Path(run_dir).glob("*/progress.csv")):
        try:
            frame = pd.read_csv(csv)
        except pd.errors.EmptyDataError:
            continue
        if len(frame) and "training_iteration" in frame:
            trials[csv.parent.name] = frame
    return trials


def _short(name: str) -> str:
    parts = name.split("_")
    return "_".join(parts[:3]) if len(parts) > 3 else name


def plot_experiment(run_dir: str | Path, out_path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir, out_path = Path(run_dir), Path(out_path)
    trials = load_trials(run_dir)
    if not trials:
        raise FileNotFoundError(f"no trial progress.csv under {run_dir}")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    summary = {}
    for name, frame in trials.items():
        label = _short(name)
        it = frame["training_iteration"]
        summary[name] = {"training_iteration": it.tolist()}
        if SUCCESS in frame:
            axes[0].plot(it, frame[SUCCESS], marker="o", label=label)
            summary[name]["success_rate"] = frame[SUCCESS].round(4).tolist()
        for column in frame.columns:
            if column.startswith(AGENT_REWARD_PREFIX) and column.endswith(AGENT_REWARD_SUFFIX):
                agent = column[len(AGENT_REWARD_PREFIX):-len(AGENT_REWARD_SUFFIX)]
                axes[1].plot(it, frame[column], marker=".", label=f"{label}: {agent}")
                summary[name][f"{agent}_return"] = frame[column].round(4).tolist()
        if ZERO_VARIANCE in frame:
            axes[2].plot(it, frame[ZERO_VARIANCE], marker="s", label=label)
            summary[name]["zero_variance_group_fraction"] = frame[ZERO_VARIANCE].round(4).tolist()
    titles = ("success rate (greedy path)", "per-agent episode return",
              "zero-variance group fraction")
    for ax, title in zip(axes, titles):
        ax.set_title(title)
        ax.set_xlabel("training iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylim(-0.05, 1.05)
    axes[2].set_ylim(-0.05, 1.05)
    fig.suptitle(f"AT-GRPO: {run_dir.name}")
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    out_path.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    return out_path
