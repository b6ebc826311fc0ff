"""The schemes (strategies): the one definition of sfl, hsfl and hsfl-ll.

A :class:`Scheme` owns everything that differs between the schemes, the way a
Flower ``Strategy`` does, while the maths stays in pure functions
(:func:`~flowsplit.federated.system.aggregate.fedavg`, the cost formulas):

- the round loop (plan a round, let the runtime execute it, evaluate, log a tree);
- the steps the roles delegate to it: the **download** of the global parts, the
  **aggregator step** on a client's batch (relay, end-to-end or local loss), the
  way gradients come back (or do not), and the **upload** and averaging;
- the same protocol as the cost model counts it: :meth:`Scheme.batch_messages`,
  :meth:`Scheme.download_messages`, :meth:`Scheme.upload_messages`,
  :meth:`Scheme.averaging` and :attr:`Scheme.chain`. The closed-form ledger
  (:func:`~flowsplit.federated.predict.predict_ledger`) and the planner's cost tables
  (:func:`flowsplit.planner.costs.build_cost_table`) are both computed from these,
  and the equality tests check that the roles send exactly what they describe.

=================  ===========  ================  ===================  ===========
scheme             tiers        gradients down    client parts         server part
=================  ===========  ================  ===================  ===========
``sfl`` v1         2 (a == c)   yes               averaged at server   one per client, averaged
``sfl`` v2         2 (a == c)   yes               averaged at server   one, shared
``hsfl``           3 (or 2)     yes (end-to-end)  within aggregators,  one, shared
                                                  then at server
``hsfl-ll``        3 (or 2)     no (local loss)   as hsfl              one, shared
=================  ===========  ================  ===================  ===========

The base class is ``hsfl``; :class:`SplitFed` overrides the download, the upload
and the server's copies (the aggregator is a relay), and
:class:`HierarchicalSplitFedLocalLoss` overrides the backward steps (auxiliary heads,
nothing travels down). In ``sfl`` the clients talk to the server directly: their
messages travel through their edge aggregator as a relay (no compute there), so they
cross both hops and are counted on both. Every round, the order in which the shared
parts serve the clients' batches is a seeded shuffle: step ``k`` serves batch ``k`` of
every client that has one, in that order, which makes runs deterministic and identical
across runners.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from flowsplit.errors import ConfigError, FlowsplitError
from flowsplit.federated.config import SCHEMES, SFLConfig
from flowsplit.federated.sampling import ParticipationError
from flowsplit.federated.system.aggregate import averaging_flops, fedavg
from flowsplit.federated.system.costs import (
    END_TO_END_CHAIN,
    LOCAL_LOSS_CHAIN,
    Chain,
    Ledger,
    RoundDelay,
    n_batches,
    round_delay,
)
from flowsplit.federated.system.parts import AuxHead, flatten_state, load_flat_state
from flowsplit.federated.system.profile import BlockProfile, PartCosts, make_aux_head, part_costs
from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    AGGREGATOR,
    AGGREGATOR_SERVER,
    CLIENT,
    CLIENT_AGGREGATOR,
    CONTROL,
    COUNT_BYTES,
    DOWN,
    DOWNLOAD,
    FLOAT_BYTES,
    GRADIENTS,
    HEADER_NBYTES,
    LABEL_BYTES,
    LABELS,
    MODEL,
    SERVER_ADDRESS,
    UP,
    UPLOAD,
    Coroutine,
    Recv,
    Send,
)
from flowsplit.federated.system.schedule import (
    BUFFER_KEY,
    calibrate_buffer,
    replay,
    rescale_compute,
    timeline,
    with_buffer,
)

log = logging.getLogger("flowsplit.federated")


# --- what a scheme's steps read and call on the roles (roles.py, server.py) -------------


class ClientRole(Protocol):
    """What the scheme's client steps use of ``roles.Client``."""

    index: int
    ctx: Any
    """The run's ``RunContext``."""
    module: Any
    """Its ``TierModule`` (part and, under local losses, head)."""


class AggregatorRole(Protocol):
    """What the scheme's aggregator steps use of ``roles.EdgeAggregator``."""

    address: tuple[str, int]
    ctx: Any
    module: Any
    opt: Any
    """The aggregator part's optimiser (set by the download when there is a part)."""
    lost: set[int]
    notified: set[int]

    def charge_train(self, client: int, n: int) -> None: ...


