"""Fixtures shared by the experiments tests."""

from __future__ import annotations

import pytest

from flowsplit.experiments.sfl.compare import run_sfl_compare
from tests.federated._toy import ToyFactory, write_toy_dataset


@pytest.fixture(scope="session")
def toy_sfl_study(tmp_path_factory):
    """``ROOT/sfl``: one toy-sized split-learning comparison (5 clients, 2 aggregators,
    2 seeds, 2 rounds, 3 pilots of 4 steps), run once for the tests that read a study:
    its results and report, and the browser check of its pages."""
    root = tmp_path_factory.mktemp("toy-sfl-study")
    data = write_toy_dataset(root / "toy", n=150)
    out = root / "sfl"
    report = run_sfl_compare(
        data,
        out,
        model="toy",
        model_fn=ToyFactory("mlp"),
        seeds=(0, 1),
        rounds=2,
        n_clients=5,
        n_aggregators=2,
        n_pilots=3,
        pilot_steps=4,
        quiet=True,
    )
    assert report == out / "report.html"
    return out
