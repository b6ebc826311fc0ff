"""benchmarks/testbed_ddp.py's pure parts: the epoch schedule and the scaling fits (no
testbed, no training: epochs made from known parameters)."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("testbed_ddp")
    finally:
        sys.path.remove(str(BENCH))


def test_schedule_interleaves_rates_with_a_settle_epoch_after_each_change(bench):
    plan = bench.schedule([1000.0, 10.0], repeats=2, n_nodes=4, settle=1, passes=2)
    assert [m for m, _ in plan] == [1000.0] * 3 + [10.0] * 3 + [1000.0] * 3 + [10.0] * 3
    # The first epoch of every visit is not measured; each rate gets repeats * passes.
    assert [k for k, (_, measured) in enumerate(plan) if not measured] == [0, 3, 6, 9]
    assert sum(1 for m, ok in plan if ok and m == 10.0) == 4
    # One node: no link; one settle epoch (the quota is set as it starts), then all measured.
    assert (
        bench.schedule([1000.0, 10.0], 2, 1, settle=1, passes=2)
        == [(None, False)] + [(None, True)] * 4
    )


C, H, S, PAYLOAD, BATCH, STEPS = 0.02, 0.05, 0.09, 372_000, 32, 10


def synthetic_rows(bench, sync_s: float = S) -> list[dict]:
    """Epochs of the model ``steps (c b + h) + wire + steps s``: one node at B..B/8 (the
    ladder), 2-8 nodes at two rates; the wire time from the benchmark's own ring model."""
    rows = []

    def row(nodes, mbit, batch, profile=False):
        point = {"model": "m", "nodes": nodes, "mbit": mbit, "steps": STEPS, "batch_size": batch}
        wire = bench.predicted_comm(point, PAYLOAD)
        sync = STEPS * sync_s if nodes > 1 else 0.0
        epoch = STEPS * (C * batch / nodes + H) + wire + sync
        for jitter in (0.99, 1.0, 1.01):  # the median is the middle one
            rows.append(
                {
                    "model": "m",
                    "nodes": nodes,
                    "mbit": mbit,
                    "batch_size": batch,
                    "epoch_s": epoch * jitter,
                    "exposed_comm_s": (wire + sync) * jitter,
                    "payload_bytes": PAYLOAD * STEPS if nodes > 1 else 0,
                    "steps": STEPS,
                    "wire_bytes": None,
                    "throttled_s": None,
                    "profile": profile,
                }
            )

    row(1, None, BATCH)
    for n in (2, 4, 8):
        row(1, None, BATCH // n, profile=True)
        for mbit in (1000.0, 10.0):
            row(n, mbit, BATCH)
    return rows


def test_ladder_form_recovers_held_out_points_of_its_own_model(bench):
    doc = bench.analyse(synthetic_rows(bench))
    held = [p for p in doc["points"] if p["held_out"]]
    assert {p["nodes"] for p in held} == {4, 8} and len(held) == 4
    assert doc["headline_form"] == "ladder"
    assert doc["max_heldout_rel_error"] < 1e-6
    p = held[0]
    assert p["compute_per_sample_s_ladder"] == pytest.approx(C, rel=1e-6)
    assert p["per_step_s_ladder"] == pytest.approx(H, rel=1e-6)
    assert p["sync_per_step_s_ladder"] == pytest.approx(S, rel=1e-6)


def test_variants_without_the_sync_term_or_with_it_per_hop_miss(bench):
    doc = bench.analyse(synthetic_rows(bench))
    worst = doc["max_heldout_rel_error_variants"]
    # Without s the 8-node 1000-Mbit/s epoch lacks its sync share; charged per ring hop
    # (2 (N-1) of them) s grows with N where the data's does not.
    assert worst["ladder_nosync"]["all"] > 0.2
    assert worst["ladder_hops"]["all"] > 0.5
    assert worst["ladder_points"]["all"] < 1e-6


def test_no_sync_in_the_data_gives_a_zero_sync_term(bench):
    doc = bench.analyse(synthetic_rows(bench, sync_s=0.0))
    assert doc["max_heldout_rel_error"] < 1e-6
    assert all(p["sync_per_step_s_ladder"] == 0.0 for p in doc["points"])


def test_expected_max_of_normals(bench):
    assert bench.expected_max_normal(1) == 0.0
    assert bench.expected_max_normal(2) == pytest.approx(1 / 3.141592653589793**0.5, rel=1e-4)
    assert bench.expected_max_normal(8) == pytest.approx(1.4236, rel=1e-3)


def test_rank_summary_splits_each_wait_into_straggle_and_collective(bench):
    # Two ranks, two steps, known times: [start, arrive, done, leave, cpu].
    trace = [
        [[0.0, 1.0, 2.5, 2.5, None], [2.6, 3.0, 4.2, 4.2, 0.1]],  # rank 0 arrives first
        [[0.0, 2.0, 2.5, 2.5, None], [2.6, 4.0, 4.2, 4.2, 0.1]],  # rank 1 is the straggler
    ]
    out = bench.rank_summary(trace)
    assert out["compute_s_by_rank"] == pytest.approx([1.0 + 0.4, 2.0 + 1.4])
    assert out["max_compute_s"] == pytest.approx(2.0 + 1.4)
    assert out["wait_s_by_rank"] == pytest.approx([1.5 + 1.2, 0.5 + 0.2])
    assert out["straggle_s_by_rank"] == pytest.approx([1.0 + 1.0, 0.0])
    assert out["collective_s_by_rank"] == pytest.approx([0.5 + 0.2, 0.5 + 0.2])
    assert out["arrival_spread_s"] == pytest.approx(2.0)
    # One node: compute only.
    one = bench.rank_summary([[[0.0, 1.0, None, 1.1, None]]])
    assert one == {"compute_s_by_rank": [1.0], "mean_compute_s": 1.0, "max_compute_s": 1.0}


def test_epoch_trace_lines_up_ranks_on_rank_zero_epoch_start(bench):
    # _ddp_traced.py rows: [epoch, start, first, last, done, leave, cpu, buckets].
    traces = [
        [[0, 10.0, 10.5, 10.6, 10.9, 11.0, 1.0, 1], [1, 20.0, 20.5, 20.6, 20.9, 21.0, 2.0, 1]],
        [[0, 10.1, 10.4, 10.7, 10.9, 11.0, 1.5, 1], [1, 19.9, 20.4, 20.8, 20.9, 21.0, 2.5, 1]],
    ]
    got = bench.epoch_trace(traces, 1)
    assert got[0] == [[0.0, pytest.approx(0.6), pytest.approx(0.9), pytest.approx(1.0), None]]
    assert got[1][0][0] == pytest.approx(-0.1) and got[1][0][1] == pytest.approx(0.8)
    assert bench.epoch_trace(traces, 2) is None


def _point(nodes, mbit, collective_per_step, steps=10, **extra):
    return {
        "model": "m", "nodes": nodes, "mbit": mbit, "steps": steps, "batch_size": 32,
        "collective_s_by_rank": [collective_per_step * steps] * nodes, **extra,
    }  # fmt: skip


def test_collective_is_fitted_at_two_nodes_and_fastest_rate_only(bench):
    train = [
        _point(1, None, 0.0),
        _point(2, 10.0, 0.30),  # the wire dominates at 10 Mbit/s: not L
        _point(2, 1000.0, 0.05),
        _point(4, 1000.0, 0.90),  # held out points never feed the fit
    ]
    assert bench.fit_collective(train) == pytest.approx(0.05)
    assert bench.fit_collective([_point(4, 1000.0, 0.1)]) is None  # no 2-node trace


def test_colocation_fit_from_two_node_probes_extrapolates_by_cpu_load(bench):
    # L(k) = L1 + kappa rho/(1-rho), rho = 0.2 (k-1): L1 = 0.05, kappa = 0.02.
    def at(k, nodes=2):
        rho = 0.2 * (k - 1)
        return 0.05 + 0.02 * rho / (1 - rho), nodes, k

    one, _, _ = at(1)
    two, _, _ = at(2)
    train = [_point(2, 1000.0, one, nodes_per_cpu=1, cpu=0.2)]
    shared = [_point(2, 1000.0, two, nodes_per_cpu=2, cpu=0.2)]
    big_l, kappa = bench.fit_colocation(train, shared)
    assert big_l == pytest.approx(0.05) and kappa == pytest.approx(0.02)
    eight = {"nodes": 8, "nodes_per_cpu": 4, "cpu": 0.2}
    assert big_l + kappa * bench.colocation_load(eight) == pytest.approx(at(4)[0])
    assert bench.fit_colocation(train, []) is None
    # Old runs did not record the pinning: 2 CPUs, ceil(N / 2) nodes each.
    assert bench.nodes_per_cpu({"nodes": 8}) == 4 and bench.nodes_per_cpu({"nodes": 2}) == 1


def test_step_sigma_is_a_robust_spread_of_two_node_step_compute(bench):
    # Two ranks, steps alternating 0.10 / 0.12 s of compute (first step left out), one
    # outlier step of 1 s that a robust spread ignores.
    def rank(xs):
        return [[0.0, x, x + 0.01, x + 0.01, None] for x in [0.5, *xs]]

    xs = [0.10, 0.12] * 5
    trace = [rank(xs), rank([*xs[:-1], 1.0])]
    sigma = bench.step_sigma([{"nodes": 2, "traces": [trace]}, {"nodes": 4, "traces": [[]]}])
    assert sigma == pytest.approx(1.4826 * 0.01, rel=1e-6)
    assert bench.step_sigma([{"nodes": 4, "traces": [trace]}]) is None


def test_expected_max_normal_grows_with_n(bench):
    assert bench.expected_max_normal(1) == 0.0
    assert bench.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-4)
    assert bench.expected_max_normal(8) == pytest.approx(1.4236, rel=1e-3)


