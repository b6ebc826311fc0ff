"""The demo's one-page overview: the advice rules, their intervals, and the files it writes.

The data-parallel figures go through the real analysis (synthetic records in, the
``results.json`` content out), so these tests check the rules the reader sees."""

from __future__ import annotations

import json
import math

import pytest

from flowsplit.experiments import advice as advice_mod
from flowsplit.experiments.advice import (
    advise,
    advise_sfl,
    data_parallel_rows,
    overview_content,
    sfl_rows,
)
from flowsplit.experiments.dp.result import CompareResult
from flowsplit.experiments.sfl.result import SFLCompareResult
from flowsplit.experiments.stats import Interval
from flowsplit.report.overview import write_overview
from flowsplit.util import jsonable
from tests.experiments.synthetic import paired_runs, study_results

NAN = math.nan


def _iv(mean, low=NAN, high=NAN, n=0):
    return {"mean": mean, "low": low, "high": high, "n": n}


def _scheme(cuts, acc, delay, nbytes, per_seed=None, seeds=(0, 1, 2)):
    """A scheme's summary as sfl compare writes it: the figures the overview reads, the
    rest NaN."""
    per_seed = per_seed or {}
    return {
        "seeds": list(seeds),
        "cuts": cuts,
        "final_accuracy": _iv(*acc),
        "final_macro_f1": _iv(NAN),
        "delay_total_s": _iv(*delay),
        "delay_per_round_s": _iv(NAN),
        "delay_to_target_s": _iv(NAN),
        "reached_target": 0,
        "bytes_total": _iv(*nbytes),
        "bytes_by_hop": {},
        "bytes_by_type": {},
        "bytes_by_hop_direction_type": {},
        "wall_s": 0.0,
        "per_seed": {
            "final_accuracy": per_seed.get("final_accuracy", []),
            "final_macro_f1": [],
            "delay_total_s": per_seed.get("delay_total_s", []),
            "delay_to_target_s": [],
            "bytes_total": per_seed.get("bytes_total", []),
        },
        "curve": {"round": [], "accuracy": [], "macro_f1": [], "clock_s": [], "delay_s": []},
    }


def _sfl(doc: dict) -> SFLCompareResult:
    return SFLCompareResult.from_dict(json.loads(json.dumps(doc)))


def _advice(records, **kw):
    return advise(data_parallel_rows(study_results(records, **kw)), [])


def _clean_study():
    cnn = paired_runs("cnn", t_parallel=5.3)
    lstm = paired_runs("lstm", acc=0.45)  # below the 50 % majority class
    xgb = paired_runs("xgboost", acc=0.85, t_parallel=9.0)  # 1.11x: below 1.2x
    return [*cnn[0], *cnn[1], *lstm[0], *lstm[1], *xgb[0], *xgb[1]]


def test_clean_study_advice_claims_with_intervals():
    # Execute
    advice = _advice(_clean_study())
    # Assert: the best model that learned, beside both baselines, with its interval.
    assert advice[0].startswith(
        "Use cnn: the best centralised macro-F1 on this data, 90.0 % (95 % CI "
    )
    assert (
        "the flow-statistics baseline XGBoost reaches a macro-F1 of 85.0 % (95 % CI " in advice[0]
    )
    assert "majority class scores 50.0 % accuracy" in advice[0]
    pays = [a for a in advice if a.startswith("Data parallelism pays")]
    assert len(pays) == 1 and pays[0].startswith(
        "Data parallelism pays for cnn: 2 workers cut its epoch time 1.89x (95 % CI "
    )
    assert "equivalent within +-1 pt (TOST p < 0.001; difference " in pays[0]
    assert "90 % CI" in pays[0]
    # lstm is below the majority class: flagged, never worth it; xgboost is equivalent but
    # only 1.11x faster.
    below = [a for a in advice if a.startswith("lstm: accuracy")]
    assert len(below) == 1 and "is not above the majority class (50.0 %)" in below[0]
    assert not any("pays for lstm" in a for a in advice)


