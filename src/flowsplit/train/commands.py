"""Sub-commands ``train``, ``evaluate`` and ``predict`` (registered by flowsplit.cli)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flowsplit.choices import as_options
from flowsplit.config_args import (
    FORCE_HELP,
    HelpFormatter,
    add_config_arguments,
    add_dataset_argument,
    add_log_to_argument,
    add_out_option,
    add_renamed,
    check_cores,
    cli_fields,
    command_parser,
    config_values,
    path_text,
    with_groups,
)
from flowsplit.errors import ConfigError, InputError
from flowsplit.outputs import atomic_write_text, output_file
from flowsplit.train.config import RESUMABLE_OPTIONS, TrainConfig
from flowsplit.train.evaluation import SPLIT_CHOICES, UNKNOWN

if TYPE_CHECKING:
    from flowsplit.train.distributed import DistEnv

ROUNDS_WHY = "--rounds are federated rounds in the sfl commands"
"""Why ``train --rounds`` (XGBoost's boosting rounds) was renamed."""
OUT_WHY = "-o/--out is what every command writes"
"""Why ``evaluate/predict --output`` was renamed."""

TRAIN_DESCRIPTION = """\
Train one model and write RUN/: config.json, train.log, checkpoint.pt (each epoch),
weights.safetensors (or model.ubj for XGBoost) and metrics.json (one schema for every
engine: times, communication, memory, accuracy, macro-F1, per-class F1, predictions).

--workers 1 trains in this process; --workers N starts N local processes with
PyTorch DDP (gloo on CPU, NCCL on CUDA; rendezvous on 127.0.0.1), or, for xgboost,
a Dask LocalCluster of N workers. The global batch and learning rate stay those of
the centralised run (each worker takes batch/N), so N workers follow the same
optimisation; --scale-lr keeps the batch per worker and multiplies the lr by N.
Uneven shards: every row trains each epoch; on the short last step the ranks' shares
differ by a row and each rank's loss is weighed by its share, so that step too is the
centralised one (only a last step with fewer rows than workers sits out).

Across machines, run the same training under torchrun, one command per node:

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 \\
        --master-addr 10.0.0.1 --master-port 29500 \\
        -m flowsplit.train DATASET --model cnn -o RUN
    torchrun --nnodes 2 --node-rank 1 ... (same arguments)

Ranks and world size then come from torchrun and --workers is ignored; each node's
workers share its cores. Set GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME) to the interface
the nodes reach each other on. Rank 0 writes RUN; with torchrun --max-restarts K a
failed group restarts and resumes from the last checkpoint.
"""


TRAIN_GROUPS = {
    "model": ("view", "model_options", "init_from"),
    "training": ("epochs", "batch_size", "lr", "lr_schedule", "scale_lr", "class_weight")
    + ("dropout_masks", "weight_decay", "label_smoothing", "augment", "patience", "seed")
    + ("steps_per_epoch",)
    + ("eval_batch_size",),
    "data-parallel (DDP)": ("workers", "threads", "device", "backend", "master_addr")
    + ("comm_hook", "bucket_mb", "timeout_s"),
    "XGBoost": ("rounds", "dask_scheduler"),
}
"""The ``--help`` sections of ``train``'s options (DATASET, --model, -o and --quiet lead)."""


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``flowsplit train`` and of ``python -m flowsplit.train`` (torchrun).

    One option per :class:`~flowsplit.train.config.TrainConfig` field (its docstring is
    the help); an option not given stays None so that --resume can tell what was given.
    """
    add_config_arguments(p, TrainConfig, unset=True, overrides=with_groups({}, TRAIN_GROUPS))
    p.add_argument(
        "--resume",
        metavar="RUN",
        help="continue the run in RUN from its checkpoint",
        type=path_text,
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start again in a -o RUN that holds a run (removes that run's files only)",
    )
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    add_renamed(p, "--rounds", "--boost-rounds", ROUNDS_WHY)


def config_from_args(
    args: argparse.Namespace, env: DistEnv | None = None
) -> tuple[TrainConfig, bool]:
    """``(TrainConfig, resume)`` from parsed arguments (a resumed run reads RUN/config.json).

    ``env``: the launcher's :class:`~flowsplit.train.distributed.DistEnv` (``python -m
    flowsplit.train`` under torchrun), whose job size is the run's ``workers`` in place
    of ``--workers`` (the launcher, not the option, decides it)."""
    given = config_values(args, [f.name for f in cli_fields(TrainConfig)], given_only=True)
    if env is not None:
        given["workers"] = env.world_size  # a resumable option: a resumed run takes it too
    if "model_options" in given:  # --model-option KEY=VALUE pairs
        given["model_options"] = as_options(given["model_options"])
    if args.resume:
        cfg = TrainConfig.load(args.resume)
        data = cfg.to_dict()
        for key, value in given.items():
            if key == "out" or data.get(key) == value:
                continue
            if key not in RESUMABLE_OPTIONS:
                raise ConfigError(
                    f"cannot change {key} when resuming (it would be another experiment); "
                    "start a new run with another -o"
                )
            data[key] = value
        data["out"] = str(args.resume)
        return TrainConfig.from_dict(data), True
    for name, flag in (("dataset", "DATASET"), ("model", "--model"), ("out", "-o RUN")):
        if name not in given:
            raise ConfigError(f"give {flag} (see flowsplit train --help)")
    # Stored resolved, so that --resume RUN finds the dataset from any directory.
    given["dataset"] = str(Path(given["dataset"]).resolve())
    if given.get("init_from"):
        given["init_from"] = str(Path(given["init_from"]).resolve())
    return TrainConfig.from_dict(given), False


def check_before_launch(
    cfg, resume: bool, overwrite: bool = False, force: bool = False, local_workers: int = 0
) -> None:
    """Every check that can fail on user input, done once before any worker starts.

    ``local_workers``: the job's processes on this machine, where not all ``cfg.workers``
    are (under torchrun, ``LOCAL_WORLD_SIZE``); the cores check counts only those."""
    from flowsplit.data.store import load_dataset
    from flowsplit.models.registry import get_spec
    from flowsplit.train.runs import check_run_dir

    spec = get_spec(cfg.model)
    if resume and overwrite:
        raise ConfigError("give --resume RUN or --overwrite, not both")
    check_run_dir(cfg.out, resume=resume, overwrite=overwrite)
    if resume and spec.kind == "xgboost":
        raise ConfigError("XGBoost runs cannot be resumed; train again (boosting is quick)")
    n_train = check_trainable(cfg, load_dataset(cfg.dataset), force, local_workers)
    # Warned only once every check passed: a refused run prints its one error line only.
    global_batch = cfg.batch_size * (cfg.workers if cfg.scale_lr else 1)
    if spec.kind == "torch" and global_batch > n_train:
        print(
            f"flowsplit: warning: --batch-size {cfg.batch_size} (global batch {global_batch}) "
            f"is more than the {n_train} training rows: each epoch is a single step over all "
            "of them",
            file=sys.stderr,
        )


def check_trainable(cfg, ds, force: bool = False, local_workers: int = 0) -> int:
    """The training rows of ``ds``, after the checks of ``cfg`` against it that need no
    run directory: its splits, the workers and cores, the model built on its view
    (``compare`` makes them for every cell before running one)."""
    from flowsplit.data.augment import check_augment_view
    from flowsplit.models.registry import get_spec
    from flowsplit.train.runs import resolve_view

    spec = get_spec(cfg.model)
    view = resolve_view(cfg, ds)
    check_augment_view(cfg.augment, view)
    n_train = _check_splits(ds)
    _check_workers(cfg, n_train, force, local_workers)
    if cfg.init_from and spec.kind != "torch":
        raise ConfigError(f"--init-from is for the transformer, not {cfg.model}")
    if spec.kind == "torch":
        _check_torch_model(cfg, ds, view)
    elif cfg.lr is not None:  # said as --lr, not as the estimator's learning_rate
        from flowsplit.models.xgb import param_problem

        allowed = param_problem("learning_rate", cfg.lr)
        if allowed is not None:
            raise ConfigError(f"--lr is XGBoost's learning rate (eta), {allowed}; got {cfg.lr:g}")
    return n_train


def _check_splits(ds) -> int:
    """The training rows of ``ds``, after checking it can be trained on: flows of two
    classes or more to train on, and a validation split to select the weights on."""
    n_train = len(ds.split_indices("train"))
    if n_train == 0:
        raise InputError(ds.root, "the train split is empty")
    present = np.unique(ds.labels[ds.split_indices("train")])
    if len(present) < 2:
        raise InputError(
            ds.root,
            f"the train split has flows of one class only ({ds.classes[present[0]]}); "
            "a classifier needs two or more",
        )
    if len(ds.split_indices("val")) == 0:
        raise InputError(
            ds.root,
            "the val split is empty; training selects its weights on it (prepare with --val > 0)",
        )
    if len(ds.split_indices("test")) == 0:
        raise InputError(
            ds.root,
            "the test split is empty; training scores its weights on it (prepare with --test > 0)",
        )
    return n_train


def _check_workers(cfg, n_train: int, force: bool, local_workers: int) -> None:
    """No more workers than training rows, a rendezvous address of this machine, and
    no more threads on this machine than its cores (unless ``force``)."""
    from flowsplit.train.distributed import available_cores

    if cfg.workers > n_train:
        raise ConfigError(
            f"--workers {cfg.workers} is more than the {n_train} training samples; "
            f"use at most {n_train}"
        )
    if cfg.workers > 1:
        check_bind_address("--master-addr", cfg.master_addr)
    cores = available_cores()
    here = local_workers or cfg.workers
    threads = cfg.threads or max(1, cores // here)
    workers = (
        f"--workers {cfg.workers}" if here == cfg.workers else f"{here} of {cfg.workers} workers"
    )
    check_cores(f"{workers} x {threads} thread(s)", here * threads, cores, force=force)


def _check_torch_model(cfg, ds, view: str) -> None:
    """The layout resolves (batch divisibility, device, backend), the model builds with
    its options, and ``--init-from`` loads into it."""
    from flowsplit.models.registry import build_model, model_options
    from flowsplit.train.distributed import DistEnv, ParallelLayout

    env = DistEnv(0, cfg.workers, 0, cfg.workers, cfg.master_addr, 0, 0, False)
    ParallelLayout.from_config(cfg, env)  # batch divisibility, device, backend
    model = build_model(
        cfg.model,
        view=view,
        input_shape=ds.view_shape(view),
        n_classes=ds.n_classes,
        **cfg.model_options,
    )
    if cfg.init_from:  # a wrong file is one line here, before any worker starts
        from flowsplit.models.transformer import load_encoder

        load_encoder(model, cfg.init_from, {**model_options(cfg.model), **cfg.model_options})


def check_bind_address(option: str, host: str) -> None:
    """The workers' rendezvous is served on ``host``: it must resolve to an address of
    this machine, else one line (was a ``gaierror`` as an internal error)."""
    import socket

    try:
        family, kind, _, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"{option} {host}: cannot be resolved ({exc})") from None
    try:
        with socket.socket(family, kind) as s:
            s.bind(addr[:2] if family == socket.AF_INET else addr)
    except OSError as exc:
        raise ConfigError(
            f"{option} {host}: not an address of this machine to listen on ({exc.strerror})"
        ) from None


def check_restart(cfg) -> None:
    """Under a torchrun restart: RUN must hold this job's unfinished run, else refuse.

    Attempt 0 may have failed on a check (say, RUN held another run); the restart must
    not then resume that other run under this job's options.
    """
    from flowsplit.train.runs import METRICS_NAME

    out = Path(cfg.out)
    if (out / METRICS_NAME).exists():
        raise ConfigError(f"{out} holds a finished run; choose another -o")
    stored, current = TrainConfig.load(out).to_dict(), cfg.to_dict()
    ignore = {"out", "workers", "quiet", *RESUMABLE_OPTIONS}
    differ = sorted(k for k in current if k not in ignore and stored.get(k) != current[k])
    if differ:
        raise ConfigError(
            f"{out} holds another run (it differs in {', '.join(differ)}); choose another -o"
        )


def cmd_train(args: argparse.Namespace) -> int:
    from flowsplit.train.loop import CLI_SUMMARY_ENV

    cfg, resume = config_from_args(args)
    before = os.environ.get(CLI_SUMMARY_ENV)
    os.environ[CLI_SUMMARY_ENV] = "1"  # the line below is the run's one summary
    try:
        r = train_run(cfg, resume=resume, overwrite=args.overwrite, force=args.force)
    finally:
        if before is None:
            os.environ.pop(CLI_SUMMARY_ENV, None)
        else:
            os.environ[CLI_SUMMARY_ENV] = before
    per_epoch = np.median(r.epoch_times_s) if r.epoch_times_s else float("nan")
    tracked = ""
    if getattr(args, "log_to", None) is not None:  # cellpool's parser has no --log-to
        from flowsplit.tracking import write_run

        tracked = f" (tensorboard: {write_run(args.log_to, cfg.out)})"
    print(
        f"{r.model} on {r.view}, {r.workers} worker(s) x {r.threads_per_worker} thread(s): "
        f"accuracy {r.accuracy:.4f}, macro-F1 {r.macro_f1:.4f}, "
        f"{per_epoch:.2f} s/{'round' if r.model == 'xgboost' else 'epoch'} -> {cfg.out}{tracked}"
    )
    return 0


def train_run(
    cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, force: bool = False
):
    """Check, train and return the :class:`~flowsplit.result.RunResult` of ``cfg``
    (what ``flowsplit train`` and the Python API's ``flowsplit.train`` run)."""
    from flowsplit.data.store import OutputLock
    from flowsplit.result import RunResult
    from flowsplit.train.runs import (
        drop_aside_run,
        remove_stale_temps,
        restore_aside_run,
        set_aside_run,
    )

    # One writer per run directory: a second train -o SAME is refused naming this one.
    with OutputLock(cfg.out):
        check_before_launch(cfg, resume, overwrite=overwrite, force=force)
        remove_stale_temps(cfg.out)  # of a run killed while writing
        # --overwrite keeps the previous run aside until the new one has finished.
        aside = set_aside_run(cfg.out) if overwrite and not resume else None
        try:
            _train(cfg, resume)
        except BaseException:
            restore_aside_run(cfg.out, aside)
            raise
        drop_aside_run(aside)
    return RunResult.from_json(Path(cfg.out))


def _train(cfg, resume: bool) -> None:
    """Train in this process, in DDP workers, or on Dask (``cmd_train``'s engine part)."""
    from flowsplit.models.registry import get_spec
    from flowsplit.train.loop import run_logging, train_worker

    if get_spec(cfg.model).kind == "xgboost":
        from flowsplit.train.xgb_engine import train_xgboost

        with run_logging(cfg.out, quiet=cfg.quiet, is_main=True):
            train_xgboost(cfg)
    elif cfg.workers == 1:
        train_worker(cfg, resume)
    else:
        from flowsplit.train.distributed import available_cores
        from flowsplit.train.launch import heartbeat_limit, launch_local

        threads = cfg.threads or max(1, available_cores() // cfg.workers)
        launch_local(
            train_worker,
            (cfg, resume),
            n_workers=cfg.workers,
            threads_per_worker=threads,
            master_addr=cfg.master_addr,
            heartbeat_s=heartbeat_limit(cfg.timeout_s),
        )


def cmd_evaluate(args: argparse.Namespace) -> int:
    from flowsplit.train.ablation import check_ablate_arguments
    from flowsplit.train.evaluation import evaluate_run

    check_ablate_arguments(args)
    check_output(args.out)
    check_output(args.predictions)
    # The same function as the Python API's flowsplit.evaluate (train and sfl runs).
    ev = evaluate_run(args.run, args.dataset, args.split)
    model, doc, ds, mapping, x, y = ev.model, ev.doc, ev.dataset, ev.mapping, ev.x, ev.y
    info, summary = doc["model"], ev.summary
    scores = {k: v for k, v in summary.items() if k not in ("run", "dataset", "split", "n")}
    if args.predictions:
        write_output(args.predictions, ev.predictions.to_csv(index=False))
    from flowsplit.train.ablation import evaluate_ablations, format_table
    from flowsplit.train.crosssource import format_comparison, source_comparison

    source = source_comparison(args.run, doc, ds, scores)
    if source is not None:
        summary["other_source"] = source
    if args.ablate:
        summary["ablations"] = evaluate_ablations(model, x, y, mapping, ds, doc, args)
    if args.json and args.out != "-":
        print(json.dumps(summary, indent=1))
    elif args.out != "-":  # -o -: the JSON alone on standard output
        _print_scores(summary, info["name"], args, absent=mapping.absent)
        if source is not None:
            print(format_comparison(source, scores))
        if args.ablate:
            print(format_table(summary["ablations"]))
    if args.out:
        write_output(args.out, json.dumps(summary, indent=1) + "\n")
    return 0


def _print_scores(summary: dict, model: str, args: argparse.Namespace, absent) -> None:
    """``evaluate``'s table: the scores, per class precision, recall, F1 and support,
    the confusion matrix, and the classes not scored."""
    from flowsplit.train.evaluation import format_report

    print(
        f"{model} on {args.dataset} ({args.split}, {summary['n_scored']} of "
        f"{summary['n']} samples scored): accuracy {summary['accuracy']:.4f}, "
        f"macro-F1 {summary['macro_f1']:.4f}"
    )
    if absent:
        print(f"  macro-F1 over the {len(summary['shared_classes'])} classes the dataset has")
    print(format_report(summary, summary["classes"], absent=absent))
    for name, count in summary["unseen_classes"].items():
        called = ", ".join(f"{c} {k}" for c, k in summary["unseen_predicted_as"][name].items())
        print(
            f"  {name:<24} not scored: {count} flows of a class the model was not "
            f"trained on (predicted as: {called})"
        )


def cmd_predict(args: argparse.Namespace) -> int:
    import pandas as pd

    from flowsplit.train.evaluation import predict_captures

    check_output(args.out)
    table = predict_captures(args.run, args.captures, args.min_confidence)
    if args.out:
        write_output(args.out, table.to_csv(index=False))
        if args.out == "-":
            return 0
        unknown = (
            int((table["predicted"] == UNKNOWN).sum()) if args.min_confidence is not None else 0
        )
        note = f" ({unknown} below --min-confidence: {UNKNOWN})" if unknown else ""
        print(f"{len(table)} flows classified{note} -> {args.out}")
    elif args.format == "csv":
        table.to_csv(sys.stdout, index=False)
    else:
        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(table.to_string(index=False))
    return 0


def check_output(path: str | Path | None) -> None:
    """Refuse an ``-o`` that cannot be written before any work: a directory, device,
    FIFO or socket (:func:`flowsplit.outputs.output_file`); ``-`` and None pass."""
    if path is not None and str(path) != "-":
        output_file(path)


def write_output(path: str | Path, text: str) -> None:
    """Write a file the user asked for, atomically; an OS refusal is one line naming it.

    ``-`` is standard output. Only a regular file or a new path is written
    (:func:`flowsplit.outputs.output_file`).
    """
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise InputError(path, f"cannot write it ({exc.strerror or exc})") from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add this area's sub-commands to the CLI."""
    fmt = HelpFormatter
    _add_train(sub)
    p = sub.add_parser("evaluate", help="evaluate a trained run on a dataset", formatter_class=fmt)
    p.add_argument(
        "run", metavar="RUN", help="run directory of `train` or `sfl run`", type=path_text
    )
    add_dataset_argument(p)
    p.add_argument(
        "--predictions",
        metavar="FILE.csv",
        help="write one row per flow: flow_id, source, 5-tuple, true, predicted, p_CLASS...",
        type=path_text,
    )
    p.add_argument(
        "--split",
        default="test",
        choices=SPLIT_CHOICES,
        help="split to score; all = every flow (for a dataset the model never trained on)",
    )
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    add_out_option(
        p,
        "also write the metrics to FILE (JSON; - for standard output)",
        metavar="FILE",
        required=False,
    )
    add_renamed(p, "--output", "--out", OUT_WHY)
    from flowsplit.train.ablation import add_ablate_arguments

    add_ablate_arguments(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("predict", help="classify the flows of new captures", formatter_class=fmt)
    p.add_argument(
        "run", metavar="RUN", help="run directory written by flowsplit train", type=path_text
    )
    p.add_argument(
        "captures", nargs="+", metavar="CAPTURE", help="pcap/pcapng files", type=path_text
    )
    p.add_argument(
        "--format",
        choices=("table", "csv"),
        default="table",
        help="what to print: a table, or CSV (as -o writes)",
    )
    add_out_option(p, "write CSV to FILE (- for standard output)", metavar="FILE", required=False)
    add_renamed(p, "--output", "--out", OUT_WHY)
    p.add_argument(
        "--min-confidence",
        type=_probability,
        metavar="P",
        help=f"label flows whose top class probability is below P (0..1) {UNKNOWN!r}",
    )
    p.set_defaults(func=cmd_predict)


def _add_train(sub: argparse._SubParsersAction) -> None:
    """train a model centralised or data-parallel"""
    p = command_parser(sub, "train", _add_train, layout=TRAIN_DESCRIPTION)
    add_train_arguments(p)
    add_log_to_argument(p)
    p.set_defaults(func=cmd_train)


def _probability(text: str) -> float:
    """The value of ``--min-confidence``: a number (:func:`predict_captures` checks that
    it is a probability)."""
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--min-confidence {text!r} is not a number") from None
