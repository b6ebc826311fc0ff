"""plan_split: the objective, memory limits, baselines, determinism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.federated.profile import client_memory_bytes, part_costs
from flowsplit.planner.objective import Objective, Weights
from flowsplit.planner.plan import PlannerConfig, lower_bounds, plan_fixed, plan_split
from tests.planner.helpers import random_topology, small_profile

LOSS = {(1, 1): 1.0, (1, 2): 0.9, (1, 3): 0.8, (2, 2): 1.1, (2, 3): 1.0, (3, 3): 1.2}


def test_objective_by_hand():
    obj = Objective(Weights(2.0, 1.0, 0.5), delay_ref=4.0, bytes_ref=100.0)
    # 2 * 0.5 + 1 * 2 / 4 + 0.5 * 50 / 100 = 1 + 0.5 + 0.25
    assert obj.value(0.5, 2.0, 50.0) == pytest.approx(1.75)
    with pytest.raises(ConfigError):
        Weights(0, 0, 0)
    assert Weights.parse("1,0,2") == Weights(1.0, 0.0, 2.0)


def test_loss_weight_decides_between_equally_costly_cuts():
    topo = random_topology(12, 3, seed=1)
    fast = plan_split(small_profile(), topo, LOSS, PlannerConfig(weights=Weights(0, 1, 0)))
    careful = plan_split(small_profile(), topo, LOSS, PlannerConfig(weights=Weights(100, 1, 0)))
    # With a dominant loss weight the planner takes the lowest predicted loss.
    assert careful.cuts == min(LOSS, key=LOSS.get)
    # Delay-only: the chosen pair has the least delay among the evaluated candidates.
    delays = [c["delay_s"] for c in fast.candidates if c["delay_s"] is not None]
    assert fast.delay_s == pytest.approx(min(delays))


def test_plans_are_deterministic_and_report_every_candidate():
    topo = random_topology(30, 4, seed=2)
    a = plan_split(small_profile(), topo, LOSS)
    b = plan_split(small_profile(), topo, LOSS)
    assert a.cuts == b.cuts and np.array_equal(a.assignment, b.assignment)
    assert len(a.candidates) == 6 and sum(c["chosen"] for c in a.candidates) == 1
    d = a.to_dict()
    assert d["objective_def"]["reference"] == "hsfl" and len(d["assignment"]) == 30


def test_memory_limits_exclude_cut_pairs_whose_client_part_does_not_fit():
    # Prepare: clients with just enough memory for a client part of block 1 only.
    profile = small_profile()
    need_a1 = max(client_memory_bytes(part_costs(profile, 1, c), 32) for c in (1, 2, 3))
    need_a2 = client_memory_bytes(part_costs(profile, 2, 2), 32)
    assert need_a2 > need_a1
    topo = random_topology(10, 2, seed=3)
    topo = replace(topo, client_memory=np.full(10, int(need_a1)))
    # Execute
    plan = plan_split(profile, topo, LOSS, PlannerConfig(weights=Weights(1, 0, 0)))
    # Assert: the best loss (1, 3) fits; every a >= 2 pair is marked and never chosen.
    assert plan.cuts[0] == 1
    for row in plan.candidates:
        if row["cuts"][0] >= 2:
            assert row["status"] == "client memory too small" and not row["chosen"]
    topo = replace(topo, client_memory=np.full(10, 1))
    with pytest.raises(ConfigError, match="memory"):
        plan_split(profile, topo, LOSS)


def test_capacity_is_honoured_by_the_plan():
    topo = random_topology(20, 4, seed=4)
    cap = (5, 5, 5, 5)
    plan = plan_split(small_profile(), topo, LOSS, PlannerConfig(capacity=cap))
    assert np.all(np.bincount(plan.assignment, minlength=4) <= 5)


def test_lower_bounds_never_exceed_the_evaluated_plans():
    from flowsplit.planner.costs import SchemeFlags, build_cost_table, evaluate_assignment
    from flowsplit.planner.plan import legal_part_costs

    for seed, fam in enumerate(("hsfl", "hsfl-ll", "sfl")):
        topo = random_topology(25, 3, seed=seed, partial_links=True)
        flags = SchemeFlags.of(fam)
        _, pcs = legal_part_costs(small_profile(), flags)
        table = build_cost_table(pcs, topo, flags, batch_size=16)
        lb_delay, lb_bytes = lower_bounds(table)
        rng = np.random.default_rng(seed)
        for _ in range(5):
            assign = np.array([rng.choice(np.flatnonzero(table.linked[i])) for i in range(25)])
            for p in range(table.n_pairs):
                delay, nbytes = evaluate_assignment(table, p, assign)
                assert lb_delay[p] <= delay * (1 + 1e-12)
                assert lb_bytes[p] <= nbytes * (1 + 1e-12)


def test_pruning_keeps_the_same_plan():
    topo = random_topology(60, 5, seed=6)
    full = plan_split(small_profile(), topo, LOSS, PlannerConfig(prune=False))
    pruned = plan_split(small_profile(), topo, LOSS, PlannerConfig(prune=True))
    assert pruned.cuts == full.cuts
    assert pruned.objective == pytest.approx(full.objective)


def test_baseline_plans_use_their_rule_and_cuts():
    topo = random_topology(8, 2, seed=7)
    plan = plan_fixed(small_profile(), topo, "sfl", (2, 2), rule="round-robin")
    assert plan.cuts == (2, 2) and plan.assignment.tolist() == [0, 1] * 4
    assert plan.delay_s > 0 and plan.bytes > 0
