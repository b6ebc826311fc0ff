"""Read a plan written by ``flowsplit sfl plan`` so that ``sfl run --plan`` executes it.

A plan file is plain JSON (this package does not import the planner). ``sfl run``
takes from it what decides the run's costs: the scheme and cut points, the
client -> aggregator assignment, the topology (its full TOML, ``topology_toml``),
the model and view, and the settings under ``run`` (batch size, local epochs,
partition, training rows, seed), so the simulated bytes and delay of every round are
the plan's ``predicted.bytes_per_round`` and ``predicted.delay_s_per_round``; and
the plan's number of rounds (``run.rounds``) unless ``--rounds`` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.config_args import field_type_problem, option_name
from flowsplit.errors import ConfigError, InputError
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.system.topology import Topology, topology_from_toml
from flowsplit.inputs import read_json_input

RUN_FIELDS = ("scheme", "batch_size", "local_epochs", "partition", "train_limit", "seed")
"""SFLConfig fields a plan fixes (besides ``cuts``)."""


@dataclass(frozen=True)
class PlanFile:
    """What ``sfl run`` takes from a plan file."""

    path: Path
    cuts: tuple[int, int]
    assignment: np.ndarray
    topology: Topology
    run: dict[str, Any]
    model: str | None
    view: str | None
    predicted: dict[str, Any]
    model_options: dict[str, Any] | None = None
    """The model's size options the plan was made for (plans since they were recorded)."""

    def apply(self, config: SFLConfig) -> tuple[SFLConfig, list[str]]:
        """``config`` with the plan's scheme, cuts, run settings and rounds; and notes.

        The fields that decide a round's costs (:data:`RUN_FIELDS`, the cuts) always come
        from the plan: a different value given on the command line is ignored, with a
        note. The rounds (in plans since they were recorded) come from the plan too,
        unless ``--rounds`` was given with another value than its default: more or fewer
        rounds of the same plan change no round's cost, so the flag wins, with a note.
        """
        default = SFLConfig()
        notes = []
        for name in RUN_FIELDS:
            mine, theirs = getattr(config, name), self.run[name]
            if mine != getattr(default, name) and mine != theirs:
                flag = option_name(SFLConfig, name)
                notes.append(f"{flag} {mine} ignored: the plan fixes {name} = {theirs}")
        rounds = self.run.get("rounds")
        if rounds is None or config.rounds != default.rounds:
            if rounds is not None and config.rounds != rounds:
                notes.append(f"--rounds {config.rounds} replaces the plan's {rounds} rounds")
            rounds = config.rounds
        values = {k: self.run[k] for k in RUN_FIELDS}
        return replace(config, cuts=self.cuts, rounds=int(rounds), **values), notes

    def choices(self, rc: Any, **changes: Any) -> Any:
        """``rc`` (an ``SFLRunConfig``) with the plan's model, view and model options."""
        model = {"model": self.model, "view": self.view} if self.model else {"view": self.view}
        if self.model and self.model_options is not None:
            model["model_options"] = dict(self.model_options)
        return replace(rc, **model, **changes)


def read_plan(path: str | Path) -> PlanFile:
    """Parse and check a plan file; a one-line :class:`InputError` naming it otherwise."""
    path = Path(path)
    doc = read_json_input(path, "plan file not found")
    if not isinstance(doc, dict):
        raise InputError(path, "not a plan (a JSON object from `flowsplit sfl plan`)")
    missing = [k for k in ("cuts", "assignment", "topology_toml", "run") if k not in doc]
    if missing:
        raise InputError(path, f"not a plan from `flowsplit sfl plan` (no {', '.join(missing)})")
    run = doc["run"]
    if not isinstance(run, dict) or any(k not in run for k in RUN_FIELDS):
        raise InputError(path, f"the plan's 'run' must give {', '.join(RUN_FIELDS)}")
    given = {k: run[k] for k in (*RUN_FIELDS, "rounds") if k in run}
    problem = field_type_problem(SFLConfig, given)
    if problem:
        raise InputError(path, f"the plan's run: {problem} (the plan was edited?)")
    try:
        cuts = tuple(int(v) for v in doc["cuts"])
        assignment = np.asarray(doc["assignment"], dtype=np.int64)
    except (TypeError, ValueError):
        raise InputError(path, "cuts and assignment must be integers") from None
    if len(cuts) != 2 or assignment.ndim != 1:
        raise InputError(path, "cuts must be [a, c] and assignment a list of aggregators")
    try:  # the values a run takes from the plan, checked as the command line's are
        replace(SFLConfig(), cuts=cuts, **{k: run[k] for k in RUN_FIELDS})
    except ConfigError as exc:
        raise InputError(path, f"the plan's run: {exc} (the plan was edited?)") from None
    if doc.get("scheme", run["scheme"]) != run["scheme"]:
        raise InputError(
            path,
            f"the plan's scheme {doc['scheme']!r} is not its run's {run['scheme']!r} "
            "(the plan was edited?)",
        )
    topology = topology_from_toml(str(doc["topology_toml"]), source=str(path))
    if len(assignment) != topology.n_clients or (
        len(assignment) and (assignment.min() < 0 or assignment.max() >= topology.n_aggregators)
    ):
        raise InputError(
            path,
            f"the assignment must give one aggregator in 0..{topology.n_aggregators - 1} for "
            f"each of the {topology.n_clients} clients",
        )
    if not isinstance(doc.get("predicted") or {}, dict):
        raise InputError(path, "the plan's 'predicted' must be a JSON object")
    return PlanFile(
        path=path,
        cuts=cuts,
        assignment=assignment,
        topology=topology,
        run=dict(run),
        model=run.get("model"),
        view=run.get("view"),
        predicted=dict(doc.get("predicted") or {}),
        model_options=run.get("model_options"),
    )


__all__ = ["RUN_FIELDS", "PlanFile", "read_plan"]
