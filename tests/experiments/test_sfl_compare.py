"""``sfl compare`` and ``sfl plan`` end to end on a toy dataset (seconds).

The study's report and the overview page over it are also opened in headless Chromium
(at the end: they read the same study, built once per test process): both load, every
figure decodes, the console stays clean, the overview's link reaches the study's page,
and hostile class names stay text. That check skips without Chromium (CI installs it
and sets FLOWSPLIT_REQUIRE_CHROMIUM=1, so there a missing browser fails instead)."""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest

from flowsplit.config_args import parse_seeds
from flowsplit.errors import ConfigError
from flowsplit.experiments.advice import overview_content
from flowsplit.experiments.sfl.analysis import delay_to_target
from flowsplit.experiments.sfl.commands import add_compare_parser
from flowsplit.experiments.sfl.compare import resolve_config, run_sfl_compare
from flowsplit.experiments.sfl.result import RoundRow
from flowsplit.planner import study
from flowsplit.planner.commands import add_plan_parser
from flowsplit.report.browser import check_page, find_chromium
from flowsplit.report.overview import write_overview
from tests.federated._toy import ToyFactory, write_toy_dataset


def test_delay_to_target_is_the_clock_of_the_first_round_reaching_it():
    history = [
        RoundRow(
            round=k + 1,
            accuracy=acc,
            macro_f1=acc,
            loss=1.0,
            delay_s=2.0,
            clock_s=clock,
            bytes_total=1.0,
        )
        for k, (acc, clock) in enumerate([(0.5, 2.0), (0.8, 4.5), (0.9, 7.0)])
    ]
    assert delay_to_target(history, 0.8) == 4.5
    assert np.isnan(delay_to_target(history, 0.95))


def test_config_adds_the_reference_and_quick_defaults_yield_to_explicit_values():
    cfg = resolve_config(True, schemes=("acc-aware",), rounds=7)
    assert cfg.schemes == ("hsfl", "acc-aware")
    assert cfg.run.rounds == 7 and cfg.seeds == (0, 1) and cfg.run.train_limit == 600
    with pytest.raises(ConfigError, match="unknown"):
        resolve_config(schemes=("magic",))
    assert parse_seeds("3") == (0, 1, 2) and parse_seeds("4,9") == (4, 9)


def test_compare_runs_every_scheme_on_the_same_seeds_and_writes_the_report(toy_sfl_study):
    # Prepare / Execute: a toy dataset, 5 clients on 2 aggregators, 2 seeds, 2 rounds
    # (tests/experiments/conftest.py; the browser check reads the same study).
    out = toy_sfl_study
    report = out / "report.html"
    # Assert: the three files, every scheme x seed, and exact cost predictions.
    assert report.is_file() and (out / "report.md").is_file()
    results = json.loads((out / "results.json").read_text())
    assert set(results["schemes"]) == {"sfl", "hsfl", "hsfl-greedy", "delay", "acc-aware"}
    assert {(r["scheme"], r["seed"]) for r in results["runs"]} == {
        (s, k) for s in results["schemes"] for k in (0, 1)
    }
    assert set(results["vs_hsfl"]) == {"sfl", "hsfl-greedy", "delay", "acc-aware"}
    assert results["prediction_check"]["max_rel_delay_error"] < 1e-9
    assert results["prediction_check"]["max_rel_bytes_error"] < 1e-12
    assert results["surrogate"]["cost"]["n_pilots"] == 3
    # Pilots are budgeted in steps (at least four rounds: a curve and its backtest).
    assert all(p["rounds"] == 4 for p in results["surrogate"]["pilots"])
    assert results["surrogate"]["backtest"]["n"] == 3
    text = report.read_text()
    assert "paper" in text and "<img" in text
    assert "paper&#x27;s planner (as reported on CIFAR-10/FEMNIST, not this data)" in text
    for scheme in ("sfl", "delay", "acc-aware"):
        assert (out / "runs" / f"{scheme}-seed1" / "metrics.json").is_file()
        # Each run records per-class results as a `train` run does (issue 29 item 4).
        metrics = json.loads((out / "runs" / f"{scheme}-seed1" / "metrics.json").read_text())
        assert len(metrics["test_predictions"]) == metrics["n_test"] > 0
        assert sum(map(sum, metrics["confusion_matrix"])) == metrics["n_test"]
    assert any("pays them back" in line for line in results["summary"])
    # The planner-against-simulation check is a condition, not a finding (UX review R8).
    assert not any("match the simulation" in line for line in results["summary"])
    conditions = text.split("<h2>Conditions</h2>", 1)[1]
    assert "predicted round delay and bytes match the simulation" in conditions
    # The baselines that split nothing, and the ablation of the planner's gain.
    assert set(results["baselines"]) == {"majority", "centralised", "fedavg"}
    maj = results["baselines"]["majority"]["per_seed"]
    assert len(maj) == 2 and all(0 < b["accuracy"] < 1 and b["bytes"] == 0 for b in maj)
    assert results["baselines"]["fedavg"]["bytes_total"]["mean"] > 0
    parts = [r["part"] for r in results["ablation"]]
    assert len(parts) == 3 and parts[0].startswith("assignment") and parts[1].startswith("cut")
    assert "Ablation" in text and "splits nothing" in text
    assert any(line.startswith("Ablation, cut choice") for line in results["summary"])
    from flowsplit.experiments.sfl.report import rerender

    assert rerender(out).read_text() == text


