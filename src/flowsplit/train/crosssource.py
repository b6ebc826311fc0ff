"""How far a model's score falls on data from elsewhere (``evaluate`` on another dataset).

A model scored on a dataset other than the one it trained on is scored on another
source (other networks, hosts, times): ``evaluate`` then puts the score beside the
run's own test score and says the drop, and whether the two datasets share capture
files (then the "other" source is not wholly other: the figure is optimistic).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowsplit.data.store import Dataset, load_dataset
from flowsplit.errors import FlowsplitError


def _own_test(run: Path) -> dict[str, float] | None:
    from flowsplit.result import RunResult

    try:
        r = RunResult.from_json(run)
    except (FlowsplitError, OSError, ValueError, KeyError, TypeError):
        return None
    return {"accuracy": float(r.accuracy), "macro_f1": float(r.macro_f1)}


def source_comparison(
    run: str | Path, doc: dict[str, Any], ds: Dataset, scores: dict[str, Any]
) -> dict[str, Any] | None:
    """The drop from the run's own test split to ``scores`` on ``ds``; None when ``ds``
    is the dataset the run trained on."""
    trained_on = doc.get("dataset", {}).get("path")
    if trained_on and Path(trained_on).resolve() == Path(ds.root).resolve():
        return None
    own = _own_test(Path(run))
    out: dict[str, Any] = {"trained_on": trained_on, "own_test": own}
    if own is not None:
        out["macro_f1_drop"] = own["macro_f1"] - float(scores["macro_f1"])
        out["accuracy_drop"] = own["accuracy"] - float(scores["accuracy"])
    shared = None
    if trained_on and Path(trained_on).is_dir():
        try:
            seen = set(load_dataset(trained_on).meta["source"].astype(str))
            here = set(ds.meta["source"].astype(str))
            shared = len(seen & here)
        except (FlowsplitError, OSError, KeyError):
            shared = None
    out["shared_capture_files"] = shared
    return out


def format_comparison(cmp: dict[str, Any], scores: dict[str, Any]) -> str:
    """One or two lines for ``evaluate``'s table."""
    own = cmp.get("own_test")
    if own is None:
        line = "  another dataset than the run's (its own test scores are not readable)"
    else:
        line = (
            f"  another dataset than the run's: macro-F1 {scores['macro_f1']:.4f} against "
            f"{own['macro_f1']:.4f} on its own test split (drop {cmp['macro_f1_drop']:+.4f}), "
            f"accuracy {scores['accuracy']:.4f} against {own['accuracy']:.4f}"
        )
    if cmp.get("shared_capture_files"):
        line += (
            f"\n  note: {cmp['shared_capture_files']} capture file(s) are in both datasets; "
            "the drop across sources is larger than this"
        )
    return line
