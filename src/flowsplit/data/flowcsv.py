"""Flow-record CSVs (CICFlowMeter and NFStream exports) into the ``stats`` view.

Real exports are untidy: column names with stray spaces (`` Destination Port``),
``Infinity`` and ``NaN`` in rate columns, header rows repeated in the middle of
the file when several exports were concatenated. All are handled here: names are
stripped, repeated headers dropped (and counted), non-finite values set to 0
(and counted). Identifier columns (addresses, ports, timestamps, flow ids) never
become features; ports only when the port mask is off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from flowsplit.errors import InputError

# Columns that identify hosts or flows rather than describe traffic (lower-cased,
# spaces and underscores removed before comparison).
_ID_COLUMNS = {
    "flowid", "id", "srcip", "dstip", "sourceip", "destinationip", "srcmac", "dstmac",
    "timestamp", "bidirectionalfirstseenms", "bidirectionallastseenms", "srctodstfirstseenms",
    "srctodstlastseenms", "dsttosrcfirstseenms", "dsttosrclastseenms", "expirationid",
    "srcoui", "dstoui", "vlanid", "tunnelid", "ipversion", "applicationname",
    "applicationcategoryname", "applicationisguessed", "applicationconfidence",
    "requestedservername", "clientfingerprint", "serverfingerprint", "useragent", "content_type",
    "contenttype", "label",
}  # fmt: skip
_PORT_COLUMNS = {"srcport", "dstport", "sourceport", "destinationport"}
_TIME_COLUMNS = ("Timestamp", "bidirectional_first_seen_ms", "src2dst_first_seen_ms")


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "", name).lower()


@dataclass
class FlowCsv:
    """Flow records of one CSV file."""

    path: Path
    stats: pd.DataFrame  # float32 feature columns
    labels: np.ndarray  # object array of str
    times: np.ndarray | None  # float64 start times (s) when a timestamp column exists
    skipped: dict[str, int]


def read_flow_csv(
    path: str | Path, *, label_column: str, mask_port: bool = True, strict: bool = False
) -> FlowCsv:
    """Read one CICFlowMeter- or NFStream-style CSV export."""
    path = Path(path)
    try:
        df = pd.read_csv(
            path, dtype=str, skipinitialspace=True, keep_default_na=False, low_memory=False
        )
    except pd.errors.EmptyDataError:
        raise InputError(path, "empty CSV file") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV ({str(exc).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    want = _label_column(df, label_column, path)
    skipped: dict[str, int] = {}
    # Concatenated exports repeat the header row: drop rows equal to the header.
    header_rows = df[want].str.strip() == want
    if header_rows.any():
        skipped["repeated_header"] = int(header_rows.sum())
        if strict:
            raise InputError(path, f"{skipped['repeated_header']} repeated header row(s)")
        df = df.loc[~header_rows]
    if len(df) == 0:
        raise InputError(path, "a header but no flow rows")
    labels = df[want].str.strip().to_numpy(dtype=object)
    empty = labels == ""
    if empty.any():
        skipped["unlabelled"] = int(empty.sum())
    times = _start_times(df)
    numeric = _numeric_columns(df, want, mask_port, path)
    # A copy: pandas 3 hands a single float column back as a read-only view.
    values = _float32_values(numeric.to_numpy(np.float64, copy=True), skipped, strict, path)
    stats = pd.DataFrame(values, columns=list(numeric.columns))
    keep = ~empty
    return FlowCsv(
        path=path,
        stats=stats.loc[keep].reset_index(drop=True),
        labels=labels[keep],
        times=None if times is None else times[keep],
        skipped=skipped,
    )


def _label_column(df: pd.DataFrame, label_column: str, path: Path) -> str:
    """The column named ``label_column``, or the one whose name matches it but for case,
    spaces and underscores (:func:`_norm`)."""
    want = label_column.strip()
    if want in df.columns:
        return want
    match = [c for c in df.columns if _norm(c) == _norm(want)]
    if not match:
        have = ", ".join(df.columns[:10]) + (", ..." if len(df.columns) > 10 else "")
        raise InputError(path, f"no label column {want!r} (columns: {have})")
    return match[0]


def _numeric_columns(df: pd.DataFrame, label: str, mask_port: bool, path: Path) -> pd.DataFrame:
    """The flow-statistics columns as numbers (NaN where a cell is not one): not the
    label, the flow's identity or (``mask_port``) its ports, nor a column of text."""
    feature_cols = []
    for c in df.columns:
        key = _norm(c)
        if c == label or key in _ID_COLUMNS:
            continue
        if key in _PORT_COLUMNS and mask_port:
            continue
        feature_cols.append(c)
    numeric = df[feature_cols].apply(_to_float)
    # Keep columns that are numbers at all (text columns become all-NaN).
    numeric = numeric.loc[:, numeric.notna().any(axis=0) | (df[feature_cols] == "").all(axis=0)]
    if numeric.shape[1] == 0:
        raise InputError(path, "no numeric flow-statistics columns")
    return numeric


def _float32_values(
    values: np.ndarray, skipped: dict[str, int], strict: bool, path: Path
) -> np.ndarray:
    """``values`` as float32 by the documented rule (docs/robustness.md): NaN and
    +-Infinity become 0; a finite value beyond float32's range (|x| > 3.4e38) becomes the
    largest float32 of its sign instead of an infinity; both counted in ``skipped``, both
    refused by ``strict``."""
    bad = ~np.isfinite(values)
    if bad.any():
        skipped["non_finite_values"] = int(bad.sum())
        if strict:
            raise InputError(path, f"{skipped['non_finite_values']} Infinity/NaN value(s)")
        values[bad] = 0.0
    big = np.finfo(np.float32).max
    over = np.abs(values) > big
    if over.any():
        skipped["out_of_float32_range_values"] = int(over.sum())
        if strict:
            raise InputError(
                path, f"{int(over.sum())} value(s) beyond float32's range (|x| > {big:.3g})"
            )
        values = np.clip(values, -big, big)
    return values.astype(np.float32)


def _to_float(col: pd.Series) -> pd.Series:
    text = col.str.strip()
    text = text.replace({"Infinity": "inf", "-Infinity": "-inf", "NaN": "nan", "": "nan"})
    return pd.to_numeric(text, errors="coerce")


def _start_times(df: pd.DataFrame) -> np.ndarray | None:
    for c in _TIME_COLUMNS:
        if c in df.columns:
            col = df[c].str.strip()
            as_num = pd.to_numeric(col, errors="coerce")
            if as_num.notna().mean() > 0.9:
                scale = 1e-3 if c.endswith("_ms") else 1.0
                return as_num.fillna(0).to_numpy(dtype=np.float64) * scale
            parsed = pd.to_datetime(col, errors="coerce", dayfirst=True, format="mixed")
            if parsed.notna().mean() > 0.9:
                # total_seconds is unit-safe (pandas may store us or ns)
                secs = (parsed - pd.Timestamp("1970-01-01")).dt.total_seconds()
                return secs.fillna(0.0).to_numpy(dtype=np.float64)
    return None
