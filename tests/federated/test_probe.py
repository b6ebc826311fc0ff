"""sfl probe: measured speeds and links become a topology the planner reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flowsplit.federated.probe import all_pairs, probed_topology
from flowsplit.federated.system.presets import homogeneous
from flowsplit.federated.system.schedule import (
    SECONDS,
    Tracer,
    rescale_compute,
)
from flowsplit.federated.system.topology import read_topology, topology_from_toml, topology_to_toml
from tests.federated._toy import ToyFactory, toy_setup


def test_probed_topology_replaces_what_was_measured_and_keeps_the_rest():
    # Prepare: 3 clients, 2 aggregators; client 1's speed, the link client 0 <->
    # aggregator 1 and backbone 0 measured (rows: kind, i, j, speed, rtt, down, up, buffer).
    nominal = homogeneous(3, 2)
    rows = np.array(
        [
            [0, 1, -1, 3e9, 0, 0, 0, np.nan],
            [2, -1, -1, 5e10, 0, 0, 0, np.nan],
            [3, 0, 1, np.nan, 0.004, 1e6, 3e6, 2e5],
            [4, -1, 0, np.nan, 0.010, 5e7, 5e7, 4e5],
        ]
    )
    # Execute
    topo, report = probed_topology(nominal, rows)
    # Assert: measured values in, half the round trip as latency, the mean bandwidth of
    # both directions, each measured link's burst (the median for links not measured:
    # they carry nothing); the rest as given, and listed.
    assert topo.client_speed.tolist() == [1e10, 3e9, 1e10]
    assert topo.server_speed == 5e10
    assert topo.ca_latency[0, 1] == pytest.approx(0.002)
    assert topo.ca_bandwidth[0, 1] == pytest.approx(2e6)
    assert topo.ca_bandwidth[0, 0] == nominal.ca_bandwidth[0, 0]
    assert topo.as_latency[0] == pytest.approx(0.005) and topo.as_bandwidth[1] == 125e6
    assert topo.extra["ca_burst_bytes"][0][1] == pytest.approx(2e5)
    assert topo.extra["ca_burst_bytes"][2][0] == pytest.approx(3e5)
    assert topo.extra["as_burst_bytes"] == pytest.approx([4e5, 3e5])
    assert "stream_buffer_bytes" not in topo.extra
    assert [0, 1] not in report["unmeasured_client_links"]
    assert len(report["unmeasured_client_links"]) == 5
    # The TOML round-trips, bursts included (sfl plan --topology reads it).
    again = topology_from_toml(topology_to_toml(topo))
    assert again.extra["ca_burst_bytes"] == topo.extra["ca_burst_bytes"]
    np.testing.assert_allclose(again.ca_bandwidth, topo.ca_bandwidth)


def test_an_older_probe_that_timed_one_links_buffer_gives_every_stream_that_buffer():
    # Rows of a probe from before per-link bursts: only the first link has the figure.
    nominal = homogeneous(3, 2)
    rows = np.array(
        [
            [3, 0, 1, np.nan, 0.004, 1e6, 3e6, 2e5],
            [3, 1, 1, np.nan, 0.004, 1e6, 3e6, np.nan],
        ]
    )
    topo, _ = probed_topology(nominal, rows)
    assert topo.extra["stream_buffer_bytes"] == pytest.approx(2e5)
    assert "ca_burst_bytes" not in topo.extra


def test_rescale_compute_recharges_each_role_at_its_new_speed():
    old = homogeneous(2, 1)
    new = homogeneous(2, 1)
    new.client_speed[1] = old.client_speed[1] / 4  # client 1 (rank 3) 4x slower
    server, client = Tracer(0, 1), Tracer(3, 1)
    server.work(1.0, "train", 0, 0)
    client.work(0.5, "train", 0, 0)
    trace = np.concatenate([server.array(), client.array()])
    out = rescale_compute(trace, old, new)
    assert out[:, SECONDS].tolist() == [1.0, 2.0]


@pytest.mark.slow
def test_probe_on_loopback_measures_every_pair_and_writes_a_plannable_topology(dataset, tmp_path):
    from flowsplit.federated.dist import launch_roles

    # Prepare: 3 clients, 2 aggregators on 127.0.0.1.
    setup = toy_setup(dataset, 3, 2, scheme="hsfl", cuts=(1, 2), timeout_s=30.0)
    # Execute: the roles only probe.
    got = launch_roles(
        setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path, probe="only"
    )
    # Assert: no run result; a topology with every node's speed and every pair measured.
    assert got is None
    topo = read_topology(tmp_path / "probe.toml")
    assert topo.name == "probed" and topo.n_clients == 3 and topo.n_aggregators == 2
    nominal = setup.topology
    assert np.all(topo.client_speed > 0) and np.all(topo.client_speed != nominal.client_speed)
    assert np.all(topo.aggregator_speed != nominal.aggregator_speed)
    assert len(all_pairs(topo)) == 6
    # Loopback moves far more than 10 MB/s and answers within 100 ms.
    assert np.all(topo.ca_bandwidth > 1e7) and np.all(topo.as_bandwidth > 1e7)
    assert np.all((topo.ca_latency > 0) & (topo.ca_latency < 0.1))
    # Every link's burst was measured (loopback has no shaper: whatever the timing
    # noise gives, between 0 and the sample's payload).
    bursts = np.asarray(topo.extra["ca_burst_bytes"])
    assert bursts.shape == (3, 2) and np.all((bursts >= 0) & np.isfinite(bursts))
    assert len(topo.extra["as_burst_bytes"]) == 2
    # No link was timed before every role had timed its compute (a role computing takes
    # CPU from the link timed): one clock on one host.
    report = json.loads((tmp_path / "probe.json").read_text())
    done = [
        n["compute_done_at"] for who in ("clients", "aggregators") for n in report[who].values()
    ]
    done.append(report["server"]["compute_done_at"])
    assert len(done) == 6 and min(link["timed_at"] for link in report["links"]) >= max(done)
    # No client link was timed beside a backbone: every backbone's timing ended before
    # the first client link's began.
    backbones = [link for link in report["links"] if "backbone" in link]
    client_links = [link for link in report["links"] if "client" in link]
    assert len(backbones) == 2 and len(client_links) == 6
    assert all(link["timed_until"] >= link["timed_at"] for link in report["links"])
    assert min(c["timed_at"] for c in client_links) >= max(b["timed_until"] for b in backbones)
    # Every role that computes timed its steps after a rest too: an extra, never < 0.
    for who, n in (("client", 3), ("aggregator", 2), ("server", 1)):
        extras = topo.extra[f"{who}_cold_extra"]
        assert len(extras) == n and all(np.isfinite(v) and v >= 0 for v in extras)


def test_probed_topology_keeps_the_transport_cpu_and_busy_sender_delays():
    # Rows of 11 columns (of 13): speed rows with (message CPU s, CPU s per byte received,
    # per byte sent: aggregator 1 only; a client times no send), link rows with the lower
    # end's busy-sender delay (client 0 over two links, aggregator 1 over the backbone).
    nominal = homogeneous(2, 2)
    nan = np.nan
    rows = np.array(
        [
            [0, 0, -1, 3e9, 0.1, 0.002, 0, nan, 2e-4, 1e-9, nan],
            [1, -1, 1, 3e9, 0.2, 0.002, 0, nan, 1e-4, 2e-9, 3e-10],
            [3, 0, 0, nan, 0.004, 1e6, 1e6, nan, nan, nan, 0.004],
            [3, 0, 1, nan, 0.004, 1e6, 1e6, nan, nan, nan, 0.006],
            [4, -1, 1, nan, 0.004, 1e7, 1e7, nan, nan, nan, 0.008],
        ]
    )
    topo, report = probed_topology(nominal, rows)
    assert topo.extra["client_recv_cpu_s"] == [2e-4, 0.0]  # client 1: not measured
    assert topo.extra["aggregator_byte_cpu_s"] == [0.0, 2e-9]
    assert topo.extra["aggregator_send_byte_cpu_s"] == [0.0, 3e-10]
    assert topo.extra["client_send_byte_cpu_s"] == [0.0, 0.0]
    assert "send_byte_cpu_s" not in report["clients"]["0"]
    assert report["aggregators"]["1"]["send_byte_cpu_s"] == 3e-10
    assert topo.extra["client_busy_wake_s"] == [0.005, 0.0]  # median of its links
    assert topo.extra["aggregator_busy_wake_s"] == [0.0, 0.008]
    assert report["clients"]["0"]["recv_cpu_s"] == 2e-4
    again = topology_from_toml(topology_to_toml(topo))
    assert again.extra["client_busy_wake_s"] == [0.005, 0.0]
    # No step extra after a rest in these (older) rows: none in the topology.
    assert topo.extra["client_cold_extra"] == [0.0, 0.0]
    assert "cold_extra" not in report["clients"]["0"]


def test_probed_topology_keeps_each_roles_step_extra_after_a_rest():
    # Speed rows carry the extra in the burst column (8th): client 1 +40 %, the server
    # +150 %; client 0 and the aggregators computed nothing (NaN).
    nominal = homogeneous(2, 1)
    nan = np.nan
    rows = np.array(
        [
            [0, 0, -1, 3e9, 0.1, 0.002, 0, nan, 2e-4, 1e-9, nan],
            [0, 1, -1, 3e9, 0.1, 0.002, 0, 0.4, 2e-4, 1e-9, nan],
            [1, -1, 0, nan, 0.2, 0.002, 0, nan, 1e-4, 2e-9, 3e-10],
            [2, -1, -1, 9e9, 0.3, 0.004, 0, 1.5, 1e-4, 2e-9, 3e-10],
        ]
    )
    topo, report = probed_topology(nominal, rows)
    assert topo.extra["client_cold_extra"] == [0.0, 0.4]
    assert topo.extra["server_cold_extra"] == [1.5]
    assert topo.extra["aggregator_cold_extra"] == [0.0]
    assert report["server"]["cold_extra"] == 1.5 and "cold_extra" not in report["clients"]["0"]
    again = topology_from_toml(topology_to_toml(topo))
    assert again.extra["server_cold_extra"] == [1.5]


def test_the_compute_probe_times_steps_back_to_back_for_as_long_as_asked():
    import time
    from types import SimpleNamespace

    import torch

    from flowsplit.federated.probe import PROBE_STEPS, full_speed_seconds, time_train_step

    # A server part (tier 2: its own loss) of one linear layer, plain SGD.
    module = SimpleNamespace(part=torch.nn.Linear(8, 3), aux=None)
    module.parameters = module.part.parameters
    ctx = SimpleNamespace(make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
    start = time.perf_counter()
    cpu_start = time.process_time()
    wall, steps, cpu = time_train_step(module, x, y, 2, ctx, sustain_s=0.05)
    # Back to back: at least PROBE_STEPS steps and at least 0.05 s, in one stretch; the
    # CPU time is the steps' (some of the 0.05 s, none of the time before them).
    assert steps >= PROBE_STEPS and 0.05 <= wall <= time.perf_counter() - start
    assert 0 < cpu <= time.process_time() - cpu_start
    one, n, one_cpu = time_train_step(module, x, y, 2, ctx)
    assert n == 1 and 0 < one < wall and 0 <= one_cpu < cpu
    # Under a quota (share 0.1, burst 2 ms) half a second of wall is 2 ms + 49.8 ms of CPU.
    assert full_speed_seconds(0.5, 0.1, 0.002) == pytest.approx(0.002 + 0.498 * 0.1)


def test_fit_burst_finds_the_bucket_of_a_shaped_link_and_none_on_a_plain_one():
    from flowsplit.federated.probe import fit_burst

    # Payloads of 10-160 ms at 5 MB/s through a 50 kB bucket: each takes
    # (n - 50 kB) / rate after the one-byte payload's time; waits of up to 2 ms added.
    sizes = np.array([5e6 * f for f in (0.01, 0.02, 0.04, 0.08, 0.16)])
    shaped = np.maximum(sizes - 50e3, 0) / 5e6
    waits = np.random.default_rng(0).uniform(0, 0.002, sizes.size)
    assert fit_burst(sizes, shaped, 5e6) == pytest.approx(50e3, abs=1e3)
    assert fit_burst(sizes, shaped + waits, 5e6) == pytest.approx(50e3, abs=10e3)
    # A payload that waited out a throttled CPU period (+80 ms) moves the median
    # little; a fitted rate read it as a slower link and the bucket as 0.
    stalled = shaped + np.array([0, 0, 0, 0, 0.08])
    assert fit_burst(sizes, stalled, 5e6) == pytest.approx(50e3, abs=10e3)
    assert fit_burst(sizes, sizes / 5e6, 5e6) == 0.0  # no bucket
    assert fit_burst(sizes, np.zeros(5), 5e6) == 0.0  # too fast to tell: no burst that matters