def _study_result(out):
    from flowsplit.experiments.sfl.result import read_sfl_compare_result

    return read_sfl_compare_result(out / "results.json")


def _with_scheme(results, name, **changes):
    results.schemes[name] = dataclasses.replace(results.schemes[name], **changes)
    return results


def test_sfl_report_opens_with_a_verdict_and_one_tradeoff_picture(toy_sfl_study):
    # Prepare: the toy study (2 seeds), as written by `sfl compare`.
    out = toy_sfl_study
    results = json.loads((out / "results.json").read_text())
    text = (out / "report.html").read_text()
    # Assert: under 5 seeds no winner is named, the line says why and what to rerun with.
    verdict = results["summary"][0]
    assert verdict.startswith("No winner named: 2 seed(s), at least 5 are needed")
    assert "--seeds 5" in verdict
    assert not any("Highest mean final accuracy" in line for line in results["summary"])
    # The page opens with it and one picture, both before the summary and every table.
    body = text.split("<body>", 1)[1]
    first_section = body.split('<section id="summary">', 1)[0]
    assert '<p class="verdict">No winner named: 2 seed(s)' in first_section
    assert first_section.count("<img") == 1 and "<table" not in first_section
    assert "predicted delay per round" in first_section  # the delays are said to be predicted
    # The picture: two panels (delay, bytes), a point per scheme, each its own marker,
    # the baselines that split nothing drawn too.
    from flowsplit.experiments.sfl.report import report_page, tradeoff_figure

    fig = tradeoff_figure(_study_result(out))
    delay_ax, bytes_ax = fig.axes
    labels = [c.get_label() for c in delay_ax.containers]
    markers = [c.lines[0].get_marker() for c in delay_ax.containers]
    assert labels == list(results["schemes"]) and len(set(markers)) == len(markers)
    assert "fedavg (baseline)" in [c.get_label() for c in bytes_ax.containers]
    assert {"centralised (baseline)", "majority (baseline)"} <= {
        line.get_label() for line in delay_ax.lines
    }
    assert "predicted" in delay_ax.get_xlabel() and "MB" in bytes_ax.get_xlabel()
    # Markdown opens with the same line.
    md = report_page(_study_result(out)).markdown()
    assert md.split("\n## ", 2)[1].startswith("Verdict") and verdict[:30] in md


