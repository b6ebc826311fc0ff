"""Leak-free splits, deduplication and class balancing."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.data.sources import row_hashes
from flowsplit.data.splits import assign_splits, cap_per_group, dedup_mask, select_classes
from flowsplit.errors import ConfigError


def _grouped_data(n_groups=40, per_group=10, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"f{i}.pcap" for i in range(n_groups)], per_group)
    labels = np.repeat(rng.integers(0, n_classes, n_groups), per_group).astype(str)
    return labels, groups


def test_file_split_never_puts_a_capture_in_two_splits():
    labels, groups = _grouped_data()
    out = assign_splits(labels, by="file", groups=groups, seed=3)
    for g in np.unique(groups):
        assert len(set(out[groups == g])) == 1
    assert set(out) == {"train", "val", "test"}
    # roughly 70/15/15 by flows (whole groups of 10 make it coarse)
    assert 0.05 < (out == "test").mean() < 0.3
    assert 0.05 < (out == "val").mean() < 0.3


def test_split_is_deterministic_for_a_seed_and_changes_with_it():
    labels, groups = _grouped_data()
    a = assign_splits(labels, by="file", groups=groups, seed=1)
    b = assign_splits(labels, by="file", groups=groups, seed=1)
    c = assign_splits(labels, by="file", groups=groups, seed=2)
    assert (a == b).all()
    assert not (a == c).all()


def test_flow_split_is_stratified():
    labels = np.repeat(["a", "b", "c", "d"], [400, 200, 100, 100])
    out = assign_splits(labels, by="flow", seed=0, val_frac=0.1, test_frac=0.2)
    for cls, n in zip("abcd", [400, 200, 100, 100], strict=True):
        frac = (out[labels == cls] == "test").mean()
        assert abs(frac - 0.2) <= 1.5 / n * 10, (cls, frac)


def test_time_split_puts_the_latest_flows_in_test():
    times = np.arange(100, dtype=float)[::-1]  # flow 0 is the latest
    out = assign_splits(np.zeros(100), by="time", times=times, val_frac=0.1, test_frac=0.2)
    assert (
        (out[:20] == "test").all() and (out[20:30] == "val").all() and (out[30:] == "train").all()
    )


def test_file_split_needs_three_files():
    with pytest.raises(ConfigError, match="at least 3 capture files"):
        assign_splits(np.array(["a", "b"] * 5), by="file", groups=np.array(["x", "y"] * 5))


def test_dedup_keeps_first_of_identical_rows():
    rows = np.array([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4]], np.uint8)
    keep = dedup_mask(row_hashes([rows]))
    assert keep.tolist() == [True, True, False, True, False]


def test_row_hashes_see_every_view():
    a = np.zeros((2, 3), np.uint8)
    b = np.array([[0.0], [1.0]], np.float32)
    h = row_hashes([a, b])
    assert h[0] != h[1]


def test_cap_per_group_caps_each_group_and_class():
    labels = np.array(["a"] * 50 + ["b"] * 5 + ["a"] * 3)
    groups = np.array(["g1"] * 55 + ["g2"] * 3)
    keep = cap_per_group(labels, groups, cap=10, seed=0)
    assert keep[:50].sum() == 10 and keep[50:55].sum() == 5 and keep[55:].sum() == 3


def test_select_classes_by_size_groups_and_names():
    labels = np.array(["a"] * 10 + ["b"] * 4 + ["c"] * 10 + ["Unknown"] * 7)
    groups = np.array(["g1", "g2"] * 5 + ["g1"] * 4 + ["g1"] * 10 + ["g3"] * 7)
    keep, dropped = select_classes(labels, groups, min_flows=5, min_groups=2, exclude=["Unknown"])
    assert set(labels[keep]) == {"a"}
    assert dropped == {"class_excluded": 7, "class_too_small": 14}


def test_one_class_captures_put_every_class_in_every_split():
    # 8 classes x 6 capture files of 40 flows each, like the lab capture
    groups = np.repeat([f"c{c}/s{s}.pcap" for c in range(8) for s in range(6)], 40)
    labels = np.repeat(np.arange(8), 6 * 40)
    for seed in range(5):
        out = assign_splits(labels, by="file", groups=groups, seed=seed)
        for c in range(8):
            parts = out[labels == c]
            # one file to test, one to val, four to train
            assert (parts == "test").sum() == 40 and (parts == "val").sum() == 40, (seed, c)
        for g in np.unique(groups):
            assert len(set(out[groups == g])) == 1
