"""The split-learning study's configuration (``flowsplit sfl compare``), apart from the
code that runs it (:mod:`flowsplit.experiments.sfl.compare`). Kept light (no torch) so
that the command line builds its options from this dataclass at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowsplit.config_args import check_names, check_seeds
from flowsplit.errors import ConfigError
from flowsplit.planner import study_config
from flowsplit.planner.study_config import StudyConfig

BASELINES = ("majority", "centralised", "fedavg")
"""Baselines of ``sfl compare`` that split nothing (:mod:`flowsplit.experiments.sfl.baselines`)."""
SCHEMES = ("sfl", "hsfl", "hsfl-greedy", "delay", "acc-aware")
"""The schemes run by default."""
ALL_SCHEMES = (*SCHEMES, "best-fixed")
"""``best-fixed`` trains every legal cut pair (with the planner's assignment for that
pair) for every seed and keeps the pair with the best mean final validation accuracy:
the oracle the planner approximates, chosen in hindsight (costly: opt in)."""
REFERENCE = "hsfl"
REPLANNED = ("hsfl-greedy", "delay", "acc-aware")
"""Schemes whose assignment a planner made: with ``--replan every-round`` each also runs
re-planned (``NAME+replan``), from the same first plan, beside its static run."""
REPLAN_SUFFIX = "+replan"
REPLAN_CHOICES = ("never", "every-round")


def replanned_name(scheme: str) -> str:
    """The name of ``scheme``'s re-planned twin (``acc-aware+replan``)."""
    return scheme + REPLAN_SUFFIX


def run_schemes(schemes: tuple[str, ...], replan: str) -> tuple[str, ...]:
    """The schemes a comparison reports: ``schemes``, then the re-planned twins."""
    twins = [replanned_name(s) for s in schemes if s in REPLANNED] if replan != "never" else []
    return (*schemes, *twins)


QUICK = {**study_config.QUICK, "seeds": (0, 1)}
FULL = {**study_config.FULL, "seeds": (0, 1, 2, 3, 4)}


@dataclass
class SFLCompareConfig(StudyConfig):
    """What ``sfl compare`` runs (saved in results.json): a study plus its schemes,
    seeds and target accuracy."""

    CLI_GROUP: ClassVar[str] = "comparison"

    schemes: tuple[str, ...] = SCHEMES
    """Schemes to run; ``hsfl`` (the reference) is always added."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Run seeds (partition, initial weights, batch order, random assignments)."""
    target_accuracy: float | None = None
    """Accuracy whose first reaching is timed (default: 0.95 x HSFL's mean final accuracy)."""
    baselines: tuple[str, ...] = BASELINES
    """Baselines that split nothing (:mod:`flowsplit.experiments.sfl.baselines`)."""
    replan: str = "never"
    """``every-round``: also run hsfl-greedy, delay and acc-aware with their assignment re-planned before every round on that round's network (NAME+replan, from the same first plan), to compare with the static runs; meaningful with a --trace. The cuts stay those of the plan: moving a cut moves layers and their optimiser state between tiers mid-training, which the runtime does not do."""

    def validate(self) -> None:
        super().validate()
        if self.replan not in REPLAN_CHOICES:
            raise ConfigError(f"--replan {self.replan!r}: choose {' or '.join(REPLAN_CHOICES)}")
        check_names("--schemes", self.schemes, ALL_SCHEMES)
        check_names("--baselines", self.baselines, BASELINES)
        for flag, names in (("--schemes", self.schemes), ("--baselines", self.baselines)):
            if len(set(names)) != len(names):  # each would run, and be reported, twice
                raise ConfigError(f"{flag} {','.join(names)}: a name is given twice")
        if not self.seeds:
            raise ConfigError("--seeds: give at least one seed")
        check_seeds(self.seeds)  # the runs' SFLConfig would name --seed
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ConfigError(
                f"--target-accuracy is a fraction in (0, 1], got {self.target_accuracy:g}"
            )
