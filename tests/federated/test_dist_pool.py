"""The dist runner with a fixed pool of client worker processes (issue 30 item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from flowsplit.errors import ConfigError, FlowsplitError
from flowsplit.federated.dist import launch_roles
from flowsplit.federated.dist.pool import decode_round, encode_round, hosts_for
from flowsplit.federated.sim import run_simulation
from tests.federated._procs import TAG, tagged, wait_for
from tests.federated._toy import ToyFactory, toy_setup

ROOT = Path(__file__).resolve().parents[2]


def _same_rounds(a, b) -> None:
    for x, y in zip(a.history, b.history, strict=True):
        assert y["bytes"] == x["bytes"]
        assert y["bytes_total"] == x["bytes_total"]
        assert y["accuracy"] == x["accuracy"] and y["loss"] == x["loss"]
        assert y["delay_s"] == pytest.approx(x["delay_s"], rel=1e-12)
        assert y["lost"] == x["lost"] and y["participants"] == x["participants"]
        assert y.get("sampled") == x.get("sampled")


@pytest.mark.slow
def test_a_sampled_run_on_a_pool_of_two_equals_the_simulation(dataset, tmp_path):
    # Prepare: 8 registered clients, 3 sampled a round for 3 rounds, with dropouts and
    # stragglers; sfl with cuts 3,3 puts the toy MLP's dropout in the client part, so a
    # client sampled twice must get its random state back from the worker that hosts it.
    setup = toy_setup(
        dataset,
        8,
        2,
        scheme="sfl",
        cuts=(3, 3),
        rounds=3,
        clients_per_round=3,
        drop_prob=0.2,
        straggler_prob=0.3,
        timeout_s=30.0,
    )
    # Execute
    sim = run_simulation(setup)
    dist = launch_roles(
        setup,
        dataset=dataset,
        model_fn=ToyFactory("mlp"),
        out_dir=tmp_path,
        quiet=True,
        client_workers=2,
    )
    # Assert: the same samples, bytes per tier, delays and scores each round, every byte
    # received, the same weights bit for bit; a client came back (state kept).
    _same_rounds(sim, dist)
    for rec in dist.history:
        assert rec["bytes_received_total"] == rec["bytes_total"]
    sampled = [set(r["sampled"]) for r in sim.history]
    assert sampled[0] & (sampled[1] | sampled[2]) or sampled[1] & sampled[2]
    for key, value in sim.model_state.items():
        assert torch.equal(dist.model_state[key], value), key
    assert dist.info["client_workers"] == 2
    assert dist.info["sampling"]["clients_per_round"] == 3
    assert dist.info["world_size"] == 1 + 2 + 2


@pytest.mark.slow
def test_an_unsampled_run_on_a_pool_equals_a_process_per_client(dataset, tmp_path):
    # Prepare: every client every round (K = N), hsfl over 3 tiers.
    setup = toy_setup(dataset, 3, 2, scheme="hsfl", cuts=(1, 2), timeout_s=30.0)
    kw = {"dataset": dataset, "model_fn": ToyFactory("mlp"), "quiet": True}
    # Execute: a process per client (6 processes), then 2 workers for the 3 clients.
    each = launch_roles(setup, out_dir=tmp_path / "each", **kw)
    pool = launch_roles(setup, out_dir=tmp_path / "pool", client_workers=2, **kw)
    # Assert: the same bytes (sent and received), delays, scores and weights.
    _same_rounds(each, pool)
    assert pool.history[0]["bytes_received_total"] == each.history[0]["bytes_received_total"]
    for key, value in each.model_state.items():
        assert torch.equal(pool.model_state[key], value), key
    assert (each.info["world_size"], pool.info["world_size"]) == (6, 5)


_LAUNCHER = textwrap.dedent(
    """
    import json, sys
    from flowsplit.federated.dist import launch_roles
    from tests.federated._toy import ToyFactory, toy_setup

    def main():
        setup = toy_setup(sys.argv[1], 8, 2, scheme="hsfl", cuts=(1, 2), rounds=3,
                          clients_per_round=4, timeout_s=5.0, min_clients=1,
                          exit_clients={int(sys.argv[3]): 1})
        res = launch_roles(setup, dataset=sys.argv[1], model_fn=ToyFactory("mlp"),
                           out_dir=sys.argv[2], quiet=True, client_workers=2)
        print(json.dumps({"history": res.history, "info": res.info}, default=float))

    if __name__ == "__main__":
        main()
    """
)


@pytest.mark.slow
def test_a_killed_pool_worker_loses_its_round_and_the_others_host_its_clients(dataset, tmp_path):
    # Prepare: the sample of round 2 (as the simulation draws it) and a client of it
    # hosted by worker 0 (even index): its worker exits at the start of round 2.
    setup = toy_setup(dataset, 8, 2, scheme="hsfl", cuts=(1, 2), rounds=3, clients_per_round=4)
    sim = run_simulation(setup)
    sampled = [r["sampled"] for r in sim.history]
    victim = next(i for i in sampled[1] if i % 2 == 0)
    script = tmp_path / "launch.py"
    script.write_text(_LAUNCHER, encoding="utf-8")
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag, "PYTHONPATH": str(ROOT)}
    # Execute
    out = subprocess.run(
        [sys.executable, str(script), str(dataset), str(tmp_path / "run"), str(victim)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    # Assert: the run finishes; round 2 loses exactly worker 0's clients of its sample;
    # round 3 runs every sampled client, worker 0's included (hosted by worker 1), those
    # lost with it too: a client lives in no process between rounds.
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    hist = res["history"]
    assert [r["sampled"] for r in hist] == sampled
    assert hist[0]["lost"] == []
    gone = sorted(i for i in sampled[1] if i % 2 == 0)
    assert hist[1]["lost"] == gone
    rehosted = [i for i in sampled[2] if i % 2 == 0]
    assert hist[2]["lost"] == [] and hist[2]["participants"] == len(sampled[2])
    assert res["info"]["client_workers_lost"] == [0]
    logs = (tmp_path / "run" / "logs" / "server.log").read_text()
    assert "client worker 0 is gone at the start of round 3" in logs
    assert f"(clients {', '.join(map(str, gone))}, lost with it, are back)" in logs
    worker_logs = (tmp_path / "run" / "logs" / "worker-1.log").read_text()
    for i in rehosted:  # worker 0's clients ran on worker 1
        assert f"(client {i}): round 3 done" in worker_logs
    # No role process outlives the launcher.
    assert wait_for(lambda: not tagged(tag), 10.0), tagged(tag)


@pytest.mark.slow
def test_a_stopped_pool_worker_is_ended_and_the_others_host_its_clients(dataset, tmp_path):
    # Prepare: a client of round 2's sample hosted by worker 1 (odd index) stops its
    # worker (SIGSTOP) at the start of round 2: no heartbeat, no answers.
    base = dict(scheme="hsfl", cuts=(1, 2), rounds=3, clients_per_round=4)
    sampled = [r["sampled"] for r in run_simulation(toy_setup(dataset, 8, 2, **base)).history]
    victim = next(i for i in sampled[1] if i % 2 == 1)
    setup = toy_setup(dataset, 8, 2, **base, timeout_s=5.0, min_clients=1, hang_clients={victim: 1})
    # Execute
    res = launch_roles(
        setup,
        dataset=dataset,
        model_fn=ToyFactory("mlp"),
        out_dir=tmp_path,
        quiet=True,
        client_workers=2,
    )
    # Assert: its aggregators drop its clients after --timeout, the launcher ends it
    # (heartbeat), round 3 runs on the other worker, with them; logs name registered clients.
    hung = sorted(i for i in sampled[1] if i % 2 == 1)
    assert [r["lost"] for r in res.history[:2]] == [[], hung]
    assert res.history[2]["lost"] == [] and res.history[2]["participants"] == len(sampled[2])
    assert res.info["client_workers_lost"] == [1]
    logs = "".join(p.read_text() for p in (tmp_path / "logs").glob("aggregator-*.log"))
    assert f"lost client {victim} (on worker 1)" in logs
    assert (
        "client worker 1 is gone at the start of round 3"
        in (tmp_path / "logs" / "server.log").read_text()
    )


def test_round_records_and_hosting():
    # A round's record round-trips; a short or foreign record is refused in one line.
    ids, assignment = np.array([3, 7, 9]), np.array([1, 0, 1])
    skipped, hosts = np.array([False, True, False]), np.array([1, 1, 0])
    got = decode_round(encode_round(ids, assignment, skipped, hosts), "k")
    for a, b in zip(got, (ids, assignment, skipped, hosts), strict=True):
        assert np.array_equal(a, b)
    for raw in (b"\x01" * 12, np.array([1, 5], dtype="<i8").tobytes()):
        with pytest.raises(FlowsplitError, match="k: .* bytes, not a round of this run"):
            decode_round(raw, "k")
    # Registered i on live worker i mod P_alive; no live worker ends the run.
    assert hosts_for(np.array([0, 1, 2, 5]), np.array([True, True])).tolist() == [0, 1, 0, 1]
    assert hosts_for(np.array([0, 1, 2]), np.array([False, True, True])).tolist() == [1, 2, 1]
    with pytest.raises(FlowsplitError, match="every client worker"):
        hosts_for(np.array([0]), np.array([False, False]))


def test_a_sampled_dist_run_without_a_pool_is_refused_before_any_process(dataset):
    setup = toy_setup(dataset, 4, 2, clients_per_round=2)
    with pytest.raises(ConfigError, match="--client-workers"):
        launch_roles(setup, dataset=dataset, model_fn=ToyFactory("mlp"), quiet=True)
    with pytest.raises(ConfigError, match="--client-workers must be >= 1"):
        launch_roles(
            setup, dataset=dataset, model_fn=ToyFactory("mlp"), quiet=True, client_workers=0
        )
