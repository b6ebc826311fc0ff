"""Split federated learning from Python: ``fs.sfl.run``, ``fs.sfl.plan``, ``fs.sfl.compare``.

    import flowsplit as fs

    plan = fs.sfl.plan("runs/ds", "runs/plan.json", clients=6, aggregators=2, rounds=2)
    run = fs.sfl.run("runs/ds", "runs/hsfl", plan="runs/plan.json")
    run.rounds[-1].accuracy, run.bytes_total, run.per_class_f1

Each runs the command of the same name in this process (the same checks, the same
files) and returns what it wrote, typed: a :class:`~flowsplit.result.RunResult`
for a run, the plan document for a plan, the study's typed result for a comparison. Options
are the command's, as keywords (``--model-option`` is ``model_options={...}``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowsplit.api import as_flags, path_argument, read_result, run_command, with_config
from flowsplit.result import RunResult

if TYPE_CHECKING:
    from flowsplit.experiments.sfl.result import SFLCompareResult

__all__ = ["compare", "plan", "run"]


def run(
    dataset: str | Path,
    out: str | Path,
    config: Any = None,
    *,
    plan: str | Path | None = None,
    quiet: bool = True,
    **options: Any,
) -> RunResult:
    """Train with ``sfl``, ``hsfl`` or ``hsfl-ll`` (``scheme=``), simulated (``mode="sim"``)
    or one process per role (``mode="dist"``); or run a ``plan`` from :func:`plan`.
    ``config`` (a :class:`~flowsplit.federated.config.SFLRunConfig`) gives every setting
    at once; keyword options override it, as flags override ``--config``.

    Returns the run's :class:`RunResult` (kind ``sfl``): ``rounds`` (accuracy, delay and
    bytes per round), ``bytes_total``, ``delay_total_s``, and, as for a ``train`` run,
    ``per_class_f1``, ``confusion_matrix`` and the test predictions.
    """
    argv = ["sfl", "run", path_argument("dataset", dataset), "-o", path_argument("out", out)]
    argv += ["--plan", path_argument("plan", plan)] if plan is not None else []
    if config is not None:
        with_config([*argv, *(["--quiet"] if quiet else [])], config, quiet=quiet, **options)
        return read_result(out)
    argv += as_flags({"quiet": quiet, **options}, argv)
    run_command(argv, quiet=quiet)
    return read_result(out)


def plan(
    dataset: str | Path,
    out: str | Path,
    config: Any = None,
    *,
    quiet: bool = True,
    **options: Any,
) -> dict:
    """Choose cuts and the client -> aggregator assignment for a topology (``sfl plan``);
    writes ``out`` (a plan.json that :func:`run` takes) and returns it as a dict:
    ``cuts``, ``assignment``, ``predicted`` (delay and bytes per round), ``run``, ...
    ``config`` (a :class:`~flowsplit.planner.study_config.StudyConfig`) gives every
    setting at once; keyword options override it (and give ``seed``, ``no_pilots``)."""
    argv = ["sfl", "plan", path_argument("dataset", dataset), "-o", path_argument("out", out)]
    if config is not None:
        with_config([*argv, *(["--quiet"] if quiet else [])], config, quiet=quiet, **options)
    else:
        run_command([*argv, *as_flags({"quiet": quiet, **options}, argv)], quiet=quiet)
    return json.loads(Path(out).read_text(encoding="utf-8"))


def compare(
    dataset: str | Path, out: str | Path, config: Any = None, **options: Any
) -> SFLCompareResult:
    """Compare schemes and planners on the same data and seeds (``sfl compare``); returns
    the study's :class:`~flowsplit.experiments.sfl.result.SFLCompareResult`
    (``OUT/results.json``: ``.summary`` in words, ``.schemes`` and ``.vs_hsfl``, the
    figures per scheme; ``OUT/results.csv`` has one row per run). ``config`` (an
    :class:`~flowsplit.experiments.sfl.config.SFLCompareConfig`) gives every setting at
    once; keyword options override it."""
    from flowsplit.experiments.sfl.result import read_sfl_compare_result

    argv = ["sfl", "compare", path_argument("dataset", dataset), "-o", path_argument("out", out)]
    if config is not None:
        with_config(argv, config, **options)
    else:
        run_command([*argv, *as_flags(options, argv)])
    return read_sfl_compare_result(out)
