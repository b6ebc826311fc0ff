"""Configuration of a split federated run (validated once, saved with every run)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from flowsplit.choices import ModelChoice, TopologyChoice
from flowsplit.config_args import check_numbers, cli, int_tuple, option_name, show_list
from flowsplit.errors import ConfigError
from flowsplit.federated.system import AUX_MODES
from flowsplit.federated.system.partition import parse_partition
from flowsplit.federated.system.topology import ASSIGN_RULES, parse_trace_spec

SCHEMES = ("sfl", "hsfl", "hsfl-ll")
"""The scheme names (their definitions: ``flowsplit.federated.schemes``)."""
SFL_VERSIONS = ("v1", "v2")
OPTIMIZERS = ("sgd", "adam")
EVAL_SPLITS = ("train", "val", "test")
REPLAN_MODES = ("never", "every-round")
"""``--replan``: keep the first assignment, or re-plan it before every round."""


def parse_cuts(text: str, option: str = "--cuts") -> tuple[int, int]:
    """``"2"`` -> (2, 2); ``"2,4"`` -> (2, 4)."""
    try:
        values = [int(v) for v in str(text).replace(" ", "").split(",")]  # "1,,2" refused
    except ValueError:
        values = []
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise ConfigError(f"{option} {text!r}: give one cut (sfl: '2') or two ('2,4')")
    return values[0], values[1]


def _whole(value: Any) -> int:
    """An integer field's value: ``2``, ``2.0`` or ``"2"`` (a JSON key), not ``1.5`` or
    ``True`` (``int`` cut 1.5 to 1 without a word)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


MAX_SLOWDOWN = 1e6
"""The slowest a straggler may be: beyond it a round's time overflows to inf and NaN."""


@dataclass
class SamplingChoice:
    """Which clients take part in each round (Flower's client sampling): the same
    options in ``sfl run``, ``sfl plan`` and ``sfl compare`` (every run of a study
    samples alike; a plan's assignment covers every registered client)."""

    CLI_GROUP: ClassVar[str] = "clients per round (sampling)"

    clients_per_round: int | None = field(default=None, metadata=cli(metavar="K"))
    """Sample K clients each round (seeded; Flower's sampling: see ``--select``); default: every client takes part in every round."""
    fraction: float | None = field(default=None, metadata=cli(metavar="F"))
    """Sample max(int(F x available), --min-fit-clients) clients each round (Flower's fraction_fit), instead of --clients-per-round."""
    min_available_clients: int = field(default=1, metadata=cli(metavar="N"))
    """A round with fewer clients available to sample (with rows, available in the trace, admitted by --select) ends the run."""
    min_fit_clients: int = field(default=1, metadata=cli(metavar="N"))
    """Sample at least this many clients per round (fewer available ends the run)."""
    select: str = field(default="uniform", metadata=cli(metavar="SPEC"))
    """Which clients may be sampled: ``uniform`` (all), ``list:I,J,...`` or ``list:FILE``, ``attr:NAME>=VALUE`` (NAME: speed, memory, samples, bandwidth, latency); unavailable clients of the trace never are."""


