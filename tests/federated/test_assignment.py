"""The per-round hook: an AssignmentPolicy changes the network and assignment per round."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flowsplit.errors import ConfigError
from flowsplit.federated.assignment import AssignmentPolicy, RoundNetwork, RoundQuery
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.dist import launch_roles
from flowsplit.federated.predict import predict_ledger
from flowsplit.federated.schemes import make_round_plan
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.presets import resolve_topology
from tests.federated._toy import ToyFactory


class Rotate(AssignmentPolicy):
    """From round 1 on, client 0 goes to the next aggregator; backbone 0 is 10^4 times slower."""

    def network_for_round(self, round_index, topology):
        if round_index == 0:
            return RoundNetwork(topology)
        slow = topology.as_bandwidth.copy()
        slow[0] /= 1e4
        return RoundNetwork(dataclasses.replace(topology, as_bandwidth=slow))

    def assignment_for_round(self, query):
        out = query.previous
        if query.round_index == 1:
            out[0] = (out[0] + 1) % len(query.alive)
        return out


class OntoMissing(AssignmentPolicy):
    def assignment_for_round(self, query):
        return np.full_like(query.previous, len(query.alive))  # an aggregator that does not exist


def _setup(dataset, **kw):
    cfg = SFLConfig(**{"rounds": 3, "batch_size": 16, "lr": 1e-2, "seed": 5, **kw})
    topo = resolve_topology("heterogeneous", n_clients=4, n_aggregators=2, seed=2)
    return prepare_run(cfg, dataset=dataset, model_fn=ToyFactory("mlp"), topology=topo)


def test_each_round_is_charged_on_its_own_network_and_assignment(dataset):
    # Prepare: hsfl, 4 clients on 2 aggregators; the policy moves client 0 in round 2
    # (0-based 1) and slows backbone 0 from then on.
    setup = _setup(dataset, scheme="hsfl", cuts=(1, 2))
    first = setup.assignment.copy()
    moved = first.copy()
    moved[0] = (moved[0] + 1) % 2
    # Execute
    result = run_simulation(setup, policy=Rotate())
    # Assert: the records show the move in round 2 only; every round's bytes and delay are
    # the closed-form prediction on that round's topology and assignment.
    h = result.history
    assert [r["reassigned"] for r in h] == [[], [[0, int(first[0]), int(moved[0])]], []]
    slow = Rotate().network_for_round(1, setup.topology).topology
    for r, (topo, assign) in enumerate([(setup.topology, first), (slow, moved), (slow, moved)]):
        plan = make_round_plan(setup.config, r, setup.n_samples)
        predicted = predict_ledger(
            setup.costs,
            topo,
            assign,
            scheme=setup.scheme,
            batch_size=16,
            participants=plan.participants,
            slowdown=plan.slowdown,
        )
        assert h[r]["bytes_total"] == predicted.bytes_total
        delay = setup.scheme.round_delay(predicted, assign).total
        assert h[r]["delay_s"] == pytest.approx(delay, rel=1e-9)
    assert h[1]["delay_s"] > 1.5 * h[0]["delay_s"]  # the slow backbone shows


def test_the_default_policy_changes_nothing(dataset):
    # Prepare / Execute: the same run without a policy and with the default one.
    a = run_simulation(_setup(dataset, scheme="hsfl-ll", cuts=(1, 3)))
    b = run_simulation(_setup(dataset, scheme="hsfl-ll", cuts=(1, 3)), policy=AssignmentPolicy())
    # Assert: bit-identical weights, same records (wall time aside).
    for key, value in a.model_state.items():
        assert torch.equal(b.model_state[key], value)
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in a.history]
    assert strip == [{k: v for k, v in r.items() if k != "wall_s"} for r in b.history]


def test_a_round_query_holds_copies_of_the_runs_arrays():
    # Prepare: the run's state as lists and arrays of other dtypes.
    alive = np.array([1, 0, 1])
    previous = np.array([0, 2, 1], dtype=np.int32)
    participants = [True, False, True]
    # Execute
    query = RoundQuery(4, alive, previous, participants, topology=None, setup=None)
    query.previous[0] = 2
    query.alive[1] = True
    # Assert: typed copies; a policy writing to them leaves the run's arrays alone.
    assert query.alive.dtype == bool and query.previous.dtype == np.int64
    assert query.participants.tolist() == participants
    assert previous.tolist() == [0, 2, 1] and alive.tolist() == [1, 0, 1]


def test_a_policy_that_names_a_missing_aggregator_is_refused(dataset):
    with pytest.raises(ConfigError, match="aggregators outside"):
        run_simulation(_setup(dataset, rounds=1), policy=OntoMissing())


@pytest.mark.slow
def test_dist_follows_the_policy_like_the_simulation(dataset, tmp_path):
    # Prepare: the moving policy; 3 rounds, 4 clients, 2 aggregators.
    setup = _setup(dataset, scheme="hsfl", cuts=(1, 2), timeout_s=30.0)
    # Execute: in process, then as 7 processes (client 0 connects to its new aggregator).
    sim = run_simulation(setup, policy=Rotate())
    dist = launch_roles(
        setup,
        dataset=dataset,
        model_fn=ToyFactory("mlp"),
        out_dir=tmp_path,
        quiet=True,
        policy=Rotate(),
    )
    # Assert: the same records (bytes, delay, accuracy, moves) and the same final weights.
    for s, d in zip(sim.history, dist.history, strict=True):
        assert d["bytes"] == s["bytes"]
        assert d["bytes_total"] == s["bytes_total"] == d["bytes_received_total"]
        assert d["delay_s"] == pytest.approx(s["delay_s"], rel=1e-12)
        assert d["accuracy"] == s["accuracy"]
        assert d["reassigned"] == s["reassigned"]
    assert dist.history[1]["reassigned"]
    for key, value in sim.model_state.items():
        torch.testing.assert_close(dist.model_state[key], value, rtol=1e-6, atol=1e-7)
