"""``flowsplit sfl privacy``: leakage at every cut, with and without defences.

Registered under the ``sfl`` group by :mod:`flowsplit.cli` through
:func:`add_privacy_parser`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from flowsplit.config_args import (
    HelpFormatter,
    add_model_arguments,
    add_renamed,
    finite_float,
    parse_seed,
)
from flowsplit.errors import ConfigError, InputError
from flowsplit.privacy.result import PRIVACY_NAME, CutMeasures, PairRow, PrivacyResult
from flowsplit.train.config import parse_model_options
from flowsplit.util import jsonable

log = logging.getLogger("flowsplit.privacy")

DEFAULT_DEFENCES = "nopeek:0.5,noise:0.5,quant:2"
ATTACK_EPOCHS = 12  # AttackConfig.epochs, repeated so --help needs no torch


def _cuts(text: str) -> tuple[int, ...] | None:
    if text.strip() == "all":
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values:
        raise ConfigError(f"--client-cuts {text!r}: give 'all' or a comma list of cuts, e.g. 1,2")
    return values


def _limit(text: str) -> int | None:
    if text in ("none", "all"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"row limit {text!r}: give a positive integer or 'all'") from None
    if value < 1:
        raise ConfigError(f"row limit {value}: must be >= 1")
    return value


def add_privacy_parser(sfl_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``flowsplit sfl privacy`` to the ``sfl`` command group."""
    p = sfl_subparsers.add_parser(
        "privacy",
        help="measure what crosses each cut reveals (inversion, probes), with defences",
        description=(
            "For every legal cut, an honest-but-curious attacker at the next tier, with "
            "auxiliary rows of the same dataset, inverts the activations back to the input "
            "and probes them for the label; label leakage from the gradients sent down is "
            "measured too. Each defence (nopeek, noise, quant) is trained and attacked the "
            "same way. Writes OUT/privacy.json (the planner's --leakage-file) and "
            "OUT/pareto.png (delay, accuracy and leakage per cut pair)."
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument("dataset", help="dataset directory (from `flowsplit prepare`)")
    p.add_argument("-o", "--out", required=True, type=Path, help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    add_model_arguments(p)
    p.add_argument(
        "--client-cuts",
        dest="cuts",
        default="all",
        type=_cuts,
        help="the cuts k to attack (the client holds blocks 1..k): 'all' or a comma list",
    )
    add_renamed(p, "--cuts", "--client-cuts", "--cuts a,c are the cut pair of sfl run")
    p.add_argument(
        "--victim-run",
        type=Path,
        default=None,
        metavar="RUN",
        help="an `sfl run` directory whose model to attack (default: train one)",
    )
    add_renamed(p, "--weights", "--victim-run", "--weights are the planner's objective weights")
    p.add_argument("--epochs", type=int, default=3, help="training epochs of each model")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=finite_float, default=1e-3)
    p.add_argument("--train-limit", type=_limit, default=None, help="training rows (or 'all')")
    p.add_argument(
        "--aux-split",
        default="val",
        choices=("train", "val", "test"),
        help="the attacker's auxiliary rows",
    )
    p.add_argument("--aux-limit", type=_limit, default=None, help="auxiliary rows (or 'all')")
    p.add_argument(
        "--eval-split",
        default="test",
        choices=("train", "val", "test"),
        help="the victim's rows the attacks are scored on",
    )
    p.add_argument("--eval-limit", type=_limit, default=None, help="evaluated rows (or 'all')")
    p.add_argument(
        "--attack-epochs",
        type=int,
        default=ATTACK_EPOCHS,
        help="epochs of the inversion decoder over the auxiliary rows",
    )
    p.add_argument(
        "--defences",
        default=DEFAULT_DEFENCES,
        help="comma list of nopeek:ALPHA, noise:RATIO, quant:BITS, or 'none'",
    )
    p.add_argument("--no-gradients", action="store_true", help="skip the gradient label attack")
    p.add_argument("--topology", default="heterogeneous", help="topology of the Pareto picture")
    p.add_argument("--clients", type=int, default=None)
    p.add_argument("--aggregators", type=int, default=None)
    p.add_argument(
        "--leakage-measure",
        default=None,
        help="measure of the picture and budget (default bytes_recovered, seq_recovered for seq)",
    )
    p.add_argument(
        "--max-leakage",
        type=finite_float,
        default=None,
        help="mark the least-delay pair with leakage at most this",
    )
    p.add_argument(
        "--plan",
        type=Path,
        default=None,
        help="a plan.json of `sfl plan` whose cuts to mark in the picture",
    )
    p.add_argument(
        "--redraw",
        action="store_true",
        help="no study: redraw OUT/pareto.png from OUT/privacy.json (new budget, "
        "plan, topology or measure)",
    )
    p.add_argument("--seed", type=parse_seed, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--quiet", action="store_true")
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

    from flowsplit.privacy.pareto import choose, draw_pareto
    from flowsplit.privacy.result import Pareto
    from flowsplit.privacy.study import SUMMARY_MEASURES, reference_check

    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory")
    torch.set_num_threads(args.threads)
    result = _read_study(out) if args.redraw else _new_study(args, out)
    measure = args.leakage_measure or result.default_measure()
    rows, topology = _pair_rows(args, result, measure)
    chosen = choose(rows, args.max_leakage)
    unconstrained = choose(rows, None)
    planned = _planned(args.plan, rows) if args.plan is not None else None
    result.pareto = Pareto(
        measure=measure,
        topology=topology.name,
        max_leakage=args.max_leakage,
        pairs=rows,
        chosen=chosen,
        unconstrained=unconstrained,
        plan=planned,
    )
    out.mkdir(parents=True, exist_ok=True)
    result.to_json(out / PRIVACY_NAME)
    draw_pareto(
        result,
        rows,
        out / "pareto.png",
        measure=measure,
        max_leakage=args.max_leakage,
        chosen=chosen,
        unconstrained=unconstrained,
        planned=planned,
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
    _print_choices(args, measure, result.pareto, topology.name)
    print(f"wrote {out / PRIVACY_NAME} and {out / 'pareto.png'}")
    return 0


def _read_study(out: Path) -> PrivacyResult:
    """--redraw: the study already in ``out``."""
    from flowsplit.privacy.result import read_privacy_result

    if not (out / PRIVACY_NAME).is_file():
        raise InputError(out / PRIVACY_NAME, "not found: --redraw needs a finished study in OUT")
    return read_privacy_result(out / PRIVACY_NAME)


def _new_study(args: argparse.Namespace, out: Path) -> PrivacyResult:
    """Train (or load --victim-run) and attack every cut, in an empty or replaced ``out``."""
    from flowsplit.privacy.attack import AttackConfig
    from flowsplit.privacy.defences import parse_defences
    from flowsplit.privacy.study import PrivacyConfig, check_sfl_run, run_study

    if out.is_dir() and any(out.iterdir()):
        if not args.overwrite:
            raise InputError(out, "exists and is not empty (use --overwrite to replace it)")
        if not (out / PRIVACY_NAME).is_file():
            # rmtree below: never of a folder that is not a study (a dataset, a home).
            raise InputError(out, "is not an `sfl privacy` study; --overwrite replaces only one")
        shutil.rmtree(out)
    defences = parse_defences(args.defences)
    if args.victim_run is not None:
        check_sfl_run(args.victim_run, read=True)  # before the note: a bad run is the only line
        if defences:
            log.info("note: defences are trained afresh; only the undefended cuts use --victim-run")
    config = PrivacyConfig(
        model=args.model,
        view=args.view,
        model_options=parse_model_options(args.model_option),
        cuts=args.cuts,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        train_limit=args.train_limit,
        aux_split=args.aux_split,
        aux_limit=args.aux_limit,
        eval_split=args.eval_split,
        eval_limit=args.eval_limit,
        attack=AttackConfig(epochs=args.attack_epochs, seed=args.seed),
        defences=defences,
        gradients=not args.no_gradients,
        seed=args.seed,
    )
    say = (lambda msg: None) if args.quiet else (lambda msg: log.info("%s", msg))
    doc = run_study(args.dataset, config, weights=args.victim_run, progress=say)
    return PrivacyResult.from_dict(jsonable(doc, strict=False))


def _pair_rows(args: argparse.Namespace, result: PrivacyResult, measure: str):
    """Every legal cut pair's delay on --topology and leakage of ``measure``, and the
    topology. The delays need the model's block profile, built as the study built it."""
    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.federated.system.profile import profile_model
    from flowsplit.models.registry import build_model
    from flowsplit.privacy.pareto import pair_table

    ds = load_dataset(args.dataset)
    torch.manual_seed(0)
    model = build_model(
        result.model,
        view=result.view,
        input_shape=ds.view_shape(result.view),
        n_classes=ds.n_classes,
        **result.model_options,
    )
    profile = profile_model(model)
    topology = resolve_topology(
        args.topology, n_clients=args.clients, n_aggregators=args.aggregators, seed=args.seed
    )
    try:
        rows = pair_table(result, profile, topology, measure=measure, batch_size=args.batch_size)
    except ValueError as exc:
        raise ConfigError(f"--leakage-measure {measure!r}: {exc}") from None
    return rows, topology


def _print_choices(args: argparse.Namespace, measure: str, pareto, topology: str) -> None:
    """The pair chosen under --max-leakage (against the unconstrained one) and --plan's."""
    chosen, unconstrained, planned = pareto.chosen, pareto.unconstrained, pareto.plan
    if args.max_leakage is not None:
        if chosen is None:
            print(f"no cut pair has {measure} <= {args.max_leakage}")
        else:
            print(
                f"least delay with {measure} <= {args.max_leakage}: cuts {tuple(chosen.cuts)}, "
                f"{chosen.delay_s:.3f} s/round, leakage {chosen.leakage:.3f} "
                f"(unconstrained: {tuple(unconstrained.cuts)}, {unconstrained.delay_s:.3f} "
                f"s/round, leakage {unconstrained.leakage:.3f})"
            )
    if planned is not None:
        print(
            f"the plan of {args.plan}: cuts {tuple(planned.cuts)}, leakage "
            f"{planned.leakage:.3f}, {planned.delay_s:.3f} s/round on {topology}"
        )


def _planned(path: Path, rows: list[PairRow]) -> PairRow:
    """The pair row of the cuts a ``sfl plan`` JSON chose."""
    try:
        cuts = [int(c) for c in json.loads(path.read_text(encoding="utf-8"))["cuts"]]
    except FileNotFoundError:
        raise InputError(path, "plan file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise InputError(path, "is not a plan.json with 'cuts' [a, c]") from None
    for row in rows:
        if row.cuts == cuts:
            return row
    raise InputError(path, f"plans cuts {tuple(cuts)}, which this study did not measure")


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
