"""``flowsplit sfl compare`` (added to the ``sfl`` group by :mod:`flowsplit.cli`).

Its options are those of its config, :class:`SFLCompareConfig`: the study's, as ``sfl
plan`` has them (:func:`flowsplit.planner.study_config.add_study_arguments`), and its own.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flowsplit.choices import seeds_option
from flowsplit.config_args import (
    add_log_to_argument,
    add_out_option,
    cli,
    command_parser,
    csv_tuple,
    path_arg,
    show_list,
)
from flowsplit.config_file import add_config_file_option
from flowsplit.experiments.sfl.config import (
    ALL_SCHEMES,
    BASELINES,
    QUICK,
    REPLAN_CHOICES,
    SFLCompareConfig,
)
from flowsplit.planner.study_config import add_study_arguments, quick_help, study_options

SFL_COMPARE_OPTIONS = {
    "schemes": cli(
        parse=csv_tuple,
        show=show_list,
        help=f"Schemes, comma-separated, of {', '.join(ALL_SCHEMES)} (best-fixed: every "
        "legal cut trained, the best on validation kept: costly); hsfl always runs.",
    ),
    "seeds": seeds_option(
        show=lambda v: f"{len(v)} ({show_list(v)}); --quick: {len(QUICK['seeds'])}"
    ),
    "replan": cli(choices=REPLAN_CHOICES),
    "quick": cli(help=quick_help(QUICK)),
    "baselines": cli(
        parse=csv_tuple,
        show=show_list,
        help=f"Baselines that split nothing, comma-separated, of {', '.join(BASELINES)}.",
    ),
}
"""``sfl compare``'s options beyond ``sfl plan``'s (:class:`SFLCompareConfig`)."""


def add_compare_parser(sfl_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """compare sfl, hsfl, the delay-only and the accuracy-aware planner

    Train each scheme on the same data, topology and seeds (in-process simulation) and write
    OUT/report.html, report.md and results.json: accuracy and macro-F1 per round, delay per
    round and to a target accuracy, bytes per tier and message type, and differences against
    HSFL with paired confidence intervals.
    """
    p = command_parser(sfl_subparsers, "compare", add_compare_parser)
    add_out_option(p, "output directory", parse=path_arg)
    add_config_file_option(p)
    # Every SFLCompareConfig field: those of sfl plan (StudyConfig) and its own.
    add_study_arguments(p, SFLCompareConfig, **SFL_COMPARE_OPTIONS)
    add_log_to_argument(p)
    p.set_defaults(func=cmd_compare)
    return p


def cmd_compare(args: argparse.Namespace) -> int:
    from flowsplit.experiments.sfl.compare import run_sfl_compare

    cfg = compare_config(args)
    path = run_sfl_compare(args.dataset, args.out, cfg, quiet=args.quiet)  # + config.toml
    from flowsplit.experiments.sfl.result import read_sfl_compare_result

    summary = read_sfl_compare_result(Path(path).parent / "results.json").summary
    if args.log_to is not None:  # one subdirectory per run of the study
        from flowsplit.tracking import finished_runs, write_study

        top = write_study(args.log_to, Path(path).parent, finished_runs(Path(path).parent))
        print(f"tensorboard: {top}")
    if summary:
        print(summary[0])  # the verdict, as the report opens with it
    print(f"report: {path}")
    return 0


def compare_config(args: argparse.Namespace) -> SFLCompareConfig:
    """``sfl compare``'s config: the mode's defaults (``quick``: the quick recipe), then
    ``--config FILE``, then the options given."""
    from flowsplit.experiments.sfl.compare import resolve_config

    given = study_options(args, SFLCompareConfig)
    return resolve_config(bool(given.pop("quick", False)), **given)


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"compare": add_compare_parser}
