"""``flowsplit sfl compare``: SFL, HSFL, the delay-only and the accuracy-aware planner,
trained on the same data, topology and seeds, then compared against HSFL.

Schemes (docs/sfl-system-model.md, "The planner"):

- ``sfl``: SplitFed v1, one cut ``sfl_cut``; clients reach the server through the
  aggregator of a seeded random assignment (a relay: no compute there);
- ``hsfl``: three tiers with ``fixed_cuts`` and a seeded random assignment (the reference,
  the research's baseline);
- ``hsfl-greedy``: the same cuts with the planner's delay-aware greedy assignment (so the
  planner's gain splits into a cut-choice part and an assignment part);
- ``delay``: the planner with weights (0, 1, 0): cuts and assignment for delay alone;
- ``acc-aware``: the planner, accuracy first (the guard; ``objective="weighted"`` for the
  weighted sum), with the pilot surrogate.

The three-tier schemes train with ``family`` (``hsfl`` end to end, or ``hsfl-ll``).
Pilots run once, at the first seed, on the validation split; assignments are planned
per seed (shard sizes may differ by seed). Every run is the in-process simulation,
evaluated on the test split after every round. Writes ``OUT/results.json``,
``OUT/report.md``, ``OUT/report.html``, ``OUT/plans.json``, ``OUT/topology.toml`` and
one run directory per scheme and seed under ``OUT/runs``.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowsplit.config_args import check_names
from flowsplit.config_file import CONFIG_NAME, write_config_toml
from flowsplit.data.store import Dataset, load_dataset
from flowsplit.errors import ConfigError, InputError
from flowsplit.experiments.sfl.analysis import (
    ablation,
    baseline_summary,
    summarise,
    summary_lines,
)
from flowsplit.experiments.sfl.baselines import run_baselines
from flowsplit.experiments.sfl.config import (
    ALL_SCHEMES,
    FULL,
    QUICK,
    REFERENCE,
    REPLANNED,
    SCHEMES,
    SFLCompareConfig,
    replanned_name,
)
from flowsplit.experiments.sfl.report import write_report
from flowsplit.experiments.sfl.result import (
    BaselineRun,
    BestFixed,
    CutRow,
    RoundRow,
    RunTotals,
    SFLCompareResult,
    SFLRun,
)
from flowsplit.federated.metrics import evaluate_model
from flowsplit.federated.results import finish_run, write_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.topology import write_topology
from flowsplit.outputs import atomic_write_json
from flowsplit.planner.objective import Weights
from flowsplit.planner.pilots import eval_split_for
from flowsplit.planner.plan import plan_split
from flowsplit.planner.reassign import place_clients
from flowsplit.planner.replan import ReplanPolicy, predicted_rounds
from flowsplit.planner.study import (
    Study,
    base_config,
    make_study,
    plan_seed,
    planner_config,
    resolve,
)

log = logging.getLogger("flowsplit.experiments")


def resolve_config(quick: bool = False, **options: Any) -> SFLCompareConfig:
    """A :class:`SFLCompareConfig` from keyword options; ``None`` takes the mode's default."""
    given = options.pop("schemes", None)
    if given is not None and not given:  # an empty list used to run all five
        raise ConfigError(f"--schemes: give at least one of {', '.join(ALL_SCHEMES)}")
    schemes = list(given or SCHEMES)
    check_names("--schemes", schemes, ALL_SCHEMES)  # before the reordering drops them
    if REFERENCE not in schemes:
        schemes.insert(0, REFERENCE)  # differences are against HSFL, so it always runs
    options["schemes"] = tuple(s for s in ALL_SCHEMES if s in schemes)
    return resolve(SFLCompareConfig, QUICK if quick else FULL, quick, options)


