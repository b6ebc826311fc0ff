"""One page over both studies: what to use, in plain words, with links to the details.

Reads the ``results.json`` of a data-parallel comparison (`flowsplit compare`) and
of a split-learning comparison (`flowsplit sfl compare`) and writes
``OUT/report.html``, ``OUT/report.md`` and ``OUT/report.json``. The advice is a
small set of rules over the measured figures, stated in the page so a reader can
disagree with them:

- the model to use is the one with the best centralised macro-F1;
- data parallelism is worth it for a model when its measured speedup is >= 1.2x
  (at the largest worker count that does not oversubscribe the cores; a caveat when
  other load disturbed the timing) and its accuracy is shown equivalent (TOST);
- among the split-learning schemes, the one with the lowest total delay among
  those within 1 point of the best final accuracy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flowsplit.data.store import atomic_write_json, atomic_write_text
from flowsplit.report import html as H
from flowsplit.report import markdown as M
from flowsplit.report.tables import Column

SPEEDUP_WORTH_IT = 1.2
ACCURACY_TIE_PTS = 1.0


def _load(path: Path | None) -> dict[str, Any] | None:
    if path is None or not (path / "results.json").is_file():
        return None
    return json.loads((path / "results.json").read_text(encoding="utf-8"))


def _num(value: Any) -> float:
    """A figure from results.json (NaN is written as null) as a float."""
    return float("nan") if value is None else float(value)


def data_parallel_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Per model: centralised scores, then speedup and equivalence verdict at the largest
    worker count whose timing is not oversubscribed (the largest measured otherwise)."""
    margin_pts = 100 * float(res.get("config", {}).get("margin", 0.01))
    rows = []
    for model, a in res.get("analysis", {}).get("models", {}).items():
        central = a.get("by_workers", {}).get("1", {})
        row: dict[str, Any] = {
            "model": model,
            "accuracy": central.get("accuracy", {}).get("mean"),
            "macro_f1": central.get("macro_f1", {}).get("mean"),
            "margin_pts": margin_pts,
        }
        vs = a.get("vs_central", {})
        if vs:
            fair = [n for n, v in vs.items() if not v.get("oversubscribed")]
            n = max(fair or vs, key=int)
            v = vs[n]
            acc = v.get("accuracy") or {}
            row.update(
                workers=int(n),
                speedup=(v.get("speedup") or {}).get("mean"),
                timing_reliable=not v.get("timing_contended", False)
                and not v.get("oversubscribed"),
                verdict=acc.get("verdict"),
                tost_p=_num(acc.get("tost_p")),
                diff_pts=100 * _num((acc.get("diff") or {}).get("mean")),
            )
        rows.append(row)
    return rows


