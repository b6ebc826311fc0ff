"""`flowsplit demo`: the main job on the embedded lab capture."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the demo sub-command to the CLI."""
