"""The planner's cost decomposition charges what the engine charges."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.federated.predict import predict_ledger
from flowsplit.federated.schemes import get_scheme
from flowsplit.federated.system.profile import part_costs
from flowsplit.planner.costs import build_cost_table, evaluate_assignment
from tests.planner.helpers import random_topology, small_profile

SCHEMES = ("sfl", "hsfl", "hsfl-ll")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("seed", range(6))
def test_delay_and_bytes_equal_the_engine_prediction(scheme, seed):
    # Prepare: a random topology with missing links and empty shards, every legal cut.
    profile = small_profile()
    n, a = 3 + seed * 2, 1 + seed % 3
    topo = random_topology(n, a, seed, partial_links=True)
    flags = get_scheme(scheme)
    cuts = [(k, k) for k in (1, 2, 3)] if scheme == "sfl" else profile.legal_cuts()
    pcs = [part_costs(profile, *c, local_loss=flags.local_loss) for c in cuts]
    table = build_cost_table(pcs, topo, flags, batch_size=16, local_epochs=2)
    rng = np.random.default_rng(seed)
    assign = np.array([rng.choice(np.flatnonzero(topo.ca_bandwidth[i] > 0)) for i in range(n)])
    for p, pc in enumerate(pcs):
        # Execute: the engine's ledger and delay, and the planner's decomposition.
        led = predict_ledger(pc, topo, assign, scheme=flags, batch_size=16, local_epochs=2)
        expected = flags.round_delay(led, assign).total
        delay, nbytes = evaluate_assignment(table, p, assign)
        # Assert: the same to rounding.
        assert delay == pytest.approx(expected, rel=1e-12)
        assert nbytes == pytest.approx(led.bytes.sum(), rel=1e-12)


@pytest.mark.parametrize("scheme,cuts", [("sfl", (2, 2)), ("hsfl", (1, 2)), ("hsfl-ll", (1, 3))])
def test_planner_predicts_what_the_simulation_charges(tmp_path, scheme, cuts):
    # Prepare: a toy run on a heterogeneous topology with the planner's assignment.
    import torch

    from flowsplit.federated.config import SFLConfig
    from flowsplit.federated.setup import prepare_run
    from flowsplit.federated.sim import run_simulation
    from flowsplit.federated.system.presets import heterogeneous
    from flowsplit.planner.assign import greedy_assign
    from tests.federated._toy import ToyFactory, write_toy_dataset

    torch.set_num_threads(1)
    data = write_toy_dataset(tmp_path / "toy", n=120)
    cfg = SFLConfig(scheme=scheme, cuts=cuts, rounds=1, batch_size=16)
    setup = prepare_run(
        cfg, dataset=data, model_fn=ToyFactory("mlp"), topology=heterogeneous(5, 2, seed=3)
    )
    table = build_cost_table([setup.costs], setup.topology, setup.scheme, batch_size=16)
    assign = greedy_assign(table)[0]
    setup = prepare_run(
        cfg, dataset=data, model_fn=ToyFactory("mlp"), topology=setup.topology, assignment=assign
    )
    # Execute: train one round in the simulation.
    record = run_simulation(setup).history[0]
    # Assert: the planner's delay and bytes are the simulation's.
    delay, nbytes = evaluate_assignment(table, 0, assign)
    assert record["delay_s"] == pytest.approx(delay, rel=1e-9)
    assert record["bytes_total"] == pytest.approx(nbytes, rel=1e-12)
