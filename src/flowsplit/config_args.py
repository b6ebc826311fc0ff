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
A command whose option names predate its dataclass (or that shows one dataclass
under another package's names) passes ``overrides={field: cli(...)}`` instead of
editing the dataclass. With ``unset=True`` an option not given stays ``None``, so
the command can tell what was given (``train --resume``, ``--quick`` defaults);
``--help`` still shows the dataclass default. Options that mean the same in several
commands parse with the same function here (:func:`parse_seeds`).
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import functools
import inspect
import math
import numbers
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flowsplit.errors import ConfigError

_KEY = "flowsplit.cli"
_SPEC_DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "flag": None,
    "aliases": (),
    "choices": None,
    "parse": None,
    "show": None,
    "metavar": None,
    "help": None,
    "hidden": False,
    "positional": False,
    "append": False,
    "group": None,
}


def cli(
    *,
    flag: str | None = None,
    aliases: Sequence[str] | None = None,
    choices: Sequence[Any] | None = None,
    parse: Callable[[str], Any] | None = None,
    show: Callable[[Any], str] | None = None,
    metavar: str | None = None,
    help: str | None = None,
    hidden: bool | None = None,
    positional: bool | None = None,
    append: bool | None = None,
    enabled: bool | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """Field metadata for :func:`add_config_arguments` (or one entry of its ``overrides``).

    Args:
        flag: the option's name (default ``--field-name``).
        aliases: further names of the option (old spellings, ``-o``).
        choices: the values the option accepts.
        parse: turns the option's text into the field's value (default: the field's type).
        show: how the default is printed in ``--help`` (default ``str``); also called
            for a ``None`` default, to say what ``None`` stands for.
        metavar: the value's name in ``--help``.
        help: the help text (default: the field's docstring).
        hidden: an option that works but ``--help`` leaves out (testing hooks).
        positional: a positional argument instead of an option (optional when the
            field has a default or the options are ``unset``).
        append: the option may be repeated; the field gets the list of values.
        enabled: False keeps the field off the command line (it keeps its default).
        group: the title of the ``--help`` section the option is listed under (default:
            the ``CLI_GROUP`` of the dataclass that declares the field, else none).
    """
    given = {
        "flag": flag,
        "aliases": None if aliases is None else tuple(aliases),
        "choices": choices,
        "parse": parse,
        "show": show,
        "metavar": metavar,
        "help": help,
        "hidden": hidden,
        "positional": positional,
        "append": append,
        "enabled": enabled,
        "group": group,
    }
    # Only what was given, so that an override refines a field's own metadata.
    return {_KEY: {k: v for k, v in given.items() if v is not None}}


def fields_of(config: Any, names: Iterable[str]) -> dict[str, Any]:
    """``{name: config.name}`` for ``names``: the fields one config hands another under
    the same names (the list of names says which, once)."""
    return {name: getattr(config, name) for name in names}


def with_groups(
    overrides: Mapping[str, dict], groups: Mapping[str, Iterable[str]]
) -> dict[str, dict]:
    """``overrides`` with each field of ``groups`` (``{title: fields}``) listed under that
    ``--help`` heading."""
    out = {name: {_KEY: dict(spec.get(_KEY, {}))} for name, spec in overrides.items()}
    for title, names in groups.items():
        for name in names:
            out.setdefault(name, {_KEY: {}})[_KEY]["group"] = title
    return out


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` from the string literals under the fields of ``cls``
    and of its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


@functools.cache  # reading a class's source costs ~10 ms; a CLI build asks ~10 times
def _own_field_docs(cls: type) -> dict[str, str]:
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
            docs[node.target.id] = _plain(after.value.value)
    return docs


_ROLE = re.compile(r":[a-z]+:`~?([^`]*)`")


def _plain(doc: str) -> str:
    """A docstring as ``--help`` prints it: one line, no reST markup
    (``:class:`~a.b.C``` -> ``C``)."""
    doc = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], doc)
    return " ".join(doc.replace("``", "").split())


def _spec(f: dataclasses.Field, overrides: Mapping[str, dict] | None = None) -> dict[str, Any]:
    spec = {**_SPEC_DEFAULTS, **f.metadata.get(_KEY, {})}
    if overrides and f.name in overrides:
        spec.update(overrides[f.name].get(_KEY, {}))
    return spec


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def value_type(hint: Any) -> Any:
    """``int | None`` -> ``int``; other types unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def cli_fields(
    cls: type,
    only: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    overrides: Mapping[str, dict] | None = None,
) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are command-line options (``only``: these, in this order)."""
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    if only is not None:
        only = list(only)
        unknown = [n for n in only if n not in by_name]
        if unknown:
            raise TypeError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
        chosen = [by_name[n] for n in only]
    else:
        chosen = list(by_name.values())
    skip = set(exclude)
    return [f for f in chosen if f.name not in skip and _spec(f, overrides)["enabled"]]


def _help(doc: str, default: Any, spec: dict[str, Any], required: bool = False) -> str:
    """The help text: the docstring and the default, each once."""
    if spec["hidden"]:
        return argparse.SUPPRESS
    text = spec["help"] if spec["help"] is not None else doc
    if required:  # no default to show
        shown = None
    elif default is None and spec["show"] is None:
        shown = None if "default" in text.lower() else "none"
    elif "(default" in text:  # the text says its default itself
        shown = None
    elif spec["show"] is not None:
        shown = spec["show"](default)
    elif isinstance(default, list | tuple):
        shown = show_list(default) or "none"
    else:
        shown = str(default)
    if shown is not None:
        text = f"{text} (default: {shown})".strip()
    # %-signs would be read as format codes by argparse.
    return text.replace("%", "%%")


def add_config_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    only: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    overrides: Mapping[str, dict] | None = None,
    unset: bool = False,
    _outer: frozenset[str] = frozenset(),
) -> list[str]:
    """Add one option per field of the dataclass ``cls`` (see the module docstring).

    Args:
        parser: a parser or an argument group.
        only: add these fields only, in this order (default: every field).
        exclude: fields to leave out (the command adds them itself).
        overrides: ``{field: cli(...)}`` refining a field's own metadata.
        unset: options not given parse as ``None`` (``--help`` shows the default).

    Returns the names of the fields added (for :func:`config_values`).
    """
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    added = []
    for f in cli_fields(cls, only, exclude, overrides):
        spec = _spec(f, overrides)
        kind = value_type(hints[f.name])
        if dataclasses.is_dataclass(kind):  # a nested config: its fields, by their names
            added += add_config_arguments(
                parser,
                kind,
                exclude=exclude,
                overrides=overrides,
                unset=unset,
                _outer=_outer | _field_names(cls),
            )
            continue
        target = _group(parser, spec["group"] or _declared_group(cls, f.name))
        default = _default(f)
        kw: dict[str, Any] = {"default": None if unset else default}
        if kind is bool and spec["parse"] is None:
            kw["action"] = argparse.BooleanOptionalAction
        elif spec["parse"] is not None:
            kw["type"] = spec["parse"]
        elif kind is float:
            kw["type"] = finite_float  # nan and inf are no learning rate, timeout, ...
        elif kind is int and _is_seed(f.name):
            kw["type"] = parse_seed
        elif kind in (int, str):
            kw["type"] = kind
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: give metadata=cli(parse=...) for {kind}")
        if spec["append"]:
            kw["action"] = "append"
            if not isinstance(kw["default"], list):  # a dict field fed by KEY=VALUE items
                kw["default"] = None
        if spec["choices"] is not None:
            kw["choices"] = tuple(spec["choices"])
        if spec["metavar"]:
            kw["metavar"] = spec["metavar"]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        kw["help"] = _help(docs.get(f.name, ""), default, spec, required)
        if spec["positional"]:  # optional when unset: the command decides (train --resume)
            target.add_argument(f.name, nargs="?" if unset or not required else None, **kw)
        else:
            flag = spec["flag"] or _dashed(f.name)
            if required and not unset:
                kw["required"] = True
            target.add_argument(flag, *spec["aliases"], dest=_dest(f, spec, _outer), **kw)
        added.append(_dest(f, spec, _outer))
    return added


