"""``pettingllms-rllib``: run AT-GRPO experiments with Ray Tune from the command line.

    pettingllms-rllib train tune_configs/plan_path_cpu.yaml [--set training.lr=3e-5 ...]
                            [--output runs] [--address ray://host:10001] [--resume]
    pettingllms-rllib plot runs/plan_path_cpu
    pettingllms-rllib envs

Everything an experiment writes (Tune results, checkpoints, the learning-curve plot) lives under
``--output/<name>``; Ray's and Tune's defaults under HOME are not used.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger("pettingllms_rllib")

PROGRESS_COLUMNS = {
    "training_iteration": "iter",
    "env_runners/success_rate": "success",
    "env_runners/episode_return_mean": "return",
    "at_grpo/zero_variance_group_fraction": "zero_var",
    "time_this_iter_s": "iter_s",
}


def _train(args: argparse.Namespace) -> int:
    from pettingllms_rllib.experiment import ExperimentError, load_experiment

    if os.getcwd() not in sys.path:  # so `imports:` finds the user's env modules here
        sys.path.insert(0, os.getcwd())
    try:
        experiment = load_experiment(args.config, args.set or [])
    except ExperimentError as exc:
        logger.error("%s", exc)
        return 2
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import tune

    from pettingllms_rllib.algorithms import ATGRPO
    from pettingllms_rllib.plotting import plot_experiment

    # Workers must import the same user env modules (`imports:`) as this driver.
    python_path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": python_path}} if experiment.imports else None
    if args.address:
        ray.init(address=args.address, runtime_env=runtime_env)
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=True,
                 runtime_env=runtime_env)
    experiment_dir = output / experiment.name
    reporter = tune.CLIReporter(metric_columns=PROGRESS_COLUMNS, max_report_frequency=10)
    if args.resume and experiment_dir.exists():
        logger.info("resuming %s from its last checkpoints", experiment_dir)
        tuner = tune.Tuner.restore(str(experiment_dir), trainable=ATGRPO, resume_errored=True)
    else:
        tuner = tune.Tuner(
            ATGRPO, param_space=experiment.param_space(),
            tune_config=tune.TuneConfig(num_samples=experiment.num_samples,
                                        max_concurrent_trials=experiment.max_concurrent_trials),
            run_config=tune.RunConfig(
                name=experiment.name, storage_path=str(output), stop=experiment.stop,
                progress_reporter=reporter, verbose=1,
                checkpoint_config=tune.CheckpointConfig(
                    checkpoint_frequency=experiment.checkpoint_frequency,
                    checkpoint_at_end=True, num_to_keep=2)))
    results = tuner.fit()
    plot_path = plot_experiment(experiment_dir, experiment_dir / "learning_curve.png")
    logger.info("learning curve: %s", plot_path)
    errors = [r.error for r in results if r.error]
    for error in errors:
        logger.error("trial failed: %s", error)
    ray.shutdown()
    return 1 if errors else 0


def _plot(args: argparse.Namespace) -> int:
    from pettingllms_rllib.plotting import plot_experiment

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / "learning_curve.png"
    try:
        path = plot_experiment(run_dir, out)
    except FileNotFoundError as exc:
        logger.error("%s", exc)
        return 2
    logger.info("wrote %s", path)
    return 0


def _envs(args: argparse.Namespace) -> int:
    from pettingllms_rllib.envs.registry import make_text_env, registered_env_ids

    for env_id in registered_env_ids():
        env = make_text_env(env_id)
        stages = " -> ".join("||".join(stage) for stage in env.workflow)
        sys.stdout.write(f"{env_id}: {stages}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pettingllms-rllib", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run an experiment YAML through Ray Tune")
    train.add_argument("config", help="experiment YAML, e.g. tune_configs/plan_path_cpu.yaml")
    train.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a key, e.g. training.lr=3e-5 or mapping=per_role")
    train.add_argument("--output", default="runs", help="folder for all results (default ./runs)")
    train.add_argument("--address", help="join a running Ray cluster (e.g. ray://head:10001)")
    train.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray")
    train.add_argument("--resume", action="store_true",
                       help="continue an interrupted experiment from its last checkpoints")
    train.set_defaults(func=_train)
    plot = sub.add_parser("plot", help="draw the learning curve of an experiment folder")
    plot.add_argument("run_dir")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/learning_curve.png)")
    plot.set_defaults(func=_plot)
    envs = sub.add_parser("envs", help="list registered text envs and their workflows")
    envs.set_defaults(func=_envs)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