class ServerRole(Protocol):
    """What the scheme's server steps use of ``server.CloudServer``."""

    ctx: Any
    client_global: Any
    aggregator_global: Any
    server_module: Any
    lost: set[int]

    def train_on(
        self, i: int, x: torch.Tensor, y: torch.Tensor, module: Any, opt: Any
    ) -> float: ...

    def charge_average(self, numel: int, n_inputs: int) -> None: ...


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
    assignment: np.ndarray | None = None
    """(N,) the round's client -> aggregator assignment (set by ``runtime.plan_round``)."""
    topology: Any = None
    """The round's ``Topology`` (set by ``runtime.plan_round``; its costs charge the round)."""
    reassigned: tuple[tuple[int, int, int], ...] = ()
    """``(client, from, to)`` of every client whose aggregator changed for this round."""
    skipped: np.ndarray | None = None
    """(N,) bool: clients the server has given up on (lost before this round and not
    brought back by a reassignment); no role works with them. None: nobody."""

    @property
    def max_steps(self) -> int:
        return int(self.n_batches.max(initial=0))

    def takes_part(self, client: int) -> bool:
        """Client ``client`` is scheduled this round and not given up on."""
        skipped = self.skipped is not None and bool(self.skipped[client])
        return bool(self.participants[client]) and not skipped

    def with_network(
        self,
        assignment: np.ndarray,
        topology: Any,
        available: np.ndarray | None = None,
        reassigned: tuple[tuple[int, int, int], ...] = (),
        skipped: np.ndarray | None = None,
    ) -> RoundPlan:
        """This plan on a network: its assignment and topology, without the clients
        ``available`` rules out (they sit the round out, as dropouts do)."""
        plan = replace(
            self,
            assignment=np.asarray(assignment, dtype=np.int64),
            topology=topology,
            reassigned=tuple(reassigned),
            skipped=None if skipped is None else np.asarray(skipped, dtype=bool),
        )
        if available is None:
            return plan
        keep = self.participants & np.asarray(available, dtype=bool)
        return replace(
            plan,
            participants=keep,
            order=self.order[keep[self.order]],
            slowdown=np.where(keep, self.slowdown, 1.0),
            n_batches=np.where(keep, self.n_batches, 0),
        )


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
    lost_aggregators: list[int] = field(default_factory=list)
    """Aggregators lost so far (dist runner only)."""
    traces: np.ndarray | None = None
    """Every role's events of the round (:mod:`flowsplit.federated.system.schedule`)."""
    measured_on: str | None = None
    """Where the trace's times were measured (dist: ``loopback``, ``testbed``, ``host``);
    None: not measured (the simulation's times are not a network's)."""
    predict_on: Any = None
    """A topology to predict the timeline on instead of the round's (``--probe``'s)."""


class ServerLost(FlowsplitError):
    """A role found the server gone (the run ends; the launcher says why)."""


def min_participants(config: SFLConfig, scheduled: int) -> int:
    """The fewest clients that must take part in a round that scheduled ``scheduled``."""
    if config.min_clients is not None:
        return min(config.min_clients, scheduled)
    return scheduled // 2 + 1 if scheduled else 0


def check_participation(record: dict[str, Any], config: SFLConfig) -> None:
    """Raise :class:`ParticipationError` if round ``record`` broke the participation rules.

    Like Flower's ``min_fit_clients`` and ``accept_failures``: a round in which fewer
    than :func:`min_participants` clients took part ends the run, and so does any lost
    role under ``--no-accept-failures``. Clients that sit out by the simulated
    ``--drop-prob`` are not failures and are not scheduled.
    """
    lost = [f"client {i}" for i in record["lost"]]
    lost += [f"aggregator {j}" for j in record.get("lost_aggregators", [])]
    if lost and not config.accept_failures:
        raise ParticipationError(
            f"round {record['round']}: lost {', '.join(lost)} and --no-accept-failures "
            "is set; the run is stopped"
        )
    need = min_participants(config, record["scheduled"])
    # Clients lost only with their aggregator are moved to a live one next round
    # (reassignment): they are not counted missing in the round it was lost.
    moving = int(record.get("moving", 0))
    if record["participants"] + moving < need:
        raise ParticipationError(
            f"round {record['round']}: only {record['participants']} of "
            f"{record['scheduled']} scheduled clients took part, fewer than the minimum "
            f"of {need} (--min-clients; lost: {', '.join(lost) or 'none'}); the run is stopped "
            "(a --mode dist run continues from its last round with `flowsplit sfl run --resume "
            "OUT`, with a lower --min-clients if need be)"
        )


def _moving(outcome: RoundOutcome, assignment: np.ndarray) -> int:
    """How many of the round's lost clients were lost with their aggregator while
    another aggregator lives (so that reassignment moves them next round)."""
    dead = set(outcome.lost_aggregators)
    n_aggregators = int(assignment.max()) + 1 if len(assignment) else 0
    if not dead or len(dead) >= n_aggregators:
        return 0
    return sum(1 for i in outcome.lost if 0 <= i < len(assignment) and int(assignment[i]) in dead)