def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _dest(f: dataclasses.Field, spec: dict[str, Any], outer: frozenset[str]) -> str:
    """Where a field's option is parsed to: its name, unless an enclosing config has a
    field of that name too (the privacy study's ``epochs`` and its attack's): then the
    name of its own option (``cli(flag="--attack-epochs")``; without one, argparse
    refuses the repeated option)."""
    if f.name in outer and spec["flag"]:
        return spec["flag"].lstrip("-").replace("-", "_")
    return f.name


def _declared_group(cls: type, name: str) -> str | None:
    """The ``CLI_GROUP`` of the class in ``cls``'s bases that first declared field
    ``name`` (a subclass that changes its default keeps its heading)."""
    for klass in reversed(cls.__mro__):
        if name in getattr(klass, "__annotations__", {}):
            return getattr(klass, "CLI_GROUP", None) if "CLI_GROUP" in vars(klass) else None
    return None


def _group(parser: Any, title: str | None) -> Any:
    """The argument group ``title`` of ``parser`` (made on first use); ``parser`` itself
    when there is no title or ``parser`` is a group already."""
    if title is None or not isinstance(parser, argparse.ArgumentParser):
        return parser
    for group in parser._action_groups:
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def config_values(
    args: argparse.Namespace, names: Iterable[str], *, given_only: bool = False
) -> dict[str, Any]:
    """``{field: value}`` of the options ``names`` (``given_only``: those not ``None``)."""
    values = {n: getattr(args, n) for n in names}
    return {k: v for k, v in values.items() if v is not None} if given_only else values


