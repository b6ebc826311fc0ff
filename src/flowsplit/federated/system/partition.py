"""Partitions of the training rows over clients (pure functions, seeded).

- ``iid``: a random permutation cut into nearly equal shards;
- ``dirichlet:ALPHA``: for every class, client proportions drawn from
  Dirichlet(ALPHA); small ALPHA gives each client few classes (the usual non-IID
  benchmark of Hsu et al., 2019). Draws repeat (seeded) until every client holds at
  least ``min_samples`` rows, at most ``max_tries`` times; if none succeeds, the
  last draw is repaired by moving random rows from the largest shards to the short
  ones (with very small ALPHA and few classes most clients would otherwise be empty);
- ``site`` / ``site:COLUMN``: one capture site per client, where a site is a value
  of the meta column ``group`` (default) or ``source``. With more sites than
  clients, sites go largest first to the client with the fewest rows so far; with
  fewer sites than clients there is no faithful split, and that is an error.

Every function returns one sorted index array per client, together a partition of
``indices``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowsplit.errors import ConfigError

SITE_COLUMNS = ("group", "source")


@dataclass(frozen=True)
class PartitionSpec:
    """A parsed ``--partition`` value."""

    kind: str
    """``iid``, ``dirichlet`` or ``site``."""
    alpha: float = 0.5
    """Dirichlet concentration (``dirichlet`` only)."""
    column: str = "group"
    """Meta column naming the site (``site`` only)."""

    def __str__(self) -> str:
        if self.kind == "dirichlet":
            return f"dirichlet:{self.alpha:g}"
        if self.kind == "site":
            return f"site:{self.column}"
        return self.kind


def parse_partition(text: str) -> PartitionSpec:
    """``iid`` | ``dirichlet:ALPHA`` | ``site[:group|source]`` -> :class:`PartitionSpec`."""
    kind, _, arg = text.strip().partition(":")
    if kind == "iid" and not arg:
        return PartitionSpec("iid")
    if kind == "dirichlet":
        try:
            alpha = float(arg) if arg else 0.5
        except ValueError:
            alpha = -1.0
        if not alpha > 0:
            raise ConfigError(
                f"--partition {text!r}: alpha must be a number > 0, e.g. dirichlet:0.5"
            )
        return PartitionSpec("dirichlet", alpha=alpha)
    if kind == "site":
        column = arg or "group"
        if column not in SITE_COLUMNS:
            raise ConfigError(f"--partition {text!r}: site column must be group or source")
        return PartitionSpec("site", column=column)
    raise ConfigError(f"--partition {text!r}: use iid, dirichlet:ALPHA or site[:group|source]")


def partition_iid(indices: np.ndarray, n_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Shuffle ``indices`` and cut them into ``n_clients`` shards differing by at most one."""
    _check_clients(n_clients, len(indices))
    perm = np.random.default_rng(seed).permutation(np.asarray(indices))
    return [np.sort(part) for part in np.array_split(perm, n_clients)]


def partition_dirichlet(
    indices: np.ndarray,
    labels: np.ndarray,
    n_clients: int,
    alpha: float,
    seed: int = 0,
    *,
    min_samples: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Label-skewed shards: each class spread over clients by Dirichlet(alpha) proportions.

    ``labels`` are the labels of ``indices`` (same length).
    """
    indices, labels = np.asarray(indices), np.asarray(labels)
    if indices.shape != labels.shape:
        raise ValueError("indices and labels must have the same length")
    _check_clients(n_clients, len(indices))
    if alpha <= 0:
        raise ConfigError(f"dirichlet alpha must be > 0, got {alpha}")
    min_samples = min(min_samples, len(indices) // n_clients)
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        shards: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for cls in np.unique(labels):
            rows = rng.permutation(indices[labels == cls])
            props = rng.dirichlet(np.full(n_clients, alpha))
            cuts = (np.cumsum(props)[:-1] * len(rows)).astype(np.int64)
            for client, part in enumerate(np.split(rows, cuts)):
                shards[client].append(part)
        out = [np.sort(np.concatenate(s)) for s in shards]
        if min(len(s) for s in out) >= min_samples:
            return out
    return _repair(out, min_samples, rng)


def _repair(shards: list[np.ndarray], min_samples: int, rng: np.random.Generator):
    shards = [s.copy() for s in shards]
    for client in range(len(shards)):
        while len(shards[client]) < min_samples:
            donor = int(np.argmax([len(s) for s in shards]))
            pick = int(rng.integers(len(shards[donor])))
            shards[client] = np.sort(np.append(shards[client], shards[donor][pick]))
            shards[donor] = np.delete(shards[donor], pick)
    return shards


def partition_by_site(indices: np.ndarray, sites: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """One or more whole sites per client; a site's rows never straddle clients.

    ``sites`` are the site names of ``indices`` (same length).
    """
    indices, sites = np.asarray(indices), np.asarray(sites).astype(str)
    names, inverse, counts = np.unique(sites, return_inverse=True, return_counts=True)
    if len(names) < n_clients:
        raise ConfigError(
            f"site partition: {len(names)} sites for {n_clients} clients; use at most "
            f"{len(names)} clients, or --partition iid/dirichlet"
        )
    load = np.zeros(n_clients, dtype=np.int64)
    owner = np.empty(len(names), dtype=np.int64)
    # Largest site first, to the least-loaded client (ties: lowest index): balanced and stable.
    for site in sorted(range(len(names)), key=lambda s: (-counts[s], names[s])):
        client = int(np.argmin(load))
        owner[site] = client
        load[client] += counts[site]
    client_of_row = owner[inverse]
    return [np.sort(indices[client_of_row == c]) for c in range(n_clients)]


def make_partition(
    spec: PartitionSpec | str,
    *,
    indices: np.ndarray,
    labels: np.ndarray,
    meta_sites: dict[str, np.ndarray] | None = None,
    n_clients: int,
    seed: int = 0,
) -> list[np.ndarray]:
    """Apply ``spec`` to the training rows ``indices`` (labels/sites aligned with them)."""
    spec = parse_partition(spec) if isinstance(spec, str) else spec
    if spec.kind == "iid":
        return partition_iid(indices, n_clients, seed)
    if spec.kind == "dirichlet":
        return partition_dirichlet(indices, labels, n_clients, spec.alpha, seed)
    sites = (meta_sites or {}).get(spec.column)
    if sites is None:
        raise ConfigError(f"site partition needs the meta column {spec.column!r}")
    return partition_by_site(indices, sites, n_clients)


def _check_clients(n_clients: int, n_rows: int) -> None:
    if n_clients < 1:
        raise ConfigError(f"need at least one client, got {n_clients}")
    if n_rows < n_clients:
        raise ConfigError(f"{n_rows} training rows cannot be shared by {n_clients} clients")
