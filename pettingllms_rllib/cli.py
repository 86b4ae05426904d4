"""``pettingllms-rllib``: run AT-GRPO experiments with Ray Tune from the command line.

    pettingllms-rllib train tune_configs/plan_path_cpu.yaml [--set training.lr=3e-5 ...]
                            [--output runs] [--address ray://host:10001] [--resume]
    pettingllms-rllib eval (--checkpoint CKPT | --base-model NAME --env ID) [--swap-roles]
                           [--role-alone ROLE --env-override JSON]
                           [--num-tasks 64] [--decoding greedy|sample] [--search] --out DIR
    pettingllms-rllib plot runs/plan_path_cpu
    pettingllms-rllib serve runs/plan_path_cpu [--port 8000] [--num-replicas 1]
    pettingllms-rllib envs

Everything an experiment writes (Tune results, checkpoints, the learning-curve plot) lives under
``--output/<name>``; Ray's and Tune's defaults under HOME are not used.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger("pettingllms_rllib")



def _import_from_here() -> None:
    """Put the working folder on the import path, so the user's env modules (``imports:`` or
    ``--import``) are found here as they are by ``python -c 'import my_envs'``."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _add_import_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                        help="a module that registers the run's env (as an experiment's "
                             "imports:), importable from here or PYTHONPATH (repeatable)")


def _workers_runtime_env() -> dict:
    """Ray's ``runtime_env`` that lets every worker import what this driver imports from the
    working folder (the user's env modules)."""
    python_path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": python_path}}


#: What Tune writes into an experiment folder when a run starts; ``--resume`` needs it.
TUNER_STATE_FILE = "tuner.pkl"


def _local_resources(args: argparse.Namespace) -> dict | None:
    """What one trial must fit in: the local Ray this command starts (``--num-cpus`` or the
    machine's CPUs, the machine's GPUs); None joining a cluster (``--address``): checked once
    connected (:func:`_cluster_problems`)."""
    from pettingllms_rllib.algorithms.resources import machine_resources

    if args.address:
        return None
    resources = machine_resources()
    if args.num_cpus is not None:
        resources["CPU"] = float(args.num_cpus)
    return resources


def _resume_problem(args: argparse.Namespace, experiment_dir: Path) -> str | None:
    """Why ``--resume`` cannot continue anything in ``experiment_dir`` (None: it can)."""
    if (experiment_dir / TUNER_STATE_FILE).is_file():
        return None
    found = "does not exist" if not experiment_dir.exists() else (
        f"holds no run (no {TUNER_STATE_FILE})")
    return (f"--resume: {experiment_dir} {found}; accepted: the --output folder (now "
            f"{args.output!r}) and experiment name of an earlier `train`, or no --resume to "
            "start a fresh run")


def _cluster_problems(experiment) -> list[str]:
    """Each trial config's resources against the Ray cluster this command joined."""
    import ray

    from pettingllms_rllib.algorithms.resources import resource_problems

    available = dict(ray.cluster_resources())
    problems = []
    for config in experiment.configs:
        problems += resource_problems(config, available, "the Ray cluster")
    return sorted(set(problems))


def _record_sandbox(experiment, experiment_dir: Path) -> None:
    """Say once which sandbox launcher runs the agents' programs and what it guarantees, and
    write it to ``<experiment>/sandbox.json`` beside the trials' params (only for a task that
    runs programs: one whose env holds ``sandbox_limits``)."""
    from pettingllms_rllib.envs.registry import make_text_env

    config = experiment.config
    limits = getattr(make_text_env(config.env, config.env_config), "sandbox_limits", None)
    if limits is None:
        return
    from pettingllms_envs.sandbox import describe_sandbox

    described = describe_sandbox(launcher=getattr(limits, "launcher", None))
    strongest = described["launcher"] == "bubblewrap"
    logger.log(logging.INFO if strongest else logging.WARNING,
               "sandbox: %s (chosen: %s); guarantees: %s", described["launcher"],
               described["launcher_chosen"], "; ".join(described["guarantees"]) or "none")
    experiment_dir.mkdir(parents=True, exist_ok=True)
    (experiment_dir / "sandbox.json").write_text(json.dumps(described, indent=2) + "\n")


