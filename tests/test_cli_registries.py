"""The CLI's command registries are ``importlib`` strings (``cli.COMMAND_MODULES``,
``SFL_COMMAND_MODULES``, ``SFL_POLICIES``): no import check sees them. This test does:
every registered module exists, has the entry point the CLI calls, sits in a package of
the layers contract (pyproject.toml), and, imported on its own, loads only flowsplit
modules of its own layer or below (an upward import made at import time, by a string
or not, fails here)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from flowsplit import cli

ROOT = Path(__file__).resolve().parents[1]


def _layers() -> list[list[str]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in doc["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """Index of the layer holding ``module`` (0 = top), None when no layer does."""
    for i, layer in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return i
    return None


def _registered() -> dict[str, str]:
    """module -> the attribute the CLI calls on it."""
    out = {m: "register" for m in cli.COMMAND_MODULES if m != cli.SFL_GROUP}
    out.update({m: "sfl_commands" for m in cli.SFL_COMMAND_MODULES})
    out.update({m: factory for m, factory in cli.SFL_POLICIES.values()})
    return out


# One interpreter: the heavy third-party imports once, then each registered module
# imported in a forked child, which reports the flowsplit modules the import loaded.
_PROBE = r"""
import importlib, json, os, sys
import numpy, torch  # noqa: F401  (not flowsplit: loaded once for every child)
result = {}
for name, attr in json.loads(sys.argv[1]).items():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            mod = importlib.import_module(name)
            got = {"loaded": sorted(m for m in sys.modules if m.startswith("flowsplit.")),
                   "callable": callable(getattr(mod, attr, None))}
        except Exception as exc:
            got = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(got).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.waitpid(pid, 0)
    result[name] = json.loads(data)
print(json.dumps(result))
"""


@pytest.mark.slow  # one interpreter importing torch, forking a child per module
def test_every_registered_command_module_imports_within_its_layer():
    layers = _layers()
    registered = _registered()
    assert len(registered) >= 9  # the registries were read, not empty
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(registered)],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    )
    probed = json.loads(out.stdout)
    problems = []
    for name, attr in registered.items():
        got = probed[name]
        if "error" in got:
            problems.append(f"{name}: cannot be imported ({got['error']})")
            continue
        if not got["callable"]:
            problems.append(f"{name}: has no callable {attr}, which the CLI calls")
        own = layer_of(name, layers)
        if own is None:
            problems.append(f"{name}: in no layer of the layers contract")
            continue
        above = [m for m in got["loaded"] if (layer_of(m, layers) or own) < own]
        if above:
            problems.append(f"{name} (layer {own}) loads modules above it: {', '.join(above)}")
    assert not problems, "\n".join(problems)


def test_the_layer_check_sees_an_upward_import():
    layers = _layers()
    # federated sits above train, and the cli above every package it registers
    assert layer_of("flowsplit.federated.dist", layers) < layer_of("flowsplit.train.loop", layers)
    assert layer_of("flowsplit.cli", layers) < layer_of("flowsplit.demo", layers)
    assert layer_of("flowsplit.nowhere", layers) is None
