"""Pilot runs: a round or two of real (simulated) training at a few cut pairs.

Each pilot is an ordinary in-process simulation (:func:`flowsplit.federated.sim.run_simulation`)
of the scheme the plan will train, on a seeded subset of the training rows,
evaluated on the validation split (never the test split: the plan must not see the
data its result is judged on). What pilots cost is counted and reported: wall time,
rounds, the simulated delay and the bytes they would have put on the network.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.data.store import Dataset
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.topology import Topology

log = logging.getLogger("flowsplit.planner")


@dataclass(frozen=True)
class PilotRecord:
    """What one pilot measured and cost."""

    cuts: tuple[int, int]
    loss: float
    """Validation cross-entropy after the last pilot round."""
    accuracy: float
    rounds: int
    wall_s: float
    delay_s: float
    """Simulated delay of the pilot's rounds."""
    bytes: int
    """Bytes the pilot's rounds put on the (simulated) network."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cuts"] = list(self.cuts)
        return d


@dataclass(frozen=True)
class PilotCost:
    """Total cost of a set of pilots."""

    n_pilots: int
    rounds: int
    wall_s: float
    delay_s: float
    bytes: int

    @classmethod
    def of(cls, records: list[PilotRecord]) -> PilotCost:
        return cls(
            n_pilots=len(records),
            rounds=sum(r.rounds for r in records),
            wall_s=sum(r.wall_s for r in records),
            delay_s=sum(r.delay_s for r in records),
            bytes=sum(r.bytes for r in records),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def eval_split_for(dataset: Dataset) -> str:
    """``val`` when the dataset has validation rows, else ``train`` (never ``test``)."""
    return "val" if len(dataset.split_indices("val")) else "train"


def run_pilots(
    cuts: list[tuple[int, int]],
    *,
    dataset: str | Path | Dataset,
    model_fn,
    topology: Topology,
    base: SFLConfig,
    rounds: int = 1,
    train_limit: int | None = None,
    assignment: np.ndarray | None = None,
    quiet: bool = False,
) -> list[PilotRecord]:
    """Train ``rounds`` rounds at each of ``cuts`` with ``base``'s scheme and settings."""
    from flowsplit.data.store import load_dataset

    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    split = eval_split_for(ds)
    records = []
    for a, c in cuts:
        cfg = replace(
            base,
            cuts=(a, c),
            rounds=rounds,
            eval_split=split,
            train_limit=train_limit if train_limit is not None else base.train_limit,
        )
        t0 = time.perf_counter()
        setup = prepare_run(cfg, dataset=ds, model_fn=model_fn, topology=topology,
                            assignment=assignment)  # fmt: skip
        result = run_simulation(setup)
        wall = time.perf_counter() - t0
        last = result.history[-1]
        totals = result.totals()
        records.append(
            PilotRecord(
                cuts=(a, c),
                loss=float(last["loss"]),
                accuracy=float(last["accuracy"]),
                rounds=len(result.history),
                wall_s=wall,
                delay_s=float(totals["delay_total_s"]),
                bytes=int(totals["bytes_total"]),
            )
        )
        if not quiet:
            log.info("pilot %s: %s loss %.4f, acc %.3f (%.1f s)", cfg.scheme, (a, c),
                     last["loss"], last["accuracy"], wall)  # fmt: skip
    return records
