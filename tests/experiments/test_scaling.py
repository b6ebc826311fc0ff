"""Scaling model: formulas by hand, and a synthetic case whose parameters are known."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.experiments.dp.scaling import (
    NETWORK_PRESETS,
    Network,
    Workload,
    comm_bytes_per_epoch,
    comm_time,
    fit_allreduce,
    fit_scaling,
    messages_per_epoch,
    relative_errors,
    ring_allreduce_time,
    steps_per_epoch,
    tbf_network,
)

NET = Network("test", latency_s=1e-5, bandwidth_Bps=1e9)


def test_ring_allreduce_time_by_hand():
    # 4 workers, 1 MB: 2*3 latency hops + 2*3/4 * 1e6 B / 1e9 B/s = 6e-5 + 1.5e-3
    assert ring_allreduce_time(1e6, 4, NET) == pytest.approx(1.56e-3)
    assert ring_allreduce_time(1e6, 1, NET) == 0.0


def test_fit_allreduce_recovers_latency_and_bandwidth():
    # Prepare: exact timings from alpha = 150 us, beta = 800 MB/s on 2 workers.
    truth = Network("truth", 150e-6, 800e6)
    sizes = [4, 64, 1024, 1 << 16, 1 << 20, 1 << 24]
    times = [ring_allreduce_time(s, 2, truth) for s in sizes]
    # Execute
    net, max_err = fit_allreduce(sizes, times, n_workers=2)
    # Assert
    assert net.latency_s == pytest.approx(150e-6, rel=1e-6)
    assert net.bandwidth_Bps == pytest.approx(800e6, rel=1e-6)
    assert max_err < 1e-6


def test_tbf_network_charges_framing_and_acks():
    # 10 Mbit/s, MTU 1500: 1448-byte segments in 1514-byte frames, plus one 66-byte ACK
    # per two segments on the link -> 1547 wire bytes per 1448 payload bytes.
    net = tbf_network(10, 16384, mtu=1500, latency_s=0.0)
    assert net.bandwidth_Bps == pytest.approx(1.25e6 * 1448 / 1547)
    assert net.burst_bytes == pytest.approx(16384 * 1448 / 1547)
    # A 125 kB bucket passes 64 KiB GSO packets whole: one ACK per 43 segments.
    fast = tbf_network(100, 125_000, mtu=1500, latency_s=0.0)
    assert fast.bandwidth_Bps == pytest.approx(12.5e6 / (1514 / 1448 + 66 / (43 * 1448)))
    with pytest.raises(ValueError, match="rate"):
        tbf_network(0, 16384)


def test_burst_is_free_once_per_step():
    # Prepare: 1 MB/s payload, a 100 kB bucket; 2 workers send 2 (2-1)/2 * M = M per step.
    net = Network("tbf", 0.0, 1e6, burst_bytes=1e5)
    small = Workload("s", n_samples=640, param_bytes=50_000, batch_size=64, global_batch=True)
    big = Workload("b", n_samples=640, param_bytes=400_000, batch_size=64, global_batch=True)
    # Execute / Assert: 10 steps; the small message fits the bucket, the big one pays
    # (400 kB - 100 kB) / 1 MB/s = 0.3 s a step.
    assert comm_time(small, 2, net) == pytest.approx(0.0)
    assert comm_time(big, 2, net) == pytest.approx(10 * 0.3)
    assert comm_time(big, 2, Network("plain", 0.0, 1e6)) == pytest.approx(10 * 0.4)
    assert comm_time(big, 1, net) == 0.0


def test_ddp_messages_split_into_buckets():
    # Prepare: 30 MiB of gradients = one 25 MiB bucket + one 5 MiB bucket;
    # 1000 samples, 64 per worker, 2 workers -> ceil(1000 / 128) = 8 steps.
    wl = Workload("m", n_samples=1000, param_bytes=30 << 20, batch_size=64)
    # Execute
    msgs = messages_per_epoch(wl, 2)
    # Assert
    assert msgs == [(float(25 << 20), 8), (float(5 << 20), 8)]
    assert steps_per_epoch(wl, 1) == 16
    assert steps_per_epoch(Workload("g", 1000, batch_size=64, global_batch=True), 4) == 16
    assert messages_per_epoch(wl, 1) == []
    # each worker sends 2 (p-1)/p of each message: 8 * 30 MiB for p = 2
    assert comm_bytes_per_epoch(wl, 2) == pytest.approx(8 * (30 << 20))


def test_xgboost_histogram_messages_per_level():
    # Prepare: 10 features x 256 bins x (grad, hess) x 8 B = 40960 B per node;
    # depth 3 with the subtraction trick reduces 1, 1, 2 nodes; 5 rounds x 2 classes.
    wl = Workload(
        "xgb",
        500,
        kind="xgboost",
        n_features=10,
        n_bins=256,
        max_depth=3,
        n_rounds=5,
        trees_per_round=2,
    )
    # Execute / Assert
    assert messages_per_epoch(wl, 4) == [(40960.0, 10), (40960.0, 10), (81920.0, 10)]
    full = Workload("xgb", 500, kind="xgboost", n_features=10, max_depth=3, subtraction_trick=False)
    assert [b for b, _ in messages_per_epoch(full, 2)] == [40960.0, 81920.0, 163840.0]
    # Counted bytes (trees that stopped early): 3 levels x 2 trees share 60 kB per round.
    counted = Workload(
        "xgb",
        500,
        kind="xgboost",
        max_depth=3,
        n_rounds=1,
        trees_per_round=2,
        hist_bytes_per_round=60_000,
    )
    assert messages_per_epoch(counted, 2) == [(10_000.0, 2)] * 3


def _synthetic(wl, c, h, sync, ns, net, cores=0, threads=1):
    """Epoch and all-reduce times generated from known parameters by the model's formula."""
    times, comms = [], []
    for n in ns:
        over = max(1.0, n * threads / cores) if cores else 1.0
        steps = steps_per_epoch(wl, n)
        wire = sum(k * ring_allreduce_time(b, n, net) for b, k in messages_per_epoch(wl, n))
        comm = wire + (steps * sync if n > 1 else 0.0)
        times.append(over * (c * wl.n_samples / n + h * steps) + comm)
        comms.append(comm)
    return times, comms


