"""The inputs every plan of one study shares: data, model profile, topology, pilots.

A *study* is what ``flowsplit sfl plan`` (one seed) and ``flowsplit sfl compare``
(many seeds, in :mod:`flowsplit.experiments.sfl.compare`) plan from: the dataset, the
model and its block profile, the topology, and the accuracy surrogate fitted on
pilot runs (:mod:`flowsplit.planner.pilots`, :mod:`flowsplit.planner.surrogate`).
:func:`plan_seed` turns a study into the plans of the planner and of its baselines
for one seed's partition.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from flowsplit.errors import ConfigError
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.setup import RegistryModel, prepare_run
from flowsplit.federated.system.parts import check_cuts
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.federated.system.profile import profile_model
from flowsplit.federated.system.topology import resolve_trace
from flowsplit.planner.objective import Weights
from flowsplit.planner.pilots import (
    PilotCost,
    eval_split_for,
    run_pilots,
    steps_per_round,
)
from flowsplit.planner.plan import PlannerConfig, plan_fixed, plan_split
from flowsplit.planner.study_config import (  # re-exported: the study's configuration
    FULL,
    MAX_PILOTS,
    PILOT_FRACTION,
    PLANS,
    QUICK,
    StudyConfig,
    resolve,
)
from flowsplit.planner.surrogate import choose_pilot_cuts, predict_accuracy
from flowsplit.util import jsonable


def resolve_study_config(quick: bool = False, **options: Any) -> StudyConfig:
    """A :class:`StudyConfig`; ``quick`` picks :data:`QUICK` over :data:`FULL`."""
    return resolve(StudyConfig, QUICK if quick else FULL, quick, options)


@dataclass
class Study:
    """Shared inputs of every plan and run of a study."""

    config: StudyConfig
    dataset: Any
    model_fn: Any
    profile: Any
    topology: Any
    predicted_loss: dict = field(default_factory=dict)
    predicted_accuracy: dict = field(default_factory=dict)
    pilots: list = field(default_factory=list)
    surrogate: dict = field(default_factory=dict)

    def prepare(self, config: Any, **kwargs: Any) -> Any:
        """``prepare_run`` of ``config`` on this study's data, model, topology and profile
        (``kwargs``: its other keywords, e.g. ``assignment``)."""
        return prepare_run(
            config,
            dataset=self.dataset,
            model_fn=self.model_fn,
            topology=self.topology,
            profile=self.profile,
            **kwargs,
        )


def make_study(
    dataset_dir,
    cfg: StudyConfig,
    *,
    model_fn=None,
    quiet: bool = False,
    pilots: bool = True,
    seed: int = 0,
) -> Study:
    """Load the data (``dataset_dir``, or a :class:`~flowsplit.data.store.Dataset`
    already loaded), build and profile the model, resolve the topology, run the pilots
    (with ``seed``'s partition and initial weights)."""
    import torch

    from flowsplit.data.store import Dataset, load_dataset

    torch.set_num_threads(cfg.run.threads)
    ds = dataset_dir if isinstance(dataset_dir, Dataset) else load_dataset(dataset_dir)
    fn = (
        model_fn
        if model_fn is not None
        else registry_model(
            cfg.model, cfg.view, **({"options": cfg.model_options} if cfg.model_options else {})
        )
    )
    view = cfg.view or getattr(fn, "view", None) or RegistryModel(cfg.model).resolved_view()
    if not ds.has_view(view):
        raise ConfigError(f"dataset {ds.root} has no view {view!r}; choose another --view")
    torch.manual_seed(0)
    profile = profile_model(fn(input_shape=ds.view_shape(view), n_classes=ds.n_classes))
    study = Study(cfg, ds, fn, profile, _topology(cfg))
    check_options_early(study)  # before minutes of pilots, not after
    if pilots:
        fit_surrogate(study, quiet, seed=seed)
    return study


def check_options_early(study: Study) -> None:
    """The baselines' cuts and the capacities, checked as soon as the model is known."""
    cfg, n_blocks = study.config, study.profile.n_blocks
    n, a = study.topology.n_clients, study.topology.n_aggregators
    if a > n:  # as sfl run refuses it: a plan for it could not be run
        raise ConfigError(
            f"{a} aggregators for {n} clients: some aggregator would serve no client; "
            "give --aggregators at most --clients"
        )
    check_cuts(n_blocks, *cfg.planner.fixed_cuts)
    check_cuts(n_blocks, cfg.planner.sfl_cut, cfg.planner.sfl_cut)
    capacity = cfg.planner.capacity
    if capacity is not None and (len(capacity) != a or min(capacity) < 0 or sum(capacity) < n):
        raise ConfigError(
            f"--capacity {','.join(map(str, capacity))}: give {a} non-negative integers "
            f"summing to at least the {n} clients"
        )


def registry_model(name: str, view: str | None, options: dict[str, Any] | None = None):
    """The registry's neural model ``name`` (a one-line error for any other name)."""
    from flowsplit.models.registry import neural_models

    if name not in neural_models():
        raise ConfigError(f"--model {name!r}: choose a neural model ({', '.join(neural_models())})")
    return RegistryModel(name, view, dict(options or {}))


def _topology(cfg: StudyConfig):
    base = resolve_topology(
        cfg.topology,
        n_clients=cfg.n_clients,
        n_aggregators=cfg.n_aggregators,
        seed=cfg.topology_seed,
    )
    return resolve_trace(base, cfg.trace, rounds=cfg.run.rounds)


def trace_note(topology) -> dict | None:
    """What a plan made on ``topology`` says about its trace (None: it has none).

    A plan is made on round 1's network: a trace is a replay of what happened (or a
    seeded draw), which a planner on the server does not know in advance; the rounds
    after the first are re-planned by ``sfl run --replan every-round`` (assignment
    only: see :mod:`flowsplit.planner.replan` for why the cuts stay)."""
    if not topology.trace:
        return None
    later = sorted({e.round for e in topology.trace if e.round > 1})
    return {
        "events": len(topology.trace),
        "planned_on": "round 1",
        "round_1_events": sum(1 for e in topology.trace if e.round <= 1),
        "later_change_rounds": later,
        "note": "planned on round 1's network; the trace's later changes are not foreseen "
        "(re-plan them with sfl run --replan every-round, which moves clients, not cuts)",
    }


def base_config(cfg: StudyConfig, seed: int, **kw) -> SFLConfig:
    """The SFLConfig every run of a study shares (scheme and cuts set per run): the
    study's ``run`` section (sampling included: every run samples alike), the
    baseline's scheme and cuts, ``seed``, random assignment, scored on test."""
    per_run = {
        "scheme": cfg.planner.family,
        "cuts": tuple(cfg.planner.fixed_cuts),
        "seed": seed,
        "assign": "random",
        "eval_split": "test",
    }
    return cfg.run.sfl_config(**{**per_run, **kw})


PLANNER_OWN = ("weights",)
"""The study's fields named as a :class:`PlannerConfig` field that it does not hand over
as they are: the study's weights are a tuple, a plan's :class:`Weights` come per plan."""


def planner_config(
    cfg: StudyConfig, seed: int, *, exclude: tuple[str, ...] = (), **kw
) -> PlannerConfig:
    """The PlannerConfig of a study's plans for ``seed``: the fields of the study's
    ``run`` and ``planner`` sections that a :class:`PlannerConfig` has under the same
    names (the runs' batch size and local epochs; the family, baseline cuts, references,
    capacity, accuracy tolerance and cut restrictions), but ``exclude``; and ``kw``
    (weights, mode)."""
    names = {f.name for f in fields(PlannerConfig)} - {*PLANNER_OWN, *exclude}
    sections = (asdict(cfg.run), asdict(cfg.planner))
    values = {k: v for section in sections for k, v in section.items() if k in names}
    return PlannerConfig(**{**values, "seed": seed, **kw})


def fit_surrogate(study: Study, quiet: bool, *, seed: int = 0) -> None:
    """Run the pilots (``seed``'s partition) and fit the surrogate; fills the study's
    ``predicted_accuracy``, ``predicted_loss``, ``pilots`` and ``surrogate``.

    Each pilot trains :attr:`StudyConfig.pilot_steps` optimiser steps; the surrogate
    extrapolates the pilots' validation curves to the run's budget (``rounds`` rounds
    of the same partition), see :func:`~flowsplit.planner.surrogate.predict_accuracy`.
    """
    cfg = study.config
    legal = study.profile.legal_cuts()
    n_pilots = cfg.n_pilots or min(len(legal), MAX_PILOTS)
    cuts = choose_pilot_cuts(study.profile.n_blocks, n_pilots)
    base = base_config(cfg, seed)
    limit = cfg.pilot_train_limit if cfg.pilot_train_limit is not None else cfg.run.train_limit
    probe = study.prepare(base)
    run_steps = cfg.run.rounds * steps_per_round(probe)
    steps = cfg.pilot_steps or max(1, int(math.ceil(PILOT_FRACTION * run_steps)))
    records = run_pilots(
        cuts,
        dataset=study.dataset,
        model_fn=study.model_fn,
        topology=study.topology,
        base=base,
        steps=steps,
        train_limit=limit,
        quiet=quiet,
    )
    doc = predict_accuracy(records, study.profile, run_steps, tolerance=cfg.planner.acc_tolerance)
    study.predicted_accuracy = dict(doc.pop("accuracy"))
    study.predicted_loss = dict(doc.pop("loss"))
    source = doc.pop("source")
    study.pilots = records
    measured = {r.cuts: r for r in records}
    study.surrogate = {
        **doc,
        "pilot_steps": steps,
        "run_steps": run_steps,
        "cost": PilotCost.of(records).to_dict(),
        "pilots": [r.to_dict() for r in records],
        "table": [
            {
                "cuts": list(c),
                "pilot_accuracy": measured[c].accuracy if c in measured else None,
                "predicted_accuracy": study.predicted_accuracy[c],
                "predicted_loss": study.predicted_loss[c],
                "source": source[c],
            }
            for c in legal
        ],
        "eval_split": eval_split_for(study.dataset),
    }


def plan_seed(study: Study, seed: int, plans: tuple[str, ...] = PLANS) -> dict:
    """The plans named in ``plans`` (of :data:`PLANS`; ``hsfl`` always) for one seed
    (shard sizes of that seed's partition)."""
    cfg = study.config
    setup = study.prepare(base_config(cfg, seed))
    # Shard sizes filled in; the network of round 1 (a trace's later rounds are unknown
    # to a planner that runs before training, see trace_note).
    topo = setup.topology.at_round(0)
    accuracy = study.predicted_accuracy or None
    separated = bool((study.surrogate or {}).get("separated", True))
    out = {}
    acc = None
    if "acc-aware" in plans:
        acc = plan_split(
            study.profile,
            topo,
            study.predicted_loss or None,
            planner_config(
                cfg, seed, weights=Weights(*cfg.planner.weights), mode=cfg.planner.objective
            ),
            predicted_accuracy=accuracy,
            separated=separated,
        )
        acc.info["surrogate"] = _surrogate_summary(study.surrogate)
        out["acc-aware"] = acc
    if "delay" in plans:
        out["delay"] = plan_split(
            study.profile,
            topo,
            study.predicted_loss or None,
            planner_config(cfg, seed, weights=Weights(0.0, 1.0, 0.0), mode="weighted"),
            predicted_accuracy=accuracy,
        )
    objective = acc.objective_def if acc is not None else None
    fixed = tuple(cfg.planner.fixed_cuts)
    baseline = planner_config(cfg, seed)  # the seed, batch, epochs and capacity of the baselines
    kw = {
        "config": baseline,
        "objective": objective,
        "predicted_loss": study.predicted_loss.get(fixed, math.nan),
        "predicted_accuracy": study.predicted_accuracy.get(fixed, math.nan),
    }
    out["hsfl"] = plan_fixed(study.profile, topo, cfg.planner.family, fixed, **kw)
    if "hsfl-greedy" in plans:
        out["hsfl-greedy"] = plan_fixed(
            study.profile, topo, cfg.planner.family, fixed, rule="greedy", **kw
        )
    if objective is not None:
        # Every plan scored by the same (accuracy-aware) objective, to compare them.
        for p in out.values():
            p.objective = float(
                objective.value(np.nan_to_num(p.predicted_loss), p.delay_s, p.bytes)
            )
    if "sfl" in plans:
        c = int(cfg.planner.sfl_cut)
        out["sfl"] = plan_fixed(study.profile, topo, "sfl", (c, c), config=baseline)
    note = trace_note(setup.topology)
    if note is not None:
        for p in out.values():
            p.info["trace"] = note
    return out


def _surrogate_summary(surrogate: dict) -> dict | None:
    """What every plan states about the surrogate it relied on."""
    if not surrogate:
        return None
    keys = ("target_steps", "pilot_steps", "noise", "spread", "separated", "backtest")
    out = {k: surrogate.get(k) for k in keys}
    if "ridge" in surrogate:
        r = surrogate["ridge"]
        out["ridge"] = {k: r.get(k) for k in ("loo_rmse", "alpha", "spread_kept", "flattened")}
    return out


__all__ = [
    "FULL",
    "MAX_PILOTS",
    "PILOT_FRACTION",
    "PLANS",
    "QUICK",
    "Study",
    "StudyConfig",
    "base_config",
    "check_options_early",
    "fit_surrogate",
    "jsonable",
    "make_study",
    "plan_seed",
    "registry_model",
    "resolve",
    "resolve_study_config",
    "trace_note",
]
