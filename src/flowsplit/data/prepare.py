"""`flowsplit prepare`: inputs -> labelled, deduplicated, split dataset directory.

One way through: discover the input files -> read each one (captures into flows
and views, flow CSVs into ``stats``, IDX files into ``bytes``) -> label -> stream
rows into a :class:`~flowsplit.data.store.DatasetWriter` -> deduplicate, select
classes, cap per group -> split -> write the manifest and rename into place.
Memory stays bounded by the reader's chunk and the flush size, not by the input.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flowsplit.config_args import check_numbers, field_type_problem, fields_of, option_name
from flowsplit.data import sources as src_mod
from flowsplit.data.dpi import ndpi_labels
from flowsplit.data.labels import Labeller, LabelSpec, folder_label
from flowsplit.data.splits import assign_splits, cap_per_group, dedup_mask, select_classes
from flowsplit.data.store import DatasetWriter, OutputLock, check_target, file_digest, read_manifest
from flowsplit.errors import ConfigError, FlowsplitError, InputError
from flowsplit.outputs import named_os_error
from flowsplit.reader import flows as flows_mod
from flowsplit.reader.capfile import DIGESTS
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows_many, view_shapes
from flowsplit.util import available_memory

log = logging.getLogger("flowsplit.prepare")

FLUSH_FLOWS = 4096  # flows buffered before they are appended to the store


@dataclass(frozen=True)
class PrepareOptions(FlowOptions):
    """Everything `flowsplit prepare` can be told; recorded in the manifest: how packets
    become flows and views (:class:`~flowsplit.reader.flows.FlowOptions`, whose fields
    these are, declared once there), where labels come from, and how the flows are
    split and balanced.

    Validated on construction (ConfigError), so the library API refuses what the
    command line refuses.
    """

    labels: LabelSpec = field(default_factory=LabelSpec)
    """Where labels come from."""
    split_by: str = "auto"
    """file, flow, time, or auto (file with >= 3 files, else time; flow for IDX)."""
    val_frac: float = 0.15
    """Fraction of flows (or files, by file) for validation."""
    test_frac: float = 0.15
    """Fraction for test."""
    seed: int = 0
    """Seed of the split and of the per-group cap."""
    dedup: bool = True
    """Drop flows identical to an earlier one (all views equal) before splitting."""
    min_flows_per_class: int = 0
    """Drop classes with fewer flows (after the per-group cap)."""
    min_groups_per_class: int = 0
    """Drop classes seen in fewer capture files."""
    max_flows_per_group: int | None = None
    """Cap on flows per (capture file, class), chosen at random for the seed."""
    classes: tuple[str, ...] | None = None
    """Keep only these classes; each must have flows."""
    exclude_classes: tuple[str, ...] = ()
    """Drop these classes."""
    top_classes: int | None = None
    """Keep the N largest classes."""
    small_split_flows: int = 5
    """Warn about (and record in the manifest) classes with fewer flows in some split."""
    class_names: tuple[str, ...] | None = None
    """IDX: names for label indices 0..n-1 (known DeepTraffic sets are recognised)."""
    label_column: str = "Label"
    """Flow CSVs: the label column."""
    strict: bool = False
    """Turn counted skips (bad files, bad records) into errors."""
    digest: str = "blake3"
    """Digest of each input file in the manifest's sources: blake3 (check with b3sum),
    sha256 (sha256sum; about 3x the hashing time) or none. Computed while reading."""

    def __post_init__(self) -> None:
        # From Python, a value of another type (top_classes="3", mask_ip="yes") failed
        # deep inside, or was taken as true; a seed as numpy refuses it.
        problem = field_type_problem(
            PrepareOptions, {f.name: getattr(self, f.name) for f in fields(self)}
        )
        if problem:
            raise ConfigError(f"prepare option {problem}")
        check_numbers(self)
        if isinstance(self.views, str) or not self.views:
            raise ConfigError("views must be a non-empty tuple of names, e.g. ('seq', 'stats')")
        super().__post_init__()  # lengths, timeouts, views and the tunnel mode
        if self.split_by not in SPLIT_BY:
            raise ConfigError(
                f"split_by must be one of {', '.join(SPLIT_BY)}, got {self.split_by!r}"
            )
        # Messages name the option of `flowsplit prepare` (--val for val_frac).
        for name, opt in (("val_frac", "--val"), ("test_frac", "--test")):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"{opt} must be in [0, 1), got {getattr(self, name)}")
        if self.val_frac + self.test_frac >= 1:
            raise ConfigError(
                f"--val + --test must be < 1 (got {self.val_frac} + {self.test_frac})"
            )
        for name in ("min_flows_per_class", "min_groups_per_class", "small_split_flows"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"{option_name(PrepareOptions, name)} must be >= 0, got {getattr(self, name)}"
                )
        for name in ("max_flows_per_group", "top_classes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(
                    f"{option_name(PrepareOptions, name)} must be >= 1 (or unset), got {value}"
                )
        if self.digest not in DIGEST_CHOICES:
            raise ConfigError(
                f"--digest must be one of {', '.join(DIGEST_CHOICES)}, got {self.digest!r}"
            )
        if self.classes is not None and not self.classes:
            raise ConfigError("classes: give at least one class (or leave it unset)")

    def flow_options(self):
        """The :class:`~flowsplit.reader.flows.FlowOptions` these options imply."""
        same = {f.name: getattr(self, f.name) for f in fields(FlowOptions)}
        return FlowOptions(**{**same, "views": tuple(self.views)})

    def to_manifest(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = {
            k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.labels).items()
        }
        d["masks"] = {"ip": self.mask_ip, "port": self.mask_port, "checksum": self.mask_checksum}
        return d


SPLIT_BY = ("auto", "file", "flow", "time")
DIGEST_CHOICES = (*DIGESTS, "none")


@dataclass
class _Rows:
    """Flows buffered before they are appended to the store."""

    meta: list[dict[str, np.ndarray]] = field(default_factory=list)
    views: dict[str, list[np.ndarray]] = field(default_factory=dict)
    stats: list[pd.DataFrame] = field(default_factory=list)
    n: int = 0

    def add(self, meta: dict[str, np.ndarray], views: dict[str, np.ndarray], stats) -> None:
        self.meta.append(meta)
        for k, v in views.items():
            self.views.setdefault(k, []).append(v)
        if stats is not None:
            self.stats.append(stats)
        self.n += len(next(iter(meta.values())))

    def flush(self, writer: DatasetWriter) -> None:
        if not self.n:
            return
        meta = pd.DataFrame({k: np.concatenate([m[k] for m in self.meta]) for k in self.meta[0]})
        views = {k: np.concatenate(v) for k, v in self.views.items()}
        stats = pd.concat(self.stats, ignore_index=True) if self.stats else None
        writer.append(meta, views, stats)
        self.meta, self.views, self.stats, self.n = [], {}, [], 0


def prepare_dataset(
    inputs: list[str | Path],
    out_dir: str | Path,
    options: PrepareOptions | None = None,
    *,
    progress: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build a dataset directory from captures, flow CSVs or IDX files; returns the manifest.

    An existing dataset at ``out_dir`` is refused unless ``overwrite``, and never
    replaced while a process is reading it.
    """
    # One writer per output: a second prepare -o SAME is refused while this one holds
    # it (and temporary folders of crashed runs are removed); the checks run under it.
    with OutputLock(out_dir):
        try:
            return _prepare_dataset(inputs, out_dir, options, progress, overwrite)
        except OSError as exc:
            # A full or read-only disk while writing: name the dataset asked for, not
            # the temporary folder (nor nothing, as a failed write says).
            if exc.filename is None or f".{Path(out_dir).name}.tmp-" in str(exc.filename):
                raise named_os_error(exc, out_dir) from exc
            raise


