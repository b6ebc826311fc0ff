"""The round's timeline: replaying traced events on the cost model, and its summary."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.presets import homogeneous
from flowsplit.federated.system.protocol import (
    ACTIVATIONS,
    DOWNLOAD,
    GRADIENTS,
    MODEL,
    TRAIN,
    UPLOAD,
)
from flowsplit.federated.system.schedule import (
    KIND,
    RANK,
    T_END,
    T_START,
    WORK,
    Tracer,
    replay,
    timeline,
)
from tests.federated._toy import toy_setup


def _topology():
    # 2 clients, 1 aggregator: client links 10 ms / 1 MB/s, backbone 20 ms / 10 MB/s.
    topo = homogeneous(2, 1)
    topo.ca_latency[:] = 0.010
    topo.ca_bandwidth[:] = 1e6
    topo.as_latency[:] = 0.020
    topo.as_bandwidth[:] = 1e7
    return topo


def test_replay_queues_the_aggregator_and_shares_links_first_in_first_out():
    # Prepare: the server sends a 1 MB model to the aggregator (ranks: server 0,
    # aggregator 1, clients 2 and 3), which sends it to both clients over their own
    # links; each client computes 0.5 s and sends 100 kB back; the aggregator works
    # 0.25 s per client, one client after the other, then reports 10 kB up.
    server, agg, c0, c1 = Tracer(0, 1), Tracer(1, 1), Tracer(2, 1), Tracer(3, 1)
    server.send(1, 1_000_000, DOWNLOAD, 0, 0)
    server.recv(1, 0, MODEL, 0, 0)
    agg.recv(0, 0, MODEL, 0, 0)
    agg.send(2, 1_000_000, DOWNLOAD, 0, 0)
    agg.send(3, 1_000_000, DOWNLOAD, 0, 0)
    for c in (2, 3):
        agg.recv(c, 0, GRADIENTS, 0, 0)
        agg.work(0.25, TRAIN, 0, 0)
    agg.send(0, 10_000, UPLOAD, 0, 0)
    for tr in (c0, c1):
        tr.recv(1, 0, MODEL, 0, 0)
        tr.work(0.5, TRAIN, 0, 0)
        tr.send(1, 100_000, TRAIN, 0, 0)
    trace = np.concatenate([t.array() for t in (server, agg, c0, c1)])
    # Execute
    out = replay(trace, _topology())
    summary = timeline(out, 1)
    # Assert: model at the aggregator at 0.1 + 0.02 = 0.12 s; each client link carries
    # its copy in 1 s (+10 ms): clients hold it at 1.13 s, send at 1.63 s, arrive at
    # 1.74 s; the aggregator works on client 0 until 1.99 s and on client 1 until
    # 2.24 s (queued behind client 0), then the report takes 1 ms + 20 ms.
    assert out[0, T_END] == 0.0  # a send does not block the sender
    assert summary["download_s"] == pytest.approx(1.13)
    assert summary["round_s"] == pytest.approx(2.24 + 0.001 + 0.020)
    assert summary["aggregator_compute_s"] == pytest.approx(0.5)
    assert summary["client_compute_s"] == pytest.approx(0.5)
    assert summary["download_s"] + summary["train_s"] + summary["upload_s"] == pytest.approx(
        summary["round_s"]
    )
    # The aggregator's receive from client 1 waited nothing: its batch was there (1.74 s)
    # when the aggregator finished client 0 (1.99 s).
    rows = out[(out[:, 0] == 1) & (out[:, 1] == 2)]
    assert rows[-1, T_START] == pytest.approx(1.99) and rows[-1, T_END] == pytest.approx(1.99)


def test_replay_goes_on_when_a_message_never_came():
    # A client waits for a model the aggregator never sent (it was lost mid-round).
    client = Tracer(2, 1)
    client.recv(1, 0, MODEL, 0, 0)
    client.work(0.3, TRAIN, 0, 0)
    out = replay(client.array(), _topology())
    assert out[-1, T_END] == pytest.approx(0.3)


@pytest.mark.parametrize(("scheme", "cuts"), [("hsfl", (1, 2)), ("hsfl-ll", (1, 3))])
def test_simulated_rounds_record_a_predicted_timeline(dataset, scheme, cuts):
    setup = toy_setup(dataset, 3, 2, scheme=scheme, cuts=cuts, rounds=2)
    result = run_simulation(setup)
    for rec in result.history:
        t = rec["timing"]
        assert set(t) == {"predicted"}  # nothing is measured in one process
        p = t["predicted"]
        assert p["source"] == "predicted" and p["on"] == "topology heterogeneous"
        assert rec["predicted_round_s"] == p["round_s"] > 0
        assert p["download_s"] + p["train_s"] + p["upload_s"] == pytest.approx(p["round_s"])
        # Every message is at least one latency: the round is longer than the slowest
        # client's download latency plus its upload latency.
        lat = setup.topology.ca_latency[np.arange(3), setup.assignment].max()
        assert p["round_s"] > 2 * lat


@pytest.mark.slow
def test_dist_rounds_record_measured_phases_beside_the_same_prediction(dataset, tmp_path):
    from flowsplit.federated.dist import launch_roles
    from tests.federated._toy import ToyFactory

    # Prepare: 3 clients, 2 aggregators, hsfl, 1 round; in process, then as processes.
    setup = toy_setup(dataset, 3, 2, scheme="hsfl", cuts=(1, 2), timeout_s=30.0)
    sim = run_simulation(setup).history[0]
    dist = launch_roles(
        setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path, quiet=True
    ).history[0]
    # Assert: the same predicted timeline (the same events replayed), bytes unchanged,
    # and a measured one on loopback whose phases tile the measured round.
    assert dist["bytes"] == sim["bytes"]
    assert dist["predicted_round_s"] == pytest.approx(sim["predicted_round_s"], rel=1e-9)
    m = dist["timing"]["measured"]
    assert m["source"] == "measured" and m["on"] == "loopback"
    assert dist["measured_round_s"] == m["round_s"] > 0
    assert m["download_s"] + m["train_s"] + m["upload_s"] == pytest.approx(m["round_s"])
    # The round cannot be shorter than the compute any one role measured in it, nor
    # longer than the server's wall time for the whole round (evaluation included).
    assert m["round_s"] >= max(m["client_compute_s"], m["server_compute_s"])
    assert m["round_s"] <= dist["wall_s"]


def test_a_stream_without_buffering_waits_for_its_receiver():
    # Prepare: the aggregator (rank 1) sends a 1 MB model to client 0 (rank 2) at 0 s,
    # but client 0 asks for it only after 2 s of work; with no stream buffer the bytes
    # flow only then (1 s at 1 MB/s, + 10 ms), with an unbounded one at once.
    trace = _late_reader_trace()  # (its measured times are replaced by the replay's)
    topo = _topology()
    eager = replay(trace, topo)
    topo.extra["stream_buffer_bytes"] = 0.0
    waits = replay(trace, topo)
    topo.extra["stream_buffer_bytes"] = 400_000.0
    part = replay(trace, topo)
    # Assert
    assert eager[-1, T_END] == pytest.approx(2.0)
    assert waits[-1, T_END] == pytest.approx(3.01)
    assert part[-1, T_END] == pytest.approx(2.0 + 0.6 + 0.01)


def _measured(topo, ca_burst, as_burst=0.0):
    """``topo`` with the probe's per-link bursts (the rendezvous replay)."""
    topo.extra["ca_burst_bytes"] = np.full(topo.ca_bandwidth.shape, ca_burst).tolist()
    topo.extra["as_burst_bytes"] = [as_burst] * topo.n_aggregators
    return topo


