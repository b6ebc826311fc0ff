"""The data-parallel study's configuration (``flowsplit compare``), apart from the code
that runs it (:mod:`flowsplit.experiments.dp.compare`). Kept light (no torch) so that the
command line builds its options from this dataclass at start-up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from flowsplit.config_args import check_names, check_seeds
from flowsplit.errors import ConfigError
from flowsplit.experiments.dp.layout import plain_first
from flowsplit.train.config import COMM_HOOKS

ALL_MODELS = ("cnn", "lstm", "convlstm", "convgru", "xgboost")
"""The models a study trains by default (``--models`` may name any registered one)."""
QUICK = {"epochs": 2, "rounds": 20}
"""``--quick``: the recipe of short runs (options given explicitly win)."""
# Settings that change what a cell measures: a rerun into the same OUT must match them.
FINGERPRINT_KEYS = ("dataset", "epochs", "rounds", "threads", "patience", "train_args")


@dataclass
class CompareConfig:
    """One comparison study."""

    dataset: str
    """Prepared dataset directory (``flowsplit prepare``)."""
    out: str
    """Study directory: runs, logs, results and report."""
    models: list[str] = field(default_factory=lambda: list(ALL_MODELS))
    """Models to train (registry names)."""
    workers: list[int] = field(default_factory=lambda: [1, 2, 4])
    """Worker counts; 1 (centralised, the reference) is always added."""
    seeds: list[int] = field(default_factory=lambda: list(range(5)))
    """Seeds of every (model, workers) cell."""
    comm_hooks: list[str] = field(default_factory=lambda: ["none"])
    """DDP communication hooks (``flowsplit train --comm-hook``) of every multi-worker neural
    cell: none (the plain float32 all-reduce, always run: the others are paired with it by
    seed), fp16, bf16, powersgd. Centralised and XGBoost cells have no hook."""
    epochs: int | None = None
    """Maximum epochs of the neural models (None: the engine's default; ``--quick``: :data:`QUICK`'s)."""
    rounds: int | None = None
    """Maximum XGBoost rounds (None: the engine's default; ``--quick``: :data:`QUICK`'s)."""
    threads: int = 1
    """Threads per worker, the same in every cell, so N workers use N x threads cores
    (except the same-cores centralised cells)."""
    same_cores_seeds: int | None = None
    """Seeds of each model's same-cores centralised cell, one process with N x threads
    threads (N: the largest worker count that fits the cores), against which N workers
    are also timed: the first K seeds (default: every seed; 0: none)."""
    patience: int | None = None
    """Early-stopping patience passed to every run (None: the engine's default)."""
    margin: float = 0.01
    """TOST equivalence margin, as a fraction (0.01 = +-1 percentage point)."""
    alpha: float = 0.05
    """Significance level of the tests."""
    quick: bool = False
    """Short runs and a short micro-benchmark, for demos and smoke tests."""
    cell_timeout_s: float | None = None
    """Kill a cell that runs longer than this (it is recorded as failed)."""
    train_args: list[str] = field(default_factory=list)
    """Extra arguments passed verbatim to every ``flowsplit train``."""
    quiet_wait_s: float = 0.0
    """Before each run, wait up to this long for the machine to be mostly idle."""
    max_busy: float = 0.25
    """"Mostly idle": at most this fraction of the CPUs busy (over one second)."""
    max_foreign: float | None = None
    """Rerun (once) a run during which other processes took more than this fraction of
    the CPUs (default: none: every run is kept, contended ones flagged in the report)."""
    rerun_contended: bool = False
    """Also run again finished runs that were contended (beyond ``max_foreign``, or the
    report's threshold), keeping whichever of the two was disturbed less."""
    fresh_process: bool = False
    """Run every cell as a ``flowsplit train`` process of its own (each pays an interpreter
    and torch's import, about 10 s a process on 2 cores) instead of in long-lived
    processes, one set per worker count."""
    cross_source: str | None = None
    """Another prepared dataset (another source: other networks, hosts, times) on which
    every run is also scored, over the classes both share with 20 flows or more there;
    the report gives each model's drop and the open-set AUROC of its confidence on the
    other classes."""

    def __post_init__(self) -> None:
        self.dataset, self.out = str(self.dataset), str(self.out)
        self.cross_source = None if self.cross_source is None else str(self.cross_source)
        if self.cross_source is not None and not self.cross_source.strip():
            raise ConfigError("--cross-source: an empty path (give the other dataset's folder)")
        if isinstance(self.seeds, int):  # a count: seeds 0 .. n-1
            self.seeds = list(range(self.seeds))
        check_seeds(self.seeds)  # not blamed on --train-arg --seed later
        self.workers = sorted({1, *(int(w) for w in self.workers)})
        self.seeds = sorted(self.seeds)
        self.models = list(dict.fromkeys(self.models))
        self.comm_hooks = plain_first(self.comm_hooks)
        self.train_args = list(self.train_args)
        if self.quick:  # the recipe fills what was not given
            for name, value in QUICK.items():
                if getattr(self, name) is None:
                    setattr(self, name, value)
        self._check_values()
        check_names("--comm-hooks", self.comm_hooks, COMM_HOOKS)
        from flowsplit.models.registry import MODEL_SPECS

        # The default study is the five models; any registered one may be chosen.
        check_names("--models", self.models, list(MODEL_SPECS))

    def _check_values(self) -> None:
        """The counts, times and fractions, each refused by its option's name."""
        if min(self.workers) < 1:
            raise ConfigError(f"--workers must be positive, got {self.workers}")
        if not self.models:
            raise ConfigError("give at least one model (--models cnn,lstm)")
        if self.cell_timeout_s is not None and not self.cell_timeout_s > 0:
            raise ConfigError("--cell-timeout must be > 0 seconds")
        if self.quiet_wait_s < 0:
            raise ConfigError("--quiet-wait must be >= 0 seconds")
        for name in ("max_busy", "max_foreign"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ConfigError(
                    f"--{name.replace('_', '-')} is a fraction in [0, 1], got {value}"
                )
        if not self.seeds:
            raise ConfigError("give at least one seed (--seeds 5, or --seeds 0,1,2)")
        if self.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {self.threads}")
        # Checked whatever the models: --boost-rounds -1 passed while no XGBoost ran.
        for name, flag, least in (("epochs", "--epochs", 1), ("rounds", "--boost-rounds", 1)):
            value = getattr(self, name)
            if value is not None and value < least:
                raise ConfigError(f"{flag} must be >= {least}, got {value}")
        if self.patience is not None and self.patience < 0:
            raise ConfigError(
                f"--patience must be >= 0 (0: no early stopping), got {self.patience}"
            )
        if self.same_cores_seeds is not None and self.same_cores_seeds < 0:
            raise ConfigError(f"--same-cores-seeds must be >= 0, got {self.same_cores_seeds}")
        if not 0 < self.margin < 1:
            raise ConfigError(f"--margin is a fraction in (0, 1), got {self.margin}")
        if not 0 < self.alpha < 0.5:
            raise ConfigError(f"--alpha must be in (0, 0.5); got {self.alpha}")

    def fingerprint(self) -> dict:
        """The settings a rerun into the same OUT must match. The dataset is named by
        the digest of its manifest, not its path, so that a study (or a demo) moved or
        copied elsewhere, its dataset with it, resumes."""
        d = asdict(self)
        d["dataset"] = dataset_digest(self.dataset)
        return {k: d[k] for k in FINGERPRINT_KEYS}


def dataset_digest(dataset: str | Path) -> str:
    """``sha256:HEX`` of a dataset's ``manifest.json`` (it lists every view file's shape,
    the classes, splits and the inputs' digests); the resolved path when there is none."""
    import hashlib

    manifest = Path(dataset) / "manifest.json"
    try:
        return "sha256:" + hashlib.sha256(manifest.read_bytes()).hexdigest()
    except OSError:
        return str(Path(dataset).resolve())
