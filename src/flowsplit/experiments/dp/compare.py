"""``flowsplit compare``: centralised against data-parallel, model x workers x seed.

Each cell of the matrix is one ``flowsplit train`` run in its own directory
``OUT/runs/<model>/w<N>/seed<S>``, so a crash (or Ctrl-C) of one cell loses nothing
already finished, and a rerun skips every cell whose ``metrics.json`` is there. Cells
run in long-lived processes, one set per worker count
(:mod:`flowsplit.experiments.dp.cellpool`: the interpreter and torch start once, not per
cell), or with ``fresh_process`` each in a ``flowsplit train`` process of its own. All
cells read the same prepared dataset, hence the same splits and test set. Afterwards
the all-reduce micro-benchmark measures the backend, and
:func:`flowsplit.experiments.dp.report.render_report` writes the report.

Import order (no cycle): ``layout`` <- ``records`` <- ``analysis`` <- ``compare_tables``,
``compare_plots`` <- ``compare_html`` <- ``compare_report`` <- this module <- ``commands``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from flowsplit.config_file import CONFIG_NAME, write_config_toml
from flowsplit.data.store import load_dataset
from flowsplit.errors import ConfigError, InputError
from flowsplit.experiments.dp.allreduce import run_allreduce_benchmark
from flowsplit.experiments.dp.cellpool import CellPools, output_to, thread_env
from flowsplit.experiments.dp.config import FINGERPRINT_KEYS, CompareConfig
from flowsplit.experiments.dp.crosssource import check_other_dataset
from flowsplit.experiments.dp.hostload import (
    ContentionMeter,
    descendants_cpu_s,
    wait_for_quiet,
)
from flowsplit.experiments.dp.layout import PLAIN_HOOK, Cell, cell_dir, study_cells
from flowsplit.experiments.dp.layout import plan_cells as plan_cells  # re-exported (tests)
from flowsplit.experiments.dp.records import CONTENDED_SHARE, read_record
from flowsplit.experiments.dp.report import render_report, write_workloads
from flowsplit.experiments.dp.result import (
    ALLREDUCE_NAME,
    CELL_INFO_NAME,
    STATUS_NAME,
    STUDY_NAME,
    cell_info,
    changed_settings,
)
from flowsplit.outputs import atomic_write_json
from flowsplit.terminal import on_terminal
from flowsplit.train.launch import environ
from flowsplit.util import available_cores, die_with_parent

log = logging.getLogger(__name__)

QUICK_ALLREDUCE_SIZES = (4, 1024, 64 << 10, 1 << 20, 8 << 20)


TRAIN = (sys.executable, "-m", "flowsplit", "train")
"""The command a cell's arguments (:func:`train_args`) follow."""


def train_command(cell: Cell, cfg: CompareConfig) -> list[str]:
    """The ``flowsplit train`` command line of one cell."""
    return [*TRAIN, *train_args(cell, cfg)]


def train_args(cell: Cell, cfg: CompareConfig) -> list[str]:
    """The arguments of one cell's ``flowsplit train``."""
    cmd = [
        str(cfg.dataset),
        "--model",
        cell.model,
        "--workers",
        str(cell.workers),
        "--threads",
        str(cell.threads_of(cfg.threads)),
        "--seed",
        str(cell.seed),
        "-o",
        str(cell_dir(cfg.out, cell)),
        "--quiet",
    ]
    if cfg.epochs is not None and cell.model != "xgboost":
        cmd += ["--epochs", str(cfg.epochs)]
    if cfg.rounds is not None and cell.model == "xgboost":
        cmd += ["--boost-rounds", str(cfg.rounds)]
    if cfg.patience is not None:
        cmd += ["--patience", str(cfg.patience)]
    if cell.hook != PLAIN_HOOK:
        cmd += ["--comm-hook", cell.hook]
    return cmd + list(cfg.train_args)


