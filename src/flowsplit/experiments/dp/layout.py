"""Where the data-parallel study keeps its runs: the cells of the matrix and their directories.

Shared by the runner (:mod:`flowsplit.experiments.dp.compare`) and the report
(:mod:`flowsplit.experiments.dp.report`), which sits below the runner: the
report reads what the runner wrote and never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    threads: int | None = None
    """Threads per worker when not the study's ``--threads``: the same-cores centralised
    cell (one process with N x ``--threads`` threads) has them; every other cell, None."""

    @property
    def name(self) -> str:
        return cell_name(self.model, self.workers, self.seed, self.hook, self.threads)

    def threads_of(self, study_threads: int) -> int:
        """The threads per worker this cell runs with in a study of ``study_threads``."""
        return study_threads if self.threads is None else self.threads


def plain_first(hooks: Sequence[str]) -> list[str]:
    """The plain all-reduce, then the other hooks once each in the order given: the plain
    runs always run, as every hook is judged against them."""
    return [PLAIN_HOOK, *(h for h in dict.fromkeys(hooks) if h != PLAIN_HOOK)]


def cell_name(
    model: str, workers: int, seed: int, hook: str = PLAIN_HOOK, threads: int | None = None
) -> str:
    """``cnn/w2/seed0``; a cell with a communication hook: ``cnn/w2-fp16/seed0``; the
    same-cores centralised cell of 4 threads: ``cnn/w1-t4/seed0``."""
    return f"{model}/{_workers_part(workers, hook, threads)}/seed{seed}"


def _workers_part(workers: int, hook: str, threads: int | None = None) -> str:
    part = f"w{workers}" if hook == PLAIN_HOOK else f"w{workers}-{hook}"
    return part if threads is None else f"{part}-t{threads}"


def same_cores_workers(workers: Sequence[int], threads: int, cores: int) -> int | None:
    """The worker count N whose data-parallel runs the same-cores centralised cell (one
    process, N x ``threads`` threads) is compared with: the largest N > 1 whose threads fit
    ``cores`` (the one the headline reports), else the largest N; None without N > 1.
    ``cores`` 0 (unknown): the largest N."""
    multi = sorted(n for n in workers if n > 1)
    if not multi:
        return None
    fits = [n for n in multi if cores <= 0 or n * threads <= cores]
    return max(fits or multi)


def same_cores_seeds(seeds: Sequence[int], count: int | None) -> list[int]:
    """The seeds of the same-cores cells: the first ``count`` of ``seeds`` (None: all)."""
    ordered = sorted(seeds)
    return ordered if count is None else ordered[: max(0, count)]


def has_hooks(model: str, workers: int) -> bool:
    """Whether a cell of ``model`` on ``workers`` all-reduces DDP gradients, so that a
    communication hook applies (not centralised, not XGBoost)."""
    return workers > 1 and model != "xgboost"


def plan_cells(
    models: Sequence[str],
    workers: Sequence[int],
    seeds: Sequence[int],
    hooks: Sequence[str] = (PLAIN_HOOK,),
    same_cores: tuple[int, Sequence[int]] | None = None,
) -> list[Cell]:
    """All cells, seed-major: after each seed every model has a complete set of worker
    counts (and, on several workers, of ``hooks``), so an interrupted study still has
    paired results to analyse. The plain all-reduce always runs: hooks are judged by it.
    ``same_cores`` = (threads, seeds): each model's same-cores centralised cell, one
    process of ``threads`` threads, on those seeds (after the seed's other cells)."""
    hook_list = plain_first(hooks)
    sc_threads, sc_seeds = same_cores or (0, ())
    cells = []
    for s in seeds:
        for m in models:
            cells += [
                Cell(m, n, s, h)
                for n in workers
                for h in (hook_list if has_hooks(m, n) else [PLAIN_HOOK])
            ]
            if s in sc_seeds:
                cells.append(Cell(m, 1, s, PLAIN_HOOK, sc_threads))
    return cells


def study_same_cores(settings, cores: int) -> tuple[int, list[int]] | None:
    """The same-cores cells a study's settings plan: (threads, seeds), or None (a study
    made before these cells has ``same_cores_seeds`` 0: none)."""
    n = same_cores_workers(settings.workers, settings.threads, cores)
    seeds = same_cores_seeds(settings.seeds, settings.same_cores_seeds)
    if n is None or not seeds:
        return None
    return n * settings.threads, seeds


def study_cells(settings, cores: int) -> list[Cell]:
    """Every cell a study's settings plan on ``cores``: its
    :class:`~flowsplit.experiments.dp.config.CompareConfig`, or ``compare.json``'s
    :class:`~flowsplit.experiments.dp.result.StudySettings` (given as a dict: typed here)."""
    if isinstance(settings, Mapping):
        # Imported here: the config (which the command line loads) imports this module.
        from flowsplit.experiments.dp.result import study_settings

        settings = study_settings(settings)
    hooks = settings.comm_hooks or [PLAIN_HOOK]  # a study made before hooks: none
    return plan_cells(
        settings.models,
        settings.workers,
        settings.seeds,
        hooks,
        study_same_cores(settings, cores),
    )


def cell_dir(out: str | Path, cell: Cell) -> Path:
    """The run directory of one cell: ``OUT/runs/<model>/w<N>/seed<S>``, with a hook
    ``OUT/runs/<model>/w<N>-<hook>/seed<S>`` (a study without hooks keeps its layout), the
    same-cores cell ``OUT/runs/<model>/w1-t<T>/seed<S>``."""
    return (
        Path(out)
        / "runs"
        / cell.model
        / _workers_part(cell.workers, cell.hook, cell.threads)
        / f"seed{cell.seed}"
    )
