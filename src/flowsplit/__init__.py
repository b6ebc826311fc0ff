"""flowsplit: train traffic classifiers centralised, data-parallel or split across tiers.

The Python API (``import flowsplit as fs``), the same functions the command line runs:

- ``fs.prepare(captures, out)`` -> :class:`Dataset`; ``fs.load_dataset(path)``
- ``fs.train(dataset=..., model=..., out=...)`` -> :class:`RunResult`
- ``fs.evaluate(run, dataset)`` -> :class:`Evaluation` (scores, per-flow predictions)
- ``fs.predict(run, captures)`` -> a DataFrame of flows and predicted classes
- ``fs.read_result(run)``, ``fs.load_model(run)``, ``fs.compare(dataset, out, ...)``
- ``fs.sfl.run``, ``fs.sfl.plan``, ``fs.sfl.compare``: split federated learning

Imported on first use, so ``import flowsplit`` stays light (no torch).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = (
    "Dataset",
    "Evaluation",
    "LabelSpec",
    "PrepareOptions",
    "RunResult",
    "TrainConfig",
    "compare",
    "evaluate",
    "load_dataset",
    "load_model",
    "predict",
    "prepare",
    "read_result",
    "train",
)
__all__ = [*_API, "sfl", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "sfl":
        return importlib.import_module("flowsplit.sfl")
    if name in _API:
        return getattr(importlib.import_module("flowsplit.api"), name)
    raise AttributeError(f"module 'flowsplit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
