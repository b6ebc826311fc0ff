"""The distributed runner: real processes over gloo on 127.0.0.1, against the simulation."""

from __future__ import annotations

import pytest
import torch

from flowsplit.federated.dist import launch_roles
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.costs import CostMeter
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    AGGREGATOR,
    CLIENT,
    HEADER_NUMEL,
    MODEL,
    Recv,
    Send,
    decode_header,
    encode_header,
)
from flowsplit.federated.transport import GlooTransport
from flowsplit.train.distributed import read_dist_env
from tests.federated._toy import ToyFactory, toy_setup


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scheme", "cuts"), [("hsfl", (1, 2)), ("sfl", (2, 2)), ("hsfl-ll", (1, 3))]
)
def test_sim_and_dist_report_identical_bytes_and_weights(dataset, tmp_path, scheme, cuts):
    # Prepare: 3 clients, 2 aggregators, 1 round, fixed seed.
    setup = toy_setup(dataset, 3, 2, scheme=scheme, cuts=cuts, timeout_s=30.0)
    # Execute: in process, then as 6 processes (server, 2 aggregators, 3 clients).
    sim = run_simulation(setup)
    dist = launch_roles(
        setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path, quiet=True
    )
    # Assert: the same bytes per hop, direction and type; every byte sent was received;
    # the same final weights; the same simulated delay.
    s, d = sim.history[0], dist.history[0]
    assert d["bytes"] == s["bytes"]
    assert d["bytes_total"] == s["bytes_total"] == d["bytes_received_total"]
    assert d["delay_s"] == pytest.approx(s["delay_s"], rel=1e-12)
    assert d["accuracy"] == s["accuracy"]
    for key, value in sim.model_state.items():
        torch.testing.assert_close(dist.model_state[key], value, rtol=1e-6, atol=1e-7)
    assert (tmp_path / "metrics.json").is_file() and (tmp_path / "topology.toml").is_file()


@pytest.mark.slow
def test_clients_that_disappear_or_hang_are_dropped_not_waited_for(dataset, tmp_path):
    # Prepare: client 1's process exits and client 2 stops answering at round 2.
    setup = toy_setup(
        dataset,
        4,
        2,
        scheme="hsfl",
        cuts=(1, 2),
        rounds=3,
        timeout_s=5.0,
        exit_clients={1: 1},
        hang_clients={2: 1},
        min_clients=2,
    )
    # Execute
    result = launch_roles(
        setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path, quiet=True
    )
    # Assert: the run finishes, round 2 and 3 go on without them, with clear log lines.
    lost = [r["lost"] for r in result.history]
    assert lost == [[], [1, 2], [1, 2]]
    assert [r["participants"] for r in result.history] == [4, 2, 2]
    assert result.history[2]["bytes_total"] < result.history[0]["bytes_total"]
    logs = "".join(p.read_text() for p in (tmp_path / "logs").glob("aggregator-*.log"))
    assert "lost client 2 (nothing for 5 s); it is dropped" in logs
    assert "lost client 1 (" in logs


class _FakeWork:
    def wait(self, timeout=None):
        return True


class _FakeGroup:
    """Records what would be handed to gloo, and plays back queued tensors on recv."""

    def __init__(self):
        self.sent: list[torch.Tensor] = []
        self.inbox: list[torch.Tensor] = []

    def send(self, tensors, rank, tag):
        self.sent.append(tensors[0].clone())
        return _FakeWork()

    def recv(self, tensors, rank, tag):
        tensors[0].copy_(self.inbox.pop(0))
        return _FakeWork()


def test_transport_charges_the_nbytes_of_every_tensor_handed_to_gloo():
    # Prepare: a client talking to aggregator 0 through a recording group.
    topo = resolve_topology("homogeneous", n_clients=1, n_aggregators=1)
    meter = CostMeter(topo)
    group = _FakeGroup()
    me, agg = (CLIENT, 0), (AGGREGATOR, 0)
    transport = GlooTransport(me, {agg: (group, 0)}, meter, drop_timeout=1, wait_timeout=1)
    payloads = [torch.randn(3, 5), torch.arange(4), None]
    # Execute
    for p in payloads:
        transport.send(Send(agg, p, ACTIVATIONS if p is not None else MODEL, 0))
    # Assert: headers and payloads both counted, exactly their nbytes.
    assert meter.ledger.bytes_total == sum(t.nbytes for t in group.sent)
    assert len(group.sent) == 5  # 3 headers + 2 payloads
    # And a received message is decoded from its header and counted on arrival.
    group.inbox = [encode_header(torch.zeros(2, 2)), torch.ones(2, 2)]
    got = transport.recv(Recv(agg, MODEL))
    assert torch.equal(got, torch.ones(2, 2))
    assert transport.received.sum() == HEADER_NUMEL * 8 + 16


def test_headers_round_trip_and_announce_dropped_clients():
    for t in (torch.zeros(2, 3, 4, 5, 6, 7, 1), torch.zeros((), dtype=torch.int64)):
        assert decode_header(encode_header(t)) == (t.dtype, tuple(t.shape))
    assert decode_header(encode_header(None)) is None
    # A corrupt header (negative or huge dimensions) is refused, not allocated.
    for dims in ((-1, 4), (1 << 20, 1 << 20)):
        bad = encode_header(torch.zeros(1, 1))
        bad[3], bad[4] = dims
        with pytest.raises(ValueError, match="corrupt message header"):
            decode_header(bad)


def test_dist_env_is_read_from_torchrun_variables():
    # The sfl runner reads its place in a torchrun launch with train's one reader.
    assert not read_dist_env({}).is_distributed
    env = read_dist_env({"RANK": "3", "WORLD_SIZE": "6", "MASTER_ADDR": "10.0.0.1"})
    assert env.is_distributed
    assert (env.rank, env.world_size, env.master_addr) == (3, 6, "10.0.0.1")