def sfl_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Per scheme: final accuracy, total delay, bytes, and the change against HSFL."""
    rows = []
    for scheme, s in res.get("schemes", {}).items():
        vs = res.get("vs_hsfl", {}).get(scheme, {})
        rows.append(
            {
                "scheme": scheme,
                "cuts": ",".join(str(c) for c in (s.get("cuts") or [[]])[0]),
                "accuracy": (s.get("final_accuracy") or {}).get("mean"),
                "delay_s": (s.get("delay_total_s") or {}).get("mean"),
                "bytes": (s.get("bytes_total") or {}).get("mean"),
                "acc_vs_hsfl_pts": None if not vs else 100 * vs["accuracy_diff"]["mean"],
                "delay_vs_hsfl": None if not vs else vs["delay_ratio"]["mean"] - 1,
                "bytes_vs_hsfl": None if not vs else vs["bytes_ratio"]["mean"] - 1,
            }
        )
    return rows


def advise(dp: list[dict[str, Any]], sfl: list[dict[str, Any]]) -> list[str]:
    """Plain-language advice from the two tables (rules in the module docstring)."""
    out = []
    scored = [r for r in dp if r.get("macro_f1") is not None]
    if scored:
        best = max(scored, key=lambda r: r["macro_f1"])
        out.append(
            f"Use {best['model']}: the best centralised macro-F1 on this data "
            f"({100 * best['macro_f1']:.1f} %, accuracy {100 * best['accuracy']:.1f} %)."
        )
        worth = [
            r for r in scored
            if r.get("speedup") and r["speedup"] >= SPEEDUP_WORTH_IT and r.get("verdict") == "equivalent"
        ]  # fmt: skip
        for r in worth:
            caveat = (
                ""
                if r.get("timing_reliable")
                else " (timings disturbed by other load or oversubscribed: rerun on a quiet machine)"
            )
            out.append(
                f"Data parallelism pays for {r['model']}: {r['workers']} workers cut its epoch time "
                f"{r['speedup']:.2f}x with accuracy equivalent within +-{r.get('margin_pts', 1.0):g} pt "
                f"(TOST p = {r['tost_p']:.3f}){caveat}."
            )
        if not worth:
            out.append(
                "No model was both faster (>= 1.2x) and shown equivalent in accuracy with data "
                "parallelism here: train centralised, or run more seeds to settle equivalence."
            )
    scored = [r for r in sfl if r.get("accuracy") is not None and r.get("delay_s") is not None]
    if scored:
        top = max(r["accuracy"] for r in scored)
        close = [r for r in scored if 100 * (top - r["accuracy"]) <= ACCURACY_TIE_PTS]
        pick = min(close, key=lambda r: r["delay_s"])
        text = (
            f"For split learning use {pick['scheme']} (cuts {pick['cuts']}): accuracy "
            f"{100 * pick['accuracy']:.1f} %, {pick['delay_s']:.1f} s of simulated delay"
        )
        if pick.get("delay_vs_hsfl") is not None:
            text += (
                f"; against HSFL {pick['acc_vs_hsfl_pts']:+.1f} pt accuracy, "
                f"{100 * pick['delay_vs_hsfl']:+.0f} % delay, {100 * pick['bytes_vs_hsfl']:+.0f} % bytes"
            )
        out.append(text + ".")
    return out


def _link_list(links: list[str]) -> str:
    """A list of already-rendered links (H.bullet_list would escape them)."""
    if not links:
        return H.paragraph("none")
    return "<ul>" + "".join(f"<li>{a}</li>" for a in links) + "</ul>"


def write_overview(
    out: Path,
    *,
    manifest: dict[str, Any],
    dp_dir: Path | None,
    sfl_dir: Path | None,
    timings: dict[str, float],
) -> Path:
    """Write OUT/report.{html,md,json} over the two studies; returns the HTML path."""
    out = Path(out)
    dp_res, sfl_res = _load(dp_dir), _load(sfl_dir)
    dp = data_parallel_rows(dp_res) if dp_res else []
    sfl = sfl_rows(sfl_res) if sfl_res else []
    advice = advise(dp, sfl)
    pct, f2 = (
        (lambda v: "" if v is None else f"{100 * v:.1f} %"),
        (lambda v: "" if v is None else f"{v:.2f}"),
    )
    dp_cols = [
        Column("model", "model"), Column("accuracy", "accuracy (centralised)", pct, "right"),
        Column("macro_f1", "macro-F1 (centralised)", pct, "right"),
        Column("workers", "workers", lambda v: "" if v is None else str(v), "right"),
        Column("speedup", "speedup", f2, "right"), Column("verdict", "accuracy vs centralised"),
    ]  # fmt: skip
    sfl_cols = [
        Column("scheme", "scheme"), Column("cuts", "cuts"),
        Column("accuracy", "final accuracy", pct, "right"),
        Column("delay_s", "delay, s", f2, "right"),
        Column("bytes", "bytes", lambda v: "" if v is None else f"{v / 1e6:.1f} MB", "right"),
        Column("delay_vs_hsfl", "delay vs HSFL", lambda v: "" if v is None else f"{100 * v:+.0f} %", "right"),
        Column("bytes_vs_hsfl", "bytes vs HSFL", lambda v: "" if v is None else f"{100 * v:+.0f} %", "right"),
    ]  # fmt: skip
    data_line = (
        f"{manifest['n_flows']} flows, {len(manifest['classes'])} classes "
        f"({', '.join(manifest['classes'])}), split by {manifest.get('split_by')}: "
        + ", ".join(f"{k} {v}" for k, v in manifest["splits"].items())
    )
    rel = lambda p: os.path.relpath(p, out)  # noqa: E731 - a one-line helper
    links = []
    if dp_dir:
        links.append(H.link(rel(dp_dir / "report.html"), "data-parallel study (full report)"))
    if sfl_dir:
        links.append(H.link(rel(sfl_dir / "report.html"), "split-learning study (full report)"))
    rules = (
        "How the advice is chosen: the model with the best centralised macro-F1; data parallelism "
        f"when it is >= {SPEEDUP_WORTH_IT}x faster and accuracy is shown equivalent (TOST, "
        f"+-{dp[0]['margin_pts'] if dp else 1.0:g} pt); "
        f"for split learning the lowest-delay scheme within {ACCURACY_TIE_PTS:g} pt of the best accuracy."
    )
    times = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    html = H.page(
        "flowsplit: what to use on this capture",
        H.section("Advice", H.bullet_list(advice), H.paragraph(rules)),
        H.section("Data", H.paragraph(data_line)),
        H.section("Centralised vs data-parallel", H.table(dp, dp_cols) if dp else H.paragraph("not run")),
        H.section("Split federated learning", H.table(sfl, sfl_cols) if sfl else H.paragraph("not run")),
        H.section("Details", _link_list(links), H.paragraph(f"Run time: {times}.")),
        subtitle=f"dataset {manifest.get('flowsplit_version', '')} · {data_line}",
    )  # fmt: skip
    md = M.document(
        M.heading("flowsplit: what to use on this capture", 1),
        M.heading("Advice"), M.bullet_list(advice), M.paragraph(rules),
        M.heading("Data"), M.paragraph(data_line),
        M.heading("Centralised vs data-parallel"), M.table(dp, dp_cols) if dp else "not run\n",
        M.heading("Split federated learning"), M.table(sfl, sfl_cols) if sfl else "not run\n",
        M.heading("Details"),
        M.bullet_list([f"{t}: {p}" for t, p in (("data-parallel", dp_dir), ("split learning", sfl_dir)) if p]),
        M.paragraph(f"Run time: {times}."),
    )  # fmt: skip
    atomic_write_text(out / "report.html", html)
    atomic_write_text(out / "report.md", md)
    atomic_write_json(
        out / "report.json",
        {"advice": advice, "data_parallel": dp, "split_learning": sfl, "timings_s": timings,
         "dataset": {"n_flows": manifest["n_flows"], "classes": manifest["classes"],
                     "splits": manifest["splits"]}},
    )  # fmt: skip
    return out / "report.html"