def check_batch_memory(opts: PrepareOptions) -> None:
    """Refuse view sizes whose rows cannot be held: ``prepare`` buffers up to
    ``FLUSH_FLOWS`` flows of every tensor view before writing them; more than the
    available memory is refused with the computed size (``--n-bytes 1000000000`` asked
    for terabytes and then failed inside NumPy)."""
    shapes = view_shapes(opts.flow_options())
    itemsize = {"seq": 4, "bytes": 1, "pkt_bytes": 1}
    row = sum(int(np.prod(shape, dtype=np.float64)) * itemsize[v] for v, shape in shapes.items())
    need, have = row * FLUSH_FLOWS, available_memory()
    if need > have:
        sizes = ", ".join(f"{v} {'x'.join(map(str, shape))}" for v, shape in shapes.items())
        raise ConfigError(
            f"views of {sizes} per flow need {_gib(row)} a flow and {_gib(need)} for the "
            f"{FLUSH_FLOWS} flows prepare holds at once; {_gib(have)} of memory is "
            "available: give smaller --n-bytes, --seq-len or --n-pkts/--pkt-len"
        )


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def _prepare_dataset(inputs, out_dir, options, progress, overwrite) -> dict[str, Any]:
    opts = options or PrepareOptions()
    t0 = time.perf_counter()
    check_batch_memory(opts)
    check_target(out_dir, overwrite=overwrite)  # refuse now, before any input is read
    new_writer = functools.partial(DatasetWriter, Path(out_dir), overwrite=overwrite)
    files = src_mod.discover(inputs)
    kinds = {f.kind for f in files}
    if len(kinds) > 1:
        raise ConfigError(
            "inputs mix " + " and ".join(sorted(kinds)) + " files; prepare one kind per dataset"
        )
    kind = kinds.pop()
    if opts.labels.by == "ndpi" and kind != "capture":
        raise ConfigError(f"--label-by ndpi labels captures, and these inputs are {kind} files")
    skipped: Counter[str] = Counter()
    if kind == "capture":
        opts = replace(opts, labels=_resolve_label_spec(opts.labels, files))
        result = _read_captures(files, opts, new_writer, skipped, progress)
    elif kind == "flowcsv":
        result = _read_flow_csvs(files, opts, new_writer, skipped)
    else:
        result = _read_idx(files, opts, new_writer)
    writer, read_info = result
    with writer:
        return _finish(writer, files, kind, opts, skipped, read_info, t0)