class Runtime(Protocol):
    """What the round loop needs from a runner (simulated or distributed)."""

    is_server: bool
    n_samples: np.ndarray

    def plan_round(self, plan: RoundPlan) -> RoundPlan:
        """``plan`` on the round's network and assignment (``flowsplit.federated.assignment``)."""
        ...

    def execute_round(self, plan: RoundPlan) -> RoundOutcome: ...

    def evaluate(self) -> dict[str, float]: ...


def _calibrated_buffer(history: list[dict[str, Any]]) -> float | None:
    """The stream buffer calibrated on the first measured round of ``history``, if any."""
    for record in history:
        calibration = record.get("timing", {}).get("calibration")
        if calibration is not None:
            return float(calibration[BUFFER_KEY])
    return None


def round_timing(
    outcome: RoundOutcome, topology: Any, calibrated_buffer: float | None = None
) -> dict[str, Any]:
    """A round's timeline, predicted (the replay of its events on ``topology``) and, when
    its times were measured, measured: ``predicted_round_s``, ``measured_round_s`` and
    ``timing`` (phases, compute and waits per tier, exposed transfers; each labelled).

    A measured round also calibrates the replay's one uncertain term, the streams'
    buffering (:func:`~flowsplit.federated.system.schedule.calibrate_buffer`): the first
    measured round gets ``timing.calibration`` (the buffer under which its replay takes
    its measured time), and every later one, given that buffer as ``calibrated_buffer``,
    a second prediction, ``calibrated_round_s`` and ``timing.calibrated``; the first
    (``predicted_round_s``) stays the probe's alone."""
    n_aggs = topology.n_aggregators
    trace = outcome.traces
    if outcome.predict_on is not None:
        trace = rescale_compute(trace, topology, outcome.predict_on)
        topology = outcome.predict_on
    predicted = timeline(replay(trace, topology), n_aggs)
    out: dict[str, Any] = {
        "predicted_round_s": predicted["round_s"],
        "timing": {
            "predicted": {
                "source": "predicted",
                "model": "schedule: the round's messages replayed on the cost model",
                "on": f"topology {topology.name}",
                **predicted,
            }
        },
    }
    if outcome.measured_on is not None:
        measured = timeline(outcome.traces, n_aggs)
        out["measured_round_s"] = measured["round_s"]
        out["timing"]["measured"] = {"source": "measured", "on": outcome.measured_on, **measured}
        if calibrated_buffer is None:
            buffer = calibrate_buffer(trace, topology, measured["round_s"])
            out["timing"]["calibration"] = {BUFFER_KEY: buffer}
        else:
            calibrated = timeline(replay(trace, with_buffer(topology, calibrated_buffer)), n_aggs)
            out["calibrated_round_s"] = calibrated["round_s"]
            out["timing"]["calibrated"] = {
                "source": "predicted",
                "model": "schedule, stream buffer calibrated on the first measured round "
                f"({calibrated_buffer / 1e3:.0f} kB)",
                "on": f"topology {topology.name}",
                **calibrated,
            }
    return out


# --- the protocol as the cost model counts it ------------------------------------------

PER_BATCH, PER_CLIENT, PER_AGGREGATOR = "batch", "client", "aggregator"


@dataclass(frozen=True)
class Message:
    """One message of a round's sequence, as the cost model counts it.

    A message carrying ``b`` samples puts ``nbytes + b * per_sample`` bytes on the wire
    (``nbytes`` includes the header). It is sent once per ``each``: per batch of every
    participating client, once per participating client, or once per active aggregator.
    """

    hop: str
    direction: str
    kind: str
    nbytes: float
    per_sample: float = 0.0
    each: str = PER_CLIENT


@dataclass(frozen=True)
class Averaging:
    """Values averaged per input copy at each place (charged as :func:`averaging_flops`)."""

    edge_per_client: float
    """At an aggregator, per client part it averages."""
    server_per_aggregator: float
    """At the server, per aggregator that reports."""
    server_per_client: float
    """At the server, per client whose parts it averages itself."""


def _model_message(hop: str, direction: str, numel: float, each: str) -> Message:
    return Message(hop, direction, MODEL, HEADER_NBYTES + FLOAT_BYTES * float(numel), each=each)


def _no_messages(value: Any = None) -> Coroutine:
    """A step that exchanges nothing: a coroutine that returns ``value`` at once."""
    return value
    yield  # unreachable; makes this function a generator like the steps that do exchange


# --- the schemes --------------------------------------------------------------------------


