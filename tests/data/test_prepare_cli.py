"""`flowsplit prepare` / `inspect` end to end through the CLI (IDX and flow CSV inputs)."""

from __future__ import annotations

import json

import blake3
import numpy as np

from flowsplit.cli import main
from flowsplit.data.store import load_dataset
from tests.data.test_flowcsv import CIC
from tests.data.test_idx import _write_idx


def _idx_inputs(tmp_path, n=60, n_classes=3):
    rng = np.random.default_rng(0)
    labels = np.arange(n) % n_classes
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    images[labels == 0, 0, 0] = 7  # a few exact duplicates below come from here
    images[5] = images[8]
    labels[5] = labels[8]
    d = tmp_path / "idx"
    d.mkdir()
    _write_idx(d / "set-images-idx3-ubyte.gz", images)
    _write_idx(d / "set-labels-idx1-ubyte.gz", labels.astype(np.uint8))
    return d


def test_prepare_idx_writes_a_complete_manifest(tmp_path, capsys):
    d = _idx_inputs(tmp_path)
    rc = main(
        ["prepare", str(d), "-o", str(tmp_path / "ds"), "--class-names", "a,b,c", "--seed", "1"]
    )
    assert rc == 0
    ds = load_dataset(tmp_path / "ds")
    m = ds.manifest
    assert m["schema_version"] == 1 and m["kind"] == "idx"
    assert m["classes"] == ["a", "b", "c"]
    assert m["n_flows"] == 59 and m["skipped"] == {"duplicate_flow": 1}
    assert sum(m["splits"].values()) == 59 and m["split_by"] == "flow"
    assert m["views"]["bytes"]["shape"] == [59, 784] and m["views"]["stats"]["shape"][1] == 48
    assert {s["kind"] for s in m["sources"]} == {"idx"}
    for s in m["sources"]:  # BLAKE3 by default, of the file as it is on disk
        assert s["blake3"] == blake3.blake3((d / s["path"]).read_bytes()).hexdigest()
    assert sum(m["class_counts"].values()) == 59
    # inspect prints the same summary
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "59 flows, 3 classes" in out and "duplicate_flow 1" in out
    assert main(["inspect", str(tmp_path / "ds"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_flows"] == 59


def test_digest_option_names_the_algorithm_or_leaves_it_out(tmp_path, capsys):
    import hashlib

    d = _idx_inputs(tmp_path)
    base = ["prepare", str(d), "--class-names", "a,b,c", "--quiet"]
    assert main([*base, "-o", str(tmp_path / "s"), "--digest", "sha256"]) == 0
    m = load_dataset(tmp_path / "s").manifest
    assert m["options"]["digest"] == "sha256"
    for s in m["sources"]:
        assert "blake3" not in s
        assert s["sha256"] == hashlib.sha256((d / s["path"]).read_bytes()).hexdigest()
    assert main([*base, "-o", str(tmp_path / "n"), "--digest", "none"]) == 0
    m = load_dataset(tmp_path / "n").manifest
    assert all(set(s) == {"path", "size", "kind"} for s in m["sources"])
    assert main([*base, "-o", str(tmp_path / "x"), "--digest", "md5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--digest" in err and "md5" in err


def test_prepare_is_deterministic_for_a_seed(tmp_path):
    d = _idx_inputs(tmp_path)
    for name in ("a", "b"):
        assert main(["prepare", str(d), "-o", str(tmp_path / name), "--quiet", "--seed", "4"]) == 0
    a, b = load_dataset(tmp_path / "a"), load_dataset(tmp_path / "b")
    assert a.meta["split"].tolist() == b.meta["split"].tolist()
    np.testing.assert_array_equal(a.view("bytes"), b.view("bytes"))


def test_prepare_flow_csvs_split_by_time(tmp_path):
    p = tmp_path / "cic.csv"
    body = CIC.splitlines()
    rows = [body[0]] + [
        f"x{i},10.0.0.1,{1000 + i},10.0.0.2,80,1/1/2020 10:{i % 60:02d},{i * 10},{i}.5,{'BENIGN' if i % 3 else 'DoS'}"
        for i in range(40)
    ]
    p.write_text("\n".join(rows) + "\n")
    assert main(["prepare", str(p), "-o", str(tmp_path / "ds"), "--quiet"]) == 0
    ds = load_dataset(tmp_path / "ds")
    assert ds.manifest["split_by"] == "time"  # one file: a file split is impossible
    assert ds.view("stats").shape == (40, 2)
    test_times = ds.meta.loc[ds.meta.split == "test", "first_ts"]
    train_times = ds.meta.loc[ds.meta.split == "train", "first_ts"]
    assert test_times.min() > train_times.max()


def test_bad_inputs_give_one_line_errors_and_exit_2(tmp_path, capsys):
    assert main(["prepare", str(tmp_path / "nope"), "-o", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"flowsplit: error: {tmp_path / 'nope'}: no such file or folder"]
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["prepare", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "ds")]) == 2
    assert "not a capture (pcap/pcapng), flow CSV or IDX file" in capsys.readouterr().err
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    assert main(["prepare", str(p), "-o", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no label column 'Label'" in err and "Traceback" not in err
    assert not (tmp_path / "ds").exists()
    assert main(["prepare", str(p), "-o", str(tmp_path / "ds"), "--views", "seq,nope"]) == 2
    assert "--views" in capsys.readouterr().err


def test_extract_views_reproduces_the_dataset_rows_of_a_capture(tmp_path):
    from flowsplit.data.prepare import extract_views
    from tests.conftest import DEMO_CAPTURES

    cls = sorted(p for p in DEMO_CAPTURES.iterdir() if p.is_dir())[:3]
    src = tmp_path / "caps"
    for c in cls:  # 3 classes x 3 files: enough for a file split
        (src / c.name).mkdir(parents=True)
        for f in sorted(c.glob("*.pcap"))[:3]:
            (src / c.name / f.name).symlink_to(f)
    assert main(["prepare", str(src), "-o", str(tmp_path / "ds"), "--quiet", "--no-dedup"]) == 0
    ds = load_dataset(tmp_path / "ds")
    one = sorted((src / cls[0].name).glob("*.pcap"))[0]
    meta, views, stats = extract_views([one], ds.manifest["options"])
    rows = np.flatnonzero(ds.meta["source"].to_numpy() == f"{cls[0].name}/{one.name}")
    assert len(meta) == len(rows) > 0
    np.testing.assert_array_equal(views["bytes"], ds.view("bytes")[rows])
    np.testing.assert_array_equal(views["seq"], ds.view("seq")[rows])
    np.testing.assert_array_equal(stats.to_numpy(np.float32), ds.view("stats")[rows])


def test_flow_csv_without_times_splits_by_flow_not_by_row_order(tmp_path, capsys):
    # Prepare: one CSV, 60 rows of class A then 60 of B, no timestamp column.
    p = tmp_path / "nf.csv"
    rows = ["duration,bytes,label"] + [
        f"{i},{i * 7 % 50},{'A' if i < 60 else 'B'}" for i in range(120)
    ]
    p.write_text("\n".join(rows) + "\n")
    # Execute
    assert (
        main(["prepare", str(p), "-o", str(tmp_path / "ds"), "--label-column", "label", "--quiet"])
        == 0
    )
    bad = main(
        [
            "prepare",
            str(p),
            "-o",
            str(tmp_path / "ds2"),
            "--label-column",
            "label",
            "--split-by",
            "time",
            "--quiet",
        ]
    )
    # Assert: both classes in every split (a row-order split would put only B in val/test).
    ds = load_dataset(tmp_path / "ds")
    assert ds.manifest["split_by"] == "flow"
    for split in ("train", "val", "test"):
        assert set(ds.meta.loc[ds.meta.split == split, "label_name"]) == {"A", "B"}
    assert bad == 2 and "no flow start times" in capsys.readouterr().err


def test_labels_file_missing_and_output_that_is_a_file_are_one_line_errors(tmp_path, capsys):
    from tests.conftest import DEMO_CAPTURES

    capture = next(DEMO_CAPTURES.glob("dns/*.pcap"))
    rc = main(
        [
            "prepare",
            str(capture),
            "-o",
            str(tmp_path / "ds"),
            "--labels",
            str(tmp_path / "none.csv"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"flowsplit: error: {tmp_path / 'none.csv'}: labels file not found"]
    (tmp_path / "notes.txt").write_text("keep me")
    rc = main(["prepare", str(capture), "-o", str(tmp_path / "notes.txt"), "--label-by", "port"])
    assert rc == 2 and "not a directory" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "keep me"
