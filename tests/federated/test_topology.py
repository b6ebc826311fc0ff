"""Topologies: presets, the seeded generator, TOML in and out, validation, assignment."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.errors import ConfigError, InputError
from flowsplit.federated.system.presets import PRESETS, generate_topology, resolve_topology
from flowsplit.federated.system.topology import (
    assign_clients,
    read_topology,
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
