"""Label sources: folders, file CSV, per-flow 5-tuple CSV, ports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flowsplit.data.labels import Labeller, LabelSpec, flow_key, parse_key, read_port_map
from flowsplit.errors import ConfigError, InputError

FLOWS = dict(
    proto=np.array([6, 17, 6], np.uint8),
    ip_a=np.array(["192.168.2.126", "fe80::1", "10.0.0.1"], dtype=object),
    port_a=np.array([45380, 5353, 40000], np.uint16),
    ip_b=np.array(["161.117.13.29", "ff02::fb", "10.0.0.2"], dtype=object),
    port_b=np.array([80, 5353, 6379], np.uint16),
)


def _label(spec, capture=Path("/d/cls/x.pcap"), root=Path("/d")):
    return Labeller.from_spec(spec).label_flows(capture, root, **FLOWS).tolist()


def test_keys_match_in_either_direction_and_normalise_ipv6():
    k1 = parse_key("TCP|161.117.13.29|80|192.168.2.126|45380")
    k2 = flow_key(6, "192.168.2.126", 45380, "161.117.13.29", 80)
    assert k1 == k2
    assert parse_key("UDP|FE80:0:0::1|5353|ff02::fb|5353") == flow_key(
        17, "fe80::1", 5353, "ff02::fb", 5353
    )


def test_flow_csv_labels_by_file_and_key(tmp_path):
    csv = tmp_path / "labels.csv"
    csv.write_text(
        "file,key,master\n"
        "x.pcap,TCP|161.117.13.29|80|192.168.2.126|45380,HTTP\n"
        "x.pcap,UDP|fe80::1|5353|ff02::fb|5353,MDNS\n"
        "other.pcap,TCP|10.0.0.1|40000|10.0.0.2|6379,Redis\n"
    )
    spec = LabelSpec(by="flow-csv", labels=csv, label_column="master")
    # the third flow is labelled only in another capture, so it stays unlabelled here
    assert _label(spec) == ["HTTP", "MDNS", None]


def test_file_csv_and_folder_labels(tmp_path):
    csv = tmp_path / "files.csv"
    csv.write_text("file, label\nx.pcap, web\n")
    assert _label(LabelSpec(by="file-csv", labels=csv)) == ["web"] * 3
    assert _label(LabelSpec(by="folder")) == ["cls"] * 3
    assert _label(LabelSpec(by="folder"), capture=Path("/d/x.pcap")) == [None] * 3


def test_port_labels_with_and_without_a_map(tmp_path):
    pm = tmp_path / "ports.json"
    pm.write_text('{"http": 80, "redis": 6379}')
    assert _label(LabelSpec(by="port", port_map=pm)) == ["http", None, "redis"]
    assert _label(LabelSpec(by="port")) == ["port-80", "port-5353", "port-6379"]
    assert read_port_map(pm) == {80: "http", 6379: "redis"}


def test_bad_label_options_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="needs --labels"):
        LabelSpec(by="flow-csv")
    csv = tmp_path / "l.csv"
    csv.write_text("file,key,app\n")
    with pytest.raises(InputError, match="missing column\\(s\\) master"):
        Labeller.from_spec(LabelSpec(by="flow-csv", labels=csv, label_column="master"))
    bad = tmp_path / "p.json"
    bad.write_text('{"http": "eighty"}')
    with pytest.raises(InputError, match="not a port number"):
        read_port_map(bad)


def test_file_csv_prefers_the_relative_path_over_an_ambiguous_name(tmp_path):
    csv = tmp_path / "files.csv"
    csv.write_text("file,label\na/x.pcap,A\nb/x.pcap,B\nc/y.pcap,C\n")
    spec = LabelSpec(by="file-csv", labels=csv)
    assert _label(spec, capture=Path("/d/b/x.pcap")) == ["B"] * 3
    assert _label(spec, capture=Path("/d/a/x.pcap")) == ["A"] * 3
    # x.pcap elsewhere is ambiguous (A or B): unlabelled; y.pcap is unique: labelled.
    assert _label(spec, capture=Path("/d/z/x.pcap")) == [None] * 3
    assert _label(spec, capture=Path("/d/z/y.pcap")) == ["C"] * 3