def test_on_measured_links_a_message_moves_only_once_asked_for_after_the_handshakes():
    # Prepare: as above, the aggregator posts 1 MB at 0 s, the client asks after 2 s;
    # measured links (10 ms, 1 MB/s, no burst) replay gloo's rendezvous.
    trace = _late_reader_trace()  # (its measured times are replaced by the replay's)
    # Execute
    late = replay(trace, _measured(_topology(), 0.0))
    bucket = replay(trace, _measured(_topology(), 300_000.0))
    # Assert: asked late, the message pays LATE_TRIPS handshake latencies (10 ms each),
    # then 1 s on the wire and its own 10 ms; a rested link's bucket of 300 kB goes at
    # once, the rest at 1 MB/s.
    from flowsplit.federated.system.schedule import LATE_TRIPS

    assert late[-1, T_END] == pytest.approx(2.0 + LATE_TRIPS * 0.01 + 1.0 + 0.01)
    assert bucket[-1, T_END] == pytest.approx(2.0 + LATE_TRIPS * 0.01 + 0.7 + 0.01)


def test_on_measured_links_back_to_back_messages_drain_the_bucket_and_a_rest_refills_it():
    # Prepare: the client (rank 2) is waiting; the aggregator sends 200 kB twice at
    # 0 s, then, after 1 s of work, once more. Bucket 200 kB at 1 MB/s (refills in 0.2 s).
    agg, client = Tracer(1, 1), Tracer(2, 1)
    agg.send(2, 200_000, DOWNLOAD, 0, 0)
    agg.send(2, 200_000, DOWNLOAD, 0, 0)
    agg.work(1.0, DOWNLOAD, 0, 0)
    agg.send(2, 200_000, DOWNLOAD, 0, 0)
    for _ in range(3):
        client.recv(1, 0, MODEL, 0, 0)
    trace = np.concatenate([agg.array(), client.array()])
    # Execute
    out = replay(trace, _measured(_topology(), 200_000.0))
    # Assert: the first goes at once (2 handshakes + 10 ms); the client asks for the
    # second as the first arrives, 10 ms after the link went idle (late: 3 handshakes),
    # so 40 ms of refill (40 kB) go at once and the other 160 kB take 0.16 s; the third,
    # asked for before it was posted (early), after the rest goes at once again.
    from flowsplit.federated.system.schedule import EARLY_TRIPS, LATE_TRIPS

    hs = EARLY_TRIPS * 0.01
    first = hs + 0.01
    idle = 0.01 + LATE_TRIPS * 0.01
    second = first + LATE_TRIPS * 0.01 + (200_000 - idle * 1e6) / 1e6 + 0.01
    assert out[-3, T_END] == pytest.approx(first)
    assert out[-2, T_END] == pytest.approx(second)
    assert out[-1, T_END] == pytest.approx(1.0 + hs + 0.01)


