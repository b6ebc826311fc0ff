"""flowsplit testbed compare: the paired statistics and the refusals (no root needed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from flowsplit.testbed.compare import gains_lines, paired


def test_paired_relative_differences_and_their_t_interval():
    # Prepare: per (method, seed) measured delays; HSFL takes 10 s for every seed.
    values = {("hsfl", s): {"d": 10.0} for s in (0, 1, 2)}
    values |= {("delay", 0): {"d": 5.0}, ("delay", 1): {"d": 6.0}, ("delay", 2): {"d": 7.0}}
    values |= {("acc-aware", 0): {"d": 12.0}}  # one seed only: no interval
    # Execute
    got = paired(values, "hsfl", "d", [0, 1, 2])
    # Assert: -50 %, -40 %, -30 %: mean -40 %, sd 10 %, t(0.975, 2) = 4.303.
    assert got["delay"]["n"] == 3 and got["delay"]["mean"] == pytest.approx(-0.4)
    lo, hi = got["delay"]["ci95"]
    assert hi - (-0.4) == pytest.approx(4.303 * 0.1 / 3**0.5, rel=1e-3)
    assert lo == pytest.approx(-0.4 - (hi + 0.4))
    assert got["acc-aware"] == {"n": 1, "mean": pytest.approx(0.2)}
    assert got["hsfl-greedy"] == {"n": 0, "mean": None}


def test_gains_lines_say_measured_with_the_interval_and_the_prediction():
    doc = {
        "measured_vs_hsfl": {"delay": {"delay": {"n": 3, "mean": -0.4, "ci95": [-0.65, -0.15]}}},
        "predicted_vs_hsfl": {"delay_replay": {"delay": {"n": 3, "mean": -0.35}}},
        "measured_vs_hsfl_greedy": {"delay": {"delay": {"n": 3, "mean": None}}},
        "predicted_vs_hsfl_greedy": {"delay_replay": {}},
    }
    (line,) = gains_lines(doc)
    assert line == (
        "delay vs HSFL: measured delay -40% (95 % CI -65% to -15%) over 3 seeds; "
        "predicted (replay) -35%"
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["/nonexistent.toml", "."], "no such topology file"),
        (["TOPO", "/nonexistent-data"], "no such prepared dataset"),
        (["TOPO", ".", "--seeds", "0,x"], "give a count (5) or a list (0,1,2)"),
        (["TOPO", ".", "--seeds", "1"], "2 seeds or more"),  # a count, as in every command
    ],
)
def test_bad_input_is_one_line_naming_the_value(tmp_path, argv, words):
    topo = tmp_path / "t.toml"
    topo.write_text("")
    argv = [str(topo) if a == "TOPO" else a for a in argv]
    got = subprocess.run(
        [sys.executable, "-m", "flowsplit", "testbed", "compare", *argv, "-o", "x.json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert got.returncode == 2
    assert words in got.stderr and "Traceback" not in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1


def test_compare_on_testbed_runs_every_plan_and_pairs_the_truth_run(tmp_path, monkeypatch):
    """The orchestration without root: probe, plans, runs and the truth run replaced by
    fakes that record what they were given; the document pairs them by seed."""
    from flowsplit.federated.system.presets import homogeneous
    from flowsplit.federated.system.topology import write_topology
    from flowsplit.testbed import bed, compare

    topo = tmp_path / "t.toml"
    write_topology(homogeneous(4, 2), topo)

    class FakeBed:
        def __init__(self, spec):
            self.spec = spec

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    delays = {"hsfl": 10.0, "hsfl-greedy": 8.0, "acc-aware": 6.0, "delay": 5.0}
    ports = []

    def fake_plans(topo_file, seeds, dataset, opts, work, study=None, tag=""):
        methods = ("acc-aware",) if tag else compare.METHODS
        plans = {
            (m, s): {"file": work / f"{m}{s}{tag}", "cuts": [1, 2 if tag else 3], "assignment": [0]}
            for m in methods
            for s in seeds
        }
        return {"plans": plans, "planning_s": 0.0, "study": "S"}

    def fake_run(tb, plan_file, out, dataset, opts, port):
        ports.append(port)
        method, seed = re.fullmatch(r"(.+?)(\d)(-truth)?", plan_file.name).group(1, 2)
        seed = int(seed)
        extra = 1.0 if plan_file.name.endswith("-truth") else 0.0
        return {"measured_delay_s": delays[method] + seed + extra, "bytes": 100}

    monkeypatch.setattr(bed, "Testbed", FakeBed)
    monkeypatch.setattr(compare, "probe", lambda *a: {"probed": True})
    monkeypatch.setattr(compare, "make_plans", fake_plans)
    monkeypatch.setattr(compare, "run_plan", fake_run)
    opts = compare.CompareOptions(seeds=(0, 1), truth=True)
    doc = compare.compare_on_testbed(
        topo, "DS", tmp_path / "w", opts, port=100, log=lambda *_: None
    )
    # Every (method, seed) ran once, then the truth plan: each on its own port.
    assert len(doc["runs"]) == 8 and len(ports) == 9 and len(set(ports)) == 9
    assert {(r["method"], r["seed"]) for r in doc["runs"]} == {
        (m, s) for m in compare.METHODS for s in (0, 1)
    }
    # delay vs HSFL: 5/10 - 1 and 6/11 - 1 (the seed adds a second to both).
    got = doc["measured_vs_hsfl"]["delay"]["delay"]
    assert got["mean"] == pytest.approx(((5 / 10 - 1) + (6 / 11 - 1)) / 2)
    pvt = doc["probe_vs_truth"]
    assert pvt["probe_plan"] == {"cuts": [1, 3], "measured_delay_s": 6.0}
    assert pvt["truth_plan"] == {"cuts": [1, 2], "measured_delay_s": 7.0}
    assert pvt["same_plan"] is False and pvt["rel_difference"] == pytest.approx(6 / 7 - 1)
