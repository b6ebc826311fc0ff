"""The system model of split federated learning: what the runtime and the planner share.

Pure NumPy and torch, with no runtime: the model's parts and cuts (``parts``), their
per-block costs (``profile``), nodes and links (``topology``, ``presets``), the cost
ledger and the round-delay formula (``costs``), the message format (``protocol``),
data partitions (``partition``) and FedAvg (``aggregate``). Nothing here imports the
rest of :mod:`flowsplit.federated` (an import-linter contract in pyproject.toml checks
it), so the planner can build on this without the engine.
"""

AUX_MODES = ("auto", "flatten", "last", "mean")
"""Auxiliary heads of hsfl-ll (``parts.AuxHead``); here, so the CLI's choices need no torch."""
