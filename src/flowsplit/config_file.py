"""``--config FILE.toml``: a command's configuration read from a file, and written back.

The file's keys are the config dataclass's field names, a nested config a table of its
own (``[run]`` for ``SFLRunConfig.run``) or, as its options are flattened on the command
line, its keys at the top (``rounds = 3``); values are the fields' values (``margin =
0.01`` is the fraction the field holds). Options given on the command line override the
file, the file overrides the defaults::

    add_config_file_option(parser)                       # --config FILE.toml
    add_config_arguments(parser, RunConfig, unset=True)  # options not given stay None
    cfg = build_config(RunConfig, args)                  # defaults < file < flags
    write_config_toml(out / "config.toml", cfg)          # the effective config

An unknown key or a value of the wrong type is one line naming the file and the key.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flowsplit.config_args import given_values, path_arg, type_problem, value_type
from flowsplit.errors import ConfigError, InputError

CONFIG_NAME = "config.toml"
"""The effective configuration a command writes into its output directory."""

CONFIG_HELP = (
    "read the options from a TOML file whose keys are the config's field names (nested "
    "configs as tables; see docs/compare.md); options given here override it"
)


def add_config_file_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE.toml`` (read when the command builds its config)."""
    parser.add_argument(
        "--config", type=path_arg, default=None, metavar="FILE.toml", dest="config_file",
        help=CONFIG_HELP,
    )  # fmt: skip


def read_config_file(
    cls: type, path: str | Path, *, on_command_line: Iterable[str] = ()
) -> dict[str, Any]:
    """The fields of ``cls`` set in the TOML file ``path`` (nested configs as dicts),
    checked: an unknown key, a value of the wrong type, or a key the command line gives
    itself (``on_command_line``: ``dataset``, ``out``) is one line naming the file and key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise InputError(path, "config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"unreadable config file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not a TOML file: {exc}") from None
    return _checked(cls, data, path, "", frozenset(on_command_line))


def _nested_owner(cls: type) -> dict[str, str]:
    """``{field: nested config field}`` of the fields of ``cls``'s nested configs (its
    options on the command line, flattened: ``rounds`` -> ``run``); a name that is also
    ``cls``'s own, or in two nested configs, is left out (it has no one place)."""
    hints = typing.get_type_hints(cls)
    own = {f.name for f in dataclasses.fields(cls)}
    owner: dict[str, str] = {}
    seen: set[str] = set()
    for f in dataclasses.fields(cls):
        kind = value_type(hints[f.name])
        if dataclasses.is_dataclass(kind):
            for inner in dataclasses.fields(kind):
                if inner.name in seen:
                    owner.pop(inner.name, None)
                elif inner.name not in own:
                    owner[inner.name] = f.name
                seen.add(inner.name)
    return owner


