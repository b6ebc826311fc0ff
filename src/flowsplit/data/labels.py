"""Where a flow's label comes from.

Four sources, chosen with ``--label-by``:

``folder``
    one sub-folder per class: ``INPUT/<class>/**/capture.pcap``.
``file-csv``
    a CSV mapping capture file to label (``--labels FILE``; columns ``file`` and
    ``label`` by default, ``--file-column`` / ``--label-column`` to change them).
``flow-csv``
    a CSV of per-flow labels keyed by 5-tuple (``--labels FILE``), such as nDPI's
    ``ndpi_flow_labels.csv``: key column ``key`` in the form
    ``L4|ipA|portA|ipB|portB``, matched in either direction, and optionally a
    ``file`` column restricting the key to one capture.
``port``
    for lab captures: the flow's service port (the smaller of its two ports),
    named through ``--port-map`` (JSON ``{"name": port}`` or ``{"port": "name"}``)
    when given; flows on unmapped ports are unlabelled.

A flow without a label is counted (``skipped["unlabelled"]``) and dropped.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from flowsplit.errors import ConfigError, InputError
from flowsplit.inputs import read_text_input

LABEL_SOURCES = ("auto", "folder", "file-csv", "flow-csv", "port", "ndpi")
_PROTO_NUM = {"TCP": 6, "UDP": 17, "6": 6, "17": 17}


@functools.lru_cache(maxsize=1 << 16)
def _norm_ip(text: str) -> str:
    try:
        return ipaddress.ip_address(text.strip().strip("[]")).compressed
    except ValueError:
        return text.strip()


def flow_key(proto: int, ip_a: str, port_a: int, ip_b: str, port_b: int) -> tuple:
    """Direction-free 5-tuple key: the two endpoints in sorted order."""
    ends = sorted(((_norm_ip(ip_a), int(port_a)), (_norm_ip(ip_b), int(port_b))))
    return (int(proto), ends[0], ends[1])


def parse_key(text: str, fmt: str = "L4|ipA|portA|ipB|portB") -> tuple:
    """Parse a 5-tuple key such as ``TCP|10.0.0.1|443|10.0.0.2|5000``."""
    fields = fmt.split("|")
    parts = text.split("|")
    if len(parts) != len(fields):
        raise ValueError(f"key {text!r} does not match format {fmt!r}")
    d = dict(zip(fields, parts, strict=True))
    proto = _PROTO_NUM.get(d["L4"].upper())
    if proto is None:
        raise ValueError(f"unknown L4 protocol {d['L4']!r}")
    return flow_key(proto, d["ipA"], int(d["portA"]), d["ipB"], int(d["portB"]))


@dataclass
class LabelSpec:
    """How to label flows; built from the CLI options."""

    by: str = "auto"
    """One of auto, folder, file-csv, flow-csv, port, ndpi."""
    labels: Path | None = None
    """CSV for file-csv / flow-csv."""
    file_column: str = "file"
    """Column naming the capture file (file-csv, optional for flow-csv)."""
    label_column: str = "label"
    """Column holding the label (``master``, ``category`` or ``app`` for nDPI's file)."""
    key_column: str = "key"
    """flow-csv: column holding the 5-tuple key."""
    key_format: str = "L4|ipA|portA|ipB|portB"
    """flow-csv: layout of the key column."""
    port_map: Path | None = None
    """port: JSON mapping names to ports (or ports to names)."""
    ndpi_field: str = "master"
    """ndpi: the label: master (protocol), app (master.app) or category."""
    ndpi_min_confidence: int = 2
    """ndpi: lowest nDPI confidence kept (1 is a match by port; 7, by IP, is never kept)."""
    ndpi_keep_guessed: bool = False
    """ndpi: keep the labels nDPI only guessed."""

    def __post_init__(self) -> None:
        if self.by not in LABEL_SOURCES:
            raise ConfigError(f"--label-by {self.by!r}: expected one of {', '.join(LABEL_SOURCES)}")
        if self.by in ("file-csv", "flow-csv") and self.labels is None:
            raise ConfigError(f"--label-by {self.by} needs --labels FILE.csv")


@dataclass
class Labeller:
    """Assigns a label (or None) to every flow of a capture."""

    spec: LabelSpec
    _file_map: dict[str, str] = field(default_factory=dict)
    _flow_map: dict[tuple, str] = field(default_factory=dict)
    _port_map: dict[int, str] = field(default_factory=dict)
    _flow_map_has_file: bool = False

    def use_flow_map(self, flow_map: dict[tuple, str]) -> None:
        """Label by a ((path relative to the input root, flow key) -> label) map."""
        self._flow_map, self._flow_map_has_file = dict(flow_map), True

    @classmethod
    def from_spec(cls, spec: LabelSpec) -> Labeller:
        lab = cls(spec)
        if spec.by == "file-csv":
            lab._file_map = _read_file_map(spec)
        elif spec.by == "flow-csv":
            lab._flow_map, lab._flow_map_has_file = _read_flow_map(spec)
        elif spec.by == "port" and spec.port_map is not None:
            lab._port_map = read_port_map(spec.port_map)
        return lab

    def label_flows(
        self,
        capture: Path,
        root: Path,
        proto: np.ndarray,
        ip_a: np.ndarray,
        port_a: np.ndarray,
        ip_b: np.ndarray,
        port_b: np.ndarray,
    ) -> np.ndarray:
        """Labels of one capture's flows: object array of str, None where unlabelled."""
        n = len(proto)
        out = np.empty(n, dtype=object)
        by = self.spec.by
        if by == "folder":
            out[:] = folder_label(capture, root)
        elif by == "file-csv":
            # The relative path first: a bare name may be ambiguous (a/x.pcap, b/x.pcap).
            out[:] = self._file_map.get(_rel(capture, root), self._file_map.get(capture.name))
        elif by in ("flow-csv", "ndpi"):
            # The path relative to the input root first, then the bare name (which
            # _read_flow_map keeps only where it names one file of the CSV).
            rel, fname = os.path.normpath(_rel(capture, root)), capture.name
            fmap = self._flow_map
            for i in range(n):
                key = flow_key(proto[i], ip_a[i], port_a[i], ip_b[i], port_b[i])
                if self._flow_map_has_file:
                    out[i] = fmap.get((rel, key)) or fmap.get((fname, key))
                else:
                    out[i] = fmap.get(key)
        elif by == "port":
            service = np.minimum(port_a.astype(np.int64), port_b.astype(np.int64))
            ports, inv = np.unique(service, return_inverse=True)  # one name per port
            if self._port_map:
                names = [self._port_map.get(p) for p in ports.tolist()]
            else:
                names = [f"port-{p}" for p in ports.tolist()]
            out[:] = np.array(names, dtype=object)[inv]
        else:  # pragma: no cover - resolved before use
            raise ConfigError(f"label source {by!r} not resolved")
        return out


def folder_label(capture: Path, root: Path) -> str | None:
    """The class folder of a capture: the first folder below the input root."""
    # abspath, not resolve: a symlinked capture belongs to the folder it is linked in
    try:
        rel = Path(os.path.abspath(capture)).relative_to(os.path.abspath(root))
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) >= 2 else None


