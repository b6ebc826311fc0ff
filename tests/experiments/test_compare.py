"""The comparison study end to end on a tiny dataset with a fake training engine."""

from __future__ import annotations

import csv
import json
import math

import pytest

from flowsplit.errors import ConfigError
from flowsplit.experiments.dp import compare as compare_mod
from flowsplit.experiments.dp import records as records_mod
from flowsplit.experiments.dp.compare import plan_cells, run_compare
from flowsplit.experiments.dp.report import render_report
from flowsplit.report import page as page_mod
from tests.experiments.helpers import EVIL_CLASS, fake_allreduce, fake_runner, make_dataset

# A valid 1x1 PNG: tests that check numbers, not pictures, skip matplotlib's drawing.
TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_mod, "available_cores", lambda: 2)
    # The fake engine finishes in milliseconds, where CPU counters are too coarse to
    # judge contention; contention has its own tests.
    monkeypatch.setattr(records_mod, "CONTENDED_SHARE", math.inf)
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "study"
    fake_allreduce(out)
    return ds, out


@pytest.fixture
def fast_figures(monkeypatch):
    monkeypatch.setattr(page_mod, "figure_to_base64", lambda fig, dpi=100: TINY_PNG)


def test_plan_is_seed_major():
    cells = plan_cells(["a", "b"], [1, 2], [0, 1])
    assert [c.name for c in cells[:4]] == ["a/w1/seed0", "a/w2/seed0", "b/w1/seed0", "b/w2/seed0"]


def test_same_cores_cell_is_planned_for_the_largest_worker_count_that_fits():
    from flowsplit.experiments.dp.layout import same_cores_workers, study_cells

    assert same_cores_workers([1, 2, 4], 1, cores=2) == 2  # 4 x 1 threads exceed 2 cores
    assert same_cores_workers([1, 2, 4], 1, cores=8) == 4
    assert same_cores_workers([1, 2, 4], 2, cores=2) == 4  # none fits: the largest
    assert same_cores_workers([1], 1, cores=8) is None
    cfg = {"models": ["cnn"], "workers": [1, 2, 4], "seeds": [0, 1], "threads": 2}
    old = [c.name for c in study_cells(cfg, cores=8)]  # a study made before the cell
    assert old == [f"cnn/w{n}/seed{s}" for s in (0, 1) for n in (1, 2, 4)]
    new = [c.name for c in study_cells({**cfg, "same_cores_seeds": 1}, cores=8)]
    assert new == [*old[:3], "cnn/w1-t8/seed0", *old[3:]]
    assert len(study_cells({**cfg, "same_cores_seeds": None}, cores=8)) == 8


def test_compare_writes_report_and_resumes(study, fast_figures):
    # Prepare
    ds, out = study
    calls: list[str] = []
    # Execute: one cell fails the first time
    path = run_compare(
        ds,
        out,
        models=["cnn", "lstm"],
        workers=[2, 4],
        seeds=3,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner({"lstm/w2/seed1"}, calls),
    )
    # Assert: 2 models x (3 worker counts (1 added) + the same-cores centralised cell of
    # 2 x 1 threads, 4 workers exceeding the 2 cores) x 3 seeds were tried
    assert len(calls) == 24 and "cnn/w1-t2/seed0" in calls
    results = json.loads((out / "results.json").read_text())
    assert list(results["failures"]) == ["lstm/w2/seed1"]
    assert len(results["cells"]) == 23
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 23 and rows[0]["model"] == "cnn"
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert EVIL_CLASS not in page and "onerror=&quot;alert(1)&quot;" in page
    assert "oversubscribed" in page
    md = (out / "report.md").read_text()
    assert "## Summary" in md and "<img" not in md
    assert "quick settings (--quick): short runs" in md and "quick settings (--quick)" in page

    # Execute again: only the failed cell runs.
    calls.clear()
    run_compare(
        ds,
        out,
        models=["cnn", "lstm"],
        workers=[2, 4],
        seeds=3,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner(calls=calls),
    )
    assert calls == ["lstm/w2/seed1"]
    assert json.loads((out / "results.json").read_text())["failures"] == {}


