"""The schemes (strategies): what differs between sfl, hsfl and hsfl-ll, and the round loop.

:class:`Scheme` owns the round loop (plan a round, let the runtime execute it,
evaluate, log a short tree); subclasses only set what differs:

=================  ===========  ================  ===================  ===========
scheme             tiers        gradients down    client parts         server part
=================  ===========  ================  ===================  ===========
``sfl`` v1         2 (a == c)   yes               averaged at server   one per client, averaged
``sfl`` v2         2 (a == c)   yes               averaged at server   one, shared
``hsfl``           3 (or 2)     yes (end-to-end)  within aggregators,  one, shared
                                                  then at server
``hsfl-ll``        3 (or 2)     no (local loss)   as hsfl              one, shared
=================  ===========  ================  ===================  ===========

In ``sfl`` the clients talk to the server directly: their messages travel through
their edge aggregator as a relay (no compute there), so they cross both hops and
are counted on both. Every round, the order in which the shared parts serve the
clients' batches is a seeded shuffle: step ``k`` serves batch ``k`` of every client
that has one, in that order, which makes runs deterministic and identical across
runners.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from flowsplit.federated.config import SFLConfig
from flowsplit.federated.costs import Ledger, n_batches, round_delay

log = logging.getLogger("flowsplit.federated")


@dataclass(frozen=True)
class RoundPlan:
    """What every role knows in advance about one round (all derived from the seed)."""

    round: int
    participants: np.ndarray
    """(N,) bool: clients taking part (not dropped, non-empty shard)."""
    order: np.ndarray
    """Participating client indices in service order."""
    slowdown: np.ndarray
    """(N,) compute slowdown factor (1 = normal, > 1 = straggler)."""
    n_batches: np.ndarray
    """(N,) batches each client runs this round (0 for non-participants)."""

    @property
    def max_steps(self) -> int:
        return int(self.n_batches.max(initial=0))


def make_round_plan(config: SFLConfig, round_index: int, n_samples: np.ndarray) -> RoundPlan:
    """Sample the round's dropouts, stragglers and service order (seeded by round)."""
    n = len(n_samples)
    rng = np.random.default_rng([config.seed, 7919, round_index])
    dropped = rng.random(n) < config.drop_prob
    straggler = rng.random(n) < config.straggler_prob
    perm = rng.permutation(n)
    participants = ~dropped & (np.asarray(n_samples) > 0)
    batches = np.where(
        participants, n_batches(n_samples, config.batch_size, config.local_epochs), 0
    )
    return RoundPlan(
        round=round_index,
        participants=participants,
        order=perm[participants[perm]],
        slowdown=np.where(straggler & participants, config.straggler_slowdown, 1.0),
        n_batches=batches,
    )


@dataclass
class RoundOutcome:
    """What a runtime reports after executing a round."""

    ledger: Ledger
    train_loss: float
    lost: list[int]
    """Clients lost during the round (dist runner only)."""
    wall_s: float
    received_bytes: int | None = None


class Runtime(Protocol):
    """What the round loop needs from a runner (simulated or distributed)."""

    is_server: bool
    n_samples: np.ndarray

    def execute_round(self, plan: RoundPlan) -> RoundOutcome: ...

    def evaluate(self) -> dict[str, float]: ...


class Scheme:
    """Base strategy: the round loop; subclasses set the protocol flags."""

    name: ClassVar[str] = ""
    end_to_end: ClassVar[bool] = True
    """Activation gradients travel back down to the clients."""
    edge_averaging: ClassVar[bool] = True
    """Aggregators average their clients' parts before the server does."""
    local_loss: ClassVar[bool] = False
    """Client and aggregator parts train on auxiliary heads."""

    def __init__(self, config: SFLConfig):
        self.config = config

    @property
    def server_copies(self) -> bool:
        """The server keeps one server part per client (SplitFed v1)."""
        return False

    @property
    def three_tier(self) -> bool:
        return self.config.cuts[1] > self.config.cuts[0]

    @staticmethod
    def from_config(config: SFLConfig) -> Scheme:
        cls = {
            "sfl": SplitFed,
            "hsfl": HierarchicalSplitFed,
            "hsfl-ll": HierarchicalSplitFedLocalLoss,
        }
        return cls[config.scheme](config)

    def run(
        self,
        runtime: Runtime,
        *,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Train for ``config.rounds`` rounds; the server returns one record per round."""
        history: list[dict[str, Any]] = []
        clock = 0.0
        for r in range(self.config.rounds):
            plan = make_round_plan(self.config, r, runtime.n_samples)
            outcome = runtime.execute_round(plan)
            if not runtime.is_server:
                continue
            record = self.summarise(plan, outcome, runtime.evaluate(), runtime, clock)
            clock = record["clock_s"]
            history.append(record)
            if on_round is not None:
                on_round(record)
        return history

    def summarise(
        self,
        plan: RoundPlan,
        outcome: RoundOutcome,
        scores: dict[str, float],
        runtime: Any,
        clock: float,
    ) -> dict[str, Any]:
        """One round's record: scores, delay, faults and bytes."""
        delay = round_delay(outcome.ledger, runtime.assignment, local_loss=self.local_loss)
        led = outcome.ledger
        record: dict[str, Any] = {
            "round": plan.round + 1,
            **scores,
            "train_loss": outcome.train_loss,
            "delay_s": delay.total,
            "delay": delay.to_dict(),
            "clock_s": clock + delay.total,
            "participants": int(plan.participants.sum()),
            "dropped": int((~plan.participants).sum()),
            "stragglers": int((plan.slowdown > 1).sum()),
            "lost": outcome.lost,
            "bytes_total": led.bytes_total,
            "messages_total": int(round(led.messages.sum())),
            "bytes": led.bytes_breakdown(),
            "wall_s": outcome.wall_s,
        }
        if outcome.received_bytes is not None:
            record["bytes_received_total"] = outcome.received_bytes
        return record


class SplitFed(Scheme):
    """SplitFed (Thapa et al., 2022): two tiers, clients talk to the server via a relay."""

    name = "sfl"
    edge_averaging = False

    @property
    def server_copies(self) -> bool:
        return self.config.sfl_version == "v1"


class HierarchicalSplitFed(Scheme):
    """Three tiers with end-to-end backpropagation client -> aggregator -> server and back."""

    name = "hsfl"


class HierarchicalSplitFedLocalLoss(Scheme):
    """Three tiers, each trained on its own (auxiliary-head) loss; nothing travels down."""

    name = "hsfl-ll"
    end_to_end = False
    local_loss = True


def format_round(record: dict[str, Any], n_rounds: int) -> str:
    """A short tree summarising a round, for the log."""
    mb = 1e6
    b = record["bytes"]

    def hop(name: str) -> str:
        up = sum(b[name]["up"].values()) / mb
        down = sum(b[name]["down"].values()) / mb
        return f"{up:.2f} MB up / {down:.2f} MB down"

    faults = f"{record['dropped']} out, {record['stragglers']} slow"
    if record["lost"]:
        faults += f", lost {record['lost']}"
    return (
        f"round {record['round']}/{n_rounds}  acc {record['accuracy']:.4f}  "
        f"macro-F1 {record['macro_f1']:.4f}  loss {record['loss']:.4f}  "
        f"delay {record['delay_s']:.2f} s ({record['delay']['bottleneck']}-bound)\n"
        f"  ├─ clients {record['participants']} ({faults})\n"
        f"  ├─ client-aggregator {hop('client-aggregator')}\n"
        f"  └─ aggregator-server {hop('aggregator-server')}"
    )
