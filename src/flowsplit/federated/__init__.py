"""Split federated learning: clients, edge aggregators and a cloud server.

Public API (imported lazily, so ``import flowsplit.federated`` stays cheap):

- parts: :func:`split_model`, :func:`legal_cuts`, :class:`AuxHead`;
- profiles: :func:`profile_model` -> :class:`BlockProfile`, :func:`part_costs`,
  :func:`cut_table`;
- topology: :class:`Topology`, :func:`resolve_topology` (presets), :func:`generate_topology`,
  :func:`read_topology` / :func:`write_topology`, :func:`assign_clients`;
- partitions: :func:`make_partition`;
- maths: :func:`fedavg`;
- schemes: :func:`get_scheme` -> :class:`Scheme` (sfl, hsfl, hsfl-ll: the steps
  that differ and the messages the cost model counts);
- cost model: :class:`CostMeter`, :class:`Ledger`, :func:`round_delay`,
  :func:`predict_ledger`, :func:`predict_round`, :func:`bytes_per_round`;
- runs: :class:`SFLConfig`, :func:`prepare_run`, :func:`run_simulation`,
  :func:`launch_roles`, :class:`SFLResult`.

See ``README.md`` in this package for the system model and the choices made.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "split_model": "system.parts",
    "legal_cuts": "system.parts",
    "AuxHead": "system.parts",
    "BlockProfile": "system.profile",
    "profile_model": "system.profile",
    "part_costs": "system.profile",
    "cut_table": "system.profile",
    "PartCosts": "system.profile",
    "Topology": "system.topology",
    "assign_clients": "system.topology",
    "read_topology": "system.topology",
    "write_topology": "system.topology",
    "resolve_topology": "system.presets",
    "generate_topology": "system.presets",
    "make_partition": "system.partition",
    "fedavg": "system.aggregate",
    "CostMeter": "system.costs",
    "Ledger": "system.costs",
    "round_delay": "system.costs",
    "predict_ledger": "predict",
    "predict_round": "predict",
    "bytes_per_round": "predict",
    "Scheme": "schemes",
    "get_scheme": "schemes",
    "SFLConfig": "config",
    "prepare_run": "setup",
    "run_simulation": "sim",
    "launch_roles": "dist",
    "SFLResult": "results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"flowsplit.federated.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'flowsplit.federated' has no attribute {name!r}")
