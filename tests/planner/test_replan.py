"""Re-planning per round: the warm-started assignment on a round's network."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from flowsplit.cli import main
from flowsplit.errors import ConfigError
from flowsplit.federated import commands as fed_commands
from flowsplit.federated.assignment import AssignmentPolicy, RoundQuery
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.schemes import get_scheme
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.federated.system.topology import TraceEvent, random_trace, read_topology
from flowsplit.planner.costs import evaluate_assignment
from flowsplit.planner.exact import enumerate_assignments
from flowsplit.planner.plan import PlannerConfig, plan_fixed
from flowsplit.planner.replan import ReplanPolicy, replan_assignment, round_table
from tests.federated._toy import ToyFactory, write_toy_dataset
from tests.planner.helpers import queue_table, random_topology, small_profile

SCHEME = get_scheme("hsfl")
COSTS = SCHEME.part_costs(small_profile(), 1, 2)


def _table(topology, samples=None, alive=None):
    samples = topology.client_samples if samples is None else samples
    return round_table(COSTS, SCHEME, topology, samples, batch_size=32, alive=alive)


def test_a_congested_link_moves_its_client_to_the_optimum():
    # Prepare: work 3, 3, 2, 2, 2 on two identical aggregators; last round's
    # assignment {3, 3} | {2, 2, 2} was optimal (makespan 6). This round client 2's
    # path to aggregator 1 congests: its chain there is 10.
    # By hand: client 2 must go to aggregator 0; the best is then {2, 2, 2} on 0 and
    # {3, 3} on 1, makespan 6 again (keeping the assignment costs 10).
    previous = np.array([0, 0, 1, 1, 1])
    chain = np.zeros((5, 2))
    chain[2, 1] = 10.0
    table = queue_table([3, 3, 2, 2, 2], chain=chain)
    # Execute
    out = replan_assignment(table, previous)
    # Assert
    assert out.previous_delay_s == pytest.approx(10.0)
    assert out.delay_s == pytest.approx(6.0)
    assert out.assignment.tolist() == [1, 1, 0, 0, 0]
    assert evaluate_assignment(table, 0, out.assignment)[0] == pytest.approx(out.delay_s)
    assert [m[0] for m in out.moved] == [0, 1, 2, 3, 4]


def test_an_unchanged_network_keeps_a_good_assignment_as_it_is():
    # Prepare: the optimum of the hand instance, network unchanged.
    table = queue_table([3, 3, 2, 2, 2])
    previous = np.array([0, 0, 1, 1, 1])
    # Execute
    out = replan_assignment(table, previous)
    # Assert: nothing better to find; nobody moves.
    assert out.start == "kept" and out.moved == []
    assert out.assignment.tolist() == previous.tolist()
    assert out.delay_s == pytest.approx(out.previous_delay_s) == pytest.approx(6.0)


def test_a_gain_below_min_gain_moves_nobody():
    # Prepare: work 3, 3, 2, 2, 2 with last round's {3, 2} | {3, 2, 2}: makespan 7;
    # the optimum {3, 3} | {2, 2, 2} is 6, a gain of 1/7 = 14.3 %.
    table = queue_table([3, 3, 2, 2, 2])
    previous = np.array([0, 1, 0, 1, 1])
    # Execute
    small = replan_assignment(table, previous, min_gain=0.15)
    taken = replan_assignment(table, previous, min_gain=0.14)
    # Assert: a 14.3 % gain is below 15 % (kept) and above 14 % (taken).
    assert small.start == "kept" and small.delay_s == pytest.approx(7.0) and small.moved == []
    assert taken.start != "kept" and taken.delay_s == pytest.approx(6.0)
    with pytest.raises(ConfigError, match="min_gain"):
        replan_assignment(table, previous, min_gain=1.0)


def test_on_random_traces_replanning_never_loses_and_is_near_the_exact_optimum():
    # Prepare: 6 clients, 3 aggregators (3^6 = 729 assignments, enumerable), and a
    # random trace over 8 rounds; start from the round-1 plan and follow the rounds.
    topo = random_topology(6, 3, seed=11)
    topo = topo.with_trace(random_trace(topo, 8, seed=3, link_rate=0.4, backbone_rate=0.3))
    previous = replan_assignment(_table(topo), np.zeros(6, dtype=np.int64)).assignment
    gaps, gains = [], []
    for r in range(1, 8):
        net = topo.at_round(r)
        table = _table(net)
        # Execute
        out = replan_assignment(table, previous)
        exact = enumerate_assignments(table, 0, delay_coef=1.0, bytes_coef=0.0)
        # Assert: never worse than keeping last round's assignment, never below the
        # optimum, and the prediction is the cost model's.
        kept = evaluate_assignment(table, 0, previous)[0]
        assert out.previous_delay_s == pytest.approx(kept)
        assert out.delay_s <= kept * (1 + 1e-12)
        assert out.delay_s >= exact.objective * (1 - 1e-9)
        assert out.delay_s == pytest.approx(evaluate_assignment(table, 0, out.assignment)[0])
        gaps.append(out.delay_s / exact.objective - 1)
        gains.append(1 - out.delay_s / kept)
        previous = out.assignment
    # The trace changes something that matters in some round, and re-planning finds it.
    assert max(gains) > 0.05
    assert np.mean(gaps) < 0.02


def test_lost_aggregators_are_closed_and_idle_clients_stay_put():
    # Prepare: 6 clients on 3 aggregators; aggregator 2 is lost; client 5 takes no part.
    topo = random_topology(6, 3, seed=2)
    samples = np.array([100, 120, 80, 90, 150, 0])
    alive = np.array([True, True, False])
    table = _table(topo, samples, alive)
    for idle_at in (0, 1):
        previous = np.array([2, 2, 0, 1, 2, idle_at])
        # Execute
        out = replan_assignment(table, previous)
        # Assert: every client that takes part leaves the lost aggregator; the idle
        # one, which costs nothing anywhere, is not moved.
        assert set(out.assignment[:5].tolist()) <= {0, 1}
        assert out.assignment[5] == idle_at
        assert np.isnan(out.previous_delay_s)  # clients were on a closed aggregator


def test_capacities_are_honoured():
    # Prepare
    topo = random_topology(9, 3, seed=5)
    table = _table(replace(topo, client_samples=np.full(9, 100)))
    # Execute
    out = replan_assignment(table, np.zeros(9, dtype=np.int64), capacity=np.array([3, 3, 3]))
    # Assert
    assert np.bincount(out.assignment, minlength=3).tolist() == [3, 3, 3]
    with pytest.raises(ConfigError, match="entries for 9 clients"):
        replan_assignment(table, np.zeros(4, dtype=np.int64))


def test_the_policy_replans_on_the_rounds_network_every_k_rounds():
    # Prepare: the round loop's view: a setup with the run's costs and shard sizes.
    topo = random_topology(6, 2, seed=8)
    topo = replace(topo, client_samples=np.full(6, 100))
    setup = SimpleNamespace(
        costs=COSTS,
        scheme=SCHEME,
        config=SimpleNamespace(batch_size=32, local_epochs=1),
        n_samples=np.full(6, 100),
    )
    # Round 2 (index 1): client 0's link to aggregator 0 is 100x slower.
    event = TraceEvent(round=2, client=0, aggregator=0, bandwidth_scale=0.01, latency_scale=50)
    net = topo.with_trace((event,)).at_round(1)
    policy = ReplanPolicy(every=2)
    alive, everyone = np.ones(2, dtype=bool), np.ones(6, dtype=bool)
    stay = np.zeros(6, dtype=np.int64)
    kw = {"setup": setup, "participants": everyone, "topology": net}
    # Execute / Assert: round index 1 is not a re-planning round (every 2).
    odd = policy.assignment_for_round(RoundQuery(1, alive, stay, **kw))
    assert odd.tolist() == stay.tolist() and policy.log == []
    # Index 2 is, and it takes client 0 off its congested link, at a lower predicted delay.
    even = policy.assignment_for_round(RoundQuery(2, alive, stay, **kw))
    assert even[0] == 1
    (entry,) = policy.log
    assert entry["round"] == 3 and entry["delay_s"] < entry["previous_delay_s"]
    assert [0, 0, 1] in entry["moved"]
    with pytest.raises(ConfigError, match="interval"):
        ReplanPolicy(every=0)


def test_static_and_replanned_runs_are_charged_on_each_rounds_network(tmp_path):
    # Prepare: a toy run, 6 clients on 2 aggregators, 3 rounds, from one first plan;
    # from round 2 the first plan's aggregator of client 0 is 100x slower to reach and
    # aggregator 1's backbone 50x slower; in round 3 client 5 is out.

    data = write_toy_dataset(tmp_path / "toy", n=120)
    base = resolve_topology("heterogeneous", n_clients=6, n_aggregators=2, seed=1)
    config = SFLConfig(cuts=(1, 2), rounds=3, batch_size=16, seed=2)
    setup = prepare_run(config, dataset=data, model_fn=ToyFactory("mlp"), topology=base)
    first = plan_fixed(
        setup.profile,
        setup.topology,
        "hsfl",
        (1, 2),
        rule="greedy",
        config=PlannerConfig(batch_size=16),
    )
    j0 = int(first.assignment[0])
    trace = (
        TraceEvent(round=2, client=0, aggregator=j0, bandwidth_scale=0.01, latency_scale=100),
        TraceEvent(round=2, backbone=1, bandwidth_scale=0.02),
        TraceEvent(round=3, until=3, client=5, available=False),
    )
    topo = base.with_trace(trace)

    def run(policy):
        s = prepare_run(
            config,
            dataset=data,
            model_fn=ToyFactory("mlp"),
            topology=topo,
            assignment=first.assignment,
            profile=setup.profile,
        )
        return s, run_simulation(s, policy=policy).history

    # Execute
    s_static, static = run(AssignmentPolicy())
    replan = ReplanPolicy()
    s_replan, replanned = run(replan)
    # Assert: each round of both runs costs what the cost model predicts for that
    # round's network, participants and assignment.
    for s, hist, moves in ((s_static, static, False), (s_replan, replanned, True)):
        assignment = first.assignment.copy()
        for r, rec in enumerate(hist):
            for client, old, new in rec["reassigned"]:
                assert assignment[client] == old
                assignment[client] = new
            out = topo.available_at(r)
            samples = np.where(out, s.n_samples, 0)
            table = round_table(s.costs, s.scheme, topo.at_round(r), samples, batch_size=16)
            assert rec["delay_s"] == pytest.approx(evaluate_assignment(table, 0, assignment)[0])
            assert rec["participants"] == int(out.sum())
        assert bool(sum(len(rec["reassigned"]) for rec in hist)) == moves
    # The static run suffers the congestion; re-planning moves clients off it, and its
    # predictions are the simulated delays.
    assert static[1]["delay_s"] > 2 * static[0]["delay_s"]
    assert replanned[1]["delay_s"] < 0.8 * static[1]["delay_s"]
    assert sum(r["delay_s"] for r in replanned) < sum(r["delay_s"] for r in static)
    predicted = {e["round"]: e["delay_s"] for e in replan.log}
    for rec in replanned:
        assert rec["delay_s"] == pytest.approx(predicted[rec["round"]], rel=1e-9)


def test_the_policy_honours_the_runs_capacity():
    # Prepare: 6 clients, 2 aggregators, aggregator 0 much faster to reach, so without
    # a limit most clients would go there; the run allows 3 per aggregator.
    topo = random_topology(6, 2, seed=8)
    bw = topo.ca_bandwidth.copy()
    bw[:, 1] *= 0.01
    topo = replace(topo, ca_bandwidth=bw, client_samples=np.full(6, 100))
    config = SimpleNamespace(batch_size=32, local_epochs=1, capacity=(3,))
    setup = SimpleNamespace(costs=COSTS, scheme=SCHEME, config=config, n_samples=np.full(6, 100))
    start = np.array([1, 1, 1, 1, 0, 0])
    query = RoundQuery(0, np.ones(2, bool), start, np.ones(6, bool), topo, setup)
    # Execute
    free = ReplanPolicy(capacity=(6, 6)).assignment_for_round(query)
    capped = ReplanPolicy().assignment_for_round(query)
    # Assert
    assert np.bincount(free, minlength=2)[0] > 3
    assert np.bincount(capped, minlength=2).tolist() == [3, 3]


def test_sfl_run_replan_every_round_with_a_trace_file(tmp_path, monkeypatch, capsys):
    # Prepare: a toy dataset and a trace file congesting every link of aggregator 0
    # (each client's path to it, and its backbone) from round 2.

    monkeypatch.setattr(fed_commands, "_neural_model", lambda *a: ToyFactory("mlp"))
    data = write_toy_dataset(tmp_path / "toy", n=120)
    trace = tmp_path / "trace.toml"
    tables = [f'link = "client:{i}/aggregator:0"\nbandwidth_scale = 0.01' for i in range(4)]
    tables.append('link = "backbone:0"\nlatency_ms = 500')
    trace.write_text("".join(f"[[trace]]\nround = 2\n{t}\n" for t in tables))
    common = [
        str(data),
        "--clients",
        "4",
        "--aggregators",
        "2",
        "--rounds",
        "2",
        "--batch-size",
        "16",
        "--trace",
        str(trace),
        "--quiet",
    ]

    def run(name, *extra):
        out = tmp_path / name
        assert main(["sfl", "run", *common, *extra, "-o", str(out)]) == 0
        return json.loads((out / "metrics.json").read_text()), out

    # Execute
    static, _ = run("static")
    replanned, out = run("replanned", "--replan", "every-round")
    # Assert: same first round; in round 2 the static run pays the congestion and the
    # re-planned one moves its clients off aggregator 0 (round-robin put 2 there).
    s1, s2 = static["rounds"]
    r1, r2 = replanned["rounds"]
    assert s1["delay_s"] == pytest.approx(r1["delay_s"]) and s1["reassigned"] == []
    assert static["rounds"][1]["reassigned"] == []
    assert {move[1] for move in r2["reassigned"]} == {0} and len(r2["reassigned"]) >= 2
    assert r2["delay_s"] < s2["delay_s"] / 2
    assert replanned["config"]["replan"] == "every-round"
    # The run's topology.toml carries the trace, so it can be rerun as it was.
    assert len(read_topology(out / "topology.toml").trace) == 5
    # A bad trace file is one line naming it.
    trace.write_text('[[trace]]\nround = 2\nlink = "client:9"\nlatency_ms = 1\n')
    capsys.readouterr()
    assert main(["sfl", "run", *common, "-o", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"flowsplit: error: {trace}: [[trace]] #1: link: client 9 not in 0..3"