def _record_precision(experiment, experiment_dir: Path) -> None:
    """Say once which arithmetic the models compute in here (``model_dtype``, ``auto``
    resolved for this machine) and why, and write it to ``<experiment>/precision.json``."""
    from pettingllms_rllib.models.precision import resolve_model_dtype

    choice = resolve_model_dtype(experiment.config.model_dtype)
    logger.info("precision: %s", choice.describe())
    experiment_dir.mkdir(parents=True, exist_ok=True)
    (experiment_dir / "precision.json").write_text(
        json.dumps(dataclasses.asdict(choice), indent=2) + "\n")


def _train(args: argparse.Namespace) -> int:
    from pettingllms_rllib.experiment import ExperimentError, load_experiment

    _import_from_here()
    if args.num_cpus is not None and args.num_cpus < 1:
        logger.error("--num-cpus: %d is not accepted; expected an integer >= 1", args.num_cpus)
        return 2
    try:
        experiment = load_experiment(args.config, args.set or [], arm=args.arm,
                                     resources=_local_resources(args))
    except ExperimentError as exc:
        logger.error("%s", exc)
        return 2
    output = Path(args.output).resolve()
    experiment_dir = output / experiment.name
    if args.resume and (problem := _resume_problem(args, experiment_dir)):
        logger.error("%s", problem)
        return 2
    output.mkdir(parents=True, exist_ok=True)
    _record_sandbox(experiment, experiment_dir)
    _record_precision(experiment, experiment_dir)

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if not args.verbose:  # Tune's legacy output honours verbose=0 (the new one still prints
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # its experiment box and result hints)
    import ray
    from ray import tune

    from pettingllms_rllib.algorithms import ATGRPO
    from pettingllms_rllib.best_checkpoint import BestCheckpoint
    from pettingllms_rllib.checkpoint_ledger import CheckpointLedger, repair_experiment_state
    from pettingllms_rllib.plotting import plot_experiment
    from pettingllms_rllib.progress import ProgressLine, TrialNames
    from pettingllms_rllib.trial_results import RESULT_FILE, tidy_trial

    runtime_env = _workers_runtime_env() if experiment.imports else None
    if args.address:
        ray.init(address=args.address, runtime_env=runtime_env)
        problems = _cluster_problems(experiment)  # before any trial waits for them forever
        if problems:
            logger.error("%s", "; ".join(problems))
            ray.shutdown()
            return 2
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=True,
                 runtime_env=runtime_env, logging_level=logging.WARNING)
    stop_iteration = experiment.stop.get("training_iteration")
    progress = ProgressLine(stop_iteration if isinstance(stop_iteration, int) else None)
    if args.resume:
        logger.info("resuming %s from its last checkpoints", experiment_dir)
        repair_experiment_state(experiment_dir)  # a kill right after Tune pruned: see there
        tuner = tune.Tuner.restore(str(experiment_dir), trainable=ATGRPO, resume_errored=True)
    else:
        param_space = experiment.param_space()
        # Trial names and folders from the grid's values, not Tune's flattened config.
        names = TrialNames.for_param_space(param_space, experiment.variants)
        tuner = tune.Tuner(
            ATGRPO, param_space=param_space,
            tune_config=tune.TuneConfig(num_samples=experiment.num_samples,
                                        max_concurrent_trials=experiment.max_concurrent_trials,
                                        trial_name_creator=names, trial_dirname_creator=names),
            run_config=tune.RunConfig(
                name=experiment.name, storage_path=str(output), stop=experiment.stop,
                # Tune's own tables off (Ray 2.60 ignores a ProgressReporter, and its table
                # shows no success rate); ProgressLine logs one line per iteration instead.
                callbacks=[progress, BestCheckpoint(), CheckpointLedger()],
                # The trial's working folder (the held-out transcripts) into the trial folder.
                sync_config=tune.SyncConfig(sync_artifacts=True),
                verbose=2 if args.verbose else 0,
                checkpoint_config=_checkpoint_config(experiment)))
    results = tuner.fit()
    for trial_dir in sorted(p.parent for p in experiment_dir.glob(f"*/{RESULT_FILE}")):
        try:
            tidy_trial(trial_dir)  # a resumed trial: each iteration once, one CSV column set
        except OSError as exc:  # a full disk: the old files stay as they were
            logger.warning("could not rewrite the result files of %s (%s); they are left as "
                           "Tune wrote them", trial_dir.name, exc)
    try:
        plot_path = plot_experiment(experiment_dir, experiment_dir / "learning_curve.png")
        logger.info("learning curve: %s", plot_path)
    except (OSError, FileNotFoundError) as exc:  # a full disk, or no trial wrote a row
        logger.error("no learning curve: %s", exc)
    errors = [r.error for r in results if r.error]
    for error in errors:
        logger.error("trial failed: %s", _first_line(error))
    _summarise(results, experiment_dir)
    ray.shutdown()
    return 1 if errors else 0


