"""Labels from deep packet inspection: nDPI, through NFStream (an optional extra).

``prepare --label-by ndpi`` runs NFStream over each capture, keeps the flows nDPI
identified with enough confidence, and labels flowsplit's flows of the same file
and 5-tuple (either direction) with nDPI's master protocol, application or
category. Install with ``pip install flowsplit[dpi]``.

Dropped, so that a label is never a guess: flows nDPI marks as guessed, flows
whose confidence is below ``min_confidence`` or is a match by IP address only, and
``Unknown``. nDPI's confidence values: 0 unknown, 1 match by port, 2 nBPF,
3/4 partial DPI (4 from its cache), 5 DPI cache, 6 DPI, 7 match by IP, 8 aggressive
DPI, 9 custom rule.

Any other labeller's output can be used instead as a flow-label CSV (see the
README): one row per flow with ``file``, ``key`` (``L4|ipA|portA|ipB|portB``) and a
label column, given to ``--labels``.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from flowsplit.data.labels import flow_key
from flowsplit.errors import ConfigError

log = logging.getLogger("flowsplit.dpi")

NDPI_FIELDS = ("master", "app", "category")
CONFIDENCE_BY_IP = 7  # "match by IP": the address is known to belong to a service


@dataclass
class DpiLabels:
    """nDPI labels of the flows of some captures, keyed like a flow-label CSV."""

    flow_map: dict[tuple[str, tuple], str] = field(default_factory=dict)
    dropped: Counter = field(default_factory=Counter)
    labeller: dict = field(default_factory=dict)


def nfstream_version() -> str:
    """NFStream's version; ConfigError with the install hint when it is missing."""
    try:
        return importlib.metadata.version("nfstream")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            "--label-by ndpi needs NFStream: pip install 'flowsplit[dpi]' (or pip install nfstream)"
        ) from None


def ndpi_version() -> str | None:
    """The version of the nDPI library inside NFStream (None where NFStream does not
    tell it: the call is NFStream's engine, not its public API)."""
    try:
        from nfstream.engine import engine

        return engine.ffi.string(engine.lib.engine_lib_ndpi_version()).decode()
    except Exception:  # noqa: BLE001 - any NFStream without it: the version is left out
        return None


def ndpi_labels(
    captures: list[tuple[Path, str]],
    *,
    label_field: str = "master",
    min_confidence: int = 2,
    keep_guessed: bool = False,
    idle_timeout: float = 120.0,
    active_timeout: float = 1800.0,
    on_done: Callable[[int], None] | None = None,
) -> DpiLabels:
    """Label the flows of ``captures`` ((path, path relative to its input root)) with nDPI.

    ``on_done(i)`` is called after capture ``i`` (a progress bar's hook)."""
    if label_field not in NDPI_FIELDS:
        raise ConfigError(f"ndpi label field must be one of {', '.join(NDPI_FIELDS)}")
    version = nfstream_version()
    from nfstream import NFStreamer  # the optional extra, checked just above

    out = DpiLabels(
        labeller={
            "name": "nDPI via NFStream",
            "nfstream": version,
            "ndpi": ndpi_version(),
            "field": label_field,
            "min_confidence": min_confidence,
            "keep_guessed": keep_guessed,
        }
    )
    for i, (path, rel) in enumerate(captures):
        if i and on_done is not None:
            on_done(i - 1)
        try:
            streamer = NFStreamer(
                source=str(path),
                idle_timeout=int(idle_timeout),
                active_timeout=int(active_timeout),
                n_meters=1,
            )
            flows = list(streamer)
        except Exception as exc:  # noqa: BLE001 - NFStream refuses some captures
            out.dropped["ndpi_unreadable_file"] += 1
            log.warning("nDPI could not read %s: %s", path, str(exc).splitlines()[0][:200])
            continue
        for f in flows:
            label = _label_of(f, label_field, min_confidence, keep_guessed, out.dropped)
            if label is None:
                continue
            key = flow_key(
                f.protocol,
                str(ipaddress.ip_address(f.src_ip)),
                f.src_port,
                str(ipaddress.ip_address(f.dst_ip)),
                f.dst_port,
            )
            old = out.flow_map.setdefault((rel, key), label)
            if old != label:
                out.dropped["ndpi_conflicting_label"] += 1
    if captures and on_done is not None:
        on_done(len(captures) - 1)
    return out


def _label_of(f, label_field: str, min_confidence: int, keep_guessed: bool, dropped) -> str | None:
    if f.protocol not in (6, 17):
        return None
    name = f.application_name or "Unknown"
    if name.split(".")[0] == "Unknown":
        dropped["ndpi_unknown"] += 1
        return None
    if f.application_is_guessed and not keep_guessed:
        dropped["ndpi_guessed"] += 1
        return None
    conf = int(getattr(f, "application_confidence", 6))
    if conf < min_confidence or conf == CONFIDENCE_BY_IP:
        dropped["ndpi_low_confidence"] += 1
        return None
    if label_field == "master":
        return name.split(".")[0]
    if label_field == "app":
        return name
    return f.application_category_name or "Unknown"
