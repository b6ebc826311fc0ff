"""The result of a split federated run and the files written to its directory.

``OUT/metrics.json``: run metadata, one record per round (accuracy, macro-F1, loss,
simulated delay, bytes by hop/direction/type) and totals (``bytes_total`` among
them); ``OUT/topology.toml``: the topology with shard sizes (rerunnable with
``--topology OUT/topology.toml``); ``OUT/config.json``: the resolved configuration
and the assignment; ``OUT/profile.json``: the block profile; ``OUT/model.pt``: the
final global model's state dict (tensors only: ``torch.load(..., weights_only=True)``).
"""

from __future__ import annotations

import datetime as dt
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowsplit import __version__
from flowsplit.data.store import atomic_write_json
from flowsplit.federated.protocol import DIRECTIONS, HOPS, MESSAGE_TYPES
from flowsplit.federated.topology import Topology, write_topology


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

    def to_metrics(self) -> dict[str, Any]:
        return {
            "flowsplit_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "backend": self.backend,
            "scheme": self.config["scheme"],
            "cuts": self.config["cuts"],
            "topology": self.topology.name,
            "n_clients": self.topology.n_clients,
            "n_aggregators": self.topology.n_aggregators,
            "seed": self.config["seed"],
            "host": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "machine": platform.machine(),
            },
            **self.info,
            "rounds": self.history,
            "totals": self.totals(),
        }


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
    tmp = out / ".model.pt.tmp"
    torch.save({k: v.detach().cpu() for k, v in result.model_state.items()}, tmp)
    tmp.replace(out / "model.pt")
    path = out / "metrics.json"
    atomic_write_json(path, result.to_metrics())
    return path


def read_model_state(path: str | Path) -> dict[str, torch.Tensor]:
    """Load ``model.pt`` safely (tensors only)."""
    return torch.load(Path(path), map_location="cpu", weights_only=True)


def read_run(out_dir: str | Path) -> SFLResult:
    """Read a run directory written by :func:`write_run` back into an :class:`SFLResult`."""
    import json

    from flowsplit.federated.topology import read_topology

    out = Path(out_dir)
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assignment = np.asarray(config.pop("assignment"), dtype=np.int64)
    known = {"rounds", "totals", "flowsplit_version", "created", "backend", "scheme", "cuts",
             "topology", "n_clients", "n_aggregators", "seed", "host"}  # fmt: skip
    return SFLResult(
        backend=metrics["backend"],
        config=config,
        history=metrics["rounds"],
        profile=json.loads((out / "profile.json").read_text(encoding="utf-8")),
        topology=read_topology(out / "topology.toml"),
        assignment=assignment,
        model_state=read_model_state(out / "model.pt"),
        info={k: v for k, v in metrics.items() if k not in known},
    )
