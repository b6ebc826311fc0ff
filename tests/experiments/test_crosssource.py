"""``flowsplit compare --cross-source``: every run also scored on another dataset (issue 32),
and the scoring it shares with the benchmark (flowsplit.train.crosssource)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from flowsplit.cli import main as cli_main
from flowsplit.data.store import write_dataset
from flowsplit.experiments.dp import compare as compare_mod
from flowsplit.experiments.dp.compare import CompareConfig, run_compare, train_command
from flowsplit.experiments.dp.crosssource import SCORES_NAME
from flowsplit.experiments.dp.result import read_compare_result
from flowsplit.report import page as page_mod
from flowsplit.train.crosssource import auroc, cross_source_scores
from tests.experiments.helpers import CLASSES, make_dataset

TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def make_other(root, counts: dict[str, int], width: int = 784):
    """Another source: ``counts`` flows per class, a bytes view of ``width``."""
    names = [c for c, n in counts.items() for _ in range(n)]
    classes = list(counts)
    rng = np.random.default_rng(7)
    meta = pd.DataFrame(
        {
            "flow_id": np.arange(len(names)),
            "source": [f"other{i % 4}.pcap" for i in range(len(names))],
            "group": [f"other{i % 4}" for i in range(len(names))],
            "label": [classes.index(c) for c in names],
            "label_name": names,
            "split": "test",
        }
    )
    views = {"bytes": rng.integers(0, 256, size=(len(names), width), dtype=np.uint8)}
    stats = pd.DataFrame(rng.normal(size=(len(names), 4)).astype(np.float32), columns=list("abcd"))
    return write_dataset(root, meta=meta, classes=classes, views=views, stats=stats)


def real_runner(cell, cfg):
    """Each cell trained for real, in this process (a 1-epoch CNN on 60 flows: seconds)."""
    rc = cli_main([str(a) for a in train_command(cell, cfg)[3:]])
    return rc == 0, f"exit status {rc}"


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(compare_mod, "available_cores", lambda: 2)
    monkeypatch.setattr(page_mod, "figure_to_base64", lambda fig, dpi=100: TINY_PNG)


def test_auroc_is_the_share_of_pairs_ordered_ties_halved():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 30) / 4, rng.integers(0, 4, 20) / 4  # many ties
    pairs = [1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg)]
    assert auroc(pos, neg) == pytest.approx(np.mean(pairs))
    assert auroc(np.array([0.9]), np.array([0.1])) == 1.0
    assert auroc(np.array([]), neg) is None


def test_cross_scores_keep_classes_with_enough_flows_and_match_names_ignoring_case():
    model_classes = ["web", "dns", "ssh"]
    other_classes = ["WEB", "dns", "ntp"]
    y = np.array([0] * 20 + [1] * 5 + [2] * 3)  # WEB 20, dns 5, ntp 3
    pred = np.array([0] * 18 + [1, 2] + [1] * 5 + [0] * 3)
    proba = np.eye(3)[pred] * 0.6 + 0.1
    proba[25:] = [0.5, 0.3, 0.2]  # the unknown flows: less confident than every known one
    s = cross_source_scores(proba, y, model_classes, other_classes, min_flows=20)
    assert s["scored"] == ["web"] and s["too_few"] == {"dns": 5}
    assert s["flows_per_class"] == {"web": 20, "dns": 5, "ssh": 0}
    assert s["n_scored"] == 20 and s["accuracy"] == pytest.approx(18 / 20)
    # web: 18 right of 20, and no other flow of the scored rows called web: F1 = 2*18/(20+18)
    assert s["macro_f1"] == pytest.approx(36 / 38)
    assert s["open_set"]["n_known"] == 25 and s["open_set"]["n_unknown"] == 3
    assert s["open_set"]["auroc_confidence"] == 1.0


def test_compare_cross_source_section(tmp_path, fast):
    ds = make_dataset(tmp_path / "ds")
    # "web" in another case (matched), dns under the threshold, the third class absent,
    # ntp never trained on (the open set).
    other = make_other(tmp_path / "other", {"WEB": 25, "dns": 10, "ntp": 15})
    out = tmp_path / "study"
    cfg = CompareConfig(
        dataset=str(ds), out=str(out), models=["cnn"], workers=[1], seeds=[0, 1], epochs=1,
        cross_source=str(other),
    )  # fmt: skip
    run_compare(cfg, progress=False, run_cell_fn=real_runner)
    result = read_compare_result(out)
    cs = result.cross_source
    assert cs is not None and cs.min_flows == 20
    assert cs.scored == ["web"]
    by_name = {c.name: c for c in cs.classes}
    assert by_name["dns"].other_flows == 10 and not by_name["dns"].scored
    assert by_name[CLASSES[2]].other_flows == 0 and not by_name[CLASSES[2]].scored
    assert by_name["web"].train_flows == 20  # 60 training flows, 3 classes
    assert cs.unknown_classes == {"ntp": 15}
    (row,) = cs.models
    assert (row.model, row.workers, row.seeds, row.n_cross) == ("cnn", 1, [0, 1], 25)
    # The cross accuracy is what the runs' models say about the 25 WEB flows.
    from flowsplit.experiments.dp.layout import Cell, cell_dir
    from flowsplit.train.runs import load_trained_model, predict_labels

    accs = []
    for seed in (0, 1):
        run = cell_dir(out, Cell("cnn", 1, seed))
        assert (run / SCORES_NAME).is_file()
        model, doc = load_trained_model(run)
        pred = predict_labels(model, np.load(other / "bytes.npy")[:25])
        accs.append(np.mean(pred == doc["model"]["classes"].index("web")))
    assert row.cross_accuracy == pytest.approx(np.mean(accs))
    assert row.macro_f1_drop == pytest.approx(row.own_macro_f1_scored - row.cross_macro_f1)
    assert 0 <= row.open_set_auroc <= 1
    md = (out / "report.md").read_text()
    assert "## Other source" in md and "no (under 20 flows)" in md
    assert "Other source" in (out / "report.html").read_text()
    assert any(line.startswith("On another source") for line in result.summary)


def one_line_error(capsys, argv) -> str:
    assert cli_main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_wrong_cross_source_is_one_line_before_any_run(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    base = ["compare", ds, "-o", tmp_path / "study", "--models", "cnn", "--workers", "1"]
    err = one_line_error(capsys, [*base, "--cross-source", tmp_path / "nowhere"])
    assert "nowhere" in err and "--cross-source" in err
    err = one_line_error(capsys, [*base, "--cross-source", ds])
    assert "the study's own dataset" in err
    few = make_other(tmp_path / "few", {"web": 19, "ntp": 40})
    err = one_line_error(capsys, [*base, "--cross-source", few])
    assert "shares no class" in err and "web 19" in err
    narrow = make_other(tmp_path / "narrow", {"web": 30}, width=100)
    err = one_line_error(capsys, [*base, "--cross-source", narrow])
    assert "(100,)" in err and "(784,)" in err
    assert not (tmp_path / "study" / "runs").exists()