def _labeller(files, opts: PrepareOptions, skipped: Counter, progress: bool):
    """The labeller of ``opts.labels``, and what to record of it (None but for nDPI,
    whose labelling pass over every capture runs here, its dropped flows in ``skipped``)."""
    labeller = Labeller.from_spec(opts.labels)
    if opts.labels.by != "ndpi":
        return labeller, None
    spec = opts.labels
    bar = _progress(files, progress, "nDPI labels")  # NFStream: the slow pass
    try:
        dpi = ndpi_labels(
            [(f.path, f.rel) for f in files],
            label_field=spec.ndpi_field,
            min_confidence=spec.ndpi_min_confidence,
            keep_guessed=spec.ndpi_keep_guessed,
            idle_timeout=opts.idle_timeout,
            active_timeout=opts.active_timeout,
            on_done=None if bar is None else lambda i: bar.update(files[i].size),
        )
    finally:
        if bar is not None:
            bar.close()
    labeller.use_flow_map(dpi.flow_map)
    skipped.update(dpi.dropped)
    return labeller, dpi.labeller


def _read_captures(files, opts: PrepareOptions, new_writer, skipped: Counter, progress: bool):
    """Read, label and write the flows of ``files``: the writer, and what the reading
    found (``dataset.json``'s counts)."""
    labeller, labeller_info = _labeller(files, opts, skipped, progress)
    flow_opts = opts.flow_options()
    shapes = view_shapes(flow_opts)
    dtypes = {"seq": np.float32, "bytes": np.uint8, "pkt_bytes": np.uint8}
    writer = new_writer({v: (s, dtypes[v]) for v, s in shapes.items()})
    report = ReadReport()
    rows = _Rows()
    # Duplicates are dropped as they are read (the first of equal flows is kept, as
    # dedup_mask would keep it), so that they are never written and held.
    seen: set[bytes] | None = set() if opts.dedup else None
    rels = np.array([f.rel for f in files], dtype=object)  # once, not per batch
    bar = _progress(files, progress)
    done_bytes = 0
    try:
        # Small captures share the reader's chunks, so the corpus is read as one stream;
        # batch.source says which file each flow came from.
        flows = iter_flows_many(
            [f.path for f in files],
            flow_opts,
            report,
            strict=opts.strict,
            on_error="raise" if opts.strict else "skip",
            digests=None if opts.digest == "none" else opts.digest,
        )
        for batch in flows:
            labels = _label_batch(labeller, files, batch)
            keep = labels != None  # noqa: E711 - elementwise on an object array
            skipped["unlabelled"] += int(len(keep) - keep.sum())
            if keep.any():
                meta, views, stats = _capture_rows(rels, batch, labels, keep, seen, skipped)
                if len(meta["digest"]):
                    rows.add(meta, views, stats)
            if rows.n >= FLUSH_FLOWS:
                rows.flush(writer)
            if bar is not None:
                now = sum(f.size for f in files[: int(batch.source.max()) + 1])
                bar.update(now - done_bytes)
                done_bytes = now
        rows.flush(writer)
    except BaseException:
        writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    if len(report.file_errors) == len(files):  # one line, not a warning per file first
        writer.abort()
        raise _unreadable(report.file_errors, files[0].root)
    info = _read_info(report, flow_opts, opts, skipped)
    if labeller_info is not None:
        info["labeller"] = labeller_info
    return writer, info


