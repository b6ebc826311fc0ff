"""Experiment tracking: ``--log-to tensorboard[:DIR]``.

A finished run's series, as its ``metrics.json`` holds them, become TensorBoard scalars
written with PyTorch's own :class:`torch.utils.tensorboard.SummaryWriter` (the
``tensorboard`` package is the optional extra ``flowsplit[tracking]``):

- a ``train`` run: every per-epoch list (``train/loss``, ``train/epoch_time_s``,
  ``val/macro_f1``), step = the 1-based epoch, and the test scores at the kept epoch;
- an ``sfl run``: every number of every round record (``round/accuracy``,
  ``round/delay_s``, ``round/bytes_total``; nested ones keep their path:
  ``bytes/client-aggregator/up/activations``, ``delay/train_s``, ``timing/predicted/...``),
  step = the 1-based round.

``tensorboard`` alone writes into ``RUN/tensorboard``; ``tensorboard:DIR`` writes into
``DIR/<run name>``, so several runs pointed at one DIR appear side by side in
``tensorboard --logdir DIR``. A study (``compare``, ``sfl compare``) writes one
subdirectory per run. The events are written from ``metrics.json`` once the run has
finished, so a run logged this way is the same run as one that is not.

This module imports nothing of flowsplit above :mod:`flowsplit.errors`, so the option
can be declared once in :mod:`flowsplit.config_args` for every command.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowsplit.errors import ConfigError, InputError
from flowsplit.util import read_json_document

KINDS = ("tensorboard",)
"""Trackers ``--log-to`` knows."""

EXTRA_HINT = "pip install 'flowsplit[tracking]' (or: pip install tensorboard)"

LOG_TO_HELP = (
    "also write the run's per-epoch (train) or per-round (sfl) series as TensorBoard "
    "scalars: 'tensorboard' into RUN/tensorboard, 'tensorboard:DIR' into DIR/<run name> "
    "(needs the extra: pip install 'flowsplit[tracking]'); view with tensorboard --logdir"
)

TRAIN_SERIES = {
    "loss_per_epoch": "train/loss",
    "epoch_times_s": "train/epoch_time_s",
    "val_macro_f1_per_epoch": "val/macro_f1",
}
"""``metrics.json`` list -> scalar tag, for a ``train`` run (one value per epoch)."""


@dataclass(frozen=True)
class LogTarget:
    """Where ``--log-to`` sends a run's series."""

    kind: str
    """``tensorboard``."""
    dir: str | None = None
    """``DIR`` of ``tensorboard:DIR``; None: inside the run directory."""

    def run_dir(self, run: str | Path, name: str | None = None) -> Path:
        """The event directory of ``run`` (``name``: its subdirectory under DIR)."""
        run = Path(run)
        if self.dir is None:
            return run / "tensorboard"
        return Path(self.dir) / (name or run.resolve().name)


def parse_log_to(text: str) -> LogTarget:
    """``tensorboard`` or ``tensorboard:DIR``; raises :class:`ConfigError` otherwise,
    and when the ``tensorboard`` package is not installed (said at parse time, before
    any training)."""
    kind, sep, where = text.partition(":")
    if kind not in KINDS:
        raise ConfigError(
            f"--log-to {text}: unknown tracker {kind!r}; choose "
            + " or ".join(f"{k}[:DIR]" for k in KINDS)
        )
    if sep and not where:
        raise ConfigError(f"--log-to {text}: give a directory after ':' or drop the ':'")
    require_tensorboard()
    return LogTarget(kind, where or None)


def require_tensorboard() -> None:
    """One line naming the extra to install when ``tensorboard`` is missing."""
    try:
        missing = importlib.util.find_spec("tensorboard") is None
    except (ImportError, ValueError):
        missing = True
    if missing:
        raise ConfigError(f"--log-to tensorboard needs the tensorboard package: {EXTRA_HINT}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _leaves(data: Any, prefix: str) -> Iterator[tuple[str, float]]:
    """Numeric leaves of nested dicts, as ``(path/with/slashes, value)``."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}/{key}" if prefix else str(key))
        return
    number = _number(data)
    if number is not None:
        yield prefix, number


def run_scalars(metrics: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of one run's ``metrics.json`` (steps 1-based).

    NaN values (written ``null``) are left out: TensorBoard draws a gap there.
    """
    series: dict[str, list[tuple[int, float]]] = {}

    def add(tag: str, step: int, value: Any) -> None:
        number = _number(value)
        if number is not None and math.isfinite(number):
            series.setdefault(tag, []).append((step, number))

    if metrics.get("kind", "train") == "sfl":
        for record in metrics.get("rounds") or []:
            step = int(record["round"])
            for path, value in _leaves(record, ""):
                if path == "round":
                    continue
                add(path if "/" in path else f"round/{path}", step, value)
        return series
    for key, tag in TRAIN_SERIES.items():
        for epoch, value in enumerate(metrics.get(key) or [], start=1):
            add(tag, epoch, value)
    best = metrics.get("best_epoch")
    step = best + 1 if isinstance(best, int) else len(metrics.get("epoch_times_s") or []) or 1
    add("test/accuracy", step, metrics.get("accuracy"))
    add("test/macro_f1", step, metrics.get("macro_f1"))
    return series


def _read_metrics(run: Path) -> dict[str, Any]:
    path = Path(run) / "metrics.json"
    try:
        return read_json_document(path, "missing: the run has not finished")
    except ValueError as exc:
        raise InputError(path, str(exc)) from None


def write_run(target: LogTarget, run: str | Path, name: str | None = None) -> Path:
    """Write the series of the finished run in ``run`` as TensorBoard scalars; returns
    the event directory."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            f"--log-to tensorboard needs the tensorboard package: {EXTRA_HINT}"
        ) from None
    metrics = _read_metrics(Path(run))
    where = target.run_dir(run, name)
    where.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(where))
    try:
        for tag, points in run_scalars(metrics).items():
            for step, value in points:
                writer.add_scalar(tag, value, global_step=step)
    finally:
        writer.close()
    return where


def write_study(target: LogTarget, study: str | Path, runs: Iterable[Path]) -> Path:
    """Write every finished run of a study, each in its own subdirectory (its path under
    the study); returns the directory holding them."""
    study = Path(study)
    top = study / "tensorboard" if target.dir is None else Path(target.dir)
    for run in runs:
        rel = Path(run).resolve().relative_to(study.resolve())
        write_run(LogTarget(target.kind, str(top)), run, name=str(rel))
    return top


def finished_runs(study: str | Path) -> list[Path]:
    """Run directories (holding ``metrics.json``) under ``study``, in path order; the
    tracker's own output is skipped."""
    study = Path(study)
    return sorted(
        p.parent
        for p in study.rglob("metrics.json")
        if "tensorboard" not in p.relative_to(study).parts
    )