class Scheme:
    """One split federated scheme; this base class is ``hsfl`` (three tiers, end to end).

    Subclasses override the steps that differ. The role code (``roles.py``,
    ``server.py``) never asks which scheme it runs: it calls these methods.
    """

    name: ClassVar[str] = "hsfl"
    local_loss: ClassVar[bool] = False
    """Client and aggregator parts end in auxiliary heads and train on their own loss."""
    chain: ClassVar[Chain] = END_TO_END_CHAIN
    """Ledger accounts of a client's chain in the round delay (see ``costs.round_delay``)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # --- configuration ---------------------------------------------------------------

    def part_costs(self, profile: BlockProfile, a: int, c: int, **aux: Any) -> PartCosts:
        """Per-sample costs of the parts at cuts ``(a, c)`` under this scheme."""
        return part_costs(profile, a, c, local_loss=self.local_loss, **aux)

    def aux_heads(self, profile: BlockProfile, config: SFLConfig) -> tuple[AuxHead | None, ...]:
        """The (client, aggregator) auxiliary heads; none when trained end to end."""
        return None, None

    # --- the round loop ----------------------------------------------------------------

    def run(
        self,
        runtime: Runtime,
        config: SFLConfig,
        *,
        on_round: Callable[[dict[str, Any]], None] | None = None,
        start_round: int = 0,
        history: list[dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """Train for ``config.rounds`` rounds; the server returns one record per round.

        A resumed run starts at ``start_round`` (0-based); the server passes the records
        of the rounds before it as ``history`` (and has loaded their state).
        """
        history = list(history or [])
        clock = history[-1]["clock_s"] if history else 0.0
        for r in range(start_round, config.rounds):
            # The round's network and assignment (the runtime asks its AssignmentPolicy).
            plan = runtime.plan_round(make_round_plan(config, r, runtime.n_samples))
            outcome = runtime.execute_round(plan)
            if not runtime.is_server:
                continue
            record = self.summarise(
                plan, outcome, runtime.evaluate(), runtime, clock, _calibrated_buffer(history)
            )
            clock = record["clock_s"]
            history.append(record)
            if on_round is not None:
                on_round(record)
            check_participation(record, config)
        return history

    def round_delay(self, ledger: Ledger, assignment: np.ndarray) -> RoundDelay:
        """The delay of a round whose costs are ``ledger``."""
        return round_delay(ledger, assignment, chain=self.chain)

    def summarise(
        self,
        plan: RoundPlan,
        outcome: RoundOutcome,
        scores: dict[str, float],
        runtime: Any,
        clock: float,
        calibrated_buffer: float | None = None,
    ) -> dict[str, Any]:
        """One round's record: scores, delay, faults and bytes (and, for a traced round,
        its timeline: :func:`round_timing`, with ``calibrated_buffer``)."""
        delay = self.round_delay(outcome.ledger, plan.assignment)
        led = outcome.ledger
        record: dict[str, Any] = {
            "round": plan.round + 1,
            **scores,
            "train_loss": outcome.train_loss,
            "delay_s": delay.total,
            "delay": delay.to_dict(),
            "clock_s": clock + delay.total,
            # Who really took part: scheduled and not lost (a lost client trained nothing
            # that reached the global model, or only part of its shard).
            "participants": int(plan.participants.sum())
            - len(set(outcome.lost) & set(np.flatnonzero(plan.participants).tolist())),
            "scheduled": int(plan.participants.sum()),
            "dropped": int((~plan.participants).sum()),
            "stragglers": int((plan.slowdown > 1).sum()),
            "lost": outcome.lost,
            "lost_aggregators": outcome.lost_aggregators,
            # Lost clients whose aggregator was lost: reassignment moves them next round.
            "moving": _moving(outcome, plan.assignment),
            # Clients moved to another aggregator for this round: [client, from, to].
            "reassigned": [list(m) for m in plan.reassigned],
            "bytes_total": led.bytes_total,
            "messages_total": int(round(led.messages.sum())),
            "bytes": led.bytes_breakdown(),
            "wall_s": outcome.wall_s,
        }
        if outcome.received_bytes is not None:
            record["bytes_received_total"] = outcome.received_bytes
        if outcome.traces is not None and len(outcome.traces):
            record.update(round_timing(outcome, plan.topology, calibrated_buffer))
            if "calibration" in record["timing"]:
                record["timing"]["calibration"]["round"] = record["round"]
        return record

    # --- the messages, as the cost model counts them --------------------------------

    def batch_messages(self, costs: PartCosts) -> tuple[Message, ...]:
        """Messages per client batch: forward up both hops, then what comes back."""
        alpha, gamma = (float(v) for v in costs.act_bytes)
        return (
            Message(CLIENT_AGGREGATOR, UP, ACTIVATIONS, HEADER_NBYTES, alpha, PER_BATCH),
            Message(CLIENT_AGGREGATOR, UP, LABELS, HEADER_NBYTES, LABEL_BYTES, PER_BATCH),
            *self.gradient_messages(CLIENT_AGGREGATOR, alpha),
            Message(AGGREGATOR_SERVER, UP, ACTIVATIONS, HEADER_NBYTES, gamma, PER_BATCH),
            Message(AGGREGATOR_SERVER, UP, LABELS, HEADER_NBYTES, LABEL_BYTES, PER_BATCH),
            *self.gradient_messages(AGGREGATOR_SERVER, gamma),
        )

    def gradient_messages(self, hop: str, act_bytes: float) -> tuple[Message, ...]:
        """Per batch on ``hop``: the activation gradients sent back down."""
        return (Message(hop, DOWN, GRADIENTS, HEADER_NBYTES, act_bytes, PER_BATCH),)

    def download_messages(self, costs: PartCosts) -> tuple[Message, ...]:
        """The download: one client part (and aggregator part) per aggregator, then to clients."""
        pc, pg, _ = costs.state_numel
        out = [_model_message(AGGREGATOR_SERVER, DOWN, pc, PER_AGGREGATOR)]
        if costs.three_tier:
            out.append(_model_message(AGGREGATOR_SERVER, DOWN, pg, PER_AGGREGATOR))
        out.append(_model_message(CLIENT_AGGREGATOR, DOWN, pc, PER_CLIENT))
        return tuple(out)

    def upload_messages(self, costs: PartCosts) -> tuple[Message, ...]:
        """The upload: every client's part and count; each aggregator's averages and total."""
        pc, pg, _ = costs.state_numel
        count = HEADER_NBYTES + COUNT_BYTES
        out = [
            _model_message(CLIENT_AGGREGATOR, UP, pc, PER_CLIENT),
            Message(CLIENT_AGGREGATOR, UP, CONTROL, count, each=PER_CLIENT),
            _model_message(AGGREGATOR_SERVER, UP, pc, PER_AGGREGATOR),
        ]
        if costs.three_tier:
            out.append(_model_message(AGGREGATOR_SERVER, UP, pg, PER_AGGREGATOR))
        out.append(Message(AGGREGATOR_SERVER, UP, CONTROL, count, each=PER_AGGREGATOR))
        return tuple(out)

    def averaging(self, costs: PartCosts) -> Averaging:
        """Aggregators average client parts; the server averages their reports."""
        pc, pg, _ = (float(v) for v in costs.state_numel)
        return Averaging(pc, pc + (pg if costs.three_tier else 0.0), 0.0)

    # --- client steps --------------------------------------------------------------------

    def client_backward(self, client: ClientRole, act: torch.Tensor, y: torch.Tensor) -> Coroutine:
        """Backward through the client part; returns False when the client is cut off."""
        grad = yield Recv(client.ctx.aggregator_of(client.index), GRADIENTS)
        if grad is None:
            return False
        act.backward(grad)
        return True

    # --- aggregator steps ----------------------------------------------------------------

    def aggregator_download(self, agg: AggregatorRole, view: list[int]) -> Coroutine:
        """Receive the global parts once and send the client part to every client.

        Returns the client part (reported back unchanged if every client is lost).
        """
        cstate = yield Recv(SERVER_ADDRESS, MODEL)
        if cstate is None:  # the server ended (killed, or the run stopped) as it sent
            raise ServerLost("the server was lost while sending the round's model")
        if agg.ctx.costs.three_tier:
            astate = yield Recv(SERVER_ADDRESS, MODEL)
            if astate is None:
                raise ServerLost("the server was lost while sending the round's model")
            load_flat_state(agg.module, astate)
            agg.opt = agg.ctx.make_optimizer(agg.module)
        for i in view:
            if i not in agg.lost:
                yield Send((CLIENT, i), cstate, MODEL, i, DOWNLOAD)
        return cstate

    def aggregator_step(
        self, agg: AggregatorRole, i: int, x: torch.Tensor, y: torch.Tensor
    ) -> Coroutine:
        """One batch of client ``i``: train the aggregator part, or relay when it is empty."""
        if agg.ctx.costs.three_tier:
            yield from self.aggregator_train(agg, i, x, y)
        else:
            yield from self.relay(agg, i, x, y)

    def relay(self, agg: AggregatorRole, i: int, x: torch.Tensor, y: torch.Tensor) -> Coroutine:
        """Forward a client's batch to the server unchanged, and what comes back down."""
        yield Send(SERVER_ADDRESS, x, ACTIVATIONS, i)
        yield Send(SERVER_ADDRESS, y, LABELS, i)
        yield from self.relay_gradients(i)

    def relay_gradients(self, i: int) -> Coroutine:
        """Pass the server's activation gradients on to client ``i``."""
        grad = yield Recv(SERVER_ADDRESS, GRADIENTS)
        if grad is not None:
            yield Send((CLIENT, i), grad, GRADIENTS, i)

    def aggregator_train(
        self, agg: AggregatorRole, i: int, x: torch.Tensor, y: torch.Tensor
    ) -> Coroutine:
        """End to end: forward, wait for the server's gradients, backward, pass them down."""
        h = yield from _aggregator_forward(agg, i, x, y, input_grad=True)
        grad = yield Recv(SERVER_ADDRESS, GRADIENTS)
        if grad is None:
            return
        h.backward(grad)
        agg.opt.step()
        agg.charge_train(i, len(y))
        yield Send((CLIENT, i), x.grad, GRADIENTS, i)

    def aggregator_upload(
        self, agg: AggregatorRole, view: list[int], cstate: torch.Tensor | None
    ) -> Coroutine:
        """Average the clients' parts (FedAvg by sample count) and report them up."""
        states, counts = [], []
        for i in view:
            state, count = yield from receive_pair(agg.lost, i, MODEL, CONTROL)
            if count is None:
                continue
            states.append(state)
            counts.append(int(count.item()))
        if states and sum(counts) > 0:
            avg = fedavg(states, counts)
            agg.ctx.meter.charge_compute(
                agg.address, averaging_flops(avg.numel(), len(states)), -1, UPLOAD
            )
        else:  # every client lost: report the unchanged part with weight 0
            avg, counts = cstate, [0]
        yield Send(SERVER_ADDRESS, avg, MODEL, -1, UPLOAD)
        if agg.ctx.costs.three_tier:
            yield Send(SERVER_ADDRESS, flatten_state(agg.module), MODEL, -1, UPLOAD)
        yield Send(SERVER_ADDRESS, agg.ctx.count_tensor(sum(counts)), CONTROL, -1, UPLOAD)

    # --- server steps --------------------------------------------------------------------

    def server_download(self, server: ServerRole, view: list[int], aggs: list[int]) -> Coroutine:
        """Send the global client part (and aggregator part) to every aggregator in use."""
        cstate = flatten_state(server.client_global)
        astate = flatten_state(server.aggregator_global)
        for j in aggs:
            yield Send((AGGREGATOR, j), cstate, MODEL, -1, DOWNLOAD)
            if server.ctx.costs.three_tier:
                yield Send((AGGREGATOR, j), astate, MODEL, -1, DOWNLOAD)

    def server_parts(self, server: ServerRole, view: list[int]) -> dict[int, tuple[Any, Any]]:
        """Per-client (server part, optimiser) copies; none: every client shares one."""
        return {}

    def server_step(
        self, server: ServerRole, i: int, x: torch.Tensor, y: torch.Tensor, module, opt
    ) -> Coroutine:
        """Train the server part on client ``i``'s batch and send the gradients down."""
        x.requires_grad_(True)
        loss = server.train_on(i, x, y, module, opt)
        yield Send(server.ctx.aggregator_of(i), x.grad, GRADIENTS, i)
        return loss

    def server_collect(self, server: ServerRole, view: list[int], aggs: list[int]) -> Coroutine:
        """Average the aggregators' reports into the global parts (weights: sample totals)."""
        cs, as_, ns = [], [], []
        three = server.ctx.costs.three_tier
        for j in aggs:
            c = yield Recv((AGGREGATOR, j), MODEL)
            a = (yield Recv((AGGREGATOR, j), MODEL)) if three and c is not None else None
            n = None
            if c is not None and (a is not None or not three):
                n = yield Recv((AGGREGATOR, j), CONTROL)
            if n is not None and int(n.item()) > 0:
                cs.append(c)
                as_.append(a)
                ns.append(int(n.item()))
        if not ns:
            return
        load_flat_state(server.client_global, fedavg(cs, ns))
        numel = cs[0].numel()
        if three:
            load_flat_state(server.aggregator_global, fedavg(as_, ns))
            numel += as_[0].numel()
        server.charge_average(numel, len(ns))


