"""``flowsplit sfl compare``: SFL, HSFL, the delay-only and the accuracy-aware planner,
trained on the same data, topology and seeds, then compared against HSFL.

Schemes (SFL.md, "The planner"):

- ``sfl``: SplitFed v1, one cut ``sfl_cut``; clients reach the server through the
  aggregator of a seeded random assignment (a relay: no compute there);
- ``hsfl``: three tiers with ``fixed_cuts`` and a seeded random assignment (the reference);
- ``delay``: the planner with weights (0, 1, 0): cuts and assignment for delay alone;
- ``acc-aware``: the planner with the objective's weights and the pilot surrogate.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flowsplit.errors import ConfigError

log = logging.getLogger("flowsplit.planner")

SCHEMES = ("sfl", "hsfl", "delay", "acc-aware")
REFERENCE = "hsfl"
QUICK = {"seeds": (0, 1), "rounds": 3, "train_limit": 600, "n_pilots": 3,
         "pilot_train_limit": None, "n_clients": 8, "n_aggregators": 3}  # fmt: skip
FULL = {"seeds": (0, 1, 2, 3, 4), "rounds": 5, "train_limit": None, "n_pilots": 4,
        "pilot_train_limit": None, "n_clients": None, "n_aggregators": None}  # fmt: skip


@dataclass
class CompareConfig:
    """Everything that decides what ``sfl compare`` runs (saved in results.json)."""

    model: str = "cnn"
    """Neural model (cnn, lstm, convlstm, convgru)."""
    view: str | None = None
    """Dataset view (default: the model's)."""
    schemes: tuple[str, ...] = SCHEMES
    """Schemes to run; ``hsfl`` (the reference) is always added."""
    topology: str = "heterogeneous"
    """Topology preset or TOML file."""
    n_clients: int | None = None
    """Clients (default: the preset's, or QUICK's in quick mode)."""
    n_aggregators: int | None = None
    """Aggregators (default: the preset's, or QUICK's)."""
    topology_seed: int = 0
    """Seed of a generated topology (the same for every run seed)."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Run seeds (partition, initial weights, batch order, random assignments)."""
    rounds: int = 5
    """Federated rounds per run."""
    family: str = "hsfl"
    """Scheme of the three-tier runs: ``hsfl`` or ``hsfl-ll``."""
    fixed_cuts: tuple[int, int] = (1, 2)
    """HSFL baseline cuts."""
    sfl_cut: int = 1
    """SFL baseline cut."""
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Objective weights loss, delay, bytes of the accuracy-aware planner."""
    reference: str = "hsfl"
    """Objective references: ``hsfl`` or ``median``."""
    n_pilots: int = 4
    """Pilot cut pairs."""
    pilot_rounds: int = 1
    """Rounds per pilot."""
    pilot_train_limit: int | None = None
    """Training rows per pilot (default: as the runs)."""
    batch_size: int = 32
    """Client batch size."""
    lr: float = 1e-3
    """Learning rate of every tier (Adam)."""
    local_epochs: int = 1
    """Local epochs per round."""
    partition: str = "iid"
    """``iid``, ``dirichlet:ALPHA`` or ``site``."""
    train_limit: int | None = None
    """Training rows per run (a seeded subset), for quick runs."""
    target_accuracy: float | None = None
    """Accuracy whose first reaching is timed (default: 0.95 x HSFL's mean final accuracy)."""
    capacity: tuple[int, ...] | None = None
    """Most clients per aggregator (the planners honour it)."""
    threads: int = 1
    """torch threads."""
    quick: bool = False
    """Quick-mode defaults (see :data:`QUICK`)."""

    def validate(self) -> None:
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad:
            raise ConfigError(
                f"--schemes: unknown {', '.join(bad)}; choose from {', '.join(SCHEMES)}"
            )
        if self.family not in ("hsfl", "hsfl-ll"):
            raise ConfigError(f"--family {self.family!r}: choose hsfl or hsfl-ll")
        if not self.seeds:
            raise ConfigError("--seeds: give at least one seed")
        if self.rounds < 1 or self.n_pilots < 1 or self.pilot_rounds < 1:
            raise ConfigError("--rounds, --pilots and --pilot-rounds must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_config(quick: bool = False, **options: Any) -> CompareConfig:
    """A :class:`CompareConfig` from keyword options; ``None`` takes the mode's default."""
    defaults = QUICK if quick else FULL
    known = set(CompareConfig.__dataclass_fields__)
    unknown = set(options) - known
    if unknown:
        raise ConfigError(f"unknown compare option(s): {', '.join(sorted(unknown))}")
    merged = {k: v for k, v in defaults.items()}
    merged.update({k: v for k, v in options.items() if v is not None})
    merged["quick"] = quick
    for key in ("schemes", "seeds", "fixed_cuts", "weights", "capacity"):
        if merged.get(key) is not None:
            merged[key] = tuple(merged[key])
    schemes = list(merged.get("schemes", SCHEMES))
    bad = [s for s in schemes if s not in SCHEMES]
    if bad:
        raise ConfigError(f"--schemes: unknown {', '.join(bad)}; choose from {', '.join(SCHEMES)}")
    if REFERENCE not in schemes:
        schemes.insert(0, REFERENCE)  # differences are against HSFL, so it always runs
    merged["schemes"] = tuple(s for s in SCHEMES if s in schemes)
    cfg = CompareConfig(**merged)
    cfg.validate()
    return cfg


@dataclass
class Study:
    """Shared inputs of every run of a comparison."""

    config: CompareConfig
    dataset: Any
    model_fn: Any
    profile: Any
    topology: Any
    predicted_loss: dict = field(default_factory=dict)
    pilots: list = field(default_factory=list)
    surrogate: dict = field(default_factory=dict)


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
    from flowsplit.federated.topology import write_topology
    from flowsplit.planner.report import write_report

    cfg = resolve_config(quick, model=model, schemes=schemes, topology=topology, seeds=seeds,
                         rounds=rounds, **options)  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    study = make_study(dataset_dir, cfg, model_fn=model_fn, quiet=quiet,
                       pilots="acc-aware" in cfg.schemes)  # fmt: skip
    write_topology(study.topology, out / "topology.toml")
    runs, plans = [], {}
    for seed in cfg.seeds:
        seed_plans = plan_seed(study, seed)
        plans[str(seed)] = {k: p.to_dict() for k, p in seed_plans.items()}
        for scheme in cfg.schemes:
            runs.append(_run_one(study, scheme, seed, seed_plans[scheme], out, quiet))
    from flowsplit.data.store import atomic_write_json

    atomic_write_json(out / "plans.json", plans)
    results = analyse(study, runs, plans, wall_s=time.perf_counter() - t0, dataset_dir=dataset_dir)
    return write_report(out, results)


def make_study(
    dataset_dir, cfg: CompareConfig, *, model_fn=None, quiet: bool = False, pilots: bool = True
) -> Study:
    """Load the data, build and profile the model, resolve the topology, run the pilots."""
    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.profile import profile_model
    from flowsplit.federated.setup import RegistryModel

    torch.set_num_threads(cfg.threads)
    ds = load_dataset(dataset_dir)
    fn = model_fn if model_fn is not None else _registry_model(cfg.model, cfg.view)
    view = cfg.view or getattr(fn, "view", None) or RegistryModel(cfg.model).resolved_view()
    if not ds.has_view(view):
        raise ConfigError(f"dataset {dataset_dir} has no view {view!r}; choose another --view")
    torch.manual_seed(0)
    profile = profile_model(fn(input_shape=ds.view_shape(view), n_classes=ds.n_classes))
    study = Study(cfg, ds, fn, profile, _topology(cfg))
    _check_options_early(study)  # before minutes of pilots, not after
    if pilots:
        _fit_surrogate(study, view, quiet)
    return study


def _check_options_early(study: Study) -> None:
    """The baselines' cuts and the capacities, checked as soon as the model is known."""
    from flowsplit.federated.parts import check_cuts

    cfg, n_blocks = study.config, study.profile.n_blocks
    check_cuts(n_blocks, *cfg.fixed_cuts)
    check_cuts(n_blocks, cfg.sfl_cut, cfg.sfl_cut)
    capacity = cfg.capacity
    if capacity is not None:
        n, a = study.topology.n_clients, study.topology.n_aggregators
        if len(capacity) != a or min(capacity) < 0 or sum(capacity) < n:
            raise ConfigError(
                f"--capacity {','.join(map(str, capacity))}: give {a} non-negative integers "
                f"summing to at least the {n} clients"
            )


def _registry_model(name: str, view: str | None):
    from flowsplit.federated.setup import RegistryModel
    from flowsplit.models.registry import neural_models

    if name not in neural_models():
        raise ConfigError(f"--model {name!r}: choose a neural model ({', '.join(neural_models())})")
    return RegistryModel(name, view)


def _topology(cfg: CompareConfig):
    from flowsplit.federated.presets import resolve_topology

    return resolve_topology(cfg.topology, n_clients=cfg.n_clients,
                            n_aggregators=cfg.n_aggregators, seed=cfg.topology_seed)  # fmt: skip


def base_config(cfg: CompareConfig, seed: int, **kw):
    """The SFLConfig every run of a comparison shares (scheme and cuts set per run)."""
    from flowsplit.federated.config import SFLConfig

    values = {"scheme": cfg.family, "cuts": tuple(cfg.fixed_cuts), "rounds": cfg.rounds,
              "batch_size": cfg.batch_size, "lr": cfg.lr, "local_epochs": cfg.local_epochs,
              "partition": cfg.partition, "seed": seed, "train_limit": cfg.train_limit,
              "threads": cfg.threads, "assign": "random", "eval_split": "test"}  # fmt: skip
    values.update(kw)
    return SFLConfig(**values)


def _fit_surrogate(study: Study, view: str, quiet: bool) -> None:
    from flowsplit.planner.pilots import PilotCost, eval_split_for, run_pilots
    from flowsplit.planner.surrogate import LossSurrogate, choose_pilot_cuts, cut_features

    cfg = study.config
    cuts = choose_pilot_cuts(study.profile.n_blocks, cfg.n_pilots)
    base = base_config(cfg, cfg.seeds[0])
    limit = cfg.pilot_train_limit if cfg.pilot_train_limit is not None else cfg.train_limit
    records = run_pilots(cuts, dataset=study.dataset, model_fn=study.model_fn,
                         topology=study.topology, base=base, rounds=cfg.pilot_rounds,
                         train_limit=limit, quiet=quiet)  # fmt: skip
    legal, x = cut_features(study.profile)
    rows = [legal.index(r.cuts) for r in records]
    model = LossSurrogate().fit(x[rows], [r.loss for r in records])
    pred = model.predict(x)
    study.predicted_loss = {c: float(v) for c, v in zip(legal, pred, strict=True)}
    study.pilots = records
    measured = {r.cuts: r.loss for r in records}
    study.surrogate = {
        **model.to_dict(),
        "cost": PilotCost.of(records).to_dict(),
        "pilots": [r.to_dict() for r in records],
        "table": [{"cuts": list(c), "measured_loss": measured.get(c),
                   "predicted_loss": float(v)} for c, v in zip(legal, pred, strict=True)],
        "eval_split": eval_split_for(study.dataset),
    }  # fmt: skip


def plan_seed(study: Study, seed: int) -> dict:
    """The plan of every scheme for one seed (shard sizes of that seed's partition)."""
    from flowsplit.federated.setup import prepare_run
    from flowsplit.planner.objective import Weights
    from flowsplit.planner.plan import PlannerConfig, plan_fixed, plan_split

    cfg = study.config
    setup = prepare_run(base_config(cfg, seed), dataset=study.dataset, model_fn=study.model_fn,
                        topology=study.topology, profile=study.profile)  # fmt: skip
    topo = setup.topology  # shard sizes filled in
    common = {"family": cfg.family, "fixed_cuts": tuple(cfg.fixed_cuts), "seed": seed,
              "batch_size": cfg.batch_size, "local_epochs": cfg.local_epochs,
              "reference": cfg.reference, "capacity": cfg.capacity}  # fmt: skip
    plans = {}
    acc = None
    if "acc-aware" in cfg.schemes:
        acc = plan_split(study.profile, topo, study.predicted_loss or None,
                         PlannerConfig(weights=Weights(*cfg.weights), **common))  # fmt: skip
        plans["acc-aware"] = acc
    if "delay" in cfg.schemes:
        plans["delay"] = plan_split(study.profile, topo, study.predicted_loss or None,
                                    PlannerConfig(weights=Weights(0.0, 1.0, 0.0), **common))  # fmt: skip
    objective = acc.objective_def if acc is not None else None
    if objective is not None and "delay" in plans:
        # Every plan scored by the same (accuracy-aware) objective, to compare them.
        d = plans["delay"]
        d.objective = float(objective.value(d.predicted_loss, d.delay_s, d.bytes))
    kw = {"seed": seed, "batch_size": cfg.batch_size, "local_epochs": cfg.local_epochs,
          "objective": objective}  # fmt: skip
    plans["hsfl"] = plan_fixed(study.profile, topo, cfg.family, tuple(cfg.fixed_cuts),
                               predicted_loss=study.predicted_loss.get(tuple(cfg.fixed_cuts),
                                                                       float("nan")), **kw)  # fmt: skip
    if "sfl" in cfg.schemes:
        c = int(cfg.sfl_cut)
        plans["sfl"] = plan_fixed(study.profile, topo, "sfl", (c, c), **{**kw, "objective": None})
    return plans


def _run_one(study: Study, scheme: str, seed: int, plan, out: Path, quiet: bool) -> dict:
    from flowsplit.federated.results import write_run
    from flowsplit.federated.setup import prepare_run
    from flowsplit.federated.sim import run_simulation

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
    """Aggregate runs into the results document (see :mod:`flowsplit.planner.analysis`)."""
    from flowsplit.planner.analysis import summarise

    return summarise(study, runs, plans, wall_s=wall_s, dataset_dir=str(dataset_dir))


__all__ = [
    "SCHEMES",
    "CompareConfig",
    "Study",
    "base_config",
    "make_study",
    "plan_seed",
    "resolve_config",
    "run_sfl_compare",
]
