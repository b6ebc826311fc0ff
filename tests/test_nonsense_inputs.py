"""Inputs that used to be resolved without a word (issue 31 item 5).

Conflicting labels in a labels CSV or a port map are an error naming the first
conflicting rows (never "last wins"); flow-CSV values beyond float32's range are
clipped and counted (never stored as an infinity that XGBoost then fails on).
"""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.data.flowcsv import read_flow_csv
from flowsplit.data.labels import LabelSpec, _read_file_map, _read_flow_map, read_port_map
from flowsplit.errors import InputError


def test_a_file_labelled_twice_differently_names_both_lines(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("file,label\na.pcap,web\nb.pcap,dns\nb.pcap,dns\na.pcap,ssh\n")
    spec = LabelSpec(by="file-csv", labels=path)
    with pytest.raises(InputError) as caught:
        _read_file_map(spec)
    assert str(caught.value) == (
        f"{path}: file 'a.pcap' is labelled 'web' on line 2 and 'ssh' on line 5; "
        "give each one label (the first conflicting rows)"
    )


def test_equal_repeated_labels_are_no_conflict(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("file,label\na.pcap,web\na.pcap,web\n")
    assert _read_file_map(LabelSpec(by="file-csv", labels=path))["a.pcap"] == "web"


def test_a_flow_labelled_twice_differently_is_refused(tmp_path):
    path = tmp_path / "flows.csv"
    key = "6|10.0.0.1|1234|10.0.0.2|80"
    path.write_text(f"key,label\n{key},web\n{key},web\n6|10.0.0.1|9|10.0.0.2|80,x\n{key},dns\n")
    with pytest.raises(InputError, match="on line 2 and 'dns' on line 5"):
        _read_flow_map(LabelSpec(by="flow-csv", labels=path))


@pytest.mark.parametrize(
    "text",
    ['{"http": 80, "web": 80}', '{"80": "http", "80": "web"}', '{"http": 80, "80": "web"}'],
)
def test_a_port_of_two_classes_is_refused(tmp_path, text):
    path = tmp_path / "ports.json"
    path.write_text(text)
    with pytest.raises(InputError, match="port 80 is 'http' in entry .* and 'web' in entry"):
        read_port_map(path)


def test_a_port_map_stays_readable(tmp_path):
    path = tmp_path / "ports.json"
    path.write_text('{"http": 80, "dns": "53", "8080": "http", "https": 443}')
    assert read_port_map(path) == {80: "http", 53: "dns", 8080: "http", 443: "https"}


def test_flow_csv_values_beyond_float32_are_clipped_and_counted(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text(
        "Flow Duration,Flow Bytes/s,Label\n100,1e308,a\n200,-1e39,b\n300,Infinity,a\n400,2.5,b\n"
    )
    fc = read_flow_csv(path, label_column="Label")
    values = fc.stats.to_numpy()
    big = np.finfo(np.float32).max
    assert np.isfinite(values).all()
    assert values[:, 1].tolist() == [big, -big, 0.0, 2.5]
    assert fc.skipped == {"non_finite_values": 1, "out_of_float32_range_values": 2}
    with pytest.raises(InputError, match="beyond float32's range"):
        path.write_text("Flow Duration,Label\n1e308,a\n2,b\n")
        read_flow_csv(path, label_column="Label", strict=True)
