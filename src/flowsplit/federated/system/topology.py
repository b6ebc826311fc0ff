"""The network the split training runs on: clients, edge aggregators, one server, links.

A :class:`Topology` stores everything as NumPy arrays (structure of arrays), so the
cost model and the planner evaluate thousands of clients without Python loops:

- clients: compute speed (FLOP/s), memory (bytes), shard size (training samples);
- aggregators: compute speed, and their link to the server (latency s, bandwidth B/s);
- client-aggregator links as ``(N, A)`` matrices; a bandwidth of 0 means "no link";
- the server's compute speed.

Topologies are written to and read from TOML (:func:`write_topology`,
:func:`read_topology`; read with :mod:`tomllib`, written by a small writer here,
no dependency), and every run directory gets one, so a run can be repeated exactly.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.errors import ConfigError, InputError

ASSIGN_RULES = ("round-robin", "random", "nearest")


@dataclass(frozen=True)
class Topology:
    """Clients, aggregators, the server and the links between them."""

    name: str
    client_speed: np.ndarray
    """(N,) client compute speed, FLOP/s."""
    client_memory: np.ndarray
    """(N,) client memory budget, bytes."""
    client_samples: np.ndarray
    """(N,) training samples in each client's shard (0 until a partition fills it)."""
    aggregator_speed: np.ndarray
    """(A,) aggregator compute speed, FLOP/s."""
    server_speed: float
    """Server compute speed, FLOP/s."""
    ca_latency: np.ndarray
    """(N, A) client-aggregator link latency, s."""
    ca_bandwidth: np.ndarray
    """(N, A) client-aggregator link bandwidth, bytes/s (0: no link)."""
    as_latency: np.ndarray
    """(A,) aggregator-server link latency, s."""
    as_bandwidth: np.ndarray
    """(A,) aggregator-server link bandwidth, bytes/s."""
    description: str = ""
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def n_clients(self) -> int:
        return len(self.client_speed)

    @property
    def n_aggregators(self) -> int:
        return len(self.aggregator_speed)

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first inconsistent field."""
        n, a = self.n_clients, self.n_aggregators
        if n < 1 or a < 1:
            raise ConfigError(f"topology {self.name!r}: needs at least 1 client and 1 aggregator")
        shapes = {
            "client_memory": (self.client_memory, (n,)),
            "client_samples": (self.client_samples, (n,)),
            "ca_latency": (self.ca_latency, (n, a)),
            "ca_bandwidth": (self.ca_bandwidth, (n, a)),
            "as_latency": (self.as_latency, (a,)),
            "as_bandwidth": (self.as_bandwidth, (a,)),
        }
        for key, (arr, shape) in shapes.items():
            if np.shape(arr) != shape:
                raise ConfigError(
                    f"topology {self.name!r}: {key} has shape {np.shape(arr)}, expected {shape}"
                )
        positive = {
            "client_speed": self.client_speed,
            "aggregator_speed": self.aggregator_speed,
            "as_bandwidth": self.as_bandwidth,
            "server_speed": np.asarray([self.server_speed]),
        }
        for key, arr in positive.items():
            if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                raise ConfigError(f"topology {self.name!r}: {key} must be finite and > 0")
        for key, arr in (("ca_latency", self.ca_latency), ("as_latency", self.as_latency)):
            if np.any(arr < 0) or not np.all(np.isfinite(arr)):
                raise ConfigError(f"topology {self.name!r}: {key} must be finite and >= 0")
        if np.any(self.ca_bandwidth < 0) or np.any(self.client_samples < 0):
            raise ConfigError(f"topology {self.name!r}: bandwidths and shard sizes must be >= 0")
        if np.any((self.ca_bandwidth > 0).sum(axis=1) == 0):
            bad = int(np.flatnonzero((self.ca_bandwidth > 0).sum(axis=1) == 0)[0])
            raise ConfigError(f"topology {self.name!r}: client {bad} has no link to any aggregator")

    def with_samples(self, counts: np.ndarray) -> Topology:
        """This topology with the shard sizes of a partition filled in."""
        return replace(self, client_samples=np.asarray(counts, dtype=np.int64))

    def check_assignment(self, assignment: np.ndarray) -> np.ndarray:
        """Validate a client -> aggregator assignment (shape (N,), linked aggregators only)."""
        assignment = np.asarray(assignment, dtype=np.int64)
        if assignment.shape != (self.n_clients,):
            raise ConfigError(
                f"assignment has {assignment.size} entries for {self.n_clients} clients"
            )
        if np.any(assignment < 0) or np.any(assignment >= self.n_aggregators):
            raise ConfigError(f"assignment names aggregators outside 0..{self.n_aggregators - 1}")
        linked = self.ca_bandwidth[np.arange(self.n_clients), assignment] > 0
        if not np.all(linked):
            bad = int(np.flatnonzero(~linked)[0])
            raise ConfigError(
                f"client {bad} is assigned to aggregator {assignment[bad]} but has no link to it"
            )
        return assignment


def assign_clients(topology: Topology, rule: str = "round-robin", seed: int = 0) -> np.ndarray:
    """A client -> aggregator assignment by a simple rule (the planner finds better ones).

    ``round-robin``: client ``i`` to the ``i mod A``-th aggregator it links to;
    ``random``: uniformly among linked aggregators (seeded); ``nearest``: the linked
    aggregator with the lowest latency, ties broken by bandwidth then index.
    """
    n, a = topology.n_clients, topology.n_aggregators
    linked = topology.ca_bandwidth > 0
    if rule == "round-robin":
        out = np.arange(n) % a
        bad = ~linked[np.arange(n), out]
        for i in np.flatnonzero(bad):
            choices = np.flatnonzero(linked[i])
            out[i] = choices[i % len(choices)]
        return out.astype(np.int64)
    if rule == "random":
        rng = np.random.default_rng(seed)
        scores = np.where(linked, rng.random((n, a)), -1.0)
        return scores.argmax(axis=1).astype(np.int64)
    if rule == "nearest":
        # Lexicographic: latency, then higher bandwidth, then index.
        lat = np.where(linked, topology.ca_latency, np.inf)
        bw_rank = -topology.ca_bandwidth
        order = np.lexsort((np.broadcast_to(np.arange(a), (n, a)), bw_rank, lat), axis=1)
        return order[:, 0].astype(np.int64)
    raise ConfigError(f"unknown assignment rule {rule!r}; choose one of {', '.join(ASSIGN_RULES)}")


# --- TOML --------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        v = float(value)
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return repr(v)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list | tuple | np.ndarray):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def topology_to_toml(topology: Topology) -> str:
    """The topology as a TOML document (one table per aggregator and per client)."""
    lines = [
        "# flowsplit topology: speeds in FLOP/s, memory in bytes, latency in s,",
        "# bandwidth in bytes/s (0 = no link); client links list one value per aggregator.",
        f"name = {_fmt(topology.name)}",
        f"description = {_fmt(topology.description)}",
    ]
    if topology.seed is not None:
        lines.append(f"seed = {int(topology.seed)}")
    lines += ["", "[server]", f"speed_flops = {_fmt(float(topology.server_speed))}"]
    if topology.extra:
        lines += ["", "[extra]"]
        lines += [f"{k} = {_fmt(v)}" for k, v in topology.extra.items()]
    for j in range(topology.n_aggregators):
        lines += [
            "",
            "[[aggregators]]",
            f"speed_flops = {_fmt(float(topology.aggregator_speed[j]))}",
            f"latency_s = {_fmt(float(topology.as_latency[j]))}",
            f"bandwidth_Bps = {_fmt(float(topology.as_bandwidth[j]))}",
        ]
    for i in range(topology.n_clients):
        lines += [
            "",
            "[[clients]]",
            f"speed_flops = {_fmt(float(topology.client_speed[i]))}",
            f"memory_bytes = {_fmt(int(topology.client_memory[i]))}",
            f"n_samples = {_fmt(int(topology.client_samples[i]))}",
            f"latency_s = {_fmt([float(x) for x in topology.ca_latency[i]])}",
            f"bandwidth_Bps = {_fmt([float(x) for x in topology.ca_bandwidth[i]])}",
        ]
    return "\n".join(lines) + "\n"


def topology_from_toml(text: str, *, source: str = "<toml>") -> Topology:
    """Parse a document written by :func:`topology_to_toml` (or by hand, same keys)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, f"invalid TOML ({exc})") from None
    try:
        aggs, clients = doc["aggregators"], doc["clients"]
        n_aggs = len(aggs)

        def per_agg(row: dict[str, Any], key: str) -> list[float]:
            values = row[key]
            values = values if isinstance(values, list) else [values] * n_aggs
            if len(values) != n_aggs:
                raise ValueError(
                    f"clients.{key} lists {len(values)} values for {n_aggs} aggregators"
                )
            return [float(v) for v in values]

        return Topology(
            name=str(doc.get("name", Path(source).stem)),
            description=str(doc.get("description", "")),
            seed=doc.get("seed"),
            server_speed=float(doc["server"]["speed_flops"]),
            extra=dict(doc.get("extra", {})),
            aggregator_speed=np.array([float(r["speed_flops"]) for r in aggs]),
            as_latency=np.array([float(r["latency_s"]) for r in aggs]),
            as_bandwidth=np.array([float(r["bandwidth_Bps"]) for r in aggs]),
            client_speed=np.array([float(r["speed_flops"]) for r in clients]),
            client_memory=np.array([int(r.get("memory_bytes", 2**31)) for r in clients]),
            client_samples=np.array([int(r.get("n_samples", 0)) for r in clients], dtype=np.int64),
            ca_latency=np.array([per_agg(r, "latency_s") for r in clients]).reshape(-1, n_aggs),
            ca_bandwidth=np.array([per_agg(r, "bandwidth_Bps") for r in clients]).reshape(
                -1, n_aggs
            ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        what = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InputError(source, f"not a flowsplit topology: {what}") from None


def write_topology(topology: Topology, path: str | Path) -> Path:
    """Write ``topology`` as TOML to ``path``."""
    from flowsplit.data.store import atomic_write_text

    path = Path(path)
    atomic_write_text(path, topology_to_toml(topology))
    return path


def read_topology(path: str | Path) -> Topology:
    """Read a topology TOML file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "no such topology file")
    return topology_from_toml(path.read_text(encoding="utf-8"), source=str(path))
