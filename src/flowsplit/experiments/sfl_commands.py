"""``flowsplit sfl compare`` (added to the ``sfl`` group by :mod:`flowsplit.cli`).

It shares its options with ``sfl plan`` (:func:`flowsplit.planner.commands.add_common`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flowsplit.errors import ConfigError
from flowsplit.planner.commands import add_common, options


def _seed_list(text: str) -> tuple[int, ...]:
    """``"5"`` -> (0, 1, 2, 3, 4); ``"0,3,7"`` -> (0, 3, 7)."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise ConfigError(f"--seeds {text!r}: give a count (5) or a list (0,1,2)")
    if len(values) == 1 and "," not in str(text):
        if values[0] < 1:
            raise ConfigError("--seeds: the count must be >= 1")
        return tuple(range(values[0]))
    return tuple(values)


def add_compare_parser(sfl_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``flowsplit sfl compare``: train every scheme on the same seeds and write the report."""
    p = sfl_subparsers.add_parser(
        "compare",
        help="compare sfl, hsfl, the delay-only and the accuracy-aware planner",
        description=(
            "Train each scheme on the same data, topology and seeds (in-process simulation) "
            "and write OUT/report.html, report.md and results.json: accuracy and macro-F1 per "
            "round, delay per round and to a target accuracy, bytes per tier and message "
            "type, and differences against HSFL with paired confidence intervals."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common(p)
    p.add_argument("-o", "--out", required=True, type=Path, help="output directory")
    p.add_argument(
        "--schemes",
        default="sfl,hsfl,hsfl-greedy,delay,acc-aware",
        help="comma list of sfl, hsfl, hsfl-greedy, delay, acc-aware and best-fixed "
        "(every legal cut trained, the best on validation kept: costly); hsfl "
        "always runs",
    )
    p.add_argument(
        "--seeds",
        default=None,
        type=_seed_list,
        help="number of seeds (5) or a list (0,1,2); default 5, quick 2",
    )
    p.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        help="accuracy to time (default: 0.95 x HSFL's mean final accuracy)",
    )
    p.set_defaults(func=cmd_compare)
    return p


def cmd_compare(args: argparse.Namespace) -> int:
    from flowsplit.experiments.sfl_compare import run_sfl_compare

    schemes = tuple(s.strip() for s in args.schemes.split(",") if s.strip())
    path = run_sfl_compare(
        args.dataset,
        args.out,
        model=args.model,
        schemes=schemes,
        topology=args.topology,
        seeds=args.seeds,
        quick=args.quick,
        quiet=args.quiet,
        target_accuracy=args.target_accuracy,
        **options(args),
    )
    print(f"report: {path}")
    return 0


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"compare": add_compare_parser}