def test_a_cpu_quota_runs_a_rested_burst_at_full_speed_then_at_its_share():
    # A client (rank 2) with a 10 % share and a 4 ms burst does 2 ms, then 10 ms of
    # full-speed work back to back: the first fits the burst; the second gets the rest
    # of the bucket (2 ms of running) and then runs at a tenth of the speed.
    client = Tracer(2, 1)
    client.work(0.002, TRAIN, 0, 0)
    client.work(0.010, TRAIN, 0, 0)
    topo = _topology()
    topo.extra.update(client_cpu_share=[0.1, 0.1], client_cpu_burst_s=[0.004, 0.004])
    out = replay(client.array(), topo)
    assert out[0, T_END] == pytest.approx(0.002)
    # Bucket: 0.004 * 0.9 = 3.6 ms of CPU; 2 ms used 1.8 ms of it; 1.8 ms left lasts
    # 2 ms of running; the other 8 ms of work take 80 ms.
    assert out[1, T_END] == pytest.approx(0.002 + 0.002 + 0.080)


def test_work_after_a_rest_pays_the_probes_extra_in_proportion_to_the_rest():
    # A server (rank 0, no quota) whose steps take 50 % longer after a rest of
    # COLD_AFTER_S (10 ms) or more. It works 2 ms at the round's start (a rest before:
    # 3 ms, to 3 ms), 2 ms straight after (2 ms, to 5 ms), then waits for the
    # aggregator's message (sent at 0 over the 20-ms backbone: a rest of 15 ms) and
    # works 2 ms (3 ms, to 23 ms); the next message (sent at 8 ms, there at 28 ms) ends
    # a rest of 5 ms: half the extra (2.5 ms); the last (sent at 30.5 ms) one of 20 ms.
    from flowsplit.federated.system.schedule import COLD_AFTER_S

    assert COLD_AFTER_S == 0.01  # the rests below are in its units
    server, agg = Tracer(0, 1), Tracer(1, 1)
    server.work(0.002, TRAIN, 0, 0)
    server.work(0.002, TRAIN, 0, 0)
    for _ in range(3):
        server.recv(1, 0, ACTIVATIONS, 0, 0)
        server.work(0.002, TRAIN, 0, 0)
    agg.send(0, 1, TRAIN, 0, 0)
    agg.work(0.008, TRAIN, 0, 0)
    agg.send(0, 1, TRAIN, 0, 0)
    agg.work(0.0225, TRAIN, 0, 0)
    agg.send(0, 1, TRAIN, 0, 0)
    trace = np.concatenate([server.array(), agg.array()])
    topo = _topology()
    topo.extra["server_cold_extra"] = [0.5]
    out = replay(trace, topo)
    works = out[(out[:, RANK] == 0) & (out[:, KIND] == WORK)]
    durations = works[:, T_END] - works[:, T_START]
    assert durations == pytest.approx([0.003, 0.002, 0.003, 0.0025, 0.003], abs=1e-6)
    assert works[-1, T_END] == pytest.approx(0.0505 + 0.003, abs=1e-6)
    # Without the probe's figure the same work takes its charged time.
    del topo.extra["server_cold_extra"]
    plain = replay(trace, topo)
    works = plain[(plain[:, RANK] == 0) & (plain[:, KIND] == WORK)]
    assert works[:, T_END] - works[:, T_START] == pytest.approx([0.002] * 5)