class _CellArgs(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(f"--train-arg: {message} (see flowsplit train --help)")


def check_cells(cfg: CompareConfig, dataset) -> None:
    """Each model at each worker count, checked as its ``flowsplit train`` would check
    it, before any cell runs: a bad ``--epochs`` or ``--train-arg`` is one line now, not
    every cell failing in turn (:func:`~flowsplit.train.commands.check_trainable`)."""
    from flowsplit.train.commands import add_train_arguments, check_trainable, config_from_args

    parser = _CellArgs(prog="flowsplit train")
    add_train_arguments(parser)
    _check_train_args_own_nothing(parser, cfg)
    for model in cfg.models:
        for workers in cfg.workers:
            args = parser.parse_args(train_args(Cell(model, workers, cfg.seeds[0]), cfg))
            train_cfg, _ = config_from_args(args)
            check_trainable(train_cfg, dataset, force=args.force)


STUDY_SETS = {
    "model": "--models",
    "workers": "--workers",
    "threads": "--threads",
    "seed": "--seeds",
    "out": "-o",
    "epochs": "--epochs",
    "rounds": "--boost-rounds",
    "patience": "--patience",
    "comm_hook": "--comm-hooks",
}
"""The ``flowsplit train`` settings each cell's own arguments give (field -> the
``compare`` option that sets them). ``comm_hook`` also when only the default hook runs:
the study files a run under the hook its record names."""


def _check_train_args_own_nothing(parser: argparse.ArgumentParser, cfg: CompareConfig) -> None:
    """Refuse a ``--train-arg`` that sets what the study sets per cell: given last, it
    won, so the cell filed as ``cnn/w1/seed0`` trained ``--model=lstm`` with seed 7."""
    if not cfg.train_args:
        return
    args = parser.parse_args(["DATASET", *cfg.train_args])
    for name, option in STUDY_SETS.items():
        if getattr(args, name, None) is not None:
            raise ConfigError(
                f"--train-arg {' '.join(cfg.train_args)}: sets {name}, which the study sets "
                f"for every run (give it with compare's {option})"
            )


def run_cell_subprocess(cell: Cell, cfg: CompareConfig) -> tuple[bool, str]:
    """Run one cell as ``flowsplit train`` in a child process; (ok, log tail)."""
    run = cell_dir(cfg.out, cell)
    run.parent.mkdir(parents=True, exist_ok=True)
    log_path = _log_path(cfg, cell)
    env = {
        **os.environ,
        **thread_env(cell.threads_of(cfg.threads)),
        "PYTHONUNBUFFERED": "1",
    }
    with open(log_path, "w", encoding="utf-8") as fh:
        fh.write(" ".join(train_command(cell, cfg)) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(
                train_command(cell, cfg),
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=cfg.cell_timeout_s,
                check=False,
                preexec_fn=die_with_parent,
            )
            ok = proc.returncode == 0
            status = f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            ok, status = False, f"killed after {cfg.cell_timeout_s:g} s"
    return ok, status + ("\n" + _log_tail(log_path) if not ok else "")


class PooledCells:
    """A ``run_cell_fn`` that runs each cell's ``flowsplit train`` in :class:`CellPools`:
    neural cells on as many pooled processes as the cell has workers, XGBoost cells in
    the one-process pool. XGBoost cells of N > 1 workers share one Dask ``LocalCluster``
    of N processes (``--dask-scheduler``), started at the first of them: a cluster's
    start (about 20 CPU-seconds, which no boosting round includes) is paid once, and
    the workers' peak memory is then the peak over those cells."""

    def __init__(self) -> None:
        self.pools = CellPools()
        self._clusters: dict[tuple[int, int], Any] = {}
        self._log_level: int | None = None  # of the "distributed" logger, before a cluster

    def __call__(self, cell: Cell, cfg: CompareConfig) -> tuple[bool, str]:
        run = cell_dir(cfg.out, cell)
        run.parent.mkdir(parents=True, exist_ok=True)
        log_path = _log_path(cfg, cell)
        argv = train_args(cell, cfg)
        if cell.model == "xgboost" and cell.workers > 1 and not _gives_scheduler(cfg):
            argv += ["--dask-scheduler", self._scheduler(cell.workers, cfg.threads, cfg)]
        log_path.write_text(
            " ".join([*TRAIN, *argv]) + "  (in a pooled process)\n", encoding="utf-8"
        )
        ok, status = self.pools.run(
            argv,
            world=1 if cell.model == "xgboost" else cell.workers,
            threads=cell.threads_of(cfg.threads),
            log_path=log_path,
            timeout_s=cfg.cell_timeout_s,
        )
        return ok, "" if ok else status + "\n" + _log_tail(log_path)

    def _scheduler(self, n_workers: int, threads: int, cfg: CompareConfig) -> str:
        """The address of the study's Dask cluster of ``n_workers`` processes (their output,
        XGBoost's tracker lines, goes to ``OUT/logs/dask-w<N>.log``)."""
        key = (n_workers, threads)
        if key not in self._clusters:
            # Imported here: only XGBoost studies on several workers need Dask (seconds).
            from distributed import LocalCluster

            if self._log_level is None:
                # Its scheduler runs in this process for the study's length: its INFO lines
                # and event-loop warnings (a busy machine stalls it) are not the study's.
                chatter = logging.getLogger("distributed")
                self._log_level = chatter.level
                chatter.setLevel(max(self._log_level, logging.ERROR))
            log_path = Path(cfg.out) / "logs" / f"dask-w{n_workers}.log"
            with (
                environ(thread_env(threads)),
                warnings.catch_warnings(),
                output_to(log_path),
            ):
                # Its HTTP endpoint (on 127.0.0.1) moves to a free port when 8787 is taken,
                # and says so.
                warnings.filterwarnings("ignore", message="Port .* is already in use")
                self._clusters[key] = LocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=threads,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address="127.0.0.1:0",  # None still binds :8787 on every interface
                    silence_logs=logging.ERROR,
                )
        return self._clusters[key].scheduler_address

    @staticmethod
    def own_cpu_s() -> float:
        """CPU seconds of this process's descendants so far (the pools, the Dask cluster):
        the contention meter counts them as the study's own."""
        return descendants_cpu_s()

    def close(self) -> None:
        self.pools.close()
        for cluster in self._clusters.values():
            cluster.close()
        self._clusters.clear()
        if self._log_level is not None:
            logging.getLogger("distributed").setLevel(self._log_level)
            self._log_level = None


def _gives_scheduler(cfg: CompareConfig) -> bool:
    return any(a.startswith("--dask-scheduler") for a in cfg.train_args)


def _log_path(cfg: CompareConfig, cell: Cell) -> Path:
    path = Path(cfg.out) / "logs" / f"{cell.name.replace('/', '-')}.log"  # cnn-w2-fp16-seed0
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _log_tail(path: Path, n: int = 5) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-n:])


