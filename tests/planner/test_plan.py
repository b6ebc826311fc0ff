"""plan_split: the objective, memory limits, baselines, determinism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flowsplit.data.store import load_dataset
from flowsplit.errors import ConfigError
from flowsplit.federated.system.profile import client_memory_bytes, part_costs
from flowsplit.planner.objective import Objective, Weights
from flowsplit.planner.plan import PlannerConfig, lower_bounds, plan_fixed, plan_split
from flowsplit.planner.study import make_study, resolve_study_config
from tests.federated._toy import ToyFactory, write_toy_dataset
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
    weighted = {"mode": "weighted"}
    fast = plan_split(
        small_profile(), topo, LOSS, PlannerConfig(weights=Weights(0, 1, 0), **weighted)
    )
    careful = plan_split(
        small_profile(), topo, LOSS, PlannerConfig(weights=Weights(100, 1, 0), **weighted)
    )
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
    plan = plan_split(profile, topo, LOSS, PlannerConfig(weights=Weights(1, 0, 0), mode="weighted"))
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
    from flowsplit.federated.schemes import get_scheme
    from flowsplit.planner.costs import build_cost_table, evaluate_assignment
    from flowsplit.planner.plan import legal_part_costs

    for seed, fam in enumerate(("hsfl", "hsfl-ll", "sfl")):
        topo = random_topology(25, 3, seed=seed, partial_links=True)
        flags = get_scheme(fam)
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


ACC = {(1, 1): 0.90, (1, 2): 0.95, (1, 3): 0.945, (2, 2): 0.80, (2, 3): 0.949, (3, 3): 0.70}


def test_the_guard_takes_the_least_costly_plan_within_the_tolerance():
    # Prepare: (1, 2), (1, 3) and (2, 3) are within 1 pt of the best (0.95); the rest not.
    topo = random_topology(12, 3, seed=1)
    profile = small_profile()
    # Execute
    plan = plan_split(profile, topo, None, PlannerConfig(), predicted_accuracy=ACC)
    everything = plan_split(
        profile, topo, None, PlannerConfig(acc_tolerance=1.0), predicted_accuracy=ACC
    )
    # Assert: the eligible set by hand, the choice is the cheapest eligible pair by the
    # delay/bytes objective, and a cheaper pair outside the tolerance is not taken.
    guard = plan.to_dict()["guard"]
    assert sorted(map(tuple, guard["eligible"])) == [(1, 2), (1, 3), (2, 3)]
    rows = {tuple(r["cuts"]): r for r in plan.candidates}
    eligible = [c for c in rows if rows[c]["eligible"]]
    assert plan.cuts == min(eligible, key=lambda c: rows[c]["objective"])
    assert rows[(3, 3)]["status"] == "predicted accuracy outside the tolerance"
    assert plan.predicted_accuracy == ACC[plan.cuts]
    assert plan.objective_def.weights.loss == 0.0
    if everything.cuts not in eligible:  # a cheaper pair exists: the guard refused it
        assert everything.objective < plan.objective


def test_the_guard_falls_back_to_a_stated_rule_when_pilots_do_not_separate_the_cuts():
    topo = random_topology(12, 3, seed=1)
    plan = plan_split(
        small_profile(), topo, None, PlannerConfig(), predicted_accuracy=ACC, separated=False
    )
    guard = plan.info["guard"]
    assert guard["fallback"] and "do not separate" in guard["rule"]
    assert sorted(map(tuple, guard["eligible"])) == [(1, 1), (1, 2), (1, 3)]
    assert plan.cuts[0] == 1


def test_three_tier_restricts_the_plan_to_pairs_with_an_aggregator_part():
    topo = random_topology(12, 3, seed=1)
    acc = {c: 0.9 for c in ACC}
    acc[(1, 1)] = acc[(2, 2)] = acc[(3, 3)] = 0.99  # the best predictions are two-tier
    two = plan_split(small_profile(), topo, None, PlannerConfig(), predicted_accuracy=acc)
    three = plan_split(
        small_profile(), topo, None, PlannerConfig(three_tier=True), predicted_accuracy=acc
    )
    assert two.tiers == 2 and two.to_dict()["tiers"] == 2
    assert three.cuts[0] < three.cuts[1] and three.tiers == 3
    rows = {tuple(r["cuts"]): r["status"] for r in three.candidates}
    assert rows[(2, 2)].startswith("two-tier")


def test_references_are_deterministic_and_stated():
    topo = random_topology(15, 3, seed=5)
    a = plan_split(small_profile(), topo, None, PlannerConfig(seed=0), predicted_accuracy=ACC)
    b = plan_split(small_profile(), topo, None, PlannerConfig(seed=7), predicted_accuracy=ACC)
    ref = plan_fixed(small_profile(), topo, "hsfl", (1, 2), rule="round-robin")
    assert a.objective_def.delay_ref == b.objective_def.delay_ref == ref.delay_s
    assert a.objective_def.bytes_ref == b.objective_def.bytes_ref == ref.bytes
    assert "round-robin" in a.objective_def.to_dict()["reference_text"]


def test_greedy_baseline_is_no_slower_than_the_random_assignment():
    for seed in range(3):
        topo = random_topology(20, 4, seed=seed)
        rand = plan_fixed(
            small_profile(), topo, "hsfl", (1, 2), rule="random", config=PlannerConfig(seed=seed)
        )
        greedy = plan_fixed(
            small_profile(), topo, "hsfl", (1, 2), rule="greedy", config=PlannerConfig(seed=seed)
        )
        assert greedy.cuts == (1, 2)
        assert greedy.delay_s <= rand.delay_s * (1 + 1e-12)


def test_guard_needs_a_cost_weight_and_a_sane_tolerance():
    topo = random_topology(6, 2, seed=1)
    with pytest.raises(ConfigError, match="delay or bytes weight"):
        plan_split(
            small_profile(),
            topo,
            None,
            PlannerConfig(weights=Weights(1, 0, 0)),
            predicted_accuracy=ACC,
        )
    with pytest.raises(ConfigError, match="acc-tolerance"):
        PlannerConfig(acc_tolerance=2.0)


def test_a_study_takes_a_loaded_dataset_as_it_is(tmp_path):
    # A benchmark narrows a loaded dataset's evaluation rows; the study must use that
    # object, not reload the directory.
    path = write_toy_dataset(tmp_path / "toy", n=60)
    cfg = resolve_study_config(True, model="toy", n_clients=4, n_aggregators=2)
    data = load_dataset(path)
    data.meta["split"] = np.where(data.meta["split"] == "test", "unused", data.meta["split"])
    loaded = make_study(data, cfg, model_fn=ToyFactory("mlp"), quiet=True, pilots=False)
    fresh = make_study(path, cfg, model_fn=ToyFactory("mlp"), quiet=True, pilots=False)
    assert loaded.dataset is data and len(loaded.dataset.split_indices("test")) == 0
    assert len(fresh.dataset.split_indices("test")) > 0
    assert loaded.profile.legal_cuts() == fresh.profile.legal_cuts()
