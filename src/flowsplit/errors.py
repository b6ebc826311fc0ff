"""Errors a user can act on.

Anything raised as :class:`FlowsplitError` is printed by the CLI as one line,
``flowsplit: error: <message>``, with a non-zero exit code and no traceback
(``--debug`` shows it). Messages name the file or option and say what is wrong.
"""

from __future__ import annotations

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
