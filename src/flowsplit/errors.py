"""Errors a user can act on.

Anything raised as :class:`FlowsplitError` is printed by the CLI as one line,
``flowsplit: error: <message>``, with a non-zero exit code and no traceback
(``--debug`` shows it). Messages name the file or option and say what is wrong.
"""

from __future__ import annotations

import math
from pathlib import Path


class FlowsplitError(Exception):
    """A problem with the user's input or options, reported in one line."""


class InputError(FlowsplitError):
    """A file that cannot be read as what it claims to be."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class ConfigError(FlowsplitError):
    """An option or configuration value that cannot be used."""


def check_finite_loss(
    loss: float,
    at: str,
    lr: float,
    *,
    what: str = "the training loss",
    model: str = "the model",
    then: str = "the run stopped",
) -> None:
    """Stop a training whose ``loss`` is no longer finite (every figure after it would
    be nan), in one line: ``the training loss is nan in epoch 3: the model diverged
    (learning rate 10); the run stopped: try a smaller --lr``."""
    if not math.isfinite(loss):
        raise FlowsplitError(
            f"{what} is {loss} {at}: {model} diverged (learning rate {lr:g}); {then}: "
            "try a smaller --lr"
        )
