"""Config types for the choices several commands make, declared once.

:class:`ModelChoice` (which neural model, on which view, of which size) and
:class:`TopologyChoice` (which network of clients and aggregators) are the bases of the
configs of ``sfl run`` (:class:`~flowsplit.federated.config.SFLRunConfig`), ``sfl plan``
and ``sfl compare`` (:class:`~flowsplit.planner.study_config.StudyConfig`) and ``sfl
privacy`` (:class:`~flowsplit.privacy.config.PrivacyConfig`): each field, its help, its
option and its check are written here once, and every command's options come from them
(:func:`flowsplit.config_args.add_config_arguments`, under the ``CLI_GROUP`` heading).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowsplit.config_args import SEEDS_HELP, cli, parse_model_option, parse_seeds

MODEL_HELP = (
    "Neural model: cnn, lstm, convlstm, convgru, transformer, or package.module:factory "
    "(your own block model)."
)


MODEL_OPTION = cli(
    flag="--model-option",
    append=True,
    parse=parse_model_option,
    metavar="KEY=VALUE",
    help="Model size, e.g. channels=[16,32] (repeatable).",
    show=lambda _: "the model's",
)
"""``--model-option KEY=VALUE`` (repeatable) of a ``model_options`` field, in every command."""


SEEDS_METAVAR = "N|S,S,..."


def seeds_option(help: str = SEEDS_HELP + ".", **refine: Any) -> dict:
    """``--seeds N|S,S,...`` of every command that runs several seeds: a count or a list
    (:func:`~flowsplit.config_args.parse_seeds`); ``help`` starts with
    :data:`~flowsplit.config_args.SEEDS_HELP`, ``refine`` adds to :func:`cli` (``show``)."""
    return cli(parse=parse_seeds, metavar=SEEDS_METAVAR, help=help, **refine)


def seeds_field(default: tuple[int, ...], more: str = ".") -> Any:
    """A config's ``seeds`` field (:func:`seeds_option`) with its own default and the
    end of its help (``more``, after :data:`~flowsplit.config_args.SEEDS_HELP`)."""
    return field(default=default, metadata=seeds_option(SEEDS_HELP + more))


def add_model_option_argument(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--model-option KEY=VALUE`` on a parser whose other options are written by hand
    (``pretrain``): the same option as a config's ``model_options`` field makes."""
    spec = MODEL_OPTION["flowsplit.cli"]
    p.add_argument(
        spec["flag"],
        action="append",
        type=spec["parse"],
        dest="model_options",
        metavar=spec["metavar"],
        help=help or spec["help"],
    )


def as_options(value: Any) -> dict[str, Any]:
    """``model_options`` as a dict, from a dict, ``None`` or ``--model-option`` pairs."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    return dict(value)  # [(key, value), ...]


@dataclass
class ModelChoice:
    """Which neural model a command builds, on which dataset view, of which size."""

    CLI_GROUP: ClassVar[str] = "model"

    model: str = field(default="cnn", metadata=cli(help=MODEL_HELP))
    """Neural model (cnn, lstm, convlstm, convgru, transformer, or package.module:factory)."""
    view: str | None = field(default=None, metadata=cli(show=lambda _: "the model's"))
    """Dataset view."""
    model_options: dict[str, Any] = field(default_factory=dict, metadata=MODEL_OPTION)
    """Model size options, e.g. ``{"channels": [16, 32]}`` (default: the model's)."""

    def __post_init__(self) -> None:
        self.model_options = as_options(self.model_options)


def topology_field(default: str) -> Any:
    """The ``topology`` field with another default preset (a config's own)."""
    return field(default=default, metadata=cli(metavar="PRESET|FILE.toml"))


@dataclass
class TopologyChoice:
    """Which network the clients, aggregators and server run on."""

    CLI_GROUP: ClassVar[str] = "topology"

    topology: str = topology_field("homogeneous")
    """Topology preset (homogeneous, heterogeneous, ...) or TOML file."""
    n_clients: int | None = field(
        default=None, metadata=cli(flag="--clients", metavar="N", show=lambda _: "the preset's")
    )
    """Clients."""
    n_aggregators: int | None = field(
        default=None,
        metadata=cli(flag="--aggregators", metavar="A", show=lambda _: "the preset's"),
    )
    """Edge aggregators."""