class HierarchicalSplitFed(Scheme):
    """Three tiers with end-to-end backpropagation client -> aggregator -> server and back."""

    name = "hsfl"


class SplitFed(Scheme):
    """SplitFed (Thapa et al., 2022): two tiers, clients talk to the server via a relay.

    ``version`` ``v1`` keeps one server part per client and averages them each round;
    ``v2`` keeps one shared server part. The aggregator part is empty (one cut), so the
    base class's :meth:`~Scheme.aggregator_step` relays each batch.
    """

    name = "sfl"

    def __init__(self, version: str = "v1"):
        self.version = version

    def __repr__(self) -> str:
        return f"SplitFed(version={self.version!r})"

    def download_messages(self, costs: PartCosts) -> tuple[Message, ...]:
        """The server sends one client part per client, relayed by its aggregator."""
        pc = costs.state_numel[0]
        return (
            _model_message(AGGREGATOR_SERVER, DOWN, pc, PER_CLIENT),
            _model_message(CLIENT_AGGREGATOR, DOWN, pc, PER_CLIENT),
        )

    def upload_messages(self, costs: PartCosts) -> tuple[Message, ...]:
        """Every client's part and count, relayed to the server."""
        pc = costs.state_numel[0]
        count = HEADER_NBYTES + COUNT_BYTES
        return (
            _model_message(CLIENT_AGGREGATOR, UP, pc, PER_CLIENT),
            Message(CLIENT_AGGREGATOR, UP, CONTROL, count, each=PER_CLIENT),
            _model_message(AGGREGATOR_SERVER, UP, pc, PER_CLIENT),
            Message(AGGREGATOR_SERVER, UP, CONTROL, count, each=PER_CLIENT),
        )

    def averaging(self, costs: PartCosts) -> Averaging:
        """The server averages every client part, and under v1 every server-part copy."""
        pc, _, ps = (float(v) for v in costs.state_numel)
        return Averaging(0.0, 0.0, pc + (ps if self.version == "v1" else 0.0))

    def aggregator_download(self, agg: AggregatorRole, view: list[int]) -> Coroutine:
        """Relay each client's copy of the client part."""
        for i in view:
            state = yield Recv(SERVER_ADDRESS, MODEL)
            if i not in agg.lost:
                yield Send((CLIENT, i), state, MODEL, i, DOWNLOAD)
        return None

    def aggregator_upload(
        self, agg: AggregatorRole, view: list[int], cstate: torch.Tensor | None
    ) -> Coroutine:
        """Relay each client's part and count (or a dropped-client notice)."""
        for i in view:
            if i in agg.notified:
                continue
            state, count = yield from receive_pair(agg.lost, i, MODEL, CONTROL)
            if i in agg.lost:
                yield Send(SERVER_ADDRESS, None, CONTROL, i, UPLOAD)
                agg.notified.add(i)
                continue
            yield Send(SERVER_ADDRESS, state, MODEL, i, UPLOAD)
            yield Send(SERVER_ADDRESS, count, CONTROL, i, UPLOAD)

    def server_download(self, server: ServerRole, view: list[int], aggs: list[int]) -> Coroutine:
        """One copy of the global client part per client."""
        cstate = flatten_state(server.client_global)
        for i in view:
            yield Send(server.ctx.aggregator_of(i), cstate, MODEL, i, DOWNLOAD)

    def server_parts(self, server: ServerRole, view: list[int]) -> dict[int, tuple[Any, Any]]:
        """v1: a fresh copy of the server part (and its optimiser) per client."""
        if self.version != "v1":
            return {}
        copies = {}
        for i in view:
            module = copy.deepcopy(server.server_module)
            copies[i] = (module, server.ctx.make_optimizer(module))
        return copies

    def server_collect(self, server: ServerRole, view: list[int], aggs: list[int]) -> Coroutine:
        """Average the clients' parts, relayed one by one."""
        cs, ns = [], []
        for i in view:
            if i in server.lost:
                continue
            agg = server.ctx.aggregator_of(i)
            state = yield Recv(agg, MODEL)
            count = (yield Recv(agg, CONTROL)) if state is not None else None
            if count is None:
                server.lost.add(i)
                continue
            cs.append(state)
            ns.append(int(count.item()))
        if ns and sum(ns) > 0:
            load_flat_state(server.client_global, fedavg(cs, ns))
            server.charge_average(cs[0].numel(), len(cs))


