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

A topology may carry a *trace*: changes of link bandwidth and latency and of client
availability that hold from a given round on (``[[trace]]`` tables in the TOML,
:class:`TraceEvent`; or seeded, :func:`random_trace`). :meth:`Topology.at_round` is
the network of one round and :meth:`Topology.available_at` who can take part in it;
the trace's schema is in ``src/flowsplit/federated/README.md`` (Topologies).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.config_args import SEED_LIMIT
from flowsplit.errors import ConfigError, InputError
from flowsplit.inputs import read_text_input

ASSIGN_RULES = ("round-robin", "random", "nearest")


class TraceEventError(ConfigError):
    """A trace event that is wrong on its own (``problem`` says how)."""

    def __init__(self, round_number: Any, problem: str):
        self.problem = problem
        super().__init__(f"trace event of round {round_number!r}: {problem}")


@dataclass(frozen=True)
class TraceEvent:
    """One change of a topology's trace, holding in rounds ``round .. until`` (1-based).

    Exactly one target: ``client`` (all of its links, or with ``aggregator`` the one
    link between them; or, with ``available``, whether it can take part) or
    ``backbone`` (aggregator ``j``'s link to the server). A link change sets the
    bandwidth (B/s) or scales the base bandwidth, and sets or scales the latency (s).
    """

    round: int
    """First round (1-based, as in metrics.json) the change holds."""
    until: int | None = None
    """Last round it holds (inclusive; None: to the end of the run)."""
    client: int = -1
    aggregator: int = -1
    backbone: int = -1
    bandwidth: float | None = None
    """New bandwidth, bytes/s (> 0; a lost client is ``available = false``, not 0)."""
    bandwidth_scale: float | None = None
    """Factor on the base bandwidth (> 0)."""
    latency: float | None = None
    """New latency, s (>= 0)."""
    latency_scale: float | None = None
    """Factor on the base latency (> 0)."""
    available: bool | None = None
    """False: the client sits these rounds out; True: it is back."""

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise TraceEventError(self.round, problem)

    @property
    def changes_links(self) -> bool:
        return any(
            v is not None
            for v in (self.bandwidth, self.bandwidth_scale, self.latency, self.latency_scale)
        )

    def covers(self, round_number: int) -> bool:
        """Whether the change holds in round ``round_number`` (1-based)."""
        return self.round <= round_number and (self.until is None or round_number <= self.until)

    def problem(self) -> str:
        """What is wrong with the event on its own ('' when nothing)."""
        if isinstance(self.round, bool) or not isinstance(self.round, int) or self.round < 1:
            return "round must be an integer >= 1 (the first round is 1)"
        if self.until is not None and (
            isinstance(self.until, bool)
            or not isinstance(self.until, int)
            or self.until < self.round
        ):
            return f"until must be an integer >= round ({self.round})"
        if (self.client >= 0) == (self.backbone >= 0):
            return "give one target: a client link or client, or a backbone link"
        if self.aggregator >= 0 and self.client < 0:
            return "an aggregator end needs a client (link = 'client:I/aggregator:J')"
        if self.bandwidth is not None and self.bandwidth_scale is not None:
            return "give a bandwidth or a bandwidth scale, not both"
        if self.latency is not None and self.latency_scale is not None:
            return "give a latency or a latency scale, not both"
        for key, value, low in (
            ("bandwidth", self.bandwidth, "> 0"),
            ("bandwidth_scale", self.bandwidth_scale, "> 0"),
            ("latency_scale", self.latency_scale, "> 0"),
            ("latency", self.latency, ">= 0"),
        ):
            if value is None:
                continue
            bad = not math.isfinite(value) or (value <= 0 if low == "> 0" else value < 0)
            if bad:
                return f"{key} must be finite and {low}, got {value}"
        if self.available is not None:
            if self.changes_links:
                return "a change of availability names a client only, with no link values"
            if self.client < 0 or self.aggregator >= 0:
                return "available applies to a client (client = I)"
        elif not self.changes_links:
            return "changes nothing: give a bandwidth, a latency or available"
        return ""

    def check_target(self, n: int, a: int, ca_bandwidth: np.ndarray, *, where: str) -> None:
        """Raise :class:`ConfigError` if the event names a node or link not in the topology."""
        if self.client >= n:
            raise ConfigError(f"{where}: client {self.client} not in 0..{n - 1}")
        if self.aggregator >= a or self.backbone >= a:
            j = max(self.aggregator, self.backbone)
            raise ConfigError(f"{where}: aggregator {j} not in 0..{a - 1}")
        if self.aggregator >= 0 and ca_bandwidth[self.client, self.aggregator] <= 0:
            raise ConfigError(
                f"{where}: client {self.client} has no link to aggregator {self.aggregator} "
                "to change (a trace changes links, it does not make new ones)"
            )

    @property
    def link(self) -> str:
        """The target as written in TOML: ``client:I``, ``client:I/aggregator:J`` or ``backbone:J``."""
        if self.backbone >= 0:
            return f"backbone:{self.backbone}"
        if self.aggregator >= 0:
            return f"client:{self.client}/aggregator:{self.aggregator}"
        return f"client:{self.client}"

    def to_dict(self) -> dict[str, Any]:
        """The event as its ``[[trace]]`` table (SI units)."""
        d: dict[str, Any] = {"round": self.round}
        if self.until is not None:
            d["until"] = self.until
        if self.available is not None:
            d["client"] = self.client
            d["available"] = bool(self.available)
            return d
        d["link"] = self.link
        for key, value in (
            ("bandwidth_Bps", self.bandwidth),
            ("bandwidth_scale", self.bandwidth_scale),
            ("latency_s", self.latency),
            ("latency_scale", self.latency_scale),
        ):
            if value is not None:
                d[key] = float(value)
        return d