def test_contended_runs_give_no_speedup_claim_and_say_rerun_quietly():
    # Prepare: the reviewer's case - every run disturbed, 3.55x from 2 workers.
    c, p = paired_runs("cnn", t_parallel=10 / 3.55, contended=True, foreign_cpu_share=0.6)
    # Execute
    advice = _advice([*c, *p])
    text = " ".join(advice)
    # Assert
    assert not any(a.startswith("Data parallelism pays") for a in advice)
    assert "3.55x" not in text.split("measured")[0]  # no speedup stated as a gain
    assert (
        "No speedup is claimed for cnn: no seed has both its centralised and its data-parallel "
        "run undisturbed by other processes; other processes used a median 60 % for cnn of the "
        "CPUs while the runs were timed." in text
    )
    assert "Rerun on a quiet machine" in text and "measures the CPU a run was given" in text
    assert "cnn: 2 workers measured 3.55x (178 % efficiency)" in text
    assert "measurement problem" in text
    assert any(a.startswith("Nothing here shows that data parallelism pays") for a in advice)


def test_only_the_parallel_runs_disturbed_claims_no_speedup_and_not_every_run():
    # Prepare: quiet centralised runs, then load arrived: every 2-worker run disturbed.
    c, _ = paired_runs("cnn", foreign_cpu_share=0.01)
    _, p = paired_runs("cnn", t_parallel=6.0, contended=True, foreign_cpu_share=0.5)
    # Execute
    advice = _advice([*c, *p])
    text = " ".join(advice)
    # Assert: no speedup, and the reason stated is true of these runs.
    assert not any(a.startswith("Data parallelism pays") for a in advice)
    assert "No speedup is claimed for cnn: no seed has both its centralised and" in text
    assert "every run" not in text and "Rerun on a quiet machine" in text


def test_three_seeds_give_no_equivalence_verdict_in_the_advice():
    c, p = paired_runs("cnn", 3)
    advice = _advice([*c, *p])
    assert not any(a.startswith("Data parallelism pays") for a in advice)
    assert any(
        a.startswith("Accuracy equivalence is not judged for cnn: 3 paired seed(s), at least 5")
        for a in advice
    )


def test_below_majority_model_is_never_worth_it_even_when_fast_and_tost_passes():
    # Prepare: 45.5 % accuracy, majority 50 %, 1.9x faster, differences of 0.05 pt.
    c, p = paired_runs("cnn", acc=0.455)
    rows = data_parallel_rows(study_results([*c, *p]))
    advice = advise(rows, [])
    # Assert
    (row,) = [r for r in rows if r.get("name") == "cnn"]
    assert row["verdict"] == "not above the majority class" and not row["equivalent"]
    assert not any("pays" in a and "Nothing" not in a for a in advice)
    assert advice[0].startswith("No model is above the majority-class rate (50.0 %)")


def test_every_table_row_carries_baselines_and_intervals():
    # Prepare: no xgboost in the study.
    c, p = paired_runs("cnn")
    rows = data_parallel_rows(study_results([*c, *p]))
    # Assert: the majority row, the missing flow-statistics baseline said so, CIs as text.
    assert (
        rows[0]["model"] == "majority class (always 'web')" and rows[0]["accuracy_ci"] == "50.0 %"
    )
    assert rows[1]["model"] == "xgboost (flow-statistics baseline)"
    assert rows[1]["verdict"].startswith("not run")
    cnn = rows[2]
    assert "(95 % CI " in cnn["accuracy_ci"] and "(95 % CI " in cnn["speedup_ci"]
    assert "(90 % CI " in cnn["diff_ci"]


SFL_DOC = {
    "config": {"quick": True},
    "schemes": {
        "hsfl": _scheme(
            [[1, 2]],
            (0.90, 0.88, 0.92),
            (50.0, 45.0, 55.0),
            (4e8, 3.9e8, 4.1e8),
            {
                "final_accuracy": [0.90, 0.89, 0.91],
                "delay_total_s": [50.0, 48.0, 52.0],
                "bytes_total": [4e8, 4e8, 4e8],
            },
        ),
        "hsfl-greedy": _scheme(
            [[1, 2]],
            (0.90, 0.88, 0.92),
            (32.0, 30.0, 34.0),
            (4e8, 3.9e8, 4.1e8),
            {
                "final_accuracy": [0.90, 0.895, 0.905],
                "delay_total_s": [32.0, 31.0, 33.0],
                "bytes_total": [4e8, 4e8, 4e8],
            },
        ),
        "acc-aware": _scheme(
            [[1, 3]],
            (0.895, 0.885, 0.905),
            (30.0, 28.0, 32.0),
            (3e8, 2.9e8, 3.1e8),
            {
                "final_accuracy": [0.895, 0.89, 0.90],
                "delay_total_s": [30.0, 29.0, 31.0],
                "bytes_total": [3e8, 3e8, 3e8],
            },
        ),
        "delay": _scheme(
            [[2, 2]],
            (0.85, 0.84, 0.86),
            (10.0, 9.0, 11.0),
            (1e8, 0.9e8, 1.1e8),
            {
                "final_accuracy": [0.85, 0.85, 0.85],
                "delay_total_s": [10.0, 10.0, 10.0],
                "bytes_total": [1e8, 1e8, 1e8],
            },
        ),
    },
}
SFL_RES = _sfl(SFL_DOC)


