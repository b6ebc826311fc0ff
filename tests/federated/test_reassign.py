"""A lost aggregator's clients are reassigned by the planner's greedy (issue 14 item 3).

In the simulation the failure is scheduled (``--fail aggregator:J@roundR``); in the
distributed runner the aggregator's process SIGKILLs itself at the same point, and the
two must report the same rounds and end on the same weights.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from flowsplit.cli import main
from flowsplit.errors import ConfigError, FlowsplitError
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.dist import launch_roles
from flowsplit.federated.predict import predict_ledger
from flowsplit.federated.schemes import make_round_plan
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import run_simulation
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.planner.reassign import place_clients, reassigning_policy
from tests.federated._toy import ToyFactory


def _setup(dataset, **kw):
    cfg = SFLConfig(**{"rounds": 4, "batch_size": 16, "lr": 1e-2, "seed": 11, **kw})
    topo = resolve_topology("heterogeneous", n_clients=6, n_aggregators=3)
    return prepare_run(cfg, dataset=dataset, model_fn=ToyFactory("mlp"), topology=topo)


def test_a_failed_aggregators_clients_are_lost_once_then_moved(dataset):
    # Prepare: 6 clients round-robin on 3 aggregators; aggregator 1 (clients 1 and 4)
    # is gone from round 2 on.
    setup = _setup(dataset, fail=["aggregator:1@round2"])
    assert setup.assignment.tolist() == [0, 1, 2, 0, 1, 2]
    # Execute
    result = run_simulation(setup, policy=reassigning_policy())
    # Assert: round 2 lost both clients; from round 3 they are at surviving aggregators
    # and every client takes part again.
    h = result.history
    assert [r["participants"] for r in h] == [6, 4, 6, 6]
    assert h[1]["lost"] == [1, 4] and h[1]["lost_aggregators"] == [1]
    assert h[2]["lost"] == [] and h[3]["lost_aggregators"] == [1]
    moves = h[2]["reassigned"]
    assert [m[:2] for m in moves] == [[1, 1], [4, 1]] and all(m[2] in (0, 2) for m in moves)
    assert [r["reassigned"] for r in (h[0], h[1], h[3])] == [[], [], []]
    final = np.array(result.info["final_assignment"])
    assert not (final == 1).any()
    assert result.info["reassignments"] == [
        {"round": 3, "client": c, "from": f, "to": t} for c, f, t in moves
    ]
    # Round 3's bytes are those the cost model predicts for the new assignment.
    plan = make_round_plan(setup.config, 2, setup.n_samples)
    predicted = predict_ledger(
        setup.costs, setup.topology, final, scheme=setup.scheme, batch_size=16,
        participants=plan.participants, slowdown=plan.slowdown,
    )  # fmt: skip
    assert h[2]["bytes_total"] == predicted.bytes_total


def test_reassignment_respects_capacity(dataset):
    # Prepare: at most 3 clients per aggregator: the two movers cannot both go to one.
    setup = _setup(dataset, fail=["aggregator:1@round2"], capacity=(3,))
    # Execute
    result = run_simulation(setup, policy=reassigning_policy())
    # Assert
    final = np.array(result.info["final_assignment"])
    assert np.bincount(final, minlength=3).tolist() == [3, 0, 3]
    assert result.history[-1]["participants"] == 6


def test_movers_without_room_stay_lost(dataset):
    # Prepare: capacity 2: the survivors are full, nobody can take the movers.
    setup = _setup(dataset, fail=["aggregator:1@round2"], capacity=(2,), min_clients=4)
    previous = setup.assignment
    movers = previous == 1
    alive = np.array([True, False, True])
    # Execute
    placed = place_clients(setup, setup.topology, previous, movers, alive)
    result = run_simulation(setup, policy=reassigning_policy())
    # Assert: the greedy keeps them where they were; the run goes on with 4 clients.
    assert placed.tolist() == previous.tolist()
    assert [r["participants"] for r in result.history] == [6, 4, 4, 4]


def test_without_a_placer_the_clients_stay_lost(dataset):
    # The runtime alone (no planner) keeps the old rule: the clients are dropped.
    result = run_simulation(_setup(dataset, fail=["aggregator:1@round2"], min_clients=4))
    assert [r["participants"] for r in result.history] == [6, 4, 4, 4]
    assert result.history[-1]["lost"] == [1, 4]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"fail": ["aggregator:3@round2"]}, "aggregators 0..2"),
        ({"fail": ["server@round2"]}, "write aggregator:J@roundR"),
        ({"fail": ["aggregator:1@round0"]}, "R >= 1"),
        ({"capacity": (3, 3)}, "2 values for 3 aggregators"),
    ],
)
def test_bad_fault_schedules_and_capacities_are_one_line_errors(dataset, kw, message):
    with pytest.raises(ConfigError, match=message):
        _setup(dataset, **kw)


def test_sfl_run_fail_reassigns_through_the_cli(dataset, tmp_path):
    # Prepare / Execute: the command line, two failures given two ways.
    out = tmp_path / "run"
    argv = [
        "sfl", "run", str(dataset), "--model", "cnn", "--model-option", "channels=[4,4]",
        "--model-option", "hidden=8", "--clients", "6", "--aggregators", "3", "--rounds", "4",
        "--batch-size", "16", "--fail", "aggregator:1@round2", "--fail", "aggregator:2@round3",
        "--min-clients", "2", "-o", str(out), "--quiet",
    ]  # fmt: skip
    rc = main(argv)
    # Assert: everyone ends on aggregator 0, and the result lists each move.
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["extra"]["final_assignment"] == [0] * 6
    moves = metrics["extra"]["reassignments"]
    assert [(m["client"], m["from"]) for m in moves if m["round"] == 3] == [(1, 1), (4, 1)]
    later = [m for m in moves if m["round"] == 4]
    on_2 = {2, 5} | {m["client"] for m in moves if m["round"] == 3 and m["to"] == 2}
    assert {m["client"] for m in later} == on_2 and {m["from"] for m in later} == {2}
    assert metrics["rounds"][-1]["participants"] == 6
    config = json.loads((out / "config.json").read_text())
    assert config["fail"] == ["aggregator:1@round2", "aggregator:2@round3"]


@pytest.mark.slow
@pytest.mark.parametrize(("scheme", "cuts"), [("hsfl", (1, 2)), ("sfl", (2, 2))])
def test_dist_with_a_real_kill_equals_the_simulated_failure(dataset, tmp_path, scheme, cuts):
    # Prepare: aggregator 1 is gone from round 3 of 5; in dist its process SIGKILLs
    # itself at the start of round 3.
    setup = _setup(
        dataset, scheme=scheme, cuts=cuts, rounds=5, fail=["aggregator:1@round3"], timeout_s=20.0
    )
    # Execute
    sim = run_simulation(setup, policy=reassigning_policy())
    dist = launch_roles(
        setup,
        dataset=dataset,
        model_fn=ToyFactory("mlp"),
        out_dir=tmp_path,
        quiet=True,
        policy=reassigning_policy(),
    )
    # Assert: the same rounds (participants, losses, moves, bytes, accuracy), every byte
    # sent received, and the same final weights.
    keys = ("participants", "lost", "lost_aggregators", "reassigned", "bytes", "accuracy")
    for s, d in zip(sim.history, dist.history, strict=True):
        assert {k: d[k] for k in keys} == {k: s[k] for k in keys}
        assert d["bytes_total"] == s["bytes_total"] == d["bytes_received_total"]
    assert [r["participants"] for r in dist.history] == [6, 6, 4, 6, 6]
    assert dist.info["reassignments"] == sim.info["reassignments"] != []
    for key, value in sim.model_state.items():
        torch.testing.assert_close(dist.model_state[key], value, rtol=1e-6, atol=1e-7)
    assert "SIGKILLs itself" in (tmp_path / "logs" / "aggregator-1.log").read_text()


def _holder(path: Path) -> int | None:
    """The process that has ``path`` open (a role holds its own log file)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            for fd in (d / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == str(path):
                        return int(d.name)
    return None


def _stop_when(out: Path, role: str, round_no: int, stopped: list) -> None:
    """SIGSTOP ``role``'s process once the server has started round ``round_no``."""
    server_log = out / "logs" / "server.log"
    end = time.monotonic() + 120
    while time.monotonic() < end:
        if server_log.is_file() and f"round {round_no} starts" in server_log.read_text():
            pid = _holder((out / "logs" / f"{role}.log").resolve())
            if pid is not None:
                os.kill(pid, signal.SIGSTOP)
                stopped.append((pid, time.monotonic()))
            return
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("role", ["aggregator-1", "server"])
def test_a_stopped_upper_tier_role_is_found_by_its_heartbeat(dataset, tmp_path, role):
    # Prepare: a 6-round run; SIGSTOP the role once round 2 has started.
    setup = _setup(dataset, rounds=6, timeout_s=5.0, min_clients=4)
    stopped: list = []
    thread = threading.Thread(target=_stop_when, args=(tmp_path, role, 2, stopped))
    thread.start()
    # Execute
    start = time.monotonic()
    try:
        if role == "server":
            with pytest.raises(FlowsplitError) as info:
                launch_roles(
                    setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path,
                    quiet=True, policy=reassigning_policy(),
                )  # fmt: skip
        else:
            result = launch_roles(
                setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path,
                quiet=True, policy=reassigning_policy(),
            )  # fmt: skip
    finally:
        thread.join()
        for pid, _ in stopped:  # never leave a stopped process behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    # Assert: found within the heartbeat timeout (5 s) plus a margin; a stopped server
    # ends the run with one line naming it; a stopped aggregator's clients are moved.
    assert stopped, "the role was never stopped"
    if role == "server":
        assert "server (rank 0) sent no heartbeat for 5 s" in str(info.value)
        assert time.monotonic() - stopped[0][1] < 30
        assert not (tmp_path / "metrics.json").exists()
        return
    h = result.history
    assert h[-1]["lost_aggregators"] == [1] and h[-1]["participants"] == 6
    assert result.info["final_assignment"].count(1) == 0
    assert {m["client"] for m in result.info["reassignments"]} == {1, 4}
    assert time.monotonic() - start < 120
