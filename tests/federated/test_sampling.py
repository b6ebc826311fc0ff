"""Client sampling per round (issue 30): a client exists only while it takes part."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest
import torch

from flowsplit.errors import ConfigError
from flowsplit.federated.assignment import AssignmentPolicy
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.sampling import ClientSampler, parse_selection
from flowsplit.federated.schemes import ParticipationError
from flowsplit.federated.setup import prepare_run
from flowsplit.federated.sim import SimRuntime, run_simulation
from flowsplit.federated.system.partition import Shards
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.federated.system.topology import TraceEvent
from tests.federated._toy import ToyFactory

# The keys of a round's record the digest covers (wall times and timelines excluded).
KEYS = (
    "accuracy",
    "macro_f1",
    "loss",
    "train_loss",
    "delay_s",
    "clock_s",
    "bytes_total",
    "messages_total",
    "bytes",
    "participants",
    "scheduled",
    "dropped",
    "stragglers",
    "lost",
)
CASES = {
    "hsfl": ({"scheme": "hsfl", "cuts": (1, 2), "partition": "dirichlet:0.5"}, "d3f3aae00e695ba4"),
    "hsfl-ll": ({"scheme": "hsfl-ll", "cuts": (1, 2)}, "48e4bc6ff47c1471"),
    # The client part holds the toy MLP's dropout: its random state must persist.
    "sfl-v1": (
        {"scheme": "sfl", "cuts": (3, 3), "sfl_version": "v1", "partition": "site"},
        "13fed8737851741d",
    ),
    "sfl-v2": ({"scheme": "sfl", "cuts": (3, 3), "sfl_version": "v2"}, "9ec95ccde739d183"),
}
"""Digests of two-round runs made by the code before sampling (commit 636f1c0, whose
runtime built every client for the whole run), with the configuration of ``_case``."""


def _digest(result) -> str:
    h = hashlib.sha256()
    for rec in result.history:
        h.update(json.dumps({k: rec[k] for k in KEYS}, sort_keys=True, default=float).encode())
    for name, value in sorted(result.model_state.items()):
        h.update(name.encode())
        h.update(value.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def _case(dataset, clients=6, aggregators=2, **config):
    cfg = SFLConfig(
        **{
            "rounds": 2,
            "batch_size": 16,
            "lr": 1e-2,
            "seed": 11,
            "drop_prob": 0.3,
            "straggler_prob": 0.5,
            **config,
        }
    )
    topo = resolve_topology("heterogeneous", n_clients=clients, n_aggregators=aggregators)
    return prepare_run(cfg, dataset=dataset, model_fn=ToyFactory("mlp"), topology=topo)


@pytest.mark.parametrize("name", list(CASES))
def test_unsampled_and_all_sampled_runs_equal_the_runs_before_sampling(dataset, name):
    # Prepare
    config, before = CASES[name]
    # Execute: no sampling, and every client sampled (K = N).
    plain = run_simulation(_case(dataset, **config))
    every = run_simulation(_case(dataset, clients_per_round=6, **config))
    # Assert: bit for bit the result of the code that held every client all run.
    assert _digest(plain) == before
    assert _digest(every) == before
    assert [r["sampled"] for r in every.history] == [list(range(6))] * 2
    assert "sampled" not in plain.history[0]


def _without_rows(setup, empty: tuple[int, ...]):
    """``setup`` with the clients ``empty`` holding no rows (their rows to client 0)."""
    shards = [np.asarray(s) for s in setup.shards]
    for i in empty:
        shards[0] = np.sort(np.concatenate([shards[0], shards[i]]))
        shards[i] = shards[i][:0]
    shards = Shards.from_list(shards)
    return dataclasses.replace(
        setup, shards=shards, topology=setup.topology.with_samples(shards.sizes)
    )


@pytest.mark.parametrize("scheme", ["hsfl", "sfl"])
def test_sampling_every_client_with_rows_runs_the_sample_alone_and_trains_the_same(dataset, scheme):
    # Prepare: clients 2 and 5 hold no rows, so the sample is 4 of 6 clients and the
    # round runs on those 4 alone (re-indexed 0..3).
    cuts = (1, 2) if scheme == "hsfl" else (3, 3)
    plain = _without_rows(_case(dataset, scheme=scheme, cuts=cuts), (2, 5))
    sampled = _without_rows(_case(dataset, scheme=scheme, cuts=cuts, clients_per_round=6), (2, 5))
    # Execute
    a, b = run_simulation(plain), run_simulation(sampled)
    # Assert: the same model, bytes, delays and scores; the empty clients never sampled.
    for ra, rb in zip(a.history, b.history, strict=True):
        for key in ("accuracy", "loss", "train_loss", "delay_s", "bytes", "participants"):
            assert ra[key] == rb[key], key
        assert rb["sampled"] == [0, 1, 3, 4]
    for name, value in a.model_state.items():
        assert torch.equal(value, b.model_state[name]), name
    assert b.info["sampling"]["clients_without_rows"] == 2


def test_sampled_runs_repeat_by_seed_and_charge_only_the_sample(dataset):
    # Prepare: 3 of 10 clients a round, no faults.
    kw = {"clients": 10, "aggregators": 3, "drop_prob": 0.0, "straggler_prob": 0.0, "rounds": 3}
    # Execute
    one = run_simulation(_case(dataset, clients_per_round=3, **kw))
    again = run_simulation(_case(dataset, clients_per_round=3, **kw))
    other = run_simulation(_case(dataset, clients_per_round=3, **{**kw, "seed": 12}))
    full = run_simulation(_case(dataset, **kw))
    # Assert: the same samples and weights for the same seed, other samples for another.
    samples = [r["sampled"] for r in one.history]
    assert samples == [r["sampled"] for r in again.history]
    assert samples != [r["sampled"] for r in other.history]
    assert all(len(s) == 3 and s == sorted(set(s)) for s in samples)
    assert len({tuple(s) for s in samples}) > 1  # a new sample each round
    for name, value in one.model_state.items():
        assert torch.equal(value, again.model_state[name])
    # Only the sampled clients send: 3 client parts up per round (hsfl), not 10.
    for rec, ref in zip(one.history, full.history, strict=True):
        assert rec["participants"] == 3
        up = rec["bytes"]["client-aggregator"]["up"]["model"]
        assert up * 10 == pytest.approx(ref["bytes"]["client-aggregator"]["up"]["model"] * 3)


def test_a_client_exists_only_while_it_takes_part(dataset):
    # Prepare: sfl with the dropout in the client part, 2 of 8 clients a round.
    setup = _case(dataset, clients=8, scheme="sfl", cuts=(3, 3), clients_per_round=2, rounds=3)
    # Execute
    runtime = SimRuntime(setup)
    history = setup.scheme.run(runtime, setup.config)
    # Assert: no client role or random state outlives its round, but the random states
    # of the clients that drew dropout masks are kept (and only theirs).
    assert not any(a[0] == "client" for a in runtime.rng_states)
    seen = {int(runtime.ids[k]) for k in range(len(runtime.ids))}
    assert seen and set(runtime._client_rng) <= set(range(8))
    assert 0 < len(runtime._client_rng) <= 2 * len(history)
    assert runtime._all_clients is None


def test_selection_strategies_and_flower_minimums(dataset):
    # Prepare: a list, an attribute and an availability trace.
    setup = _case(dataset, clients=10, aggregators=2, select="list:1,4,7,8", clients_per_round=2)
    listed = run_simulation(setup)
    fast = np.sort(setup.topology.client_speed)[5]
    by_attr = run_simulation(
        _case(
            dataset, clients=10, aggregators=2, select=f"attr:speed>={float(fast)!r}", fraction=0.5
        )
    )
    # Execute / Assert: only listed clients; only fast clients, half of the 5 that pass.
    assert all(set(r["sampled"]) <= {1, 4, 7, 8} and len(r["sampled"]) == 2 for r in listed.history)
    speed = setup.topology.client_speed
    for rec in by_attr.history:
        assert all(speed[i] >= fast for i in rec["sampled"])
        assert rec["available"] == 5 and len(rec["sampled"]) == 2
    # An availability trace: clients 0..7 away in round 2, so only 8 and 9 can be drawn.
    trace = [TraceEvent(round=2, until=2, client=i, available=False) for i in range(8)]
    traced = _case(dataset, clients=10, aggregators=2, clients_per_round=3)
    traced = dataclasses.replace(traced, topology=traced.topology.with_trace(trace))
    rec = run_simulation(traced).history[1]
    assert rec["sampled"] == [8, 9] and rec["available"] == 2
    # Flower's minimums end the run with one line.
    with pytest.raises(ParticipationError, match="fewer than --min-available-clients 3"):
        tight = _case(dataset, clients=10, clients_per_round=2, min_available_clients=3)
        run_simulation(dataclasses.replace(tight, topology=tight.topology.with_trace(trace)))


def test_capacity_holds_for_each_sample(dataset):
    # Prepare: 6 of 12 clients a round on 3 aggregators holding at most 2 each, placed by
    # the planner's greedy (as sfl run does).
    from flowsplit.planner.reassign import place_clients

    setup = _case(dataset, clients=12, aggregators=3, clients_per_round=6, capacity=(2,))
    # Execute
    runtime = SimRuntime(setup, policy=AssignmentPolicy(place_clients))
    for r in range(2):
        from flowsplit.federated.schemes import make_round_plan

        plan = runtime.plan_round(make_round_plan(setup.config, r, runtime.n_samples))
        # Assert
        counts = np.bincount(plan.assignment, minlength=3)
        assert counts.max() <= 2 and len(plan.assignment) == 6
        runtime.execute_round(plan)
    # Without a placer an over-full sample is an error, not a silent breach.
    with pytest.raises(ConfigError, match="exceed --capacity"):
        bare = SimRuntime(setup)
        bare.plan_round(make_round_plan(setup.config, 0, bare.n_samples))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("list:", "give uniform"),
        ("list:a,b", "client indices"),
        ("attr:colour>1", "NAME one of"),
        ("attr:speed>fast", "not a number"),
        ("best", "give uniform"),
    ],
)
def test_bad_selections_are_one_line_errors(text, error):
    with pytest.raises(ConfigError, match=error):
        parse_selection(text)


def test_sampling_options_are_checked():
    with pytest.raises(ConfigError, match="not both"):
        SFLConfig(clients_per_round=3, fraction=0.5)
    with pytest.raises(ConfigError, match="--fraction must be in"):
        SFLConfig(fraction=1.5)
    with pytest.raises(ConfigError, match="--min-fit-clients must be >= 1"):
        SFLConfig(min_fit_clients=0)


def test_sampler_draws_from_a_large_federation_quickly():
    # Prepare: 100,000 registered clients, a third without rows.
    n = 100_000
    rows = np.where(np.arange(n) % 3 == 0, 0, 4)
    cfg = SFLConfig(clients_per_round=100, seed=5)
    topo = resolve_topology("homogeneous", n_clients=10, n_aggregators=2)
    sampler = ClientSampler(cfg, rows)
    big = dataclasses.replace(
        topo,
        client_speed=np.ones(n),
        client_memory=np.ones(n, dtype=np.int64),
        client_samples=rows,
        ca_latency=np.zeros((n, 2)),
        ca_bandwidth=np.ones((n, 2)),
    )
    # Execute
    ids, available = sampler.sample(0, big)
    # Assert: 100 distinct clients with rows, of the 66,666 that have some.
    assert len(ids) == 100 and len(set(ids.tolist())) == 100
    assert np.all(rows[ids] > 0) and available == n - (n + 2) // 3
    assert np.array_equal(ids, sampler.sample(0, big)[0])


def test_plan_and_compare_take_the_sampling_options():
    # Prepare / Execute: a study configured to sample, and one with a bad fraction.
    from flowsplit.planner.study import base_config
    from flowsplit.planner.study_config import StudyConfig, StudyRunConfig

    sampled = StudyRunConfig(clients_per_round=4, min_fit_clients=2, select="list:0,1,2,3,4")
    cfg = StudyConfig(run=sampled)
    run = base_config(cfg, seed=3)
    # Assert: every run of the study (pilots, compared schemes) samples alike.
    assert (run.clients_per_round, run.min_fit_clients, run.select) == (4, 2, "list:0,1,2,3,4")
    assert base_config(StudyConfig(), seed=3).clients_per_round is None
    with pytest.raises(ConfigError, match="--fraction must be in"):
        StudyConfig(run=StudyRunConfig(fraction=2.0))


def test_the_cost_model_predicts_each_sampled_round(dataset):
    # Prepare: a sampled run re-planned every round (clients move between rounds).
    from flowsplit.planner.replan import predicted_rounds, replanning_policy

    setup = _case(dataset, clients=10, aggregators=3, clients_per_round=4, rounds=3)
    setup = dataclasses.replace(
        setup, config=dataclasses.replace(setup.config, drop_prob=0.0, straggler_prob=0.0)
    )
    # Execute
    result = run_simulation(setup, policy=replanning_policy())
    predicted = predicted_rounds(setup, result.history, setup.assignment)
    # Assert: the closed form of each round's sample equals what the simulation charged.
    for rec, (delay, nbytes) in zip(result.history, predicted, strict=True):
        assert rec["delay_s"] == pytest.approx(delay, rel=1e-9)
        assert rec["bytes_total"] == pytest.approx(nbytes, rel=1e-9)


def test_a_pool_outside_dist_is_refused_once_before_the_run_is_prepared(
    tmp_path, capsys, monkeypatch
):
    from flowsplit.cli import main
    from flowsplit.federated import setup as setup_mod
    from tests.train.synth import write_synthetic

    # Prepare: a dataset, and a sampled simulation asked for a pool of client workers
    # (a dist option); preparing the run (profiling, loading the data) would be wasted.
    ds = write_synthetic(tmp_path / "ds", n=40)

    def no_prepare(*_a, **_k):
        raise AssertionError("the run was prepared before the refusal")

    monkeypatch.setattr(setup_mod, "prepare_run", no_prepare)
    argv = ["sfl", "run", str(ds), "--clients-per-round", "2", "--client-workers", "2"]
    # Execute
    rc = main([*argv, "--model", "cnn", "--rounds", "1", "-o", str(tmp_path / "o"), "--quiet"])
    # Assert: one line from the command; no run left behind.
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--mode dist" in err[0], err
    assert not (tmp_path / "o" / "metrics.json").exists()