def _read_info(report: ReadReport, flow_opts, opts: PrepareOptions, skipped: Counter) -> dict:
    """The reader's counts for ``dataset.json``; its skipped files (logged) and packets
    counted in ``skipped``."""
    for path, problem in report.file_errors:
        skipped["unreadable_file"] += 1
        log.warning("skipped %s: %s", path, problem)
    for reason, count in report.skipped.items():
        skipped[f"packets:{reason}"] += int(count)
    return {
        "n_packets": int(report.n_packets),
        "n_flow_packets": int(report.n_flow_packets),
        "n_fragments_merged": int(report.n_merged),
        "recovered": {k: int(v) for k, v in sorted(report.recovered.items())},
        "n_flows_read": int(report.n_flows),
        "view_info": _capture_view_info(flow_opts),
        "digests": report.digests,
        "deduplicated": opts.dedup,  # duplicates already dropped while reading
    }


def _label_batch(labeller: Labeller, files, batch) -> np.ndarray:
    """Labels of a batch's flows (None: unlabelled), file by file."""
    labels = np.full(len(batch), None, dtype=object)
    for si in np.unique(batch.source).tolist():
        # labels depend on the file (folder, file CSV, per-file keys)
        sel = np.flatnonzero(batch.source == si)
        f = files[si]
        labels[sel] = labeller.label_flows(
            f.path,
            f.root,
            batch.proto[sel],
            batch.ip_a[sel],
            batch.port_a[sel],
            batch.ip_b[sel],
            batch.port_b[sel],
        )
    return labels


def _capture_rows(rels, batch, labels: np.ndarray, keep: np.ndarray, seen, skipped: Counter):
    """Metadata, views and stats of the kept flows of one batch, with their fingerprints.

    ``rels`` is the input-relative path of every file, by source index.

    With ``seen`` (the fingerprints of the flows kept so far), flows equal to an
    earlier one are left out too, and counted as ``duplicate_flow``.
    """
    parts = list(batch.views.values())
    if batch.stats is not None:
        parts.append(batch.stats.to_numpy(np.float32))
    digest = src_mod.row_hashes(parts)  # row by row: the same for any subset of rows
    if seen is not None:
        kept = np.flatnonzero(keep)
        uniq, first = np.unique(digest[kept], return_index=True)
        digests = uniq.tolist()
        old = np.fromiter(map(seen.__contains__, digests), dtype=bool, count=len(digests))
        fresh = first[~old]
        seen.update(digests)
        keep = np.zeros(len(keep), dtype=bool)
        keep[kept[np.sort(fresh)]] = True
        skipped["duplicate_flow"] += len(kept) - len(fresh)
    b = batch.take(keep) if not keep.all() else batch
    rel = rels[b.source]
    meta = {
        "source": rel,
        "group": rel,
        "label_name": labels[keep],
        "proto": b.proto.astype(np.uint8),
        "ip_a": b.ip_a.astype(object),
        "port_a": b.port_a.astype(np.int32),
        "ip_b": b.ip_b.astype(object),
        "port_b": b.port_b.astype(np.int32),
        "first_ts": b.first_ts.astype(np.float64),
        "last_ts": b.last_ts.astype(np.float64),
        "n_packets": b.n_packets.astype(np.int64),
        "n_bytes": b.n_bytes.astype(np.int64),
    }
    meta["digest"] = digest[keep] if not keep.all() else digest
    return meta, b.views, b.stats