def config_from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """An instance of ``cls`` from the options :func:`add_config_arguments` added (a
    nested config from its own fields' options)."""
    return cls(**{**_values(cls, args), **overrides})


def _values(
    cls: type,
    args: argparse.Namespace,
    *,
    given_only: bool = False,
    _outer: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in cli_fields(cls):
        kind = value_type(hints[f.name])
        dest = _dest(f, _spec(f), _outer)
        if dataclasses.is_dataclass(kind):
            inner = _values(kind, args, given_only=given_only, _outer=_outer | _field_names(cls))
            values[f.name] = inner if given_only else kind(**inner)
        elif hasattr(args, dest):
            values[f.name] = getattr(args, dest)
    if given_only:
        return {k: v for k, v in values.items() if v is not None and v != {}}
    return values


def given_values(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``cls`` given on the command line (options added with ``unset=True``),
    nested configs as dicts of theirs: what overrides a ``--config`` file."""
    return _values(cls, args, given_only=True)


SEED_LIMIT = 2**32
"""Seeds are integers in [0, 2**32): what NumPy's legacy generator, XGBoost and torch
all accept (a seed plus an epoch or a small offset stays inside torch's 2**64)."""


MAX_SEEDS = 10_000
"""The most seeds a ``--seeds N`` count may ask for (a study of each)."""


def parse_model_option(text: str) -> tuple[str, Any]:
    """``channels=[16,32]`` -> ``("channels", [16, 32])``: the value as JSON when it
    parses (numbers, lists, booleans), else as text."""
    import json

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--model-option expects KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def add_log_to_argument(p: argparse.ArgumentParser) -> None:
    """``--log-to tensorboard[:DIR]`` (:mod:`flowsplit.tracking`), the same for every
    command that writes runs; a missing package is refused at parse time."""
    from flowsplit.tracking import LOG_TO_HELP, parse_log_to

    p.add_argument(
        "--log-to", type=parse_log_to, default=None, metavar="tensorboard[:DIR]", help=LOG_TO_HELP
    )


def path_arg(text: str) -> Path:
    """A file or folder option's value. An empty one (``-o "$OUT"`` with ``OUT`` unset)
    is refused: ``Path("")`` is the current directory, so it would be read, or
    written into, as one."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (is a shell variable unset?)")
    return Path(text)


def path_text(text: str) -> str:
    """:func:`path_arg` for an option kept as text (``-`` for standard output)."""
    path_arg(text)
    return text


DATASET_HELP = "dataset directory (from `flowsplit prepare`)"


def add_dataset_argument(p: argparse.ArgumentParser, help: str = DATASET_HELP, **kw) -> None:
    """A command's positional ``DATASET`` (:func:`path_text`: an empty path refused)."""
    p.add_argument("dataset", metavar="DATASET", type=path_text, help=help, **kw)


def add_out_option(
    p: argparse.ArgumentParser,
    help: str,
    *,
    metavar: str = "OUT",
    required: bool = True,
    parse: Callable[[str], Any] = path_text,
) -> None:
    """``-o/--out``, what a command writes: the same option in every command (an empty
    path refused; ``parse=path_arg`` gives a :class:`~pathlib.Path`)."""
    p.add_argument("-o", "--out", required=required, type=parse, metavar=metavar, help=help)


def finite_float(text: str) -> float:
    """A float option's value: a finite number (``nan``, ``inf`` refused at parse time)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number")
    return value


def field_type_problem(cls: type, data: Mapping[str, Any]) -> str | None:
    """The first value of ``data`` (a config read from a file) whose type is not its
    field's (int, float, str, bool, their optional forms, lists and dicts), else None."""
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        hint = hints.get(name)
        if hint is None:
            continue
        args = typing.get_args(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        if value is None:
            if optional:
                continue
            return f"{name} is null"
        problem = type_problem(hint, value)
        if problem:
            return f"{name} is {value!r}, {problem}"
    return None


def type_problem(hint: Any, value: Any) -> str | None:
    """Why ``value`` (read from a JSON or TOML file) cannot be a field of type ``hint``
    (``"not int"``: a bool is no number, an int is a float, a list a tuple), else None."""
    kind = value_type(hint)
    origin = typing.get_origin(kind) or kind
    if not isinstance(origin, type):
        return None
    widen = {float: (int, float), tuple: (list, tuple), list: (list, tuple)}
    allowed = widen.get(origin, (origin,))
    if (isinstance(value, bool) and origin is not bool) or not isinstance(value, allowed):
        return f"not {getattr(origin, '__name__', origin)}"
    if origin in (list, tuple):
        return _items_problem(kind, value)
    return None


def _items_problem(kind: Any, value: Sequence[Any]) -> str | None:
    """Why the items of the list ``value`` cannot be those of ``kind`` (``list[str]``,
    ``tuple[int, ...]``, ``tuple[int, int]``), else None: ``[1, 2]`` for model names
    used to fail inside, ``[]`` for a pair of cuts too."""
    args = typing.get_args(kind)
    if not args:
        return None
    if (len(args) == 2 and args[1] is Ellipsis) or typing.get_origin(kind) is list:
        args = (args[0],) * len(value)
    elif len(value) != len(args):
        return f"not {len(args)} values"
    for i, (hint, item) in enumerate(zip(args, value, strict=True), start=1):
        problem = type_problem(hint, item)
        if problem:
            return f"item {i} ({item!r}) {problem}"
    return None


def option_name(cls: type, name: str) -> str:
    """The option of the dataclass ``cls``'s field ``name`` as error messages name it:
    its ``cli(flag=...)``, else ``--field-name`` (a command's own ``overrides`` aside)."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    flag = _spec(f)["flag"] if f is not None else None
    return flag or _dashed(name)


def _dashed(name: str) -> str:
    """A field's default option: ``timeout_s`` -> ``--timeout-s``."""
    return "--" + name.replace("_", "-")


@functools.cache
def _float_fields(cls: type) -> tuple[str, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if value_type(hints[f.name]) is float)


def check_numbers(config: Any) -> None:
    """Refuse a config with a float field that is not finite or a ``seed`` outside
    [0, 2**32): the same checks as the parser's, for a config built in Python or read
    from a file."""
    for name in _float_fields(type(config)):
        value = getattr(config, name)
        if value is not None and not math.isfinite(value):
            raise ConfigError(
                f"{option_name(type(config), name)} must be a finite number, got {value}"
            )
        if name in OPTIMISER_FLOATS and value is not None and abs(value) > FLOAT32_MAX:
            # torch's optimisers take them as float32: 1e300 failed inside with "overflow"
            raise ConfigError(
                f"{option_name(type(config), name)} {value:g} is beyond a float32 "
                f"({FLOAT32_MAX:.1e}); give a smaller value"
            )
    for name in (f.name for f in dataclasses.fields(config) if _is_seed(f.name)):
        seed = getattr(config, name)
        if seed is not None and (not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT):
            raise ConfigError(
                f"{option_name(type(config), name)} must be an integer in [0, 2**32), got {seed!r}"
            )


OPTIMISER_FLOATS = ("lr", "weight_decay", "momentum")
"""Float fields torch's optimisers take as float32 values."""
FLOAT32_MAX = 3.4028234663852886e38


def _is_seed(name: str) -> bool:
    """Whether a config field is a seed (``seed``, ``topology_seed``): numpy's seeds are
    integers in [0, 2**32)."""
    return name == "seed" or name.endswith("_seed")


OVERSUBSCRIBE = 4
"""Threads per core above which a run is refused (unless ``--force``): past it a run
crawls, or, with one process per worker, seems to hang."""

FORCE_HELP = "run even with more threads or processes than 4 per core (refused otherwise)"


def check_cores(what: str, asked: int, cores: int, *, force: bool) -> None:
    """Refuse ``asked`` threads (or processes) over ``OVERSUBSCRIBE`` per core, unless
    ``force``: one line with the figures."""
    if force or asked <= OVERSUBSCRIBE * cores:
        return
    raise ConfigError(
        f"{what}: {asked} threads on the {cores} core(s) this process may use, more than "
        f"{OVERSUBSCRIBE} per core (the run would crawl); give fewer, or --force to run it"
    )


def check_names(flag: str, given: Iterable[Any], known: Sequence[str]) -> None:
    """Refuse the names of ``given`` not among ``known``, in one line:
    ``--schemes: unknown sfl2; choose from sfl, hsfl, ...``."""
    unknown = [str(n) for n in given if n not in known]
    if unknown:
        raise ConfigError(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")


def check_threads(threads: int, *, force: bool) -> None:
    """``--threads`` against the cores this process may use (:func:`check_cores`)."""
    from flowsplit.util.system import available_cores

    check_cores(f"--threads {threads}", threads, available_cores(), force=force)


def parse_seed(text: str) -> int:
    """``--seed``: an integer in [0, 2**32)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"{text}: a seed is an integer in [0, 2**32)")
    return value


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds``, in every command: ``N`` means seeds 0..N-1, ``0,3,7`` exactly those."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: give a count (5) or a list (0,1,2)")
    if len(values) == 1 and "," not in str(text):
        if not 1 <= values[0] <= MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"{text!r}: the count must be in 1..{MAX_SEEDS}")
        return tuple(range(values[0]))
    problem = _seeds_problem(values)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return tuple(values)


def check_seeds(seeds: Sequence[Any], flag: str = "--seeds") -> None:
    """A study's seeds from a file or from Python, checked as :func:`parse_seeds` checks
    the option."""
    problem = _seeds_problem(seeds)
    if problem:
        raise ConfigError(f"{flag} {','.join(map(str, seeds))}: {problem}")


def _seeds_problem(seeds: Sequence[Any]) -> str | None:
    """Why ``seeds`` are no study's seeds (integers in [0, 2**32), none twice: the runs
    are paired by seed, so a repeat would count one pair twice), else None."""
    bad = next((s for s in seeds if not (is_int(s) and 0 <= s < SEED_LIMIT)), None)
    if bad is not None:
        return f"{bad!r} is no seed (an integer in [0, 2**32))"
    twice = next((s for s, n in collections.Counter(seeds).items() if n > 1), None)
    return f"seed {twice} is given twice" if twice is not None else None


def is_int(value: Any) -> bool:
    """An integer (numpy's too), not a bool (``True`` is no count, size or seed)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


SEEDS_HELP = "seeds: a count N (seeds 0..N-1) or a comma-separated list (0,3,7)"
"""The help of ``--seeds`` in every command."""


class _Renamed(argparse.Action):
    """An option's former name: refused with one line that names the new one."""

    def __init__(self, option_strings, dest, *, message: str, nargs="?", **kwargs):
        kwargs.update(default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None):
        raise argparse.ArgumentError(None, self.message)


def add_renamed(
    parser: argparse.ArgumentParser, old: str, new: str, why: str, *, takes_value: bool = True
) -> None:
    """Refuse ``old``, an option name this command used to have, with one line naming
    ``new`` and ``why`` (the name now means one thing in every command).

    The old name is not kept as an alias: the same spelling would then mean one thing
    here and another in the commands where it now belongs. ``--help`` leaves it out.
    """
    parser.add_argument(
        old,
        action=_Renamed,
        nargs="?" if takes_value else 0,
        dest=f"renamed{old.replace('-', '_')}",
        message=f"{old} is now {new} ({why})",
    )


def is_renamed(action: argparse.Action) -> bool:
    """Whether ``action`` is a former name added by :func:`add_renamed`."""
    return isinstance(action, _Renamed)


def csv_tuple(text: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``: a comma-separated option."""
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def int_tuple(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; an empty item (``"1,,4"``: a number left out?) is
    refused."""
    try:
        return tuple(int(t) for t in text.split(",")) if text.strip() else ()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None


def show_list(value: Any) -> str:
    """A tuple default as the command line writes it: ``1,2,4``."""
    return "none" if value is None else ",".join(map(str, value))


class HelpFormatter(argparse.HelpFormatter):
    """A hand-written option's default shown when it has one worth showing (options
    from :func:`add_config_arguments` show theirs already)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "(default" in text
            or not action.option_strings
            or default is None
            or default is False  # (0 == False: compared by identity)
            or default == argparse.SUPPRESS
            or isinstance(action, argparse._StoreTrueAction | argparse._AppendAction)
            or (isinstance(default, list | tuple | str) and not default)
        ):
            return text
        if isinstance(default, list | tuple):  # as the command line writes it
            return f"{text} (default: {show_list(default)})".replace("%", "%%")
        return f"{text} (default: %(default)s)"


def command_parser(
    sub: argparse._SubParsersAction,
    name: str,
    builder: Callable[..., Any],
    *,
    layout: str | None = None,
) -> argparse.ArgumentParser:
    """The parser of the sub-command ``name``, as every flowsplit command has it, its
    texts written once, in the docstring of the function that builds it (``builder``):
    the first line is its summary in its group's list of commands, the rest the
    description atop its ``--help`` (refilled, as argparse does); defaults are shown by
    :class:`HelpFormatter`. ``layout``: a description printed as written (examples,
    lists) instead of the docstring's."""
    doc = builder.__doc__ or _source_docstring(builder)  # (python -OO strips __doc__)
    summary, _, description = inspect.cleandoc(doc).partition("\n")
    return sub.add_parser(
        name,
        help=summary.strip(),
        description=layout if layout is not None else " ".join(description.split()) or None,
        formatter_class=HelpFormatter if layout is None else RawDescriptionHelpFormatter,
    )


def _source_docstring(fn: Callable[..., Any]) -> str:
    """``fn``'s docstring read from its source ("" without one)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError):
        return ""
    node = tree.body[0] if tree.body else None
    return ast.get_docstring(node) or "" if isinstance(node, ast.FunctionDef) else ""


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` with the description kept as written (examples, lists)."""
