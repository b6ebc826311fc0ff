"""What a trained model relies on: re-scoring it with parts of its input destroyed.

``flowsplit evaluate RUN DATASET --ablate`` scores the model on the split as it is,
then once per ablation with one part of every flow's input randomised or masked
(:mod:`flowsplit.data.perturb`), and reports the accuracy and macro-F1 that remain.
A model that keeps its score without the payload reads the headers; one that falls to
chance when the TCP window or the TTL is randomised learnt the hosts of the capture,
not the application (the shortcut the S&P'25 SoK found in ET-BERT and YaTC).

Which ablations apply depends on the view the model reads (:func:`ablations_for`):

- ``pkt_bytes`` (ip layout): each per-session header field (IP ID, TTL, TCP
  sequence/acknowledgement, window, options, timestamps), headers only, payload
  only, the first K payload bytes of every packet masked, the packets shuffled;
- ``pkt_bytes`` (payload layout: its only per-session field is the TCP window):
  window, IP lengths shuffled, headers only, payload only, first K bytes, packets
  shuffled;
- ``bytes``: the flow's first K payload bytes masked (for each K);
- ``seq``: timing shuffled, sizes shuffled, packets shuffled;
- ``stats``: a group of columns permuted across flows (timing, sizes, counts, flags,
  header fields).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.config_args import path_text
from flowsplit.data import perturb
from flowsplit.errors import ConfigError
from flowsplit.reader.views import SEQ_FEATURES
from flowsplit.train.evaluation import ClassMapping, score_by_name

DEFAULT_KS = (16, 64)
"""``--ablate-k``: the payload prefixes masked (bytes per packet, or of the flow)."""


@dataclass(frozen=True)
class Ablation:
    """One way of destroying part of the input."""

    name: str
    description: str
    apply: Callable[[np.ndarray, np.random.Generator], np.ndarray]


def _ip_field(field: str, text: str) -> Ablation:
    return Ablation(field, text, lambda x, rng: perturb.ip_field(x, field, rng))


def ablations_for(
    view: str,
    *,
    layout: str | None = None,
    columns: Sequence[str] | None = None,
    features: Sequence[str] = SEQ_FEATURES,
    ks: Sequence[int] = DEFAULT_KS,
) -> list[Ablation]:
    """The ablations that apply to a model reading ``view`` (see the module docstring)."""
    ks = [int(k) for k in ks]
    if view == "pkt_bytes":
        return _pkt_bytes_ablations(layout or "payload", ks)
    if view == "bytes":
        return [
            Ablation(
                f"first_{k}_masked",
                f"first {k} payload bytes of the flow zeroed",
                lambda x, rng, k=k: perturb.mask_payload_prefix(x, "bytes", None, k),
            )
            for k in ks
        ]
    if view == "seq":
        return _seq_ablations(features)
    if view == "stats":
        return _stats_ablations([str(c) for c in (columns or [])])
    raise ConfigError(f"no ablations for the view {view!r}")


def _pkt_bytes_ablations(layout: str, ks: list[int]) -> list[Ablation]:
    """Per-session fields (ip layout) or window and sizes (payload layout), then headers
    only, payload only, the first K bytes of every packet masked, packets shuffled."""
    if layout == "ip":
        out = [
            _ip_field("ip_id", "IPv4 ID / IPv6 flow label: random offset per flow"),
            _ip_field("ttl", "TTL / hop limit: random value per flow"),
            _ip_field("seq_ack", "TCP sequence and acknowledgement: random offset per flow"),
            _ip_field("window", "TCP window: random offset per packet"),
            _ip_field("tcp_options", "TCP options replaced by no-ops"),
            _ip_field("tcp_timestamps", "TCP timestamps: random offset per flow"),
        ]
    else:
        out = [
            Ablation(
                "window",
                "TCP window (the payload layout's only per-session field): random per packet",
                perturb.payload_window,
            ),
            Ablation(
                "sizes_shuffled",
                "IP lengths permuted among each flow's packets",
                perturb.payload_sizes_shuffled,
            ),
        ]
    out += [
        Ablation(
            "headers_only",
            "every packet's payload zeroed",
            lambda x, rng: perturb.headers_only(x, layout),
        ),
        Ablation(
            "payload_only",
            "every packet's header fields zeroed",
            lambda x, rng: perturb.payload_only(x, layout),
        ),
    ]
    out += [
        Ablation(
            f"first_{k}_masked",
            f"first {k} payload bytes of every packet zeroed",
            lambda x, rng, k=k: perturb.mask_payload_prefix(x, "pkt_bytes", layout, k),
        )
        for k in ks
    ]
    out.append(
        Ablation(
            "packets_shuffled",
            "each flow's packets in random order",
            lambda x, rng: perturb.shuffle_packets(x, "pkt_bytes", rng),
        )
    )
    return out


def _seq_ablations(features: Sequence[str]) -> list[Ablation]:
    return [
        Ablation(
            "timing_shuffled",
            "inter-arrival times permuted among each flow's packets",
            lambda x, rng: perturb.seq_shuffled(x, "timing", rng, features),
        ),
        Ablation(
            "sizes_shuffled",
            "packet and payload sizes permuted among each flow's packets",
            lambda x, rng: perturb.seq_shuffled(x, "sizes", rng, features),
        ),
        Ablation(
            "packets_shuffled",
            "each flow's packets in random order",
            lambda x, rng: perturb.shuffle_packets(x, "seq", rng, features),
        ),
    ]


def _stats_ablations(cols: list[str]) -> list[Ablation]:
    """One per group of stats columns the view has: the group permuted across flows."""
    return [
        Ablation(
            f"{group}_permuted",
            f"the {group.replace('_', ' ')} columns permuted across flows",
            lambda x, rng, g=group: perturb.stats_permuted(x, cols, g, rng),
        )
        for group in perturb.STATS_GROUPS
        if any(perturb.STATS_GROUPS[group](c) for c in cols)
    ]


def parse_ks(text: str) -> tuple[int, ...]:
    """``--ablate-k 16,64``: positive byte counts."""
    try:
        ks = tuple(int(t) for t in str(text).split(",") if t.strip())
    except ValueError:
        raise ConfigError(
            f"--ablate-k {text!r} is not a comma-separated list of integers"
        ) from None
    if not ks or min(ks) < 1:
        raise ConfigError(f"--ablate-k {text!r}: give one or more byte counts >= 1")
    return tuple(dict.fromkeys(ks))  # a count given twice is one row


def check_ablate_arguments(args) -> None:
    """The ablation's options need ``--ablate`` (without it they would do nothing)."""
    if args.ablate:
        return
    given = [
        flag
        for flag, value, default in (
            ("--ablate-k", args.ablate_k, DEFAULT_KS),
            ("--ablate-repeats", args.ablate_repeats, 1),
            ("--ablate-plot", args.ablate_plot, None),
        )
        if value != default
    ]
    if given:
        raise ConfigError(f"{given[0]} applies to the ablation: give --ablate too")


