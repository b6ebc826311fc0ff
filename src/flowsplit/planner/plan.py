"""The accuracy-aware split and assignment planner, and the plans it is compared with.

:func:`plan_split` chooses cut points ``(a, c)`` and a client -> aggregator
assignment. By default (``mode="guard"``) it is *accuracy first*: among the cut pairs
whose predicted accuracy is within ``acc_tolerance`` of the best predicted
(:func:`accuracy_guard`), it takes the one with the least delay/bytes objective
``w_delay * delay / delay_ref + w_bytes * bytes / bytes_ref``. When the pilots do not
separate the cut pairs beyond their noise, the guard says so and keeps the pairs
with the shallowest client part (the least of the model averaged across clients)
instead. ``mode="weighted"`` minimises the weighted sum of
:mod:`flowsplit.planner.objective` with the predicted loss instead. In both:

1. every legal cut pair whose client part fits every client's memory (and, with
   ``three_tier``, that has an aggregator part: ``a < c``) is a candidate;
2. the cost terms of every candidate come from the engine's cost model
   (:mod:`flowsplit.planner.costs`);
3. a lower bound of each candidate's objective (every client on its best link, queues
   spread over all aggregators by speed) orders them; on large instances candidates
   whose bound cannot beat the best plan found so far are skipped;
4. the greedy assigns clients for the remaining candidates (all in one pass), the
   ``refine_top`` best are improved by local search, and the best plan wins.

:func:`plan_fixed` evaluates the baselines' plans (fixed cuts, a rule assignment).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flowsplit.config_args import fields_of
from flowsplit.errors import ConfigError
from flowsplit.federated.schemes import Scheme, get_scheme
from flowsplit.federated.system.profile import BlockProfile, client_memory_bytes
from flowsplit.federated.system.topology import Topology, assign_clients
from flowsplit.planner.assign import check_capacity, client_work, greedy_assign
from flowsplit.planner.costs import (
    AGG,
    BB,
    DOWN,
    UP,
    CostTable,
    build_cost_table,
    chain_term,
    evaluate_assignment,
)
from flowsplit.planner.objective import REFERENCES, Objective, Weights
from flowsplit.planner.search import AssignmentProblem, close_aggregators, improve_assignment

FAMILIES = ("hsfl", "hsfl-ll")
MODES = ("guard", "weighted")
SMALL_INSTANCE = 200
"""N * A up to which the local search adds restarts and aggregator closing (cheap there,
and where one aggregator's fixed costs weigh most)."""


@dataclass(frozen=True)
class PlannerConfig:
    """Options of the planner (the decision itself comes from the data)."""

    weights: Weights = field(default_factory=Weights)
    """Objective weights (loss, delay, bytes)."""
    family: str = "hsfl"
    """Scheme the planned cuts are trained with: ``hsfl`` (end to end) or ``hsfl-ll``."""
    reference: str = "hsfl"
    """Delay and bytes references: ``hsfl`` (fixed cuts, round-robin) or ``median``."""
    fixed_cuts: tuple[int, int] = (1, 2)
    """Cuts of the HSFL baseline (and of the ``hsfl`` reference, with the round-robin
    assignment: deterministic, never a random draw)."""
    batch_size: int = 32
    """Client batch size (sets the number of messages per round)."""
    local_epochs: int = 1
    """Local epochs per round."""
    capacity: tuple[int, ...] | None = None
    """Most clients per aggregator, one value per aggregator (None: unlimited)."""
    check_memory: bool = True
    """Skip cut pairs whose client part does not fit some client's memory."""
    refine_top: int = 2
    """Local search improves the greedy plans of this many best cut pairs."""
    local_search_iters: int = 50
    """Most improving moves or swaps per refined cut pair."""
    chunk: int | None = None
    """Clients per greedy step (default A // 4; 1 is the plain sequential greedy)."""
    prune: bool | None = None
    """Skip cut pairs by lower bound (default: when N * A >= 100,000)."""
    restarts: int = 4
    """Extra local searches from seeded random assignments on small instances
    (N * A <= SMALL_INSTANCE, no capacities), to step out of a poor local optimum."""
    seed: int = 0
    """Seed of the local search's random restarts."""
    mode: str = "guard"
    """``guard``: least delay/bytes objective among the pairs within ``acc_tolerance``
    of the best predicted accuracy; ``weighted``: the weighted sum with the loss."""
    acc_tolerance: float = 0.01
    """Accuracy guard: predicted accuracy within this of the best (0.01 = 1 point)."""
    three_tier: bool = False
    """Only pairs with an aggregator part (``a < c``); ``a == c`` plans are two-tier."""
    only_cuts: tuple[tuple[int, int], ...] | None = None
    """Only these cut pairs (None: every legal pair); e.g. to plan the assignment of
    one fixed pair with the planner's own objective."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"--family {self.family!r}: choose hsfl or hsfl-ll")
        if self.mode not in MODES:
            raise ConfigError(f"--objective {self.mode!r}: choose {' or '.join(MODES)}")
        if not (0.0 <= self.acc_tolerance <= 1.0):
            raise ConfigError(
                f"--acc-tolerance {self.acc_tolerance}: give an accuracy difference in [0, 1] "
                "(0.01 = 1 point)"
            )
        if self.reference not in REFERENCES:
            raise ConfigError(f"--reference {self.reference!r}: choose hsfl or median")
        if self.batch_size < 1 or self.local_epochs < 1 or self.refine_top < 0:
            raise ConfigError("batch size and local epochs must be >= 1, refine-top >= 0")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["weights"] = self.weights.to_dict()
        d["fixed_cuts"] = list(self.fixed_cuts)
        return d


@dataclass
class Plan:
    """Cuts, an assignment and what the cost model and the surrogate predict for them."""

    scheme: str
    cuts: tuple[int, int]
    assignment: np.ndarray
    predicted_loss: float
    delay_s: float
    """Predicted round delay (s)."""
    bytes: float
    """Predicted bytes per round."""
    objective: float
    planning_s: float = 0.0
    objective_def: Objective | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)
    """One row per legal cut pair: loss, accuracy, delay, bytes, objective, status."""
    info: dict[str, Any] = field(default_factory=dict)
    predicted_accuracy: float = float("nan")
    """The surrogate's validation accuracy at the run's budget (NaN: no prediction)."""

    @property
    def tiers(self) -> int:
        """3 with an aggregator part (``a < c``), 2 without (``a == c``; sfl)."""
        return 3 if self.cuts[0] < self.cuts[1] else 2

    def to_dict(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "cuts": list(self.cuts),
            "tiers": self.tiers,
            "predicted": {
                "bytes_per_round": self.bytes,
                "delay_s_per_round": self.delay_s,
                # What the delay is: the cost model's, not a measurement.
                "delay_basis": "predicted: cost-model bound (closed form) on the plan's "
                "topology; sfl run --mode dist measures it",
                "accuracy": _num(self.predicted_accuracy),
                "loss": _num(self.predicted_loss),
            },
            "predicted_loss": _num(self.predicted_loss),
            "predicted_accuracy": _num(self.predicted_accuracy),
            "delay_s": self.delay_s,
            "bytes": self.bytes,
            "objective": _num(self.objective),
            "planning_s": self.planning_s,
            "objective_def": self.objective_def.to_dict() if self.objective_def else None,
            "assignment": [int(a) for a in self.assignment],
            "clients_per_aggregator": np.bincount(
                self.assignment, minlength=int(self.info.get("n_aggregators", 0))
            ).tolist(),
            "candidates": self.candidates,
            **self.info,
        }


def _num(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def legal_part_costs(profile: BlockProfile, scheme: Scheme):
    """(cuts, part costs) of every legal pair under ``scheme``."""
    cuts = profile.legal_cuts()
    return cuts, [scheme.part_costs(profile, a, c) for a, c in cuts]


def memory_ok(costs, topology: Topology, batch_size: int) -> bool:
    """Every client with data can hold the client part (weights, optimiser, activations)."""
    need = client_memory_bytes(costs, batch_size)
    part = topology.client_samples > 0
    return bool(np.all(topology.client_memory[part] >= need))


def make_objective(
    profile: BlockProfile, topology: Topology, config: PlannerConfig, table: CostTable, cuts
) -> Objective:
    """The objective with references chosen as ``config.reference`` says."""
    # Round-robin, not a random draw: the trade-off must not move with a seed.
    assign = assign_clients(topology, "round-robin", config.seed)
    if config.reference == "hsfl":
        if tuple(config.fixed_cuts) not in cuts:
            raise ConfigError(f"fixed cuts {config.fixed_cuts} are not legal for this model")
        pair = cuts.index(tuple(config.fixed_cuts))
        delay, nbytes = evaluate_assignment(table, pair, assign)
        text = f"HSFL at cuts {tuple(config.fixed_cuts)} with the round-robin assignment"
    else:
        vals = np.array([evaluate_assignment(table, p, assign) for p in range(table.n_pairs)])
        delay, nbytes = (float(v) for v in np.median(vals, axis=0))
        text = "median over every legal cut pair, each with the round-robin assignment"
    weights = config.weights
    if config.mode == "guard":
        if weights.delay == 0 and weights.bytes == 0:
            raise ConfigError(
                "the accuracy guard chooses by delay and bytes: give a delay or bytes weight "
                "> 0 (e.g. --weights 1,1,1), or --objective weighted"
            )
        weights = Weights(0.0, weights.delay, weights.bytes)
    return Objective(weights, delay, nbytes, config.reference, text)


def accuracy_guard(
    cuts: list[tuple[int, int]],
    accuracy: np.ndarray,
    feasible: np.ndarray,
    tolerance: float,
    separated: bool = True,
) -> tuple[np.ndarray, dict[str, Any]]:
    """(eligible mask, what was decided) of the accuracy guard over ``feasible`` pairs.

    - no prediction (NaN accuracy): every feasible pair, said so;
    - ``separated`` False (the pilots do not tell the cuts apart beyond their noise):
      the feasible pairs with the smallest client part (fallback rule, said so);
    - otherwise the feasible pairs whose predicted accuracy is within ``tolerance`` of
      the best feasible prediction.
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    a = np.array([c[0] for c in cuts])
    info: dict[str, Any] = {"tolerance": float(tolerance), "fallback": False}
    if not np.all(np.isfinite(acc[feasible])):
        eligible = feasible.copy()
        info["rule"] = (
            "no accuracy prediction (no pilots): the least delay/bytes objective over every "
            "feasible pair"
        )
        info["best_predicted_accuracy"] = None
    elif not separated:
        eligible = feasible & (a == a[feasible].min())
        info["fallback"] = True
        info["rule"] = (
            "the pilots do not separate the cut pairs beyond their noise, so accuracy "
            "cannot choose: fallback rule, the pairs with the shallowest client part "
            f"(a = {int(a[feasible].min())}: the least of the model averaged across "
            "clients), least delay/bytes objective among them"
        )
        info["best_predicted_accuracy"] = float(acc[feasible].max())
    else:
        best = float(acc[feasible].max())
        eligible = feasible & (acc >= best - tolerance - 1e-12)
        info["rule"] = (
            f"the least delay/bytes objective among the pairs whose predicted accuracy is "
            f"within {100 * tolerance:g} pt of the best predicted ({100 * best:.2f} %)"
        )
        info["best_predicted_accuracy"] = best
    info["eligible"] = [list(c) for c, e in zip(cuts, eligible, strict=True) if e]
    return eligible, info


def lower_bounds(table: CostTable) -> tuple[np.ndarray, np.ndarray]:
    """(P,) lower bounds of each pair's round delay and bytes over all assignments."""
    pairs = np.arange(table.n_pairs)
    lat = np.where(table.linked, table.latency, np.inf).min(axis=1)
    inv = np.where(table.linked, table.inv_bandwidth, np.inf).min(axis=1)
    best = np.column_stack([lat, inv, np.broadcast_to(table.agg_basis.min(axis=1), (len(lat), 4))])
    coef = table.coef.reshape(table.n_clients, -1, best.shape[1])
    f = np.matmul(coef, best[:, :, None]).reshape(table.n_clients, table.n_pairs, -1)
    part = table.coef[:, 0, -1, -1] > 0  # count feature: takes part
    chain = chain_term(f, axis=2).max(axis=0, initial=0.0)
    # Queues: sum_j speed_j * load_j = total work, so the busiest load >= work / total speed.
    agg_work = table.coef[:, :, AGG, 2].sum(axis=0)
    bb_work = table.coef[:, :, BB, 4].sum(axis=0)
    agg_lb = agg_work / (1.0 / table.agg_basis[0]).sum()
    bb_lb = bb_work / (1.0 / table.agg_basis[2]).sum()
    train = np.maximum.reduce([chain, agg_lb, bb_lb, table.server_load])
    any_part = bool(part.any())
    down = f[part][:, :, DOWN].max(axis=0, initial=0.0) if any_part else np.zeros(len(pairs))
    up = f[part][:, :, UP].max(axis=0, initial=0.0) if any_part else np.zeros(len(pairs))
    d_lb = down + (table.d_fix + table.d_lin).min(axis=1) * any_part
    u_lb = up + (table.u_fix + table.u_lin).min(axis=1) * any_part
    n_act = float(any_part)
    delay = d_lb + train + u_lb + table.server_avg_fix + n_act * table.server_avg_per_agg
    nbytes = table.bytes_fix + n_act * table.bytes_per_agg
    return delay, nbytes


def plan_split(
    profile: BlockProfile,
    topology: Topology,
    predicted_loss: dict[tuple[int, int], float] | None = None,
    config: PlannerConfig | None = None,
    *,
    objective: Objective | None = None,
    predicted_accuracy: dict[tuple[int, int], float] | None = None,
    separated: bool = True,
) -> Plan:
    """The best cuts and assignment for ``topology`` (shard sizes filled in).

    ``predicted_accuracy`` maps cut pairs to the surrogate's accuracy (the guard's
    input; ``separated`` False when the pilots do not tell the pairs apart, see
    :func:`accuracy_guard`); ``predicted_loss`` maps them to its loss (needed in
    ``weighted`` mode when the loss weight is not 0); ``objective`` overrides the
    references of ``config``.
    """
    config = config or PlannerConfig()
    t0 = time.perf_counter()
    scheme = get_scheme(config.family)
    cuts, pcs = legal_part_costs(profile, scheme)
    table = build_cost_table(
        pcs, topology, scheme, batch_size=config.batch_size, local_epochs=config.local_epochs
    )
    cap = check_capacity(table, None if config.capacity is None else np.array(config.capacity))
    obj = objective or make_objective(profile, topology, config, table, cuts)
    loss = np.array(
        [np.nan if predicted_loss is None else predicted_loss.get(c, np.nan) for c in cuts]
    )
    acc = np.array(
        [np.nan if predicted_accuracy is None else predicted_accuracy.get(c, np.nan) for c in cuts]
    )
    if obj.weights.loss > 0 and not np.all(np.isfinite(loss)):
        raise ConfigError("the loss weight is > 0 but some cut pairs have no predicted loss")
    eligible, status, guard = _eligible_pairs(cuts, pcs, topology, config, acc, separated)
    lb_delay, lb_bytes = lower_bounds(table)
    lb_obj = obj.value(np.nan_to_num(loss), lb_delay, lb_bytes)
    assign, delay, nbytes, value = _search(table, cap, obj, config, loss, lb_obj, eligible, status)
    best = int(np.argmin(value))
    candidates = [
        {
            "cuts": list(c),
            "predicted_loss": _num(loss[p]),
            "predicted_accuracy": _num(acc[p]),
            "delay_s": _num(delay[p]),
            "bytes": _num(nbytes[p]),
            "objective": _num(value[p]),
            "lower_bound": _num(lb_obj[p]),
            "status": str(status[p]),
            "eligible": bool(eligible[p]),
            "chosen": p == best,
        }
        for p, c in enumerate(cuts)
    ]
    info = {
        "n_clients": table.n_clients,
        "n_aggregators": table.n_aggregators,
        **fields_of(config, ("mode", "three_tier")),
    }
    if guard is not None:
        info["guard"] = guard
    return Plan(
        scheme=config.family,
        cuts=cuts[best],
        assignment=assign[best].copy(),
        predicted_loss=float(loss[best]),
        delay_s=float(delay[best]),
        bytes=float(nbytes[best]),
        objective=float(value[best]),
        planning_s=time.perf_counter() - t0,
        objective_def=obj,
        candidates=candidates,
        info=info,
        predicted_accuracy=float(acc[best]),
    )


def _eligible_pairs(cuts, pcs, topology: Topology, config: PlannerConfig, acc, separated: bool):
    """Which cut pairs the search may take (their client part fits, the tiers and
    ``only_cuts`` allow them, the accuracy guard keeps them), each pair's status in
    words, and the guard's record (None outside guard mode)."""
    fits = np.array(
        [not config.check_memory or memory_ok(pc, topology, config.batch_size) for pc in pcs]
    )
    if not fits.any():
        raise ConfigError(
            "no cut pair's client part fits every client's memory; give clients more "
            "memory or use a smaller batch"
        )
    only = None if config.only_cuts is None else {tuple(c) for c in config.only_cuts}
    tier_ok = np.array(
        [(a < c or not config.three_tier) and (only is None or (a, c) in only) for a, c in cuts]
    )
    if not (fits & tier_ok).any():
        raise ConfigError(
            "no cut pair left to plan: --three-tier needs an aggregator part (a < c), and "
            "only_cuts must name legal pairs whose client part fits"
        )
    guard = None
    if config.mode == "guard":
        eligible, guard = accuracy_guard(cuts, acc, fits & tier_ok, config.acc_tolerance, separated)
    else:
        eligible = fits & tier_ok
    status = np.where(fits, "candidate", "client memory too small").astype(object)
    status[fits & ~tier_ok] = (
        "two-tier (a == c), excluded by three_tier" if only is None else "not in only_cuts"
    )
    status[fits & tier_ok & ~eligible] = (
        "excluded by the fallback rule"
        if guard and guard["fallback"]
        else "predicted accuracy outside the tolerance"
    )
    return eligible, status, guard


def _search(table: CostTable, cap, obj, config: PlannerConfig, loss, lb_obj, eligible, status):
    """The greedy assignment of every eligible pair in lower-bound order (with
    ``prune``, skipping pairs whose bound is above the best plan so far), then local
    search on the best ``refine_top``; per pair the assignment, delay, bytes and
    objective (``status`` says what each pair went through)."""
    prune = config.prune
    if prune is None:
        prune = table.n_clients * table.n_aggregators >= 100_000
    assign = np.full((table.n_pairs, table.n_clients), -1, dtype=np.int64)
    value = np.full(table.n_pairs, np.inf)
    delay = np.full(table.n_pairs, np.nan)
    nbytes = np.full(table.n_pairs, np.nan)

    def run_greedy(pairs: np.ndarray) -> None:
        if len(pairs) == 0:
            return
        assign[pairs] = greedy_assign(table, pairs, cap, chunk=config.chunk)
        for p in pairs:
            delay[p], nbytes[p] = evaluate_assignment(table, p, assign[p])
            value[p] = obj.value(np.nan_to_num(loss[p]), delay[p], nbytes[p])
            status[p] = "greedy"

    order = [int(p) for p in np.argsort(lb_obj, kind="stable") if eligible[p]]
    if prune:
        run_greedy(np.array(order[:1]))
        rest = [p for p in order[1:] if lb_obj[p] < value.min()]
        for p in order[1:]:
            if p not in rest:
                status[p] = "skipped: lower bound above the best plan"
        run_greedy(np.array(rest, dtype=np.int64))
    else:
        run_greedy(np.array(order, dtype=np.int64))
    for p in [int(p) for p in np.argsort(value, kind="stable")[: config.refine_top]]:
        if not np.isfinite(value[p]):
            continue
        better = refine_assignment(table, p, assign[p], obj, config, cap)
        d, b = evaluate_assignment(table, p, better)
        v = obj.value(np.nan_to_num(loss[p]), d, b)
        if v < value[p]:
            assign[p], delay[p], nbytes[p], value[p] = better, d, b, v
        status[p] = "greedy + local search"
    return assign, delay, nbytes, value


def refine_assignment(
    table: CostTable, pair: int, greedy: np.ndarray, obj: Objective, config: PlannerConfig, cap
) -> np.ndarray:
    """Local search from the greedy assignment and, on small instances without
    capacities, from ``config.restarts`` seeded random ones; the best result."""
    starts = [greedy.copy()]
    small = table.n_clients * table.n_aggregators <= SMALL_INSTANCE
    if cap is None and small:
        rng = np.random.default_rng([config.seed, 4242])
        for _ in range(config.restarts):
            scores = np.where(table.linked, rng.random(table.linked.shape), -1.0)
            starts.append(scores.argmax(axis=1))
    problem = AssignmentProblem(table, pair, obj.delay_coef, obj.bytes_coef, cap)
    best, best_value = greedy, np.inf
    for start in starts:
        cand = improve_assignment(problem, start, max_iters=config.local_search_iters)
        value = obj.value(0.0, *evaluate_assignment(table, pair, cand))
        if value < best_value:
            best, best_value = cand, value
    # Emptying an aggregator saves its backbone messages only once its last client
    # leaves, which single moves never see; on small instances try it outright.
    for _ in range(table.n_aggregators - 1 if small else 0):
        closed = close_aggregators(problem, best)
        if np.array_equal(closed, best):
            break
        best = improve_assignment(problem, closed, max_iters=config.local_search_iters)
    return best


def plan_fixed(
    profile: BlockProfile,
    topology: Topology,
    scheme: str,
    cuts: tuple[int, int],
    *,
    rule: str = "random",
    config: PlannerConfig | None = None,
    predicted_loss: float = float("nan"),
    predicted_accuracy: float = float("nan"),
    objective: Objective | None = None,
) -> Plan:
    """A baseline plan: fixed ``cuts`` and a rule assignment (``random``,
    ``round-robin``, ``nearest``, or ``greedy``: the planner's delay-aware greedy and
    local search for these cuts, for delay alone).

    ``config`` (default :class:`PlannerConfig`) gives the batch size and local epochs
    (the round's messages), the seed (of ``random`` and of the local search's restarts),
    the local search's settings and the capacity (``greedy``)."""
    t0 = time.perf_counter()
    config = config or PlannerConfig()
    scheme_def = get_scheme(scheme)
    pc = scheme_def.part_costs(profile, *cuts)
    table = build_cost_table(
        [pc],
        topology,
        scheme_def,
        batch_size=config.batch_size,
        local_epochs=config.local_epochs,
    )
    if rule == "greedy":
        capacity = config.capacity
        cap = check_capacity(table, None if capacity is None else np.array(capacity))
        delay_only = Objective(Weights(0.0, 1.0, 0.0), 1.0, 1.0, "none", "delay alone (s)")
        assign = greedy_assign(table, np.array([0]), cap)[0]
        assign = refine_assignment(table, 0, assign, delay_only, config, cap)
    else:
        assign = assign_clients(topology, rule, config.seed)
    delay, nbytes = evaluate_assignment(table, 0, assign)
    value = objective.value(predicted_loss, delay, nbytes) if objective else float("nan")
    return Plan(
        scheme=scheme,
        cuts=tuple(cuts),
        assignment=assign,
        predicted_loss=predicted_loss,
        predicted_accuracy=predicted_accuracy,
        delay_s=delay,
        bytes=nbytes,
        objective=float(value),
        planning_s=time.perf_counter() - t0,
        objective_def=objective,
        info={
            "n_clients": table.n_clients,
            "n_aggregators": table.n_aggregators,
            "assignment_rule": rule,
        },
    )


__all__ = [
    "FAMILIES",
    "MODES",
    "Plan",
    "PlannerConfig",
    "accuracy_guard",
    "client_work",
    "legal_part_costs",
    "lower_bounds",
    "make_objective",
    "memory_ok",
    "plan_fixed",
    "plan_split",
    "refine_assignment",
]
