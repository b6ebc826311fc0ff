"""Testbed tests: those that build one need root, iproute2 and a cgroup cpu controller."""

from __future__ import annotations

import pytest

from flowsplit.testbed import find_testbeds, missing_requirement

_REASON = missing_requirement()
needs_testbed = pytest.mark.skipif(bool(_REASON), reason=_REASON or "testbed available")


def leftovers_of(pid: int) -> set[str]:
    """Tags of testbeds owned by ``pid`` that left anything on the machine."""
    return {t for t in find_testbeds() if t.startswith(f"fstb-{pid}-")}
