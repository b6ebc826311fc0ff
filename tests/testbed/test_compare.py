"""flowsplit testbed compare: the paired statistics and the refusals (no root needed)."""

from __future__ import annotations

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