def test_sfl_report_folds_long_tables_and_methods(toy_sfl_study):
    text = (toy_sfl_study / "report.html").read_text()
    for title in ("Methods", "Conditions", "Plans (first seed)", "Accuracy surrogate"):
        section = text.split(f"<h2>{title}</h2>", 1)[1].split("</section>", 1)[0]
        assert section.startswith("<details><summary>show ") and section.endswith("</details>")
    summary = text.split('<section id="summary">', 1)[1].split("</section>", 1)[0]
    assert "<details>" not in summary
    # Reached accuracy beside the planner's prediction, in one table (UX review R7).
    from flowsplit.experiments.sfl.report import results_rows

    results = _study_result(toy_sfl_study)
    rows = {r["scheme"]: r for r in results_rows(results)}
    plan = results.first_plans()["acc-aware"]
    assert rows["acc-aware"]["predicted"] == pytest.approx(100 * plan.predicted_accuracy)
    assert rows["sfl"]["predicted"] is None  # sfl is not planned
    assert "planner&#x27;s predicted accuracy (validation), %" in text.split("<h2>Results", 1)[1]


def test_two_schemes_on_the_same_plan_both_stay_visible(toy_sfl_study):
    # Prepare: 'delay' given exactly acc-aware's plan and results (what happens when the
    # planner picks the same cuts and assignment for both).
    from flowsplit.experiments.sfl.analysis import same_plan_groups
    from flowsplit.experiments.sfl.report import report_page, tradeoff_figure

    results = _study_result(toy_sfl_study)
    results.schemes["delay"] = results.schemes["acc-aware"]
    # Execute
    text = report_page(results).html()
    fig = tradeoff_figure(results)
    # Assert: named as one plan on the page, two points with different markers.
    assert same_plan_groups(results) == [["delay", "acc-aware"]]
    assert "delay = acc-aware, same plan" in text.split('<section id="summary">', 1)[0]
    curves = text.split("<h2>Curves</h2>", 1)[1].split("</section>", 1)[0]
    assert curves.count("under another: delay = acc-aware, same plan)</figcaption>") == 3
    pts = {c.get_label(): c.lines[0] for c in fig.axes[0].containers}
    d, a = pts["delay"], pts["acc-aware"]
    assert list(d.get_xydata()[0]) == list(a.get_xydata()[0])
    assert d.get_marker() != a.get_marker() and d.get_markersize() > a.get_markersize()
    # The unchanged study names no coinciding schemes.
    assert same_plan_groups(_study_result(toy_sfl_study)) == []


def test_sfl_intervals_are_clipped_to_the_range_of_a_score(toy_sfl_study):
    # Prepare: 2-seed intervals as wide as the review saw (-91 % to 192 %).
    from flowsplit.experiments.sfl.report import report_page
    from flowsplit.experiments.stats import Interval

    results = _with_scheme(
        _study_result(toy_sfl_study),
        "sfl",
        final_accuracy=Interval(0.5015, -0.9146, 1.9177, 2),
        final_macro_f1=Interval(0.4168, -1.5426, 2.3762, 2),
    )
    vs = results.vs_hsfl["sfl"]
    results.vs_hsfl["sfl"] = dataclasses.replace(vs, accuracy_diff=Interval(0.1, -1.5, 1.7, 2))
    # Execute
    text = report_page(results).html()
    # Assert: no bound outside 0-100 % (or +-100 pts for a difference).
    assert "50.15 (0.00–100.00)" in text and "41.68 (0.00–100.00)" in text
    assert "-91.46" not in text and "191.77" not in text and "237.62" not in text
    assert "+10.00 (-100.00 to +100.00)" in text


def test_a_verdict_names_a_winner_only_from_enough_seeds_and_a_clear_lead(toy_sfl_study):
    from flowsplit.experiments.sfl.analysis import verdict_line
    from flowsplit.experiments.stats import Interval

    results = _study_result(toy_sfl_study)
    for name in results.schemes:  # five seeds, every scheme at 80 % +- 1 pt
        _with_scheme(
            results, name, seeds=[0, 1, 2, 3, 4], final_accuracy=Interval(0.8, 0.79, 0.81, 5)
        )
    # A clear lead: acc-aware's whole interval above every other mean.
    _with_scheme(results, "acc-aware", final_accuracy=Interval(0.9, 0.88, 0.92, 5))
    assert verdict_line(results).startswith("Most accurate over 5 seeds: acc-aware, 90.00 %")
    # Within the runner-up's reach: no winner, and says with whom it ties.
    _with_scheme(results, "sfl", final_accuracy=Interval(0.89, 0.87, 0.91, 5))
    line = verdict_line(results)
    assert line.startswith("No clear accuracy winner over 5 seeds: acc-aware")
    assert "ahead of sfl" in line
    # Four seeds: the seed rule, whatever the lead.
    _with_scheme(results, "sfl", seeds=[0, 1, 2, 3])
    assert verdict_line(results).startswith("No winner named: 4 seed(s), at least 5")