class HierarchicalSplitFedLocalLoss(Scheme):
    """Three tiers, each trained on its own (auxiliary-head) loss; nothing travels down."""

    name = "hsfl-ll"
    local_loss = True
    chain = LOCAL_LOSS_CHAIN

    def aux_heads(self, profile: BlockProfile, config: SFLConfig) -> tuple[AuxHead | None, ...]:
        """A head on the client part, and on the aggregator part when it has blocks."""
        a, c = config.cuts
        kw = {"mode": config.aux_head, "max_features": config.aux_max_features}
        # Heads are initialised from their own seed so that every process agrees.
        torch.manual_seed(config.seed + 1)
        aux_c = make_aux_head(profile, a, **kw)
        aux_g = make_aux_head(profile, c, **kw) if c > a else None
        return aux_c, aux_g

    def gradient_messages(self, hop: str, act_bytes: float) -> tuple[Message, ...]:
        return ()

    def client_backward(self, client: ClientRole, act: torch.Tensor, y: torch.Tensor) -> Coroutine:
        """Backward from the client's own head."""
        F.cross_entropy(client.module.aux(act), y).backward()
        return _no_messages(True)

    def relay_gradients(self, i: int) -> Coroutine:
        return _no_messages()

    def aggregator_train(
        self, agg: AggregatorRole, i: int, x: torch.Tensor, y: torch.Tensor
    ) -> Coroutine:
        """Forward up, then backward from the aggregator's own head."""
        h = yield from _aggregator_forward(agg, i, x, y, input_grad=False)
        F.cross_entropy(agg.module.aux(h), y).backward()
        agg.opt.step()
        agg.charge_train(i, len(y))

    def server_step(
        self, server: ServerRole, i: int, x: torch.Tensor, y: torch.Tensor, module, opt
    ) -> Coroutine:
        """Train the server part; nothing goes back down."""
        x.requires_grad_(False)
        return _no_messages(server.train_on(i, x, y, module, opt))


