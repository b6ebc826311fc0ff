"""Train/val/test splits that do not leak, and the balancing that precedes them.

The default split is stratified by class and grouped by capture file, so that a
capture's flows never straddle train and test (DATA.md: leakage). ``flow`` splits
flows at random (stratified), for sets such as IDX files that carry no capture
information; ``time`` puts the earliest flows in train and the latest in test.
Everything is deterministic for a seed.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from flowsplit.errors import ConfigError

SPLIT_BY = ("file", "flow", "time")


def dedup_mask(digests: np.ndarray) -> np.ndarray:
    """True for the first occurrence of every digest, False for later duplicates."""
    _, first = np.unique(digests, return_index=True)
    keep = np.zeros(len(digests), dtype=bool)
    keep[first] = True
    return keep


def cap_per_group(labels: np.ndarray, groups: np.ndarray, cap: int, seed: int) -> np.ndarray:
    """Keep at most ``cap`` flows per (group, label), chosen at random for a seed."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    frame = pd.DataFrame({"g": groups[order], "y": labels[order]})
    rank = frame.groupby(["g", "y"], sort=False).cumcount().to_numpy()
    keep = np.zeros(len(labels), dtype=bool)
    keep[order[rank < cap]] = True
    return keep


def select_classes(
    labels: np.ndarray,
    groups: np.ndarray,
    *,
    min_flows: int = 0,
    min_groups: int = 0,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    top: int | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Which flows belong to classes that pass the filters; also the drop counts by reason."""
    keep = np.ones(len(labels), dtype=bool)
    dropped: Counter[str] = Counter()
    if include:
        mask = np.isin(labels, include)
        dropped["class_not_selected"] += int((~mask & keep).sum())
        keep &= mask
    if exclude:
        mask = ~np.isin(labels, exclude)
        dropped["class_excluded"] += int((~mask & keep).sum())
        keep &= mask
    if min_flows > 0 or min_groups > 0:
        y_codes, y_names = pd.factorize(labels[keep])
        g_codes = pd.factorize(groups[keep])[0]
        n_flows = np.bincount(y_codes, minlength=len(y_names))
        pairs = np.unique(y_codes.astype(np.int64) * (g_codes.max() + 1) + g_codes)
        n_groups = np.bincount(pairs // (g_codes.max() + 1), minlength=len(y_names))
        small = list(y_names[(n_flows < min_flows) | (n_groups < min_groups)])
    else:
        small = []
    if len(small):
        mask = ~np.isin(labels, list(small))
        dropped["class_too_small"] += int((~mask & keep).sum())
        keep &= mask
    if top is not None:
        counts = Counter(labels[keep].tolist())
        chosen = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]
        mask = np.isin(labels, chosen)
        dropped["class_not_in_top"] += int((~mask & keep).sum())
        keep &= mask
    return keep, {k: v for k, v in dropped.items() if v}


def assign_splits(
    labels: np.ndarray,
    *,
    by: str = "file",
    groups: np.ndarray | None = None,
    times: np.ndarray | None = None,
    val_frac: float = 0.15,
    test_frac: float = 0.15,
    seed: int = 0,
) -> np.ndarray:
    """Assign each flow to ``train``, ``val`` or ``test``; returns an object array."""
    if by not in SPLIT_BY:
        raise ConfigError(f"--split-by {by!r}: expected one of {', '.join(SPLIT_BY)}")
    if not (0 < test_frac < 1 and 0 <= val_frac < 1 and val_frac + test_frac < 1):
        raise ConfigError("--val and --test must be fractions with val + test < 1")
    n = len(labels)
    out = np.full(n, "train", dtype=object)
    if n == 0:
        return out
    y = pd.factorize(np.asarray(labels))[0]
    if by == "time":
        if times is None:
            raise ConfigError(
                "--split-by time needs flow start times (captures or a timestamp column)"
            )
        order = np.argsort(np.asarray(times, dtype=np.float64), kind="stable")
        n_test = int(round(test_frac * n))
        n_val = int(round(val_frac * n))
        out[order[n - n_test :]] = "test"
        out[order[n - n_test - n_val : n - n_test]] = "val"
        return out
    if by == "flow":
        return _split_flows(y, val_frac, test_frac, seed)
    if groups is None:
        raise ConfigError("--split-by file needs the capture file of each flow")
    g = pd.factorize(np.asarray(groups))[0]
    n_groups = int(g.max()) + 1
    if n_groups < 3:
        raise ConfigError(
            f"--split-by file needs at least 3 capture files, found {n_groups}; "
            "use --split-by flow or --split-by time"
        )
    if _one_class_per_group(y, g):
        # Each capture holds one class (folder labels): allocate every class's captures
        # to the splits separately, so each class with >= 3 captures is in all three.
        return _split_single_class_groups(y, g, val_frac, test_frac, seed)
    return _split_mixed_groups(y, g, val_frac, test_frac, seed)


def _split_flows(y: np.ndarray, val_frac: float, test_frac: float, seed: int) -> np.ndarray:
    """Stratified random split of single flows: each class split in the same proportions."""
    rng = np.random.default_rng(seed)
    out = np.full(len(y), "train", dtype=object)
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        n_test = int(round(test_frac * len(idx)))
        n_val = int(round(val_frac * len(idx)))
        out[idx[:n_test]] = "test"
        out[idx[n_test : n_test + n_val]] = "val"
    return out


def _one_class_per_group(y: np.ndarray, g: np.ndarray) -> bool:
    per_group = pd.DataFrame({"g": g, "y": y}).groupby("g")["y"].nunique()
    return bool((per_group == 1).all())


def _split_single_class_groups(
    y: np.ndarray, g: np.ndarray, val_frac: float, test_frac: float, seed: int
) -> np.ndarray:
    """Split whole groups, class by class, each split near its share of the class's flows."""
    rng = np.random.default_rng(seed)
    out = np.full(len(y), "train", dtype=object)
    sizes = np.bincount(g)
    group_class = np.zeros(len(sizes), dtype=np.int64)
    group_class[g] = y
    for cls in np.unique(y):
        gs = rng.permutation(np.flatnonzero((group_class == cls) & (sizes > 0)))
        total = sizes[gs].sum()
        taken = 0
        for split, frac in (("test", test_frac), ("val", val_frac)):
            # leave at least one group for every later split (val, then train)
            spare = len(gs) - taken - (2 if split == "test" and val_frac > 0 else 1)
            if frac <= 0 or spare <= 0:
                continue
            chosen, flows = [], 0
            while len(chosen) < spare and (
                not chosen or flows + sizes[gs[taken + len(chosen)]] / 2 <= frac * total
            ):
                flows += sizes[gs[taken + len(chosen)]]
                chosen.append(gs[taken + len(chosen)])
            out[np.isin(g, chosen)] = split
            taken += len(chosen)
    return out


def _split_mixed_groups(
    y: np.ndarray, g: np.ndarray, val_frac: float, test_frac: float, seed: int
) -> np.ndarray:
    """Grouped, stratified split for captures holding several classes.

    Greedy, largest capture first: each capture goes to the split whose unmet
    per-class targets it fills best (gain minus overshoot, each class weighted by
    1 / its size, so rare classes count as much as common ones). One pass over the
    captures with O(3 x classes) work each; sklearn's StratifiedGroupKFold gave
    similar splits but took seconds on the nDPI corpus.
    """
    rng = np.random.default_rng(seed)
    n_classes = int(y.max()) + 1
    n_groups = int(g.max()) + 1
    counts = np.bincount(g * n_classes + y, minlength=n_groups * n_classes)
    counts = counts.reshape(n_groups, n_classes).astype(np.float64)  # (G, C)
    totals = counts.sum(axis=0)
    weight = 1.0 / np.maximum(totals, 1.0)
    fracs = np.array([test_frac, val_frac, 1.0 - test_frac - val_frac])
    need = fracs[:, None] * totals[None, :]  # (3, C) still to fill
    sizes = counts.sum(axis=1)
    # random order first, then a stable sort by size: ties are broken by the seed
    order = rng.permutation(n_groups)
    order = order[np.argsort(-sizes[order], kind="stable")]
    choice = np.empty(n_groups, dtype=np.int64)
    for gi in order:
        c = counts[gi]
        room = np.clip(need, 0.0, None)
        fill = np.minimum(c, room)
        score = ((2 * fill - c) * weight).sum(axis=1)  # gain - overshoot
        s = int(np.argmax(score + 1e-9 * fracs))  # ties go to the larger split
        choice[gi] = s
        need[s] -= c
    names = np.array(["test", "val", "train"], dtype=object)
    return names[choice[g]]
