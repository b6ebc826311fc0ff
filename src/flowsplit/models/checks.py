"""Checks of model option values, each failure one line naming the model and option.

A value the builder cannot use is refused before anything is built, as a
:class:`~flowsplit.errors.ConfigError` worded like the one
:func:`flowsplit.models.registry.build_model` gives for a value torch refuses:
``cnn cannot be built with pool=0: pool must be an integer >= 1``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from flowsplit.config_args import is_int
from flowsplit.errors import ConfigError


def option_error(model: str, option: str, value: Any, allowed: str) -> ConfigError:
    """``MODEL cannot be built with OPTION=VALUE: OPTION must be ALLOWED``."""
    return ConfigError(
        f"{model} cannot be built with {option}={value!r}: {option} must be {allowed}"
    )


def is_number(value: Any) -> bool:
    """A finite int or float (numpy's too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_int(model: str, option: str, value: Any, minimum: int) -> None:
    """``value`` an integer >= ``minimum``."""
    if not (is_int(value) and value >= minimum):
        raise option_error(model, option, value, f"an integer >= {minimum}")


SIZE = "an integer >= 1 (a layer of size 0 has no weights)"


def check_size(model: str, option: str, value: Any) -> None:
    """A layer width: an integer >= 1."""
    if not (is_int(value) and value >= 1):
        raise option_error(model, option, value, SIZE)


def check_sizes(model: str, option: str, values: Sequence[Any]) -> None:
    """Every item of ``values`` (e.g. ``channels``) a layer width, an integer >= 1."""
    if isinstance(values, str) or not all(is_int(v) and v >= 1 for v in values):
        raise option_error(
            model, option, values, "integers >= 1 (a layer of size 0 has no weights)"
        )


def check_dropout(model: str, option: str, value: Any) -> None:
    """A dropout probability in [0, 1): 1 would drop everything."""
    if not (is_number(value) and 0 <= value < 1):
        raise option_error(model, option, value, "a number in [0, 1) (0 disables it)")


def check_type(model: str, option: str, value: Any, default: Any) -> None:
    """``value`` of the kind ``default`` is (the builder's keyword default): a real bool
    for a bool, an integer for an int, a finite number for a float, a list of integers
    for a tuple of integers. ``None`` for a number, and options whose default is
    ``None`` or a string, are left to the builder."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise option_error(model, option, value, "true or false")
    elif value is None:  # "none" where the builder takes it (xgboost's early stopping)
        return
    elif is_int(default):
        if not is_int(value):
            raise option_error(model, option, value, "an integer")
    elif isinstance(default, float):
        if not is_number(value):
            raise option_error(model, option, value, "a finite number")
    elif isinstance(default, tuple | list) and default and all(is_int(v) for v in default):
        is_list = isinstance(value, tuple | list) and all(is_int(v) for v in value)
        if not is_list:
            example = "[" + ", ".join(str(v) for v in default) + "]"
            raise option_error(model, option, value, f"a list of integers like {example}")
