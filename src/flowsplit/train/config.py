"""The training configuration: validated once, written to every run directory."""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from flowsplit.choices import MODEL_OPTION
from flowsplit.config_args import check_numbers, cli, field_type_problem, path_text
from flowsplit.errors import ConfigError, InputError
from flowsplit.models.defaults import default_lr
from flowsplit.util import read_json_document

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")
LR_SCHEDULES = ("cosine", "constant")
CLASS_WEIGHTS = ("auto", "none", "balanced")
DROPOUT_MASKS = ("global", "rank")
# Options that may change when a run is resumed; anything else would make the
# resumed run a different experiment.
RESUMABLE_OPTIONS = (
    "epochs",
    "patience",
    "workers",
    "threads",
    "quiet",
    "device",
    "backend",
    "master_addr",
    "timeout_s",
    "fail_after_epoch",
)


@dataclass
class TrainConfig:
    """One training run, as given on the command line (or to ``train``)."""

    dataset: str = field(metadata=cli(positional=True, metavar="DATASET", parse=path_text))
    """Directory of a prepared dataset (``flowsplit prepare``)."""
    model: str = field(metadata=cli(aliases=("-m",)))
    """Registry name: cnn, lstm, convlstm, convgru, transformer or xgboost."""
    out: str = field(metadata=cli(aliases=("-o",), metavar="RUN", parse=path_text))
    """Run directory to write (config, log, checkpoints, weights, metrics.json)."""
    view: str | None = None
    """Dataset view to read (default: the model's first accepted view the dataset has)."""
    workers: int = 1
    """Local worker processes: 1 = centralised, N > 1 = data-parallel (DDP or Dask)."""
    threads: int | None = None
    """Threads per worker (default: cores / workers on this machine)."""
    epochs: int = field(default=15, metadata=cli(aliases=("--max-epochs",)))
    """Maximum epochs (neural models)."""
    batch_size: int = 64
    """Global batch size: each of N workers takes batch_size / N per step."""
    lr: float | None = None
    """Learning rate for the global batch (default: Adam 1e-3 for cnn and lstm, 3e-3 for
    convlstm and convgru; eta 0.1 for XGBoost)."""
    lr_schedule: str = field(default="cosine", metadata=cli(choices=LR_SCHEDULES))
    """cosine (decay per epoch from lr to 0 over --epochs) or constant."""
    scale_lr: bool = False
    """Keep batch_size per worker and multiply lr by the number of workers (linear scaling)."""
    class_weight: str = field(default="auto", metadata=cli(choices=CLASS_WEIGHTS))
    """balanced: weight each class's loss by n / (classes * n_class); none: unweighted; auto
    (default): balanced for the neural models, none for XGBoost. On captures from another
    source (docs/generalisation.md, 5 seeds) balanced cut the drop in macro-F1 of the CNN,
    LSTM, ConvGRU and transformer by 2.8 to 8.9 points without lowering their own test
    macro-F1."""
    dropout_masks: str = field(default="global", metadata=cli(choices=DROPOUT_MASKS))
    """global (default): each row's dropout masks come from a stream of its own, seeded by
    epoch, dropout call and row of the global batch, so N workers drop what one process
    drops; rank: each rank draws masks for its rows from its own generator (nn.Dropout,
    so N workers see other masks than one process). On nDPI8 (5 seeds) global cut the
    CNN's 1-vs-2-worker spread from 1.34 to 0.43 pt and costs no epoch time."""
    weight_decay: float = 0.0
    """Adam weight decay."""
    label_smoothing: float = 0.0
    """Label smoothing of the training loss (0 = none; e.g. 0.1 puts 10 % of each
    target's mass evenly on all classes)."""
    augment: str = field(default="none", metadata=cli(metavar="SPEC"))
    """Training-time augmentation: none; default (drop=0.05,dup=0.05,swap=0.05,jitter=0.05,
    mask=0.02,fields=1); or KEY=VALUE,... of drop, dup, swap (packet loss, duplication,
    reordering), jitter (sizes and gaps), mask (payload bytes), fields (header fields
    randomised). See docs/generalisation.md."""
    init_from: str | None = field(default=None, metadata=cli(metavar="DIR", parse=path_text))
    """Start the transformer's encoder from `flowsplit pretrain -o DIR` (DIR/encoder.pt);
    the head starts fresh."""
    patience: int | None = None
    """Epochs without a better validation macro-F1 before stopping; XGBoost: rounds
    without a better validation log-loss; 0 disables early stopping (default: 4 epochs;
    XGBoost 20 rounds)."""
    seed: int = 0
    """Seed of initialisation and data order."""
    device: str = field(default="auto", metadata=cli(choices=DEVICES))
    """auto (CUDA when available), cpu or cuda."""
    backend: str = field(default="auto", metadata=cli(choices=BACKENDS))
    """Process-group backend: auto (nccl on CUDA, gloo on CPU), gloo or nccl."""
    rounds: int = field(default=300, metadata=cli(flag="--boost-rounds"))
    """Maximum boosting rounds (XGBoost)."""
    dask_scheduler: str | None = field(
        default=None, metadata=cli(metavar="tcp://HOST:PORT", show=lambda _: "a local cluster")
    )
    """Address tcp://HOST:PORT of an existing Dask scheduler (XGBoost)."""
    master_addr: str = "127.0.0.1"
    """Address the local rendezvous binds to (local multi-worker runs)."""
    comm_hook: str = field(default="none", metadata=cli(choices=COMM_HOOKS))
    """How DDP all-reduces gradients: none (float32), fp16 or bf16 (16-bit casts), powersgd
    (rank-2 low-rank approximation with error feedback after 10 plain steps)."""
    bucket_mb: float = 25.0
    """DDP gradient bucket size in MB (smaller buckets start communicating earlier)."""
    steps_per_epoch: int | None = field(default=None, metadata=cli(show=lambda _: "no limit"))
    """At most this many optimiser steps per epoch (benchmarks on very large sets)."""
    timeout_s: float = field(default=120.0, metadata=cli(flag="--timeout", metavar="S"))
    """Seconds a rank waits in a collective (rendezvous, all-reduce, broadcast) before the
    run fails: bounds a stopped peer (a dead one is noticed at once). It must exceed rank
    0's validation pass, which the other ranks wait for."""
    model_options: dict[str, Any] = field(default_factory=dict, metadata=MODEL_OPTION)
    """Overrides of the model's default sizes (``--model-option key=value``)."""
    eval_batch_size: int = 1024
    """Batch size for validation and test inference."""
    quiet: bool = field(default=False, metadata=cli(aliases=("-q",)))
    """No progress bars, only warnings."""
    fail_after_epoch: int | None = field(default=None, metadata=cli(hidden=True))
    """Testing only: die after this epoch (0-based) unless the run was resumed."""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def class_weight_mode(self) -> str:
        """``class_weight`` as training applies it: ``auto`` is ``balanced`` for the neural
        models and ``none`` for XGBoost."""
        if self.class_weight != "auto":
            return self.class_weight
        return "none" if self.model == "xgboost" else "balanced"

    def validate(self) -> None:
        """Check every value; errors say which option to change and how."""
        check_numbers(self)
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads must be >= 1 (or omitted), got {self.threads}")
        if self.epochs < 1:
            raise ConfigError(f"--epochs must be >= 1, got {self.epochs}")
        if self.rounds < 1:
            raise ConfigError(f"--boost-rounds must be >= 1, got {self.rounds}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.lr is not None and not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"--lr-schedule must be cosine or constant, got {self.lr_schedule!r}")
        if self.class_weight not in CLASS_WEIGHTS:
            raise ConfigError(
                f"--class-weight must be auto, none or balanced, got {self.class_weight!r}"
            )
        if self.dropout_masks not in DROPOUT_MASKS:
            raise ConfigError(f"--dropout-masks must be global or rank, got {self.dropout_masks!r}")
        from flowsplit.data.augment import parse_augment

        parse_augment(self.augment)  # ConfigError naming --augment when it is not valid
        if self.weight_decay < 0:
            raise ConfigError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.patience is not None and self.patience < 0:
            raise ConfigError(
                f"--patience must be >= 0 (0 disables early stopping), got {self.patience}"
            )
        if self.device not in DEVICES:
            raise ConfigError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"--backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}"
            )
        if self.backend == "nccl" and self.device == "cpu":
            raise ConfigError("--backend nccl needs CUDA; use --backend gloo with --device cpu")
        if self.comm_hook not in COMM_HOOKS:
            raise ConfigError(
                f"--comm-hook must be one of {', '.join(COMM_HOOKS)}, got {self.comm_hook!r}"
            )
        if not self.bucket_mb > 0:
            raise ConfigError(f"--bucket-mb must be > 0, got {self.bucket_mb}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ConfigError(f"--steps-per-epoch must be >= 1, got {self.steps_per_epoch}")
        if not self.timeout_s > 0:
            raise ConfigError(f"--timeout must be > 0 seconds, got {self.timeout_s}")
        if self.eval_batch_size < 1:
            raise ConfigError(f"--eval-batch-size must be >= 1, got {self.eval_batch_size}")
        if self.dask_scheduler is not None and not self.dask_scheduler.startswith(
            ("tcp://", "tls://", "inproc://", "ucx://")
        ):
            raise ConfigError(
                f"--dask-scheduler must look like tcp://HOST:PORT, got {self.dask_scheduler!r}"
            )
        if not self.out:
            raise ConfigError("give the run directory with -o RUN")

    def effective_lr(self, kind: str) -> float:
        """Learning rate after defaults: Adam's per model (models.defaults), 0.1 for XGBoost."""
        if self.lr is not None:
            return self.lr
        return 0.1 if kind == "xgboost" else default_lr(self.model)

    def effective_patience(self, kind: str) -> int:
        """Patience after defaults: 4 epochs for neural models, 20 rounds for XGBoost."""
        if self.patience is not None:
            return self.patience
        return 20 if kind == "xgboost" else 4

    # --- persistence ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"unknown training options {', '.join(sorted(unknown))}")
        problem = field_type_problem(cls, data)  # epochs=True or "3" from Python, say
        if problem:
            raise ConfigError(f"training option {problem}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        """Read ``config.json`` of a run directory (or the file itself)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"{path.parent}: not a flowsplit run (no config.json)")
        try:
            doc = read_json_document(path)
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        train = doc.get("train", doc) if isinstance(doc, dict) else None
        unknown = (
            sorted(set(train) - {f.name for f in fields(cls)}) if isinstance(train, dict) else []
        )
        if not isinstance(train, dict) or unknown:
            # An sfl run's config.json, say: name the file, not 25 foreign options.
            what = f" (unknown options {', '.join(unknown[:3])}, ...)" if unknown else ""
            raise InputError(path, f"is not the config.json of a `flowsplit train` run{what}")
        problem = field_type_problem(cls, train)
        required = [
            f.name
            for f in fields(cls)
            if f.default is MISSING and f.default_factory is MISSING and f.name not in train
        ]
        if required:
            problem = f"lacks {', '.join(required)}"
        if problem:
            raise InputError(path, f"{problem}: the run's settings are damaged")
        return cls.from_dict(train)


def parse_model_options(items: list[str] | None) -> dict[str, Any]:
    """``["channels=[16,32]", "dropout=0"]`` -> ``{"channels": [16, 32], "dropout": 0}``.

    Values are read as JSON when they parse (numbers, lists, booleans), else as strings.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--model-option expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
