"""A pause point for the fault suite (benchmarks/faults.py), imported by Python at start-up.

The suite puts this folder on ``PYTHONPATH`` of one ``sfl run --mode dist`` and sets
``FLOWSPLIT_FAULT_PAUSE=WHO:POINT:ROUND`` and ``FLOWSPLIT_FAULT_MARK=FILE``. The role
``WHO`` (``server``, ``aggregator-J``, ``client-I``) of the distributed runner, on
reaching ``POINT`` in round ``ROUND`` (0-based), writes ``PID POINT`` to ``FILE`` and
stops itself (SIGSTOP). The suite then sends the fault (SIGTERM to the server) and
continues it, so the fault lands at exactly that point of the round; nothing else of
the run changes. Points:

- ``client-compute``: a client sends its 2nd batch's activations (it is training);
- ``client-upload``: a client sends its trained part to its aggregator;
- ``aggregator-step``: an aggregator sends its 2nd batch's activations to the server
  (its part's forward pass is done, the backward waits);
- ``backbone``: the server waits for the 2nd batch's activations on an
  aggregator-server link (the backbone);
- ``server-step``: the server trains its part on the 2nd batch;
- ``gradients-down``: the server sends the 2nd batch's gradients down;
- ``download``: the server sends the round's model to aggregator 1 (aggregator 0 has
  its copy: the way down is half done);
- ``server-collect``: the server receives aggregator 1's averaged part (the upload);
- ``checkpoint``: the server has written ``.sfl-checkpoint.pt.*.tmp`` (fsynced) and
  is about to rename it over ``sfl-checkpoint.pt``.

Without ``FLOWSPLIT_FAULT_PAUSE`` this module does nothing. It patches only the
processes of the run the suite starts, never the installed package.
"""

from __future__ import annotations

import importlib.abc
import os
import signal
import sys

_SPEC = os.environ.get("FLOWSPLIT_FAULT_PAUSE", "")
_MARK = os.environ.get("FLOWSPLIT_FAULT_MARK", "")
_REPLACE = os.replace


class _State:
    who = point = ""
    round = -1
    current = -1  # the round this process's role is in
    counts: dict[str, int] = {}
    fired = False


def _name(address) -> str:
    kind, index = address
    return "server" if kind == "server" else f"{kind}-{index}"


def _pause(point: str) -> None:
    """Mark this process as at ``point`` and stop it, once."""
    if _State.fired:
        return
    _State.fired = True
    tmp = f"{_MARK}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {point}\n")
    _REPLACE(tmp, _MARK)
    os.kill(os.getpid(), signal.SIGSTOP)


def _at(who: str, point: str, nth: int = 1) -> None:
    """Pause if ``who`` is the role asked for at ``point``, the ``nth`` time this round."""
    if _State.fired or who != _State.who or point != _State.point:
        return
    if _State.current != _State.round:
        return
    _State.counts[point] = _State.counts.get(point, 0) + 1
    if _State.counts[point] == nth:
        _pause(point)


def _patch_transport(module) -> None:
    cls = module.GlooTransport
    send, recv = cls.send, cls.recv

    def patched_send(self, op, *, telemetry: bool = False):
        if not telemetry:
            who = _name(self.me)
            kind, dst = op.kind, op.dst
            if kind == "activations" and who.startswith("client"):
                _at(who, "client-compute", 2)
            elif kind == "model" and op.phase == "upload" and who.startswith("client"):
                _at(who, "client-upload")
            elif kind == "activations" and who.startswith("aggregator"):
                _at(who, "aggregator-step", 2)
            elif kind == "gradients" and who == "server":
                _at(who, "gradients-down", 2)
            elif kind == "model" and who == "server" and dst == ("aggregator", 1):
                _at(who, "download")
        return send(self, op, telemetry=telemetry)

    def patched_recv(self, op, *, telemetry: bool = False):
        if not telemetry and _name(self.me) == "server":
            if op.kind == "activations":
                _at("server", "backbone", 2)
            elif op.kind == "model" and op.src == ("aggregator", 1):
                _at("server", "server-collect")
        return recv(self, op, telemetry=telemetry)

    cls.send, cls.recv = patched_send, patched_recv


def _track_round(cls) -> None:
    run_round = cls.run_round

    def patched(self, plan):
        _State.current = int(plan.round)
        return (yield from run_round(self, plan))

    cls.run_round = patched


def _patch_roles(module) -> None:
    _track_round(module.Client)
    _track_round(module.EdgeAggregator)


def _patch_server(module) -> None:
    cls = module.CloudServer
    _track_round(cls)
    train_on = cls.train_on

    def patched_train_on(self, *args, **kwargs):
        _at("server", "server-step", 2)
        return train_on(self, *args, **kwargs)

    cls.train_on = patched_train_on

    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith("sfl-checkpoint.pt"):
            _at("server", "checkpoint")
        return _REPLACE(src, dst, *args, **kwargs)

    os.replace = replace


_PATCHES = {
    "flowsplit.federated.transport": _patch_transport,
    "flowsplit.federated.roles": _patch_roles,
    "flowsplit.federated.server": _patch_server,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Patch the modules above right after they are first executed."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader, patch = spec.loader, _PATCHES[name]
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            patch(module)

        loader.exec_module = exec_module
        return spec


if _SPEC and _MARK:
    _State.who, _State.point, rnd = _SPEC.split(":")
    _State.round = int(rnd)
    sys.meta_path.insert(0, _Finder())