def test_plan_command_writes_the_plan_with_baselines(tmp_path, monkeypatch):
    # Prepare: the CLI parser as the sfl group would build it, with a toy registry model.
    monkeypatch.setattr(study, "registry_model", lambda name, view: ToyFactory("cnn"))
    data = write_toy_dataset(tmp_path / "toy", n=120)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_plan_parser(sub)
    add_compare_parser(sub)
    out = tmp_path / "plan.json"
    args = parser.parse_args(
        [
            "plan",
            str(data),
            "--model",
            "toy",
            "--topology",
            "heterogeneous",
            "--clients",
            "6",
            "--aggregators",
            "2",
            "--pilots",
            "2",
            "--pilot-steps",
            "4",
            "--rounds",
            "3",
            "-o",
            str(out),
            "--quiet",
        ]
    )
    # Execute
    assert args.func(args) == 0
    # Assert
    plan = json.loads(out.read_text())
    assert len(plan["assignment"]) == 6 and len(plan["cuts"]) == 2
    assert plan["objective_def"]["reference"] == "hsfl"
    assert "round-robin" in plan["objective_def"]["reference_text"]
    assert plan["objective_def"]["weights"]["loss"] == 0.0  # the guard: accuracy first
    assert set(plan["baselines"]) == {"sfl", "hsfl", "hsfl-greedy", "delay"}
    assert plan["predicted"]["bytes_per_round"] == plan["bytes"] > 0
    assert plan["predicted"]["delay_s_per_round"] == plan["delay_s"] > 0
    assert plan["tiers"] == (3 if plan["cuts"][0] < plan["cuts"][1] else 2)
    assert plan["guard"]["tolerance"] == 0.01 and plan["guard"]["rule"]
    assert plan["surrogate"]["target_steps"] > 0 and "separated" in plan["surrogate"]
    assert plan["surrogate"]["cost"]["n_pilots"] == 2
    assert plan["planning_s"] > 0


def test_plan_without_pilots_says_so_and_weighted_needs_a_zero_loss_weight(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "registry_model", lambda name, view: ToyFactory("mlp"))
    data = write_toy_dataset(tmp_path / "toy", n=90)
    parser = argparse.ArgumentParser()
    add_plan_parser(parser.add_subparsers())
    base = ["plan", str(data), "--clients", "4", "--aggregators", "2", "--no-pilots", "--quiet"]
    args = parser.parse_args([*base, "--objective", "weighted", "-o", str(tmp_path / "p.json")])
    with pytest.raises(ConfigError, match="loss weight of 0"):
        args.func(args)
    args = parser.parse_args(
        [*base, "--weights", "0,1,1", "--objective", "weighted", "-o", str(tmp_path / "p.json")]
    )
    assert args.func(args) == 0
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["surrogate"] is None and plan["predicted_loss"] is None
    args = parser.parse_args([*base, "-o", str(tmp_path / "g.json")])
    assert args.func(args) == 0
    guard = json.loads((tmp_path / "g.json").read_text())["guard"]
    assert guard["rule"].startswith("no accuracy prediction")


