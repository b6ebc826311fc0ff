"""Partitions of the training rows over clients."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.federated.system.partition import (
    PartitionSpec,
    parse_partition,
    partition_by_site,
    partition_dirichlet,
    partition_iid,
)


def _is_partition(shards, indices) -> bool:
    joined = np.sort(np.concatenate(shards))
    return np.array_equal(joined, np.sort(indices))


def test_iid_shards_cover_every_row_once_and_differ_by_at_most_one():
    # Prepare
    rows = np.arange(100, 203)  # 103 rows
    # Execute
    shards = partition_iid(rows, 4, seed=0)
    # Assert: 103 = 26 + 26 + 26 + 25.
    assert _is_partition(shards, rows)
    assert sorted(len(s) for s in shards) == [25, 26, 26, 26]
    assert all(np.array_equal(a, b) for a, b in zip(shards, partition_iid(rows, 4, 0), strict=True))


def test_dirichlet_skews_labels_more_for_small_alpha():
    # Prepare: 4 balanced classes.
    rows = np.arange(800)
    labels = rows % 4

    def mean_classes_per_client(alpha: float) -> float:
        shards = partition_dirichlet(rows, labels, 8, alpha, seed=1)
        assert _is_partition(shards, rows)
        # Classes holding at least 10 % of a client's rows.
        return float(
            np.mean([(np.bincount(labels[s], minlength=4) >= 0.1 * len(s)).sum() for s in shards])
        )

    # Execute
    skewed, even = mean_classes_per_client(0.1), mean_classes_per_client(100.0)
    # Assert: near-IID with alpha = 100 (all 4 classes), few classes with alpha = 0.1.
    assert even == 4.0
    assert skewed < 3.0


def test_dirichlet_gives_every_client_a_row_even_when_alpha_is_tiny():
    # Prepare: 3 classes, 10 clients, alpha 0.05: a draw leaves most clients empty.
    rows = np.arange(60)
    # Execute
    shards = partition_dirichlet(rows, rows % 3, 10, 0.05, seed=0, min_samples=2)
    # Assert: repaired to >= 2 rows each, still a partition.
    assert min(len(s) for s in shards) >= 2
    assert _is_partition(shards, rows)


def test_site_partition_keeps_each_site_on_one_client_and_balances():
    # Prepare: sites of sizes a:5, b:4, c:3, d:2 (rows 0..13).
    sites = np.array(list("aaaaabbbbcccdd"))
    rows = np.arange(14)
    # Execute
    shards = partition_by_site(rows, sites, 2)
    # Assert: largest first to the lighter client: a->0, b->1, c->1, d->0: 7 rows each.
    assert [sorted(set(sites[s])) for s in shards] == [["a", "d"], ["b", "c"]]
    assert [len(s) for s in shards] == [7, 7]
    with pytest.raises(ConfigError, match="4 sites for 5 clients"):
        partition_by_site(rows, sites, 5)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("iid", PartitionSpec("iid")),
        ("dirichlet:0.3", PartitionSpec("dirichlet", alpha=0.3)),
        ("site", PartitionSpec("site", column="group")),
        ("site:source", PartitionSpec("site", column="source")),
    ],
)
def test_parse_partition(text, spec):
    assert parse_partition(text) == spec
    assert parse_partition(str(spec)) == spec


@pytest.mark.parametrize("text", ["dirichlet:-1", "dirichlet:x", "site:port", "random"])
def test_parse_partition_rejects_bad_specs(text):
    with pytest.raises(ConfigError, match="--partition"):
        parse_partition(text)
