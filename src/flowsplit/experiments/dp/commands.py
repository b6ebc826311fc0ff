"""Sub-commands of flowsplit.experiments (registered by flowsplit.cli)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowsplit.choices import seeds_option
from flowsplit.config_args import (
    add_config_arguments,
    add_log_to_argument,
    add_renamed,
    cli,
    command_parser,
    csv_tuple,
    int_tuple,
    path_arg,
    path_text,
    with_groups,
)
from flowsplit.config_file import add_config_file_option, build_config
from flowsplit.errors import ConfigError
from flowsplit.experiments.dp.config import QUICK, CompareConfig
from flowsplit.train.commands import ROUNDS_WHY


def _margin_points(text: str) -> float:
    """``--margin`` in percentage points -> CompareConfig.margin, a fraction."""
    try:
        points = float(text)
    except ValueError:
        raise ConfigError(f"--margin {text!r} is not a number") from None
    if not 0 < points < 100:
        raise ConfigError(f"--margin is in percentage points, in (0, 100); got {text}")
    return points / 100


COMPARE_OPTIONS = {
    "dataset": cli(positional=True, metavar="DATASET", parse=path_text),
    "out": cli(flag="--out", aliases=("-o",), metavar="OUT", parse=path_text),
    "models": cli(parse=csv_tuple, help="Models, comma-separated."),
    "workers": cli(parse=int_tuple, metavar="N,N,..."),
    "seeds": seeds_option(),
    "comm_hooks": cli(parse=csv_tuple, metavar="HOOK,HOOK,..."),
    "same_cores_seeds": cli(metavar="K"),
    "epochs": cli(
        help=f"Maximum epochs of the neural models (default: train's; --quick: {QUICK['epochs']})."
    ),
    "rounds": cli(
        flag="--boost-rounds",
        help=f"Maximum XGBoost boosting rounds (default: train's; --quick: {QUICK['rounds']}).",
    ),
    "quick": cli(
        help="Short runs (" + ", ".join(f"{k} {v}" for k, v in QUICK.items()) + ") and a "
        "short micro-benchmark, for demos and smoke tests; options given win."
    ),
    "patience": cli(help="Early-stopping patience of every run (default: train's)."),
    "margin": cli(
        parse=_margin_points,
        show=lambda v: f"{100 * v:g}",
        help="TOST equivalence margin in percentage points.",
    ),
    "alpha": cli(help="Significance level of the tests."),
    "cell_timeout_s": cli(flag="--cell-timeout", metavar="S"),
    "train_args": cli(
        flag="--train-arg",
        append=True,
        parse=str,
        metavar="ARG",
        help="Extra argument for every `flowsplit train` (repeatable), "
        "e.g. --train-arg=--batch-size=128.",
    ),
    "quiet_wait_s": cli(flag="--quiet-wait", metavar="S"),
    "max_busy": cli(metavar="F"),
    "max_foreign": cli(metavar="F"),
    "cross_source": cli(metavar="OTHER_DATASET"),
}
"""``flowsplit compare``'s view of :class:`~flowsplit.experiments.dp.compare.CompareConfig`."""

COMPARE_GROUPS = {
    "study": ("models", "workers", "seeds", "comm_hooks", "same_cores_seeds", "quick")
    + ("cross_source",),
    "training (every cell)": ("epochs", "rounds", "threads", "patience", "train_args"),
    "statistics": ("margin", "alpha"),
    "running the cells": ("cell_timeout_s", "fresh_process", "quiet_wait_s", "max_busy")
    + ("max_foreign", "rerun_contended"),
}
"""The ``--help`` sections of ``compare``'s options."""
ON_COMMAND_LINE = ("dataset", "out")
"""Fields given on the command line only (not in a ``--config`` file)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compare`` and ``report`` to the CLI."""
    _add_compare(sub)
    r = sub.add_parser(
        "report",
        help="re-render the report of a `flowsplit compare` study",
        description="Recompute statistics from the stored runs of OUT and rewrite its report.",
    )
    r.add_argument(
        "out", type=path_arg, metavar="OUT", help="study directory of `flowsplit compare`"
    )
    r.set_defaults(func=_report)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    """train models centralised and data-parallel over seeds, and report

    Run the matrix model x workers x seed on one prepared dataset (each run is a `flowsplit
    train` in its own directory; finished runs are skipped on a rerun), measure all-reduce
    on this machine, and write OUT/report.html, report.md, results.csv and results.json with
    statistics, speedups and a scaling model. The exit status is 1 when a run failed (the
    report is written all the same and lists it; the same command retries it), 2 when the
    input is refused before any run.
    """
    p = command_parser(sub, "compare", _add_compare)
    # One option per CompareConfig field (its docstring is the help); DATASET and -o are
    # required, the others not given stay None so that a --config file's values stand.
    options = with_groups(COMPARE_OPTIONS, COMPARE_GROUPS)
    add_config_arguments(p, CompareConfig, only=ON_COMMAND_LINE, overrides=options)
    add_config_file_option(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_log_to_argument(p)
    add_config_arguments(p, CompareConfig, exclude=ON_COMMAND_LINE, overrides=options, unset=True)
    add_renamed(p, "--rounds", "--boost-rounds", ROUNDS_WHY)
    p.set_defaults(func=_compare)


# The runner and the report are imported when a command runs, not at registration:
# they pull in torch, which takes seconds to import, and `flowsplit --help` should not.
def _compare(args: argparse.Namespace) -> int:
    from flowsplit.experiments.dp.compare import run_compare

    cfg = compare_config(args)
    path = run_compare(cfg, progress=not args.quiet)  # writes OUT/config.toml
    if args.log_to is not None:  # one subdirectory per run of the study
        from flowsplit.tracking import finished_runs, write_study

        top = write_study(args.log_to, path.parent, finished_runs(path.parent))
        print(f"tensorboard: {top}")
    _print_summary(path)
    return _failed_cells(path.parent)


def _failed_cells(out: Path) -> int:
    """1, with the count and the first failure said on stderr, when a cell of the study
    in ``out`` failed (the report lists every one; the next run retries them), else 0.
    A script that runs ``compare`` must not take a study with holes for a whole one."""
    from flowsplit.experiments.dp.result import read_status

    status = read_status(out)
    if not status.failures:
        return 0
    name, why = next(iter(status.failures.items()))
    first = (why.strip().splitlines() or ["?"])[0]
    print(
        f"flowsplit: error: {len(status.failures)} of {status.n_cells} runs failed "
        f"({name}: {first}); the report lists them and the same command retries them",
        file=sys.stderr,
    )
    return 1


def compare_config(args: argparse.Namespace) -> CompareConfig:
    """``compare``'s config: the defaults, then ``--config FILE``, then the options given."""
    return build_config(CompareConfig, args, on_command_line=ON_COMMAND_LINE)


def _report(args: argparse.Namespace) -> int:
    from flowsplit.experiments.dp.report import check_runs_present, render_report

    check_runs_present(args.out)  # an empty report of a study whose runs are gone: no
    _print_summary(render_report(args.out))
    return 0


def _print_summary(path: Path) -> None:
    from flowsplit.experiments.dp.result import read_compare_result

    for line in read_compare_result(path.parent).summary:
        print(f"- {line}")
    print(f"report: {path}")