def test_the_transport_cpu_is_charged_per_byte_beside_the_program():
    # Prepare: client 0 (rank 2; no burst, a 10 % share) sends 100 kB to the aggregator
    # (rank 1, no quota), which receives it. A byte costs 10 ns of CPU to receive and 10 ns
    # to send (1 ms for this message at each end); the probe's CPU per round trip is not
    # charged (it is in the latency).
    client, agg = Tracer(2, 1), Tracer(1, 1)
    client.send(1, 100_000, TRAIN, 0, 0)
    agg.recv(2, 0, GRADIENTS, 0, 0)
    trace = np.concatenate([agg.array(), client.array()])
    topo = _topology()
    free = replay(trace, topo)
    topo.extra.update(client_cpu_share=[0.1, 0.1], client_cpu_burst_s=[1e-9, 1e-9])
    for who in ("client", "aggregator"):
        topo.extra[f"{who}_recv_cpu_s"] = [0.001] * (2 if who == "client" else 1)
        topo.extra[f"{who}_byte_cpu_s"] = [1e-8] * (2 if who == "client" else 1)
        topo.extra[f"{who}_send_byte_cpu_s"] = [1e-8] * (2 if who == "client" else 1)
    charged = replay(trace, topo)
    # Assert: without costs the sender is done at once and the message is in after
    # 0.1 s + 10 ms; with them the sender's 1 ms of CPU is spent beside its program (its
    # clock does not move), and the receiver (no quota) has the message as soon.
    assert free[1, T_END] == 0.0 and free[0, T_END] == pytest.approx(0.11)
    assert charged[1, T_END] == 0.0
    assert charged[0, T_END] == pytest.approx(0.11)
    # ... but a debt the sender's next work pays (next test).