def test_sfl_advice_measures_the_pick_against_the_fair_baselines_with_intervals(monkeypatch):
    # Execute
    advice = advise_sfl(SFL_RES, sfl_rows(SFL_RES))
    # Assert: the fastest within 1 pt of the best (delay is 5 pt off), with its CIs; with
    # 3 seeds (under the studies' rule of 5) named but not recommended.
    assert advice[0].startswith(
        "For split learning, acc-aware (cuts 1,3) is the fastest within 1 pt of the best "
        "accuracy, but 3 seed(s) make no verdict (at least 5; rerun with --seeds 5): final "
        "accuracy 89.5 % (95 % CI 88.5-90.5), 30.0 s (95 % CI 28.0-32.0) of simulated delay"
    )
    # With enough seeds (the rule at 3 here) it is a recommendation.
    monkeypatch.setattr(advice_mod, "MIN_SEEDS", 3)
    assert advise_sfl(SFL_RES, sfl_rows(SFL_RES))[0].startswith(
        "For split learning use acc-aware (cuts 1,3): final accuracy 89.5 %"
    )
    monkeypatch.undo()
    # What was run is said with it.
    with_setting = _sfl(
        {**SFL_DOC, "config": {"quick": True, "model": "cnn", "view": "seq", "rounds": 4}}
    )
    first = advise_sfl(with_setting, sfl_rows(with_setting))[0]
    assert "of simulated delay (cnn over the seq view, 4 rounds)." in first
    # Against the greedy assignment first (the fair baseline), then HSFL, paired by seed.
    greedy, hsfl = advice[1], advice[2]
    assert greedy.startswith(
        "acc-aware against hsfl-greedy over 3 paired seed(s): accuracy -0.50 pt (95 % CI "
    )
    assert "delay -6 % (95 % CI " in greedy and "bytes -25 %" in greedy
    assert hsfl.startswith("acc-aware against hsfl over 3 paired seed(s)")
    assert "delay -40 % (95 % CI " in hsfl


def test_overview_writes_three_files_escaping_capture_names(tmp_path):
    # Prepare: a class name straight from a capture folder, and a split-learning study only.
    manifest = {
        "n_flows": 10,
        "classes": ["<script>x</script>", "dns"],
        "splits": {"train": 6, "val": 2, "test": 2},
        "split_by": "file",
    }
    sfl_dir = tmp_path / "sfl"
    sfl_dir.mkdir()
    (sfl_dir / "results.json").write_text(json.dumps(SFL_DOC))
    # Execute
    page = write_overview(
        tmp_path / "out",
        manifest=manifest,
        dp_dir=None,
        sfl_dir=sfl_dir,
        timings={"prepare": 1.0},
        content=overview_content(None, sfl_dir),
    )
    # Assert
    html = page.read_text()
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html
    assert 'href="../sfl/report.html"' in html
    assert "quick settings (split learning)" in html
    assert "89.5 % (95 % CI 88.5-90.5)" in html  # the interval beside the figure in the table
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["data_parallel"] == [] and doc["split_learning"][0]["scheme"] == "hsfl"
    assert doc["advice"][0].startswith("For split learning, acc-aware (cuts 1,3)")
    assert (tmp_path / "out" / "report.md").read_text().count("not run") == 1


def test_rows_read_nulls_as_nan_and_skip_oversubscribed_worker_counts():
    # Prepare: a study with 2 workers and 4 (oversubscribed), written as results.json
    # writes NaN (null): the accuracy test of 2 workers found no p-value and no difference.
    c, p2 = paired_runs("cnn", workers=2)
    _, p4 = paired_runs("cnn", workers=4, oversubscribed=True)
    doc = study_results([*c, *p2, *p4], margin=0.02).to_dict()
    acc = doc["analysis"]["models"]["cnn"]["vs_central"]["2"]["accuracy"]
    acc.update(tost_p=None, diff_tost=None, diff={**acc["diff"], "mean": None, "low": None})
    res = CompareResult.from_dict(doc)
    # Execute
    rows = data_parallel_rows(res)
    # Assert
    (row,) = [r for r in rows if r.get("name") == "cnn"]
    assert row["workers"] == 2 and row["speedup"].mean > 1.8 and row["margin_pts"] == 2.0
    assert math.isnan(row["tost_p"]) and row["diff_ci"] == "–"


