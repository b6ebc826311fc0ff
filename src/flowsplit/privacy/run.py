"""``sfl privacy`` as one library call, :func:`privacy_study`: the study run (or read
back to redraw), every cut pair's delay and leakage on a topology, the pair chosen under
a leakage budget (and a plan's pair), written to ``OUT/privacy.json`` and
``OUT/pareto.png``. ``flowsplit sfl privacy`` parses its options into a
:class:`~flowsplit.privacy.config.PrivacyConfig` and a
:class:`~flowsplit.privacy.config.ParetoChoice` and calls it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from flowsplit.errors import ConfigError, InputError
from flowsplit.inputs import read_json_input
from flowsplit.privacy.config import ParetoChoice, PrivacyConfig
from flowsplit.privacy.result import PRIVACY_NAME, PairRow, PrivacyResult
from flowsplit.util import jsonable

log = logging.getLogger("flowsplit.privacy")

PARETO_NAME = "pareto.png"


def privacy_study(
    dataset: str | Path,
    out: str | Path,
    config: PrivacyConfig,
    picture: ParetoChoice,
    *,
    redraw: bool = False,
    overwrite: bool = False,
    victim_run: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> PrivacyResult:
    """Run the study into ``out`` (``redraw``: read the one there), then draw its cut
    pairs on ``picture``'s topology; the result, its ``pareto`` filled in."""
    from flowsplit.privacy.pareto import choose, draw_pareto
    from flowsplit.privacy.result import Pareto

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a directory")
    if redraw:
        result = _read_study(out)
    else:
        result = _new_study(dataset, config, out, overwrite, victim_run, progress)
    measure = picture.leakage_measure or result.default_measure()
    rows, topology = _pair_rows(dataset, config, picture, result, measure)
    result.pareto = Pareto(
        measure=measure,
        topology=topology.name,
        max_leakage=picture.max_leakage,
        pairs=rows,
        chosen=choose(rows, picture.max_leakage),
        unconstrained=choose(rows, None),
        plan=_planned(Path(picture.plan), rows) if picture.plan is not None else None,
    )
    out.mkdir(parents=True, exist_ok=True)
    result.to_json(out / PRIVACY_NAME)
    draw_pareto(result, out / PARETO_NAME)
    return result


def _read_study(out: Path) -> PrivacyResult:
    """--redraw: the study already in ``out``."""
    from flowsplit.privacy.result import read_privacy_result

    if not (out / PRIVACY_NAME).is_file():
        raise InputError(out / PRIVACY_NAME, "not found: --redraw needs a finished study in OUT")
    return read_privacy_result(out / PRIVACY_NAME)


def _new_study(
    dataset: str | Path,
    config: PrivacyConfig,
    out: Path,
    overwrite: bool,
    victim_run: Path | None,
    progress: Callable[[str], None] | None,
) -> PrivacyResult:
    """Train (or load ``victim_run``) and attack every cut, in an empty or replaced ``out``."""
    from flowsplit.privacy.study import check_sfl_run, run_study

    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise InputError(out, "exists and is not empty (use --overwrite to replace it)")
        if not (out / PRIVACY_NAME).is_file():
            # rmtree below: never of a folder that is not a study (a dataset, a home).
            raise InputError(out, "is not an `sfl privacy` study; --overwrite replaces only one")
        shutil.rmtree(out)
    if victim_run is not None:
        check_sfl_run(victim_run, read=True)  # before the note: a bad run is the only line
        if config.defences:
            log.info("note: defences are trained afresh; only the undefended cuts use --victim-run")
    say = progress or (lambda msg: None)
    doc = run_study(dataset, config, weights=victim_run, progress=say)
    return PrivacyResult.from_dict(jsonable(doc, strict=False))


def _pair_rows(
    dataset: str | Path,
    config: PrivacyConfig,
    picture: ParetoChoice,
    result: PrivacyResult,
    measure: str,
):
    """Every legal cut pair's delay on the picture's topology and leakage of ``measure``,
    and the topology. The delays need the model's block profile, built as the study
    built it."""
    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.federated.system.profile import profile_model
    from flowsplit.models.registry import build_model
    from flowsplit.privacy.pareto import pair_table

    ds = load_dataset(dataset)
    torch.manual_seed(0)
    model = build_model(
        result.model,
        view=result.view,
        input_shape=ds.view_shape(result.view),
        n_classes=ds.n_classes,
        **result.model_options,
    )
    profile = profile_model(model)
    topology = resolve_topology(
        picture.topology,
        n_clients=picture.n_clients,
        n_aggregators=picture.n_aggregators,
        seed=config.seed,
    )
    try:
        rows = pair_table(result, profile, topology, measure=measure, batch_size=config.batch_size)
    except ValueError as exc:
        raise ConfigError(f"--leakage-measure {measure!r}: {exc}") from None
    return rows, topology


def _planned(path: Path, rows: list[PairRow]) -> PairRow:
    """The pair row of the cuts a ``sfl plan`` JSON chose."""
    doc = read_json_input(path, "plan file not found")
    try:
        cuts = [int(c) for c in doc["cuts"]]
    except (KeyError, TypeError, ValueError):
        raise InputError(path, "is not a plan.json with 'cuts' [a, c]") from None
    for row in rows:
        if row.cuts == cuts:
            return row
    raise InputError(path, f"plans cuts {tuple(cuts)}, which this study did not measure")


__all__ = ["PARETO_NAME", "privacy_study"]
