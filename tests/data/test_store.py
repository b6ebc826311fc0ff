"""Dataset store: streaming writes, atomic replacement, memory-mapped reads."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from flowsplit.data.store import DatasetWriter, NpyAppender, load_dataset, write_dataset
from flowsplit.errors import InputError


def _meta(n, split="train"):
    return pd.DataFrame(
        {
            "flow_id": np.arange(n),
            "source": ["a.pcap"] * n,
            "group": ["a.pcap"] * n,
            "label": np.arange(n) % 2,
            "label_name": np.where(np.arange(n) % 2, "dns", "http"),
            "split": [split] * n,
        }
    )


def test_npy_appender_writes_a_loadable_memmappable_file(tmp_path):
    # Prepare
    path = tmp_path / "x.npy"
    app = NpyAppender(path, (3, 2), np.float32)
    a = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    b = -np.ones((1, 3, 2), dtype=np.float32)
    # Execute
    app.append(a)
    app.append(b)
    shape = app.close()
    # Assert
    loaded = np.load(path, mmap_mode="r")
    assert shape == (3, 3, 2)
    assert isinstance(loaded, np.memmap)
    np.testing.assert_array_equal(loaded, np.concatenate([a, b]))


def test_appender_rejects_rows_of_the_wrong_shape(tmp_path):
    app = NpyAppender(tmp_path / "x.npy", (4,), np.uint8)
    with pytest.raises(ValueError, match="expected"):
        app.append(np.zeros((2, 5), np.uint8))
    app.abort()
    assert not (tmp_path / "x.npy").exists()


def test_writer_keeps_selected_rows_in_order_and_renumbers(tmp_path):
    views = {"bytes": np.arange(40, dtype=np.uint8).reshape(10, 4)}
    stats = pd.DataFrame({"s": np.arange(10, dtype=np.float32)})
    with DatasetWriter(tmp_path / "ds", {"bytes": ((4,), np.uint8)}) as w:
        w.append(_meta(6), {"bytes": views["bytes"][:6]}, stats.iloc[:6])
        w.append(_meta(4), {"bytes": views["bytes"][6:]}, stats.iloc[6:])
        meta = w.collected_meta()
        meta["split"] = ["train"] * 5 + ["val"] * 3 + ["test"] * 2
        w.finish(classes=["http", "dns"], meta=meta, keep=np.array([1, 3, 8]))
    ds = load_dataset(tmp_path / "ds")
    np.testing.assert_array_equal(ds.view("bytes"), views["bytes"][[1, 3, 8]])
    np.testing.assert_array_equal(ds.view("stats")[:, 0], [1, 3, 8])
    assert ds.meta["flow_id"].tolist() == [0, 1, 2]
    assert ds.manifest["splits"] == {"train": 2, "val": 0, "test": 1}
    # labels alternate per batch: rows 1 and 3 are dns, row 8 (third of batch 2) is http
    assert ds.manifest["class_counts"] == {"http": 1, "dns": 2}
    assert ds.split_indices("test").tolist() == [2]


def test_an_interrupted_write_leaves_the_old_dataset_intact(tmp_path):
    out = tmp_path / "ds"
    write_dataset(
        out, meta=_meta(2), classes=["http", "dns"], views={"bytes": np.ones((2, 3), np.uint8)}
    )
    before = (out / "manifest.json").read_text()
    with pytest.raises(RuntimeError), DatasetWriter(out, {"bytes": ((3,), np.uint8)}) as w:
        w.append(_meta(5), {"bytes": np.zeros((5, 3), np.uint8)})
        raise RuntimeError("killed")
    assert (out / "manifest.json").read_text() == before
    assert load_dataset(out).n_flows == 2
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # no temporary left behind


def test_writer_refuses_to_replace_a_foreign_directory(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "precious.txt").write_text("x")
    with pytest.raises(InputError, match="not a flowsplit dataset"):
        DatasetWriter(tmp_path / "ds", {})


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(InputError, match="not a dataset directory"):
        load_dataset(tmp_path / "missing")
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="no manifest.json"):
        load_dataset(tmp_path / "d")
    (tmp_path / "d" / "manifest.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(InputError, match="schema version 99"):
        load_dataset(tmp_path / "d")


def test_missing_view_error_lists_what_is_there(tmp_path):
    write_dataset(
        tmp_path / "ds",
        meta=_meta(2),
        classes=["http", "dns"],
        views={"bytes": np.ones((2, 3), np.uint8)},
    )
    ds = load_dataset(tmp_path / "ds")
    with pytest.raises(InputError, match="has no view 'seq' \\(it has: bytes\\)"):
        ds.view("seq")
