"""The simulated runner: the schemes learn, runs repeat exactly, faults cost what they should."""

from __future__ import annotations

import pytest
import torch

from flowsplit.federated.config import SFLConfig
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import ProtocolError, run_coroutines
from flowsplit.federated.sim import run_simulation as simulate
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.federated.system.protocol import CLIENT, Recv
from tests.federated._toy import ToyFactory, write_toy_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "ds", n=300)


def _run(dataset, *, clients=4, aggregators=2, topology="homogeneous", **kw):
    cfg = SFLConfig(**{"rounds": 6, "batch_size": 16, "lr": 1e-2, **kw})
    topo = resolve_topology(topology, n_clients=clients, n_aggregators=aggregators, seed=0)
    setup = prepare_run(cfg, dataset=dataset, model_fn=ToyFactory("mlp"), topology=topo)
    return simulate(setup)


@pytest.mark.parametrize(
    ("scheme", "cuts", "version"),
    [
        ("sfl", (1, 1), "v1"),
        ("sfl", (1, 1), "v2"),
        ("hsfl", (1, 2), "v1"),
        ("hsfl-ll", (1, 2), "v1"),
    ],
)
def test_every_scheme_learns_the_toy_task(dataset, scheme, cuts, version):
    # Execute: 6 rounds, 4 clients, 2 aggregators; chance is about 1/3.
    result = _run(dataset, scheme=scheme, cuts=cuts, sfl_version=version)
    acc = [r["accuracy"] for r in result.history]
    # Assert
    assert max(acc) >= 0.7, acc
    assert result.history[-1]["loss"] < result.history[0]["loss"]


def test_runs_repeat_exactly(dataset):
    # Execute: the same configuration twice (dropout in the model, faults in the rounds).
    a = _run(dataset, scheme="hsfl", cuts=(1, 2), rounds=2, drop_prob=0.2)
    b = _run(dataset, scheme="hsfl", cuts=(1, 2), rounds=2, drop_prob=0.2)
    # Assert
    for key, value in a.model_state.items():
        assert torch.equal(value, b.model_state[key]), key
    assert [r["bytes_total"] for r in a.history] == [r["bytes_total"] for r in b.history]


def test_sfl_v2_and_two_tier_hsfl_train_the_same_model_with_fewer_backbone_model_bytes(dataset):
    # Prepare: at a == c hsfl relays activations like sfl v2 (one shared server part);
    # only where client parts are averaged differs (at aggregators, then the server).
    sfl = _run(dataset, scheme="sfl", cuts=(2, 2), sfl_version="v2", rounds=2)
    hsfl = _run(dataset, scheme="hsfl", cuts=(2, 2), rounds=2)
    # Assert: same weights up to the rounding of the two averaging orders.
    for key, value in sfl.model_state.items():
        torch.testing.assert_close(value, hsfl.model_state[key], rtol=1e-4, atol=1e-5)
    s_b, h_b = sfl.totals()["bytes"], hsfl.totals()["bytes"]
    for hop in ("client-aggregator", "aggregator-server"):
        assert s_b[hop]["up"]["activations"] == h_b[hop]["up"]["activations"]
    # 4 clients -> 4 model copies each way over the backbone for sfl, 2 for hsfl.
    assert (
        s_b["aggregator-server"]["down"]["model"] == 2 * h_b["aggregator-server"]["down"]["model"]
    )


def test_dropped_clients_send_nothing_and_stragglers_stretch_the_round(dataset):
    # Execute
    base = _run(dataset, scheme="hsfl", cuts=(1, 2), rounds=3, clients=6)
    drop = _run(dataset, scheme="hsfl", cuts=(1, 2), rounds=3, clients=6, drop_prob=0.5)
    slow = _run(
        dataset,
        scheme="hsfl",
        cuts=(1, 2),
        rounds=3,
        clients=6,
        straggler_prob=0.5,
        straggler_slowdown=100.0,
    )
    # Assert: fewer participants, fewer bytes; stragglers make rounds longer, same bytes.
    dropped = [r["dropped"] for r in drop.history]
    assert sum(dropped) > 0
    for r0, r1 in zip(base.history, drop.history, strict=True):
        assert r1["participants"] == 6 - r1["dropped"]
        assert (r1["bytes_total"] < r0["bytes_total"]) == (r1["dropped"] > 0)
    assert sum(r["stragglers"] for r in slow.history) > 0
    assert sum(r["delay_s"] for r in slow.history) > sum(r["delay_s"] for r in base.history)
    assert [r["bytes_total"] for r in slow.history] == [r["bytes_total"] for r in base.history]


def test_metrics_record_bytes_by_hop_direction_and_type(dataset):
    # Execute
    result = _run(dataset, scheme="hsfl", cuts=(1, 2), rounds=1)
    rec = result.history[0]
    totals = result.totals()
    # Assert
    assert set(rec["bytes"]) == {"client-aggregator", "aggregator-server"}
    assert set(rec["bytes"]["client-aggregator"]) == {"up", "down"}
    assert set(rec["bytes"]["client-aggregator"]["up"]) == {
        "activations",
        "gradients",
        "labels",
        "model",
        "control",
    }
    nested = sum(v for h in rec["bytes"].values() for d in h.values() for v in d.values())
    assert nested == rec["bytes_total"] == totals["bytes_total"]
    assert sum(totals["bytes_by_hop"].values()) == totals["bytes_total"]
    assert rec["delay_s"] > 0 and rec["clock_s"] == rec["delay_s"]
    assert 0.0 <= rec["accuracy"] <= 1.0 and 0.0 <= rec["macro_f1"] <= 1.0


def test_a_protocol_mismatch_is_reported_not_hung():
    # Prepare: a role waiting for a message nobody sends.
    topo = resolve_topology("homogeneous", n_clients=1, n_aggregators=1)
    from flowsplit.federated.system.costs import CostMeter

    def waiting():
        yield Recv((CLIENT, 0), "model")

    # Execute / Assert
    with pytest.raises(ProtocolError, match="deadlock"):
        run_coroutines({("aggregator", 0): waiting()}, CostMeter(topo))


@pytest.mark.parametrize("kind", ["cnn", "rnn"])
@pytest.mark.parametrize("cuts", [(1, 2), (2, 3), (1, 1)])
def test_local_losses_train_heads_on_conv_and_sequence_outputs(dataset, kind, cuts):
    # Prepare: hsfl-ll puts heads on (C, L) conv maps and (T, H) recurrent sequences.
    cfg = SFLConfig(scheme="hsfl-ll", cuts=cuts, rounds=1, batch_size=32, aux_head="auto")
    topo = resolve_topology("homogeneous", n_clients=2, n_aggregators=1)
    setup = prepare_run(cfg, dataset=dataset, model_fn=ToyFactory(kind), topology=topo)
    client, agg, _ = setup.tier_modules()
    before = [p.detach().clone() for p in client.parameters()]
    # Execute
    result = simulate(setup)
    # Assert: the client part moved (its own loss), no gradients travelled down.
    assert client.aux is not None and (agg.aux is not None) == (cuts[1] > cuts[0])
    after = dict(result.model_state)
    first = next(iter(after))
    assert not torch.equal(after[first], before[0])
    assert result.history[0]["bytes"]["client-aggregator"]["down"]["gradients"] == 0