def run_sfl_compare(
    dataset_dir: str | Path,
    out_dir: str | Path,
    config: SFLCompareConfig | None = None,
    *,
    quick: bool = False,
    model_fn=None,
    quiet: bool = False,
    **options: Any,
) -> Path:
    """Run the comparison ``config`` and write its report; returns the path of
    ``report.html``.

    Without ``config``, one is made from ``options`` (:class:`SFLCompareConfig` fields;
    ``None`` takes the mode's default): ``quick`` takes quick mode's recipe
    (:data:`~flowsplit.experiments.sfl.config.QUICK`: fewer seeds, rounds, training
    rows, clients and aggregators) so the embedded lab capture takes a minute or two on
    two cores; explicit options win. ``model_fn`` replaces the registry model (tests).
    """
    if config is not None and (options or quick):
        raise TypeError("run_sfl_compare(config=...): give the options in the config")
    cfg = config if config is not None else resolve_config(quick, **options)
    ds = dataset_dir if isinstance(dataset_dir, Dataset) else load_dataset(dataset_dir)
    split = base_config(cfg, cfg.seeds[0]).eval_split
    if not len(ds.split_indices(split)):  # found now, not after minutes of pilots
        raise InputError(ds.root, f"its {split} split is empty: sfl compare scores every run on it")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The effective config, which `sfl compare DATASET -o OUT --config FILE` runs again.
    write_config_toml(
        out / CONFIG_NAME,
        cfg,
        header="flowsplit sfl compare: the effective config (sfl compare DATASET -o OUT "
        "--config FILE)",
    )
    t0 = time.perf_counter()
    study = make_study(
        ds,
        cfg,
        model_fn=model_fn,
        quiet=quiet,
        pilots="acc-aware" in cfg.schemes,
        seed=cfg.seeds[0],
    )
    write_topology(study.topology, out / "topology.toml")
    runs, plans, baselines, per_cut = [], {}, [], []
    for seed in cfg.seeds:
        plans[str(seed)] = _run_seed(study, cfg, seed, out, quiet, runs, per_cut, baselines)
    atomic_write_json(out / "plans.json", plans)
    if per_cut:  # best-fixed's runs are those of the pair best on validation
        best = _best_pair(per_cut)
        runs += [replace(r, scheme="best-fixed") for r in per_cut if tuple(r.cuts) == best]
    results = analyse(study, runs, plans, wall_s=time.perf_counter() - t0, dataset_dir=dataset_dir)
    if per_cut:
        results.best_fixed = _best_fixed(per_cut)
    results.baselines = baseline_summary(baselines, runs)
    results.ablation = ablation(runs)
    results.summary = summary_lines(results)
    return write_report(out, results)


def _run_seed(
    study, cfg: SFLCompareConfig, seed: int, out: Path, quiet: bool, runs, per_cut, baselines
) -> dict[str, Any]:
    """Plan and run every scheme of ``cfg`` for ``seed`` (appended to ``runs``; the
    best-fixed candidates' runs to ``per_cut``; the baselines' to ``baselines``); the
    seed's plans as ``plans.json`` keeps them."""
    seed_plans = plan_seed(study, seed, cfg.schemes)
    planned = {k: p.to_dict() for k, p in seed_plans.items()}  # as planned, before the runs
    for scheme in cfg.schemes:
        if scheme != "best-fixed":
            runs.append(_run_one(study, scheme, seed, seed_plans[scheme], out, quiet))
        if scheme in REPLANNED and cfg.replan == "every-round":
            # The same first plan, its assignment re-planned before every round.
            twin = replanned_name(scheme)
            policy = ReplanPolicy(place_clients, capacity=cfg.planner.capacity)
            runs.append(_run_one(study, twin, seed, seed_plans[scheme], out, quiet, policy))
    if "best-fixed" in cfg.schemes:
        per_cut += [
            _run_one(study, f"cut-{a},{c}", seed, plan, out, quiet)
            for (a, c), plan in cut_plans(study, seed).items()
        ]
    if cfg.baselines:
        setup = study.prepare(base_config(cfg, seed))
        for name, rec in run_baselines(setup, cfg.baselines).items():
            baselines.append(BaselineRun.from_record(name, seed, rec))
    return planned


