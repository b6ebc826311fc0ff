"""Sub-commands of flowsplit.federated (registered by flowsplit.cli)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this area's sub-commands to the CLI."""