def test_flowsplit_sfl_plan_is_reachable_from_the_real_cli(tmp_path, monkeypatch, capsys):
    # Prepare: the toy model stands in for the registry; the command goes through cli.main.
    from flowsplit.cli import main

    monkeypatch.setattr(study, "registry_model", lambda name, view: ToyFactory("mlp"))
    data = write_toy_dataset(tmp_path / "toy", n=90)
    out = tmp_path / "plan.json"
    # Execute
    rc = main(
        [
            "sfl",
            "plan",
            str(data),
            "--clients",
            "4",
            "--aggregators",
            "2",
            "--no-pilots",
            "--weights",
            "0,1,1",
            "--quiet",
            "-o",
            str(out),
        ]
    )
    bad = main(
        [
            "sfl",
            "plan",
            str(data),
            "--no-pilots",
            "--objective",
            "weighted",
            "--quiet",
            "-o",
            str(out),
        ]
    )
    # Assert: the plan is written, and the bad option is a one-line error with exit 2.
    assert rc == 0 and len(json.loads(out.read_text())["assignment"]) == 4
    assert bad == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("flowsplit: error:") and "loss weight of 0" in err[-1]


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--weights", "foo", "--weights 'foo'"),
        ("--seeds", "0", "the count must be in 1..10000"),
        ("--fixed-cuts", "a", "--fixed-cuts 'a'"),
    ],
)
def test_bad_option_values_are_one_line_errors(tmp_path, capsys, option, value, message):
    from flowsplit.cli import main

    command = "compare" if option == "--seeds" else "plan"
    rc = main(["sfl", command, str(tmp_path), option, value, "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("flowsplit: error:") and message in err[0]


def test_illegal_baseline_cuts_are_refused_before_any_pilot(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(study, "fit_surrogate", lambda *a, **k: ran.append(1))
    data = write_toy_dataset(tmp_path / "toy", n=60)
    cfg = resolve_config(True, model="toy", n_clients=4, n_aggregators=2, fixed_cuts=(1, 9))
    with pytest.raises(ConfigError, match="not legal"):
        study.make_study(data, cfg, model_fn=ToyFactory("mlp"), quiet=True)
    cfg = resolve_config(True, model="toy", n_clients=4, n_aggregators=2, capacity=(1, 1))
    with pytest.raises(ConfigError, match="--capacity 1,1"):
        study.make_study(data, cfg, model_fn=ToyFactory("mlp"), quiet=True)
    assert ran == []


def test_majority_baseline_by_hand(tmp_path):
    from flowsplit.experiments.sfl.baselines import majority

    # By hand: training labels 0, 0, 1 and 1, 2, 2 tie at two each, the first (class 0)
    # wins; the test labels 0, 0, 0, 1, 2 then give 3 / 5.
    class Setup:
        shards = [None, None]

        class dataset:
            n_classes = 3

        @staticmethod
        def client_data(i):
            import torch

            return None, torch.tensor([[0, 0, 1], [1, 2, 2]][i])

        @staticmethod
        def eval_data():
            import torch

            return None, torch.tensor([0, 0, 0, 1, 2])

    out = majority(Setup)
    assert out["class"] == 0 and out["accuracy"] == pytest.approx(3 / 5)


def test_best_fixed_is_the_legal_pair_best_on_validation(tmp_path):
    data = write_toy_dataset(tmp_path / "toy", n=120)
    out = tmp_path / "cmp"
    run_sfl_compare(
        data,
        out,
        model="toy",
        model_fn=ToyFactory("mlp"),
        seeds=(0,),
        rounds=1,
        n_clients=4,
        n_aggregators=2,
        schemes=("best-fixed",),
        baselines=(),
        quiet=True,
    )
    results = json.loads((out / "results.json").read_text())
    per_cut = results["best_fixed"]["per_cut"]
    legal = results["profile"]["legal_cuts"]
    assert sorted(r["cuts"] for r in per_cut) == sorted(legal)
    best = max(per_cut, key=lambda r: r["val_accuracy"])
    assert results["best_fixed"]["chosen"] == best["cuts"]
    assert results["schemes"]["best-fixed"]["cuts"] == [best["cuts"]]
    assert "baselines" in results and results["baselines"] == {}


def test_compare_with_a_trace_reports_static_and_replanned_runs_side_by_side(tmp_path):
    # Prepare: a toy dataset, 5 clients on 2 aggregators, 2 seeds, 3 rounds, and a trace
    # congesting every path to aggregator 0 (and its backbone) from round 2.
    data = write_toy_dataset(tmp_path / "toy", n=150)
    trace = tmp_path / "trace.toml"
    tables = [f'link = "client:{i}/aggregator:0"\nbandwidth_scale = 0.01' for i in range(5)]
    tables.append('link = "backbone:0"\nlatency_ms = 500')
    trace.write_text("".join(f"[[trace]]\nround = 2\n{t}\n" for t in tables))
    out = tmp_path / "cmp"
    # Execute
    report = run_sfl_compare(
        data,
        out,
        model="toy",
        model_fn=ToyFactory("mlp"),
        schemes=("hsfl-greedy",),
        seeds=(0, 1),
        rounds=3,
        n_clients=5,
        n_aggregators=2,
        baselines=(),
        trace=str(trace),
        replan="every-round",
        quiet=True,
    )
    # Assert: both rows, paired by seed, with intervals; the plans were made on round
    # 1's network and say so; every round of every run (static on the trace, and
    # re-planned) costs what the cost model predicts for that round's network.
    results = json.loads((out / "results.json").read_text())
    assert set(results["schemes"]) == {"hsfl", "hsfl-greedy", "hsfl-greedy+replan"}
    assert results["trace"]["events"] == 6 and results["trace"]["rounds_changed"] == [2, 3]
    plans = json.loads((out / "plans.json").read_text())
    first = {s: plans[str(s)]["hsfl-greedy"] for s in (0, 1)}
    assert all(p["trace"]["planned_on"] == "round 1" for p in first.values())
    assert all(0 in p["assignment"] for p in first.values())  # someone pays the congestion
    (row,) = results["replanning"]
    assert row["scheme"] == "hsfl-greedy" and row["replanned"] == "hsfl-greedy+replan"
    assert row["n_seeds"] == 2 and row["moves_per_run"] >= 1
    static = row["per_seed"]["static_delay_total_s"]
    replanned = row["per_seed"]["replanned_delay_total_s"]
    assert all(r < s for r, s in zip(replanned, static, strict=True))
    iv = row["delay_diff_s"]
    assert iv["mean"] == pytest.approx(np.mean(np.subtract(replanned, static)))
    assert iv["low"] <= iv["mean"] <= iv["high"] and iv["high"] < 0
    by_scheme = {(r["scheme"], r["seed"]): r for r in results["runs"]}
    for seed in (0, 1):  # the first round is the planned network: the same for both
        s_hist = by_scheme["hsfl-greedy", seed]["history"]
        r_hist = by_scheme["hsfl-greedy+replan", seed]["history"]
        assert s_hist[0]["delay_s"] == pytest.approx(r_hist[0]["delay_s"])
        assert s_hist[0]["delay_s"] == pytest.approx(first[seed]["delay_s"])
        assert s_hist[1]["delay_s"] > 2 * s_hist[0]["delay_s"]
    assert results["prediction_check"]["max_rel_delay_error"] < 1e-9
    assert results["prediction_check"]["max_rel_bytes_error"] < 1e-12
    text = (out / "report.md").read_text()
    assert "Static and re-planned" in text and "hsfl-greedy+replan" in text
    assert any(
        line.startswith("Re-planned every round, hsfl-greedy") for line in results["summary"]
    )
    assert "Static and re-planned" in report.read_text()


needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium not installed (apt-get install chromium); browser check skipped",
)


@needs_chromium
@pytest.mark.slow
def test_sfl_compare_report_and_overview_render_in_chromium(tmp_path, toy_sfl_study):
    # Prepare: a real (toy-sized) split-learning study: 5 clients, 2 aggregators, 2 seeds
    # (tests/experiments/conftest.py), and the overview page beside it.
    sfl_dir = toy_sfl_study
    report = sfl_dir / "report.html"
    n_figures = report.read_text().count("<img")
    manifest = {
        "n_flows": 150,
        "classes": ["<script>alert(1)</script>", "dns"],
        "splits": {"train": 100, "val": 25, "test": 25},
        "split_by": "file",
    }
    overview = write_overview(
        sfl_dir.parent / "out",
        manifest=manifest,
        dp_dir=None,
        sfl_dir=sfl_dir,
        timings={"sfl": 1.0},
        content=overview_content(None, sfl_dir),
    )
    # Execute
    study_page = check_page(report, screenshot=tmp_path / "sfl.png")
    overview_page = check_page(overview)
    # Assert: the study page shows every figure it embeds, decoded, with no errors.
    assert study_page.loaded and study_page.console_errors == []
    assert n_figures >= 2 and len(study_page.images) == n_figures
    assert study_page.broken_images == []
    assert (tmp_path / "sfl.png").stat().st_size > 10_000
    # The first picture the browser shows is the accuracy/delay/bytes trade-off, drawn
    # wider than tall (two panels side by side).
    first = study_page.images[0]
    assert first["alt"].startswith("Final test accuracy (mean over 2 seed(s)")
    assert first["natural_width"] > 1.5 * first["natural_height"]
    # The overview: loads cleanly, names the schemes, and its link finds the study.
    assert overview_page.loaded and overview_page.console_errors == []
    html = overview.read_text()
    assert "&lt;script&gt;" in html and "<script>alert" not in html
    assert 'href="../sfl/report.html"' in html
    assert (overview.parent / "../sfl/report.html").resolve() == report.resolve()
    schemes = json.loads((sfl_dir / "results.json").read_text())["schemes"]
    assert all(s in html for s in schemes)
    # Both pages open with one verdict line and then the trade-off picture under it.
    for page in (study_page, overview_page):
        assert page.verdict and page.verdict_top < page.first_image_top < page.verdict_top + 400
        assert page.height < 7000
    assert overview_page.verdict.startswith("For split learning")
    assert "seed(s) make no verdict" in overview_page.verdict  # 2 seeds: named, not advised
    assert overview_page.images[0]["alt"].startswith("Split learning: Final test accuracy")
    assert overview_page.height < 2500


def test_a_sampled_compare_predicts_each_rounds_sample(tmp_path):
    # Prepare: 6 clients, 3 of them sampled per round, no trace, no re-planning.
    data = write_toy_dataset(tmp_path / "toy", n=150)
    out = tmp_path / "cmp"
    # Execute
    run_sfl_compare(
        data,
        out,
        model="toy",
        model_fn=ToyFactory("mlp"),
        schemes=("hsfl-greedy",),
        seeds=(0,),
        rounds=2,
        n_clients=6,
        n_aggregators=2,
        baselines=(),
        clients_per_round=3,
        quiet=True,
    )
    # Assert: each round charged its sample alone, and the prediction is the sample's
    # (not the plan's full-participation figure).
    results = json.loads((out / "results.json").read_text())
    run = next(r for r in results["runs"] if r["scheme"] == "hsfl-greedy")
    assert run["predicted_delay_per_round_s"] != [run["predicted_delay_s"]] * 2
    assert results["prediction_check"]["max_rel_delay_error"] < 1e-9
    assert results["prediction_check"]["max_rel_bytes_error"] < 1e-12


def test_the_command_prints_the_reports_verdict(toy_sfl_study, monkeypatch, capsys):
    # Prepare: the command's study is the toy study already run (same results.json).
    from flowsplit.cli import main
    from flowsplit.experiments.sfl import compare as sfl_compare

    report = toy_sfl_study / "report.html"
    monkeypatch.setattr(sfl_compare, "run_sfl_compare", lambda *a, **k: report)
    # Execute
    assert main(["sfl", "compare", "DS", "-o", str(toy_sfl_study), "--quiet"]) == 0
    # Assert: the verdict line the page opens with, then where the report is.
    out = capsys.readouterr().out.strip().splitlines()
    verdict = json.loads((toy_sfl_study / "results.json").read_text())["summary"][0]
    assert out == [verdict, f"report: {report}"] and "No winner named" in verdict


def test_the_study_writes_its_effective_config(toy_sfl_study):
    import tomllib

    from flowsplit.config_file import read_config_file
    from flowsplit.experiments.sfl.compare import resolve_config
    from flowsplit.experiments.sfl.config import SFLCompareConfig

    out = toy_sfl_study
    written = tomllib.loads((out / "config.toml").read_text())
    assert written["seeds"] == [0, 1] and written["run"]["rounds"] == 2  # [run]: the runs'
    assert written["n_clients"] == 5 and written["planner"]["family"] == "hsfl"
    cfg = resolve_config(**read_config_file(SFLCompareConfig, out / "config.toml"))
    assert cfg.seeds == (0, 1) and cfg.n_pilots == 3 and cfg.model == "toy"
