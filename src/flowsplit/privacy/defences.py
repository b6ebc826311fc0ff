"""Defences a client can apply to what it sends across the cut.

- ``nopeek``: train the client part with a distance-correlation penalty between
  its inputs and its activations (Vepakomma et al., 2020, "NoPeek"):
  ``loss = CE + alpha * dCor(x, z)`` per batch;
- ``noise``: add Gaussian noise to every activation row, calibrated to the row's
  own scale: ``sigma_i = ratio * rms(z_i)`` (``ratio`` is the noise-to-signal
  amplitude ratio). The noise is drawn on the client every time it sends, so the
  server part learns on noisy activations;
- ``quant``: uniform ``bits``-bit quantisation of each row between its own min and
  max (what would cross is the codes plus two floats per row), with a
  straight-through gradient in training.

The noise is not a differential-privacy guarantee: an activation of ``d`` values
with noise at ``ratio`` would need clipping and
``ratio >= 2 sqrt(d) sqrt(2 ln(1.25/delta)) / epsilon`` to be one;
:func:`gaussian_epsilon` gives the epsilon the chosen ratio would correspond to,
which for real activations is far too large to mean anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from flowsplit.errors import ConfigError

DEFENCE_KINDS = ("none", "nopeek", "noise", "quant")
MAX_NOISE_RATIO = 1e3
"""The largest noise-to-signal amplitude ratio: ``1e300`` made every activation inf."""


@dataclass(frozen=True)
class Defence:
    """One defence and its strength (``alpha`` for nopeek, ``ratio`` for noise, ``bits`` for quant)."""

    kind: str = "none"
    strength: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in DEFENCE_KINDS:
            raise ConfigError(f"defence {self.kind!r}: choose one of {', '.join(DEFENCE_KINDS)}")
        if not math.isfinite(self.strength):
            raise ConfigError(f"{self.kind} strength must be a finite number, got {self.strength}")
        if self.kind == "quant" and not (
            1 <= self.strength <= 16 and self.strength == int(self.strength)
        ):
            raise ConfigError(f"quant bits must be an integer in 1..16, got {self.strength}")
        if self.kind in ("nopeek", "noise") and self.strength < 0:
            raise ConfigError(f"{self.kind} strength must be >= 0, got {self.strength}")
        if self.kind == "noise" and self.strength > MAX_NOISE_RATIO:
            raise ConfigError(
                f"noise ratio must be at most {MAX_NOISE_RATIO:g} (noise 60 dB above the "
                f"signal; more overflows float32 activations), got {self.strength:g}"
            )

    @property
    def name(self) -> str:
        return self.kind

    def params(self) -> dict[str, float]:
        key = {"none": None, "nopeek": "alpha", "noise": "ratio", "quant": "bits"}[self.kind]
        return {key: self.strength} if key else {}

    def layer(self) -> nn.Module:
        """The module the client applies to its activations before sending them."""
        if self.kind == "noise":
            return GaussianNoise(self.strength)
        if self.kind == "quant":
            return Quantize(int(self.strength))
        return nn.Identity()

    @property
    def penalty(self) -> float:
        """Weight of the distance-correlation term in the client's training loss."""
        return self.strength if self.kind == "nopeek" else 0.0


def parse_defence(text: str) -> Defence:
    """``noise:0.5``, ``quant:2``, ``nopeek:1.0`` or ``none`` -> a :class:`Defence`."""
    kind, _, raw = text.partition(":")
    defaults = {"none": 0.0, "nopeek": 0.5, "noise": 0.5, "quant": 2}
    if kind not in defaults:
        raise ConfigError(
            f"--defences: defence {text!r}: use none, nopeek[:ALPHA], noise[:RATIO] or quant[:BITS]"
        )
    try:
        value = float(raw) if raw else float(defaults[kind])
    except ValueError:
        raise ConfigError(f"--defences: defence {text!r}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"--defences: defence {text!r}: give a finite number, not {raw!r}")
    try:
        return Defence(kind, value)
    except ConfigError as exc:
        raise ConfigError(f"--defences: defence {text!r}: {exc}") from None


def parse_defences(text: str) -> tuple[Defence, ...]:
    """A comma list of :func:`parse_defence` items; ``none`` or empty: no defence."""
    if text.strip() in ("", "none"):
        return ()
    return tuple(parse_defence(item.strip()) for item in text.split(",") if item.strip())


class GaussianNoise(nn.Module):
    """``z + N(0, (ratio * rms(z_i))^2)`` per row; applied in training and inference alike."""

    def __init__(self, ratio: float):
        super().__init__()
        self.ratio = float(ratio)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        flat = z.reshape(len(z), -1)
        rms = flat.detach().pow(2).mean(1).sqrt()  # (B,)
        noise = torch.randn_like(flat) * (self.ratio * rms)[:, None]
        return (flat + noise).view_as(z)


class Quantize(nn.Module):
    """Per-row uniform quantisation to ``bits`` bits between the row's min and max."""

    def __init__(self, bits: int):
        super().__init__()
        self.levels = 2 ** int(bits) - 1

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        flat = z.reshape(len(z), -1)
        lo = flat.detach().amin(1, keepdim=True)
        span = (flat.detach().amax(1, keepdim=True) - lo).clamp_min(1e-12)
        q = torch.round((flat.detach() - lo) / span * self.levels) / self.levels * span + lo
        # Straight-through: forward the quantised values, backward as the identity.
        return (q + (flat - flat.detach())).view_as(z)


def gaussian_epsilon(ratio: float, dim: int, delta: float = 1e-5) -> float:
    """Epsilon of the Gaussian mechanism whose noise matches ``ratio`` on ``dim`` values.

    With rows clipped to L2 norm ``C`` (replace-one sensitivity ``2C``) and noise
    ``sigma = ratio * C / sqrt(dim)`` per value: ``epsilon = 2 sqrt(dim)
    sqrt(2 ln(1.25 / delta)) / ratio`` (valid as a bound only for epsilon < 1).
    """
    if ratio <= 0:
        return math.inf
    return 2 * math.sqrt(dim) * math.sqrt(2 * math.log(1.25 / delta)) / ratio