def _capture_view_info(flow_opts) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if "seq" in flow_opts.views:
        info["seq"] = {"features": list(flows_mod.SEQ_FEATURES)}
    if "bytes" in flow_opts.views:
        info["bytes"] = {
            "description": "first K transport-payload bytes of the flow, both directions"
        }
    if "pkt_bytes" in flow_opts.views:
        info["pkt_bytes"] = {
            "layout": flow_opts.pkt_layout,
            "description": (
                "the first P packets: 8 bytes of header fields (direction, IP length, "
                "protocol, TCP flags, transport header length, TCP window), then the "
                "packet's first B - 8 payload bytes"
                if flow_opts.pkt_layout == "payload"
                else "first B bytes from the IP header of the first P packets"
            ),
        }
    return info


def _resolve_label_spec(spec: LabelSpec, files) -> LabelSpec:
    if spec.by != "auto":
        return spec
    if spec.labels is not None:
        path = Path(spec.labels)
        if not path.is_file():
            raise InputError(path, "labels file not found")
        try:
            head = pd.read_csv(path, nrows=0, dtype=str).columns.str.strip()
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise InputError(path, f"cannot read labels CSV ({str(exc).splitlines()[0]})") from None
        by = "flow-csv" if spec.key_column in head else "file-csv"
        return LabelSpec(**{**asdict(spec), "by": by})
    if all(folder_label(f.path, f.root) is not None for f in files):
        return LabelSpec(**{**asdict(spec), "by": "folder"})
    raise ConfigError(
        "no labels: put captures in one folder per class, or give --labels FILE.csv, "
        "or --label-by port"
    )


def _read_flow_csvs(files, opts: PrepareOptions, new_writer, skipped: Counter):
    from flowsplit.data.flowcsv import read_flow_csv

    writer = new_writer({})
    columns: list[str] | None = None
    any_times = True
    try:
        for f in files:
            try:
                fc = read_flow_csv(
                    f.path,
                    label_column=opts.label_column,
                    mask_port=opts.mask_port,
                    strict=opts.strict,
                )
            except InputError as exc:
                if opts.strict or len(files) == 1:
                    raise
                skipped["unreadable_file"] += 1
                log.warning("skipped %s", exc)  # as captures are: counted and said
                continue
            skipped.update(fc.skipped)
            if columns is None:
                columns = list(fc.stats.columns)
            elif list(fc.stats.columns) != columns:
                fc.stats = fc.stats.reindex(columns=columns, fill_value=0.0)
            n = len(fc.labels)
            any_times &= fc.times is not None
            meta = pd.DataFrame(
                {
                    "source": np.full(n, f.rel, dtype=object),
                    "group": np.full(n, f.rel, dtype=object),
                    "label_name": fc.labels,
                    "first_ts": fc.times if fc.times is not None else np.zeros(n),
                    "digest": src_mod.row_hashes([fc.stats.to_numpy(np.float32)]),
                }
            )
            writer.append(meta, {}, fc.stats)
    except BaseException:
        writer.abort()
        raise
    if columns is None:
        writer.abort()
        raise InputError(files[0].path, "no readable flow CSV")
    info = {"view_info": {"stats": {"origin": "flow-record CSV"}}, "has_times": any_times}
    return writer, info


