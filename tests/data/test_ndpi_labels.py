"""The nDPI corpus end to end: flows found for nDPI's own labels, and the 8-protocol set."""

from __future__ import annotations

import numpy as np
import pandas as pd

from flowsplit.data.labels import LabelSpec, flow_key, parse_key
from flowsplit.data.prepare import PrepareOptions, prepare_dataset
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows_many
from tests.conftest import NDPI_DIR, needs_ndpi


@needs_ndpi
def test_at_least_95_percent_of_matched_ndpi_flows_are_found():
    files = sorted(p for p in (NDPI_DIR / "pcap").iterdir() if p.is_file())
    found = set()
    report = ReadReport()
    for b in iter_flows_many(files, FlowOptions(views=("stats",)), report, on_error="skip"):
        for s, p, a, pa, bb, pb in zip(
            b.source.tolist(),
            b.proto.tolist(),
            b.ip_a.tolist(),
            b.port_a.tolist(),
            b.ip_b.tolist(),
            b.port_b.tolist(),
            strict=True,
        ):
            found.add((files[s].name, flow_key(p, a, pa, bb, pb)))
    labels = pd.read_csv(NDPI_DIR / "ndpi_flow_labels.csv")
    matched = labels[labels.matched == 1]
    hit = np.array(
        [(f, parse_key(k)) in found for f, k in zip(matched.file, matched.key, strict=True)]
    )
    assert hit.mean() >= 0.95, f"only {hit.mean():.3f} of nDPI's matched flows found"


@needs_ndpi
def test_eight_protocol_set_is_split_by_file(tmp_path):
    opts = PrepareOptions(
        labels=LabelSpec(labels=NDPI_DIR / "ndpi_flow_labels.csv", label_column="master"),
        views=("stats",),
        exclude_classes=("Unknown",),
        max_flows_per_group=30,
        min_groups_per_class=5,
        top_classes=8,
    )
    manifest = prepare_dataset([NDPI_DIR / "pcap"], tmp_path / "ndpi8", opts)
    assert len(manifest["classes"]) == 8 and "Unknown" not in manifest["classes"]
    assert manifest["split_by"] == "file"
    meta = pd.read_parquet(tmp_path / "ndpi8" / "meta.parquet")
    assert (meta.groupby("group")["split"].nunique() == 1).all()  # no capture in two splits
    assert meta.groupby(["group", "label_name"]).size().max() <= 30
    assert manifest["read"]["n_fragments_merged"] > 0  # fragments reassembled
    assert "packets:ip_fragment" not in manifest["skipped"]
    print(manifest["skipped"], manifest["read"])
    assert "port_a" not in manifest["views"]["stats"]["columns"]
