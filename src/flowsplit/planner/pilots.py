"""Pilot runs: short real (simulated) trainings at a few cut pairs.

Each pilot is an ordinary in-process simulation (:func:`flowsplit.federated.sim.run_simulation`)
of the scheme the plan will train, on the run's training rows (or a seeded subset),
evaluated on the validation split after every round (never the test split: the plan
must not see the data its result is judged on), so each pilot yields a validation
*curve* that :mod:`flowsplit.planner.surrogate` extrapolates to the run's budget.

Pilots are budgeted in optimiser steps: a *step* is one client batch (one update of
that client's part and of the parts above it), so a round has
``sum_i local_epochs * ceil(n_i / batch_size)`` steps. A budget of ``steps`` gives
``max(MIN_CURVE_POINTS, round(steps / steps_per_round))`` rounds, at least four
points (a curve to fit, and one more to backtest the fit). What pilots cost is counted and reported: wall time, steps,
rounds, the simulated delay and the bytes they would have put on the network.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.data.store import Dataset, load_dataset
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.costs import n_batches
from flowsplit.federated.system.topology import Topology

log = logging.getLogger("flowsplit.planner")

MIN_CURVE_POINTS = 4
"""Fewest pilot rounds (points of the validation curve) a step budget is rounded up to."""


@dataclass(frozen=True)
class PilotRecord:
    """What one pilot measured and cost."""

    cuts: tuple[int, int]
    loss: float
    """Validation cross-entropy after the last pilot round."""
    accuracy: float
    """Validation accuracy after the last pilot round."""
    rounds: int
    wall_s: float
    delay_s: float
    """Simulated delay of the pilot's rounds."""
    bytes: int
    """Bytes the pilot's rounds put on the (simulated) network."""
    steps_per_round: int = 0
    """Optimiser steps (client batches) per round."""
    curve_accuracy: tuple[float, ...] = ()
    """Validation accuracy after each round."""
    curve_loss: tuple[float, ...] = ()
    """Validation loss after each round."""
    n_eval: int = 0
    """Rows of the split the pilot is evaluated on (its accuracy's sampling noise)."""

    @property
    def steps(self) -> int:
        return self.rounds * self.steps_per_round

    @property
    def curve_steps(self) -> np.ndarray:
        """Optimiser steps at each point of the curve."""
        return self.steps_per_round * np.arange(1, len(self.curve_accuracy) + 1, dtype=float)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cuts"] = list(self.cuts)
        d["steps"] = self.steps
        d["curve_accuracy"] = list(self.curve_accuracy)
        d["curve_loss"] = list(self.curve_loss)
        return d


@dataclass(frozen=True)
class PilotCost:
    """Total cost of a set of pilots."""

    n_pilots: int
    rounds: int
    wall_s: float
    delay_s: float
    bytes: int
    steps: int = 0

    @classmethod
    def of(cls, records: list[PilotRecord]) -> PilotCost:
        return cls(
            n_pilots=len(records),
            rounds=sum(r.rounds for r in records),
            steps=sum(r.steps for r in records),
            wall_s=sum(r.wall_s for r in records),
            delay_s=sum(r.delay_s for r in records),
            bytes=sum(r.bytes for r in records),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def eval_split_for(dataset: Dataset) -> str:
    """``val`` when the dataset has validation rows, else ``train`` (never ``test``)."""
    return "val" if len(dataset.split_indices("val")) else "train"


def steps_per_round(setup) -> int:
    """Optimiser steps (client batches, summed over clients) of one round of ``setup``."""
    cfg = setup.config
    return int(n_batches(setup.n_samples, cfg.batch_size, cfg.local_epochs).sum())


def pilot_rounds(steps: int, per_round: int) -> int:
    """Rounds a budget of ``steps`` optimiser steps buys (at least :data:`MIN_CURVE_POINTS`)."""
    return max(MIN_CURVE_POINTS, int(round(steps / max(per_round, 1))))


def run_pilots(
    cuts: list[tuple[int, int]],
    *,
    dataset: str | Path | Dataset,
    model_fn,
    topology: Topology,
    base: SFLConfig,
    steps: int | None = None,
    rounds: int | None = None,
    train_limit: int | None = None,
    assignment: np.ndarray | None = None,
    quiet: bool = False,
) -> list[PilotRecord]:
    """Train each of ``cuts`` with ``base``'s scheme and settings for ``steps`` optimiser
    steps (rounded to whole rounds, see :func:`pilot_rounds`) or, when ``steps`` is
    None, for ``rounds`` rounds (default 1); evaluate on the validation split after
    every round."""
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    split = eval_split_for(ds)
    n_eval = int(len(ds.split_indices(split)))
    limit = train_limit if train_limit is not None else base.train_limit
    records = []
    n_rounds = rounds or 1
    for a, c in cuts:
        cfg = replace(base, cuts=(a, c), rounds=n_rounds, eval_split=split, train_limit=limit)
        t0 = time.perf_counter()
        setup = prepare_run(
            cfg, dataset=ds, model_fn=model_fn, topology=topology, assignment=assignment
        )
        per_round = steps_per_round(setup)
        if steps is not None and pilot_rounds(steps, per_round) != cfg.rounds:
            n_rounds = pilot_rounds(steps, per_round)  # the same for every cut pair
            cfg = replace(cfg, rounds=n_rounds)
            setup = prepare_run(
                cfg, dataset=ds, model_fn=model_fn, topology=topology, assignment=assignment
            )
        result = run_simulation(setup)
        wall = time.perf_counter() - t0
        last = result.history[-1]
        records.append(_pilot_record((a, c), result, per_round, wall, n_eval))
        if not quiet:
            log.info(
                "pilot %s: %s %d steps, loss %.4f, acc %.3f (%.1f s)",
                cfg.scheme,
                (a, c),
                records[-1].steps,
                last["loss"],
                last["accuracy"],
                wall,
            )
    return records


def _pilot_record(cuts, result, per_round: int, wall_s: float, n_eval: int) -> PilotRecord:
    """What a pilot's simulated run measured (``result``: its ``SFLResult``)."""
    last = result.history[-1]
    totals = result.totals()
    return PilotRecord(
        cuts=cuts,
        loss=float(last["loss"]),
        accuracy=float(last["accuracy"]),
        rounds=len(result.history),
        wall_s=wall_s,
        delay_s=float(totals["delay_total_s"]),
        bytes=int(totals["bytes_total"]),
        steps_per_round=per_round,
        curve_accuracy=tuple(float(h["accuracy"]) for h in result.history),
        curve_loss=tuple(float(h["loss"]) for h in result.history),
        n_eval=n_eval,
    )