def run_ablations(
    model: Any,
    x: np.ndarray,
    y_dataset: np.ndarray,
    mapping: ClassMapping,
    ablations: Sequence[Ablation],
    *,
    seed: int = 0,
    repeats: int = 1,
) -> list[dict[str, Any]]:
    """Score ``model`` on ``x`` as it is (``none``) and under each ablation.

    Rows: ``name``, ``description``, ``accuracy``, ``macro_f1`` (mean over ``repeats``
    draws of the randomness), ``accuracy_kept`` and ``macro_f1_kept`` (fractions of
    the unablated scores), and ``n_scored``.
    """
    from flowsplit.train.runs import predict_labels  # torch: imported on use

    x = np.asarray(x)

    def score(xa: np.ndarray) -> dict[str, Any]:
        return score_by_name(y_dataset, predict_labels(model, xa), mapping)

    base = score(x)
    rows = [
        {
            "name": "none",
            "description": "the input as it is",
            "accuracy": base["accuracy"],
            "macro_f1": base["macro_f1"],
            "n_scored": base["n_scored"],
        }
    ]
    for i, ab in enumerate(ablations):
        accs, f1s = [], []
        for r in range(repeats):
            rng = np.random.default_rng([seed, i, r])
            s = score(ab.apply(x, rng))
            accs.append(s["accuracy"])
            f1s.append(s["macro_f1"])
        rows.append(
            {
                "name": ab.name,
                "description": ab.description,
                "accuracy": float(np.mean(accs)),
                "macro_f1": float(np.mean(f1s)),
                "n_scored": base["n_scored"],
            }
        )
    for row in rows:
        row["accuracy_kept"] = _ratio(row["accuracy"], base["accuracy"])
        row["macro_f1_kept"] = _ratio(row["macro_f1"], base["macro_f1"])
    return rows


