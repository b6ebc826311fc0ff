"""Topologies: presets, the seeded generator, TOML in and out, validation, assignment."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flowsplit.errors import ConfigError, InputError
from flowsplit.federated.system.presets import PRESETS, generate_topology, resolve_topology
from flowsplit.federated.system.topology import (
    assign_clients,
    random_trace,
    read_topology,
    resolve_trace,
    topology_from_toml,
    topology_to_toml,
    write_topology,
)


def _same(a, b) -> None:
    assert a.name == b.name and a.server_speed == b.server_speed
    for key in (
        "client_speed",
        "client_memory",
        "client_samples",
        "aggregator_speed",
        "ca_latency",
        "ca_bandwidth",
        "as_latency",
        "as_bandwidth",
    ):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_valid_and_survives_a_toml_round_trip(name, tmp_path):
    # Prepare
    topo = resolve_topology(name, n_clients=7, n_aggregators=3, seed=4)
    topo = topo.with_samples(np.arange(7) * 10)
    # Execute
    back = read_topology(write_topology(topo, tmp_path / "t.toml"))
    # Assert: exactly the same numbers (floats written with repr).
    assert (topo.n_clients, topo.n_aggregators) == (7, 3)
    _same(topo, back)


def test_generator_is_seeded():
    # Execute
    a, b = generate_topology(20, 4, seed=1), generate_topology(20, 4, seed=1)
    c = generate_topology(20, 4, seed=2)
    # Assert
    _same(a, b)
    assert not np.array_equal(a.client_speed, c.client_speed)


def test_preset_defaults_apply_when_counts_are_not_given():
    # Execute
    topo = resolve_topology("many-clients")
    # Assert: the preset's own counts.
    assert (topo.n_clients, topo.n_aggregators) == (100, 4)


def test_a_hand_written_toml_with_scalar_links_is_read():
    # Prepare: scalar latency/bandwidth apply to every aggregator.
    text = """
name = "tiny"
[server]
speed_flops = 1e12
[[aggregators]]
speed_flops = 1e11
latency_s = 0.01
bandwidth_Bps = 1e8
[[aggregators]]
speed_flops = 2e11
latency_s = 0.02
bandwidth_Bps = 1e8
[[clients]]
speed_flops = 1e9
latency_s = 0.005
bandwidth_Bps = [1e7, 0]
"""
    # Execute
    topo = topology_from_toml(text)
    # Assert
    assert topo.ca_latency.tolist() == [[0.005, 0.005]]
    assert topo.ca_bandwidth.tolist() == [[1e7, 0.0]]
    assert topology_from_toml(topology_to_toml(topo)).ca_bandwidth.tolist() == [[1e7, 0.0]]
    # Client 0 has no link to aggregator 1: only aggregator 0 is a legal choice.
    assert assign_clients(topo, "random", seed=3).tolist() == [0]
    with pytest.raises(ConfigError, match="no link"):
        topo.check_assignment(np.array([1]))


def test_bad_topologies_raise_clear_errors(tmp_path):
    # Prepare
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[server]\nspeed_flops = 1\n')
    # Execute / Assert
    with pytest.raises(InputError, match="missing key 'aggregators'"):
        read_topology(bad)
    with pytest.raises(ConfigError, match="neither a preset"):
        resolve_topology("nope")
    with pytest.raises(ConfigError, match="describes 7 clients"):
        topo = resolve_topology("homogeneous", n_clients=7, n_aggregators=2)
        resolve_topology(str(write_topology(topo, tmp_path / "t.toml")), n_clients=3)
    with pytest.raises(ConfigError, match="server_speed"):
        topo = resolve_topology("homogeneous", n_clients=2, n_aggregators=1)
        type(topo)(**{**topo.__dict__, "server_speed": 0.0})


def test_assignment_rules():
    # Prepare: 5 clients, 2 aggregators, client 3 closer to aggregator 1.
    topo = resolve_topology("homogeneous", n_clients=5, n_aggregators=2)
    topo.ca_latency[3, 1] = 0.001
    # Execute / Assert
    assert assign_clients(topo, "round-robin").tolist() == [0, 1, 0, 1, 0]
    assert assign_clients(topo, "nearest").tolist() == [0, 0, 0, 1, 0]
    r = assign_clients(topo, "random", seed=0)
    assert r.tolist() == assign_clients(topo, "random", seed=0).tolist()
    assert set(r.tolist()) <= {0, 1}


# --- traces: per-round changes of links and availability --------------------------------

_TINY = """
name = "tiny"
[server]
speed_flops = 1e12
[[aggregators]]
speed_flops = 1e11
latency_s = 0.02
bandwidth_Bps = 1e8
[[aggregators]]
speed_flops = 1e11
latency_s = 0.03
bandwidth_Bps = 2e8
[[clients]]
speed_flops = 1e9
latency_s = [0.005, 0.007]
bandwidth_Bps = [1e7, 2e7]
[[clients]]
speed_flops = 1e9
latency_s = 0.004
bandwidth_Bps = [4e7, 0]
"""


def test_a_trace_changes_links_and_availability_from_its_round_on(tmp_path):
    # Prepare: four changes, two of them on the same link (the later-starting wins).
    text = (
        _TINY
        + """
