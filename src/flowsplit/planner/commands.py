"""``flowsplit sfl plan`` (added to the ``sfl`` group by :mod:`flowsplit.cli`).

:func:`sfl_commands` names the builders; ``add_plan_parser(sfl_subparsers)`` adds the
sub-parser and sets ``func``. The options shared with ``sfl compare``
(:mod:`flowsplit.experiments.sfl.commands`) are :func:`add_common` and :func:`options`.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from flowsplit.config_args import (
    HelpFormatter,
    add_config_arguments,
    cli,
    cli_fields,
    config_values,
    fields_of,
    finite_float,
    parse_seed,
    show_list,
    with_groups,
)
from flowsplit.errors import ConfigError
from flowsplit.planner.leakage import budget_pairs
from flowsplit.planner.study_config import MAX_PILOTS, PILOT_FRACTION, QUICK, StudyConfig

log = logging.getLogger("flowsplit.planner")


def _pair(text: str) -> tuple[int, int]:
    from flowsplit.federated.config import parse_cuts

    return parse_cuts(text, "--fixed-cuts")


def _capacity(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--capacity {text!r}: give one integer per aggregator") from None


def _weights(text: str) -> tuple[float, float, float]:
    from flowsplit.planner.objective import Weights

    w = Weights.parse(text)
    return (w.loss, w.delay, w.bytes)


def _tolerance(text: str) -> float:
    """``--acc-tolerance`` in percentage points -> StudyConfig.acc_tolerance, a fraction."""
    try:
        points = float(text)
    except ValueError:
        raise ConfigError(f"--acc-tolerance {text!r}: give percentage points in [0, 100]") from None
    if not (0.0 <= points <= 100.0):
        raise ConfigError(f"--acc-tolerance {points:g}: give percentage points in [0, 100]")
    return points / 100.0


def _quick(name: str, default: str) -> dict:
    """``show=`` of a field that ``--quick`` changes: its default and quick mode's."""
    return cli(show=lambda v: f"{default if v is None else v}; --quick: {QUICK[name]}")


def quick_help(recipe: dict) -> str:
    """``--quick``'s help, from the recipe itself."""
    shown = {k: v for k, v in recipe.items() if v is not None}
    text = ", ".join(f"{k} {len(v) if k == 'seeds' else v}" for k, v in shown.items())
    return f"Small defaults ({text}); options given win."


STUDY_OPTIONS = {
    "n_clients": _quick("n_clients", "the preset's"),
    "n_aggregators": _quick("n_aggregators", "the preset's"),
    "trace": cli(metavar="SPEC"),  # as sfl run's
    "rounds": _quick("rounds", ""),
    "family": cli(choices=("hsfl", "hsfl-ll")),
    "fixed_cuts": cli(parse=_pair, show=show_list, metavar="A,C"),
    "weights": cli(parse=_weights, show=lambda v: ",".join(f"{w:g}" for w in v), metavar="L,D,B"),
    "reference": cli(choices=("hsfl", "median")),
    "n_pilots": cli(
        flag="--pilots",
        metavar="N",
        help="Pilot cut pairs.",
        show=lambda _: f"every legal pair, at most {MAX_PILOTS}",
    ),
    "pilot_steps": cli(
        help="Optimiser steps per pilot, client batches summed over clients.",
        show=lambda _: f"{PILOT_FRACTION:g} of the run's",
    ),
    "train_limit": {
        "flowsplit.cli": {**_quick("train_limit", "every row")["flowsplit.cli"], "metavar": "N"}
    },
    "capacity": cli(parse=_capacity, show=lambda _: "no limit", metavar="K[,K...]"),
    "objective": cli(choices=("guard", "weighted")),
    "acc_tolerance": cli(
        parse=_tolerance,
        show=lambda v: f"{100 * v:g}",
        help="Accuracy guard: plans within this many percentage points of the best "
        "predicted accuracy.",
    ),
    "quick": cli(help=quick_help(QUICK)),
    "only_cuts": cli(enabled=False),  # from --max-leakage and --leakage-file
}
"""``sfl plan``'s and ``sfl compare``'s view of :class:`~flowsplit.planner.study_config.StudyConfig`."""

STUDY_GROUPS = {
    "planner": ("family", "fixed_cuts", "sfl_cut", "weights", "reference", "objective")
    + ("acc_tolerance", "three_tier", "capacity"),
    "pilots": ("n_pilots", "pilot_steps", "pilot_train_limit"),
}
"""The ``--help`` sections of the study's options beyond the model, topology and run."""


def add_common(p: argparse.ArgumentParser, config: type = StudyConfig, **overrides) -> None:
    """The options ``sfl plan`` and ``sfl compare`` share: one per field of ``config``
    (a :class:`StudyConfig`), unset when not given so that ``--quick`` picks the defaults."""
    p.add_argument(
        "dataset", metavar="DATASET", help="dataset directory (from `flowsplit prepare`)"
    )
    options = with_groups({**STUDY_OPTIONS, **overrides}, STUDY_GROUPS)
    add_config_arguments(p, config, overrides=options, unset=True)
    leakage = p.add_argument_group("leakage budget (from `sfl privacy`)")
    leakage.add_argument(
        "--max-leakage",
        type=finite_float,
        default=None,
        help="plan only cut pairs whose measured leakage is at most this",
    )
    leakage.add_argument(
        "--leakage-file",
        type=Path,
        default=None,
        metavar="PRIVACY.json",
        help="privacy.json of `flowsplit sfl privacy` (for --max-leakage)",
    )
    leakage.add_argument(
        "--leakage-measure",
        default="bytes_recovered",
        help="measure of --max-leakage (bytes_recovered, ascii_recovered, dcor, "
        "label_probe_acc, grad_label_acc, seq_recovered)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-run log")


