"""`prepare` protects data: no silent replacing, no silent class loss, options checked."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from flowsplit.cli import main
from flowsplit.data.labels import LabelSpec
from flowsplit.data.prepare import PrepareOptions, prepare_dataset
from flowsplit.data.sources import row_hashes
from flowsplit.data.splits import dedup_mask
from flowsplit.data.store import load_dataset
from flowsplit.errors import ConfigError, InputError
from tests.data import _pcapgen as g
from tests.data.test_prepare_cli import _idx_inputs

A, B = "10.0.0.1", "10.0.0.2"


def _captures(root, classes=("dns", "web"), files=3, flows=8, first=0):
    """One folder per class, a few captures each, distinct flows in each."""
    for c, cls in enumerate(classes, start=first):
        for f in range(files):
            pkts = [
                (1.0 + i, g.ether(g.ipv4(A, B, 17, g.udp(1000 + i, 53 + c, bytes([c, f, i])))))
                for i in range(flows)
            ]
            (root / cls).mkdir(parents=True, exist_ok=True)
            g.write_pcap(root / cls / f"{f}.pcap", pkts)
    return root


def test_existing_dataset_is_refused_without_overwrite(tmp_path, capsys):
    src = _idx_inputs(tmp_path)
    out = tmp_path / "ds"
    assert main(["prepare", str(src), "-o", str(out), "--quiet"]) == 0
    before = (out / "manifest.json").read_bytes()
    assert main(["prepare", str(src), "-o", str(out), "--quiet", "--seed", "3"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "manifest.json").read_bytes() == before
    assert main(["prepare", str(src), "-o", str(out), "--quiet", "--seed", "3", "--overwrite"]) == 0
    assert load_dataset(out).manifest["seed"] == 3


def test_dataset_read_by_another_process_is_not_replaced(tmp_path):
    src = _idx_inputs(tmp_path)
    out = tmp_path / "ds"
    prepare_dataset([src], out)
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from flowsplit.data.store import load_dataset
            ds = load_dataset({str(out)!r})
            print("open", flush=True)
            sys.stdin.read()  # hold the dataset until told to stop
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "open"
        with pytest.raises(InputError, match="in use by a running process"):
            prepare_dataset([src], out, PrepareOptions(seed=5), overwrite=True)
    finally:
        reader.communicate("")
    assert load_dataset(out).manifest["seed"] == 0  # untouched
    prepare_dataset([src], out, PrepareOptions(seed=5), overwrite=True)  # reader gone: fine
    assert load_dataset(out).manifest["seed"] == 5


def test_requested_class_without_flows_is_an_error_naming_it(tmp_path):
    root = _captures(tmp_path / "in")
    with pytest.raises(ConfigError, match="no flows labelled Foo"):
        prepare_dataset([root], tmp_path / "ds", PrepareOptions(classes=("dns", "Foo")))


def test_excluded_class_without_flows_is_said_and_the_rest_excluded(tmp_path, caplog):
    root = _captures(tmp_path / "in", classes=("dns", "web", "mail"))
    opts = PrepareOptions(exclude_classes=("mail", "Web"))  # "Web": a misspelt "web"
    m = prepare_dataset([root], tmp_path / "ds", opts)
    assert m["classes"] == ["dns", "web"]
    assert "--exclude-classes: no flows labelled Web (found: dns, mail, web)" in caplog.text


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"seq_len": -5}, "--seq-len"),
        ({"val_frac": 2.0}, "--val "),
        ({"split_by": "bogus"}, "split_by"),
        ({"top_classes": -3}, "--top-classes"),
        ({"top_classes": 0}, "--top-classes"),
        ({"min_flows_per_class": -1}, "--min-flows-per-class"),
        ({"max_flows_per_group": 0}, "--max-flows-per-group"),
        ({"val_frac": 0.6, "test_frac": 0.5}, "--val \\+ --test"),
        ({"views": ("seq", "nope")}, "unknown view"),
        ({"tunnels": "middle"}, "tunnels"),
        ({"fragment_timeout": 0}, "--fragment-timeout"),
    ],
)
def test_prepare_options_are_validated_on_construction(kw, match):
    with pytest.raises(ConfigError, match=match):
        PrepareOptions(**kw)


def test_negative_counts_on_the_command_line_are_one_line_errors(tmp_path, capsys):
    src = _idx_inputs(tmp_path)
    assert main(["prepare", str(src), "-o", str(tmp_path / "ds"), "--top-classes", "-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--top-classes" in err and len(err.splitlines()) == 1  # the option typed


def test_small_classes_are_warned_about_and_recorded(tmp_path, caplog):
    root = _captures(tmp_path / "in", classes=("dns", "web"), files=3, flows=8)
    _captures(root, classes=("rare",), files=3, flows=1, first=2)
    m = prepare_dataset([root], tmp_path / "ds", PrepareOptions(split_by="file"))
    assert set(m["small_classes"]) == {"rare"}  # one file per split: 8, 8, 8 and 1, 1, 1
    assert m["small_classes"]["rare"] == [1, 1, 1]  # train, val, test
    assert "fewer than 5 flows in a split" in caplog.text
    m = prepare_dataset([root], tmp_path / "ds2", PrepareOptions(small_split_flows=1))
    assert m["small_classes"] == {}


def test_files_follow_the_umask(tmp_path):
    src = _idx_inputs(tmp_path)
    old = os.umask(0o027)
    try:
        prepare_dataset([src], tmp_path / "ds")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "ds").iterdir()}
    assert modes["manifest.json"] == 0o640 and modes["bytes.npy"] == 0o640, modes
    assert stat.S_IMODE((tmp_path / "ds").stat().st_mode) == 0o750


def test_flow_label_csv_matches_the_relative_path_first(tmp_path):
    root = tmp_path / "in"
    for folder in ("a", "b"):  # two captures named x.pcap, same flow, different labels
        (root / folder).mkdir(parents=True)
        pkts = [(1.0, g.ether(g.ipv4(A, B, 17, g.udp(1000, 53, folder.encode()))))]
        g.write_pcap(root / folder / "x.pcap", pkts)
    key = f"UDP|{A}|1000|{B}|53"
    csv = tmp_path / "labels.csv"
    csv.write_text(f"file,key,label\na/x.pcap,{key},DNS\nb/x.pcap,{key},Other\n")
    opts = PrepareOptions(labels=LabelSpec(labels=csv), split_by="flow", dedup=False)
    prepare_dataset([root], tmp_path / "ds", opts)
    meta = load_dataset(tmp_path / "ds").meta
    assert dict(zip(meta["source"], meta["label_name"], strict=True)) == {
        "a/x.pcap": "DNS",
        "b/x.pcap": "Other",
    }


def test_no_flows_message_says_what_was_read(tmp_path):
    pkts = [(1.0, g.ether(g.ipv4(A, B, 1, b"\x08\0" + b"\0" * 30)))]  # ICMP only
    cap = g.write_pcap(tmp_path / "icmp.pcap", pkts)
    from flowsplit.errors import FlowsplitError

    with pytest.raises(
        FlowsplitError, match="1 packets read, none of them TCP/UDP: packets:non_tcp_udp 1"
    ) as got:
        prepare_dataset([cap], tmp_path / "ds", PrepareOptions(labels=LabelSpec(by="port")))
    assert str(got.value).startswith(f"{cap}: ")  # one input: the file is named
    empty = g.write_pcap(tmp_path / "empty.pcap", [])
    with pytest.raises(FlowsplitError, match=r"empty.pcap: .*\(no packets in the input\)"):
        prepare_dataset([empty], tmp_path / "ds2", PrepareOptions(labels=LabelSpec(by="port")))


def test_duplicates_dropped_while_reading_equal_dedup_of_the_whole_set(tmp_path):
    # The flows of copied captures are dropped as they are read (none is written);
    # the dataset is the one deduplicated at the end: first occurrences, in order.
    root = _captures(tmp_path / "in", files=2, flows=6)
    for cls in ("dns", "web"):
        (root / cls / "copy.pcap").write_bytes((root / cls / "0.pcap").read_bytes())
    opts = PrepareOptions(labels=LabelSpec(by="folder"), split_by="flow", seed=3)
    prepare_dataset([root], tmp_path / "ds", opts)
    prepare_dataset([root], tmp_path / "all", PrepareOptions(**{**vars(opts), "dedup": False}))
    ds, every = load_dataset(tmp_path / "ds"), load_dataset(tmp_path / "all")
    assert ds.manifest["skipped"]["duplicate_flow"] == 12 and ds.n_flows == every.n_flows - 12
    views = ("seq", "bytes", "pkt_bytes")
    order = every.meta.sort_values("flow_id").index.to_numpy()
    keep = dedup_mask(row_hashes([every.view(v)[order] for v in views]))
    for v in views:
        assert np.array_equal(ds.view(v), every.view(v)[order][keep])


@pytest.mark.parametrize("out", [".", ""])
def test_an_output_without_a_name_is_one_line(tmp_path, monkeypatch, capsys, out):
    # The current folder as -o (or, through the API, an empty path) failed inside
    # ("PosixPath('.') has an empty name"); the lock beside it needs a name.
    src = _idx_inputs(tmp_path)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(InputError, match="give the output a folder name of its own"):
        prepare_dataset([src], out)
    if out:  # the command line refuses "" itself, as an empty path
        capsys.readouterr()
        assert main(["prepare", str(src), "-o", out]) == 2
        assert "a folder name of its own" in capsys.readouterr().err
    assert list(here.iterdir()) == []