@dataclass
class SFLConfig(SamplingChoice):
    """Everything that decides what a split federated run computes."""

    CLI_GROUP: ClassVar[str] = "training"

    scheme: str = field(default="hsfl", metadata=cli(choices=SCHEMES))
    """``sfl`` (SplitFed, two tiers), ``hsfl`` (three tiers, end-to-end) or ``hsfl-ll`` (local losses)."""
    cuts: tuple[int, int] = field(
        default=(1, 2),
        metadata=cli(parse=parse_cuts, show=lambda v: ",".join(map(str, v)), metavar="A[,C]"),
    )
    """Cut points (a, c), 1-based: client = blocks 1..a, aggregator = a+1..c, server = the rest."""
    sfl_version: str = field(default="v1", metadata=cli(choices=SFL_VERSIONS))
    """sfl only: ``v1`` keeps a server part per client (averaged each round), ``v2`` one shared."""
    rounds: int = 5
    """Federated rounds."""
    local_epochs: int = 1
    """Passes over its shard each client makes per round."""
    batch_size: int = 32
    """Samples per client batch."""
    optimizer: str = field(default="adam", metadata=cli(choices=OPTIMIZERS))
    """``adam`` or ``sgd``; each tier has its own, reset when its weights are replaced by an average."""
    lr: float = 1e-3
    """Learning rate of every tier."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 0.0
    """L2 penalty of every tier."""
    partition: str = "iid"
    """``iid``, ``dirichlet:ALPHA`` or ``site[:group|source]``."""
    assign: str = field(default="round-robin", metadata=cli(choices=ASSIGN_RULES))
    """Client -> aggregator rule: ``round-robin``, ``random`` or ``nearest``."""
    seed: int = 0
    """Seeds the model, the partition, batch order, faults and the topology generator."""
    drop_prob: float = 0.0
    """Probability that a client sits out a round (simulated fault)."""
    straggler_prob: float = 0.0
    """Probability that a participating client is a straggler in a round."""
    straggler_slowdown: float = 4.0
    """A straggler computes this many times slower."""
    aux_head: str = field(default="auto", metadata=cli(choices=AUX_MODES))
    """hsfl-ll auxiliary heads: ``auto`` (flatten, pooled when large), ``flatten``, ``last``, ``mean``."""
    aux_max_features: int = 1024
    """hsfl-ll: at most this many features reach an ``auto`` auxiliary head's linear layer."""
    timeout_s: float = field(default=60.0, metadata=cli(flag="--timeout", metavar="S"))
    """dist: an aggregator drops a client that sends nothing for this long (upper tiers wait longer)."""
    min_clients: int | None = None
    """A round in which fewer clients take part ends the run (default: a majority of those scheduled)."""
    accept_failures: bool = True
    """Go on after a lost client or aggregator (``--no-accept-failures``: any loss ends the run)."""
    eval_split: str = field(default="test", metadata=cli(choices=EVAL_SPLITS))
    """Split the global model is evaluated on after every round."""
    train_limit: int | None = field(default=None, metadata=cli(metavar="N"))
    """Use at most this many training rows (a seeded subset), for quick runs."""
    threads: int = 1
    """torch threads per process."""
    fail: list[str] = field(
        default_factory=list, metadata=cli(parse=str, append=True, metavar="aggregator:J@roundR")
    )
    """Fault schedule: aggregator J is gone from round R (1-based) on, its clients lost that round and reassigned from the next; repeat or comma-separate. sim: simulated; dist: the aggregator's process SIGKILLs itself at the start of round R."""
    capacity: tuple[int, ...] = field(
        default=(), metadata=cli(parse=int_tuple, show=show_list, metavar="K[,K...]")
    )
    """Most clients an aggregator may serve when clients are reassigned: one value for all or one per aggregator (default: no limit)."""
    replan: str = field(default="never", metadata=cli(choices=REPLAN_MODES))
    """``never``: keep the first assignment; ``every-round``: re-plan it before every round on that round's network (``flowsplit.planner.replan``). The cuts stay: moving one mid-training moves layers and their optimiser state between tiers, which the runtime does not do."""
    trace: str | None = field(default=None, metadata=cli(metavar="SPEC"))
    """Per-round network changes, replacing the topology's own ``[[trace]]``: ``random:SEED``, a TOML file of ``[[trace]]`` tables, or ``none`` (default: the topology's)."""
    exit_clients: dict[int, int] = field(default_factory=dict, metadata=cli(enabled=False))
    """Fault injection, dist only: client index -> round (0-based) at whose start its process exits."""
    hang_clients: dict[int, int] = field(default_factory=dict, metadata=cli(enabled=False))
    """Fault injection, dist only: client index -> round at whose start it stops answering."""

    def __post_init__(self) -> None:
        for name, convert in (
            ("cuts", lambda c: (_whole(c[0]), _whole(c[1]))),
            ("exit_clients", lambda d: {_whole(k): _whole(v) for k, v in dict(d).items()}),
            ("hang_clients", lambda d: {_whole(k): _whole(v) for k, v in dict(d).items()}),
            ("capacity", lambda c: tuple(_whole(v) for v in c)),
        ):
            try:
                setattr(self, name, convert(getattr(self, name)))
            except (TypeError, ValueError, IndexError):
                raise ConfigError(f"{name} {getattr(self, name)!r}: give integers") from None
        # One entry per failure, normalised, in the order given (comma lists split).
        self.fail = [
            f"aggregator:{j}@round{r + 1}"
            for j, r in _parse_failures([self.fail] if isinstance(self.fail, str) else self.fail)
        ]
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` saying how to fix the first bad field."""
        check_numbers(self)
        for name in ("momentum", "weight_decay"):
            if getattr(self, name) < 0:
                flag = option_name(SFLConfig, name)
                raise ConfigError(f"{flag} must be >= 0, got {getattr(self, name)}")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"--scheme {self.scheme!r}: choose one of {', '.join(SCHEMES)}")
        if self.scheme == "sfl" and self.cuts[0] != self.cuts[1]:
            raise ConfigError(
                f"sfl is two-tier: give one cut (--cuts {self.cuts[0]}), not {self.cuts}"
            )
        if self.cuts[0] < 1 or self.cuts[1] < self.cuts[0]:
            raise ConfigError(f"--cuts {self.cuts}: need 1 <= a <= c")
        if self.sfl_version not in SFL_VERSIONS:
            raise ConfigError(f"--sfl-version {self.sfl_version!r}: choose v1 or v2")
        for name in ("rounds", "local_epochs", "batch_size", "threads", "aux_max_features"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{option_name(SFLConfig, name)} must be >= 1")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"--optimizer {self.optimizer!r}: choose adam or sgd")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        for name in ("drop_prob", "straggler_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{option_name(SFLConfig, name)} must be in [0, 1)")
        if not 1.0 <= self.straggler_slowdown <= MAX_SLOWDOWN:
            raise ConfigError(
                f"--straggler-slowdown is a factor of slowness in [1, {MAX_SLOWDOWN:g}], "
                f"got {self.straggler_slowdown:g}"
            )
        if self.aux_head not in AUX_MODES:
            raise ConfigError(f"--aux-head {self.aux_head!r}: choose one of {', '.join(AUX_MODES)}")
        if not self.timeout_s > 0:
            raise ConfigError("--timeout must be > 0 seconds")
        if self.min_clients is not None and self.min_clients < 1:
            raise ConfigError("--min-clients must be >= 1")
        if self.eval_split not in EVAL_SPLITS:
            raise ConfigError("--eval-split must be train, val or test")
        if self.train_limit is not None and self.train_limit < 1:
            raise ConfigError("--train-limit must be >= 1")
        parse_partition(self.partition)
        if any(c < 0 for c in self.capacity):
            raise ConfigError(f"--capacity {show_list(self.capacity)}: capacities are >= 0")
        late = [(j, r) for j, r in _parse_failures(self.fail) if r >= self.rounds]
        if late:
            j, r = late[0]
            raise ConfigError(
                f"--fail aggregator:{j}@round{r + 1}: after the last of the {self.rounds} rounds"
            )
        if self.replan not in REPLAN_MODES:
            raise ConfigError(f"--replan {self.replan!r}: choose {' or '.join(REPLAN_MODES)}")
        parse_trace_spec(self.trace)  # the file itself is read with the topology
        from flowsplit.federated.sampling import check_sampling_options

        check_sampling_options(self)

    def failed_aggregators(self) -> dict[int, int]:
        """``{aggregator: round (0-based) from which it is gone}`` of ``--fail``."""
        out: dict[int, int] = {}
        for j, r in _parse_failures(self.fail):
            out[j] = min(r, out.get(j, r))
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cuts"] = list(self.cuts)
        d["capacity"] = list(self.capacity)
        d["exit_clients"] = {str(k): v for k, v in self.exit_clients.items()}
        d["hang_clients"] = {str(k): v for k, v in self.hang_clients.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SFLConfig:
        """The config saved by :meth:`to_dict`; an unknown key is a :class:`ConfigError`."""
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(
                f"unknown sfl config key(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(cls.__dataclass_fields__)}"
            )
        values = dict(d)
        if "cuts" in values:
            values["cuts"] = tuple(values["cuts"])
        if "capacity" in values:
            values["capacity"] = tuple(values["capacity"])
        return cls(**values)


MODES = ("sim", "dist")
"""``sfl run --mode``: the roles simulated in one process, or one process per role."""

GROUPS = {
    name: cli(group="faults and network")
    for name in ("drop_prob", "straggler_prob", "straggler_slowdown", "timeout_s")
    + ("min_clients", "accept_failures", "fail", "capacity", "replan", "trace", "assign")
}
"""The ``--help`` sections of :class:`SFLConfig`'s options beyond ``training``."""


@dataclass
class SFLRunConfig(TopologyChoice, ModelChoice):
    """What ``sfl run`` runs: the model and topology choices, how the roles run, and the
    run's :class:`SFLConfig` (``[run]`` in a ``--config`` file); saved as OUT/config.toml."""

    CLI_GROUP: ClassVar[str] = "how the roles run"

    mode: str = field(default="sim", metadata=cli(choices=MODES))
    """How the roles run: ``sim``, all in this process over a simulated network; ``dist``, one process per role over gloo (local, or under torchrun)."""
    client_workers: str | None = field(
        default=None, metadata=cli(metavar="P|auto", show=lambda _: "a process per client")
    )
    """dist: host the clients in a fixed pool of P worker processes (auto: the cores), each round's clients built in them while they take part, instead of a process per client; the default when clients are sampled (--clients-per-round, --fraction, --select), which needs it. Under torchrun: 1 + A + P processes."""
    run: SFLConfig = field(default_factory=SFLConfig)
    """The run's settings (``sfl run``'s other options)."""

    def __post_init__(self) -> None:
        ModelChoice.__post_init__(self)
        if isinstance(self.run, dict):
            self.run = SFLConfig.from_dict(self.run)
        if self.mode not in MODES:
            raise ConfigError(f"--mode {self.mode!r}: choose {' or '.join(MODES)}")


def _parse_failures(entries: list[str]) -> list[tuple[int, int]]:
    """``["aggregator:1@round3,aggregator:0@round5"]`` -> ``[(1, 2), (0, 4)]`` (0-based rounds)."""
    out = []
    for entry in entries:
        for item in str(entry).split(","):
            item = item.strip()
            if not item:
                continue
            role, _, when = item.partition("@")
            kind, _, index = role.partition(":")
            rnd = when[len("round") :] if when.startswith("round") else ""
            if kind != "aggregator" or not index.isdigit() or not rnd.isdigit() or int(rnd) < 1:
                raise ConfigError(
                    f"--fail {item!r}: write aggregator:J@roundR (J the aggregator, R >= 1 the "
                    "round, 1-based, from which it is gone)"
                )
            out.append((int(index), int(rnd) - 1))
    return out
