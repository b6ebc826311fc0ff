"""``flowsplit sfl privacy``: leakage at every cut, with and without defences.

Registered under the ``sfl`` group by :mod:`flowsplit.cli` through
:func:`add_privacy_parser`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from flowsplit.config_args import (
    FORCE_HELP,
    add_config_arguments,
    add_dataset_argument,
    add_out_option,
    add_renamed,
    check_threads,
    command_parser,
    path_arg,
)
from flowsplit.config_file import build_config
from flowsplit.privacy.config import DEFAULT_DEFENCES, ParetoChoice, PrivacyConfig
from flowsplit.privacy.result import PRIVACY_NAME, CutMeasures, PrivacyResult

log = logging.getLogger("flowsplit.privacy")


def add_privacy_parser(sfl_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """measure what crosses each cut reveals (inversion, probes), with defences

    For every legal cut, an honest-but-curious attacker at the next tier, with auxiliary
    rows of the same dataset, inverts the activations back to the input and probes them for
    the label; label leakage from the gradients sent down is measured too. Each defence
    (nopeek, noise, quant) is trained and attacked the same way. Writes OUT/privacy.json
    (the planner's --leakage-file) and OUT/pareto.png (delay, accuracy and leakage per cut
    pair).
    """
    p = command_parser(sfl_subparsers, "privacy", add_privacy_parser)
    add_dataset_argument(p)
    add_out_option(p, "output directory", parse=path_arg)
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument(
        "--victim-run",
        type=path_arg,
        default=None,
        metavar="RUN",
        help="an `sfl run` directory whose model to attack (default: train one)",
    )
    p.add_argument(
        "--redraw",
        action="store_true",
        help="no study: redraw OUT/pareto.png from OUT/privacy.json (new budget, "
        "plan, topology or measure)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress log")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    # One option per field of the study's config (model, cuts, training, attack,
    # defences) and of the picture's (topology, measure, budget, plan).
    add_config_arguments(p, PrivacyConfig, unset=True)
    add_config_arguments(p, ParetoChoice, unset=True)
    add_renamed(p, "--cuts", "--client-cuts", "--cuts a,c are the cut pair of sfl run")
    add_renamed(p, "--weights", "--victim-run", "--weights are the planner's objective weights")
    p.set_defaults(func=cmd_privacy)
    return p


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"privacy": add_privacy_parser}


def cmd_privacy(args: argparse.Namespace) -> int:
    """Run the study (or read it back, --redraw), write OUT/privacy.json and OUT/pareto.png."""
    # Loaded here, not at the top: torch, scikit-learn and matplotlib would slow
    # every `flowsplit` invocation, and only this command needs them.
    import torch

    from flowsplit.privacy.defences import parse_defences
    from flowsplit.privacy.run import PARETO_NAME, privacy_study
    from flowsplit.privacy.study import SUMMARY_MEASURES, reference_check

    config = build_config(PrivacyConfig, args, base={"defences": parse_defences(DEFAULT_DEFENCES)})
    picture = build_config(ParetoChoice, args)
    check_threads(config.threads, force=args.force)
    torch.set_num_threads(config.threads)
    result = privacy_study(
        args.dataset,
        args.out,
        config,
        picture,
        redraw=args.redraw,
        overwrite=args.overwrite,
        victim_run=args.victim_run,
        progress=None if args.quiet else (lambda msg: log.info("%s", msg)),
    )
    print(format_summary(result, SUMMARY_MEASURES))
    # Also for a study redrawn from a privacy.json written before the check was recorded.
    check = reference_check(result.reference.measures) if result.reference else "passed"
    if check != "passed":
        print(
            f"flowsplit: warning: the attack's reference check {check}; the leakage "
            "at the cuts is a loose lower bound: raise --attack-epochs or --aux-limit",
            file=sys.stderr,
        )
    pareto = result.pareto
    _print_choices(picture, pareto.measure, pareto, pareto.topology)
    print(f"wrote {args.out / PRIVACY_NAME} and {args.out / PARETO_NAME}")
    return 0


def _print_choices(picture: ParetoChoice, measure: str, pareto, topology: str) -> None:
    """The pair chosen under --max-leakage (against the unconstrained one) and --plan's."""
    chosen, unconstrained, planned = pareto.chosen, pareto.unconstrained, pareto.plan
    if picture.max_leakage is not None:
        if chosen is None:
            print(f"no cut pair has {measure} <= {picture.max_leakage}")
        else:
            print(
                f"least delay with {measure} <= {picture.max_leakage}: cuts {tuple(chosen.cuts)}, "
                f"{chosen.delay_s:.3f} s/round, leakage {chosen.leakage:.3f} "
                f"(unconstrained: {tuple(unconstrained.cuts)}, {unconstrained.delay_s:.3f} "
                f"s/round, leakage {unconstrained.leakage:.3f})"
            )
    if planned is not None:
        print(
            f"the plan of {picture.plan}: cuts {tuple(planned.cuts)}, leakage "
            f"{planned.leakage:.3f}, {planned.delay_s:.3f} s/round on {topology}"
        )


def format_summary(result: PrivacyResult, measures: Sequence[str]) -> str:
    """A plain table of the per-cut ``measures`` (those present), undefended and per defence."""
    keys = [k for k in measures if any(rec.has(k) for rec in result.cuts.values())]
    head = f"{'defence':<8} {'cut':>3} {'block':<8} " + " ".join(f"{k:>15}" for k in keys)
    rows = result.rows
    lines = [
        f"{result.model} on {result.view} of {result.dataset}: accuracy "
        f"{result.accuracy:.3f} (majority {result.majority_acc:.3f}); rows "
        f"{{'train': {rows.train}, 'aux': {rows.aux}, 'eval': {rows.eval}}}",
        head,
    ]

    def row(name: str, k: str, rec: CutMeasures, block: str | None = None) -> str:
        vals = " ".join(
            f"{rec.number(key):>15.3f}" if rec.number(key) is not None else f"{'-':>15}"
            for key in keys
        )
        return f"{name:<8} {k:>3} {block or rec.block or '':<8} {vals}"

    if result.reference is not None:
        lines.append(row("stem", "-", result.reference, block="input"))
    for k, rec in result.cuts.items():
        lines.append(row("none", k, rec))
    for name, entry in result.defences.items():
        for k, rec in entry.cuts.items():
            lines.append(row(name, k, rec))
    prior = ", ".join(f"{k} {v:.3f}" for k, v in result.prior.items())
    lines.append(f"an attacker without activations (per-position guess): {prior}")
    return "\n".join(lines)
