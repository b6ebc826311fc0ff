"""What a planning study is told (:class:`StudyConfig`), apart from its heavy machinery.

A study config nests what its runs take (:class:`StudyRunConfig`, fields of the runs'
``SFLConfig``) and how its plans are made (:class:`StudyPlannerConfig`, fields of the
planner's ``PlannerConfig``) beside the model and topology choices and the pilots; the
command line flattens the sections (``--rounds``, ``--family``), a ``--config`` file and
keyword options may give their fields flat or as tables (``[run]``, ``[planner]``).

:mod:`flowsplit.planner.study` runs a study; this module only holds its configuration,
the quick/full defaults and its command-line view (:func:`add_study_arguments` and
:func:`study_options`: ``sfl plan``'s and ``sfl compare``'s options, one per field,
and the leakage budget, :class:`LeakageBudget`), so the command line builds them from
the dataclasses without importing torch.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from flowsplit.choices import ModelChoice, TopologyChoice, topology_field
from flowsplit.config_args import (
    add_config_arguments,
    add_dataset_argument,
    check_numbers,
    cli,
    config_from_args,
    given_values,
    path_arg,
    show_list,
    with_groups,
)
from flowsplit.config_file import instantiate, merged, nest_keys, read_config_file
from flowsplit.errors import ConfigError
from flowsplit.federated.config import SamplingChoice, SFLConfig
from flowsplit.federated.sampling import check_sampling_options
from flowsplit.federated.system.topology import parse_trace_spec
from flowsplit.planner.leakage import budget_pairs

QUICK = {
    "rounds": 4,
    "train_limit": 600,
    "pilot_train_limit": None,
    "n_clients": 8,
    "n_aggregators": 3,
}
"""Quick mode's recipe: the defaults ``--quick`` replaces (explicit options win); the
``--help`` texts and :func:`resolve` read it, nothing else repeats it."""
FULL = {
    "rounds": 5,
    "train_limit": None,
    "pilot_train_limit": None,
    "n_clients": None,
    "n_aggregators": None,
}
"""Defaults otherwise."""
PLANS = ("acc-aware", "delay", "hsfl", "hsfl-greedy", "sfl")
"""Plans :func:`plan_seed` can make: the planner, the delay-only planner, HSFL at the
fixed cuts with a seeded random assignment (the research's baseline) and with the
planner's delay-aware greedy assignment, and SFL."""
MAX_PILOTS = 6
"""Default number of pilot cut pairs: every legal pair up to this many."""
PILOT_FRACTION = 0.25
"""Default pilot budget: this share of the run's optimiser steps (at least
:data:`~flowsplit.planner.pilots.MIN_CURVE_POINTS` rounds)."""


@dataclass
class StudyRunConfig(SamplingChoice):
    """What every run of a study takes as it is: fields of the run's
    :class:`~flowsplit.federated.config.SFLConfig` of the same names, the sampling
    options among them (every run samples alike); ``[run]`` in a ``--config`` file, its
    options flat on the command line. Each run adds its scheme, cuts and seed
    (:meth:`sfl_config`)."""

    CLI_GROUP: ClassVar[str] = "the planned run"

    rounds: int = 5
    """Federated rounds of the planned run (the budget the surrogate predicts for)."""
    batch_size: int = 32
    """Client batch size."""
    lr: float = 1e-3
    """Learning rate of every tier (Adam)."""
    local_epochs: int = 1
    """Local epochs per round."""
    partition: str = "iid"
    """``iid``, ``dirichlet:ALPHA`` or ``site``."""
    train_limit: int | None = None
    """Training rows per run (a seeded subset), for quick runs."""
    threads: int = 1
    """torch threads."""

    def validate(self) -> None:
        check_sampling_options(self)
        self.sfl_config().validate()  # a run's checks (rounds, threads, ...), up front

    def sfl_config(self, **per_run: Any) -> SFLConfig:
        """A run's :class:`SFLConfig`: these fields and ``per_run`` (scheme, cuts, seed, ...)."""
        return SFLConfig(**{**asdict(self), **per_run})


@dataclass
class StudyPlannerConfig:
    """How a study's plans are made: fields of the planner's
    :class:`~flowsplit.planner.plan.PlannerConfig` of the same names (its batch size and
    local epochs are the runs', :class:`StudyRunConfig`), the objective and the
    baselines' cuts; ``[planner]`` in a ``--config`` file, its options flat on the
    command line."""

    CLI_GROUP: ClassVar[str] = "planner"

    family: str = "hsfl"
    """Scheme of the three-tier runs: ``hsfl`` or ``hsfl-ll``."""
    fixed_cuts: tuple[int, int] = (1, 2)
    """HSFL baseline cuts."""
    sfl_cut: int = 1
    """SFL baseline cut."""
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Objective weights loss, delay, bytes of the accuracy-aware planner."""
    reference: str = "hsfl"
    """Objective references: ``hsfl`` or ``median``."""
    objective: str = "guard"
    """``guard`` (accuracy first, see :func:`flowsplit.planner.plan.accuracy_guard`) or
    ``weighted`` (the weighted sum with the predicted loss)."""
    acc_tolerance: float = 0.01
    """Accuracy guard: plans within this of the best predicted accuracy (1 point)."""
    three_tier: bool = False
    """Plan only cut pairs with an aggregator part (a < c)."""
    capacity: tuple[int, ...] | None = None
    """Most clients per aggregator (the planners honour it)."""
    only_cuts: tuple[tuple[int, int], ...] | None = None
    """Cut pairs the planners may choose (a leakage budget, see ``planner/leakage.py``)."""

    def __post_init__(self) -> None:
        self.fixed_cuts = (int(self.fixed_cuts[0]), int(self.fixed_cuts[1]))

    def validate(self) -> None:
        if self.family not in ("hsfl", "hsfl-ll"):
            raise ConfigError(f"--family {self.family!r}: choose hsfl or hsfl-ll")
        if self.objective not in ("guard", "weighted"):
            raise ConfigError(f"--objective {self.objective!r}: choose guard or weighted")
        if not (0.0 <= self.acc_tolerance <= 1.0):
            raise ConfigError(
                f"--acc-tolerance {self.acc_tolerance}: give an accuracy difference in [0, 1]"
            )
        from flowsplit.planner.objective import Weights

        try:
            Weights(*self.weights)  # finite, >= 0, not all 0 (as --weights is parsed)
        except ConfigError as exc:
            raise ConfigError(f"--weights: {exc}") from None
        for a, c in self.only_cuts or ():
            if not 1 <= a <= c:  # a file's pairs (the budget's are made legal)
                raise ConfigError(f"only_cuts: ({a}, {c}) is no cut pair (1 <= a <= c)")


@dataclass
class StudyConfig(TopologyChoice, ModelChoice):
    """Everything that decides what is planned (saved next to every plan): the model and
    topology choices, the runs' settings (``run``), the planner's (``planner``) and the
    pilots'."""

    CLI_GROUP: ClassVar[str] = "the planned run"

    topology: str = topology_field("heterogeneous")
    topology_seed: int = 0
    """Seed of a generated topology (the same for every run seed)."""
    trace: str | None = None
    """Per-round network changes, as ``sfl run --trace``: ``random:SEED``, a TOML file of ``[[trace]]`` tables, or ``none`` (default: the topology's own). Plans are made on round 1's network (later changes are not foreseen: that is what re-planning is for); ``sfl compare`` runs every scheme on the changing network."""
    run: StudyRunConfig = field(default_factory=StudyRunConfig)
    """The settings every run takes (``[run]``)."""
    planner: StudyPlannerConfig = field(default_factory=StudyPlannerConfig)
    """How the plans are made (``[planner]``)."""
    n_pilots: int | None = None
    """Pilot cut pairs (``None``: every legal pair, at most :data:`MAX_PILOTS`)."""
    pilot_steps: int | None = None
    """Optimiser steps per pilot, client batches summed over clients (``None``:
    :data:`PILOT_FRACTION` of the run's)."""
    pilot_train_limit: int | None = None
    """Training rows per pilot (default: as the runs)."""
    quick: bool = False
    """Quick-mode defaults (see :data:`QUICK`)."""

    def __post_init__(self) -> None:
        ModelChoice.__post_init__(self)
        if isinstance(self.run, dict):
            self.run = StudyRunConfig(**self.run)
        if isinstance(self.planner, dict):
            self.planner = StudyPlannerConfig(**self.planner)
        self.validate()

    def validate(self) -> None:
        """Check the values (on construction); errors name the option to change."""
        # None: the planner chooses; 0 is no count of pilots (--no-pilots runs none).
        for name, flag in (
            ("n_pilots", "--pilots"),
            ("pilot_steps", "--pilot-steps"),
            ("pilot_train_limit", "--pilot-train-limit"),
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{flag} must be >= 1, got {value}")
        check_numbers(self)  # topology_seed in [0, 2**32), as on the command line
        self.run.validate()
        self.planner.validate()
        parse_trace_spec(self.trace)  # the file itself is read with the topology

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(cls, defaults: dict[str, Any], quick: bool, options: dict[str, Any]):
    """An instance of the config class ``cls`` from ``defaults`` and keyword
    ``options`` (``None`` takes the default), validated. Both may name a nested
    config's fields at the top, as its options do (``rounds=3`` for ``run.rounds``), or
    give its table (``run={"rounds": 3}``)."""
    given = {k: v for k, v in options.items() if v is not None}
    values = merged(nest_keys(cls, defaults), nest_keys(cls, given), {"quick": quick})
    cfg = instantiate(cls, values)  # (a tuple field's lists, as from a TOML file: tuples)
    cfg.validate()
    return cfg


# --- the command line: sfl plan's and sfl compare's options ----------------------------


def _pair(text: str) -> tuple[int, int]:
    from flowsplit.federated.config import parse_cuts

    return parse_cuts(text, "--fixed-cuts")


def _capacity(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--capacity {text!r}: give one integer per aggregator") from None


def _weights(text: str) -> tuple[float, float, float]:
    from flowsplit.planner.objective import Weights

    w = Weights.parse(text)
    return (w.loss, w.delay, w.bytes)


def _tolerance(text: str) -> float:
    """``--acc-tolerance`` in percentage points -> StudyConfig.acc_tolerance, a fraction."""
    try:
        points = float(text)
    except ValueError:
        raise ConfigError(f"--acc-tolerance {text!r}: give percentage points in [0, 100]") from None
    if not (0.0 <= points <= 100.0):
        raise ConfigError(f"--acc-tolerance {points:g}: give percentage points in [0, 100]")
    return points / 100.0


def _quick(name: str, default: str) -> dict:
    """``show=`` of a field that ``--quick`` changes: its default and quick mode's."""
    return cli(show=lambda v: f"{default if v is None else v}; --quick: {QUICK[name]}")


def quick_help(recipe: dict) -> str:
    """``--quick``'s help, from the recipe itself."""
    shown = {k: v for k, v in recipe.items() if v is not None}
    text = ", ".join(f"{k} {len(v) if k == 'seeds' else v}" for k, v in shown.items())
    return f"Small defaults ({text}); options given win."


STUDY_OPTIONS = {
    "n_clients": _quick("n_clients", "the preset's"),
    "n_aggregators": _quick("n_aggregators", "the preset's"),
    "trace": cli(metavar="SPEC"),  # as sfl run's
    "rounds": _quick("rounds", ""),
    "family": cli(choices=("hsfl", "hsfl-ll")),
    "fixed_cuts": cli(parse=_pair, show=show_list, metavar="A,C"),
    "weights": cli(parse=_weights, show=lambda v: ",".join(f"{w:g}" for w in v), metavar="L,D,B"),
    "reference": cli(choices=("hsfl", "median")),
    "n_pilots": cli(
        flag="--pilots",
        metavar="N",
        help="Pilot cut pairs.",
        show=lambda _: f"every legal pair, at most {MAX_PILOTS}",
    ),
    "pilot_steps": cli(
        help="Optimiser steps per pilot, client batches summed over clients.",
        show=lambda _: f"{PILOT_FRACTION:g} of the run's",
    ),
    "train_limit": {
        "flowsplit.cli": {**_quick("train_limit", "every row")["flowsplit.cli"], "metavar": "N"}
    },
    "capacity": cli(parse=_capacity, show=lambda _: "no limit", metavar="K[,K...]"),
    "objective": cli(choices=("guard", "weighted")),
    "acc_tolerance": cli(
        parse=_tolerance,
        show=lambda v: f"{100 * v:g}",
        help="Accuracy guard: plans within this many percentage points of the best "
        "predicted accuracy.",
    ),
    "quick": cli(help=quick_help(QUICK)),
    "only_cuts": cli(enabled=False),  # from the leakage budget (LeakageBudget)
}
"""``sfl plan``'s and ``sfl compare``'s view of :class:`StudyConfig`."""

STUDY_GROUPS = {
    "planner": ("family", "fixed_cuts", "sfl_cut", "weights", "reference", "objective")
    + ("acc_tolerance", "three_tier", "capacity"),
    "pilots": ("n_pilots", "pilot_steps", "pilot_train_limit"),
}
"""The ``--help`` sections of the study's options beyond the model, topology and run."""


@dataclass
class LeakageBudget:
    """Which cut pairs the planner may choose: those whose leakage, measured by ``sfl
    privacy``, is at most a bound (``StudyConfig.only_cuts``, from a file)."""

    CLI_GROUP: ClassVar[str] = "leakage budget (from `sfl privacy`)"

    max_leakage: float | None = field(
        default=None,
        metadata=cli(help="plan only cut pairs whose measured leakage is at most this"),
    )
    leakage_file: Path | None = field(
        default=None,
        metadata=cli(
            parse=path_arg,
            metavar="PRIVACY.json",
            help="privacy.json of `flowsplit sfl privacy` (for --max-leakage)",
        ),
    )
    leakage_measure: str = field(
        default="bytes_recovered",
        metadata=cli(
            help="measure of --max-leakage (bytes_recovered, ascii_recovered, dcor, "
            "label_probe_acc, grad_label_acc, seq_recovered)"
        ),
    )

    def only_cuts(self, model: str) -> tuple[tuple[int, int], ...] | None:
        """The cut pairs the budget allows ``model`` (None: no budget)."""
        return budget_pairs(self.leakage_file, self.leakage_measure, self.max_leakage, model=model)


def add_study_arguments(
    p: argparse.ArgumentParser, config: type = StudyConfig, **overrides: dict
) -> None:
    """The options ``sfl plan`` and ``sfl compare`` share: DATASET, one per field of
    ``config`` (a :class:`StudyConfig`; ``overrides`` refine them), unset when not given
    so that ``--quick`` picks the defaults, the :class:`LeakageBudget` and ``--quiet``."""
    add_dataset_argument(p)
    options = with_groups({**STUDY_OPTIONS, **overrides}, STUDY_GROUPS)
    add_config_arguments(p, config, overrides=options, unset=True)
    add_config_arguments(p, LeakageBudget)
    p.add_argument("--quiet", action="store_true", help="no per-run log")


def study_options(args: argparse.Namespace, config: type = StudyConfig) -> dict:
    """The ``config`` fields given on the command line, over a ``--config`` file's (when
    the command has one), with ``only_cuts`` from the leakage budget; a field not given
    is left out (``None``: the mode's default)."""
    given = given_values(config, args)
    path = getattr(args, "config_file", None)
    if path is not None:
        given = merged(read_config_file(config, path), given)
    budget = config_from_args(LeakageBudget, args)
    only_cuts = budget.only_cuts(given.get("model") or config.model)
    if only_cuts is not None:
        given["only_cuts"] = only_cuts
    return given
