"""CICFlowMeter / NFStream flow CSVs into the stats view."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.data.flowcsv import read_flow_csv
from flowsplit.errors import InputError

CIC = (
    "Flow ID, Src IP, Src Port, Dst IP, Dst Port, Timestamp, Flow Duration, Flow Bytes/s, Label\n"
    "a,10.0.0.1,1234,10.0.0.2,80,1/1/2020 10:00,100,Infinity,BENIGN\n"
    "b,10.0.0.1,1235,10.0.0.2,80,1/1/2020 10:01,200,NaN,DoS\n"
    "Flow ID, Src IP, Src Port, Dst IP, Dst Port, Timestamp, Flow Duration, Flow Bytes/s, Label\n"
    "c,10.0.0.3,1236,10.0.0.2,443,1/1/2020 10:02,300,5.5,BENIGN\n"
)


def test_cic_quirks_are_handled_and_counted(tmp_path):
    p = tmp_path / "cic.csv"
    p.write_text(CIC)
    fc = read_flow_csv(p, label_column="Label")
    assert fc.labels.tolist() == ["BENIGN", "DoS", "BENIGN"]
    # identifiers and (masked) ports are not features
    assert list(fc.stats.columns) == ["Flow Duration", "Flow Bytes/s"]
    np.testing.assert_array_equal(fc.stats.to_numpy(), [[100, 0], [200, 0], [300, 5.5]])
    assert fc.skipped == {"repeated_header": 1, "non_finite_values": 2}
    assert fc.times is not None and fc.times[2] - fc.times[0] == pytest.approx(120.0)


def test_ports_become_features_when_unmasked(tmp_path):
    p = tmp_path / "cic.csv"
    p.write_text(CIC)
    fc = read_flow_csv(p, label_column="Label", mask_port=False)
    assert "Dst Port" in fc.stats.columns and "Src Port" in fc.stats.columns


def test_strict_turns_quirks_into_errors(tmp_path):
    p = tmp_path / "cic.csv"
    p.write_text(CIC)
    with pytest.raises(InputError, match="repeated header"):
        read_flow_csv(p, label_column="Label", strict=True)


def test_missing_label_column_and_empty_file(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="no label column 'Label' \\(columns: a, b\\)"):
        read_flow_csv(p, label_column="Label")
    e = tmp_path / "e.csv"
    e.write_text("")
    with pytest.raises(InputError, match="empty CSV"):
        read_flow_csv(e, label_column="Label")


def test_one_numeric_column_with_an_infinity(tmp_path):
    # pandas 3 returns a lone float64 column as a read-only view: zeroing its Infinity
    # in place was a ValueError (a traceback) instead of a counted quirk.
    p = tmp_path / "one.csv"
    p.write_text("Label,Flow Bytes/s\nweb,Infinity\ndns,2\n")
    fc = read_flow_csv(p, label_column="Label")
    np.testing.assert_array_equal(fc.stats.to_numpy(), [[0], [2]])
    assert fc.skipped == {"non_finite_values": 1}