@pytest.mark.parametrize("cores", [0, 2])
def test_fit_scaling_recovers_known_parameters(cores):
    # Prepare: c = 200 us/sample, h = 3 ms/step, s = 1 ms/step; 157 steps per epoch
    # (10000 samples, global batch 64) whatever N.
    wl = Workload("cnn", n_samples=10_000, param_bytes=400_000, batch_size=64, global_batch=True)
    ns = [1, 2, 4, 8]
    times, comms = _synthetic(wl, 2e-4, 3e-3, 1e-3, ns, NET, cores=cores)
    # Execute
    model = fit_scaling(wl, ns, times, NET, comm_times_s=comms, cores=cores)
    # Assert
    assert model.compute_per_sample_s == pytest.approx(2e-4, rel=1e-6)
    assert model.per_step_s == pytest.approx(3e-3, rel=1e-6)
    assert model.sync_per_step_s == pytest.approx(1e-3, rel=1e-6)
    assert max(abs(e) for e in relative_errors(model, ns, times)) < 1e-6


def test_fit_scaling_xgboost_per_round():
    # Prepare: 20 features x 256 bins, depth 6, 5 classes; c = 1 us/sample/round,
    # h = 20 ms per round (split search), no extra sync.
    wl = Workload(
        "xgb", 50_000, kind="xgboost", n_features=20, max_depth=6, n_rounds=1, trees_per_round=5
    )
    ns = [1, 2, 4]
    times, comms = _synthetic(wl, 1e-6, 2e-2, 0.0, ns, NET)
    # Execute
    model = fit_scaling(wl, ns, times, NET, comm_times_s=comms)
    # Assert: hand check of the N=2 round: 25 ms compute + 20 ms + wire
    # wire = 5 trees x (2 alpha x 6 levels + (1+1+2+4+8+16) x 81920 B / 1e9 B/s)
    wire = 5 * (6 * 2e-5 + 32 * 81920 / 1e9)
    assert times[1] == pytest.approx(0.025 + 0.02 + wire)
    assert model.compute_per_sample_s == pytest.approx(1e-6, rel=1e-6)
    assert model.per_step_s == pytest.approx(2e-2, rel=1e-6)


def test_fit_scaling_with_one_worker_count_fits_compute_only():
    wl = Workload("lstm", n_samples=1000, param_bytes=40_000, batch_size=50)
    times, _ = _synthetic(wl, 1e-3, 0.0, 0.0, [1], NET)
    model = fit_scaling(wl, [1, 1], times + times, NET)
    assert model.per_step_s == 0.0
    assert model.compute_per_sample_s == pytest.approx(1e-3, rel=1e-6)


def test_curve_speedup_and_efficiency():
    # Prepare: compute-bound workload on a fast network -> near-linear speedup.
    wl = Workload("cnn", n_samples=100_000, param_bytes=40_000, batch_size=64)
    model = fit_scaling(wl, [1], [10.0], NET)
    # Execute
    rows = model.curve([1, 2, 4, 1024], NETWORK_PRESETS["nvlink"])
    # Assert
    assert rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[1]["speedup"] == pytest.approx(2.0, rel=0.01)
    assert all(r["efficiency"] <= 1.0 + 1e-12 for r in rows)
    # At 1024 workers on 1 GbE the latency term dominates: efficiency collapses.
    slow = model.curve([1024], NETWORK_PRESETS["1gbe"])[0]
    assert slow["efficiency"] < rows[-1]["efficiency"]
    assert 0.0 < slow["comm_share"] < 1.0


def test_host_prediction_charges_oversubscription():
    wl = Workload("cnn", n_samples=1000, param_bytes=4, batch_size=1000)
    model = fit_scaling(wl, [1], [1.0], Network("free", 0.0, np.inf), cores=2)
    assert model.compute_per_sample_s == pytest.approx(1e-3)
    assert model.predict(4)["compute_s"] == pytest.approx(0.5)  # 1/4 of the work, 2x shared
    assert model.predict(4, NET)["compute_s"] == pytest.approx(0.25)
