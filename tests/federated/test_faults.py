"""Faults of the split-learning runner: real processes, real signals, on 127.0.0.1.

A stopped launcher takes every role with it and writes nothing after; rounds below
the participation minimum end the run with one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import torch

from flowsplit.cli import main
from flowsplit.errors import FlowsplitError, InputError
from flowsplit.experiments.dp.compare import run_compare
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.dist import launch_roles, read_checkpoint
from flowsplit.federated.schemes import ParticipationError, check_participation
from tests.federated._procs import TAG, tagged, wait_for
from tests.federated._toy import ToyFactory, toy_setup

ROOT = Path(__file__).resolve().parents[2]


_LAUNCHER = textwrap.dedent(
    """
    import sys
    from flowsplit.federated.config import SFLConfig
    from flowsplit.federated.dist import launch_roles
    from flowsplit.federated.setup import prepare_run
    from flowsplit.federated.system.presets import resolve_topology
    from tests.federated._toy import ToyFactory

    cfg = SFLConfig(rounds=int(sys.argv[3]), batch_size=16, seed=1, timeout_s=5.0)
    topo = resolve_topology("homogeneous", n_clients=2, n_aggregators=1)
    setup = prepare_run(cfg, dataset=sys.argv[1], model_fn=ToyFactory("mlp"), topology=topo)
    try:
        launch_roles(setup, dataset=sys.argv[1], model_fn=ToyFactory("mlp"),
                     out_dir=sys.argv[2], quiet=True)
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    """
)


def _start_launcher(
    dataset: Path, out: Path, rounds: int = 500, until: int = 2
) -> tuple[subprocess.Popen, str]:
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(dataset), str(out), str(rounds)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    server_log = out / "logs" / "server.log"
    started = wait_for(
        lambda: server_log.is_file() and f"round {until} starts" in server_log.read_text(), 120
    )
    if not started:
        proc.kill()
        pytest.fail(f"the run never reached round {until}: {proc.communicate()[1][-2000:]}")
    return proc, tag


def _cleanup(proc: subprocess.Popen, tag: str) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in tagged(tag):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM])  # SIGINT, SIGHUP: benchmarks/faults.py
def test_a_stopped_launcher_ends_every_role_and_writes_nothing_after(dataset, tmp_path, sig):
    # Prepare: a 500-round run of 4 processes, under way (round 2 started).
    out = tmp_path / "run"
    proc, tag = _start_launcher(dataset, out)
    try:
        # Execute: the signal a user sends (Ctrl-C reaches the whole process group).
        start = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - start
        # Assert: a one-line error within seconds, no process left, nothing written after.
        assert proc.returncode == 2, err
        assert f"stopped by {sig.name}" in err and "Traceback" not in err, err
        assert took < 15, took
        assert wait_for(lambda: not tagged(tag), 5), tagged(tag)
        time.sleep(1.0)
        assert not (out / "metrics.json").exists() and not (out / "model.pt").exists()
    finally:
        _cleanup(proc, tag)


@pytest.mark.slow
def test_a_killed_launcher_takes_every_role_process_with_it(dataset, tmp_path):
    # Prepare
    out = tmp_path / "run"
    proc, tag = _start_launcher(dataset, out)
    try:
        roles = [p for p in tagged(tag) if p != proc.pid]
        assert len(roles) >= 4  # fork server + server, aggregator, 2 clients
        # Execute: SIGKILL, which the launcher cannot handle.
        proc.kill()
        proc.wait()
        # Assert: the fork server and every role are gone within seconds, and write nothing.
        assert wait_for(lambda: not tagged(tag), 10), tagged(tag)
        time.sleep(1.0)
        assert not (out / "metrics.json").exists()
    finally:
        _cleanup(proc, tag)


def _record(participants: int, scheduled: int, lost: list[int], lost_aggs=()) -> dict:
    return {
        "round": 2,
        "participants": participants,
        "scheduled": scheduled,
        "lost": lost,
        "lost_aggregators": list(lost_aggs),
    }


def test_participation_rules_like_flowers():
    default = SFLConfig()
    check_participation(_record(3, 4, [1]), default)  # 3 of 4: a majority
    with pytest.raises(ParticipationError, match=r"only 2 of 4 .* minimum of 3"):
        check_participation(_record(2, 4, [1, 2]), default)
    with pytest.raises(ParticipationError, match="only 0 of 4"):
        check_participation(_record(0, 4, [0, 1, 2, 3]), default)
    check_participation(_record(2, 4, [1, 2]), SFLConfig(min_clients=2))
    strict = SFLConfig(accept_failures=False)
    with pytest.raises(ParticipationError, match="lost aggregator 1 and --no-accept-failures"):
        check_participation(_record(4, 4, [], lost_aggs=[1]), strict)
    check_participation(_record(4, 4, []), strict)


@pytest.mark.slow
def test_a_round_below_the_minimum_stops_the_dist_run_with_one_line(dataset, tmp_path):
    # Prepare: three of four clients exit at the start of round 2.
    setup = toy_setup(dataset, 4, 2, rounds=3, timeout_s=5.0, exit_clients={0: 1, 1: 1, 3: 1})
    # Execute / Assert: no result, a one-line reason naming the round and the minimum.
    with pytest.raises(FlowsplitError) as info:
        launch_roles(
            setup, dataset=dataset, model_fn=ToyFactory("mlp"), out_dir=tmp_path, quiet=True
        )
    text = str(info.value)
    assert "round 2: only 1 of 4 scheduled clients took part" in text, text
    assert "client 0, client 1, client 3" in text and "\n" not in text
    assert not (tmp_path / "metrics.json").exists()


def test_more_aggregators_than_clients_is_refused(dataset, tmp_path, capsys):
    rc = main(
        [
            "sfl",
            "run",
            str(dataset),
            "-o",
            str(tmp_path / "run"),
            "--clients",
            "2",
            "--aggregators",
            "3",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "3 aggregators for 2 clients" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_compare_refuses_to_write_a_study_into_a_training_run(dataset, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    with pytest.raises(InputError, match="holds metrics.json, not a compare study"):
        run_compare(dataset, run, models=["cnn"], workers=[1], seeds=1, progress=False)
    assert sorted(p.name for p in run.iterdir()) == ["metrics.json"]


def _holder(path: Path, tag: str) -> int | None:
    """The tagged process that has ``path`` open (each role holds its own log)."""
    for pid in tagged(tag):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == str(path):
                    return pid
            except OSError:
                continue
    return None


def test_resume_refuses_a_checkpoint_of_other_options(dataset, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(InputError, match="no SFL checkpoint to resume from"):
        read_checkpoint(out, SFLConfig())
    torch.save(
        {"config": json.dumps(SFLConfig(lr=0.5).to_dict(), sort_keys=True)},
        out / "sfl-checkpoint.pt",
    )
    with pytest.raises(InputError, match="written by a run with other lr"):
        read_checkpoint(out, SFLConfig())


@pytest.mark.slow
def test_sfl_run_resume_out_continues_a_killed_run_with_its_own_options(dataset, tmp_path):
    # Prepare: the uninterrupted 3-round dist run, from the command line.
    args = ["--model", "cnn", "--model-option", "channels=[4,4]", "--model-option", "hidden=8"]
    args += ["--clients", "2", "--aggregators", "1", "--rounds", "3", "--batch-size", "16"]
    args += ["--mode", "dist", "--timeout", "5", "--quiet"]
    assert main(["sfl", "run", str(dataset), *args, "-o", str(tmp_path / "a")]) == 0
    # Execute: the same run in a process of its own, its server SIGKILLed in round 2;
    # then `sfl run --resume OUT` alone (dataset and options from OUT/sfl-run.json).
    out = tmp_path / "b"
    tag = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowsplit", "sfl", "run", str(dataset), *args, "-o", str(out)],
        cwd=ROOT,
        env={**os.environ, TAG: tag, "OMP_NUM_THREADS": "1"},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        log = out / "logs" / "server.log"
        assert wait_for(lambda: log.is_file() and "round 2 starts" in log.read_text(), 120)
        os.kill(_holder(log.resolve(), tag), signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and "server process exited with code -9" in err, err
    finally:
        _cleanup(proc, tag)
    # The killed run left its checkpoint and no result.
    assert not (out / "metrics.json").exists() and (out / "sfl-checkpoint.pt").is_file()
    rc = main(["sfl", "run", "--resume", str(out), "--quiet"])
    # Assert: the uninterrupted run's weights, all 3 rounds.
    assert rc == 0
    a = torch.load(tmp_path / "a" / "model.pt", weights_only=True)
    b = torch.load(out / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len(json.loads((out / "metrics.json").read_text())["rounds"]) == 3


def test_resume_out_without_its_run_file_says_how_to_resume(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    rc = main(["sfl", "run", "--resume", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "sfl-run.json: missing" in err and "-o OUT --resume" in err, err
    assert main(["sfl", "run"]) == 2
    assert "needs a DATASET and -o OUT (or --resume OUT)" in capsys.readouterr().err
