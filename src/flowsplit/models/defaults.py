"""Training defaults that depend on the model, without importing torch.

``flowsplit.train.config`` reads them when it resolves ``--lr`` (it is imported by
``--help``, which must stay fast), and the registry reports them.
"""

from __future__ import annotations

ADAM_LR = 1e-3
"""Adam's learning rate for the neural models that set none below."""

MODEL_LR: dict[str, float] = {
    # Measured on the nDPI 8-protocol set (validation split): at 1e-3 the
    # convolutional recurrent cells learn slowly (ConvGRU validation macro-F1 0.83
    # after 6 of 15 epochs, 0.88 at 3e-3); the CNN and the LSTM learn at 1e-3.
    "convlstm": 3e-3,
    "convgru": 3e-3,
}


def default_lr(model: str) -> float:
    """Adam's default learning rate for the neural model ``model``."""
    return MODEL_LR.get(model, ADAM_LR)