[[trace]]
round = 2
link = "client:0"
bandwidth_mbps = 8.0
latency_ms = 40
[[trace]]
round = 3
until = 3
link = "client:0/aggregator:1"
bandwidth_scale = 0.5
[[trace]]
round = 2
until = 4
link = "backbone:1"
latency_scale = 3.0
[[trace]]
round = 3
client = 1
available = false
"""
    )
    path = tmp_path / "t.toml"
    path.write_text(text)
    # Execute
    topo = read_topology(path)
    r1, r2, r3, r4, r5 = (topo.at_round(k) for k in range(5))
    # Assert: round 1 (index 0) is the base topology itself.
    assert r1 is topo
    # Round 2: client 0's links at 8 Mbit/s = 1e6 B/s and 40 ms; backbone 1 at 3 x 0.03 s.
    assert r2.ca_bandwidth[0].tolist() == [1e6, 1e6]
    assert r2.ca_latency[0].tolist() == [0.04, 0.04]
    assert r2.as_latency.tolist() == [0.02, pytest.approx(0.09)]
    # Round 3: the one link scaled on its base (2e7 * 0.5), not on round 2's value.
    assert r3.ca_bandwidth[0].tolist() == [1e6, 1e7]
    assert r3.ca_latency[0].tolist() == [0.04, 0.04]
    # Round 4: the until = 3 change is over; client 0's own change holds on.
    assert r4.ca_bandwidth[0].tolist() == [1e6, 1e6]
    assert r5.as_latency.tolist() == [0.02, 0.03]
    # Client 1 never gains the link it lacks, and sits out from round 3 on.
    assert r5.ca_bandwidth[1].tolist() == [4e7, 0.0]
    assert topo.available_at(1).tolist() == [True, True]
    assert topo.available_at(2).tolist() == [True, False]
    assert topo.available_at(40).tolist() == [True, False]
    # The base is untouched, and the trace survives a TOML round trip exactly.
    assert topo.ca_bandwidth[0].tolist() == [1e7, 2e7]
    back = read_topology(write_topology(topo, tmp_path / "back.toml"))
    assert back.trace == topo.trace
    _same(back.at_round(2), r3)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('link = "client:0"\nbandwidth_mbps = 1', "#1: round: missing"),
        ('round = 0\nlink = "client:0"\nbandwidth_mbps = 1', "#1: round: must be an integer >= 1"),
        ('round = 2\nuntil = 1\nlink = "client:0"\nlatency_ms = 1', "until must be an integer"),
        ('round = 2\nlink = "client:9"\nbandwidth_mbps = 1', "#1: link: client 9 not in 0..1"),
        ('round = 2\nlink = "backbone:5"\nlatency_ms = 1', "#1: link: aggregator 5 not in 0..1"),
        ('round = 2\nlink = "client:1/aggregator:1"\nlatency_ms = 1', "no link to aggregator 1"),
        ('round = 2\nlink = "server:0"\nlatency_ms = 1', "#1: link: 'server:0': write"),
        ('round = 2\nlink = "client:0"\nbandwidth_mbps = 0', "#1: bandwidth_mbps: must be"),
        ('round = 2\nlink = "client:0"\nlatency_ms = -1', "#1: latency_ms: must be finite"),
        ('round = 2\nlink = "client:0"\nbandwidth_mbps = "fast"', "must be a number"),
        ('round = 2\nlink = "client:0"\nbandwidth_mbps = 1\nbandwidth_Bps = 1', "only one of"),
        ('round = 2\nlink = "client:0"', "changes nothing"),
        ('round = 2\nlink = "client:0"\nspeed = 1', "#1: speed: unknown key"),
        ("round = 2\nclient = 0", "#1: available: missing"),
        ("round = 2\nclient = 0\navailable = 1", "#1: available: must be true or false"),
        ("round = 2\navailable = false", "#1: client: missing"),
        ("round = 2\nclient = 5\navailable = false", "#1: client: client 5 not in 0..1"),
    ],
)
def test_bad_trace_entries_give_one_line_naming_the_file_entry_and_key(tmp_path, table, message):
    # Prepare: the tiny topology with one bad [[trace]] table.
    path = tmp_path / "bad.toml"
    path.write_text(_TINY + "\n[[trace]]\n" + table + "\n")
    # Execute / Assert
    with pytest.raises(InputError, match=re.escape(message)) as info:
        read_topology(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_random_trace_is_seeded_valid_and_leaves_round_one_alone():
    # Prepare
    topo = resolve_topology("heterogeneous", n_clients=12, n_aggregators=3, seed=2)
    # Execute
    a, b = random_trace(topo, 15, seed=4), random_trace(topo, 15, seed=4)
    c = random_trace(topo, 15, seed=5)
    # Assert: reproducible, seed-dependent, and every event is one the TOML can hold.
    assert a == b and a != c and len(a) > 10
    with_trace = topo.with_trace(a)
    assert topology_from_toml(topology_to_toml(with_trace)).trace == a
    assert with_trace.at_round(0) is with_trace
    assert all(2 <= e.round <= e.until <= 15 for e in a)
    kinds = {("backbone" if e.backbone >= 0 else "link" if e.changes_links else "out") for e in a}
    assert kinds == {"backbone", "link", "out"}
    for e in a:
        if e.changes_links:
            assert 0.02 <= e.bandwidth_scale <= 0.3 and 2.0 <= e.latency_scale <= 10.0
    # Never more than a quarter of the clients out at once.
    out = [int((~with_trace.available_at(r)).sum()) for r in range(15)]
    assert max(out) <= 3
    with pytest.raises(ConfigError, match="link_rate"):
        random_trace(topo, 5, link_rate=1.5)


def test_resolve_trace_specs(tmp_path):
    # Prepare
    topo = topology_from_toml(_TINY)
    trace_file = tmp_path / "trace.toml"
    trace_file.write_text('[[trace]]\nround = 2\nlink = "backbone:0"\nbandwidth_mbps = 80\n')
    # Execute
    from_file = resolve_trace(topo, str(trace_file), rounds=5)
    generated = resolve_trace(topo, "random:3", rounds=5)
    # Assert
    assert from_file.at_round(1).as_bandwidth.tolist() == [1e7, 2e8]
    assert generated.trace == random_trace(topo, 5, 3)
    assert resolve_trace(generated, "none", rounds=5).trace == ()
    assert resolve_trace(generated, None, rounds=5) is generated
    with pytest.raises(ConfigError, match="random:SEED"):
        resolve_trace(topo, "random:x", rounds=5)
    with pytest.raises(ConfigError, match="no such file"):
        resolve_trace(topo, str(tmp_path / "nope.toml"), rounds=5)
    with pytest.raises(ConfigError, match="random:SEED', or a TOML file"):
        resolve_trace(topo, "sometimes", rounds=5)
    bad = tmp_path / "bad-trace.toml"
    bad.write_text('[[trace]]\nround = 2\nlink = "backbone:7"\nlatency_ms = 1\n')
    with pytest.raises(InputError, match="bad-trace.toml: \\[\\[trace\\]\\] #1: link"):
        resolve_trace(topo, str(bad), rounds=5)


def test_clients_that_would_not_fit_in_memory_are_refused_and_large_runs_that_fit_are_not(
    monkeypatch,
):
    # 16 GiB available: a million clients under 100 aggregators peaked at 8.4 GiB
    # (docs/sfl-scale.md), so it runs; ten million do not fit. The estimate used to be
    # 256 bytes a client and aggregator (measured: 79) and refused the first.
    monkeypatch.setattr("flowsplit.util.available_memory", lambda: 16 << 30)
    from flowsplit.federated.system import presets

    presets._check_memory(1_000_000, 100)
    with pytest.raises(ConfigError, match=r"--clients 10000000 x --aggregators 100: .* GiB"):
        presets._check_memory(10_000_000, 100)