def test_sfl_accuracy_intervals_are_clipped_to_100_percent():
    res = _sfl(
        {
            "schemes": {
                "sfl": _scheme(
                    [[1]], (0.99, 0.95, 1.03), (1.0, 0.9, 1.1), (1e6, 1e6, 1e6), seeds=(0, 1)
                )
            }
        }
    )
    (row,) = sfl_rows(res)
    assert row["accuracy_ci"] == "99.0 % (95 % CI 95.0-100.0)"


def test_sfl_advice_reads_the_baselines_that_split_nothing_and_the_ablation():
    # Prepare: sfl compare's baselines and ablation (the format of sfl_analysis).
    seeds = [
        {"baseline": "b", "seed": s, "accuracy": 0.5, "macro_f1": 0.3, "bytes": 0}
        for s in (0, 1, 2)
    ]
    res = _sfl(
        {
            **SFL_DOC,
            "baselines": {
                "majority": {
                    "final_accuracy": _iv(0.5, 0.5, 0.5),
                    "final_macro_f1": _iv(NAN),
                    "bytes_total": _iv(0.0, 0.0, 0.0),
                    "per_seed": seeds,
                    "scheme_minus_baseline": {"acc-aware": _iv(0.395, 0.39, 0.40)},
                },
                "centralised": {
                    "final_accuracy": _iv(0.92, 0.91, 0.93),
                    "final_macro_f1": _iv(NAN),
                    "bytes_total": _iv(NAN),
                    "per_seed": seeds,
                    "scheme_minus_baseline": {"acc-aware": _iv(-0.025, -0.03, -0.02)},
                },
            },
            "ablation": [
                {
                    "part": "assignment (hsfl-greedy vs hsfl)",
                    "scheme": "hsfl-greedy",
                    "against": "hsfl",
                    "n_seeds": 3,
                    "accuracy_diff": _iv(0.0, -0.01, 0.01),
                    "delay_ratio": _iv(0.64, 0.6, 0.68),
                    "bytes_ratio": _iv(1.0, 1.0, 1.0),
                }
            ],
        }
    )
    # Execute
    rows = sfl_rows(res)
    advice = advise_sfl(res, rows)
    # Assert: baseline rows in the table, never the pick; differences with their CIs.
    base = [r for r in rows if r["baseline"]]
    assert [r["scheme"] for r in base] == ["majority", "centralised"]
    assert base[1]["accuracy_ci"] == "92.0 % (95 % CI 91.0-93.0)"
    assert advice[0].startswith("For split learning, acc-aware")
    text = " ".join(advice)
    assert "majority +39.50 pt (95 % CI +39.00 to +40.00); centralised -2.50 pt" in text
    assert (
        "assignment (hsfl-greedy vs hsfl): accuracy +0.00 pt (95 % CI -1.00 to +1.00), delay -36 % (95 % CI -40 to -32 %)"
        in text
    )


def test_best_model_within_the_noise_of_another_is_not_called_clearly_better():
    # Prepare: cnn 90.0 % and lstm 89.9 % with seed spread of about 0.2 pt: CIs overlap.
    cnn, lstm = paired_runs("cnn"), paired_runs("lstm", acc=0.899)
    advice = _advice([*cnn[0], *cnn[1], *lstm[0], *lstm[1]])
    assert advice[0].startswith("Use cnn")
    assert "but not clearly better than lstm: the 95 % CIs of their macro-F1 overlap" in advice[0]
    # Far apart (lstm at 80 %): no such caveat.
    lstm = paired_runs("lstm", acc=0.8)
    assert "not clearly better" not in _advice([*cnn[0], *cnn[1], *lstm[0], *lstm[1]])[0]


def test_a_score_the_same_on_every_seed_is_not_given_a_zero_width_interval():
    from flowsplit.experiments.advice import change_ci, pct_ci

    # XGBoost without subsampling ignores the seed: a "95 % CI 96.3-96.3" would read
    # as certainty about a test set of a few hundred flows.
    assert pct_ci(Interval(0.963, 0.963, 0.963, 3)) == "96.3 % (the same on all 3 seeds)"
    assert pct_ci(Interval(0.963, 0.95, 0.97, 3)) == "96.3 % (95 % CI 95.0-97.0)"
    assert pct_ci(Interval(0.963, NAN, NAN, 1)) == "96.3 %"
    # The same for a simulated delay or byte count, fixed by the plan whatever the seed.
    assert change_ci(Interval(0.63, 0.63, 0.63, 3)) == "-37 % (the same on all 3 seeds)"
    assert change_ci(Interval(0.71, 0.41, 1.22, 3)) == ("-29 % (95 % CI -59 to +22 %)")