def _ratio(a: float, b: float) -> float | None:
    return None if not b or b != b else float(a / b)


def format_table(rows: Sequence[dict[str, Any]], chance: float | None = None) -> str:
    """The ablation table as text: one line per ablation."""
    lines = [f"  {'ablation':<22} {'accuracy':>8} {'macro-F1':>8} {'F1 kept':>7}  what"]
    for r in rows:
        kept = "-" if r["macro_f1_kept"] is None else f"{r['macro_f1_kept']:.0%}"
        lines.append(
            f"  {r['name']:<22} {r['accuracy']:>8.4f} {r['macro_f1']:>8.4f} {kept:>7}  "
            f"{r['description']}"
        )
    if chance is not None:
        lines.append(f"  (chance accuracy, always the largest class: {chance:.4f})")
    return "\n".join(lines)


def plot_ablations(rows: Sequence[dict[str, Any]], path: str | Path, title: str) -> Path:
    """One picture: the accuracy and macro-F1 that remain under each ablation (PNG/SVG/PDF)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    pos = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(rows) + 1.6))
    ax.barh(pos - 0.2, [r["accuracy"] for r in rows], 0.4, label="accuracy", color="#4477aa")
    ax.barh(pos + 0.2, [r["macro_f1"] for r in rows], 0.4, label="macro-F1", color="#ee6677")
    ax.axvline(rows[0]["macro_f1"], color="#ee6677", lw=0.8, ls=":")
    ax.set_yticks(pos, names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("score that remains")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_ablate_arguments(p) -> None:
    """``evaluate``'s options for the ablation."""
    p.add_argument(
        "--ablate",
        action="store_true",
        help="also score the model with parts of its input randomised or masked "
        "(header fields, payload, first K bytes, timing and sizes: see docs/generalisation.md)",
    )
    p.add_argument(
        "--ablate-k",
        type=parse_ks,
        default=DEFAULT_KS,
        metavar="K[,K...]",
        help="payload prefixes the ablation masks, in bytes (default: 16,64)",
    )
    p.add_argument(
        "--ablate-repeats",
        type=int,
        default=1,
        metavar="N",
        help="draws of each random ablation, averaged (default: 1)",
    )
    p.add_argument(
        "--ablate-plot",
        metavar="FILE",
        help="draw the ablation table as a picture (PNG, SVG or PDF)",
        type=path_text,
    )


def evaluate_ablations(model, x, y, mapping, ds, doc, args) -> list[dict[str, Any]]:
    """``evaluate --ablate``: the rows of :func:`run_ablations` for the model's view
    (``doc``: the run's config.json), and the picture when ``--ablate-plot`` is given."""
    info = doc["model"]
    view = info["view"]
    vinfo = ds.manifest["views"].get(view, {})
    if args.ablate_repeats < 1:
        raise ConfigError(f"--ablate-repeats {args.ablate_repeats}: give 1 or more")
    columns = None
    if view == "stats":
        columns = list(ds.stats_frame().columns)
        trained = doc.get("dataset", {}).get("view_columns")
        columns = list(trained) if trained else columns
    abls = ablations_for(
        view,
        layout=vinfo.get("layout", "payload"),
        columns=columns,
        features=vinfo.get("features", SEQ_FEATURES),
        ks=args.ablate_k,
    )
    rows = run_ablations(model, x, y, mapping, abls, repeats=args.ablate_repeats)
    if args.ablate_plot:
        title = f"{info['name']} ({view}) on {Path(args.dataset).name}, {args.split} split"
        try:
            plot_ablations(rows, args.ablate_plot, title)
        except (OSError, ValueError) as exc:
            from flowsplit.errors import InputError

            raise InputError(args.ablate_plot, f"cannot write the picture ({exc})") from None
    return rows
