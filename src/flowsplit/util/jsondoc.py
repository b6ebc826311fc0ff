"""JSON documents: strict JSON out (:func:`jsonable`), typed dataclasses in and out.

A study writes its document as a tree of dataclasses (:func:`typed_to_dict`) and reads
it back through :func:`typed_from_dict`, which checks every field against its
annotation: a ``float`` written as ``null`` (strict JSON has no NaN) reads back as NaN,
``X | None`` allows ``null``, ``list[X]`` and ``dict[str, X]`` are checked element by
element, nested dataclasses recursively, ``Any`` is taken as it is. Fields with a
default may be missing (documents written before the field existed); keys the class
does not know are ignored (written by a newer flowsplit). A field whose JSON key is no
Python name says it in its metadata: ``field(metadata={"key": "class"})``; a
``dict`` field with ``metadata={"rest": True}`` holds every key the class does not name
(read from and written flat beside the named fields), for loosely specified parts; a
field with ``metadata={"omit_default": True}`` is not written while it holds its default.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from pathlib import Path
from typing import Any


def jsonable(obj: Any, *, strict: bool = True) -> Any:
    """``obj`` as strict JSON content: NumPy scalars and arrays as Python numbers and
    lists, tuples as lists, keys as strings, dataclasses as dicts, and non-finite floats
    as ``None`` (strict JSON has no NaN). ``strict=False`` keeps NaN and infinities (for
    content typed in memory, :func:`typed_from_dict`, before it is written)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return typed_to_dict(obj, strict=strict)
    if isinstance(obj, dict):
        return {str(k): jsonable(v, strict=strict) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v, strict=strict) for v in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy array or scalar, tensor
        obj = obj.tolist()
        if isinstance(obj, list):
            return jsonable(obj, strict=strict)
    if isinstance(obj, Path):
        return str(obj)
    if strict and isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def typed_to_dict(obj: Any, *, strict: bool = True) -> dict[str, Any]:
    """A dataclass tree as strict JSON content, fields in declaration order (``strict``:
    as :func:`jsonable`'s)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        if f.metadata.get("rest"):  # written flat, beside the named fields
            out.update(jsonable(value, strict=strict))
        elif f.metadata.get("omit_default") and value == f.default:
            continue  # absent, as in the files written before the field existed
        else:
            out[_key(f)] = jsonable(value, strict=strict)
    return out


def typed_from_dict(cls: type, data: Any, where: str = "document") -> Any:
    """An instance of dataclass ``cls`` from JSON content, checked field by field.

    Raises :class:`ValueError` naming the place (``schemes['hsfl'].final_accuracy.mean``)
    of the first missing or mistyped value.
    """
    return _parse(cls, data, where)


def read_text_document(path: Path, missing: str = "no such file") -> str:
    """The text of ``path`` (UTF-8); :class:`ValueError` saying why it cannot be read
    (``missing``: what to say when there is no file; a folder, a binary file), which
    callers turn into a one-line :class:`~flowsplit.errors.InputError`."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(missing) from None
    except UnicodeDecodeError:
        raise ValueError("cannot be read: not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror or exc})") from None


def read_json_document(path: Path, missing: str = "no such file") -> Any:
    """The JSON content of ``path``; :class:`ValueError` saying why the file cannot be
    read as JSON (``missing``: what to say when there is no file), which callers turn
    into a one-line :class:`~flowsplit.errors.InputError`."""
    text = read_text_document(path, missing)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _parse(hint: Any, value: Any, where: str) -> Any:
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _parse(inner[0], value, where)
        for arg in inner:  # first that fits
            try:
                return _parse(arg, value, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {_name(value)} fits none of {hint}")
    if dataclasses.is_dataclass(hint):
        return _parse_dataclass(hint, value, where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: {_name(value)}, not a list")
        args = typing.get_args(hint)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ValueError(f"{where}: {len(value)} items, not {len(args)}")
            return tuple(
                _parse(a, v, f"{where}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        item = args[0] if args else Any
        items = [_parse(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: {_name(value)}, not an object")
        args = typing.get_args(hint)
        item = args[1] if args else Any
        return {k: _parse(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if hint is float:
        if value is None:
            return math.nan
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is bool or hint is str:
        if isinstance(value, hint):
            return value
    else:
        raise TypeError(f"{where}: cannot read type {hint!r}")
    raise ValueError(f"{where}: {_name(value)}, not {hint.__name__}")


def _parse_dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {_name(value)}, not an object")
    hints = _hints(cls)
    values, missing, known = {}, [], set()
    rest = None
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.metadata.get("rest"):
            rest = f.name
            continue
        known.add(_key(f))
        key = _key(f)
        if key not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                missing.append(key)
            continue
        values[f.name] = _parse(hints[f.name], value[key], f"{where}.{key}")
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    if rest is not None:
        values[rest] = {k: v for k, v in value.items() if k not in known}
    return cls(**values)


def _key(f: dataclasses.Field) -> str:
    """A field's JSON key: its name, or ``metadata["key"]`` (``class`` is no Python name)."""
    return f.metadata.get("key", f.name)


def _name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
