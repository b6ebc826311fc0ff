"""`flowsplit demo`: the main job on the embedded lab capture.

Stages, each writing under ``OUT``:

1. ``OUT/dataset``: prepare the lab capture that ships in ``demo/captures``
   (one folder per class), and print the dataset summary.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from flowsplit.errors import InputError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CAPTURES = REPO_ROOT / "demo" / "captures"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the demo sub-command to the CLI."""
    p = sub.add_parser(
        "demo",
        help="run the main job on the embedded lab capture",
        description="Prepare the embedded lab capture and run the main job on it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("-o", "--out", default="runs/demo", type=Path, help="output directory")
    p.add_argument("--captures", default=DEFAULT_CAPTURES, type=Path, help="lab capture folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from flowsplit.data.commands import format_summary
    from flowsplit.data.prepare import PrepareOptions, prepare_dataset
    from flowsplit.data.store import load_dataset

    if not args.captures.is_dir():
        raise InputError(
            args.captures, "lab capture folder not found (run from a flowsplit checkout)"
        )
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _stage("1. prepare the lab capture", args.quiet)
    dataset_dir = out / "dataset"
    prepare_dataset(
        [args.captures], dataset_dir, PrepareOptions(seed=args.seed), progress=not args.quiet
    )
    ds = load_dataset(dataset_dir)
    print(format_summary(ds.manifest, dataset_dir, meta=ds.meta))
    print(f"\ndemo finished in {time.perf_counter() - t0:.1f} s; outputs under {out}/")
    return 0


def _stage(title: str, quiet: bool) -> None:
    if not quiet:
        print(f"\n== {title} ==", flush=True)
