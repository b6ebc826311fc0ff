"""What a planning study is told (:class:`StudyConfig`), apart from its heavy machinery.

:mod:`flowsplit.planner.study` runs a study; this module only holds its configuration
and the quick/full defaults, so the command line can build ``sfl plan``'s options from
the dataclass without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from flowsplit.choices import ModelChoice, TopologyChoice, topology_field
from flowsplit.config_file import instantiate
from flowsplit.errors import ConfigError
from flowsplit.federated.config import SamplingChoice
from flowsplit.federated.sampling import check_sampling_options
from flowsplit.federated.system.topology import parse_trace_spec

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


RUN_FIELDS = ("rounds", "batch_size", "lr", "local_epochs", "partition", "train_limit")
RUN_FIELDS += ("threads",)
"""The :class:`StudyConfig` fields every run of a study takes as they are (its
:class:`~flowsplit.federated.config.SFLConfig`'s fields of the same names), with the
sampling fields (:data:`~flowsplit.federated.sampling.SAMPLING_FIELDS`)."""
PLANNER_FIELDS = ("family", "fixed_cuts", "batch_size", "local_epochs", "reference")
PLANNER_FIELDS += ("capacity", "three_tier", "acc_tolerance", "only_cuts")
"""The :class:`StudyConfig` fields every plan takes as they are (its
:class:`~flowsplit.planner.plan.PlannerConfig`'s fields of the same names)."""


@dataclass
class StudyConfig(SamplingChoice, TopologyChoice, ModelChoice):
    """Everything that decides what is planned (saved next to every plan)."""

    CLI_GROUP: ClassVar[str] = "the planned run"

    topology: str = topology_field("heterogeneous")
    topology_seed: int = 0
    """Seed of a generated topology (the same for every run seed)."""
    trace: str | None = None
    """Per-round network changes, as ``sfl run --trace``: ``random:SEED``, a TOML file of ``[[trace]]`` tables, or ``none`` (default: the topology's own). Plans are made on round 1's network (later changes are not foreseen: that is what re-planning is for); ``sfl compare`` runs every scheme on the changing network."""
    rounds: int = 5
    """Federated rounds of the planned run (the budget the surrogate predicts for)."""
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
    n_pilots: int | None = None
    """Pilot cut pairs (``None``: every legal pair, at most :data:`MAX_PILOTS`)."""
    pilot_steps: int | None = None
    """Optimiser steps per pilot, client batches summed over clients (``None``:
    :data:`PILOT_FRACTION` of the run's)."""
    pilot_train_limit: int | None = None
    """Training rows per pilot (default: as the runs)."""
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
    capacity: tuple[int, ...] | None = None
    """Most clients per aggregator (the planners honour it)."""
    threads: int = 1
    """torch threads."""
    objective: str = "guard"
    """``guard`` (accuracy first, see :func:`flowsplit.planner.plan.accuracy_guard`) or
    ``weighted`` (the weighted sum with the predicted loss)."""
    acc_tolerance: float = 0.01
    """Accuracy guard: plans within this of the best predicted accuracy (1 point)."""
    three_tier: bool = False
    """Plan only cut pairs with an aggregator part (a < c)."""
    only_cuts: tuple[tuple[int, int], ...] | None = None
    """Cut pairs the planners may choose (a leakage budget, see ``planner/leakage.py``)."""
    quick: bool = False
    """Quick-mode defaults (see :data:`QUICK`)."""

    def __post_init__(self) -> None:
        ModelChoice.__post_init__(self)
        self.fixed_cuts = (int(self.fixed_cuts[0]), int(self.fixed_cuts[1]))
        self.validate()

    def validate(self) -> None:
        """Check the values (on construction); errors name the option to change."""
        if self.family not in ("hsfl", "hsfl-ll"):
            raise ConfigError(f"--family {self.family!r}: choose hsfl or hsfl-ll")
        if self.rounds < 1 or (self.n_pilots or 1) < 1 or (self.pilot_steps or 1) < 1:
            raise ConfigError("--rounds, --pilots and --pilot-steps must be >= 1")
        if self.objective not in ("guard", "weighted"):
            raise ConfigError(f"--objective {self.objective!r}: choose guard or weighted")
        parse_trace_spec(self.trace)  # the file itself is read with the topology
        check_sampling_options(self)
        if not (0.0 <= self.acc_tolerance <= 1.0):
            raise ConfigError(
                f"--acc-tolerance {self.acc_tolerance}: give an accuracy difference in [0, 1]"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TUPLE_FIELDS = ("schemes", "seeds", "fixed_cuts", "weights", "capacity", "only_cuts")


def resolve(cls, defaults: dict[str, Any], quick: bool, options: dict[str, Any]):
    """An instance of the config class ``cls`` from ``defaults`` and keyword
    ``options`` (``None`` takes the default), validated."""
    known = set(cls.__dataclass_fields__)
    unknown = set(options) - known
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    merged = dict(defaults)
    merged.update({k: v for k, v in options.items() if v is not None})
    merged["quick"] = quick
    for key in TUPLE_FIELDS:  # (lists from a TOML file or Python: tuples)
        if merged.get(key) is not None:
            merged[key] = tuple(merged[key])
    cfg = instantiate(cls, merged)  # (a tuple field's lists, as from a TOML file: tuples)
    cfg.validate()
    return cfg
