"""Where the data-parallel study keeps its runs: the cells of the matrix and their directories.

Shared by the runner (:mod:`flowsplit.experiments.dp.compare`) and the report
(:mod:`flowsplit.experiments.dp.report`), which sits below the runner: the
report reads what the runner wrote and never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PLAIN_HOOK = "none"
"""The plain float32 all-reduce: the reference of every communication hook, and the only
"hook" of centralised and XGBoost cells (they have no DDP gradients to compress)."""


@dataclass(frozen=True)
class Cell:
    """One run of the matrix (``hook``: ``flowsplit train --comm-hook`` of a DDP cell)."""

    model: str
    workers: int
    seed: int
    hook: str = PLAIN_HOOK

    @property
    def name(self) -> str:
        return cell_name(self.model, self.workers, self.seed, self.hook)


def plain_first(hooks: Sequence[str]) -> list[str]:
    """The plain all-reduce, then the other hooks once each in the order given: the plain
    runs always run, as every hook is judged against them."""
    return [PLAIN_HOOK, *(h for h in dict.fromkeys(hooks) if h != PLAIN_HOOK)]


def cell_name(model: str, workers: int, seed: int, hook: str = PLAIN_HOOK) -> str:
    """``cnn/w2/seed0``; a cell with a communication hook: ``cnn/w2-fp16/seed0``."""
    return f"{model}/{_workers_part(workers, hook)}/seed{seed}"


def _workers_part(workers: int, hook: str) -> str:
    return f"w{workers}" if hook == PLAIN_HOOK else f"w{workers}-{hook}"


def has_hooks(model: str, workers: int) -> bool:
    """Whether a cell of ``model`` on ``workers`` all-reduces DDP gradients, so that a
    communication hook applies (not centralised, not XGBoost)."""
    return workers > 1 and model != "xgboost"


def plan_cells(
    models: Sequence[str],
    workers: Sequence[int],
    seeds: Sequence[int],
    hooks: Sequence[str] = (PLAIN_HOOK,),
) -> list[Cell]:
    """All cells, seed-major: after each seed every model has a complete set of worker
    counts (and, on several workers, of ``hooks``), so an interrupted study still has
    paired results to analyse. The plain all-reduce always runs: hooks are judged by it."""
    hook_list = plain_first(hooks)
    return [
        Cell(m, n, s, h)
        for s in seeds
        for m in models
        for n in workers
        for h in (hook_list if has_hooks(m, n) else [PLAIN_HOOK])
    ]


def cell_dir(out: str | Path, cell: Cell) -> Path:
    """The run directory of one cell: ``OUT/runs/<model>/w<N>/seed<S>``, with a hook
    ``OUT/runs/<model>/w<N>-<hook>/seed<S>`` (a study without hooks keeps its layout)."""
    return (
        Path(out)
        / "runs"
        / cell.model
        / _workers_part(cell.workers, cell.hook)
        / f"seed{cell.seed}"
    )
