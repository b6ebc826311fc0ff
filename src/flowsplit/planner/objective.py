"""The planner's objective (docs/sfl-system-model.md, "The planner"):

    w_loss * predicted_loss(a, c) + w_delay * delay / delay_ref + w_bytes * bytes / bytes_ref

``delay`` and ``bytes`` are one round's simulated delay and bytes under the engine's
cost model; ``predicted_loss`` is the accuracy surrogate's prediction (validation
cross-entropy after the pilot budget). The references make the two cost terms
dimensionless; by default they are those of HSFL at its fixed cuts with the
round-robin assignment on the same topology (deterministic: a random assignment
would make the trade-off move with a seed), so a delay term of 0.8 reads "20 %
faster than that HSFL". ``reference="median"`` takes the median over every legal cut
pair, each with the round-robin assignment, instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from flowsplit.errors import ConfigError

REFERENCES = ("hsfl", "median")


@dataclass(frozen=True)
class Weights:
    """Weights of the three objective terms (all >= 0, not all zero)."""

    loss: float = 1.0
    """Weight of the predicted validation loss (nats)."""
    delay: float = 1.0
    """Weight of the round delay relative to the reference delay."""
    bytes: float = 1.0
    """Weight of the round's bytes relative to the reference bytes."""

    def __post_init__(self) -> None:
        values = (self.loss, self.delay, self.bytes)
        if any(not np.isfinite(v) or v < 0 for v in values) or sum(values) == 0:
            raise ConfigError(
                f"objective weights {values} must be finite, >= 0 and not all 0 "
                "(e.g. --weights 1,1,1)"
            )

    @classmethod
    def parse(cls, text: str) -> Weights:
        """``"1,1,0.5"`` -> Weights(loss=1, delay=1, bytes=0.5)."""
        try:
            values = [float(v) for v in str(text).split(",")]
        except ValueError:
            values = []
        if len(values) != 3:
            raise ConfigError(f"--weights {text!r}: give three numbers loss,delay,bytes (1,1,1)")
        return cls(*values)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Objective:
    """The objective with its references fixed."""

    weights: Weights
    delay_ref: float
    """Round delay (s) the delay term is divided by."""
    bytes_ref: float
    """Round bytes the bytes term is divided by."""
    reference: str = "hsfl"
    """How the references were chosen (see the module docstring)."""
    reference_text: str = ""
    """The references in words (written next to them in every plan)."""

    def __post_init__(self) -> None:
        if not (self.delay_ref > 0 and self.bytes_ref > 0):
            raise ConfigError("objective references must be > 0")

    @property
    def delay_coef(self) -> float:
        """Objective units per second of round delay."""
        return self.weights.delay / self.delay_ref

    @property
    def bytes_coef(self) -> float:
        """Objective units per byte."""
        return self.weights.bytes / self.bytes_ref

    def value(self, loss, delay, nbytes):
        """The objective (NumPy broadcasting over arrays; a NaN loss counts as 0 weight)."""
        loss_term = 0.0 if self.weights.loss == 0 else self.weights.loss * np.asarray(loss)
        return (
            loss_term + self.delay_coef * np.asarray(delay) + self.bytes_coef * np.asarray(nbytes)
        )

    def to_dict(self) -> dict:
        return {
            "weights": self.weights.to_dict(),
            "delay_ref_s": self.delay_ref,
            "bytes_ref": self.bytes_ref,
            "reference": self.reference,
            "reference_text": self.reference_text,
        }
