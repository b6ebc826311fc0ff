"""Command-line options generated from a config dataclass, so each field is written once.

A field's docstring (the string literal under it, as flowsplit's configs already
have) becomes its ``--help`` text, its default is shown, its type is the option's
type; a field can refine its option through ``metadata=cli(...)``::

    @dataclass
    class RunConfig:
        scheme: str = field(default="hsfl", metadata=cli(choices=("sfl", "hsfl")))
        \"\"\"Which scheme to train.\"\"\"
        rounds: int = 5
        \"\"\"Federated rounds.\"\"\"

    add_config_arguments(parser, RunConfig)   # --scheme {sfl,hsfl}, --rounds N
    config = config_from_args(RunConfig, parser.parse_args())

Adding a field to the dataclass adds the option, its help and its default: one edit.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

_KEY = "flowsplit.cli"


def cli(
    *,
    flag: str | None = None,
    choices: Sequence[Any] | None = None,
    parse: Callable[[str], Any] | None = None,
    show: Callable[[Any], str] | None = None,
    metavar: str | None = None,
    enabled: bool = True,
) -> dict[str, Any]:
    """Field metadata for :func:`add_config_arguments`.

    Args:
        flag: the option's name (default ``--field-name``).
        choices: the values the option accepts.
        parse: turns the option's text into the field's value (default: the field's type).
        show: how the default is printed in ``--help`` (default ``str``).
        metavar: the value's name in ``--help``.
        enabled: False keeps the field off the command line (it keeps its default).
    """
    spec = {"flag": flag, "choices": choices, "parse": parse, "show": show, "metavar": metavar}
    return {_KEY: {"enabled": enabled, **spec}}


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` from the string literals under the fields of ``cls``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # no source (frozen app): options without help text
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.replace("``", "").split())
    return docs


def _spec(f: dataclasses.Field) -> dict[str, Any]:
    return f.metadata.get(_KEY, {"enabled": True})


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _value_type(hint: Any) -> Any:
    """``int | None`` -> ``int``; other types unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are command-line options."""
    return [f for f in dataclasses.fields(cls) if _spec(f)["enabled"]]


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one option per field of the dataclass ``cls`` (see the module docstring)."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in cli_fields(cls):
        spec = _spec(f)
        kind = _value_type(hints[f.name])
        default = _default(f)
        flag = spec.get("flag") or "--" + f.name.replace("_", "-")
        kw: dict[str, Any] = {"dest": f.name, "default": default}
        if kind is bool and spec.get("parse") is None:
            kw["action"] = argparse.BooleanOptionalAction
        elif spec.get("parse") is not None:
            kw["type"] = spec["parse"]
        elif kind in (int, float, str):
            kw["type"] = kind
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: give metadata=cli(parse=...) for {kind}")
        if spec.get("choices") is not None:
            kw["choices"] = tuple(spec["choices"])
        if spec.get("metavar"):
            kw["metavar"] = spec["metavar"]
        shown = (spec.get("show") or str)(default) if default is not None else "none"
        # %-signs in docstrings would be read as format codes by argparse.
        doc = docs.get(f.name, "").replace("%", "%%")
        kw["help"] = f"{doc} (default: {shown.replace('%', '%%')})".strip()
        parser.add_argument(flag, **kw)


def config_from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """An instance of ``cls`` from the options :func:`add_config_arguments` added."""
    values = {f.name: getattr(args, f.name) for f in cli_fields(cls)}
    return cls(**{**values, **overrides})
