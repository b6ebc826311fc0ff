"""Sub-commands of flowsplit.experiments (registered by flowsplit.cli)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flowsplit.errors import ConfigError


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None


def _seeds(text: str) -> int | list[int]:
    """``5`` means seeds 0..4; ``0,3,7`` means exactly those."""
    return _int_list(text) if "," in text else int(text)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compare`` and ``report`` to the CLI."""
    p = sub.add_parser(
        "compare",
        help="train models centralised and data-parallel over seeds, and report",
        description=(
            "Run the matrix model x workers x seed on one prepared dataset (each run is a "
            "`flowsplit train` in its own directory; finished runs are skipped on a rerun), "
            "measure all-reduce on this machine, and write OUT/report.html, report.md, "
            "results.csv and results.json with statistics, speedups and a scaling model."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="prepared dataset directory")
    p.add_argument("-o", "--out", type=Path, required=True, help="study directory to write")
    p.add_argument(
        "--models", default="cnn,lstm,convlstm,convgru,xgboost", help="models, comma-separated"
    )
    p.add_argument(
        "--workers",
        type=_int_list,
        default=[1, 2, 4],
        help="worker counts, comma-separated (1, the reference, is always run)",
    )
    p.add_argument(
        "--seeds", type=_seeds, default=5, help="number of seeds (0..n-1) or a comma-separated list"
    )
    p.add_argument("--epochs", type=int, default=None, help="max epochs (default: train's)")
    p.add_argument("--rounds", type=int, default=None, help="max XGBoost rounds")
    p.add_argument("--threads", type=int, default=1, help="threads per worker, in every run")
    p.add_argument("--patience", type=int, default=None, help="early-stopping patience")
    p.add_argument(
        "--margin", type=float, default=1.0, help="TOST equivalence margin in percentage points"
    )
    p.add_argument("--alpha", type=float, default=0.05, help="significance level")
    p.add_argument(
        "--quick",
        action="store_true",
        help="short runs (2 epochs, 20 rounds) and a short micro-benchmark",
    )
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=None,
        metavar="S",
        help="kill a run after S seconds (it is then reported as failed)",
    )
    p.add_argument(
        "--train-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for every `flowsplit train` (repeatable), "
        "e.g. --train-arg=--batch-size=128",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="S",
        help="before each run wait up to S seconds for the CPUs to be mostly idle",
    )
    p.add_argument(
        "--max-busy",
        type=float,
        default=0.25,
        metavar="F",
        help="'mostly idle' for --quiet-wait: at most this fraction of CPUs busy",
    )
    p.add_argument(
        "--max-foreign",
        type=float,
        default=None,
        metavar="F",
        help="run again (once) a run during which other processes used more "
        "than this fraction of the CPUs",
    )
    p.add_argument(
        "--rerun-contended",
        action="store_true",
        help="run again finished runs that other processes disturbed (more than "
        "--max-foreign, default 0.15, of the CPUs); keep the less disturbed",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_compare)

    r = sub.add_parser(
        "report",
        help="re-render the report of a `flowsplit compare` study",
        description="Recompute statistics from the stored runs of OUT and rewrite its report.",
    )
    r.add_argument("out", type=Path, metavar="OUT", help="study directory of `flowsplit compare`")
    r.set_defaults(func=_report)


# The runner and the report are imported when a command runs, not at registration:
# they pull in torch, which takes seconds to import, and `flowsplit --help` should not.
def _compare(args: argparse.Namespace) -> int:
    from flowsplit.experiments.compare import run_compare

    if not 0 < args.margin < 100:
        raise ConfigError(f"--margin is in percentage points, in (0, 100); got {args.margin}")
    if not 0 < args.alpha < 0.5:
        raise ConfigError(f"--alpha must be in (0, 0.5); got {args.alpha}")
    path = run_compare(
        args.dataset,
        args.out,
        models=[m.strip() for m in args.models.split(",") if m.strip()],
        workers=args.workers,
        seeds=args.seeds,
        epochs=args.epochs,
        rounds=args.rounds,
        quick=args.quick,
        threads=args.threads,
        patience=args.patience,
        margin=args.margin / 100,
        alpha=args.alpha,
        cell_timeout_s=args.cell_timeout,
        train_args=args.train_arg,
        quiet_wait_s=args.quiet_wait,
        max_busy=args.max_busy,
        max_foreign=args.max_foreign,
        rerun_contended=args.rerun_contended,
        progress=not args.quiet,
    )
    _print_summary(path)
    return 0


def _report(args: argparse.Namespace) -> int:
    from flowsplit.experiments.compare_report import render_report

    _print_summary(render_report(args.out))
    return 0


def _print_summary(path: Path) -> None:
    results = json.loads((path.parent / "results.json").read_text(encoding="utf-8"))
    for line in results["summary"]:
        print(f"- {line}")
    print(f"report: {path}")
