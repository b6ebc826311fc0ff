"""MkDocs hook: the CLI reference page is generated from the argparse parsers.

A page holding ``<!-- cli-reference -->`` gets, in its place, the ``--help`` of every
``flowsplit`` command and sub-command, so the reference can never drift from the code.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- cli-reference -->"


def _commands(parser: argparse.ArgumentParser, prefix: str):
    """(name, parser) of ``parser`` and of every sub-command below it, depth first."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prefix} {name}")


def cli_reference() -> str:
    """Markdown: one section per command with its ``--help`` text."""
    os.environ["COLUMNS"] = "100"  # a stable width for argparse's wrapping
    from flowsplit.cli import build_parser

    parts = []
    for name, parser in _commands(build_parser(), "flowsplit"):
        level = "##" if name.count(" ") <= 1 else "###"
        parts.append(f"{level} `{name}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs API
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
