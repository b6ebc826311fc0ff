"""The result of a split federated run and the files written to its directory.

``OUT/metrics.json``: the run's :class:`~flowsplit.result.RunResult` (kind
``sfl``, the schema every run writes): run metadata, one record per round (accuracy,
macro-F1, loss, simulated delay, bytes by hop/direction/type), ``bytes_total`` and the
other totals; ``OUT/topology.toml``: the topology with shard sizes (rerunnable with
``--topology OUT/topology.toml``); ``OUT/config.json``: the resolved configuration
and the assignment; ``OUT/profile.json``: the block profile; ``OUT/model.pt``: the
final global model's state dict (tensors only: ``torch.load(..., weights_only=True)``).

Once its rounds are done, :func:`finish_run` gives a run what a ``train`` run has: the
final global model scored per class on the evaluation split (per-class F1, confusion
matrix, each flow's true and predicted label and flow id in ``metrics.json``), the whole
model as ``weights.safetensors``, and the model and dataset sections of ``config.json``
that ``evaluate`` and ``predict`` read to rebuild it.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowsplit import __version__
from flowsplit.errors import InputError
from flowsplit.federated.system.parts import join_parts, split_model
from flowsplit.federated.system.protocol import DIRECTIONS, HOPS, MESSAGE_TYPES
from flowsplit.federated.system.topology import Topology, read_topology, write_topology
from flowsplit.inputs import read_json_input
from flowsplit.outputs import atomic_write_json
from flowsplit.result import RoundRecord, RunResult, read_result
from flowsplit.train.checkpoint import load_tensors, save_tensors
from flowsplit.train.metrics import classification_summary
from flowsplit.train.runs import (
    WEIGHTS_NAME,
    dataset_section,
    model_section,
    predict_proba,
    read_run_config,
    save_weights,
)


@dataclass
class SFLResult:
    """What a run produced (the same type for both backends)."""

    backend: str
    config: dict[str, Any]
    history: list[dict[str, Any]]
    profile: dict[str, Any]
    topology: Topology
    assignment: np.ndarray
    model_state: dict[str, torch.Tensor]
    """State dict of the final global model (client, aggregator, server parts in a row)."""
    view: str
    """Dataset view the model read."""
    classes: list[str]
    """Class names of the dataset, index = label."""
    n_test: int
    """Rows of the evaluation split every round is scored on."""
    info: dict[str, Any] = field(default_factory=dict)

    def totals(self) -> dict[str, Any]:
        """Sums over rounds, and the final scores."""
        nested = {h: {d: dict.fromkeys(MESSAGE_TYPES, 0) for d in DIRECTIONS} for h in HOPS}
        for rec in self.history:
            for h in HOPS:
                for d in DIRECTIONS:
                    for t in MESSAGE_TYPES:
                        nested[h][d][t] += rec["bytes"][h][d][t]
        last = self.history[-1] if self.history else {}
        out: dict[str, Any] = {
            "rounds": len(self.history),
            "bytes_total": sum(r["bytes_total"] for r in self.history),
            "messages_total": sum(r["messages_total"] for r in self.history),
            "bytes_by_hop": {h: sum(sum(v.values()) for v in nested[h].values()) for h in HOPS},
            "bytes_by_direction": {
                d: sum(sum(nested[h][d].values()) for h in HOPS) for d in DIRECTIONS
            },
            "bytes_by_type": {
                t: sum(nested[h][d][t] for h in HOPS for d in DIRECTIONS) for t in MESSAGE_TYPES
            },
            "bytes": nested,
            "delay_total_s": last.get("clock_s", 0.0),
            "wall_total_s": sum(r["wall_s"] for r in self.history),
            "final_accuracy": last.get("accuracy"),
            "final_macro_f1": last.get("macro_f1"),
            "final_loss": last.get("loss"),
            "best_accuracy": max((r["accuracy"] for r in self.history), default=None),
        }
        if self.history and "bytes_received_total" in last:
            out["bytes_received_total"] = sum(r["bytes_received_total"] for r in self.history)
        return out

    def to_result(self) -> RunResult:
        """The run as the one result schema (``kind="sfl"``), as ``metrics.json`` holds it."""
        totals = self.totals()
        last = self.history[-1] if self.history else None
        return RunResult(
            kind="sfl",
            model=str(self.profile["model"]),
            view=self.view,
            engine=f"sfl-{self.backend}",
            # sim: every role in one process; dist: one process per role (the world size)
            workers=int(self.info["world_size"]) if self.backend == "dist" else 1,
            threads_per_worker=int(self.config["threads"]),
            device="cpu",
            backend=self.backend,
            seed=int(self.config["seed"]),
            wall_time_s=float(totals["wall_total_s"]),
            accuracy=float(last["accuracy"]) if last else float("nan"),
            macro_f1=float(last["macro_f1"]) if last else float("nan"),
            classes=list(self.classes),
            n_train=int(np.asarray(self.topology.client_samples).sum()),
            n_test=int(self.n_test),
            config=self.config,
            env={
                "flowsplit": __version__,
                "python": platform.python_version(),
                "torch": torch.__version__,
                "machine": platform.machine(),
                "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            },
            extra=dict(self.info),
            scheme=str(self.config["scheme"]),
            cuts=[int(c) for c in self.config["cuts"]],
            topology=self.topology.name,
            n_clients=int(self.topology.n_clients),
            n_aggregators=int(self.topology.n_aggregators),
            rounds=[RoundRecord.from_dict(r, f"round {i + 1}") for i, r in enumerate(self.history)],
            bytes_total=int(totals["bytes_total"]),
            delay_total_s=float(totals["delay_total_s"]),
            totals=totals,
        )


def assignment_facts(history: list[dict[str, Any]], final: np.ndarray) -> dict[str, Any]:
    """What a result's ``info`` says of the assignment's changes: every move (which client
    went from which aggregator to which, from which round on) and the last assignment."""
    return {
        "reassignments": [
            {"round": int(rec["round"]), "client": c, "from": f, "to": t}
            for rec in history
            for c, f, t in rec.get("reassigned", [])
        ],
        "final_assignment": [int(a) for a in final],
    }


def result_of_run(
    setup: Any, backend: str, history: list[dict[str, Any]], model: Any, info: dict[str, Any]
) -> SFLResult:
    """The :class:`SFLResult` of a finished run of ``setup`` (both runners: ``sim`` and
    ``dist``): its config, profile, topology and first assignment, the dataset facts,
    the final global ``model``'s weights, and the runner's own ``info``."""
    return SFLResult(
        backend=backend,
        config=setup.config.to_dict(),
        history=history,
        profile=setup.profile.to_dict(),
        topology=setup.topology,
        assignment=setup.assignment,
        model_state=model.state_dict(),
        view=setup.view,
        classes=list(setup.dataset.classes),
        n_test=len(setup.dataset.split_indices(setup.config.eval_split)),
        info=info,
    )


def write_run(out_dir: str | Path, result: SFLResult) -> Path:
    """Write a run directory (see the module docstring); returns ``OUT/metrics.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_topology(result.topology, out / "topology.toml")
    atomic_write_json(
        out / "config.json",
        {**result.config, "assignment": [int(a) for a in result.assignment]},
    )
    atomic_write_json(out / "profile.json", result.profile)
    save_tensors(out / "model.pt", {k: v.detach().cpu() for k, v in result.model_state.items()})
    path = out / "metrics.json"
    result.to_result().to_json(path)
    return path


