"""`flowsplit prepare` and `flowsplit inspect`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowsplit.errors import ConfigError

VIEW_CHOICES = ("seq", "bytes", "pkt_bytes", "stats")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `prepare` and `inspect` to the CLI."""
    p = sub.add_parser(
        "prepare",
        help="turn captures, flow CSVs or IDX files into a labelled, split dataset",
        description=(
            "Read pcap/pcapng captures (or CICFlowMeter/NFStream flow CSVs, or IDX byte "
            "sessions), assemble bidirectional flows, compute the views models need, label, "
            "deduplicate and split them by capture file, and write a dataset directory."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="capture/CSV/IDX files or folders")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="dataset directory to write")
    _label_arguments(p)
    _flow_arguments(p)
    _split_arguments(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at -o")
    p.add_argument("--strict", action="store_true", help="turn counted skips into errors")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.set_defaults(func=run_prepare)

    p = sub.add_parser("inspect", help="print the summary of a prepared dataset")
    p.add_argument("dataset", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=run_inspect)


def _label_arguments(p: argparse.ArgumentParser) -> None:
    """Where labels come from."""
    g = p.add_argument_group("labels")
    g.add_argument(
        "--label-by",
        default="auto",
        choices=("auto", "folder", "file-csv", "flow-csv", "port", "ndpi"),
        help="auto: flow-csv/file-csv when --labels is given, else one folder per class; "
        "ndpi: nDPI's labels through NFStream (pip install 'flowsplit[dpi]')",
    )
    g.add_argument("--labels", type=Path, metavar="CSV", help="file->label or 5-tuple->label CSV")
    g.add_argument(
        "--label-column", default=None, help="label column (default: label; Label for flow CSVs)"
    )
    g.add_argument("--file-column", default="file", help="capture-file column of --labels")
    g.add_argument("--key-column", default="key", help="5-tuple key column of a flow-label CSV")
    g.add_argument(
        "--key-format", default="L4|ipA|portA|ipB|portB", help="layout of the key column"
    )
    g.add_argument(
        "--port-map", type=Path, metavar="JSON", help='--label-by port: {"name": port, ...}'
    )
    g.add_argument("--class-names", help="IDX: comma-separated names of labels 0..n-1")
    g.add_argument(
        "--ndpi-field",
        choices=("master", "app", "category"),
        default="master",
        help="--label-by ndpi: label with nDPI's master protocol, master.app, or category",
    )
    g.add_argument(
        "--ndpi-min-confidence",
        type=int,
        default=2,
        help="--label-by ndpi: lowest nDPI confidence kept (1: by port; 7, by IP, never kept)",
    )
    g.add_argument(
        "--ndpi-keep-guessed", action="store_true", help="--label-by ndpi: keep guessed labels"
    )


def _flow_arguments(p: argparse.ArgumentParser) -> None:
    """How packets become flows, and the views."""
    g = p.add_argument_group("flows and views")
    g.add_argument(
        "--views", default=",".join(VIEW_CHOICES), help="comma-separated views to compute"
    )
    g.add_argument("--idle-timeout", type=float, default=120.0, help="seconds")
    g.add_argument("--active-timeout", type=float, default=1800.0, help="seconds")
    g.add_argument("--seq-len", type=int, default=32, help="T: packets in the seq view")
    g.add_argument("--n-bytes", type=int, default=784, help="K: payload bytes in the bytes view")
    g.add_argument("--n-pkts", type=int, default=16, help="P: packets in the pkt_bytes view")
    g.add_argument("--pkt-len", type=int, default=64, help="B: bytes per packet in pkt_bytes")
    g.add_argument("--no-mask-ip", action="store_true", help="keep IP addresses in pkt_bytes")
    g.add_argument("--no-mask-ports", action="store_true", help="keep ports (pkt_bytes and stats)")
    g.add_argument("--no-mask-checksums", action="store_true", help="keep checksums in pkt_bytes")
    g.add_argument(
        "--no-vlan-key", action="store_true", help="one flow for a 5-tuple in several VLANs"
    )
    g.add_argument(
        "--tunnels",
        choices=("inner", "outer"),
        default="inner",
        help="classify the flows inside IP-in-IP/GRE/VXLAN/Geneve/GTP-U, or the tunnel's own",
    )
    g.add_argument("--no-reassembly", action="store_true", help="count IP fragments, unjoined")
    g.add_argument("--fragment-timeout", type=float, default=30.0, help="seconds")


def _split_arguments(p: argparse.ArgumentParser) -> None:
    """Splits, class selection and balance."""
    g = p.add_argument_group("splits and balance")
    g.add_argument("--split-by", default="auto", choices=("auto", "file", "flow", "time"))
    g.add_argument("--val", type=float, default=0.15, help="fraction for validation")
    g.add_argument("--test", type=float, default=0.15, help="fraction for test")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-dedup", action="store_true", help="keep identical flows")
    g.add_argument("--classes", help="comma-separated classes to keep")
    g.add_argument("--exclude-classes", default="", help="comma-separated classes to drop")
    g.add_argument("--top-classes", type=int, help="keep the N largest classes")
    g.add_argument("--min-flows-per-class", type=int, default=0)
    g.add_argument("--min-groups-per-class", type=int, default=0, help="capture files per class")
    g.add_argument("--max-flows-per-group", type=int, help="cap flows per (capture file, class)")
    g.add_argument(
        "--small-split-flows",
        type=int,
        default=5,
        help="warn about classes with fewer flows than this in a split (recorded in the manifest)",
    )


def _csv_list(text: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def options_from_args(args: argparse.Namespace):
    """Build validated PrepareOptions from parsed CLI arguments."""
    from flowsplit.data.labels import LabelSpec
    from flowsplit.data.prepare import PrepareOptions

    views = _csv_list(args.views)
    unknown = [v for v in views if v not in VIEW_CHOICES]
    if unknown or not views:
        raise ConfigError(f"--views {args.views!r}: choose from {', '.join(VIEW_CHOICES)}")
    # Everything else is checked by PrepareOptions itself.
    spec = LabelSpec(
        by=args.label_by,
        labels=args.labels,
        file_column=args.file_column,
        label_column=args.label_column or "label",
        key_column=args.key_column,
        key_format=args.key_format,
        port_map=args.port_map,
        ndpi_field=args.ndpi_field,
        ndpi_min_confidence=args.ndpi_min_confidence,
        ndpi_keep_guessed=args.ndpi_keep_guessed,
    )
    return PrepareOptions(
        labels=spec,
        views=views,
        idle_timeout=args.idle_timeout,
        active_timeout=args.active_timeout,
        seq_len=args.seq_len,
        n_bytes=args.n_bytes,
        n_pkts=args.n_pkts,
        pkt_len=args.pkt_len,
        mask_ip=not args.no_mask_ip,
        mask_port=not args.no_mask_ports,
        mask_checksum=not args.no_mask_checksums,
        vlan_key=not args.no_vlan_key,
        tunnels=args.tunnels,
        reassemble=not args.no_reassembly,
        fragment_timeout=args.fragment_timeout,
        small_split_flows=args.small_split_flows,
        split_by=args.split_by,
        val_frac=args.val,
        test_frac=args.test,
        seed=args.seed,
        dedup=not args.no_dedup,
        min_flows_per_class=args.min_flows_per_class,
        min_groups_per_class=args.min_groups_per_class,
        max_flows_per_group=args.max_flows_per_group,
        classes=_csv_list(args.classes) or None,
        exclude_classes=_csv_list(args.exclude_classes),
        top_classes=args.top_classes,
        class_names=_csv_list(args.class_names) or None,
        label_column=args.label_column or "Label",
        strict=args.strict,
    )


def run_prepare(args: argparse.Namespace) -> int:
    from flowsplit.data.prepare import prepare_dataset

    opts = options_from_args(args)
    progress = not args.quiet and sys.stderr.isatty()
    manifest = prepare_dataset(
        args.inputs, args.out, opts, progress=progress, overwrite=args.overwrite
    )
    if not args.quiet:
        print(format_summary(manifest, args.out))
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    import json

    from flowsplit.data.store import load_dataset

    ds = load_dataset(args.dataset)
    if args.json:
        print(json.dumps(ds.manifest, indent=2))
    else:
        print(format_summary(ds.manifest, args.dataset, meta=ds.meta))
    return 0


def format_summary(manifest: dict, where, meta=None) -> str:
    """A human summary of a dataset manifest: classes, splits, views, skips."""
    lines = [f"dataset {where}: {manifest['n_flows']} flows, {len(manifest['classes'])} classes"]
    opts = manifest.get("options", {})
    masks = opts.get("masks")
    if masks:
        lines.append("masks: " + ", ".join(f"{k}={'on' if v else 'off'}" for k, v in masks.items()))
    lines.append(
        f"split by {manifest.get('split_by', '?')} (seed {manifest.get('seed', '?')}): "
        + ", ".join(f"{k} {v}" for k, v in manifest["splits"].items())
    )
    lines.append("views:")
    for name, info in manifest["views"].items():
        lines.append(f"  {name:<10} {tuple(info['shape'])} {info.get('dtype', '')}")
    per_split = None
    if meta is not None and len(meta):
        per_split = meta.groupby(["label_name", "split"]).size().unstack(fill_value=0)
    width = max((len(c) for c in manifest["classes"]), default=5)
    header = f"  {'class':<{width}} {'flows':>7}"
    if per_split is not None:
        header += "".join(f" {s:>6}" for s in ("train", "val", "test"))
    lines += ["classes:", header]
    for c in manifest["classes"]:
        row = f"  {c:<{width}} {manifest['class_counts'][c]:>7}"
        if per_split is not None:
            row += "".join(
                f" {int(per_split.loc[c].get(s, 0)) if c in per_split.index else 0:>6}"
                for s in ("train", "val", "test")
            )
        lines.append(row)
    small = manifest.get("small_classes") or {}
    if small:
        threshold = manifest.get("options", {}).get("small_split_flows", "?")
        lines.append(
            f"small classes (< {threshold} flows in a split, train/val/test): "
            + "; ".join(f"{c} " + "/".join(map(str, n)) for c, n in list(small.items())[:10])
            + (f" and {len(small) - 10} more" if len(small) > 10 else "")
        )
    read = manifest.get("read") or {}
    if read:
        lines.append("read: " + ", ".join(f"{k[2:]} {v}" for k, v in read.items()))
    skipped = manifest.get("skipped") or {}
    if skipped:
        lines.append("skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    return "\n".join(lines)