def _run_one(
    study: Study, scheme: str, seed: int, plan, out: Path, quiet: bool, policy=None
) -> SFLRun:
    """One simulated run of ``plan`` (``policy``: the per-round assignment policy, e.g.
    re-planning; default: keep the plan's assignment)."""
    cfg = study.config
    engine_scheme = "sfl" if scheme == "sfl" else cfg.planner.family  # also the cut- runs
    sfl_cfg = base_config(cfg, seed, scheme=engine_scheme, cuts=tuple(plan.cuts))
    setup = study.prepare(sfl_cfg, assignment=plan.assignment)
    t0 = time.perf_counter()
    result = run_simulation(setup, policy=policy)
    wall = time.perf_counter() - t0
    result.info = {**(result.info or {}), "compare_scheme": scheme, "plan": plan.to_dict()}
    if policy is not None:
        result.info["replan_log"] = list(getattr(policy, "log", []))
    run_dir = out / "runs" / f"{scheme}-seed{seed}"
    write_run(run_dir, copy.copy(result))
    # Per-class scores, test predictions and the whole model, as `sfl run` records them.
    finish_run(run_dir, setup, result.model_state, study.model_fn)
    history = result.history
    rows = [RoundRow.from_record(r) for r in history]
    totals = RunTotals.from_totals(result.totals())
    if not quiet:
        last = rows[-1]
        log.info(
            "%-9s seed %d cuts %s: acc %.4f, macro-F1 %.4f, delay %.2f s, %.1f MB (%.1f s)",
            scheme,
            seed,
            tuple(plan.cuts),
            last.accuracy,
            last.macro_f1,
            last.clock_s,
            totals.bytes_total / 1e6,
            wall,
        )
    # What the cost model predicts for each round: the plan's figures on an unchanging
    # network; on a trace (or re-planned, or sampled) each round's network, participants
    # and moves.
    sampled = any("sampled" in r for r in history)
    if setup.topology.trace or policy is not None or sampled:
        per_round = predicted_rounds(setup, history, plan.assignment)
    else:
        per_round = [(plan.delay_s, plan.bytes)] * len(history)
    return SFLRun(
        scheme=scheme,
        seed=seed,
        cuts=list(plan.cuts),
        history=rows,
        totals=totals,
        val_accuracy=_val_accuracy(setup, result),
        engine_scheme=engine_scheme,
        wall_s=wall,
        predicted_delay_s=plan.delay_s,
        predicted_bytes=plan.bytes,
        predicted_delay_per_round_s=[d for d, _ in per_round],
        predicted_bytes_per_round=[b for _, b in per_round],
        moves=int(sum(len(r.get("reassigned", [])) for r in history)),
    )


def cut_plans(study: Study, seed: int) -> dict:
    """Every legal cut pair with the planner's own assignment for it (delay/bytes
    objective, the accuracy-aware plan's weights and references)."""
    cfg = study.config
    topo = study.prepare(base_config(cfg, seed)).topology.at_round(0)  # as plan_seed's
    out = {}
    for pair in study.profile.legal_cuts():
        config = planner_config(
            cfg,
            seed,
            exclude=("three_tier", "acc_tolerance"),
            weights=Weights(0.0, *cfg.planner.weights[1:]),
            mode="weighted",
            only_cuts=(pair,),
        )
        try:
            out[pair] = plan_split(study.profile, topo, None, config)
        except ConfigError:
            continue  # its client part does not fit the clients' memory
    return out


def _best_pair(per_cut: list[SFLRun]) -> tuple[int, int]:
    pairs = sorted({tuple(r.cuts) for r in per_cut})
    val = {p: np.mean([r.val_accuracy for r in per_cut if tuple(r.cuts) == p]) for p in pairs}
    return max(pairs, key=lambda p: val[p])


def _best_fixed(per_cut: list[SFLRun]) -> BestFixed:
    """Every legal pair's mean final validation and test accuracy, and the choice."""
    rows = []
    for p in sorted({tuple(r.cuts) for r in per_cut}):
        rs = [r for r in per_cut if tuple(r.cuts) == p]
        rows.append(
            CutRow(
                cuts=list(p),
                val_accuracy=float(np.mean([r.val_accuracy for r in rs])),
                test_accuracy=float(np.mean([r.final.accuracy for r in rs])),
                n_seeds=len(rs),
            )
        )
    return BestFixed(
        chosen=list(_best_pair(per_cut)),
        per_cut=rows,
        rule="the pair with the best mean final validation accuracy over seeds",
    )


def _val_accuracy(setup, result) -> float:
    """Final global model's accuracy on the validation split (train if there is none)."""
    ds = setup.dataset
    rows = ds.split_indices(eval_split_for(ds))
    x = torch.from_numpy(np.ascontiguousarray(ds.view(setup.view)[rows]))
    y = torch.from_numpy(ds.labels[rows].astype(np.int64))
    model = torch.nn.Sequential(*(m.part for m in setup.tier_modules()))
    model.load_state_dict(result.model_state)
    return float(evaluate_model(model, x, y, ds.n_classes)["accuracy"])


def analyse(
    study: Study, runs: list[SFLRun], plans: dict, *, wall_s: float, dataset_dir
) -> SFLCompareResult:
    """Aggregate runs into the study's result (see
    :mod:`flowsplit.experiments.sfl.analysis`)."""
    return summarise(study, runs, plans, wall_s=wall_s, dataset_dir=str(dataset_dir))


__all__ = [
    "ALL_SCHEMES",
    "SCHEMES",
    "SFLCompareConfig",
    "Study",
    "resolve_config",
    "run_sfl_compare",
]