def test_cpu_spent_beside_the_program_is_a_debt_its_next_work_pays():
    # Client 0 (rank 2, a 10 % share, no burst) sends 100 kB at 10 ns a byte sent (1 ms of
    # its quota beside its program), then works 1 ms: the debt is paid first, so the
    # work ends after 10 ms + 10 ms. Its CPU per byte received is not charged on a send.
    client = Tracer(2, 1)
    client.send(1, 100_000, TRAIN, 0, 0)
    client.work(0.001, TRAIN, 0, 0)
    agg = Tracer(1, 1)
    agg.recv(2, 0, GRADIENTS, 0, 0)
    topo = _topology()
    topo.extra.update(client_cpu_share=[0.1, 0.1], client_cpu_burst_s=[1e-9, 1e-9])
    topo.extra["client_byte_cpu_s"] = [1e-6, 1e-6]
    trace = np.concatenate([agg.array(), client.array()])
    assert replay(trace, topo)[-1, T_END] == pytest.approx(0.010, rel=1e-6)
    topo.extra["client_send_byte_cpu_s"] = [1e-8, 1e-8]
    out = replay(trace, topo)
    assert out[-1, T_END] == pytest.approx(0.020, rel=1e-6)


@pytest.mark.parametrize(
    ("byte_cpu_s", "work_end"),
    [
        (5e-8, 0.110 + 0.005),  # 5 ms read over 0.1 s: slower than the share, costs nothing
        # 100 ms: 81 ms of debt at 0.1 s, 80 at 0.11 s, paid at the share first
        (1e-6, 0.110 - 0.08 / 0.9 + (0.005 + 0.08 / 0.9) / 0.1),
    ],
)
def test_cpu_spent_reading_a_message_is_spread_over_its_transfer(byte_cpu_s, work_end):
    # The aggregator (rank 1; a 10 % share, a 10 ms burst: 9 ms of bucket) waits for
    # client 0's 100 kB (0.1 s on its 1 MB/s link, in at 0.11 s), then works 5 ms. The
    # bytes' CPU drains its bucket at the rate they arrive, less the share's refill;
    # charged at once on arrival, 5 ms would have left 4 ms and slowed the work to 10 ms.
    client, agg = Tracer(2, 1), Tracer(1, 1)
    client.send(1, 100_000, TRAIN, 0, 0)
    agg.recv(2, 0, GRADIENTS, 0, 0)
    agg.work(0.005, TRAIN, 0, 0)
    topo = _topology()
    topo.extra.update(aggregator_cpu_share=[0.1], aggregator_cpu_burst_s=[0.01])
    topo.extra["aggregator_byte_cpu_s"] = [byte_cpu_s]
    out = replay(np.concatenate([agg.array(), client.array()]), topo)
    assert out[0, T_END] == pytest.approx(0.11)
    assert out[1, T_END] == pytest.approx(work_end, rel=1e-6)


def test_a_computing_sender_starts_what_was_asked_for_later():
    # Prepare: no stream buffer; client 0 (rank 2) posts 1 MB, then computes 2 s; the
    # aggregator asks at 0.5 s (after its own work), while the client computes, and a
    # second time after the client is done (a second message posted after the work).
    client, agg = Tracer(2, 1), Tracer(1, 1)
    client.send(1, 1_000_000, TRAIN, 0, 0)
    client.work(2.0, TRAIN, 0, 0)
    client.send(1, 1_000_000, TRAIN, 0, 0)
    agg.work(0.5, TRAIN, 0, 0)
    agg.recv(2, 0, GRADIENTS, 0, 0)
    agg.work(2.0, TRAIN, 0, 0)
    agg.recv(2, 0, GRADIENTS, 0, 0)
    trace = np.concatenate([agg.array(), client.array()])
    topo = _topology()
    topo.extra["stream_buffer_bytes"] = 0.0
    idle = replay(trace, topo)
    topo.extra["client_busy_wake_s"] = [0.05, 0.0]
    busy = replay(trace, topo)
    # Assert: asked at 0.5 s while the client computes: 50 ms later, then 1 s at 1 MB/s
    # (+10 ms); asked at 3.51 s, the client idle: no delay.
    assert idle[1, T_END] == pytest.approx(0.5 + 1.0 + 0.01)
    assert busy[1, T_END] == pytest.approx(0.5 + 0.05 + 1.0 + 0.01)
    assert busy[3, T_END] - busy[2, T_END] == pytest.approx(1.0 + 0.01)


