"""Every socket flowsplit listens on, measured (issue 31 item 6).

A watcher thread samples the listening TCP sockets of this process and its children
while a real 2-worker run trains: DDP (gloo), SFL ``--mode dist`` and XGBoost on a
Dask LocalCluster. Everything flowsplit opens listens on the loopback. The one
exception is XGBoost's own: while boosting, each Dask worker's collective peer
listener binds every interface (XGBoost 3.x binds it to INADDR_ANY and offers no
option to choose; docs/robustness.md says so), so the test pins it to the worker
processes, ephemeral ports, and a few per worker.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shlex
import threading
from collections.abc import Iterator

import psutil
import pytest

from flowsplit.cli import main
from tests.train.synth import write_synthetic

SMALL_CNN = "--model-option channels=[4,4] --model-option hidden=8 --batch-size 8"


@contextlib.contextmanager
def listeners() -> Iterator[dict[tuple[str, int], bool]]:
    """``{(address, port): in_this_process}`` of every listening TCP socket of this
    process and its descendants, sampled every 20 ms while the block runs."""
    me = psutil.Process()
    seen: dict[tuple[str, int], bool] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                pids = {me.pid} | {c.pid for c in me.children(recursive=True)}
                for c in psutil.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN and c.pid in pids:
                        seen[(c.laddr.ip, c.laddr.port)] = c.pid == me.pid
            except psutil.Error:
                pass  # a child ended while we looked
            done.wait(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()


def _loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("listen") / "ds", n=80, n_classes=2)


@pytest.mark.slow  # processes
@pytest.mark.parametrize(
    "command",
    [
        f"train {{data}} -m cnn --workers 2 --epochs 1 {SMALL_CNN} -o {{out}} -q",
        f"sfl run {{data}} --model cnn {SMALL_CNN} --mode dist --clients 2 --aggregators 1 "
        "--rounds 1 --quiet -o {out}",
    ],
    ids=["ddp", "sfl-dist"],
)
def test_ddp_and_sfl_dist_listen_on_the_loopback_only(command, data, tmp_path):
    # Execute
    with listeners() as seen:
        rc = main(shlex.split(command.format(data=data, out=tmp_path / "out")))
    # Assert: it listened (the watcher saw the rendezvous), and only on the loopback
    assert rc == 0
    assert seen, "no listening socket seen: the watcher saw nothing"
    assert all(_loopback(ip) for ip, _ in seen), sorted(seen)


@pytest.mark.slow  # a Dask cluster
def test_xgboost_on_dask_listens_on_the_loopback_but_for_xgboosts_peer_listeners(data, tmp_path):
    # Execute: 2 Dask workers boosting long enough for the watcher to see them
    argv = f"train {data} -m xgboost --workers 2 --boost-rounds 40 -o {tmp_path / 'x'} -q"
    with listeners() as seen:
        rc = main(shlex.split(argv))
    # Assert: scheduler, tracker, dashboard (this process) and the workers' own Dask
    # sockets on the loopback; on other interfaces only XGBoost's peer listeners, in the
    # worker processes, on ephemeral ports, a few per worker.
    assert rc == 0
    mine = {k for k, in_me in seen.items() if in_me}
    assert mine and all(_loopback(ip) for ip, _ in mine), sorted(mine)
    wide = sorted(k for k in seen if not _loopback(k[0]))
    assert all(ip in ("0.0.0.0", "::") and not seen[(ip, port)] for ip, port in wide), wide
    assert all(port >= 1024 for _, port in wide) and len(wide) <= 2 * 2, wide
    assert any(_loopback(ip) and not in_me for (ip, _), in_me in seen.items())  # workers'