def _read_idx(files, opts: PrepareOptions, new_writer):
    from flowsplit.data.idx import BYTE_STATS_COLUMNS, byte_stats, find_idx_pairs, read_idx_set

    by_path = {f.path: f for f in files}
    names = list(opts.class_names) if opts.class_names else None
    # IDX sets are small (a few MB of bytes); read them whole, then write.
    sets = [read_idx_set(images, labels, names) for images, labels in find_idx_pairs(list(by_path))]
    widths = {s.rows.shape[1] for s in sets}
    if len(widths) > 1:
        raise InputError(
            sets[1].images_path, f"rows of {sorted(widths)} bytes mixed in one dataset"
        )
    names = names or max((s.class_names for s in sets), key=len)
    writer = new_writer({"bytes": ((widths.pop(),), np.uint8)})
    try:
        for s in sets:
            n = len(s.labels)
            rel = by_path[s.images_path].rel
            stats = None
            if "stats" in opts.views:
                stats = pd.DataFrame(byte_stats(s.rows), columns=list(BYTE_STATS_COLUMNS))
            meta = pd.DataFrame(
                {
                    "source": np.full(n, rel, dtype=object),
                    # IDX sessions carry no capture of origin: each session is its own group.
                    "group": np.array([f"{rel}#{i}" for i in range(n)], dtype=object),
                    "label_name": np.asarray(names, dtype=object)[s.labels],
                    "digest": src_mod.row_hashes([s.rows]),
                }
            )
            writer.append(meta, {"bytes": s.rows}, stats)
    except BaseException:
        writer.abort()
        raise
    info = {
        "view_info": {"bytes": {"description": "first payload bytes of the session (IDX)"}},
        "class_order": names,
    }
    return writer, info


def _finish(writer: DatasetWriter, files, kind, opts: PrepareOptions, skipped: Counter, info, t0):
    meta = writer.collected_meta()
    if meta.empty:
        what = f"no labelled flows in the inputs ({_what_was_skipped(skipped, info)})"
        if not files:
            raise FlowsplitError(what)
        raise InputError(files[0].path if len(files) == 1 else files[0].root, what)
    labels = meta["label_name"].to_numpy(dtype=object)
    groups = meta["group"].to_numpy(dtype=object)
    idx = _select_flows(meta, labels, groups, opts, skipped, info.get("deduplicated", False))
    split_by = _resolve_split_by(
        opts.split_by,
        kind,
        len(files),
        np.unique(groups[idx]).size,
        has_times=info.get("has_times", True),
    )
    times = meta["first_ts"].to_numpy()[idx] if "first_ts" in meta else None
    splits = assign_splits(
        labels[idx],
        by=split_by,
        groups=groups[idx],
        times=times,
        val_frac=opts.val_frac,
        test_frac=opts.test_frac,
        seed=opts.seed,
    )
    class_order = info.get("class_order")
    present = set(labels[idx])
    classes = [c for c in class_order if c in present] if class_order else sorted(present)
    label = np.full(len(meta), -1, dtype=np.int64)
    label[idx] = pd.Categorical(labels[idx], categories=classes).codes
    meta["label"] = label
    meta["split"] = ""
    meta.loc[idx, "split"] = splits
    meta["flow_id"] = np.arange(len(meta))
    meta = meta.drop(columns=["digest"])
    manifest_extra = {
        "kind": kind,
        "sources": _sources(files, opts.digest, info.get("digests", {})),
        "options": {**opts.to_manifest(), "split_by": split_by},
        "skipped": dict(sorted((k, int(v)) for k, v in skipped.items() if v)),
        "read": {k: v for k, v in info.items() if k.startswith("n_")},
        "recovered": info.get("recovered", {}),
        "views": info.get("view_info", {}),
        "split_by": split_by,
        **fields_of(opts, ("seed",)),
        "small_classes": _small_classes(labels[idx], splits, classes, opts.small_split_flows),
        **({"labeller": info["labeller"]} if "labeller" in info else {}),
        "prepare_time_s": round(time.perf_counter() - t0, 3),
    }
    writer.finish(classes=classes, meta=meta, keep=idx, manifest_extra=manifest_extra)
    return read_manifest(writer.out_dir)


