"""`flowsplit prepare` and `flowsplit inspect`."""

from __future__ import annotations

import argparse
import sys

from flowsplit.config_args import (
    add_config_arguments,
    add_dataset_argument,
    add_out_option,
    cli,
    cli_fields,
    command_parser,
    config_values,
    csv_tuple,
    path_arg,
    path_text,
)
from flowsplit.data.dpi import NDPI_FIELDS
from flowsplit.data.labels import LABEL_SOURCES, LabelSpec
from flowsplit.data.prepare import DIGEST_CHOICES, SPLIT_BY, PrepareOptions
from flowsplit.errors import ConfigError
from flowsplit.reader.flows import ALL_VIEWS
from flowsplit.reader.packets import TUNNEL_MODES
from flowsplit.reader.views import PKT_LAYOUTS

VIEW_CHOICES = ALL_VIEWS

# The option names `prepare` had before its options came from the dataclasses.
LABEL_OPTIONS = {
    "by": cli(
        flag="--label-by",
        choices=LABEL_SOURCES,
        help="auto: flow-csv/file-csv when --labels is given, else one folder per class; "
        "ndpi: nDPI's labels through NFStream (pip install 'flowsplit[dpi]')",
    ),
    "labels": cli(parse=path_arg, metavar="CSV", help="file->label or 5-tuple->label CSV"),
    "port_map": cli(parse=path_arg, metavar="JSON"),
    "ndpi_field": cli(choices=NDPI_FIELDS),
}
"""``flowsplit prepare``'s view of :class:`~flowsplit.data.labels.LabelSpec`."""


def _views(text: str) -> tuple[str, ...]:
    views = csv_tuple(text)
    if not views or any(v not in VIEW_CHOICES for v in views):
        raise ConfigError(f"--views {text!r}: choose from {', '.join(VIEW_CHOICES)}")
    return views


def _show_csv(value: tuple[str, ...] | None) -> str:
    return ",".join(value) if value else "none"


PREPARE_OPTIONS = {
    "views": cli(parse=_views, show=_show_csv),
    "mask_port": cli(flag="--mask-ports"),
    "mask_checksum": cli(flag="--mask-checksums"),
    "tunnels": cli(choices=TUNNEL_MODES),
    "pkt_layout": cli(choices=PKT_LAYOUTS),
    "reassemble": cli(flag="--reassembly"),
    "split_by": cli(choices=SPLIT_BY),
    "digest": cli(choices=DIGEST_CHOICES),
    "val_frac": cli(flag="--val"),
    "test_frac": cli(flag="--test"),
    "classes": cli(parse=lambda t: csv_tuple(t) or None, show=_show_csv),
    "exclude_classes": cli(parse=csv_tuple, show=_show_csv),
    "class_names": cli(parse=lambda t: csv_tuple(t) or None, show=_show_csv),
}
"""``flowsplit prepare``'s view of :class:`~flowsplit.data.prepare.PrepareOptions`."""
FLOW_FIELDS = (
    "views",
    "idle_timeout",
    "active_timeout",
    "seq_len",
    "n_bytes",
    "n_pkts",
    "pkt_len",
    "pkt_layout",
    "mask_ip",
    "mask_port",
    "mask_checksum",
    "vlan_key",
    "tunnels",
    "reassemble",
    "fragment_timeout",
)
"""The PrepareOptions fields in the "flows and views" group; the rest are "splits and
balance" (and --strict), but for ``labels`` and ``label_column``."""
# --label-column names the label column of both a label CSV (LabelSpec, default
# "label") and a flow CSV (PrepareOptions, default "Label"): one option, two defaults.
SHARED_FIELDS = ("labels", "label_column")
LABEL_COLUMN = {
    "label_column": cli(help="label column", show=lambda _: "label; Label for flow CSVs")
}
"""``--label-column``: LabelSpec's field, whose value PrepareOptions takes too."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `prepare` and `inspect` to the CLI."""
    _add_prepare(sub)
    p = sub.add_parser("inspect", help="print the summary of a prepared dataset")
    add_dataset_argument(p)
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=run_inspect)


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    """turn captures, flow CSVs or IDX files into a labelled, split dataset

    Read pcap/pcapng captures (or CICFlowMeter/NFStream flow CSVs, or IDX byte sessions),
    assemble bidirectional flows, compute the views models need, label, deduplicate and
    split them by capture file, and write a dataset directory.
    """
    p = command_parser(sub, "prepare", _add_prepare)
    p.add_argument(
        "inputs", nargs="+", type=path_text, metavar="INPUT", help="capture/CSV/IDX files, folders"
    )
    add_out_option(p, "dataset directory to write", metavar="DIR")
    # One option per field of LabelSpec and PrepareOptions (their docstrings are the help).
    g = p.add_argument_group("labels")
    add_config_arguments(g, LabelSpec, exclude=("label_column",), overrides=LABEL_OPTIONS)
    # Not given: each config's own default (options_from_args).
    add_config_arguments(g, LabelSpec, only=("label_column",), overrides=LABEL_COLUMN, unset=True)
    g = p.add_argument_group("flows and views")
    add_config_arguments(g, PrepareOptions, only=FLOW_FIELDS, overrides=PREPARE_OPTIONS)
    g = p.add_argument_group("splits and balance")
    add_config_arguments(
        g,
        PrepareOptions,
        exclude=(*FLOW_FIELDS, *SHARED_FIELDS),
        overrides=PREPARE_OPTIONS,
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at -o")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.set_defaults(func=run_prepare)


def options_from_args(args: argparse.Namespace) -> PrepareOptions:
    """Build validated PrepareOptions from parsed CLI arguments."""
    spec = LabelSpec(
        **config_values(args, [f.name for f in cli_fields(LabelSpec, exclude=["label_column"])]),
        label_column=args.label_column or LabelSpec.label_column,  # (its default)
    )
    names = [f.name for f in cli_fields(PrepareOptions, exclude=SHARED_FIELDS)]
    return PrepareOptions(
        **config_values(args, names),
        labels=spec,
        label_column=args.label_column or PrepareOptions.label_column,  # (its default)
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
    recovered = manifest.get("recovered") or {}
    if recovered:
        lines.append("recovered: " + ", ".join(f"{k} {v}" for k, v in recovered.items()))
    skipped = manifest.get("skipped") or {}
    if skipped:
        lines.append("skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    return "\n".join(lines)