def _check_fingerprint(cfg: CompareConfig) -> None:
    resolved = str(Path(cfg.dataset).resolve())
    changed = changed_settings(cfg.out, cfg.fingerprint(), FINGERPRINT_KEYS, resolved)
    if changed:
        raise ConfigError(
            f"{cfg.out} holds a study made with different {', '.join(changed)} "
            f"(was {', '.join(f'{k}={v!r}' for k, v in changed.items())}); "
            "use a new -o directory so the finished runs stay comparable"
        )


def _set_aside(run: Path, why: str) -> Path | None:
    """Move an unfinished or contended run out of the way, keeping it for inspection."""
    if not run.exists():
        return None
    k = 1
    while run.with_name(f"{run.name}.{why}-{k}").exists():
        k += 1
    dest = run.with_name(f"{run.name}.{why}-{k}")
    run.rename(dest)
    return dest


def _timed_cell(cell: Cell, cfg: CompareConfig, run_cell_fn) -> tuple[bool, str, dict]:
    """Run one cell under the contention meter, after waiting for quiet if asked."""
    quiet, busy = (True, math.nan)
    if cfg.quiet_wait_s > 0:
        quiet, busy = wait_for_quiet(cfg.max_busy, cfg.quiet_wait_s)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    # A pooled runner's processes outlive the cell: their CPU is counted as ours.
    with ContentionMeter(available_cores(), getattr(run_cell_fn, "own_cpu_s", None)) as meter:
        ok, message = run_cell_fn(cell, cfg)
    info = {
        "cell": cell.name,
        "busy_before": busy,
        "quiet_before": quiet,
        "load_before": load_before,
        "contention": meter.result.as_dict(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return ok, message, info


def run_cells(
    cfg: CompareConfig,
    *,
    run_cell_fn: Callable[[Cell, CompareConfig], tuple[bool, str]] = run_cell_subprocess,
    progress: bool = True,
) -> dict:
    """Run every unfinished cell; return counts of done, skipped and failed cells."""
    cells = study_cells(cfg, available_cores())
    failures: dict[str, str] = {}
    n_skipped = 0
    limit = CONTENDED_SHARE if cfg.max_foreign is None else cfg.max_foreign
    bar = tqdm(
        cells, desc="compare", unit="run", disable=not (progress and on_terminal()), file=sys.stderr
    )
    for cell in bar:
        bar.set_postfix_str(cell.name)
        run = cell_dir(cfg.out, cell)
        previous = read_record(run, cores=0)
        if previous is not None and not (
            cfg.rerun_contended and previous.foreign_cpu_share > limit
        ):
            n_skipped += 1
            continue
        tries = 2 if (cfg.max_foreign is not None and previous is None) else 1
        for _ in range(tries):
            done = read_record(run, cores=0)
            aside = _set_aside(run, "contended") if done is not None else None
            if done is not None:
                bar.write(
                    f"{cell.name}: others used {100 * done.foreign_cpu_share:.0f} % "
                    "CPU while it was timed; running it again"
                )
            _run_cell_once(cell, cfg, run_cell_fn, run, bar, failures)
            if aside is not None:
                _keep_least_contended(run, aside)
            current = read_record(run, cores=0)
            if current is not None:
                failures.pop(cell.name, None)
            if current is None or not current.foreign_cpu_share > limit:
                break
    return {"n_cells": len(cells), "n_skipped": n_skipped, "failures": failures}


def _keep_least_contended(run: Path, aside: Path) -> None:
    """Of the run in ``run`` and the one set aside, leave the less disturbed in ``run``."""
    new = read_record(run, cores=0)
    old = read_record(aside, cores=0)
    if new is not None and (old is None or new.foreign_cpu_share <= old.foreign_cpu_share):
        return
    _set_aside(run, "contended" if new is not None else "failed")
    aside.rename(run)


def _run_cell_once(cell: Cell, cfg: CompareConfig, run_cell_fn, run: Path, bar, failures) -> None:
    """Run one cell into an empty ``run`` directory and record how it went."""
    _set_aside(run, "failed")
    ok, message, info = _timed_cell(cell, cfg, run_cell_fn)
    rec = read_record(run, cores=0) if ok else None
    if rec is None:
        failures[cell.name] = message or "no metrics.json written"
        bar.write(f"{cell.name}: FAILED ({(message or '?').splitlines()[0]})")
        return
    atomic_write_json(run / CELL_INFO_NAME, info)
    c = cell_info(info).contention
    bar.write(
        f"{cell.name}: accuracy {rec.accuracy:.3f}, epoch {rec.epoch_time_s:.2f} s"
        f" ({c.wall_s:.0f} s; others used {100 * c.foreign_share:.0f} % CPU)"
    )


_NOT_A_STUDY = ("metrics.json", "config.json", "checkpoint.pt", "model.pt", "manifest.json")
"""Files of a run or dataset directory, which ``compare -o`` must not write a study into."""


def run_compare(
    config: CompareConfig | str | Path,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    run_cell_fn: Callable[[Cell, CompareConfig], tuple[bool, str]] | None = None,
    **options: Any,
) -> Path:
    """Run (or resume) the study ``config`` and write its report; return the path of
    ``report.html``.

    ``config`` is a :class:`CompareConfig`, or (the older form) the dataset directory,
    with ``out_dir`` and any :class:`CompareConfig` fields as keywords (``seeds`` a count
    or explicit seeds). The plain all-reduce (``none``) always runs: each communication
    hook is compared with it, seed by seed. Finished cells are skipped; failed ones are
    retried on the next call and listed in the report meanwhile. ``run_cell_fn`` (tests)
    replaces the runner: by default :class:`PooledCells`, or :func:`run_cell_subprocess`
    with ``fresh_process``.
    """
    if isinstance(config, CompareConfig):
        if out_dir is not None or options:
            raise TypeError("run_compare(config): give the options in the config")
        cfg = config
    else:
        cfg = CompareConfig(dataset=config, out=out_dir, **options)
    dataset = load_dataset(cfg.dataset)  # fails early, with a clear message, on a bad DIR
    check_other_dataset(cfg, dataset)  # --cross-source, before any run
    check_cells(cfg, dataset)
    out = _start_study(cfg)
    _measure_allreduce(cfg, out, progress)
    runner = run_cell_fn
    if runner is None:
        runner = run_cell_subprocess if cfg.fresh_process else PooledCells()
    try:
        status = run_cells(cfg, run_cell_fn=runner, progress=progress)
    finally:
        if isinstance(runner, PooledCells):
            runner.close()
    atomic_write_json(out / STATUS_NAME, status)

    write_workloads(out, dataset)
    return render_report(out)


def _start_study(cfg: CompareConfig) -> Path:
    """The study's directory, with its config (``study.json``, ``config.toml``); refused
    when it holds something else, or a study of other settings."""
    out = Path(cfg.out)
    foreign = [n for n in _NOT_A_STUDY if (out / n).exists()]
    if foreign and not (out / STUDY_NAME).is_file():
        # A training or sfl run, or a dataset: a study would be mixed into it.
        raise InputError(out, f"holds {foreign[0]}, not a compare study; choose a new -o")
    out.mkdir(parents=True, exist_ok=True)
    _check_fingerprint(cfg)
    atomic_write_json(
        out / STUDY_NAME,
        {"config": asdict(cfg), "fingerprint": cfg.fingerprint(), "cores": available_cores()},
    )
    # The effective config, which `compare DATASET -o OUT --config OUT/config.toml` reruns.
    write_config_toml(
        out / CONFIG_NAME,
        cfg,
        header="flowsplit compare: the effective config (compare DATASET -o OUT --config FILE)",
        comment=("dataset", "out"),
    )
    return out


def _measure_allreduce(cfg: CompareConfig, out: Path, progress: bool) -> None:
    """The all-reduce micro-benchmark behind the scaling model, once per study (first,
    so a report rendered while cells still run has its scaling model)."""
    bench_path = out / ALLREDUCE_NAME
    if not bench_path.is_file() and max(cfg.workers) > 1:
        if progress:
            print("measuring all-reduce on gloo (2 processes) ...", file=sys.stderr)
        sizes = QUICK_ALLREDUCE_SIZES if cfg.quick else None
        kwargs = {"sizes": sizes, "repeats": 3} if sizes else {}
        atomic_write_json(bench_path, run_allreduce_benchmark(**kwargs))