def read_model_state(path: str | Path) -> dict[str, torch.Tensor]:
    """Load ``model.pt`` safely (tensors only); a damaged file is an ``InputError``."""
    return load_tensors(path, what="model")


def read_run(out_dir: str | Path) -> SFLResult:
    """Read a run directory written by :func:`write_run` back into an :class:`SFLResult`.

    ``metrics.json`` is read by :func:`~flowsplit.result.read_result`: a file of
    another schema, or of a training run, is a one-line :class:`~flowsplit.errors.InputError`.
    """
    out = Path(out_dir)
    result = read_result(out)
    if result.kind != "sfl":
        raise InputError(
            out / "metrics.json", f"the result of a {result.kind!r} run, not of an SFL run"
        )
    config = read_run_config(out)
    assignment = np.asarray(config.pop("assignment"), dtype=np.int64)
    return SFLResult(
        backend=str(result.backend),
        config=config,
        history=[r.to_dict() for r in result.rounds or []],
        profile=read_json_input(out / "profile.json"),
        topology=read_topology(out / "topology.toml"),
        assignment=assignment,
        model_state=read_model_state(out / "model.pt"),
        view=result.view,
        classes=result.classes,
        n_test=result.n_test,
        info=dict(result.extra),
    )


def global_model(setup: Any, model_state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The run's :class:`~flowsplit.models.base.BlockModel` holding the final weights.

    ``model_state`` is the client, aggregator and server parts in a row (``0.layers.i``,
    ``1.layers.j``, ``2.layers.k``); they are loaded into the parts of a copy of the
    initial model and joined back block by block.
    """
    model = copy.deepcopy(setup.model)
    split = split_model(model, *setup.config.cuts)
    join_parts(split.client, split.aggregator, split.server).load_state_dict(model_state)
    parts = [split.client, split.aggregator, split.server]
    blocks = [block for part in parts for block in part.layers]
    for name, block in zip(model.block_names, blocks, strict=True):
        model.blocks[name] = block
    return model.eval()


def finish_run(out: str | Path, setup: Any, model_state: dict[str, torch.Tensor], model_fn) -> None:
    """Score the final model per class, save it whole, and describe it in ``config.json``."""
    out = Path(out)
    ds, view = setup.dataset, setup.view
    model = global_model(setup, model_state)
    rows = ds.split_indices(setup.config.eval_split)
    proba = predict_proba(model, np.asarray(ds.view(view)[rows]))
    y_true = ds.labels[rows].astype(np.int64)
    y_pred = proba.argmax(1) if len(rows) else np.zeros(0, dtype=np.int64)
    summary = classification_summary(y_true, y_pred, list(ds.classes))
    result = read_result(out)
    result.per_class_f1 = summary["per_class_f1"]
    result.confusion_matrix = summary["confusion_matrix"]
    result.test_labels = [int(v) for v in y_true]
    result.test_predictions = [int(v) for v in y_pred]
    result.test_flow_ids = [str(v) for v in ds.meta["flow_id"].to_numpy()[rows]]
    result.to_json(out / "metrics.json")
    name = getattr(model_fn, "name", None) or model.name
    options = dict(getattr(model_fn, "options", {}) or {})
    save_weights(model, out / WEIGHTS_NAME, {"model": name, "view": view})
    config_path = out / "config.json"
    doc = json.loads(config_path.read_text(encoding="utf-8"))
    options = _full_options(name, options)
    doc["model"] = model_section(name, "torch", ds, view, options)
    doc["dataset"] = dataset_section(ds, view)
    atomic_write_json(config_path, doc)


def _full_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A registry model's defaults with ``options`` over them (a user model: ``options``)."""
    from flowsplit.models.registry import MODEL_SPECS, model_options

    return {**model_options(name), **options} if name in MODEL_SPECS else options