def test_collective_form_recovers_held_out_points_of_its_own_model(bench):
    # T = S (c b + h) + S sigma E[max of N] + S max(wire / S, L 2 (N-1) / N).
    c, h, sigma_d, big_l, steps = 0.02, 0.05, 0.004, 0.05, 10
    sigma = 1.4826 * sigma_d

    def rank():  # per-step compute alternating +-d around 0.3 s (first step left out)
        return [[0.0, 0.3, 0.35, 0.35, None]] + [
            [0.0, 0.3 + (sigma_d if k % 2 else -sigma_d), 0.35, 0.35, None] for k in range(10)
        ]

    ladder = [
        {"model": "m", "nodes": 1, "mbit": None, "steps": steps, "batch_size": b,
         "measured_epoch_s": steps * (c * b + h)}
        for b in (64, 32, 16, 8)
    ]  # fmt: skip
    points = []
    for n in (2, 4, 8):
        for mbit in (1000.0, 10.0):
            p = {"model": "m", "nodes": n, "mbit": mbit, "steps": steps, "batch_size": 64,
                 "predicted_comm_s": 0.001 if mbit == 1000.0 else 3.0 * (n - 1) / n,
                 "collective_s_by_rank": [big_l * steps] * n if n == 2 else [9.9] * n,
                 "traces": [[rank(), rank()]] if n == 2 else [], "held_out": n > 2}  # fmt: skip
            coll = max(p["predicted_comm_s"], steps * big_l * (n - 1) / n * 2 / 1)
            p["measured_epoch_s"] = (
                steps * (c * 64 / n + h) + steps * sigma * bench.expected_max_normal(n) + coll
            )
            points.append(p)
    train = [p for p in points if not p["held_out"]]
    assert bench.predict_collective(points, ladder, train, "_x")
    assert max(p["rel_error_x"] for p in points) < 1e-6
    # Without any trace the form cannot be fitted: nothing predicted.
    bare = [{**p, "traces": [], "collective_s_by_rank": []} for p in points]
    assert not bench.predict_collective(bare, ladder, [q for q in bare if q["nodes"] == 2], "_y")


