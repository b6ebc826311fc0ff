"""Fixtures shared by the federated tests."""

from __future__ import annotations

import pytest

from tests.federated._toy import write_toy_dataset


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """The toy dataset of 150 flows the runner's tests read (written once; a test module
    that needs another size defines its own ``dataset``)."""
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "ds", n=150)
