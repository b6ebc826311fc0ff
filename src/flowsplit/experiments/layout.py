"""Where the data-parallel study keeps its runs: the cells of the matrix and their directories.

Shared by the runner (:mod:`flowsplit.experiments.compare`) and the report
(:mod:`flowsplit.experiments.compare_report`), which sits below the runner: the
report reads what the runner wrote and never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cell:
    """One run of the matrix."""

    model: str
    workers: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.model}/w{self.workers}/seed{self.seed}"


def plan_cells(models: Sequence[str], workers: Sequence[int], seeds: Sequence[int]) -> list[Cell]:
    """All cells, seed-major: after each seed every model has a complete set of worker
    counts, so an interrupted study still has paired results to analyse."""
    return [Cell(m, n, s) for s in seeds for m in models for n in workers]


def cell_dir(out: str | Path, cell: Cell) -> Path:
    """The run directory of one cell: ``OUT/runs/<model>/w<N>/seed<S>``."""
    return Path(out) / "runs" / cell.model / f"w{cell.workers}" / f"seed{cell.seed}"
