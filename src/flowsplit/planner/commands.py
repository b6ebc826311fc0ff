"""``flowsplit sfl plan`` (added to the ``sfl`` group by :mod:`flowsplit.cli`).

:func:`sfl_commands` names the builders; ``add_plan_parser(sfl_subparsers)`` adds the
sub-parser and sets ``func``. The options shared with ``sfl compare``
(:mod:`flowsplit.experiments.sfl_commands`) are :func:`add_common` and :func:`options`.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from flowsplit.errors import ConfigError
from flowsplit.planner.leakage import budget_pairs

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


def _tolerance(points: float) -> float:
    if not (0.0 <= points <= 100.0):
        raise ConfigError(f"--acc-tolerance {points:g}: give percentage points in [0, 100]")
    return points / 100.0


def add_common(p: argparse.ArgumentParser) -> None:
    """The options ``sfl plan`` and ``sfl compare`` share."""
    p.add_argument("dataset", help="dataset directory (from `flowsplit prepare`)")
    p.add_argument("--model", default="cnn", help="neural model (cnn, lstm, convlstm, convgru)")
    p.add_argument("--view", default=None, help="dataset view (default: the model's)")
    p.add_argument(
        "--max-leakage",
        type=float,
        default=None,
        help="plan only cut pairs whose measured leakage is at most this",
    )
    p.add_argument(
        "--leakage-file",
        type=Path,
        default=None,
        help="privacy.json of `flowsplit sfl privacy` (for --max-leakage)",
    )
    p.add_argument(
        "--leakage-measure",
        default="bytes_recovered",
        help="measure of --max-leakage (bytes_recovered, ascii_recovered, dcor, "
        "label_probe_acc, grad_label_acc, seq_recovered)",
    )
    p.add_argument("--topology", default="heterogeneous", help="preset name or TOML file")
    p.add_argument("--clients", type=int, default=None, help="clients N (default: preset's)")
    p.add_argument("--aggregators", type=int, default=None, help="aggregators A")
    p.add_argument("--topology-seed", type=int, default=0, help="seed of a generated topology")
    p.add_argument(
        "--family",
        default="hsfl",
        choices=("hsfl", "hsfl-ll"),
        help="scheme the three-tier runs train with",
    )
    p.add_argument(
        "--objective",
        default="guard",
        choices=("guard", "weighted"),
        help="guard: least delay/bytes among the plans within --acc-tolerance of "
        "the best predicted accuracy; weighted: the weighted sum with the "
        "predicted loss",
    )
    p.add_argument(
        "--acc-tolerance",
        type=float,
        default=1.0,
        help="accuracy guard tolerance in percentage points",
    )
    p.add_argument(
        "--three-tier",
        action="store_true",
        help="plan only cut pairs with an aggregator part (a < c); a == c is two-tier",
    )
    p.add_argument(
        "--weights",
        default="1,1,1",
        type=_weights,
        help="objective weights loss,delay,bytes (the guard uses delay,bytes)",
    )
    p.add_argument(
        "--reference",
        default="hsfl",
        choices=("hsfl", "median"),
        help="delay/bytes references (deterministic): HSFL at --fixed-cuts with "
        "the round-robin assignment, or the median cut pair",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of the planned run (default 5, quick 4): the surrogate's budget",
    )
    p.add_argument("--fixed-cuts", default="1,2", type=_pair, help="HSFL baseline cuts a,c")
    p.add_argument("--sfl-cut", type=int, default=1, help="SFL baseline cut")
    p.add_argument("--capacity", default=None, help="most clients per aggregator, comma list")
    p.add_argument(
        "--pilots",
        type=int,
        default=None,
        help="pilot cut pairs (default: every legal pair, at most 6)",
    )
    p.add_argument(
        "--pilot-steps",
        type=int,
        default=None,
        help="optimiser steps (client batches) per pilot (default: 1/4 of the "
        "run's, at least 4 rounds)",
    )
    p.add_argument("--pilot-train-limit", type=int, default=None, help="training rows per pilot")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--local-epochs", type=int, default=1)
    p.add_argument("--partition", default="iid", help="iid, dirichlet:ALPHA or site")
    p.add_argument("--train-limit", type=int, default=None, help="training rows per run")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small defaults (2 seeds, 4 rounds, 600 rows, 8 clients, 3 aggregators)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-run log")


def options(args: argparse.Namespace) -> dict:
    """The :class:`~flowsplit.planner.study.StudyConfig` fields of ``add_common``'s options."""
    return {
        "view": args.view,
        "n_clients": args.clients,
        "n_aggregators": args.aggregators,
        "topology_seed": args.topology_seed,
        "family": args.family,
        "weights": args.weights,
        "objective": args.objective,
        "acc_tolerance": _tolerance(args.acc_tolerance),
        "three_tier": args.three_tier,
        "rounds": args.rounds,
        "reference": args.reference,
        "fixed_cuts": args.fixed_cuts,
        "sfl_cut": args.sfl_cut,
        "capacity": _capacity(args.capacity),
        "n_pilots": args.pilots,
        "pilot_steps": args.pilot_steps,
        "pilot_train_limit": args.pilot_train_limit,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "local_epochs": args.local_epochs,
        "partition": args.partition,
        "train_limit": args.train_limit,
        "threads": args.threads,
        "only_cuts": budget_pairs(
            args.leakage_file, args.leakage_measure, args.max_leakage, model=args.model
        ),
    }


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
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common(p)
    p.add_argument("-o", "--out", required=True, type=Path, help="plan JSON to write")
    p.add_argument("--seed", type=int, default=0, help="partition and pilot seed")
    p.add_argument(
        "--no-pilots",
        action="store_true",
        help="no pilots: plan for delay and bytes only, and say so (weighted: the "
        "loss weight must be 0)",
    )
    p.set_defaults(func=cmd_plan)
    return p


def cmd_plan(args: argparse.Namespace) -> int:
    from flowsplit.data.store import atomic_write_json
    from flowsplit.federated.system.topology import topology_to_toml
    from flowsplit.planner.study import jsonable, make_study, plan_seed, resolve_study_config

    weights = args.weights
    if args.no_pilots and args.objective == "weighted" and weights[0] > 0:
        raise ConfigError(
            "--no-pilots with --objective weighted needs a loss weight of 0, e.g. --weights 0,1,1"
        )
    cfg = resolve_study_config(
        args.quick, model=args.model, topology=args.topology, **options(args)
    )
    t0 = time.perf_counter()
    study = make_study(
        args.dataset, cfg, quiet=args.quiet, pilots=not args.no_pilots, seed=args.seed
    )
    plans = plan_seed(study, args.seed)
    chosen = plans["acc-aware"]
    doc = {
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
        "run": {
            "scheme": chosen.scheme,
            "batch_size": cfg.batch_size,
            "local_epochs": cfg.local_epochs,
            "partition": cfg.partition,
            "train_limit": cfg.train_limit,
            "seed": args.seed,
            "model": cfg.model,
            "view": cfg.view,
            "rounds": cfg.rounds,
        },
        "topology_toml": topology_to_toml(study.topology),
        "config": cfg.to_dict(),
        "total_s": time.perf_counter() - t0,
    }
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
    return 0


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"plan": add_plan_parser}
