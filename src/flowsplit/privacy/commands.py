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

from flowsplit.config_args import HelpFormatter, add_config_arguments, add_renamed
from flowsplit.config_file import build_config
from flowsplit.errors import ConfigError, InputError
from flowsplit.privacy.config import DEFAULT_DEFENCES, ParetoChoice, PrivacyConfig
from flowsplit.privacy.result import PRIVACY_NAME, CutMeasures, PairRow, PrivacyResult
from flowsplit.util import jsonable

log = logging.getLogger("flowsplit.privacy")


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
    p.add_argument(
        "dataset", metavar="DATASET", help="dataset directory (from `flowsplit prepare`)"
    )
    p.add_argument("-o", "--out", required=True, type=Path, metavar="OUT", help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument(
        "--victim-run",
        type=Path,
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

    from flowsplit.privacy.pareto import choose, draw_pareto
    from flowsplit.privacy.result import Pareto
    from flowsplit.privacy.study import SUMMARY_MEASURES, reference_check

    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory")
    from flowsplit.privacy.defences import parse_defences

    config = build_config(PrivacyConfig, args, base={"defences": parse_defences(DEFAULT_DEFENCES)})
    picture = build_config(ParetoChoice, args)
    torch.set_num_threads(config.threads)
    result = _read_study(out) if args.redraw else _new_study(args, config, out)
    measure = picture.leakage_measure or result.default_measure()
    rows, topology = _pair_rows(args.dataset, config, picture, result, measure)
    chosen = choose(rows, picture.max_leakage)
    unconstrained = choose(rows, None)
    planned = _planned(Path(picture.plan), rows) if picture.plan is not None else None
    result.pareto = Pareto(
        measure=measure,
        topology=topology.name,
        max_leakage=picture.max_leakage,
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
        max_leakage=picture.max_leakage,
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
    _print_choices(picture, measure, result.pareto, topology.name)
    print(f"wrote {out / PRIVACY_NAME} and {out / 'pareto.png'}")
    return 0


def _read_study(out: Path) -> PrivacyResult:
    """--redraw: the study already in ``out``."""
    from flowsplit.privacy.result import read_privacy_result

    if not (out / PRIVACY_NAME).is_file():
        raise InputError(out / PRIVACY_NAME, "not found: --redraw needs a finished study in OUT")
    return read_privacy_result(out / PRIVACY_NAME)


def _new_study(args: argparse.Namespace, config: PrivacyConfig, out: Path) -> PrivacyResult:
    """Train (or load --victim-run) and attack every cut, in an empty or replaced ``out``."""
    from flowsplit.privacy.study import check_sfl_run, run_study

    if out.is_dir() and any(out.iterdir()):
        if not args.overwrite:
            raise InputError(out, "exists and is not empty (use --overwrite to replace it)")
        if not (out / PRIVACY_NAME).is_file():
            # rmtree below: never of a folder that is not a study (a dataset, a home).
            raise InputError(out, "is not an `sfl privacy` study; --overwrite replaces only one")
        shutil.rmtree(out)
    if args.victim_run is not None:
        check_sfl_run(args.victim_run, read=True)  # before the note: a bad run is the only line
        if config.defences:
            log.info("note: defences are trained afresh; only the undefended cuts use --victim-run")
    say = (lambda msg: None) if args.quiet else (lambda msg: log.info("%s", msg))
    doc = run_study(args.dataset, config, weights=args.victim_run, progress=say)
    return PrivacyResult.from_dict(jsonable(doc, strict=False))


def _pair_rows(
    dataset: str, config: PrivacyConfig, picture: ParetoChoice, result: PrivacyResult, measure: str
):
    """Every legal cut pair's delay on --topology and leakage of ``measure``, and the
    topology. The delays need the model's block profile, built as the study built it."""
    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.federated.system.profile import profile_model
    from flowsplit.models.registry import build_model
    from flowsplit.privacy.pareto import pair_table

    ds = load_dataset(dataset)
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
        picture.topology,
        n_clients=picture.n_clients,
        n_aggregators=picture.n_aggregators,
        seed=config.seed,
    )
    try:
        rows = pair_table(result, profile, topology, measure=measure, batch_size=config.batch_size)
    except ValueError as exc:
        raise ConfigError(f"--leakage-measure {measure!r}: {exc}") from None
    return rows, topology


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