def _select_flows(
    meta, labels, groups, opts: PrepareOptions, skipped: Counter, deduplicated: bool = False
) -> np.ndarray:
    """Rows kept: deduplicated, class filters, the per-group cap, then class minima.

    ``deduplicated``: the reader already dropped duplicates (no second pass over all rows).
    """
    keep = np.ones(len(meta), dtype=bool)
    if opts.dedup and not deduplicated:
        keep = dedup_mask(meta["digest"].to_numpy())
        skipped["duplicate_flow"] += int((~keep).sum())
    found = set(labels[keep])
    have = ", ".join(sorted(found)[:20])
    if missing := sorted(set(opts.classes or ()) - found):
        raise ConfigError(f"--classes: no flows labelled {', '.join(missing)} (found: {have})")
    if absent := sorted(set(opts.exclude_classes) - found):
        # Said, not refused (a habitual "Unknown" need not be there), so that a misspelt
        # name does not keep its class without a word.
        log.warning("--exclude-classes: no flows labelled %s (found: %s)", ", ".join(absent), have)
    include = list(opts.classes) if opts.classes else None
    exclude = list(opts.exclude_classes)
    sel, dropped = select_classes(
        labels[keep], groups[keep], include=include, exclude=exclude, top=None
    )
    skipped.update(dropped)
    idx = np.flatnonzero(keep)[sel]
    # The cap comes before the minimum counts: a class must be big enough *after* the
    # cap, or one huge capture would keep a class that no other file has.
    if opts.max_flows_per_group:
        capped = cap_per_group(labels[idx], groups[idx], opts.max_flows_per_group, opts.seed)
        skipped["over_group_cap"] += int((~capped).sum())
        idx = idx[capped]
    sel, dropped = select_classes(
        labels[idx],
        groups[idx],
        min_flows=opts.min_flows_per_class,
        min_groups=opts.min_groups_per_class,
        top=opts.top_classes,
    )
    skipped.update(dropped)
    idx = idx[sel]
    if len(idx) == 0:
        dropped = {k: v for k, v in skipped.items() if k.startswith(("class_", "over_"))}
        raise FlowsplitError(f"every flow was dropped by the class filters ({dropped})")
    return idx


def _sources(files, digest: str, computed: dict[str, str]) -> list[dict[str, Any]]:
    """The manifest's entry per input file; its digest named by the algorithm (none:
    no digest), taken from the reader where it computed one while reading."""
    out = []
    for f in files:
        entry: dict[str, Any] = {"path": f.rel, "size": f.size}
        if digest != "none":
            entry[digest] = computed.get(str(f.path)) or file_digest(f.path, digest)
        entry["kind"] = f.kind
        out.append(entry)
    return out


def _small_classes(labels, splits, classes, threshold: int) -> dict[str, list[int]]:
    """Classes with fewer than ``threshold`` flows in some split: class -> [train, val,
    test] flows (warned about)."""
    names = ("train", "val", "test")
    code = pd.Categorical(labels, categories=classes).codes.astype(np.int64)
    split_code = pd.Categorical(splits, categories=names).codes.astype(np.int64)
    counts = np.bincount(code * 3 + split_code, minlength=3 * len(classes)).reshape(-1, 3)
    small = np.flatnonzero(counts.min(axis=1) < threshold)
    out = dict(zip([classes[i] for i in small.tolist()], counts[small].tolist(), strict=True))
    if out:
        shown = "; ".join(f"{c} {'/'.join(map(str, v))}" for c, v in list(out.items())[:10])
        more = f" and {len(out) - 10} more" if len(out) > 10 else ""
        log.warning(
            "classes with fewer than %d flows in a split (train/val/test): %s%s",
            threshold,
            shown,
            more,
        )
    return out


def _what_was_skipped(skipped: Counter, info: dict) -> str:
    """A true account of why nothing is left, for the error message."""
    n_packets = info.get("n_packets")
    parts = [f"{k} {v}" for k, v in sorted(skipped.items(), key=lambda kv: -kv[1]) if v]
    if n_packets == 0:
        head = "no packets in the input"
    elif n_packets is not None and not info.get("n_flow_packets"):
        head = f"{n_packets} packets read, none of them TCP/UDP"
    else:
        return "skipped: " + ", ".join(parts[:8]) if parts else "nothing was skipped"
    return head + (": " + ", ".join(parts[:8]) if parts else "")


