"""Shared test fixtures: paths to the real corpus and free loopback ports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from flowsplit.report.browser import find_chromium
from flowsplit.util import free_port as _free_port

# Tests run side by side on 2 cores: one intra-op thread per test process. Setting
# OMP_NUM_THREADS here would be too late (torch is already imported), so set torch's.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FLOWSPLIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
NDPI_DIR = SHARED_DATA / "ndpi"
USTC_DIR = SHARED_DATA / "ustc-tfc2016"
DEMO_CAPTURES = ROOT / "demo" / "captures"

# Public corpora, not shipped with flowsplit: the README's "Public corpora" says where
# they come from; FLOWSPLIT_SHARED_DATA points at a folder holding ndpi/ and ustc-tfc2016/.
_WHERE = "(set FLOWSPLIT_SHARED_DATA; see the README, Public corpora)"
needs_ndpi = pytest.mark.skipif(
    not (NDPI_DIR / "pcap").is_dir(),
    reason=f"real nDPI corpus not found at {NDPI_DIR} {_WHERE}",
)
needs_ustc = pytest.mark.skipif(
    not USTC_DIR.is_dir(), reason=f"USTC-TFC2016 IDX files not found at {USTC_DIR} {_WHERE}"
)


def pytest_configure(config):
    # CI (.ci/run) installs Chromium and sets this, so the reports' browser checks can
    # never be skipped there unnoticed; elsewhere they skip with a reason.
    if os.environ.get("FLOWSPLIT_REQUIRE_CHROMIUM") == "1" and find_chromium() is None:
        raise pytest.UsageError(
            "FLOWSPLIT_REQUIRE_CHROMIUM=1 but no headless Chromium was found "
            "(install the chromium package, or set FLOWSPLIT_CHROMIUM to its path)"
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (outside the ephemeral range)."""
    return _free_port("127.0.0.1")


@pytest.fixture(autouse=True)
def _quiet_threads(monkeypatch):
    # Child processes started by tests inherit one thread each.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    # An in-process training run sets torch's threads to its layout (cores / workers);
    # put them back so that later tests keep one thread.
    yield
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Test files that start processes (the ``slow`` tests) run first, most such tests
    first; the rest keep their order. pytest-xdist hands out whole files (``--dist
    loadfile --no-loadscope-reorder``, see the Makefile) in this order, so the long
    multi-process files start while the short ones fill the workers' gaps, instead of
    one of them running last on one worker while the other workers sit idle."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def n_slow(tests: list) -> int:
        return sum(t.get_closest_marker("slow") is not None for t in tests)

    ordered = sorted(files.values(), key=n_slow, reverse=True)  # stable: ties keep order
    items[:] = [item for tests in ordered for item in tests]