def test_compare_statistics_and_scaling_from_fake_engine(study, fast_figures):
    # Prepare: fake timings follow compute 2 ms/sample x 60 samples / N x core sharing
    # plus one ring all-reduce of 400 kB on the benchmarked host per epoch.
    ds, out = study
    # Execute
    run_compare(
        ds,
        out,
        models=["cnn"],
        workers=[2, 4],
        seeds=5,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner(),
    )
    res = json.loads((out / "results.json").read_text())
    cnn = res["analysis"]["models"]["cnn"]
    # Assert: accuracy per seed is identical in both modes -> constant differences of 0.
    assert cnn["vs_central"]["2"]["accuracy"]["verdict"] == "equivalent"
    assert cnn["vs_central"]["4"]["oversubscribed"] is True
    assert cnn["vs_central"]["2"]["oversubscribed"] is False
    # speedup 2 workers: 0.12 s / (0.06 s + all-reduce) within 1 % noise
    assert 1.6 < cnn["vs_central"]["2"]["speedup"]["mean"] < 2.0
    scaling = cnn["scaling"]
    assert scaling["max_abs_error"] < 0.05
    assert scaling["model"]["compute_per_sample_s"] == pytest.approx(2e-3, rel=0.05)
    assert len(cnn["vs_central"]["2"]["mcnemar"]) == 5
    assert any("2 workers cut cnn's epoch time" in s for s in res["summary"])
    assert any("oversubscribed" in s for s in res["summary"])
    # The same-cores comparison: 2 workers x 1 thread against one process of 2 threads
    # (4 workers exceed the 2 cores), whose compute the fake engine divides by 2 ** 0.7:
    # 0.12 s / 1.62 = 0.074 s against 0.06 s + the all-reduce, about 1.2x.
    same = cnn["same_cores"]
    assert (same["n_workers"], same["threads_per_worker"], same["central_threads"]) == (2, 1, 2)
    assert same["seeds"] == [0, 1, 2, 3, 4] and same["speedup_claimed"] is True
    assert 1.1 < same["speedup"]["mean"] < 1.3 and same["speedup"]["low"] > 1
    assert same["central"]["n_runs"] == 5 and same["central"]["threads_per_worker"] == 2
    # ... kept out of the centralised group (5 runs of 1 thread) and the per-class table.
    assert cnn["by_workers"]["1"]["n_runs"] == 5
    assert cnn["by_workers"]["1"]["threads_per_worker"] == 1
    assert {c["threads_per_worker"] for c in res["cells"] if c["workers"] == 1} == {1, 2}
    line = next(s for s in res["summary"] if "cut cnn's epoch time" in s)
    assert "[2 workers x 1 thread against 1 x 1 thread]" in line
    assert "against one cnn process with the same 2 threads: 1.2" in line
    assert "95 % CI" in line.split("same 2 threads")[1]
    assert "cnn 1.9" in res["summary"][0] and ", against 1 x 2 threads 1.2" in res["summary"][0]
    assert "same 2 threads" in (out / "report.html").read_text()
    # The verdict chart's point of the 2-thread process: 2 ** 0.7 = 1.62x the 1-thread one's.
    from flowsplit.experiments.dp.plots import _same_cores_point
    from flowsplit.experiments.dp.result import read_compare_result

    (point,) = _same_cores_point("cnn", read_compare_result(out).analysis.models["cnn"])
    assert point["label"] == "cnn, centralised 1 x 2 threads"
    assert point["x"]["speedup"] == pytest.approx(2**0.7, rel=0.03)
    assert "same 2 threads" in (out / "report.md").read_text()


