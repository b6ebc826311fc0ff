"""The greedy, the local search and the exact solver on hand-checked instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsplit.errors import ConfigError
from flowsplit.federated.schemes import get_scheme
from flowsplit.planner.assign import greedy_assign
from flowsplit.planner.costs import build_cost_table, evaluate_assignment
from flowsplit.planner.exact import enumerate_assignments, solve_exact
from flowsplit.planner.search import AssignmentProblem, assignment_objective, improve_assignment
from tests.planner.helpers import queue_table, random_topology, small_profile


def test_greedy_on_the_lpt_counterexample_then_local_search_and_exact_reach_the_optimum():
    # Prepare: work 3, 3, 2, 2, 2 on two identical aggregators (no other cost).
    # By hand: largest first, each to the earliest finish (ties to the first):
    # 3 -> A (3), 3 -> B (3), 2 -> A (5), 2 -> B (5), 2 -> A (7): makespan 7.
    # Optimum: {3, 3} and {2, 2, 2}, makespan 6; a swap of a 3 on A with a 2 on B finds it.
    table = queue_table([3, 3, 2, 2, 2])
    # Execute
    greedy = greedy_assign(table)[0]
    improved = improve_assignment(AssignmentProblem(table, 0, 1.0, 0.0), greedy)
    exact = solve_exact(table, 0, delay_coef=1.0, bytes_coef=0.0)
    # Assert
    assert greedy.tolist() == [0, 1, 0, 1, 0]
    assert evaluate_assignment(table, 0, greedy)[0] == pytest.approx(7.0)
    assert evaluate_assignment(table, 0, improved)[0] == pytest.approx(6.0)
    assert exact.optimal and exact.objective == pytest.approx(6.0)
    assert sorted(np.bincount(exact.assignment, weights=[3, 3, 2, 2, 2])) == [6.0, 6.0]


def test_greedy_puts_heavy_clients_on_the_fast_aggregator():
    # Prepare: aggregator 1 is twice as fast (inverse speed 0.5); every chain is 1.
    # By hand: work 4 -> B (max(1, 2) = 2 < 4); 2 -> A (2 < B's 2 + 1 = 3);
    # 2 -> B (3 < A's 2 + 2 = 4). Round delay max(2, 3) = 3, which is optimal.
    table = queue_table([4, 2, 2], chain=np.ones((3, 2)), inv_speed=[1.0, 0.5])
    # Execute
    greedy = greedy_assign(table)[0]
    exact = enumerate_assignments(table, 0, delay_coef=1.0, bytes_coef=0.0)
    # Assert
    assert greedy.tolist() == [1, 0, 1]
    assert evaluate_assignment(table, 0, greedy)[0] == pytest.approx(3.0)
    assert exact.objective == pytest.approx(3.0)


def test_a_client_whose_chain_is_long_everywhere_sets_the_delay():
    # By hand: client 0's chain is 10 on A and 5 on B, so it goes to B and the
    # delay is at least 5; the small clients fit beside it on A.
    chain = np.array([[10.0, 5.0], [0.0, 0.0], [0.0, 0.0]])
    table = queue_table([1, 1, 1], chain=chain)
    greedy = greedy_assign(table)[0]
    assert greedy[0] == 1
    assert evaluate_assignment(table, 0, greedy)[0] == pytest.approx(5.0)


def test_capacities_force_the_second_best_aggregator():
    # By hand: without limits all three light clients would crowd the fast aggregator
    # B (finish 0.5, 1.0, 1.5 < A's 1); with B capped at 1 client, two go to A.
    table = queue_table([1, 1, 1], inv_speed=[1.0, 0.5])
    free = greedy_assign(table)[0]
    capped = greedy_assign(table, capacity=np.array([3, 1]))[0]
    assert np.bincount(free, minlength=2).tolist() == [1, 2]
    assert np.bincount(capped, minlength=2).tolist() == [2, 1]
    exact = solve_exact(table, 0, delay_coef=1.0, bytes_coef=0.0, capacity=np.array([3, 1]))
    assert exact.objective == pytest.approx(2.0)  # two clients of work 1 on A


def test_impossible_capacities_are_a_clear_error():
    table = queue_table([1, 1, 1])
    with pytest.raises(ConfigError, match="capacities"):
        greedy_assign(table, capacity=np.array([1, 1]))


def test_the_exact_solver_equals_brute_force_on_real_costs():
    # Prepare: a real cost table (every scheme family), 6 clients, 2 aggregators.
    from flowsplit.federated.system.profile import part_costs

    profile = small_profile()
    for k, scheme in enumerate(("sfl", "hsfl", "hsfl-ll")):
        topo = random_topology(6, 2, seed=10 + k, partial_links=True)
        flags = get_scheme(scheme)
        cuts = [(1, 1)] if scheme == "sfl" else [(1, 2), (2, 3)]
        pcs = [part_costs(profile, *c, local_loss=flags.local_loss) for c in cuts]
        table = build_cost_table(pcs, topo, flags, batch_size=8)
        for p in range(len(cuts)):
            # Execute
            exact = solve_exact(table, p, delay_coef=1.0, bytes_coef=1e-7)
            brute = enumerate_assignments(table, p, delay_coef=1.0, bytes_coef=1e-7)
            # Assert: the same optimum (HiGHS's tolerances are about 1e-9 of the delay).
            assert exact.objective == pytest.approx(brute.objective, rel=1e-6)


def test_greedy_is_deterministic_and_lockstep_equals_one_pair_at_a_time():
    from flowsplit.federated.system.profile import part_costs

    profile = small_profile()
    topo = random_topology(40, 8, seed=5)
    flags = get_scheme("hsfl")
    pcs = [part_costs(profile, *c) for c in profile.legal_cuts()]
    table = build_cost_table(pcs, topo, flags, batch_size=16)
    both = greedy_assign(table)
    again = greedy_assign(table)
    assert np.array_equal(both, again)
    assert greedy_assign(table, np.array([2]))[0].shape == both[2].shape


@st.composite
def _instances(draw):
    n = draw(st.integers(1, 9))
    a = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    linked = rng.random((n, a)) < 0.6
    linked[np.arange(n), rng.integers(0, a, n)] = True
    # Capacities with room for everyone along the links: a feasible assignment's counts, plus slack.
    feasible = np.array([rng.choice(np.flatnonzero(linked[i])) for i in range(n)])
    cap = np.bincount(feasible, minlength=a) + rng.integers(0, 2, a)
    return seed, n, a, linked, cap


@settings(max_examples=40, deadline=None)
@given(_instances())
def test_capacities_and_links_are_never_violated(instance):
    from dataclasses import replace

    from flowsplit.federated.system.profile import part_costs

    seed, n, a, linked, cap = instance
    topo = random_topology(n, a, seed)
    topo = replace(topo, ca_bandwidth=np.where(linked, topo.ca_bandwidth, 0.0))
    flags = get_scheme("hsfl-ll" if seed % 2 else "hsfl")
    pcs = [part_costs(small_profile(), 1, 2, local_loss=flags.local_loss)]
    table = build_cost_table(pcs, topo, flags, batch_size=8)
    for assign in (
        greedy_assign(table, capacity=cap)[0],
        improve_assignment(
            AssignmentProblem(table, 0, 1.0, 0.0, cap), greedy_assign(table, capacity=cap)[0]
        ),
    ):
        assert np.all(assign >= 0)
        assert np.all(linked[np.arange(n), assign])
        assert np.all(np.bincount(assign, minlength=a) <= cap)
    exact = solve_exact(table, 0, delay_coef=1.0, bytes_coef=0.0, capacity=cap)
    assert np.all(np.bincount(exact.assignment, minlength=a) <= cap)
    heuristic = improve_assignment(
        AssignmentProblem(table, 0, 1.0, 0.0, cap), greedy_assign(table, capacity=cap)[0]
    )
    assert assignment_objective(table, 0, heuristic, 1.0, 0.0) >= exact.objective * (1 - 1e-6)


def test_the_exact_solver_and_the_brute_force_agree_by_hand():
    # By hand: work 3, 3, 2 on two identical aggregators: {3} and {3, 2}, makespan 5.
    table = queue_table([3, 3, 2])
    # Execute
    exact = solve_exact(table, 0, delay_coef=1.0, bytes_coef=0.0)
    brute = enumerate_assignments(table, 0, delay_coef=1.0, bytes_coef=0.0)
    # Assert
    assert exact.optimal and exact.objective == pytest.approx(5.0)
    assert brute.objective == 5.0
