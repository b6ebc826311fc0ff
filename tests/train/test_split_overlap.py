"""What a test split shares with its training split, and flows whose label only the port
tells (flowsplit.train.crosssource; benchmarks/generalisation.py, issue 32)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from flowsplit.train.crosssource import legacy_unicast_mdns, nearest_rows, prefix_copies


def test_legacy_unicast_mdns_is_mdns_with_one_end_on_5353():
    meta = pd.DataFrame(
        {
            "label_name": ["MDNS", "MDNS", "MDNS", "DNS", "DNS"],
            "port_a": [5353, 41179, 5353, 41179, 5353],
            "port_b": [5353, 5353, 39627, 53, 41179],
        }
    )
    assert legacy_unicast_mdns(meta).tolist() == [False, True, True, False, False]
    # without ports (an IDX set): nothing is set apart
    assert not legacy_unicast_mdns(meta[["label_name"]]).any()


def test_nearest_rows_hamming_across_chunks():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, size=(7, 32), dtype=np.uint8)
    test = train[[4, 1, 6]].copy()
    test[0, :3] ^= 1  # 3 bytes off row 4
    test[2, 10] ^= 255  # 1 byte off row 6
    idx, dist = nearest_rows(train, test, chunk=2)
    assert idx.tolist() == [4, 1, 6]
    assert dist.tolist() == [3, 0, 1]


def test_prefix_copies_counts_same_and_other_class():
    train = np.array([[1, 2, 3, 4], [1, 2, 9, 9], [5, 6, 7, 8]], dtype=np.uint8)
    y_train = np.array([0, 0, 1])
    test = np.array([[1, 2, 3, 4], [5, 6, 0, 0], [7, 7, 7, 7]], dtype=np.uint8)
    y_test = np.array([0, 0, 2])
    out = prefix_copies(train, test, y_train, y_test, lengths=(2, None))
    # first 2 bytes: test 0 (class 0 copies), test 1 (only a class-1 copy)
    assert out["2"] == {
        "test_rows_with_a_copy": 2,
        "a_copy_of_the_same_class": 1,
        "copies_of_other_classes_only": 1,
    }
    assert out["4"]["test_rows_with_a_copy"] == 1
    assert out["4"]["a_copy_of_the_same_class"] == 1