def test_a_study_without_same_cores_cells_still_reads_and_renders(study, fast_figures):
    # Prepare: a study as made before the same-cores cell (schema 1, no same_cores).
    from flowsplit.errors import InputError
    from flowsplit.experiments.advice import overview_content
    from flowsplit.experiments.dp.page import report_page
    from flowsplit.experiments.dp.result import read_compare_result

    ds, out = study
    calls: list[str] = []
    run_compare(ds, out, models=["cnn"], workers=[2], seeds=2, quick=True, progress=False,
                run_cell_fn=fake_runner(calls=calls), same_cores_seeds=0)  # fmt: skip
    assert not any("-t" in c for c in calls)
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema_version"] == 2 and doc["analysis"]["models"]["cnn"]["same_cores"] is None
    del doc["schema_version"]
    del doc["analysis"]["models"]["cnn"]["same_cores"]
    (out / "results.json").write_text(json.dumps(doc))
    # Execute
    old = read_compare_result(out)
    # Assert: it reads (no same-cores figure), renders, and feeds the overview.
    assert old.analysis.models["cnn"].same_cores is None
    assert "same 2 threads" not in " ".join(old.summary)
    assert "2 workers x 1 thread(s) against 1 x 1 thread(s)" in old.summary[0]
    assert "## Summary" in report_page(old, []).markdown()
    assert report_page(old, []).html().startswith("<!DOCTYPE html>")
    assert overview_content(out, None).advice
    # A version from the future is one line naming the versions this one reads.
    doc["schema_version"] = 3
    (out / "results.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="schema version 3, this flowsplit reads version 1, 2"):
        read_compare_result(out)


def test_report_rerenders_and_rejects_changed_settings(study, fast_figures):
    ds, out = study
    run_compare(
        ds,
        out,
        models=["cnn"],
        workers=[2],
        seeds=2,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner(),
    )
    (out / "report.html").unlink()
    assert render_report(out).is_file()
    with pytest.raises(ConfigError, match="different epochs"):
        run_compare(
            ds,
            out,
            models=["cnn"],
            workers=[2],
            seeds=2,
            epochs=7,
            progress=False,
            run_cell_fn=fake_runner(),
        )


def test_cli_compare_and_report(study, fast_figures, monkeypatch, capsys):
    from flowsplit.cli import main

    ds, out = study
    monkeypatch.setattr(compare_mod, "run_cell_subprocess", fake_runner())
    monkeypatch.setattr(
        compare_mod.run_compare,
        "__kwdefaults__",
        {**compare_mod.run_compare.__kwdefaults__, "run_cell_fn": fake_runner()},
    )
    rc = main(
        [
            "compare",
            str(ds),
            "-o",
            str(out),
            "--models",
            "cnn",
            "--workers",
            "2",
            "--seeds",
            "2",
            "--quick",
            "--quiet",
        ]
    )
    assert rc == 0
    assert "report:" in capsys.readouterr().out
    assert main(["report", str(out)]) == 0
    assert main(["report", str(out / "nope")]) == 2


def _fake_timed(shares: dict):
    """Replace the contention meter: each call of a cell reports the next given share."""

    def timed(cell, cfg, run_cell_fn):
        ok, msg = run_cell_fn(cell, cfg)
        share = shares[cell.name].pop(0)
        return (
            ok,
            msg,
            {
                "cell": cell.name,
                "contention": {"foreign_share": share, "wall_s": 1.0, "own_cpu_s": 0.5},
            },
        )

    return timed


def test_rerun_contended_keeps_the_less_disturbed_run(study, monkeypatch):
    # Prepare: seed 0 of the 2-worker cell was badly disturbed the first time.
    ds, out = study
    monkeypatch.setattr(compare_mod, "render_report", lambda out: out / "report.html")
    shares = {"cnn/w1/seed0": [0.0], "cnn/w2/seed0": [0.6, 0.9, 0.05]}
    monkeypatch.setattr(compare_mod, "_timed_cell", _fake_timed(shares))
    kw = dict(models=["cnn"], workers=[2], seeds=1, quick=True, progress=False,
              run_cell_fn=fake_runner(), same_cores_seeds=0)  # fmt: skip
    run_compare(ds, out, **kw)
    run_dir = out / "runs" / "cnn" / "w2" / "seed0"

    def share():
        return json.loads((run_dir / "compare_cell.json").read_text())["contention"][
            "foreign_share"
        ]

    assert share() == 0.6
    # Execute: a rerun that is disturbed even more keeps the first run ...
    run_compare(ds, out, rerun_contended=True, **kw)
    assert share() == 0.6
    # ... and one that is quieter replaces it; the others stay beside it for inspection.
    run_compare(ds, out, rerun_contended=True, **kw)
    assert share() == 0.05
    assert sorted(p.name for p in run_dir.parent.iterdir()) == [
        "seed0",
        "seed0.contended-1",
        "seed0.contended-2",
    ]
    assert shares["cnn/w2/seed0"] == [] and shares["cnn/w1/seed0"] == []


def test_contended_study_claims_no_speedup_and_says_rerun_quietly(study, fast_figures, monkeypatch):
    # Prepare: every run shared the CPUs with other processes (60 % of the cores' time).
    ds, out = study
    monkeypatch.setattr(records_mod, "CONTENDED_SHARE", 0.15)
    cells = [f"cnn/w{n}/seed{s}" for n in ("1", "2", "1-t2") for s in range(5)]
    monkeypatch.setattr(compare_mod, "_timed_cell", _fake_timed({c: [0.6] for c in cells}))
    # Execute
    run_compare(
        ds,
        out,
        models=["cnn"],
        workers=[2],
        seeds=5,
        quick=True,
        progress=False,
        run_cell_fn=fake_runner(),
    )
    res = json.loads((out / "results.json").read_text())
    claims = res["analysis"]["models"]["cnn"]["vs_central"]["2"]["claims"]
    summary = " ".join(res["summary"])
    # Assert: accuracy still judged, the speedup measured but not claimed, and why.
    assert claims["speedup_claimed"] is False and claims["speedup_withheld"] == ["contended"]
    assert claims["accuracy_verdict"] == "equivalent"
    assert "cut cnn's epoch time" not in summary
    assert "2 workers: no speedup claimed for cnn (contended; measured" in summary
    assert "same 2 threads: no speedup claimed (contended; measured" in summary
    assert "Rerun on a quiet machine" in summary
    assert "not claimed: contended" in (out / "report.md").read_text()
    # Two worker counts for a three-parameter model: no efficiency claim at all.
    assert "No efficiency claim beyond 2 worker(s)" in summary
    assert "stays >= 50 %" not in summary
    assert "The fit for cnn is also to disturbed timings (unreliable)." in summary


def test_the_study_writes_its_effective_config_which_reruns_it(study, fast_figures):
    # Prepare: a study from a config object (the library's form).
    from flowsplit.cli import build_parser
    from flowsplit.experiments.dp.commands import compare_config
    from flowsplit.experiments.dp.config import CompareConfig

    ds, out = study
    cfg = CompareConfig(dataset=str(ds), out=str(out), models=["cnn"], workers=[2], seeds=2,
                        quick=True, margin=0.02)  # fmt: skip
    # Execute
    run_compare(cfg, progress=False, run_cell_fn=fake_runner(set(), []))
    text = (out / "config.toml").read_text()
    args = build_parser().parse_args(
        ["compare", str(ds), "-o", str(out), "--config", str(out / "config.toml")]
    )
    # Assert: the file holds every field (dataset and out as comments) and reads back
    # into the same config; the quick recipe's values are written out.
    assert "epochs = 2" in text and "margin = 0.02" in text and "# dataset = " in text
    assert compare_config(args) == cfg


def test_compare_command_exits_1_naming_a_failed_run(study, fast_figures, monkeypatch, capsys):
    # Prepare: the command's study, with one cell failing (the fake engine's runner)
    from flowsplit.cli import main

    ds, out = study
    real = compare_mod.run_compare
    failing = fake_runner({"cnn/w2/seed0"}, [])
    monkeypatch.setattr(
        compare_mod,
        "run_compare",
        lambda cfg, progress: real(cfg, run_cell_fn=failing, progress=False),
    )
    argv = ["compare", str(ds), "-o", str(out), "--models", "cnn", "--workers", "2"]
    argv += ["--seeds", "2", "--quick", "--quiet"]
    # Execute
    rc = main(argv)
    # Assert: the report is written, and the exit status and the last line say a run failed
    assert rc == 1
    assert (out / "report.html").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("flowsplit: error: 1 of ") and "(cnn/w2/seed0: " in err[-1], err
    # Execute again: the failed cell runs and succeeds, so the study is whole
    monkeypatch.setattr(
        compare_mod,
        "run_compare",
        lambda cfg, progress: real(cfg, run_cell_fn=fake_runner(), progress=False),
    )
    assert main(argv) == 0


def test_the_api_returns_the_typed_result_and_refuses_a_train_arg_the_study_sets(
    study, fast_figures, monkeypatch
):
    import flowsplit as fs
    from flowsplit.experiments.dp.result import CompareResult

    ds, out = study
    real = compare_mod.run_compare
    monkeypatch.setattr(
        compare_mod,
        "run_compare",
        lambda cfg, progress: real(cfg, run_cell_fn=fake_runner(), progress=False),
    )
    # Execute: fs.compare used to return {"results_csv": ...} alone (no report.json)
    result = fs.compare(ds, out, models=["cnn"], workers=[2], seeds=[0, 1], quick=True, quiet=True)
    # Assert: the study's typed result, as `compare` wrote it
    assert isinstance(result, CompareResult)
    assert {c.seed for c in result.cells} == {0, 1} and result.failures == {}
    assert result.summary and len(result.cells) == len(
        list(csv.DictReader((out / "results.csv").open()))
    )
    # A --train-arg setting what the study sets per run (it won: the cell filed as cnn
    # trained lstm) is refused before any run.
    with pytest.raises(ConfigError, match="sets model, which the study sets"):
        fs.compare(ds, out, models=["cnn"], train_args=["--model=lstm"], quick=True, quiet=True)
