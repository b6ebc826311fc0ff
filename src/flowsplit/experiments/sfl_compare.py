"""``flowsplit sfl compare``: SFL, HSFL, the delay-only and the accuracy-aware planner,
trained on the same data, topology and seeds, then compared against HSFL.

Schemes (SFL.md, "The planner"):

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowsplit.data.store import atomic_write_json
from flowsplit.errors import ConfigError
from flowsplit.experiments.sfl_analysis import ablation, baseline_summary, summarise
from flowsplit.experiments.sfl_baselines import BASELINES, run_baselines
from flowsplit.experiments.sfl_report import write_report
from flowsplit.federated.results import write_run
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.topology import write_topology
from flowsplit.planner import study as study_mod
from flowsplit.planner.study import Study, StudyConfig, base_config, make_study, plan_seed, resolve

log = logging.getLogger("flowsplit.experiments")

SCHEMES = ("sfl", "hsfl", "hsfl-greedy", "delay", "acc-aware")
REFERENCE = "hsfl"
QUICK = {**study_mod.QUICK, "seeds": (0, 1)}
FULL = {**study_mod.FULL, "seeds": (0, 1, 2, 3, 4)}


@dataclass
class CompareConfig(StudyConfig):
    """What ``sfl compare`` runs (saved in results.json): a study plus its schemes,
    seeds and target accuracy."""

    schemes: tuple[str, ...] = SCHEMES
    """Schemes to run; ``hsfl`` (the reference) is always added."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Run seeds (partition, initial weights, batch order, random assignments)."""
    target_accuracy: float | None = None
    """Accuracy whose first reaching is timed (default: 0.95 x HSFL's mean final accuracy)."""
    baselines: tuple[str, ...] = BASELINES
    """Baselines that split nothing (:mod:`flowsplit.experiments.sfl_baselines`)."""

    def validate(self) -> None:
        super().validate()
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad:
            raise ConfigError(
                f"--schemes: unknown {', '.join(bad)}; choose from {', '.join(SCHEMES)}"
            )
        if not self.seeds:
            raise ConfigError("--seeds: give at least one seed")
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise ConfigError(
                f"--baselines: unknown {', '.join(bad)}; choose from {', '.join(BASELINES)}"
            )


def resolve_config(quick: bool = False, **options: Any) -> CompareConfig:
    """A :class:`CompareConfig` from keyword options; ``None`` takes the mode's default."""
    schemes = list(options.pop("schemes", None) or SCHEMES)
    bad = [s for s in schemes if s not in SCHEMES]
    if bad:
        raise ConfigError(f"--schemes: unknown {', '.join(bad)}; choose from {', '.join(SCHEMES)}")
    if REFERENCE not in schemes:
        schemes.insert(0, REFERENCE)  # differences are against HSFL, so it always runs
    options["schemes"] = tuple(s for s in SCHEMES if s in schemes)
    return resolve(CompareConfig, QUICK if quick else FULL, quick, options)


def run_sfl_compare(
    dataset_dir: str | Path,
    out_dir: str | Path,
    *,
    model: str = "cnn",
    schemes: tuple[str, ...] | list[str] = SCHEMES,
    topology: str = "heterogeneous",
    seeds: tuple[int, ...] | list[int] | None = None,
    rounds: int | None = None,
    quick: bool = False,
    model_fn=None,
    quiet: bool = False,
    **options: Any,
) -> Path:
    """Run the comparison and write its report; returns the path of ``report.html``.

    ``quick`` shrinks the defaults (2 seeds, 3 rounds, 600 training rows, 8 clients,
    3 aggregators, 3 one-round pilots) so the embedded lab capture takes a minute or
    two on two cores; explicit arguments win. ``options`` are :class:`CompareConfig`
    fields; ``model_fn`` replaces the registry model (tests).
    """
    cfg = resolve_config(quick, model=model, schemes=schemes, topology=topology, seeds=seeds,
                         rounds=rounds, **options)  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    study = make_study(dataset_dir, cfg, model_fn=model_fn, quiet=quiet,
                       pilots="acc-aware" in cfg.schemes, seed=cfg.seeds[0])  # fmt: skip
    write_topology(study.topology, out / "topology.toml")
    runs, plans, baselines = [], {}, []
    for seed in cfg.seeds:
        seed_plans = plan_seed(study, seed, cfg.schemes)
        plans[str(seed)] = {k: p.to_dict() for k, p in seed_plans.items()}
        for scheme in cfg.schemes:
            runs.append(_run_one(study, scheme, seed, seed_plans[scheme], out, quiet))
        if cfg.baselines:
            setup = prepare_run(base_config(cfg, seed), dataset=study.dataset,
                                model_fn=study.model_fn, topology=study.topology,
                                profile=study.profile)  # fmt: skip
            for name, rec in run_baselines(setup, cfg.baselines).items():
                baselines.append({"baseline": name, "seed": seed, **rec})
    atomic_write_json(out / "plans.json", plans)
    results = analyse(study, runs, plans, wall_s=time.perf_counter() - t0, dataset_dir=dataset_dir)
    results["baselines"] = baseline_summary(baselines, runs)
    results["ablation"] = ablation(runs)
    return write_report(out, results)


def _run_one(study: Study, scheme: str, seed: int, plan, out: Path, quiet: bool) -> dict:
    cfg = study.config
    engine_scheme = "sfl" if scheme == "sfl" else cfg.family
    sfl_cfg = base_config(cfg, seed, scheme=engine_scheme, cuts=tuple(plan.cuts))
    setup = prepare_run(sfl_cfg, dataset=study.dataset, model_fn=study.model_fn,
                        topology=study.topology, profile=study.profile,
                        assignment=plan.assignment)  # fmt: skip
    t0 = time.perf_counter()
    result = run_simulation(setup)
    wall = time.perf_counter() - t0
    result.info = {"compare_scheme": scheme, "plan": plan.to_dict()}
    write_run(out / "runs" / f"{scheme}-seed{seed}", copy.copy(result))
    history = result.history
    if not quiet:
        last = history[-1]
        log.info("%-9s seed %d cuts %s: acc %.4f, macro-F1 %.4f, delay %.2f s, %.1f MB (%.1f s)",
                 scheme, seed, tuple(plan.cuts), last["accuracy"], last["macro_f1"],
                 last["clock_s"], result.totals()["bytes_total"] / 1e6, wall)  # fmt: skip
    return {
        "scheme": scheme,
        "seed": seed,
        "cuts": list(plan.cuts),
        "engine_scheme": engine_scheme,
        "wall_s": wall,
        "predicted_delay_s": plan.delay_s,
        "predicted_bytes": plan.bytes,
        "history": [
            {
                k: r[k]
                for k in (
                    "round",
                    "accuracy",
                    "macro_f1",
                    "loss",
                    "delay_s",
                    "clock_s",
                    "bytes_total",
                )
            }
            for r in history
        ],  # fmt: skip
        "totals": result.totals(),
    }


def analyse(study: Study, runs: list[dict], plans: dict, *, wall_s: float, dataset_dir) -> dict:
    """Aggregate runs into the results document (see :mod:`flowsplit.experiments.sfl_analysis`)."""
    return summarise(study, runs, plans, wall_s=wall_s, dataset_dir=str(dataset_dir))


__all__ = [
    "SCHEMES",
    "CompareConfig",
    "Study",
    "resolve_config",
    "run_sfl_compare",
]