def _resolve_split_by(
    split_by: str, kind: str, n_files: int, n_groups: int, *, has_times: bool = True
) -> str:
    """The split to use: ``auto`` is by file, else by time, else by flow."""
    if split_by != "auto":
        if split_by == "file" and kind == "idx":
            raise ConfigError("--split-by file: IDX files carry no capture of origin; use flow")
        if split_by == "time" and (kind == "idx" or not has_times):
            raise ConfigError(
                "--split-by time: the input has no flow start times; use file or flow"
            )
        return split_by
    if kind == "idx":
        return "flow"
    if n_files >= 3 and n_groups >= 3:
        return "file"
    if not has_times:
        log.warning("only %d input file(s) and no flow times: splitting by flow", n_files)
        return "flow"
    log.warning("only %d input file(s): splitting by time instead of by file", n_files)
    return "time"


def _progress(files, enabled: bool, desc: str = "prepare"):
    if not enabled:
        return None
    from tqdm import tqdm

    total = sum(f.size for f in files)
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False)


def _unreadable(file_errors: list[tuple[Any, str]], root: Any) -> InputError:
    """The error of inputs none of which could be read: the file, or the folder and the first."""
    path, problem = file_errors[0]
    if len(file_errors) == 1:
        return InputError(path, problem)
    return InputError(root, f"no readable capture ({len(file_errors)} files; {path}: {problem})")


def extract_views(
    paths: list[str | Path], options: Any, source: str | Path = "the dataset options"
) -> tuple[pd.DataFrame, dict[str, np.ndarray], pd.DataFrame | None]:
    """Flows of new captures with the views a dataset was prepared with (for predict).

    ``options`` is a dataset manifest's ``options`` as ``source`` (a run's config.json,
    a manifest) recorded them, refused by name when not of their types; no labels, no dedup, no
    split. Returns (meta, tensor views, stats); stats columns follow the options' mask.
    """
    if not isinstance(options, dict):
        raise InputError(source, "no dataset.options: the run is damaged")
    known = {k: v for k, v in options.items() if k in PrepareOptions.__dataclass_fields__}
    known.pop("labels", None)
    problem = field_type_problem(PrepareOptions, known)
    if problem:
        raise InputError(source, f"{problem}: the run is damaged")
    opts = PrepareOptions(**{**known, "views": tuple(known.get("views", PrepareOptions.views))})
    files = src_mod.discover(paths)
    if any(f.kind != "capture" for f in files):
        bad = next(f for f in files if f.kind != "capture")
        raise InputError(bad.path, "predict reads captures (pcap/pcapng) only")
    report = ReadReport()
    metas, views, stats = [], {}, []
    for batch in iter_flows_many(
        [f.path for f in files], opts.flow_options(), report, on_error="skip"
    ):
        metas.append(
            pd.DataFrame(
                {
                    "source": np.array([files[i].rel for i in batch.source], dtype=object),
                    "proto": batch.proto,
                    "ip_a": batch.ip_a,
                    "port_a": batch.port_a,
                    "ip_b": batch.ip_b,
                    "port_b": batch.port_b,
                    "first_ts": batch.first_ts,
                    "last_ts": batch.last_ts,
                    "n_packets": batch.n_packets,
                    "n_bytes": batch.n_bytes,
                }
            )
        )
        for k, v in batch.views.items():
            views.setdefault(k, []).append(v)
        if batch.stats is not None:
            stats.append(batch.stats)
    if len(report.file_errors) == len(files):  # one line, not a warning per file first
        raise _unreadable(report.file_errors, files[0].root)
    for path, problem in report.file_errors:
        log.warning("skipped %s: %s", path, problem)
    if not metas:
        skipped = Counter({f"packets:{k}": v for k, v in report.skipped.items()})
        info = {"n_packets": report.n_packets, "n_flow_packets": report.n_flow_packets}
        raise InputError(files[0].path, f"no TCP/UDP flows ({_what_was_skipped(skipped, info)})")
    meta = pd.concat(metas, ignore_index=True)
    return (
        meta,
        {k: np.concatenate(v) for k, v in views.items()},
        pd.concat(stats, ignore_index=True) if stats else None,
    )