def options(args: argparse.Namespace, config: type = StudyConfig) -> dict:
    """The ``config`` fields given on the command line (``None``: the mode's default),
    with ``only_cuts`` from the leakage options."""
    values = config_values(args, [f.name for f in cli_fields(config, overrides=STUDY_OPTIONS)])
    given = {k: v for k, v in values.items() if v is not None and v != {}}
    only_cuts = budget_pairs(
        args.leakage_file,
        args.leakage_measure,
        args.max_leakage,
        model=given.get("model") or config.model,
    )
    if only_cuts is not None:
        given["only_cuts"] = only_cuts
    return given


def add_plan_parser(sfl_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``flowsplit sfl plan``: choose cuts and an assignment, write plan.json."""
    p = sfl_subparsers.add_parser(
        "plan",
        help="choose cut points and a client -> aggregator assignment (accuracy-aware)",
        description=(
            "Run short pilots at a few cut pairs, fit the loss surrogate, and choose the cuts "
            "and assignment minimising w_loss * loss + w_delay * delay / delay_ref + "
            "w_bytes * bytes / bytes_ref; write the plan (with the baselines' predicted "
            "costs) as JSON."
        ),
        formatter_class=HelpFormatter,
    )
    add_common(p)
    p.add_argument("-o", "--out", required=True, type=Path, help="plan JSON file to write")
    p.add_argument("--seed", type=parse_seed, default=0, help="partition and pilot seed")
    p.add_argument(
        "--no-pilots",
        action="store_true",
        help="no pilots: plan for delay and bytes only, and say so (weighted: the "
        "loss weight must be 0)",
    )
    p.set_defaults(func=cmd_plan)
    return p


def cmd_plan(args: argparse.Namespace) -> int:
    from flowsplit.outputs import atomic_write_json, check_writable
    from flowsplit.planner.study import jsonable, make_study, plan_seed, resolve_study_config

    check_writable(args.out)  # before the pilots: a refused -o is found in a second
    given = options(args)
    cfg = resolve_study_config(bool(given.pop("quick", False)), **given)
    if args.no_pilots and cfg.objective == "weighted" and cfg.weights[0] > 0:
        raise ConfigError(
            "--no-pilots with --objective weighted needs a loss weight of 0, e.g. --weights 0,1,1"
        )
    t0 = time.perf_counter()
    study = make_study(
        args.dataset, cfg, quiet=args.quiet, pilots=not args.no_pilots, seed=args.seed
    )
    plans = plan_seed(study, args.seed)
    chosen = plans["acc-aware"]
    doc = _plan_document(study, cfg, plans, args.seed, time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, jsonable(doc))
    acc = doc["predicted_accuracy"]
    print(
        f"plan: cuts {tuple(chosen.cuts)} ({chosen.tiers} tiers), clients per aggregator "
        f"{doc['clients_per_aggregator']}, predicted accuracy "
        f"{'n/a' if acc is None else f'{100 * acc:.2f} %'}, delay {chosen.delay_s:.3f} s/round, "
        f"{chosen.bytes / 1e6:.2f} MB/round, planned in {1e3 * chosen.planning_s:.0f} ms "
        f"-> {args.out}"
    )
    if "guard" in doc:
        print(f"rule: {doc['guard']['rule']}")
    if doc.get("trace"):
        t = doc["trace"]
        print(f"trace: {t['events']} change(s); {t['note']}")
    return 0


PLAN_RUN_FIELDS = ("batch_size", "local_epochs", "partition", "train_limit", "model", "view")
PLAN_RUN_FIELDS += ("model_options", "rounds")
"""The study's fields a plan.json's ``run`` hands to ``sfl run --plan`` as they are."""


def _plan_document(study, cfg, plans: dict, seed: int, total_s: float) -> dict:
    """plan.json: the chosen plan, its baselines, surrogate, topology and run settings."""
    from flowsplit.federated.system.topology import topology_to_toml

    chosen = plans["acc-aware"]
    return {
        **chosen.to_dict(),
        "baselines": {
            k: {f: v for f, v in p.to_dict().items() if f not in ("assignment",)}
            for k, p in plans.items()
            if p is not chosen
        },
        "surrogate": study.surrogate or None,
        "topology": {
            "name": study.topology.name,
            "n_clients": study.topology.n_clients,
            "n_aggregators": study.topology.n_aggregators,
            "seed": study.topology.seed,
            "spec": cfg.topology,
        },
        # What `flowsplit sfl run DATASET --plan PLAN` takes to run exactly this plan.
        "run": {"scheme": chosen.scheme, "seed": seed, **fields_of(cfg, PLAN_RUN_FIELDS)},
        "topology_toml": topology_to_toml(study.topology),
        "config": cfg.to_dict(),
        "total_s": total_s,
    }


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"plan": add_plan_parser}
