"""The cost model: a round's delay and bytes worked out by hand, and the simulation's
message-by-message ledger equal to the closed-form prediction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flowsplit.federated.config import SFLConfig
from flowsplit.federated.predict import predict_ledger
from flowsplit.federated.schemes import get_scheme, make_round_plan
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import SimRuntime, run_coroutines
from flowsplit.federated.system.costs import CostMeter, Ledger, transfer_time
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.federated.system.profile import BlockProfile, part_costs
from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    CLIENT,
    CONTROL,
    HEADER_NBYTES,
    LABELS,
    SERVER_ADDRESS,
    Recv,
    Send,
)
from flowsplit.federated.system.topology import Topology
from tests.federated._toy import ToyFactory, write_toy_dataset

HAND_PROFILE = BlockProfile(
    model="hand",
    block_names=("b1", "b2", "b3"),
    block_types=("t", "t", "t"),
    input_shape=(8,),
    input_bytes=32,
    n_classes=2,
    fwd_flops=np.array([100.0, 200.0, 50.0]),
    params=np.array([10, 20, 5]),
    state_numel=np.array([10, 20, 5]),
    out_shapes=((10,), (5,), (3,)),
    out_bytes=np.array([40, 20, 12]),
    bwd_ratio_by_type={"t": 2.0},
)

HAND_TOPOLOGY = Topology(
    name="hand",
    client_speed=np.array([1000.0, 500.0]),
    client_memory=np.array([2**30, 2**30]),
    client_samples=np.array([4, 2]),
    aggregator_speed=np.array([2000.0]),
    server_speed=10000.0,
    ca_latency=np.full((2, 1), 0.1),
    ca_bandwidth=np.full((2, 1), 1000.0),
    as_latency=np.array([0.2]),
    as_bandwidth=np.array([10000.0]),
)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    assert transfer_time(500, 0.1, 1000.0) == pytest.approx(0.6)


def test_hsfl_round_delay_and_bytes_worked_out_by_hand():
    # Prepare: cuts (1, 2): client b1 (300 training FLOPs/sample), aggregator b2 (600),
    # server b3 (150); 40 B/sample cross cut a, 20 B/sample cut c; headers 80 B.
    # Client 0: 4 samples = 2 batches of 2 at 1000 FLOP/s; client 1: 1 batch at 500.
    costs = part_costs(HAND_PROFILE, 1, 2)
    assert HEADER_NBYTES == 80
    # Execute
    led = predict_ledger(
        costs, HAND_TOPOLOGY, np.array([0, 0]), scheme=get_scheme("hsfl"), batch_size=2
    )
    delay = get_scheme("hsfl").round_delay(led, np.array([0, 0]))
    # Assert, per batch of 2 on the client link (0.1 s, 1000 B/s):
    #   activations 80+80=160 B -> 0.26 s, labels 80+16=96 B -> 0.196 s, gradients 0.26 s
    # and on the backbone (0.2 s, 10 kB/s):
    #   activations 80+40=120 B -> 0.212 s, labels 96 B -> 0.2096 s, gradients 0.212 s.
    # Client 0 chain: compute 300*4/1000 = 1.2, link 2*0.716 = 1.432, aggregator
    #   600*4/2000 = 1.2, backbone 2*0.6336 = 1.2672, server 150*4/1e4 = 0.06 -> 5.1592.
    # Client 1 chain: 1.2 + 0.716 + 0.6 + 0.6336 + 0.03 = 3.1796.
    # Aggregator queue 1.8 s, backbone busy 3*336/1e4 = 0.1008 s, server 0.09 s.
    assert led.client_compute.tolist() == pytest.approx([1.2, 1.2])
    assert led.aggregator_load.tolist() == pytest.approx([1.8])
    assert delay.train == pytest.approx(5.1592)
    assert delay.bottleneck == "chain"
    # Download: parts of 10 and 20 floats -> 120 + 160 B over the backbone: 0.2 + 0.028;
    # then 120 B to each client: 0.1 + 0.12 -> 0.448 s.
    assert delay.download == pytest.approx(0.448)
    # Upload: client part + count (120 + 88 B): 0.1 + 0.208; averaging 2*10*2/2000 = 0.02;
    # backbone 120 + 160 + 88 B: 0.2 + 0.0368; server averaging 2*30*1/1e4 = 0.006.
    assert delay.upload == pytest.approx(0.5708)
    assert delay.total == pytest.approx(0.448 + 5.1592 + 0.5708)
    b = led.bytes_breakdown()
    ca, asv = b["client-aggregator"], b["aggregator-server"]
    assert ca["up"] == {
        "activations": 480,
        "gradients": 0,
        "labels": 288,
        "model": 240,
        "control": 176,
    }
    assert ca["down"]["gradients"] == 480 and ca["down"]["model"] == 240
    assert asv["up"] == {
        "activations": 360,
        "gradients": 0,
        "labels": 288,
        "model": 280,
        "control": 88,
    }
    assert asv["down"]["gradients"] == 360 and asv["down"]["model"] == 280
    assert led.bytes_total == 1904 + 1656


def test_sfl_relays_one_model_copy_per_client_over_the_backbone():
    # Prepare: two-tier cut a == c == 1.
    costs = part_costs(HAND_PROFILE, 1, 1)
    # Execute
    led = predict_ledger(
        costs,
        HAND_TOPOLOGY,
        np.array([0, 0]),
        scheme=get_scheme("sfl", sfl_version="v1"),
        batch_size=2,
    )
    b = led.bytes_breakdown()["aggregator-server"]
    # Assert: 2 copies of the 120 B client part down, 2 x (120 + 88) up; relayed
    # activations keep cut a's 40 B/sample: 3 batches x (80 + 80) = 480 B.
    assert b["down"]["model"] == 240
    assert b["up"]["model"] == 240 and b["up"]["control"] == 176
    assert b["up"]["activations"] == 480
    # No aggregator compute; server averages 2 client parts (10) and 2 copies (25 values):
    assert led.aggregator_load.tolist() == [0.0]
    assert led.server_averaging[0] == pytest.approx((2 * 10 * 2 + 2 * 25 * 2) / 10000)


def test_local_loss_chain_does_not_wait_for_upper_tiers():
    # Prepare
    costs = part_costs(HAND_PROFILE, 1, 2, local_loss=True)
    # Execute
    led = predict_ledger(
        costs, HAND_TOPOLOGY, np.array([0, 0]), scheme=get_scheme("hsfl-ll"), batch_size=2
    )
    delay = get_scheme("hsfl-ll").round_delay(led, np.array([0, 0]))
    # Assert: no gradients anywhere; the train term is the aggregator queue, since it
    # exceeds every client's own work (compute vs. busy link).
    b = led.bytes_breakdown()
    assert b["client-aggregator"]["down"]["gradients"] == 0
    assert b["aggregator-server"]["down"]["gradients"] == 0
    chains = np.maximum(led.client_compute, led.client_busy)
    assert delay.train == pytest.approx(max(chains.max(), led.aggregator_load[0]))


@pytest.fixture(scope="module")
def toy_dataset(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "ds", n=200)


@pytest.mark.parametrize(
    ("scheme", "cuts", "version"),
    [
        ("sfl", (2, 2), "v1"),
        ("sfl", (1, 1), "v2"),
        ("hsfl", (1, 3), "v1"),
        ("hsfl", (2, 2), "v1"),
        ("hsfl-ll", (1, 2), "v1"),
        ("hsfl-ll", (3, 3), "v1"),
    ],
)
def test_simulated_ledger_equals_the_closed_form_prediction(toy_dataset, scheme, cuts, version):
    # Prepare: a heterogeneous topology, dropouts and stragglers in the round.
    cfg = SFLConfig(
        scheme=scheme,
        cuts=cuts,
        sfl_version=version,
        rounds=1,
        batch_size=16,
        drop_prob=0.3,
        straggler_prob=0.5,
        seed=3,
    )
    topo = resolve_topology("heterogeneous", n_clients=6, n_aggregators=2, seed=1)
    setup = prepare_run(cfg, dataset=toy_dataset, model_fn=ToyFactory("cnn"), topology=topo)
    runtime = SimRuntime(setup)
    plan = make_round_plan(cfg, 0, setup.n_samples)
    assert 0 < plan.participants.sum() < 6  # the faults really happen
    # Execute
    outcome = runtime.execute_round(plan)
    predicted = predict_ledger(
        setup.costs,
        setup.topology,
        setup.assignment,
        scheme=setup.scheme,
        batch_size=cfg.batch_size,
        participants=plan.participants,
        slowdown=plan.slowdown,
    )
    # Assert: every account agrees.
    for f in dataclasses.fields(Ledger):
        np.testing.assert_allclose(
            getattr(outcome.ledger, f.name), getattr(predicted, f.name), rtol=1e-9, err_msg=f.name
        )


def test_bytes_charged_equal_the_nbytes_of_the_tensors_sent():
    # Prepare: a client sends three tensors of different dtypes; the aggregator takes them.
    topo = resolve_topology("homogeneous", n_clients=1, n_aggregators=1)
    meter = CostMeter(topo)
    sent = [torch.randn(4, 3, 2), torch.arange(7), torch.ones(5, dtype=torch.float64)]
    agg = ("aggregator", 0)

    def client():
        yield Send(agg, sent[0], ACTIVATIONS, 0)
        yield Send(agg, sent[1], LABELS, 0)
        yield Send(agg, sent[2], CONTROL, 0)

    got = []

    def aggregator():
        for kind in (ACTIVATIONS, LABELS, CONTROL):
            got.append((yield Recv((CLIENT, 0), kind)))

    # Execute
    run_coroutines({(CLIENT, 0): client(), agg: aggregator()}, meter)
    # Assert: 96 + 56 + 40 payload bytes, plus an 80-byte header each.
    assert [t.nbytes for t in sent] == [96, 56, 40]
    assert meter.ledger.bytes_total == sum(t.nbytes for t in sent) + 3 * HEADER_NBYTES
    assert all(torch.equal(a, b) for a, b in zip(got, sent, strict=True))


def test_a_real_round_charges_exactly_what_its_roles_send(toy_dataset):
    # Prepare: intercept every Send of every role of one hsfl round.
    cfg = SFLConfig(scheme="hsfl", cuts=(1, 2), rounds=1, batch_size=16)
    topo = resolve_topology("homogeneous", n_clients=3, n_aggregators=2)
    setup = prepare_run(cfg, dataset=toy_dataset, model_fn=ToyFactory("mlp"), topology=topo)
    runtime = SimRuntime(setup)
    plan = make_round_plan(cfg, 0, setup.n_samples)
    seen: list[int] = []

    def spy(gen):
        value = None
        while True:
            try:
                op = gen.send(value)
            except StopIteration:
                return
            if type(op) is Send:
                seen.append(HEADER_NBYTES + (0 if op.tensor is None else op.tensor.nbytes))
            value = yield op

    coros = {addr: spy(c) for addr, c in runtime.coroutines(plan).items()}
    runtime.ctx.meter.start_round(plan.slowdown)
    # Execute
    run_coroutines(coros, runtime.ctx.meter, runtime.rng_states)
    # Assert
    assert runtime.ctx.meter.ledger.bytes_total == sum(seen)
    assert runtime.ctx.meter.ledger.messages.sum() == len(seen)
    assert SERVER_ADDRESS in coros


def test_meter_hop_table_agrees_with_the_protocol():
    from flowsplit.federated.system.costs import _HOP_DIR
    from flowsplit.federated.system.protocol import DIRECTIONS, HOPS, hop_of

    for (a, b), (h, d) in _HOP_DIR.items():
        assert hop_of((a, 0), (b, 0)) == (HOPS[h], DIRECTIONS[d])


def test_every_scheme_name_has_one_definition():
    # Prepare / Execute: the names the config accepts and the scheme classes.
    from flowsplit.federated.config import SCHEMES
    from flowsplit.federated.schemes import SCHEME_CLASSES, HierarchicalSplitFedLocalLoss

    # Assert: one class per name, and the name-to-object lookup gives that class.
    assert tuple(SCHEME_CLASSES) == SCHEMES
    for name in SCHEMES:
        assert type(get_scheme(name)) is SCHEME_CLASSES[name]
    assert get_scheme("sfl", sfl_version="v2").version == "v2"
    assert isinstance(get_scheme("hsfl-ll"), HierarchicalSplitFedLocalLoss)
