"""``flowsplit sfl plan`` (added to the ``sfl`` group by :mod:`flowsplit.cli`).

:func:`sfl_commands` names the builders; ``add_plan_parser(sfl_subparsers)`` adds the
sub-parser and sets ``func``. The options it shares with ``sfl compare``
(:mod:`flowsplit.experiments.sfl.commands`) come from the study's config
(:func:`flowsplit.planner.study_config.add_study_arguments`).
"""

from __future__ import annotations

import argparse
import logging
import time

from flowsplit.config_args import add_out_option, command_parser, fields_of, parse_seed, path_arg
from flowsplit.config_file import add_config_file_option
from flowsplit.errors import ConfigError
from flowsplit.planner.study_config import add_study_arguments, study_options

log = logging.getLogger("flowsplit.planner")


def add_plan_parser(sfl_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """choose cut points and a client -> aggregator assignment (accuracy-aware)

    Run short pilots at a few cut pairs, fit the loss surrogate, and choose the cuts and
    assignment minimising w_loss * loss + w_delay * delay / delay_ref + w_bytes * bytes /
    bytes_ref; write the plan (with the baselines' predicted costs) as JSON.
    """
    p = command_parser(sfl_subparsers, "plan", add_plan_parser)
    add_study_arguments(p)
    add_out_option(p, "plan JSON file to write", parse=path_arg)
    add_config_file_option(p)  # --config FILE.toml: the StudyConfig's fields
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
    given = study_options(args)
    cfg = resolve_study_config(bool(given.pop("quick", False)), **given)
    if args.no_pilots and cfg.planner.objective == "weighted" and cfg.planner.weights[0] > 0:
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


PLAN_RUN_FIELDS = ("batch_size", "local_epochs", "partition", "train_limit", "rounds")
"""The study's run settings (``StudyConfig.run``) a plan.json's ``run`` hands to ``sfl
run --plan`` as they are, with the model choice (:data:`PLAN_MODEL_FIELDS`)."""
PLAN_MODEL_FIELDS = ("model", "view", "model_options")


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
        "run": {
            "scheme": chosen.scheme,
            "seed": seed,
            **fields_of(cfg.run, PLAN_RUN_FIELDS),
            **fields_of(cfg, PLAN_MODEL_FIELDS),
        },
        "topology_toml": topology_to_toml(study.topology),
        "config": cfg.to_dict(),
        "total_s": total_s,
    }


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"plan": add_plan_parser}
