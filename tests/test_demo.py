"""`flowsplit demo`'s wiring: what each stage is asked to run, and its option checks.

The two studies are replaced by recorders (their own tests train for real); the
dataset stage finds a prepared synthetic dataset in OUT and reuses it.
"""

from __future__ import annotations

import json

import pytest

from flowsplit.cli import main
from flowsplit.data.store import TENSOR_VIEWS
from flowsplit.demo import SFL_VIEWS
from flowsplit.experiments.dp import compare as compare_mod
from flowsplit.experiments.sfl import compare as sfl_compare_mod
from tests.train.synth import write_synthetic


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A demo OUT with its dataset prepared, and the studies' calls recorded."""
    write_synthetic(tmp_path / "out" / "dataset", n=60)
    calls = {}

    def fake(name):
        def run(dataset_dir, out_dir, **kw):
            calls[name] = kw
            return out_dir / "report.html"  # no results.json: the overview says so

        return run

    monkeypatch.setattr(compare_mod, "run_compare", fake("dp"))
    monkeypatch.setattr(sfl_compare_mod, "run_sfl_compare", fake("sfl"))
    return tmp_path / "out", calls


def test_demo_asks_for_paired_runs_and_the_cheap_split_learning_setting(recorded, capsys):
    out, calls = recorded
    # Execute
    assert main(["demo", "-o", str(out), "--quiet"]) == 0
    # Assert: 1 and 2 workers over 3 seeds of 3 epochs, in quick mode ...
    dp = calls["dp"]
    assert dp["workers"] == (1, 2) and dp["seeds"] == [0, 1, 2] and dp["epochs"] == 3
    assert dp["models"] == ["cnn", "lstm", "xgboost"] and dp["quick"] is True
    # one same-cores centralised cell per model (1 x 2 threads against 2 workers), seed 0
    assert dp["same_cores_seeds"] == 1
    # ... and split learning on the CNN over the seq view, 8 rounds, the same seeds.
    sfl = calls["sfl"]
    assert (sfl["model"], sfl["view"], sfl["rounds"], sfl["seeds"]) == ("cnn", "seq", 8, (0, 1, 2))
    assert json.loads((out / "report.json").read_text())["timings_s"]["total"] > 0
    assert "demo finished in" in capsys.readouterr().out


def test_demo_view_default_is_the_models_own_and_bad_values_are_refused(recorded, capsys):
    out, calls = recorded
    assert main(["demo", "-o", str(out), "--quiet", "--sfl-view", "default"]) == 0
    assert calls["sfl"]["view"] is None
    assert main(["demo", "-o", str(out), "--quiet", "--sfl-rounds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "flowsplit: error: --sfl-rounds must be >= 1, got 0"
    # The choices are the tensor views (a neural model reads one of them).
    assert set(SFL_VIEWS) == {"default", *TENSOR_VIEWS}