def nest_keys(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword options of ``cls`` (a nested config's fields at the top, as its options
    are flattened on the command line, or its table) as ``cls``'s nested dicts: an
    unknown name, or one given both ways, is one line naming it."""
    out = _hoisted(cls, data, "options", "")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(out) - known)
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(unknown)}")
    return out


def _hoisted(cls: type, data: Mapping[str, Any], path: Path | str, prefix: str) -> dict[str, Any]:
    """``data`` with the keys of a nested config written at the top (as their options
    are flattened on the command line: ``rounds = 3`` for ``[run] rounds = 3``) moved
    into its table; a key given both ways is one line naming it."""
    owner = _nested_owner(cls)
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in owner}
    for key, value in data.items():
        table = owner.get(key)
        if table is None:
            continue
        inner = out.setdefault(table, {})
        if not isinstance(inner, dict):
            return dict(data)  # a bad [table]: reported as such by _checked
        if key in inner:
            raise ConfigError(
                f"{path}: key {prefix + key!r} is given twice (as {key!r} and in "
                f"[{prefix + table}]); give it once"
            )
        out[table] = {**inner, key: value}
    return out


def _checked(cls: type, data: Mapping[str, Any], path: Path, prefix: str, cmdline) -> dict:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for key, value in _hoisted(cls, data, path, prefix).items():
        name = prefix + key
        if key not in fields:
            known = ", ".join(fields)
            raise ConfigError(
                f"{path}: unknown key {name!r} (the keys of [{prefix.rstrip('.') or 'top'}]: {known})"
            )
        if name in cmdline:
            raise ConfigError(f"{path}: key {name!r} is given on the command line, not in the file")
        kind = value_type(hints[key])
        if dataclasses.is_dataclass(kind):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: key {name!r} is a table ([{name}]), not {value!r}")
            out[key] = _checked(kind, value, path, name + ".", cmdline)
            continue
        problem = _type_problem(hints[key], value)
        if problem:
            raise ConfigError(f"{path}: key {name!r} is {value!r}, {problem}")
        out[key] = value
    return out


def _type_problem(hint: Any, value: Any) -> str | None:
    """Why ``value`` (read from TOML) cannot be a field of type ``hint``, else None: as
    a JSON file's (:func:`~flowsplit.config_args.type_problem`), and a float is finite."""
    problem = type_problem(hint, value)
    if problem is None and value_type(hint) is float and not math.isfinite(value):
        return "not a finite number"
    return problem


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers override earlier ones, table by table (a nested config is merged)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def instantiate(cls: type, values: Mapping[str, Any]) -> Any:
    """``cls(**values)`` with nested configs built from their dicts and TOML arrays as
    the tuples a tuple field holds."""
    hints = typing.get_type_hints(cls)
    kw: dict[str, Any] = {}
    for key, value in values.items():
        kind = value_type(hints[key])
        origin = typing.get_origin(kind) or kind
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            value = instantiate(kind, value)
        elif origin is tuple and isinstance(value, list | tuple):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kw[key] = value
    return cls(**kw)


def build_config(
    cls: type,
    args: argparse.Namespace,
    *,
    base: Mapping[str, Any] | None = None,
    on_command_line: Iterable[str] = (),
    **given: Any,
) -> Any:
    """``cls`` from its defaults, then ``base`` (a recipe such as quick mode's), then the
    ``--config`` file, then the options given on the command line, then ``given``."""
    path = getattr(args, "config_file", None)
    from_file = read_config_file(cls, path, on_command_line=on_command_line) if path else {}
    values = merged(base or {}, from_file, given_values(cls, args), given)
    return instantiate(cls, values)


# --- writing ---------------------------------------------------------------------------


def config_to_toml(config: Any, *, header: str = "", comment: Iterable[str] = ()) -> str:
    """``config`` (a dataclass) as TOML that :func:`read_config_file` reads back: scalars
    and arrays first, then one table per nested config. ``None`` values are left out
    (a field left out takes its default, which for these is ``None``); the fields in
    ``comment`` (given on the command line) are written as comments."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += _table(config, "", frozenset(comment))
    return "\n".join(lines).strip() + "\n"


def _table(config: Any, prefix: str, comment: frozenset[str]) -> list[str]:
    lines: list[str] = []
    nested = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            nested.append((f.name, value))
        elif value is None:
            lines.append(f"# {f.name}: not set")
        elif prefix + f.name in comment:
            lines.append(f"# {_key(f.name)} = {_value(value)}  (on the command line)")
        else:
            lines.append(f"{_key(f.name)} = {_value(value)}")
    for name, value in nested:
        lines += ["", f"[{prefix}{name}]", *_table(value, f"{prefix}{name}.", comment)]
    return lines


def _key(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() else _string(name)


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return _string(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        return _value(dataclasses.asdict(value))
    return _string(str(value))


def write_config_toml(
    path: str | Path, config: Any, *, header: str = "", comment: Iterable[str] = ()
) -> Path:
    """Write ``config`` as TOML to ``path`` (atomically); returns the path."""
    from flowsplit.outputs import atomic_write_text

    path = Path(path)
    atomic_write_text(path, config_to_toml(config, header=header, comment=comment))
    return path