def test_pair_form_recovers_every_point_from_probes_of_its_layout(bench):
    # Each N-term comes from a 2-node job run as a rank of N (the pair probe): base_N,
    # sigma_N, L_N; the epoch at N is base_N + S sigma_N E[max of N] + S max(wire/S,
    # L_N 2 (N-1)/N). Terms that differ per N (co-location) are recovered, and the
    # 2-node job itself stands for N = 2 (at its fastest rate).
    steps, d = 10, 0.004
    sigma = 1.4826 * d
    terms = {2: (3.0, 0.05), 4: (1.8, 0.04), 8: (1.1, 0.05)}  # base, L per step

    def rank():  # step compute alternating +-d (first step left out)
        return [[0.0, 0.3, 0.35, 0.35, None]] + [
            [0.0, 0.3 + (d if k % 2 else -d), 0.35, 0.35, None] for k in range(10)
        ]

    def epoch(n, wire):
        base, big_l = terms[n]
        straggle = steps * sigma * bench.expected_max_normal(n)
        return base + straggle + max(wire, steps * big_l * 2 * (n - 1) / n)

    def pair(n):  # a pair probe of layout n, or the 2-node job at 1000 Mbit/s
        base, big_l = terms[n]
        wait = steps * sigma * bench.expected_max_normal(2) + steps * big_l
        return {"model": "m", "nodes": 2, "mbit": 1000.0, "steps": steps,
                "batch_size": 64 * 2 // n, "measured_epoch_s": base + wait,
                "wait_s_by_rank": [wait, wait], "collective_s_by_rank": [big_l * steps] * 2,
                "traces": [[rank(), rank()]], "pair_probe": n if n > 2 else None}  # fmt: skip

    points = []
    for n in (2, 4, 8):
        for mbit in (1000.0, 10.0):
            wire = 0.0 if mbit == 1000.0 else 3.0 * (n - 1) / n
            p = {"model": "m", "nodes": n, "mbit": mbit, "steps": steps, "batch_size": 64,
                 "predicted_comm_s": wire, "held_out": n > 2,
                 "measured_epoch_s": epoch(n, wire)}  # fmt: skip
            if n == 2 and mbit == 1000.0:
                p.update({**pair(2), "batch_size": 64})
            points.append(p)
    ladder = [
        {"model": "m", "nodes": 1, "mbit": None, "steps": steps, "batch_size": b,
         "measured_epoch_s": steps * (0.02 * b + 0.05)}
        for b in (64, 32)
    ]  # fmt: skip
    probes = [pair(4), pair(8)]
    train = [p for p in points if not p["held_out"]]
    assert bench.predict_pair(points, ladder, train, probes, "_x")
    assert max(p["rel_error_x"] for p in points) < 1e-6
    assert {p["collective_per_step_s_x"] for p in points if p["held_out"]} == {0.04, 0.05}
    # A held-out N without its probe: nothing predicted, nothing half-written.
    fresh = [{k: v for k, v in p.items() if not k.endswith("_x")} for p in points]
    assert not bench.predict_pair(fresh, ladder, train, probes[:1], "_y")
    assert not any("rel_error_y" in p for p in fresh)


def test_repeat_spread_is_the_median_of_each_points_relative_range(bench):
    points = [
        {"epoch_s_per_repeat": [10.0, 11.0, 12.0]},  # (12 - 10) / 11
        {"epoch_s_per_repeat": [4.0, 4.0]},  # 0
        {"epoch_s_per_repeat": [2.0, 3.0]},  # 1 / 2.5
        {"epoch_s_per_repeat": [5.0]},  # one repeat: no spread
        {},
    ]
    assert bench.repeat_spread(points) == pytest.approx(2 / 11)
    assert bench.repeat_spread(points[3:]) is None
