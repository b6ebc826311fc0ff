"""Accuracy, delay and leakage per cut pair, the plan chosen under a budget, and their picture.

Delay is the cost model's closed-form round delay (:func:`flowsplit.federated.
predict.predict_round`) of end-to-end HSFL at each legal ``(a, c)`` on a topology,
with a round-robin assignment; accuracy is the study's (end to end, every cut
computes the same function, so one model's accuracy stands for every pair without
a defence; with one, the defended model's at cut ``a``). Leakage of a pair is
:func:`flowsplit.planner.leakage.pair_leakage` of the measured cuts.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from flowsplit.federated.predict import predict_round  # noqa: E402
from flowsplit.federated.schemes import get_scheme  # noqa: E402
from flowsplit.federated.system.parts import legal_cuts  # noqa: E402
from flowsplit.federated.system.profile import BlockProfile  # noqa: E402
from flowsplit.federated.system.topology import Topology, assign_clients  # noqa: E402
from flowsplit.planner.leakage import pair_leakage  # noqa: E402
from flowsplit.privacy.result import PairRow, PrivacyResult  # noqa: E402


def pair_table(
    result: PrivacyResult,
    profile: BlockProfile,
    topology: Topology,
    *,
    measure: str,
    batch_size: int = 32,
    n_train: int | None = None,
) -> list[PairRow]:
    """One row per legal ``(a, c)``: delay per round, accuracy and leakage."""
    leak = {int(k): float(v.value(measure)) for k, v in result.cuts.items() if v.has(measure)}
    if not leak:
        raise ValueError(f"the study has no measure {measure!r}")
    n = int(n_train if n_train is not None else result.rows.train)
    counts = np.full(topology.n_clients, n // topology.n_clients, dtype=np.int64)
    counts[: n % topology.n_clients] += 1
    topo = topology.with_samples(counts)
    assignment = assign_clients(topo, "round-robin", 0)
    scheme = get_scheme("hsfl")
    rows = []
    for a, c in legal_cuts(profile.n_blocks):
        costs = scheme.part_costs(profile, a, c)
        delay = predict_round(costs, topo, assignment, scheme=scheme, batch_size=batch_size)
        rows.append(
            PairRow(
                cuts=[a, c],
                delay_s=float(delay.total),
                accuracy=float(result.accuracy),
                leakage=pair_leakage(leak, a, c),
            )
        )
    return rows


def choose(rows: list[PairRow], max_leakage: float | None) -> PairRow | None:
    """The least-delay pair within the budget (all pairs when ``max_leakage`` is None)."""
    ok = [r for r in rows if max_leakage is None or r.leakage <= max_leakage]
    return min(ok, key=lambda r: (r.delay_s, r.leakage)) if ok else None


def pareto_front(rows: list[PairRow]) -> list[PairRow]:
    """Pairs no other pair beats on both delay and leakage (ties kept), by delay."""
    front = [
        r
        for r in rows
        if not any(
            o.delay_s <= r.delay_s
            and o.leakage <= r.leakage
            and (o.delay_s < r.delay_s or o.leakage < r.leakage)
            for o in rows
        )
    ]
    return sorted(front, key=lambda r: r.delay_s)


def draw_pareto(result: PrivacyResult, path: str | Path) -> Path:
    """Two panels: delay vs leakage of every pair of ``result.pareto`` (its budget and
    chosen pairs marked); accuracy vs leakage per cut and defence."""
    if result.pareto is None:
        raise ValueError("the study has no cut-pair table to draw (result.pareto)")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    _delay_panel(ax1, result)
    _defence_panel(ax2, result)
    fig.suptitle(f"{Path(result.dataset).name}: {result.model} on {result.view}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def _delay_panel(ax1, result: PrivacyResult) -> None:
    """Delay vs leakage of every cut pair, the Pareto front, the budget and the pairs
    chosen with and without it (and the planner's)."""
    pareto = result.pareto
    rows, measure, max_leakage = pareto.pairs, pareto.measure, pareto.max_leakage
    chosen, unconstrained, planned = pareto.chosen, pareto.unconstrained, pareto.plan
    d = np.array([r.delay_s for r in rows])
    lk = np.array([r.leakage for r in rows])
    two = np.array([r.cuts[0] == r.cuts[1] for r in rows])
    ax1.scatter(d[~two], lk[~two], c="tab:blue", s=22, label="three-tier (a, c)")
    ax1.scatter(d[two], lk[two], c="tab:green", s=30, marker="s", label="two-tier (a = c)")
    for r in rows:
        ax1.annotate(
            f"{r.cuts[0]},{r.cuts[1]}",
            (r.delay_s, r.leakage),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    front = pareto_front(rows)
    ax1.step(
        [r.delay_s for r in front],
        [r.leakage for r in front],
        where="post",
        c="grey",
        lw=1,
        label="Pareto front",
    )
    if max_leakage is not None and math.isfinite(max_leakage):
        ax1.axhline(max_leakage, c="tab:red", ls="--", lw=1, label=f"budget {max_leakage:g}")
    marks = (
        (unconstrained, {"marker": "x", "s": 120, "c": "black", "label": "least delay, no budget"}),
        (
            chosen,
            {"marker": "*", "s": 260, "c": "tab:red", "zorder": 5, "label": "chosen under budget"},
        ),
        (
            planned,
            {
                "marker": "D",
                "s": 90,
                "facecolors": "none",
                "edgecolors": "tab:purple",
                "lw": 2,
                "label": "the planner's plan",
            },
        ),
    )
    for point, style in marks:
        if point is not None:
            ax1.scatter([point.delay_s], [point.leakage], **style)
    ax1.set_xlabel("predicted round delay (s), end-to-end HSFL")
    ax1.set_ylabel(f"leakage: {measure}")
    # Centrally trained, one model for every cut; federated training converges
    # differently per cut (the planner's pilots measure that).
    ax1.set_title(
        f"centrally trained accuracy {result.accuracy:.3f}, the same model at every cut",
        fontsize=9,
    )
    ax1.legend(fontsize=7)


def _defence_panel(ax2, result: PrivacyResult) -> None:
    """Accuracy vs leakage per cut, without a defence and with each one; the leakage
    after the input stem and with no activations at all, as lines."""
    measure = result.pareto.measure
    series = [("none", result.cuts)] + [
        (name, entry.cuts) for name, entry in result.defences.items()
    ]
    for name, cuts in series:
        ks = sorted(int(k) for k, rec in cuts.items() if rec.has(measure))
        if not ks:
            continue
        xs = [cuts[str(k)].value(measure) for k in ks]
        ys = [cuts[str(k)].accuracy for k in ks]
        ax2.plot(xs, ys, marker="o", label=name)
        for k, x, y in zip(ks, xs, ys, strict=True):
            ax2.annotate(str(k), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if result.reference is not None and result.reference.has(measure):
        ax2.axvline(
            result.reference.value(measure), c="grey", ls=":", lw=1, label="after the input stem"
        )
    prior = result.prior.get(f"{measure}_prior")
    if prior is not None:
        ax2.axvline(prior, c="black", ls="--", lw=1, label="no activations")
    ax2.set_xlabel(f"leakage: {measure} (numbers: cut)")
    ax2.set_ylabel("test accuracy")
    ax2.set_title("accuracy cost of each defence", fontsize=9)
    ax2.legend(fontsize=7)