def test_overview_verdict_is_one_line_by_the_advice_rules(monkeypatch):
    # Prepare: the clean study (cnn pays at 2 workers) and the split-learning study
    dp = data_parallel_rows(study_results(_clean_study()))
    sfl = sfl_rows(SFL_RES)
    # Execute
    verdict = advice_mod.overview_verdict(dp, sfl)
    few = advice_mod.overview_verdict(dp, sfl)
    monkeypatch.setattr(advice_mod, "MIN_SEEDS", 3)
    enough = advice_mod.overview_verdict(dp, sfl)
    # Assert: the model, data-parallel because it pays, and the split-learning pick with
    # its accuracy; with 3 seeds under the rule of 5 the pick is named, not advised
    assert "\n" not in verdict and verdict.endswith(".")
    assert verdict.startswith("Use cnn (macro-F1 90.0 %), data-parallel")
    assert "data-parallel on 2 workers (it pays)" in verdict
    assert (
        "for split learning acc-aware (89.5 % accuracy, lowest delay) leads, but 3 seed(s)" in few
    )
    assert "for split learning use acc-aware (89.5 % accuracy, lowest delay)." in enough


def test_overview_verdict_says_train_centralised_when_nothing_pays():
    # Prepare: cnn's 2-worker runs are no faster (no claimed speedup >= 1.2x)
    cnn = paired_runs("cnn", t_parallel=9.5)
    dp = data_parallel_rows(study_results([*cnn[0], *cnn[1]]))
    # Execute
    verdict = advice_mod.overview_verdict(dp, [])
    # Assert
    assert verdict.startswith("Use cnn")
    assert verdict.endswith("trained centralised: data parallelism is not shown to pay here.")


def test_delay_and_bytes_intervals_are_clipped_at_zero():
    # Prepare: two seeds far apart give a t interval reaching below 0 s
    wide = Interval(1.3, -1.3, 4.0, 2)
    # Execute
    text = advice_mod._num_ci(wide, "s")
    # Assert: no negative delay is shown
    assert text == "1.3 s (95 % CI 0.0-4.0)"


def test_rows_show_the_columns_that_apply_to_them_in_the_tables_and_report_json():
    # Prepare: cnn run centralised only, then with its data-parallel runs
    c, p = paired_runs("cnn")
    alone = data_parallel_rows(study_results([*c]))
    both = data_parallel_rows(study_results([*c, *p]))
    # Execute: the rows as the tables and report.json read them (by column key)
    shown = [list(r) for r in alone]
    cnn = both[2]
    # Assert: the majority class has scores but no model name; XGBoost not run says only
    # so; a model run centralised only has no data-parallel columns
    assert shown[0] == [
        "model", "baseline", "accuracy", "macro_f1", "accuracy_ci", "macro_f1_ci", "verdict"
    ]  # fmt: skip
    assert shown[1] == ["model", "baseline", "verdict"]
    assert "workers" not in alone[2] and alone[2].get("speedup_ci") is None
    assert cnn["workers"] == cnn.chosen.workers == 2 and cnn.get("diff_ci") == cnn.chosen.diff_ci
    assert list(cnn)[-3:] == ["alpha", "diff", "diff_ci"]
    assert jsonable(dict(cnn))["speedup"]["mean"] == cnn.chosen.speedup.mean


def test_overview_reads_the_manifest_typed(tmp_path):
    # A manifest without split_by or version still renders; one without its classes is
    # refused by name before a file is written.
    content = overview_content(None, None)
    base = {"n_flows": 4, "classes": ["dns", "web"], "splits": {"train": 2, "test": 2}}
    write_overview(
        tmp_path / "ok", manifest=base, dp_dir=None, sfl_dir=None, timings={}, content=content
    )
    assert (
        "4 flows, 2 classes (dns, web), split by None: train 2, test 2"
        in (tmp_path / "ok" / "report.md").read_text()
    )
    bad = {k: v for k, v in base.items() if k != "classes"}
    with pytest.raises(ValueError, match="manifest lacks classes"):
        write_overview(
            tmp_path / "bad", manifest=bad, dp_dir=None, sfl_dir=None, timings={}, content=content
        )
    assert not (tmp_path / "bad").exists()
