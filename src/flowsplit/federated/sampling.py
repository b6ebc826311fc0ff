"""Client sampling per round, with Flower's semantics (``fraction_fit``, ``min_fit_clients``,
``min_available_clients``).

A federation registers N clients; each round a seeded sample of them trains. Which
clients can be sampled in round ``r``:

- they hold training rows (a client with none is never sampled; the result says how
  many there are);
- the round's network lets them take part (``--trace``, or the topology's own
  ``[[trace]]``: ``available = false`` takes a client out of the pool for those rounds,
  which is the *availability trace* selection);
- the selection ``--select`` admits them: ``uniform`` (everyone), ``list:I,J,...`` or
  ``list:FILE`` (a fixed list; the file holds client indices separated by commas,
  spaces or new lines), ``attr:NAME OP VALUE`` (a topology attribute of the round's
  network: ``speed`` FLOP/s, ``memory`` bytes, ``samples`` rows, ``bandwidth`` B/s and
  ``latency`` s of the client's best link; OP one of ``>= <= > < ==``).

Of the ``available`` clients that pass, the round samples ``K`` uniformly without
replacement: ``--clients-per-round K``, or ``max(int(F * available), --min-fit-clients)``
for ``--fraction F`` (Flower's ``fraction_fit``); ``K`` is capped at ``available``.
Fewer than ``--min-available-clients`` available, or fewer than ``--min-fit-clients``,
ends the run with one line saying so (a simulation cannot wait for clients to
connect, as Flower's server does). The draw is seeded by ``(seed, round)``, so a run
repeats exactly; each round's sample is recorded (``sampled`` in its record).
``--drop-prob`` and ``--straggler-prob`` then apply to the sampled clients, as before.

Without any of these options every client takes part in every round (no sample), and
the run is what it always was; ``--clients-per-round N`` with every client holding rows
gives the same result, bit for bit (tested).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.config_args import fields_of, option_name
from flowsplit.errors import ConfigError, FlowsplitError
from flowsplit.inputs import read_text_input


class ParticipationError(FlowsplitError):
    """A round in which too few clients took part (or any failed, where none may)."""


SELECTIONS = "uniform, list:I,J,... or list:FILE, attr:NAME>=VALUE"
"""What ``--select`` accepts."""
ATTRIBUTES = ("speed", "memory", "samples", "bandwidth", "latency")
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
_ATTR = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|>|<)\s*([^\s]+)\s*$")


@dataclass(frozen=True)
class Selection:
    """A parsed ``--select``."""

    kind: str
    """``uniform``, ``list`` or ``attr``."""
    clients: tuple[int, ...] = ()
    """``list``: the clients."""
    attribute: str = ""
    op: str = ""
    value: float = 0.0

    def mask(self, topology: Any) -> np.ndarray | None:
        """(N,) bool: the clients this selection admits on ``topology`` (None: all)."""
        n = topology.n_clients
        if self.kind == "uniform":
            return None
        if self.kind == "list":
            bad = [i for i in self.clients if not 0 <= i < n]
            if bad:
                raise ConfigError(f"--select list: client {bad[0]} not in 0..{n - 1}")
            out = np.zeros(n, dtype=bool)
            out[list(self.clients)] = True
            return out
        return _OPS[self.op](attribute_values(topology, self.attribute), self.value)

    def __str__(self) -> str:
        if self.kind == "list":
            return "list:" + ",".join(map(str, self.clients))
        if self.kind == "attr":
            return f"attr:{self.attribute}{self.op}{self.value:g}"
        return self.kind


def attribute_values(topology: Any, name: str) -> np.ndarray:
    """(N,) a client attribute of ``topology`` (see :data:`ATTRIBUTES`)."""
    if name == "speed":
        return np.asarray(topology.client_speed, dtype=float)
    if name == "memory":
        return np.asarray(topology.client_memory, dtype=float)
    if name == "samples":
        return np.asarray(topology.client_samples, dtype=float)
    bw = np.asarray(topology.ca_bandwidth)
    if name == "bandwidth":
        return bw.max(axis=1)
    lat = np.where(bw > 0, np.asarray(topology.ca_latency), np.inf)
    return lat.min(axis=1)


def parse_selection(text: str) -> Selection:
    """``--select`` -> :class:`Selection`; a one-line :class:`ConfigError` when it is wrong."""
    text = str(text).strip()
    kind, _, arg = text.partition(":")
    if kind == "uniform" and not arg:
        return Selection("uniform")
    if kind == "list" and arg:
        path = Path(arg)
        raw = arg
        if not re.fullmatch(r"[\d,\s]+", arg):
            if not path.is_file():
                raise ConfigError(
                    f"--select {text!r}: give client indices (list:0,5,9) or a file of them"
                )
            raw = read_text_input(path)
        items = [v for v in re.split(r"[,\s]+", raw.strip()) if v]
        if not items or not all(v.isdigit() for v in items):
            where = f"file {arg}" if raw is not arg else repr(text)
            raise ConfigError(f"--select {where}: client indices are integers >= 0")
        return Selection("list", clients=tuple(sorted({int(v) for v in items})))
    if kind == "attr":
        m = _ATTR.match(arg)
        if not m or m.group(1) not in ATTRIBUTES:
            raise ConfigError(
                f"--select {text!r}: write attr:NAME>=VALUE with NAME one of "
                f"{', '.join(ATTRIBUTES)} and >=, <=, >, < or =="
            )
        try:
            value = float(m.group(3))
        except ValueError:
            raise ConfigError(f"--select {text!r}: {m.group(3)!r} is not a number") from None
        return Selection("attr", attribute=m.group(1), op=m.group(2), value=value)
    raise ConfigError(f"--select {text!r}: give {SELECTIONS}")


def check_sampling_options(config: Any) -> None:
    """Raise :class:`ConfigError` for the first bad sampling option of ``config`` (an
    ``SFLConfig`` or a study's ``StudyRunConfig``)."""
    k, f = config.clients_per_round, config.fraction
    if k is not None and f is not None:
        raise ConfigError("give --clients-per-round or --fraction, not both")
    if k is not None and k < 1:
        raise ConfigError(f"--clients-per-round must be >= 1, got {k}")
    if f is not None and not 0.0 < f <= 1.0:
        raise ConfigError(f"--fraction must be in (0, 1], got {f}")
    for name in ("min_available_clients", "min_fit_clients"):
        if int(getattr(config, name)) < 1:
            raise ConfigError(f"{option_name(type(config), name)} must be >= 1")
        if int(getattr(config, name)) > 1 and not sampling_configured(config):
            raise ConfigError(
                f"{option_name(type(config), name)} applies to sampled rounds: give "
                "--clients-per-round, --fraction or --select too"
            )
    parse_selection(config.select)


SAMPLING_FIELDS = (
    "clients_per_round",
    "fraction",
    "min_available_clients",
    "min_fit_clients",
    "select",
)
"""The sampling options (``sfl run``, ``sfl plan`` and ``sfl compare`` take them all)."""


def sampling_configured(config: Any) -> bool:
    """Whether ``config`` samples clients per round (any sampling option given)."""
    return (
        config.clients_per_round is not None
        or config.fraction is not None
        or str(config.select) != "uniform"
    )


class ClientSampler:
    """Draws each round's sample of clients (see the module docstring)."""

    def __init__(self, config: Any, n_samples: np.ndarray):
        self.config = config
        self.selection = parse_selection(config.select)
        self.has_rows = np.asarray(n_samples) > 0

    def sample(
        self, round_index: int, topology: Any, available: np.ndarray | None = None
    ) -> tuple[np.ndarray, int]:
        """(sorted client indices sampled in round ``round_index`` (0-based), how many
        were available to sample) on the round's ``topology`` and ``available`` mask."""
        cfg = self.config
        pool = self.has_rows.copy()
        if available is not None:
            pool &= np.asarray(available, dtype=bool)
        admitted = self.selection.mask(topology)
        if admitted is not None:
            pool &= admitted
        candidates = np.flatnonzero(pool)
        n_avail = len(candidates)
        where = f"round {round_index + 1}"
        if n_avail < cfg.min_available_clients:
            raise ParticipationError(
                f"{where}: {n_avail} clients available to sample (with rows, available, "
                f"selected by --select {self.selection}), fewer than --min-available-clients "
                f"{cfg.min_available_clients}; the run is stopped"
            )
        if cfg.clients_per_round is not None:
            want = max(int(cfg.clients_per_round), cfg.min_fit_clients)
        elif cfg.fraction is not None:
            want = max(int(n_avail * cfg.fraction), cfg.min_fit_clients)
        else:
            want = n_avail
        if n_avail < cfg.min_fit_clients:
            raise ParticipationError(
                f"{where}: {n_avail} clients available to sample, fewer than "
                f"--min-fit-clients {cfg.min_fit_clients}; the run is stopped"
            )
        if want >= n_avail:
            return candidates, n_avail
        rng = np.random.default_rng([int(cfg.seed), 52361, int(round_index)])
        return np.sort(rng.choice(candidates, want, replace=False)), n_avail

    def describe(self) -> dict[str, Any]:
        return {
            **fields_of(self.config, SAMPLING_FIELDS),
            "select": str(self.selection),  # (normalised)
            "clients_without_rows": int((~self.has_rows).sum()),
        }
