"""Training-time augmentation suited to traffic: what another network does to a flow.

``flowsplit train --augment SPEC`` changes every training row afresh each epoch
(validation and test rows never):

- ``drop=P``: each packet lost with probability P (the later ones move up; a flow
  keeps at least one packet);
- ``dup=P``: each packet duplicated (retransmitted) with probability P;
- ``swap=P``: each pair of neighbouring packets swapped with probability P (reordering);
- ``jitter=S``: sizes (and in ``seq`` the inter-arrival times) scaled by a random
  factor ``exp(N(0, S))`` per packet;
- ``mask=P``: each payload byte zeroed with probability P;
- ``fields=1``: per-session header fields randomised (payload layout: the TCP window;
  ip layout: IP ID, TTL, sequence/acknowledgement, window, TCP timestamps), as
  another session or host would have them (:mod:`flowsplit.data.perturb`).

``SPEC`` is ``none`` (the default: no augmentation), ``default`` (:data:`DEFAULT`) or
a comma-separated list such as ``drop=0.1,mask=0.05``. What applies depends on the
view: packet operations on ``pkt_bytes`` and ``seq``, byte masking on ``bytes`` and
``pkt_bytes``, header fields on ``pkt_bytes``.

Each row's randomness comes from a generator seeded by (seed, epoch, the row's
number in the dataset), so N data-parallel workers augment every row as one process
does, whatever rank reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from flowsplit.data import perturb
from flowsplit.errors import ConfigError
from flowsplit.reader.views import PKT_FIELDS, SEQ_FEATURES

_PACKET_VIEWS = ("pkt_bytes", "seq")
_MASKED_VIEWS = ("pkt_bytes", "bytes")
MAX_JITTER = 3.0
"""The widest ``jitter``: factors ``exp(N(0, 3))`` already span e^-9 .. e^9 at 3 sigma."""


def _part(
    views: tuple[str, ...], top: float = 1.0, amount: str = "a probability", why: str = ""
) -> Any:
    """One augmentation's amount (0, the default, is off), with the views it changes
    (on the others it does nothing) and the values it takes (``amount`` in [0, ``top``];
    ``why`` the reason for the bound, said in the error)."""
    allowed = f"{amount} in [0, {top:g}]{why}"
    return field(default=0.0, metadata={"views": views, "top": top, "allowed": allowed})


@dataclass(frozen=True)
class AugmentSpec:
    """How much of each augmentation (0 = off)."""

    drop: float = _part(_PACKET_VIEWS)
    dup: float = _part(_PACKET_VIEWS)
    swap: float = _part(_PACKET_VIEWS)
    jitter: float = _part(
        _PACKET_VIEWS, MAX_JITTER, "a log-normal sigma", " (wider overflows the view)"
    )
    mask: float = _part(_MASKED_VIEWS)
    fields: float = _part(("pkt_bytes",))

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) > 0 for f in fields(self))

    def to_text(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name):g}" for f in fields(self)]
        return ",".join(p for p in parts if not p.endswith("=0")) or "none"


_PARTS = {f.name: f.metadata for f in fields(AugmentSpec)}
APPLIES = {name: part["views"] for name, part in _PARTS.items()}
"""The views each augmentation changes (on the others it does nothing)."""
DEFAULT = AugmentSpec(drop=0.05, dup=0.05, swap=0.05, jitter=0.05, mask=0.02, fields=1.0)
"""``--augment default``: light loss, duplication and reordering, 5 % size/timing
jitter, 2 % of payload bytes masked, header fields randomised."""


def parse_augment(text: str | None) -> AugmentSpec:
    """``none``, ``default`` or ``KEY=VALUE,...`` -> :class:`AugmentSpec` (ConfigError if bad)."""
    text = (text or "none").strip()
    if text == "none":
        return AugmentSpec()
    if text == "default":
        return DEFAULT
    known = list(_PARTS)
    values: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in known:
            raise ConfigError(
                f"--augment {text!r}: {item.strip()!r} is not KEY=VALUE with KEY one of "
                f"{', '.join(known)} (or give none or default)"
            )
        try:
            v = float(value)
        except ValueError:
            raise ConfigError(f"--augment {text!r}: {key}={value!r} is not a number") from None
        part = _PARTS[key]
        if not 0 <= v <= part["top"]:
            raise ConfigError(f"--augment {text!r}: {key}={value} must be {part['allowed']}")
        values[key] = v
    return AugmentSpec(**values)


@dataclass(frozen=True)
class ViewInfo:
    """What augmentation needs to know of the view it changes."""

    view: str
    layout: str = "payload"
    features: tuple[str, ...] = SEQ_FEATURES


class Augmenter:
    """Augments batches of one view's training rows (see the module docstring)."""

    def __init__(self, spec: AugmentSpec, info: ViewInfo, seed: int = 0):
        self.spec, self.info, self.seed = spec, info, int(seed)

    def __call__(self, x: np.ndarray, rows: Sequence[int], epoch: int) -> np.ndarray:
        """``x`` (the rows ``rows`` of the view, in that order), augmented for ``epoch``."""
        if not self.spec.active or self.info.view == "stats":
            return x
        out = np.array(x, copy=True)
        for i, row in enumerate(np.asarray(rows, dtype=np.int64).tolist()):
            rng = np.random.default_rng([self.seed, int(epoch), row])
            out[i] = self.one(out[i : i + 1], rng)[0]
        return out

    def one(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One flow ``(1, ...)`` augmented."""
        s, view = self.spec, self.info.view
        if view in _PACKET_VIEWS:
            x = _packet_ops(x, view, s, rng, self.info.features)
            if s.jitter > 0:
                x = _jitter(x, view, s.jitter, rng, self.info)
            if s.fields > 0 and view in APPLIES["fields"] and rng.random() < s.fields:
                x = _fields(x, self.info.layout, rng)
        if s.mask > 0 and view in _MASKED_VIEWS:
            x = _mask_bytes(x, view, self.info.layout, s.mask, rng)
        return x


def _packet_ops(x, view, s: AugmentSpec, rng, features) -> np.ndarray:
    present = perturb.packet_present(x, view, features)[0]
    n = int(present.sum())
    if n == 0 or not (s.drop or s.dup or s.swap):
        return x
    idx = np.arange(n)
    if s.drop:
        keep = rng.random(n) >= s.drop
        if not keep.any():
            keep[rng.integers(n)] = True
        idx = idx[keep]
    if s.dup:
        idx = np.repeat(idx, np.where(rng.random(len(idx)) < s.dup, 2, 1))
    if s.swap and len(idx) > 1:
        for j in np.flatnonzero(rng.random(len(idx) - 1) < s.swap).tolist():
            idx[j], idx[j + 1] = idx[j + 1], idx[j]
    idx = idx[: x.shape[1]]
    out = np.zeros_like(x)
    out[0, : len(idx)] = x[0, idx]
    if view == "seq":  # the first packet of a flow has no gap before it
        out[0, 0, list(features).index("log_iat")] = 0.0
    return out


def _jitter(x, view, sigma: float, rng, info: ViewInfo) -> np.ndarray:
    present = perturb.packet_present(x, view, info.features)[0]
    factor = np.exp(rng.normal(0.0, sigma, size=present.shape))
    out = np.array(x, copy=True)
    if view == "seq":
        f = list(info.features)
        for name in ("size", "payload", "log_iat"):
            c = f.index(name)
            if name == "log_iat":  # scale the gap itself, not its log
                gap = np.expm1(out[0, :, c]) * np.exp(rng.normal(0.0, sigma, present.shape))
                out[0, :, c] = np.where(present, np.log1p(gap), out[0, :, c])
            else:
                out[0, :, c] = np.where(present, out[0, :, c] * factor, out[0, :, c])
        return out.astype(x.dtype)
    if info.layout == "payload":  # IP length in bytes 1-2
        size = out[0, :, 1].astype(np.int64) * 256 + out[0, :, 2]
        new = np.clip(np.rint(size * factor), 1, 0xFFFF).astype(np.int64)
        new = np.where(present, new, size)
        out[0, :, 1], out[0, :, 2] = new >> 8, new & 0xFF
    return out


def _fields(x, layout: str, rng) -> np.ndarray:
    if layout == "payload":
        return perturb.payload_window(x, rng)
    for name in ("ip_id", "ttl", "seq_ack", "window", "tcp_timestamps"):
        x = perturb.ip_field(x, name, rng)
    return x


def _mask_bytes(x, view, layout: str, p: float, rng) -> np.ndarray:
    hit = rng.random(x.shape) < p
    if view == "pkt_bytes":
        start = (
            np.full(x.shape[:2], PKT_FIELDS)
            if layout == "payload"
            else perturb.ip_layout_offsets(x)["payload"]
        )
        hit &= np.arange(x.shape[-1]) >= start[..., None]
    out = np.array(x, copy=True)
    out[hit] = 0
    return out


def check_augment_view(text: str | None, view: str) -> None:
    """Refuse an ``--augment`` that would do nothing asked of ``view``: a key named
    that does not change it (``drop=0.1`` on ``bytes``), or ``default`` where none of
    its parts does (``stats``). Before, such a run trained unaugmented without a word."""
    spec = parse_augment(text)
    active = [f.name for f in fields(spec) if getattr(spec, f.name) > 0]
    inert = [k for k in active if view not in APPLIES[k]]
    if not inert or ((text or "").strip() == "default" and len(inert) < len(active)):
        return
    takes = [k for k in APPLIES if view in APPLIES[k]]
    raise ConfigError(
        f"--augment {(text or '').strip()!r}: {', '.join(inert)} "
        f"{'does' if len(inert) == 1 else 'do'} nothing to the {view} view, which takes "
        + (", ".join(takes) if takes else "no augmentation")
    )


def augmenter_for(text: str | None, ds, view: str, seed: int = 0) -> Augmenter | None:
    """The :class:`Augmenter` of ``--augment TEXT`` for ``view`` of the dataset ``ds``;
    None when there is nothing to do."""
    spec = parse_augment(text)
    if not spec.active or view == "stats":
        return None
    vinfo = ds.manifest["views"].get(view, {})
    info = ViewInfo(
        view,
        layout=vinfo.get("layout", "payload"),
        features=tuple(vinfo.get("features", SEQ_FEATURES)),
    )
    return Augmenter(spec, info, seed)
