"""`flowsplit sfl plan --max-leakage`: the plan stays within a measured leakage budget."""

from __future__ import annotations

import json

from flowsplit.cli import main

from .test_study import _dataset


def test_plan_under_a_leakage_budget_uses_only_allowed_cuts(tmp_path, capsys):
    data = _dataset(tmp_path / "toy")
    leak = tmp_path / "privacy.json"
    leak.write_text(
        json.dumps(
            {
                "model": "cnn",
                "cuts": {
                    "1": {"bytes_recovered": 0.6},
                    "2": {"bytes_recovered": 0.3},
                    "3": {"bytes_recovered": 0.1},
                },
            }
        )
    )
    argv = [
        "sfl",
        "plan",
        str(data),
        "--no-pilots",
        "--weights",
        "0,1,1",
        "--objective",
        "weighted",
        "--topology",
        "homogeneous",
        "--clients",
        "4",
        "--aggregators",
        "2",
        "--quiet",
        "-o",
        str(tmp_path / "plan.json"),
        "--max-leakage",
        "0.3",
        "--leakage-file",
        str(leak),
    ]
    assert main(argv) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["cuts"][0] >= 2  # cut 1 leaks 0.6 > 0.3: no plan may expose it
    eligible = {tuple(c["cuts"]) for c in plan["candidates"] if c["eligible"]}
    assert eligible == {(2, 2), (2, 3), (3, 3)}
    # A budget nothing meets is a one-line error.
    capsys.readouterr()
    assert main([*argv[:-3], "0.05", "--leakage-file", str(leak)]) == 2
    assert "least leaky is (3, 3)" in capsys.readouterr().err