def _late_reader_trace():
    # The aggregator (rank 1) posts a 1 MB model at 0 s; client 0 (rank 2) asks for it
    # after 2 s of work and has it at 2.61 s (measured): 400 kB had moved before it asked.
    agg, client = Tracer(1, 1), Tracer(2, 1)
    agg.send(2, 1_000_000, DOWNLOAD, 0.0, 0.0)
    client.work(2.0, DOWNLOAD, 0.0, 2.0)
    client.recv(1, 0, MODEL, 2.0, 2.61)
    return np.concatenate([agg.array(), client.array()])


def test_the_stream_buffer_calibrated_on_a_measured_round_reproduces_it():
    from flowsplit.federated.system.schedule import MAX_CALIBRATED_BUFFER, calibrate_buffer

    trace, topo = _late_reader_trace(), _topology()
    # 2.61 s = 2 s + (1 MB - B) / 1 MB/s + 10 ms: B = 400 kB.
    assert calibrate_buffer(trace, topo, 2.61) == pytest.approx(400_000, rel=1e-4)
    # Slower than even no buffering explains: 0; faster than any buffering: the cap.
    assert calibrate_buffer(trace, topo, 3.5) == 0.0
    assert calibrate_buffer(trace, topo, 1.9) == MAX_CALIBRATED_BUFFER
    # The topology given is left as it was.
    assert "stream_buffer_bytes" not in topo.extra


def test_a_measured_round_calibrates_and_the_next_is_predicted_with_it():
    from types import SimpleNamespace

    from flowsplit.federated.schemes import _calibrated_buffer, round_timing

    outcome = SimpleNamespace(traces=_late_reader_trace(), predict_on=None, measured_on="testbed")
    topo = _topology()
    topo.extra["stream_buffer_bytes"] = 0.0  # the probe's (wrong) figure
    first = round_timing(outcome, topo)
    # The probe's prediction is kept as it is; the round calibrates the buffer.
    assert first["predicted_round_s"] == pytest.approx(3.01)
    assert first["measured_round_s"] == pytest.approx(2.61)
    assert "calibrated_round_s" not in first
    buffer = first["timing"]["calibration"]["stream_buffer_bytes"]
    assert buffer == pytest.approx(400_000, rel=1e-4)
    history = [{"round": 1, "timing": first["timing"]}]
    second = round_timing(outcome, topo, _calibrated_buffer(history))
    assert second["predicted_round_s"] == pytest.approx(3.01)
    assert second["calibrated_round_s"] == pytest.approx(2.61, rel=1e-4)
    assert second["timing"]["calibrated"]["source"] == "predicted"
    assert "calibration" not in second["timing"]
    assert _calibrated_buffer([{"round": 1}]) is None


def test_the_run_line_says_which_rounds_the_calibrated_prediction_covers():
    from flowsplit.federated.commands import delay_summary

    timing = {"predicted": {"on": "topology probed"}, "measured": {"on": "testbed"}}
    history = [
        {"round": 1, "delay_s": 1.0, "predicted_round_s": 3.0, "measured_round_s": 2.0,
         "timing": {**timing, "calibration": {"stream_buffer_bytes": 1e5}}},
        {"round": 2, "delay_s": 1.0, "predicted_round_s": 3.0, "measured_round_s": 2.5,
         "calibrated_round_s": 2.4, "timing": timing},
    ]  # fmt: skip
    line = delay_summary(history, "probed")
    assert line == (
        "predicted 2.0 s (cost-model bound, topology probed), predicted 6.0 s (schedule, "
        "topology probed), measured 4.5 s (on testbed); rounds 2-2: predicted 2.4 s "
        "(schedule, stream buffer calibrated on round 1), measured 2.5 s"
    )
    assert "calibrated" not in delay_summary(history[:1], "probed")