def receive_pair(lost: set[int], i: int, first: str, second: str) -> Coroutine:
    """Client ``i``'s next two messages (kinds ``first`` then ``second``), or None in
    place of those that did not come: then ``i`` is added to ``lost`` (a client in
    ``lost`` is not waited for)."""
    a = b = None
    if i not in lost:
        a = yield Recv((CLIENT, i), first, droppable=True)
        if a is not None:
            b = yield Recv((CLIENT, i), second, droppable=True)
        if b is None:
            lost.add(i)
    return a, b


def _aggregator_forward(
    agg: AggregatorRole, i: int, x: torch.Tensor, y: torch.Tensor, *, input_grad: bool
) -> Coroutine:
    """The aggregator's part on client ``i``'s activations, sent up with the labels (the
    optimiser's gradients cleared for the backward that follows); returns the output.
    ``input_grad``: keep the gradient of ``x`` to pass down to the client."""
    x.requires_grad_(input_grad)
    h = agg.module.part(x)  # (B, *cut-c shape)
    yield Send(SERVER_ADDRESS, h.detach(), ACTIVATIONS, i)
    yield Send(SERVER_ADDRESS, y, LABELS, i)
    agg.opt.zero_grad(set_to_none=True)
    return h


SCHEME_CLASSES: dict[str, type[Scheme]] = {
    cls.name: cls for cls in (SplitFed, HierarchicalSplitFed, HierarchicalSplitFedLocalLoss)
}
"""Every scheme by its ``--scheme`` name (the names ``SFLConfig`` accepts, ``SCHEMES``)."""