def _rel(capture: Path, root: Path) -> str:
    try:
        return str(Path(os.path.abspath(capture)).relative_to(os.path.abspath(root)))
    except ValueError:
        return capture.name


def _read_csv(path: Path, needed: list[str]) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(path, "labels file not found")
    try:
        df = pd.read_csv(path, dtype=str, skipinitialspace=True, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise InputError(path, f"cannot read labels CSV ({str(exc).splitlines()[0]})") from None
    df.columns = [c.strip() for c in df.columns]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        have = ", ".join(df.columns[:12])
        raise InputError(path, f"missing column(s) {', '.join(missing)} (columns: {have})")
    return df


def _no_conflict(path, labels: dict, line_of: dict, key, label: str, row: int, *, what: str):
    """Refuse a second label for ``key``: a labels CSV names one class per file or flow.

    ``row`` is the data row (0-based); lines are counted as an editor does (header 1).
    Equal labels on two rows are no conflict. Remembers the line of ``key``'s first row.
    """
    line = row + 2
    first = line_of.setdefault(key, line)
    if key in labels and labels[key] != label:
        raise InputError(
            path,
            f"{what} is labelled {labels[key]!r} on line {first} and {label!r} on line "
            f"{line}; give each one label (the first conflicting rows)",
        )


def _read_file_map(spec: LabelSpec) -> dict[str, str]:
    df = _read_csv(spec.labels, [spec.file_column, spec.label_column])
    out: dict[str, str] = {}
    line_of: dict[str, int] = {}
    by_name: dict[str, set[str]] = {}
    for i, (f, lab) in enumerate(zip(df[spec.file_column], df[spec.label_column], strict=True)):
        f, lab = f.strip(), lab.strip()
        if f and lab:
            _no_conflict(spec.labels, out, line_of, f, lab, i, what=f"file {f!r}")
            out[f] = lab
            by_name.setdefault(Path(f).name, set()).add(lab)
    # A bare file name matches too, unless rows with that name disagree on the label.
    for name, labs in by_name.items():
        if len(labs) == 1:
            out.setdefault(name, next(iter(labs)))
    return out


def _read_flow_map(spec: LabelSpec) -> tuple[dict[tuple, str], bool]:
    df = _read_csv(spec.labels, [spec.key_column, spec.label_column])
    has_file = spec.file_column in df.columns
    out: dict[tuple, str] = {}
    line_of: dict[tuple, int] = {}
    bad = 0
    files = df[spec.file_column].map(lambda f: os.path.normpath(f.strip())) if has_file else None
    for i, (key_text, lab) in enumerate(
        zip(df[spec.key_column], df[spec.label_column], strict=True)
    ):
        lab = lab.strip()
        if not lab:
            continue
        try:
            key = parse_key(key_text, spec.key_format)
        except ValueError:
            bad += 1
            continue
        where = (files.iat[i], key) if has_file else key
        _no_conflict(spec.labels, out, line_of, where, lab, i, what=f"flow {key_text.strip()!r}")
        out[where] = lab
    if has_file:
        # A bare file name matches too, when it names only one file of the CSV.
        paths_of: dict[str, set[str]] = {}
        for f in set(files):
            paths_of.setdefault(Path(f).name, set()).add(f)
        for (f, key), lab in list(out.items()):
            name = Path(f).name
            if name != f and len(paths_of[name]) == 1:
                out.setdefault((name, key), lab)
    if bad and bad == len(df):
        raise InputError(
            spec.labels, f"no key in column {spec.key_column!r} matches {spec.key_format!r}"
        )
    return out, has_file


def read_port_map(path: Path) -> dict[int, str]:
    """Read ``{"name": port}`` or ``{"port": "name"}`` (JSON) into port -> name."""
    text = read_text_input(Path(path), "port map not found")
    try:
        pairs = json.loads(text, object_pairs_hook=list)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        raise InputError(path, 'port map must be a JSON object like {"http": 8080}')
    out: dict[int, str] = {}
    entry_of: dict[int, str] = {}
    for k, v in pairs:
        if isinstance(v, int) or (isinstance(v, str) and v.isdigit()):
            port, name = int(v), str(k)
        elif str(k).isdigit():
            port, name = int(k), str(v)
        else:
            raise InputError(path, f"entry {k!r}: {v!r} is not a port number")
        if port in out and out[port] != name:  # one port, two classes: say so, never "last wins"
            raise InputError(
                path,
                f"port {port} is {out[port]!r} in entry {entry_of[port]} and {name!r} in entry "
                f"{k!r}: {v!r}; give each port one class",
            )
        out[port] = name
        entry_of.setdefault(port, f"{k!r}: {v!r}")
    return out
