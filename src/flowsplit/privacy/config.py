"""What a leakage study is told (:class:`PrivacyConfig`), apart from the code that runs it.

Kept light (no torch) so that ``flowsplit sfl privacy`` builds its options from these
dataclasses at start-up (:func:`flowsplit.config_args.add_config_arguments`): a field,
its help and its option are written once, here.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from flowsplit.choices import ModelChoice, TopologyChoice, topology_field
from flowsplit.config_args import check_numbers, cli, option_name, path_text
from flowsplit.errors import ConfigError

SPLITS = ("train", "val", "test")
DEFAULT_DEFENCES = "nopeek:0.5,noise:0.5,quant:2"
"""The defences ``sfl privacy`` trains and attacks unless ``--defences`` says otherwise
(a :class:`PrivacyConfig` made in Python has none unless given)."""


def parse_cuts(text: str) -> tuple[int, ...] | None:
    """``--client-cuts``: ``all`` (None) or a comma list of cuts."""
    if text.strip() == "all":
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values:
        raise ConfigError(f"--client-cuts {text!r}: give 'all' or a comma list of cuts, e.g. 1,2")
    return values


def parse_limit(text: str) -> int | None:
    """A row limit: a positive integer, or ``all`` (None)."""
    if text in ("none", "all"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive integer or 'all'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (or 'all'), got {value}")
    return value


def parse_defences_option(text: str) -> tuple:
    """``--defences``: the :class:`~flowsplit.privacy.defences.Defence` objects of a
    comma list (torch is imported only when the option is given)."""
    from flowsplit.privacy.defences import parse_defences

    return parse_defences(text)


LIMIT = cli(parse=parse_limit, metavar="N|all", show=lambda _: "all")


@dataclass(frozen=True)
class AttackConfig:
    """How hard the attacker trains its decoder."""

    CLI_GROUP: ClassVar[str] = "attack"

    epochs: int = field(default=12, metadata=cli(flag="--attack-epochs"))
    """Epochs of the inversion decoder over the auxiliary rows."""
    batch_size: int = field(default=32, metadata=cli(enabled=False))
    lr: float = field(default=1e-2, metadata=cli(enabled=False))
    hidden: int = field(default=32, metadata=cli(enabled=False))
    """Channels of the decoder."""
    seed: int | None = field(default=None, metadata=cli(enabled=False))
    """Seed of the decoder (default: the study's)."""


@dataclass
class PrivacyConfig(ModelChoice):
    """What a leakage study trains, attacks and measures."""

    CLI_GROUP: ClassVar[str] = "study"

    cuts: tuple[int, ...] | None = field(
        default=None,
        metadata=cli(
            flag="--client-cuts", parse=parse_cuts, metavar="all|K,K,...", show=lambda _: "all"
        ),
    )
    """The cuts k to attack (the client holds blocks 1..k): every legal cut, or a list."""
    epochs: int = 3
    """Epochs of centralised training of the model (and of each defended model)."""
    batch_size: int = 32
    """Samples per training batch."""
    lr: float = 1e-3
    """Learning rate of the model's training (Adam)."""
    train_limit: int | None = field(default=None, metadata=LIMIT)
    """Training rows (a seeded subsample)."""
    aux_split: str = field(default="val", metadata=cli(choices=SPLITS))
    """The attacker's auxiliary rows (disjoint from the evaluated split)."""
    aux_limit: int | None = field(default=None, metadata=LIMIT)
    """Auxiliary rows."""
    eval_split: str = field(default="test", metadata=cli(choices=SPLITS))
    """The victim's rows the attacks are scored on."""
    eval_limit: int | None = field(default=None, metadata=LIMIT)
    """Evaluated rows."""
    attack: AttackConfig = field(default_factory=AttackConfig)
    """How hard the attacker trains."""
    defences: tuple[Any, ...] = field(
        default=(),
        metadata=cli(
            parse=parse_defences_option,
            metavar="SPEC,SPEC,...",
            show=lambda _: DEFAULT_DEFENCES,
            help="Defences, a comma list of nopeek:ALPHA, noise:RATIO, quant:BITS, or 'none'.",
        ),
    )
    """Defences trained and attacked like the undefended model (``Defence`` objects)."""
    dcor_rows: int = field(default=500, metadata=cli(enabled=False))
    """Rows the distance correlation is computed on (it is O(n^2))."""
    gradients: bool = True
    """Measure label leakage from the per-sample gradients that travel down (``--no-gradients``: skip it)."""
    reference: bool = field(default=True, metadata=cli(enabled=False))
    """Also attack the output of the input stem (the attack's sanity check)."""
    seed: int = 0
    """Seeds the subsamples, the models and the attacks."""
    threads: int = 1
    """torch threads."""

    def __post_init__(self) -> None:
        ModelChoice.__post_init__(self)
        if isinstance(self.attack, dict):
            self.attack = AttackConfig(**self.attack)
        if self.attack.seed is None:  # the decoder is seeded by the study
            self.attack = AttackConfig(**{**asdict(self.attack), "seed": self.seed})
        if self.cuts is not None:
            self.cuts = tuple(int(c) for c in self.cuts)
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` saying how to fix the first bad field."""
        check_numbers(self)
        check_numbers(self.attack)
        if self.aux_split == self.eval_split:
            raise ConfigError(
                f"the attacker's auxiliary split and the evaluated split are both "
                f"{self.aux_split!r}; they must be disjoint"
            )
        # 0 epochs: the untrained model (its leakage at initialisation) is a study too.
        if self.epochs < 0:
            raise ConfigError(f"--epochs must be >= 0, got {self.epochs}")
        for name in ("batch_size", "threads", "train_limit", "aux_limit", "eval_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{option_name(PrivacyConfig, name)} must be >= 1, got {value}")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if self.dcor_rows < 2:
            raise ConfigError(f"dcor_rows must be >= 2, got {self.dcor_rows}")
        attack = self.attack
        for name in ("epochs", "batch_size", "hidden"):
            if getattr(attack, name) < 1:
                flag = option_name(AttackConfig, name) if name == "epochs" else f"attack {name}"
                raise ConfigError(f"{flag} must be >= 1, got {getattr(attack, name)}")
        if not attack.lr > 0:
            raise ConfigError(f"attack lr must be > 0, got {attack.lr}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["defences"] = [{"kind": x.kind, **x.params()} for x in self.defences]
        d["cuts"] = list(self.cuts) if self.cuts is not None else None
        return d


@dataclass
class ParetoChoice(TopologyChoice):
    """The Pareto picture of a study: on which topology, by which measure, under which
    budget, with which plan marked (``sfl privacy --redraw`` draws it again)."""

    CLI_GROUP: ClassVar[str] = "the Pareto picture"

    topology: str = topology_field("heterogeneous")
    leakage_measure: str | None = field(
        default=None, metadata=cli(show=lambda _: "bytes_recovered; seq_recovered for seq")
    )
    """Measure of the picture and the budget."""
    max_leakage: float | None = field(default=None, metadata=cli(show=lambda _: "no budget"))
    """Mark the least-delay pair with leakage at most this."""
    plan: str | None = field(default=None, metadata=cli(metavar="PLAN.json", parse=path_text))
    """A plan.json of `sfl plan` whose cuts to mark in the picture."""