def get_scheme(name: str, *, sfl_version: str = "v1") -> Scheme:
    """The scheme called ``name`` (``sfl_version`` matters to ``sfl`` only)."""
    if name not in SCHEME_CLASSES:
        raise ConfigError(f"--scheme {name!r}: choose one of {', '.join(SCHEMES)}")
    return SplitFed(sfl_version) if name == "sfl" else SCHEME_CLASSES[name]()


def scheme_of(config: SFLConfig) -> Scheme:
    """The scheme ``config`` runs."""
    return get_scheme(config.scheme, sfl_version=config.sfl_version)


@contextmanager
def round_log(
    rounds: int, *, quiet: bool, leave: bool = True
) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A progress bar over ``rounds`` and each round's tree on stderr; yields ``on_round``.

    ``quiet`` shows neither. ``leave=False`` clears the bar when the rounds are done.
    """
    from flowsplit.terminal import on_terminal

    # The bar only on a terminal; a redirected log gets the rounds' trees alone.
    bar_off = quiet or not on_terminal()
    with tqdm(total=rounds, desc="rounds", unit="round", disable=bar_off, leave=leave) as bar:

        def on_round(record: dict[str, Any]) -> None:
            bar.update(1)
            if not quiet:
                bar.write(format_round(record, rounds), file=sys.stderr)

        yield on_round


def _delays(record: dict[str, Any]) -> str:
    """A round's delays, each labelled predicted or measured (and on what)."""
    text = f"predicted delay {record['delay_s']:.2f} s ({record['delay']['bottleneck']}-bound)"
    if "predicted_round_s" in record:
        text += f", {record['predicted_round_s']:.2f} s (schedule)"
    if "measured_round_s" in record:
        on = record["timing"]["measured"]["on"]
        text += f", measured {record['measured_round_s']:.2f} s on {on}"
    return text


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
        f"{_delays(record)}\n"
        f"  ├─ clients {record['participants']} ({faults})\n"
        f"  ├─ client-aggregator {hop('client-aggregator')}\n"
        f"  └─ aggregator-server {hop('aggregator-server')}"
    )