def _checkpoint_config(experiment):
    """Tune keeps each trial's two newest checkpoints (what ``--resume`` needs); the best by
    held-out success is copied apart by :class:`~pettingllms_rllib.best_checkpoint.BestCheckpoint`."""
    from ray import tune

    return tune.CheckpointConfig(checkpoint_frequency=experiment.checkpoint_frequency,
                                 checkpoint_at_end=True, num_to_keep=2)


def _first_line(error: BaseException) -> str:
    """A trial's error in one line: its last exception line (the full traceback is in the
    trial's error.txt)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__


def _summarise(results, experiment_dir: Path) -> None:
    """Where everything is, and the headline numbers of each trial's last iteration."""
    from pettingllms_rllib.best_checkpoint import read_best
    from pettingllms_rllib.metric_keys import HELD_OUT_SUCCESS
    from pettingllms_rllib.progress import progress_line

    logger.info("results: %s (tensorboard --logdir %s)", experiment_dir, experiment_dir)
    for result in results:
        checkpoint = result.checkpoint.path if result.checkpoint else "none"
        logger.info("%s: last checkpoint %s", Path(result.path).name, checkpoint)
        best = read_best(result.path)
        if best is not None:
            logger.info("%s: best held-out checkpoint %s (success %.3f at iteration %d; "
                        "picked on those instances, so optimistic there: "
                        "docs/evaluation.md)", Path(result.path).name, best["path"],
                        best[HELD_OUT_SUCCESS], best["training_iteration"])
        if result.metrics:
            logger.info("%s: final %s", Path(result.path).name, progress_line(result.metrics))


def _plot(args: argparse.Namespace) -> int:
    from pettingllms_rllib.plotting import plot_runs

    run_dirs = [Path(d) for d in args.run_dirs]
    if args.out:
        out = Path(args.out)
    elif len(run_dirs) == 1:
        out = run_dirs[0] / "learning_curve.png"
    else:
        out = Path("learning_curves.png")
    references = {}
    for item in args.reference or ():
        label, _, value = item.rpartition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = None
        if not label or rate is None:
            logger.error("--reference wants LABEL=NUMBER, e.g. 'best constant=0.05'; got %r",
                         item)
            return 2
        references[label] = rate
    try:
        path = plot_runs(run_dirs, out, group_by=args.group_by, references=references)
    except FileNotFoundError as exc:
        logger.error("%s", exc)
        return 2
    logger.info("wrote %s (and %s)", path, path.with_suffix(".json"))
    return 0


def _report(args: argparse.Namespace) -> int:
    from pettingllms_rllib.reporting import build_report

    try:
        text, files = build_report(args.eval_paths)
    except (FileNotFoundError, ValueError) as exc:
        logger.error("%s", exc)
        return 2
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        logger.info("wrote %s from %d eval file(s)", out, len(files))
    else:
        sys.stdout.write(text)
    return 0


def _task_of(env_id, env_config, source_env, source_env_config):
    """The env and env kwargs ``eval`` plays: ``--env`` and ``--env-config`` over the source's.

    The source (a checkpoint or a training config) lends its env kwargs only to its own env:
    with ``--env`` naming another task they would be another env's kwargs, so that env gets
    ``--env-config`` or its defaults.
    """
    env_id = env_id or source_env
    if env_config is None and env_id == source_env:
        env_config = source_env_config
    elif env_config is None:
        logger.info("--env %s is not the source's env %s: its env config is not used",
                    env_id, source_env)
        env_config = {}
    return env_id, env_config