def _apply(event, lat, bw, base_lat, base_bw, cols) -> None:
    """Write ``event``'s link values into ``lat``/``bw`` at ``cols`` (scales on the base)."""
    if event.bandwidth is not None:
        bw[cols] = event.bandwidth
    elif event.bandwidth_scale is not None:
        bw[cols] = base_bw[cols] * event.bandwidth_scale
    if event.latency is not None:
        lat[cols] = event.latency
    elif event.latency_scale is not None:
        lat[cols] = base_lat[cols] * event.latency_scale


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
    trace: tuple[TraceEvent, ...] = ()
    """Per-round changes of links and availability (empty: the same network every round)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "trace", tuple(self.trace))
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
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer)
        ):
            raise ConfigError(f"topology {self.name!r}: seed {self.seed!r} is not an integer")
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
        for k, event in enumerate(self.trace):
            event.check_target(
                n, a, self.ca_bandwidth, where=f"topology {self.name!r}: [[trace]] #{k + 1}"
            )

    def at_round(self, round_index: int) -> Topology:
        """The network of round ``round_index`` (0-based; a trace's ``round`` is 1-based).

        Every trace event that covers the round is applied in order of its first round
        (file order among equal ones), so a later change of the same field wins; scales
        multiply the base value, not a previous change. Without a covering event this
        is the topology itself (the same object).
        """
        events = self.events_at(round_index)
        if not any(e.changes_links for e in events):
            return self
        ca_lat, ca_bw = self.ca_latency.copy(), self.ca_bandwidth.copy()
        as_lat, as_bw = self.as_latency.copy(), self.as_bandwidth.copy()
        for e in events:
            if e.backbone >= 0:
                rows = np.array([e.backbone])
                _apply(e, as_lat, as_bw, self.as_latency, self.as_bandwidth, rows)
                continue
            if not e.changes_links:
                continue
            cols = np.flatnonzero(self.ca_bandwidth[e.client] > 0)
            if e.aggregator >= 0:
                cols = np.array([e.aggregator])
            i = e.client
            _apply(e, ca_lat[i], ca_bw[i], self.ca_latency[i], self.ca_bandwidth[i], cols)
        return replace(
            self, ca_latency=ca_lat, ca_bandwidth=ca_bw, as_latency=as_lat, as_bandwidth=as_bw
        )

    def available_at(self, round_index: int) -> np.ndarray:
        """(N,) bool: the clients the trace lets take part in round ``round_index`` (0-based)."""
        out = np.ones(self.n_clients, dtype=bool)
        for e in self.events_at(round_index):
            if e.available is not None:
                out[e.client] = e.available
        return out

    def events_at(self, round_index: int) -> list[TraceEvent]:
        """The trace events covering round ``round_index`` (0-based), in application order."""
        number = int(round_index) + 1
        covering = [(e.round, k, e) for k, e in enumerate(self.trace) if e.covers(number)]
        return [e for _, _, e in sorted(covering, key=lambda t: (t[0], t[1]))]

    def with_trace(self, trace: tuple[TraceEvent, ...] | list[TraceEvent]) -> Topology:
        """This topology with ``trace`` (replacing its own; empty: no changes)."""
        return replace(self, trace=tuple(trace))

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


def _toml_table(header: str, values: dict[str, Any]) -> list[str]:
    """A blank line, the table's ``header`` and a ``key = value`` line per item."""
    return ["", header, *(f"{k} = {_fmt(v)}" for k, v in values.items())]


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
    lines += _toml_table("[server]", {"speed_flops": float(topology.server_speed)})
    if topology.extra:
        lines += _toml_table("[extra]", topology.extra)
    for j in range(topology.n_aggregators):
        aggregator = {
            "speed_flops": float(topology.aggregator_speed[j]),
            "latency_s": float(topology.as_latency[j]),
            "bandwidth_Bps": float(topology.as_bandwidth[j]),
        }
        lines += _toml_table("[[aggregators]]", aggregator)
    for i in range(topology.n_clients):
        client = {
            "speed_flops": float(topology.client_speed[i]),
            "memory_bytes": int(topology.client_memory[i]),
            "n_samples": int(topology.client_samples[i]),
            "latency_s": [float(x) for x in topology.ca_latency[i]],
            "bandwidth_Bps": [float(x) for x in topology.ca_bandwidth[i]],
        }
        lines += _toml_table("[[clients]]", client)
    lines += trace_to_toml_lines(topology.trace)
    return "\n".join(lines) + "\n"


def trace_to_toml_lines(trace: tuple[TraceEvent, ...] | list[TraceEvent]) -> list[str]:
    """The ``[[trace]]`` tables of ``trace`` (SI units), one per event."""
    return [line for event in trace for line in _toml_table("[[trace]]", event.to_dict())]


def topology_from_toml(text: str, *, source: str = "<toml>") -> Topology:
    """Parse a document written by :func:`topology_to_toml` (or by hand, same keys)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, f"invalid TOML ({exc})") from None
    try:
        aggs, clients = doc["aggregators"], doc["clients"]
        _check_keys(doc, aggs, clients)
        n_aggs = len(aggs)

        def per_agg(row: dict[str, Any], key: str) -> list[float]:
            values = row[key]
            values = values if isinstance(values, list) else [values] * n_aggs
            if len(values) != n_aggs:
                raise ValueError(
                    f"clients.{key} lists {len(values)} values for {n_aggs} aggregators"
                )
            return [float(v) for v in values]

        trace = parse_trace(doc.get("trace", []), source=source)
        topology = Topology(
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
    except ConfigError as exc:  # Topology.validate: the values, named by field
        raise InputError(source, str(exc)) from None
    return topology.with_trace(checked_trace(topology, trace, source=source))


TOML_KEYS = {
    "": ("name", "description", "seed", "server", "extra", "aggregators", "clients", "trace"),
    "server": ("speed_flops",),
    "aggregators": ("speed_flops", "latency_s", "bandwidth_Bps"),
    "clients": ("speed_flops", "memory_bytes", "n_samples", "latency_s", "bandwidth_Bps"),
}
"""The keys of a topology document, at the top and in each table (``extra`` is free)."""


def _check_keys(doc: dict, aggs: list, clients: list) -> None:
    """ValueError naming the first key no topology has (a misspelt key would otherwise
    leave its field at the default without a word)."""
    tables = [("", "the top level", doc), ("server", "[server]", doc.get("server"))]
    for kind, rows in (("aggregators", aggs), ("clients", clients)):
        tables += [(kind, f"[[{kind}]] #{k + 1}", row) for k, row in enumerate(rows)]
    for kind, place, table in tables:
        if not isinstance(table, dict):
            continue  # missing or mistyped: said by the reader
        unknown = sorted(set(table) - set(TOML_KEYS[kind]))
        if unknown:
            raise ValueError(
                f"{place} has no key {unknown[0]!r} (its keys: {', '.join(TOML_KEYS[kind])})"
            )


def checked_trace(
    topology: Topology, trace: tuple[TraceEvent, ...], *, source: str
) -> tuple[TraceEvent, ...]:
    """``trace`` if every event names a client, aggregator and link of ``topology``;
    else a one-line :class:`InputError` naming ``source`` and the entry."""
    for k, event in enumerate(trace):
        try:
            key = "link" if event.changes_links else "client"
            where = f"[[trace]] #{k + 1}: {key}"
            n, a = topology.n_clients, topology.n_aggregators
            event.check_target(n, a, topology.ca_bandwidth, where=where)
        except ConfigError as exc:
            raise InputError(source, str(exc)) from None
    return trace


TRACE_KEYS = {
    "round": "first round the change holds (1-based)",
    "until": "last round it holds (default: to the end)",
    "link": "'client:I' (all its links), 'client:I/aggregator:J' or 'backbone:J'",
    "client": "client index, with available",
    "available": "false: the client sits the rounds out",
    "bandwidth_mbps": "new bandwidth, Mbit/s",
    "bandwidth_Bps": "new bandwidth, bytes/s",
    "bandwidth_scale": "factor on the base bandwidth",
    "latency_ms": "new latency, ms",
    "latency_s": "new latency, s",
    "latency_scale": "factor on the base latency",
}
"""The keys of a ``[[trace]]`` table and what they mean."""

_LINK = re.compile(r"^(client):(\d+)(?:/aggregator:(\d+))?$|^(backbone):(\d+)$")


def parse_trace(tables: Any, *, source: str = "<toml>") -> tuple[TraceEvent, ...]:
    """``[[trace]]`` tables -> events; a one-line :class:`InputError` naming the entry and key."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise InputError(source, "trace: write each change as a [[trace]] table")
    return tuple(_trace_event(t, k + 1, source) for k, t in enumerate(tables))


def _trace_event(t: dict[str, Any], number: int, source: str) -> TraceEvent:
    def fail(key: str, problem: str) -> InputError:
        return InputError(source, f"[[trace]] #{number}: {key}: {problem}")

    unknown = sorted(set(t) - set(TRACE_KEYS))
    if unknown:
        raise fail(unknown[0], f"unknown key; known: {', '.join(TRACE_KEYS)}")

    def integer(key: str, *, required: bool = False) -> int | None:
        if key not in t:
            if required:
                raise fail(key, "missing (the first round the change holds, 1-based)")
            return None
        v = t[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key != "client" else 0):
            low = 0 if key == "client" else 1
            raise fail(key, f"must be an integer >= {low}, got {v!r}")
        return v

    def number_of(*keys: str) -> tuple[str, float] | None:
        given = [k for k in keys if k in t]
        if len(given) > 1:
            raise fail(given[1], f"give only one of {', '.join(keys)}")
        if not given:
            return None
        key, v = given[0], t[given[0]]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise fail(key, f"must be a number, got {v!r}")
        # A latency may be 0; a bandwidth of 0 would be no link (use available = false).
        zero_ok = key in ("latency_ms", "latency_s")
        if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
            raise fail(key, f"must be finite and {'>= 0' if zero_ok else '> 0'}, got {v!r}")
        return key, float(v)

    fields: dict[str, Any] = {"round": integer("round", required=True), "until": integer("until")}
    if "available" in t:
        if not isinstance(t["available"], bool):
            raise fail("available", f"must be true or false, got {t['available']!r}")
        if "client" not in t:
            raise fail("client", "missing: available applies to a client (client = I)")
        fields["available"] = t["available"]
    if "client" in t:
        if "link" in t:
            raise fail("client", "give link = ... for a link change, client = I with available")
        if "available" not in t:
            raise fail("available", "missing: client = I changes its availability")
        fields["client"] = integer("client")
    if "link" in t:
        m = _LINK.match(str(t["link"]).replace(" ", "")) if isinstance(t["link"], str) else None
        if m is None:
            raise fail("link", f"{t['link']!r}: write {TRACE_KEYS['link']}")
        if m.group(1):
            fields["client"] = int(m.group(2))
            fields["aggregator"] = -1 if m.group(3) is None else int(m.group(3))
        else:
            fields["backbone"] = int(m.group(5))
    scale = {"bandwidth_mbps": 1e6 / 8, "bandwidth_Bps": 1.0, "latency_ms": 1e-3, "latency_s": 1.0}
    bw = number_of("bandwidth_mbps", "bandwidth_Bps", "bandwidth_scale")
    lat = number_of("latency_ms", "latency_s", "latency_scale")
    for pair, absolute, factor in (
        (bw, "bandwidth", "bandwidth_scale"),
        (lat, "latency", "latency_scale"),
    ):
        if pair is not None:
            key, value = pair
            fields[factor if key.endswith("_scale") else absolute] = value * scale.get(key, 1.0)
    if "link" not in t and "client" not in t:
        raise fail("link", "missing: name what changes (link = ..., or client = I with available)")
    try:
        return TraceEvent(**fields)
    except TraceEventError as exc:
        raise fail("link" if "link" in t else "client", exc.problem) from None


# --- generated traces ------------------------------------------------------------------


def random_trace(
    topology: Topology,
    rounds: int,
    seed: int = 0,
    *,
    link_rate: float = 0.15,
    backbone_rate: float = 0.1,
    client_rate: float = 0.05,
    unavailable_rate: float = 0.03,
    mean_duration: float = 3.0,
    bandwidth_scale: tuple[float, float] = (0.02, 0.3),
    latency_scale: tuple[float, float] = (2.0, 10.0),
    max_unavailable: float = 0.25,
) -> tuple[TraceEvent, ...]:
    """A seeded trace of ``rounds`` rounds: the same events for the same arguments.

    Round 1 is the base topology (a plan made before the run sees the network as it
    is); from round 2 on, in each round and for each target not already changed:

    - each client, with probability ``link_rate``: one of its links (a random linked
      aggregator) congests (the path to that aggregator; moving the client helps);
    - each aggregator, with probability ``backbone_rate``: its backbone congests;
    - each client, with probability ``client_rate``: all its links congest (its own
      access network; no aggregator is better for it);
    - each client, with probability ``unavailable_rate``: it sits out, while at most
      ``max_unavailable`` of the clients are out at once.

    A congestion scales the base bandwidth by a log-uniform factor in
    ``bandwidth_scale`` and the latency by one in ``latency_scale``; every episode
    lasts a geometric number of rounds with mean ``mean_duration``.
    """
    if rounds < 1:
        raise ConfigError(f"a trace needs at least 1 round, got {rounds}")
    rates = {
        "link_rate": link_rate,
        "backbone_rate": backbone_rate,
        "client_rate": client_rate,
        "unavailable_rate": unavailable_rate,
        "max_unavailable": max_unavailable,
    }
    for name, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            raise ConfigError(f"random_trace: {name} must be in [0, 1], got {rate}")
    if mean_duration < 1:
        raise ConfigError(f"random_trace: mean_duration must be >= 1 round, got {mean_duration}")
    for name, (lo, hi) in (("bandwidth_scale", bandwidth_scale), ("latency_scale", latency_scale)):
        if not 0 < lo <= hi:
            raise ConfigError(f"random_trace: {name} must be 0 < low <= high, got {(lo, hi)}")
    rng = np.random.default_rng([int(seed), 5153])
    n, a = topology.n_clients, topology.n_aggregators
    linked = topology.ca_bandwidth > 0
    busy_until: dict[tuple[str, int, int], int] = {}  # target -> last round of its episode
    out_until = np.zeros(n, dtype=np.int64)  # last round each client is out
    events: list[TraceEvent] = []

    def log_uniform(bounds: tuple[float, float]) -> float:
        return float(np.exp(rng.uniform(np.log(bounds[0]), np.log(bounds[1]))))

    def episode(r: int) -> int:
        return min(rounds, r + int(rng.geometric(1.0 / mean_duration)) - 1)

    def congest(r: int, target: tuple[str, int, int], **where: int) -> None:
        until = episode(r)
        bw, lat = log_uniform(bandwidth_scale), log_uniform(latency_scale)
        if busy_until.get(target, 0) >= r:
            return
        busy_until[target] = until
        change = {"bandwidth_scale": bw, "latency_scale": lat}
        events.append(TraceEvent(round=r, until=until, **change, **where))

    for r in range(2, rounds + 1):
        # Draw every variate every round, used or not, so one rate does not shift the rest.
        u_link, pick = rng.random(n), rng.random(n)
        u_bb, u_client, u_out = rng.random(a), rng.random(n), rng.random(n)
        for i in range(n):
            if u_link[i] < link_rate:
                choices = np.flatnonzero(linked[i])
                j = int(choices[min(int(pick[i] * len(choices)), len(choices) - 1)])
                congest(r, ("link", i, j), client=i, aggregator=j)
        for j in range(a):
            if u_bb[j] < backbone_rate:
                congest(r, ("backbone", j, -1), backbone=j)
        for i in range(n):
            if u_client[i] < client_rate:
                congest(r, ("client", i, -1), client=i)
        for i in range(n):
            out_now = int((out_until >= r).sum())
            if u_out[i] < unavailable_rate and out_until[i] < r and out_now < max_unavailable * n:
                until = episode(r)
                out_until[i] = until
                events.append(TraceEvent(round=r, until=until, client=i, available=False))
    return tuple(events)


TRACE_SPECS = "'none', 'random:SEED', or a TOML file with [[trace]] tables"
"""What ``--trace`` accepts."""


def parse_trace_spec(spec: str | None) -> tuple[str, int | str | None]:
    """``(kind, value)`` of a ``--trace`` spec: ``keep`` (None), ``none``, ``random``
    (the seed) or ``file`` (the path, not yet read); a :class:`ConfigError` otherwise."""
    if spec is None or spec == "":
        return "keep", None
    if spec == "none":
        return "none", None
    if spec == "random" or spec.startswith("random:"):
        _, _, seed = spec.partition(":")
        try:
            value = int(seed) if seed else 0
        except ValueError:
            value = -1
        if not 0 <= value < SEED_LIMIT:
            raise ConfigError(f"--trace {spec!r}: give random:SEED, a seed in [0, 2**32)")
        return "random", value
    if not spec.lower().endswith(".toml"):
        raise ConfigError(f"--trace {spec!r}: give {TRACE_SPECS}")
    return "file", spec


def resolve_trace(topology: Topology, spec: str | None, *, rounds: int) -> Topology:
    """``topology`` with the trace ``spec`` names (:data:`TRACE_SPECS`).

    None keeps the topology's own trace; ``none`` removes it; ``random:SEED`` replaces
    it by :func:`random_trace` over ``rounds`` rounds; a file path replaces it by the
    file's ``[[trace]]`` tables (a full topology file works too: only its trace is used).
    """
    kind, value = parse_trace_spec(spec)
    if kind == "keep":
        return topology
    if kind == "none":
        return topology.with_trace(())
    if kind == "random":
        return topology.with_trace(random_trace(topology, rounds, int(value)))
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--trace {spec!r}: no such file; give {TRACE_SPECS}")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(path, f"invalid TOML ({exc})") from None
    if "trace" not in doc:
        raise InputError(path, "no [[trace]] tables (a trace file lists changes as [[trace]])")
    trace = parse_trace(doc["trace"], source=str(path))
    return topology.with_trace(checked_trace(topology, trace, source=str(path)))


def write_topology(topology: Topology, path: str | Path) -> Path:
    """Write ``topology`` as TOML to ``path``."""
    from flowsplit.outputs import atomic_write_text

    path = Path(path)
    atomic_write_text(path, topology_to_toml(topology))
    return path


def read_topology(path: str | Path) -> Topology:
    """Read a topology TOML file."""
    path = Path(path)
    text = read_text_input(path, "no such topology file")
    return topology_from_toml(text, source=str(path))