def _eval(args: argparse.Namespace) -> int:
    import json

    from pettingllms_rllib import checkpoints
    from pettingllms_rllib.engines import engine_kind
    from pettingllms_rllib.evaluation import evaluate as ev
    from pettingllms_rllib.evaluation.metrics import markdown_table
    from pettingllms_rllib.envs.registry import make_text_env
    from pettingllms_rllib.models import loading

    from pettingllms_rllib.experiment import ExperimentError, import_env_modules

    _import_from_here()
    try:
        import_env_modules(args.imports or [], source="--import")
    except ExperimentError as exc:
        logger.error("%s", exc)
        return 2
    try:
        if args.engine is not None:  # its package missing (vLLM): the install hint, first
            engine_kind(args.engine).require()
        env_config = json.loads(args.env_config) if args.env_config else None
        if args.checkpoint and args.config:
            raise ValueError("--config is for --base-model: a checkpoint carries its own "
                             "training config")
        if args.config_arm and not args.config:
            raise ValueError("--config-arm picks an arm of --config; give --config too")
        if args.checkpoint:
            args.checkpoint = str(checkpoints.resolve(args.checkpoint))
            logger.info("evaluating %s", args.checkpoint)
            stored = checkpoints.read_config(args.checkpoint)
            env_id, env_config = _task_of(args.env, env_config, stored["env"],
                                          stored["env_config"])
            policies = ev.checkpoint_policies(args.checkpoint)
            budget = checkpoints.training_budget(args.checkpoint)
            max_new_tokens = args.max_new_tokens or int(stored["max_new_tokens"])
        else:
            if not (args.base_model and (args.env or args.config)):
                raise ValueError("give --checkpoint, or --base-model with --env or --config")
            env_id, env_config, max_new_tokens = args.env, env_config, args.max_new_tokens
            if args.config:  # the task and answer length of a training config's runs
                from pettingllms_rllib.experiment import load_experiment

                trained = load_experiment(args.config, arm=args.config_arm).config
                env_id, env_config = _task_of(args.env, env_config, trained.env,
                                              trained.env_config)
                max_new_tokens = max_new_tokens or int(trained.max_new_tokens)
            env_config = env_config or {}
            agents = make_text_env(env_id, env_config).possible_agents
            loading.check_model_available(args.base_model)  # one line, not hub retries
            policies = ev.base_policies(args.base_model, agents)
            budget, max_new_tokens = None, max_new_tokens or 64
        for replacement in args.module or []:
            module_id, _, donor = replacement.partition("=")
            if not donor:
                raise ValueError(f"--module {replacement!r}: expected MODULE=CHECKPOINT")
            policies = ev.with_module_from(policies, module_id, ev.checkpoint_policies(donor))
        if args.env_override:
            override = json.loads(args.env_override)
            if not isinstance(override, dict):
                raise ValueError(f"--env-override wants a JSON object, got {args.env_override!r}")
            env_config = {**(env_config or {}), **override}
        if args.swap_roles:
            policies = policies.swapped()
        if args.role_alone:
            policies = policies.alone(args.role_alone)
        settings = ev.EvalSettings(
            env=env_id, env_config=env_config, num_tasks=args.num_tasks,
            samples_per_task=args.samples_per_task, decoding=args.decoding,
            temperature=args.temperature, search=args.search, num_branches=args.num_branches,
            max_new_tokens=max_new_tokens, seed=args.seed, first_seed=args.first_seed,
            distinct_instances=not args.allow_repeated_instances)
        label = args.label or Path(args.out).name
        record = ev.run_evaluation(policies, settings, args.out, label=label, arm=args.arm,
                                   seed=args.train_seed, training_budget=budget,
                                   engine=args.engine)
    except (ValueError, KeyError, FileNotFoundError, ImportError) as exc:
        logger.error("%s", exc)
        return 2
    sys.stdout.write(markdown_table([record]) + "\n")
    constant = record["best_constant_answer"]
    sys.stdout.write(f"best constant answer on the same instances: success "
                     f"{constant['success_rate']:.3f} ({constant['num_successes']}/"
                     f"{constant['num_tasks']}) with {constant['answers']}\n")
    logger.info("wrote %s", Path(args.out) / "eval.json")
    return 0


def _stop_on_sigterm(signum, frame):
    """SIGTERM (a service manager, a test) stops the server as Ctrl-C does."""
    raise KeyboardInterrupt


def _serve(args: argparse.Namespace) -> int:
    import signal
    import time

    from pettingllms_rllib.serving.app import build_app

    _import_from_here()
    try:
        app = build_app(args.checkpoint, num_replicas=args.num_replicas,
                        max_batch_size=args.max_batch_size,
                        num_cpus_per_replica=args.num_cpus_per_replica,
                        num_gpus_per_replica=args.num_gpus_per_replica,
                        imports=args.imports or [], engine=args.engine)
    except (ValueError, FileNotFoundError, ImportError) as exc:  # refused before Ray starts
        logger.error("%s", exc)
        return 2
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import serve

    runtime_env = _workers_runtime_env()  # replicas import the --import modules too
    if args.address:
        ray.init(address=args.address, runtime_env=runtime_env)
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, runtime_env=runtime_env,
                 logging_level=logging.WARNING)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(app, name="pettingllms_team", route_prefix="/")
        logger.info("serving on http://%s:%d: POST /v1/episodes, POST /v1/chat/completions, "
                    "GET /v1/models (Ctrl-C stops)", args.host, args.port)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        logger.info("stopping the server")
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


def _envs(args: argparse.Namespace) -> int:
    from pettingllms_rllib.envs.registry import make_text_env, registered_env_ids

    for env_id in registered_env_ids():
        env = make_text_env(env_id)
        stages = " -> ".join("||".join(stage) for stage in env.workflow)
        sys.stdout.write(f"{env_id}: {stages}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pettingllms_rllib.engines import CHECKPOINT_ENGINES
    from pettingllms_rllib.envs.base import TRAIN_SEED_LIMIT

    parser = argparse.ArgumentParser(prog="pettingllms-rllib", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run an experiment YAML through Ray Tune")
    train.add_argument("config", help="experiment YAML, e.g. tune_configs/plan_path_cpu.yaml")
    train.add_argument("--arm", help="one of the file's arms (its 'arms:' key), e.g. "
                                     "atgrpo_shared; default: the file as it is")
    train.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a key, e.g. training.lr=3e-5 or mapping=per_role")
    train.add_argument("--output", default="runs", help="folder for all results (default ./runs)")
    train.add_argument("--address", help="join a running Ray cluster (e.g. ray://head:10001)")
    train.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray")
    train.add_argument("--resume", action="store_true",
                       help="continue an interrupted experiment from its last checkpoints")
    train.add_argument("--verbose", action="store_true",
                       help="also show Ray Tune's own status tables and trial configs")
    train.set_defaults(func=_train)
    plot = sub.add_parser("plot", help="draw learning curves (mean and min-max over seeds)")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                      help="Tune experiment folder(s), e.g. runs/plan_path_cpu")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/learning_curve.png for one "
                                    "folder, ./learning_curves.png for several)")
    plot.add_argument("--group-by", choices=("arm", "name", "trial", "run_dir"), default="arm",
                      help="arm: same folder and config apart from the seed (default); name: "
                           "same-named folders count as one (one seed per folder)")
    plot.add_argument("--reference", action="append", metavar="LABEL=RATE",
                      help="a held-out success rate drawn as a horizontal line on the held-out "
                           "panel, e.g. 'best constant answer=0.05' (repeatable)")
    plot.set_defaults(func=_plot)
    report = sub.add_parser("report", help="Markdown comparison table of eval.json records")
    report.add_argument("eval_paths", nargs="+", metavar="EVAL_PATH",
                        help="eval.json files or folders searched for them")
    report.add_argument("--out", help="Markdown file (default: print to stdout)")
    report.set_defaults(func=_report)
    evaluation = sub.add_parser("eval", help="evaluate a checkpoint or the base model on the "
                                             "task's fixed evaluation seeds")
    evaluation.add_argument("--checkpoint", help="an AT-GRPO checkpoint_* folder")
    _add_import_argument(evaluation)
    evaluation.add_argument("--base-model", help="evaluate this untrained model instead "
                                                 "(prompt-only baseline), e.g. smollm2-135m-instruct")
    evaluation.add_argument("--env", help="text env id (default: the checkpoint's or "
                                          "--config's)")
    evaluation.add_argument("--env-config", help="env kwargs as JSON (default: the checkpoint's "
                                                 "or --config's)")
    evaluation.add_argument("--config", metavar="EXPERIMENT_YAML",
                            help="with --base-model: the task (env, env_config) and "
                                 "max_new_tokens of this training config, so the untrained "
                                 "model is measured on what the trained runs saw")
    evaluation.add_argument("--config-arm", metavar="ARM",
                            help="with --config: that file's arm (its 'arms:' key)")
    evaluation.add_argument("--module", action="append", metavar="MODULE=CHECKPOINT",
                            help="take this module from another checkpoint (repeatable)")
    evaluation.add_argument("--swap-roles", action="store_true",
                            help="each role acts with the other role's trained module")
    evaluation.add_argument("--role-alone", metavar="ROLE",
                            help="only ROLE acts, with its trained module, on a task whose only "
                                 "agent is ROLE (with --env-override, e.g. "
                                 "'{\"single_agent\": true}')")
    evaluation.add_argument("--env-override", metavar="JSON",
                            help="env kwargs merged over the checkpoint's (or --env-config's), "
                                 "e.g. '{\"single_agent\": true}'")
    evaluation.add_argument("--num-tasks", type=int, default=64,
                            help="evaluation instances (seeds from 1e9 on, a seed repeating an "
                                 "earlier seed's instance skipped; default 64)")
    evaluation.add_argument("--allow-repeated-instances", action="store_true",
                            help="play seeds first-seed .. first-seed + num-tasks - 1 even where "
                                 "two of them are one instance (evaluations before 2026-12-05)")
    evaluation.add_argument("--samples-per-task", type=int, default=1,
                            help="episodes per instance, for mean@k / pass@k (needs sample)")
    evaluation.add_argument("--decoding", choices=["greedy", "sample"], default="greedy")
    evaluation.add_argument("--temperature", type=float, default=1.0)
    evaluation.add_argument("--search", action="store_true",
                            help="test-time best-of-K per turn (needs --decoding sample)")
    evaluation.add_argument("--num-branches", type=int, default=4, help="K with --search")
    evaluation.add_argument("--max-new-tokens", type=int, default=None,
                            help="default: the checkpoint's, else 64")
    evaluation.add_argument("--seed", type=int, default=0, help="sampler seed")
    evaluation.add_argument("--first-seed", type=int, default=TRAIN_SEED_LIMIT,
                            help="first evaluation instance (task seed); at least the default "
                                 f"{TRAIN_SEED_LIMIT}, so no training instance is evaluated")
    evaluation.add_argument("--engine", choices=CHECKPOINT_ENGINES, default=None,
                            help="what generates (default: the checkpoint's engine; hf for "
                                 "--base-model); vllm loads the same weights, as serve does")
    evaluation.add_argument("--label", help="row label (default: the --out folder name)")
    evaluation.add_argument("--arm", help="what is compared; seeds of one arm are aggregated")
    evaluation.add_argument("--train-seed", type=int, default=None,
                            help="the training seed of this checkpoint, for the report")
    evaluation.add_argument("--out", required=True, help="folder for eval.json and episodes.csv")
    evaluation.set_defaults(func=_eval)
    serving = sub.add_parser("serve", help="serve a trained team over HTTP with Ray Serve "
                                           "(docs/serving.md)")
    serving.add_argument("checkpoint", metavar="CHECKPOINT_OR_RUN",
                         help="a checkpoint_* folder, a trial folder or a one-trial experiment "
                              "folder (its newest checkpoint)")
    serving.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    serving.add_argument("--port", type=int, default=8000)
    serving.add_argument("--engine", choices=CHECKPOINT_ENGINES, default="hf",
                         help="hf: the checkpoint's torch modules (as eval); vllm: vLLM loads "
                              "the same weights (one adapter per LoRA module)")
    serving.add_argument("--num-replicas", type=int, default=1,
                         help="replicas, each holding every module")
    serving.add_argument("--max-batch-size", type=int, default=16,
                         help="most concurrent requests of one kind served by one batch")
    serving.add_argument("--num-cpus-per-replica", type=float, default=1.0)
    serving.add_argument("--num-gpus-per-replica", type=float, default=0.0)
    serving.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray")
    serving.add_argument("--address", help="join a running Ray cluster")
    _add_import_argument(serving)
    serving.set_defaults(func=_serve)
    envs = sub.add_parser("envs", help="list registered text envs and their workflows")
    envs.set_defaults(func=_envs)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pettingllms_rllib.quiet import silence_known_noise

    # Third parties at WARNING, this library at INFO; known noise dropped (quiet.py).
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for name in ("pettingllms_rllib", "pettingllms_envs"):
        logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("ray").setLevel(logging.WARNING)  # Ray sets up its own INFO handler
    silence_known_noise()
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
