"""What the demo's overview advises, from the two studies' typed results: rules and rows.

Reads the results of a data-parallel comparison (`flowsplit compare`) and of a
split-learning comparison (`flowsplit sfl compare`) and returns the overview's content
(tables as rows, advice as sentences, the rules in words); :mod:`flowsplit.report.overview`
renders it. The advice is a small set of rules over the measured figures, stated on the
page so a reader can disagree with them:

- the model to use is the one with the best centralised macro-F1 among those above the
  majority-class rate, named beside the flow-statistics baseline (XGBoost) and the
  majority class;
- data parallelism is worth it for a model when its speedup is *claimed* (the study's
  rules: timings neither contended nor oversubscribed, efficiency at most 100 %), is
  >= 1.2x with a 95 % CI above 1x, at the largest worker count that does not
  oversubscribe the cores, and its accuracy is shown equivalent (TOST over at least 5
  seeds, model above the majority class); a withheld speedup says why and what to do;
- among the split-learning schemes, the one with the lowest total delay among those
  within 1 point of the best final accuracy, measured against the fair baselines the
  study ran (HSFL with the greedy assignment, the best fixed cut, HSFL), paired by seed.

Every figure in the advice and the tables carries its 95 % interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from flowsplit.experiments.dp.report import SPEEDUP_WORTH_IT as DP_SPEEDUP_WORTH_IT
from flowsplit.experiments.dp.result import (
    CentralComparison,
    CompareResult,
    read_compare_result,
)
from flowsplit.experiments.intervals import (
    change_ci,
    in_words,
    interval_parts,
    pct_ci,
    pts_ci,
    times_ci,
)
from flowsplit.experiments.sfl.result import (
    SchemeSummary,
    SFLCompareResult,
    read_sfl_compare_result,
)
from flowsplit.experiments.stats import (
    DIFF_BOUNDS,
    MIN_EQUIVALENCE_SEEDS,
    Interval,
    mean_ci,
    ratio_ci,
)
from flowsplit.report.overview import OverviewContent
from flowsplit.util import jsonable

SPEEDUP_WORTH_IT = DP_SPEEDUP_WORTH_IT  # the data-parallel page's verdict uses the same
ACCURACY_TIE_PTS = 1.0
MIN_SEEDS = MIN_EQUIVALENCE_SEEDS
FAIR_SFL_BASELINES = ("hsfl-greedy", "best-fixed", "hsfl")
"""What the chosen split-learning scheme is measured against, fairest first: HSFL with the
delay-aware greedy assignment, the best fixed cut in hindsight, HSFL as the research runs it
(random assignment). Each that the study ran gets a paired line with its intervals."""
SFL_BASELINE_SCHEMES = ("majority", "centralised", "fedavg")
"""Reference rows of ``sfl compare`` that are not split-learning schemes to pick from."""


class TableRow(Mapping[str, Any]):
    """A row of an overview table, with typed fields: the advice reads its attributes;
    the tables (:class:`~flowsplit.report.page.Column` keys) and ``report.json`` read it
    as a mapping of the fields that apply to it (:meth:`shown`), in declaration order."""

    def shown(self) -> dict[str, Any]:
        """The row's columns by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        return self.shown()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.shown())

    def __len__(self) -> int:
        return len(self.shown())


@dataclass(eq=False)
class DPBaselineRow(TableRow):
    """A reference row of the data-parallel table: the majority class (with its scores)
    or the flow-statistics baseline that was not run (a verdict only)."""

    model: str
    baseline: bool = True
    accuracy: float | None = None
    macro_f1: float | None = None
    accuracy_ci: str | None = None
    macro_f1_ci: str | None = None
    verdict: str = "baseline"

    def shown(self) -> dict[str, Any]:
        return {k: v for k, v in super().shown().items() if v is not None}


@dataclass
class DPPick:
    """A model's comparison with centralised training at the worker count the overview
    reports (:func:`_dp_choice`)."""

    workers: int
    speedup: Interval
    efficiency: float
    speedup_claimed: bool
    speedup_withheld: list[str]
    """Why the speedup is not claimed (empty when it is)."""
    speedup_ci: str
    foreign_share: float
    verdict: str
    """The accuracy verdict."""
    equivalent: bool
    n_seeds: int
    tost_p: float
    alpha: float
    diff: Interval | None
    diff_ci: str

    @property
    def pays(self) -> bool:
        """The advice's rule for data parallelism that pays: claimed, >= the threshold
        with its 95 % CI above 1x, accuracy shown equivalent."""
        mean, low, _ = interval_parts(self.speedup)
        return bool(
            self.speedup_claimed and self.equivalent and mean >= SPEEDUP_WORTH_IT and low > 1
        )


@dataclass(eq=False)
class DPModelRow(TableRow):
    """A model of the data-parallel table: centralised scores, and the comparison at the
    chosen worker count (None: the study ran it centralised only)."""

    model: str
    name: str
    baseline: bool
    accuracy: float
    macro_f1: float
    accuracy_ci: str
    macro_f1_ci: str
    macro_f1_iv: Interval | None
    above_majority: bool
    margin_pts: float
    chosen: DPPick | None = None

    def shown(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "chosen"}
        if self.chosen is not None:
            out.update((f.name, getattr(self.chosen, f.name)) for f in fields(self.chosen))
        return out


DPRow = DPBaselineRow | DPModelRow


@dataclass(eq=False)
class SFLRow(TableRow):
    """A scheme (or a baseline that splits nothing) of the split-learning table."""

    scheme: str
    baseline: bool
    cuts: str
    accuracy: float
    accuracy_ci: str
    delay_s: float
    delay_ci: str
    bytes: float
    bytes_ci: str
    n_seeds: int


@dataclass
class Versus:
    """A scheme against a reference, paired by seed (:func:`sfl_versus`)."""

    ref: str
    n_seeds: int
    accuracy_diff: Interval | None
    delay_ratio: Interval | None
    bytes_ratio: Interval | None


def _study(path: Path | None, reader):
    """The study of ``path`` read by ``reader``, None when there is none (yet)."""
    if path is None or not (path / "results.json").is_file():
        return None
    return reader(path / "results.json")


def _num(value: Any) -> float:
    """A figure that may be missing (None) as a float."""
    return math.nan if value is None else float(value)


def _dp_choice(vs: dict[str, Any]) -> str | None:
    """The worker count the overview reports: the largest that does not oversubscribe."""
    if not vs:
        return None
    fair = [n for n, v in vs.items() if not v.oversubscribed]
    return max(fair or vs, key=int)


FLOW_STATS_MODEL = "xgboost"
"""The flow-statistics baseline among the study's models."""
FLOW_STATS_ROW = "xgboost (flow-statistics baseline)"


def data_parallel_rows(res: CompareResult) -> list[DPRow]:
    """The baselines, then per model: centralised scores, and speedup and verdict at the
    largest worker count that is not oversubscribed (the largest measured otherwise).
    Every figure has its interval beside it; the speedup shows only where it is claimed."""
    analysis = res.analysis
    rows: list[DPRow] = []
    maj = analysis.baselines.majority
    if maj:
        rows.append(
            DPBaselineRow(
                model=f"majority class (always {maj.class_name!r})",
                accuracy=maj.accuracy,
                macro_f1=maj.macro_f1,
                accuracy_ci=f"{100 * maj.accuracy:.1f} %",
                macro_f1_ci=f"{100 * maj.macro_f1:.1f} %",
            )
        )
    if FLOW_STATS_MODEL not in analysis.models:
        rows.append(DPBaselineRow(FLOW_STATS_ROW, verdict="not run (add xgboost to --models)"))
    for model, a in analysis.models.items():
        central = a.central
        acc_c, f1_c = (central.accuracy, central.macro_f1) if central else (None, None)
        n = _dp_choice(a.vs_central)
        rows.append(
            DPModelRow(
                model=FLOW_STATS_ROW if model == FLOW_STATS_MODEL else model,
                name=model,
                baseline=model == FLOW_STATS_MODEL,
                accuracy=interval_parts(acc_c)[0],
                macro_f1=interval_parts(f1_c)[0],
                accuracy_ci=pct_ci(acc_c),
                macro_f1_ci=pct_ci(f1_c),
                macro_f1_iv=f1_c,
                above_majority=a.above_majority,
                margin_pts=100 * res.margin,
                chosen=None if n is None else _pick_at(int(n), a.vs_central[n]),
            )
        )
    return rows


def _pick_at(workers: int, v: CentralComparison) -> DPPick:
    """The comparison at ``workers`` as the table and the advice show it."""
    acc, claims = v.accuracy, v.claims
    claimed = claims.speedup_claimed
    withheld = list(claims.speedup_withheld or ["no claims recorded"])
    diff = acc.diff_tost or acc.diff
    return DPPick(
        workers=workers,
        speedup=v.speedup,
        efficiency=v.efficiency.mean,
        speedup_claimed=claimed,
        speedup_withheld=[] if claimed else withheld,
        speedup_ci=times_ci(v.speedup) if claimed else "not claimed: " + ", ".join(withheld),
        foreign_share=v.foreign_cpu_share_median,
        verdict=claims.accuracy_verdict,
        equivalent=claims.equivalent,
        n_seeds=acc.n,
        tost_p=acc.tost_p,
        alpha=acc.alpha,
        diff=diff,
        diff_ci=pts_ci(diff, f"{100 * (1 - 2 * acc.alpha):.0f} % CI"),
    )


def _names(rows: list[DPModelRow]) -> str:
    return ", ".join(r.name for r in rows)


@dataclass
class _DPBest:
    """The data-parallel table read by the advice's rules."""

    models: list[DPModelRow]
    """The models with a centralised macro-F1."""
    learned: list[DPModelRow]
    """Those above the majority class."""
    best: DPModelRow | None
    """The best macro-F1 among ``learned``."""
    majority: DPBaselineRow | None


def _dp_best(dp: list[DPRow]) -> _DPBest:
    models = [r for r in dp if isinstance(r, DPModelRow) and not math.isnan(r.macro_f1)]
    learned = [r for r in models if r.above_majority]
    majority = next(
        (r for r in dp if isinstance(r, DPBaselineRow) and r.accuracy is not None), None
    )
    best = max(learned, key=lambda r: r.macro_f1) if learned else None
    return _DPBest(models, learned, best, majority)


def _best_model_advice(table: _DPBest) -> str:
    """The model to use (the best centralised macro-F1, with those it does not clearly
    beat and the baselines beside it), or that none has learned."""
    best, maj = table.best, table.majority
    if best is None:
        return (
            "No model is above the majority-class rate"
            + (f" ({maj.accuracy_ci})" if maj else "")
            + ": none has learned from this data; train longer or check the labels."
        )
    flow = next((r for r in table.models if r.name == FLOW_STATS_MODEL), None)
    text = (
        f"Use {best.name}: the best centralised macro-F1 on this data, "
        f"{best.macro_f1_ci}; accuracy {best.accuracy_ci}"
    )
    ties = [
        r for r in table.learned if r is not best and _overlaps(r.macro_f1_iv, best.macro_f1_iv)
    ]
    if ties:
        text += (
            f" - but not clearly better than {_names(ties)}: the 95 % CIs of their macro-F1 overlap"
        )
    if flow is not None and flow is not best:
        text += f"; the flow-statistics baseline XGBoost reaches a macro-F1 of {flow.macro_f1_ci}"
    if maj is not None:
        text += f"; always predicting the majority class scores {maj.accuracy_ci} accuracy"
    return text + "."


def advise_data_parallel(dp: list[DPRow]) -> list[str]:
    """Advice on the data-parallel study (rules in the module docstring)."""
    out: list[str] = []
    table = _dp_best(dp)
    models, maj = table.models, table.majority
    if not models:
        return out
    out.append(_best_model_advice(table))
    below = [r for r in models if not r.above_majority]
    if below:
        out.append(
            f"{_names(below)}: accuracy "
            + "; ".join(f"{r.accuracy_ci} ({r.name})" for r in below)
            + " is not above the majority class"
            + (f" ({maj.accuracy_ci})" if maj else "")
            + ": not learned, so no verdict on data parallelism for "
            + ("it." if len(below) == 1 else "them.")
        )
    compared = [(r, r.chosen) for r in models if r.chosen is not None]
    worth = [(r, c) for r, c in compared if c.pays]
    for r, c in worth:
        out.append(
            f"Data parallelism pays for {r.name}: {c.workers} workers cut its epoch time "
            f"{c.speedup_ci} with accuracy equivalent within +-{r.margin_pts:g} pt "
            f"(TOST p {_p(c.tost_p)}; difference {c.diff_ci})."
        )
    out += _withheld_advice(compared)
    few = [(r, c) for r, c in compared if c.verdict == "not enough seeds"]
    if few:
        n = min(c.n_seeds for _, c in few)
        out.append(
            f"Accuracy equivalence is not judged for {_names([r for r, _ in few])}: {n} paired "
            f"seed(s), at least {MIN_SEEDS} needed (TOST over fewer seeds rests on a spread "
            f"estimated from a handful of runs); rerun with --seeds {MIN_SEEDS}."
        )
    if compared and not worth:
        out.append(
            f"Nothing here shows that data parallelism pays (a claimed speedup >= "
            f"{SPEEDUP_WORTH_IT}x with its 95 % CI above 1x, and accuracy shown equivalent): "
            "until a run on a quiet machine with enough seeds shows it, train centralised."
        )
    return out


def _overlaps(a: Interval | None, b: Interval | None) -> bool:
    """Whether two intervals overlap (an interval without bounds overlaps everything)."""
    ma, la, ha = interval_parts(a)
    mb, lb, hb = interval_parts(b)
    if math.isnan(la) or math.isnan(lb):
        return True
    return la <= hb and lb <= ha


def _p(p: float) -> str:
    return "n/a" if math.isnan(p) else ("< 0.001" if p < 0.001 else f"= {p:.3f}")


Compared = list[tuple[DPModelRow, DPPick]]


def _withheld(compared: Compared, why: str) -> Compared:
    """The compared models whose speedup is withheld for the reason ``why``."""
    return [(r, c) for r, c in compared if why in c.speedup_withheld]


def _withheld_advice(compared: Compared) -> list[str]:
    """One line per reason a measured speedup is not claimed, with what to do about it."""
    out = []
    contended = _withheld(compared, "contended")
    if contended:
        # "Contended" (analysis.compare_to_central): no seed whose centralised and
        # data-parallel runs were both undisturbed; some runs may have been.
        shares = [
            f"{100 * c.foreign_share:.0f} % for {r.name}"
            for r, c in contended
            if not math.isnan(c.foreign_share)
        ]
        used = f"; other processes used a median {', '.join(shares)} of the CPUs" if shares else ""
        out.append(
            f"No speedup is claimed for {_names([r for r, _ in contended])}: no seed has both "
            "its centralised and its data-parallel run undisturbed by other processes"
            + (used + " while the runs were timed" if used else "")
            + ". Rerun on a quiet machine (`flowsplit compare ... --rerun-contended "
            "--quiet-wait 60`): under other load an epoch time measures the CPU a run was given, "
            "not how training scales, and the centralised and data-parallel runs lose different "
            "shares of it."
        )
    for r, c in _withheld(compared, "efficiency above 100 %"):
        m = interval_parts(c.speedup)[0]
        out.append(
            f"{r.name}: {c.workers} workers measured {m:.2f}x ({100 * c.efficiency:.0f} % "
            f"efficiency): more than {c.workers}-fold from {c.workers} workers is a "
            "measurement problem (usually the centralised runs were slowed by other load), not a "
            "gain; not claimed."
        )
    for why, text in WITHHELD_LINES:
        rows = _withheld(compared, why)
        if rows:
            out.append(f"No speedup is claimed for {_names([r for r, _ in rows])}: {text}")
    return out


WITHHELD_LINES = (
    (
        "oversubscribed",
        "the workers' threads outnumber the cores, so the timing measures core sharing; use "
        "fewer workers or threads, or more cores.",
    ),
    (
        "contention not measured",
        "no contention measurement exists for their runs (made outside `flowsplit compare`, "
        "or left by an interrupted one); rerun them with `flowsplit compare` on a quiet machine.",
    ),
    (
        "too few undisturbed seeds",
        "fewer than two seeds have undisturbed timings on both sides; rerun on a quiet machine.",
    ),
)
"""The withheld speedups whose advice is one sentence: the reason, what to do."""


def _paired(a: list[float], b: list[float], seeds_a, seeds_b) -> tuple[list[float], list[float]]:
    """Per-seed values of two schemes, for the seeds both ran."""
    sa = dict(zip(seeds_a, a, strict=False))
    sb = dict(zip(seeds_b, b, strict=False))
    seeds = sorted(set(sa) & set(sb))
    return [_num(sa[s]) for s in seeds], [_num(sb[s]) for s in seeds]


def sfl_versus(res: SFLCompareResult, scheme: str, ref: str) -> Versus:
    """``scheme`` against ``ref``, paired by seed: accuracy difference and delay and bytes
    ratios, each with its 95 % interval (the statistics of the data-parallel study)."""
    a, b = res.schemes[ref], res.schemes[scheme]

    def paired(pick) -> tuple[list[float], list[float]]:
        return _paired(pick(a), pick(b), a.seeds, b.seeds)

    ra, rb = paired(lambda s: s.per_seed.final_accuracy)
    da, db = paired(lambda s: s.per_seed.delay_total_s)
    ba, bb = paired(lambda s: s.per_seed.bytes_total)
    return Versus(
        ref=ref,
        n_seeds=len(ra),
        accuracy_diff=mean_ci([y - x for x, y in zip(ra, rb, strict=True)], bounds=DIFF_BOUNDS)
        if ra
        else None,
        delay_ratio=ratio_ci(db, da) if da else None,
        bytes_ratio=ratio_ci(bb, ba) if ba else None,
    )


def _cuts_text(s: SchemeSummary) -> str:
    cuts = s.cuts or [[]]
    text = ",".join(str(c) for c in cuts[0]) if cuts and cuts[0] else "–"
    if cuts and len(cuts[0]) == 2 and cuts[0][0] == cuts[0][1]:
        text += " (two tiers: no aggregator part)"
    return text


def sfl_rows(res: SFLCompareResult) -> list[SFLRow]:
    """Per scheme: final accuracy, total delay and bytes, each with its 95 % interval."""
    rows = [
        _sfl_row(
            scheme,
            _cuts_text(s),
            s.final_accuracy,
            s.bytes_total,
            len(s.seeds),
            delay=s.delay_total_s,
            baseline=scheme in SFL_BASELINE_SCHEMES,
        )
        for scheme, s in res.schemes.items()
    ]
    # References that split nothing (``sfl compare`` trains them on the same rows and
    # seeds): no delay.
    rows += [
        _sfl_row(name, "– (baseline, no split)", b.final_accuracy, b.bytes_total, len(b.per_seed))
        for name, b in res.baselines.items()
    ]
    return rows


def _sfl_row(
    scheme: str,
    cuts: str,
    accuracy: Interval,
    nbytes: Interval,
    n_seeds: int,
    *,
    delay: Interval | None = None,
    baseline: bool = True,
) -> SFLRow:
    """A row of the split-learning table, every figure beside its interval in words."""
    return SFLRow(
        scheme=scheme,
        baseline=baseline,
        cuts=cuts,
        accuracy=accuracy.mean,
        accuracy_ci=pct_ci(accuracy),
        delay_s=interval_parts(delay)[0],
        delay_ci=_num_ci(delay, "s"),
        bytes=nbytes.mean,
        bytes_ci=_num_ci(nbytes, "MB", 1e-6),
        n_seeds=n_seeds,
    )


def _num_ci(d: Interval | None, unit: str, scale: float = 1.0) -> str:
    """A delay or a byte count with its 95 % interval, clipped at 0 (neither is negative)."""
    return in_words(
        d,
        lambda m: f"{scale * m:.1f} {unit}",
        lambda lo, hi: f"95 % CI {scale * max(0.0, lo):.1f}-{scale * hi:.1f}",
        same_seeds=True,
    )


@dataclass
class _SFLPick:
    """The split-learning scheme the advice names: the lowest delay within
    :data:`ACCURACY_TIE_PTS` of the best final accuracy, and the fewest seeds a candidate
    ran."""

    row: SFLRow
    n_seeds: int


def _sfl_pick(rows: list[SFLRow]) -> _SFLPick | None:
    cands = [
        r
        for r in rows
        if not r.baseline and not math.isnan(r.accuracy) and not math.isnan(r.delay_s)
    ]
    if not cands:
        return None
    top = max(r.accuracy for r in cands)
    close = [r for r in cands if 100 * (top - r.accuracy) <= ACCURACY_TIE_PTS]
    return _SFLPick(min(close, key=lambda r: r.delay_s), min(r.n_seeds for r in cands))


def advise_sfl(res: SFLCompareResult | None, rows: list[SFLRow]) -> list[str]:
    """The lowest-delay scheme within 1 pt of the best final accuracy, against the fair
    baselines the study ran, every change with its interval."""
    chosen = _sfl_pick(rows)
    if chosen is None:
        return []
    pick, n_seeds = chosen.row, chosen.n_seeds
    # The data-parallel study's seed rule: no recommendation from fewer seeds.
    if n_seeds >= MIN_SEEDS:
        text = f"For split learning use {pick.scheme} (cuts {pick.cuts}): "
    else:
        text = (
            f"For split learning, {pick.scheme} (cuts {pick.cuts}) is the fastest within "
            f"{ACCURACY_TIE_PTS:g} pt of the best accuracy, but {n_seeds} seed(s) make no "
            f"verdict (at least {MIN_SEEDS}; rerun with --seeds {MIN_SEEDS}): "
        )
    text += f"final accuracy {pick.accuracy_ci}, {pick.delay_ci} of simulated delay"
    ran = _sfl_setting(res) if res is not None else ""
    if ran:
        text += f" ({ran})"
    maj = next((r for r in rows if r.scheme == "majority"), None)
    if maj is not None and not math.isnan(maj.accuracy) and pick.accuracy <= maj.accuracy:
        text += f"; but it is not above the majority class ({maj.accuracy_ci}): not learned"
    lines = [text + "."]
    if res is None:
        return lines
    lines += _sfl_against(res, pick.scheme)
    if n_seeds < 2:
        lines.append("One seed per scheme: no intervals; run more seeds before relying on it.")
    return lines


def _sfl_against(res: SFLCompareResult, scheme: str) -> list[str]:
    """``scheme`` against the fair baselines, the baselines that split nothing, and where
    the planner's gain comes from: a line each, every change with its interval."""
    lines = []
    for ref in FAIR_SFL_BASELINES:
        if ref == scheme or ref not in res.schemes:
            continue
        v = sfl_versus(res, scheme, ref)
        if not v.n_seeds:
            continue
        lines.append(
            f"{scheme} against {ref} over {v.n_seeds} paired seed(s): accuracy "
            f"{pts_ci(v.accuracy_diff)}, delay {change_ci(v.delay_ratio)}, bytes "
            f"{change_ci(v.bytes_ratio)}."
        )
    refs = []
    for name, base in res.baselines.items():
        diff = base.scheme_minus_baseline.get(scheme)
        if diff:
            refs.append(f"{name} {pts_ci(diff)}")
    if refs:
        lines.append(
            f"{scheme}'s final accuracy against the baselines that split nothing, "
            "paired by seed: " + "; ".join(refs) + "."
        )
    parts = [
        f"{r.part}: accuracy {pts_ci(r.accuracy_diff)}, delay "
        f"{change_ci(r.delay_ratio)}, bytes {change_ci(r.bytes_ratio)}"
        for r in res.ablation
    ]
    if parts:
        lines.append("Where the planner's gain over HSFL comes from: " + "; ".join(parts) + ".")
    return lines


def _sfl_setting(res: SFLCompareResult) -> str:
    """What the split-learning figures are of: ``cnn over the seq view, 4 rounds``."""
    settings = res.settings
    model, view, rounds = settings.model, settings.view, settings.rounds
    if not model:
        return ""
    view_text = f"the {view} view" if view else "its default view"
    return f"{model} over {view_text}" + (f", {rounds} rounds" if rounds else "")


def advise(
    dp: list[DPRow],
    sfl: list[SFLRow],
    sfl_results: SFLCompareResult | None = None,
) -> list[str]:
    """Plain-language advice from the two tables (rules in the module docstring)."""
    return advise_data_parallel(dp) + advise_sfl(sfl_results, sfl)


def rules_text(margin_pts: float = 1.0) -> str:
    """The advice's rules in one paragraph, for the page."""
    return (
        "How the advice is chosen: the model with the best centralised macro-F1 among those above "
        "the majority-class rate (the lower end of their 95 % CI); data parallelism when its "
        "speedup is claimed (timings neither contended nor oversubscribed, efficiency at most "
        f"100 %), >= {SPEEDUP_WORTH_IT}x with a 95 % CI above 1x, and accuracy shown equivalent "
        f"(TOST, +-{margin_pts:g} pt, at least {MIN_SEEDS} seeds); for split learning the "
        f"lowest-delay scheme within {ACCURACY_TIE_PTS:g} pt of the best final accuracy, compared "
        f"with {', '.join(FAIR_SFL_BASELINES)} where the study ran them. Intervals are 95 % "
        "(the accuracy difference: the TOST interval, 90 %), scores clipped to 0-100 %."
    )


def overview_content(dp_dir: Path | None, sfl_dir: Path | None) -> OverviewContent:
    """Everything the overview page shows, from the studies in ``dp_dir`` and ``sfl_dir``
    (either may be None or hold no results): rows, advice, rules and which were quick."""
    dp_res = _study(dp_dir, read_compare_result)
    sfl_res = _study(sfl_dir, read_sfl_compare_result)
    dp = data_parallel_rows(dp_res) if dp_res else []
    sfl = sfl_rows(sfl_res) if sfl_res else []
    margin = 100 * dp_res.margin if dp_res and dp_res.analysis.models else 1.0
    quick = [
        name
        for name, r in (("data-parallel", dp_res), ("split learning", sfl_res))
        if r and r.quick
    ]
    picture, caption = overview_picture(dp_res, sfl_res)
    return OverviewContent(
        advice=advise(dp, sfl, sfl_res),
        rules=rules_text(margin),
        data_parallel=[jsonable(dict(r)) for r in dp],
        split_learning=[jsonable(dict(r)) for r in sfl],
        quick=quick,
        verdict=overview_verdict(dp, sfl),
        picture=picture,
        picture_caption=caption,
    )


def overview_verdict(dp: list[DPRow], sfl: list[SFLRow]) -> str:
    """The overview's one-line answer, by the advice's rules: the model to use, whether
    to train it data-parallel, and the split-learning scheme (named, not recommended,
    under the seed rule)."""
    parts = []
    table = _dp_best(dp)
    best = table.best
    if best is not None:
        text = f"Use {best.name} (macro-F1 {100 * best.macro_f1:.1f} %)"
        if best.chosen is not None and best.chosen.pays:
            text += f", data-parallel on {best.chosen.workers} workers (it pays)"
        elif any(r.chosen is not None for r in table.models):
            text += ", trained centralised: data parallelism is not shown to pay here"
        parts.append(text)
    elif table.models:
        parts.append("No model is above the majority class: none has learned from this data")
    chosen = _sfl_pick(sfl)
    if chosen is not None:
        row, n = chosen.row, chosen.n_seeds
        what = f"{row.scheme} ({row.accuracy_ci.split(' (')[0]} accuracy, lowest delay)"
        if n >= MIN_SEEDS:
            parts.append(f"for split learning use {what}")
        else:
            parts.append(
                f"for split learning {what} leads, but {n} seed(s) make no verdict "
                f"(rerun with --seeds {MIN_SEEDS})"
            )
    if not parts:
        return ""
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def overview_picture(
    dp_res: CompareResult | None, sfl_res: SFLCompareResult | None
) -> tuple[Any, str]:
    """The overview's one picture and its caption: the split-learning study's trade-off
    (final accuracy against delay and bytes per scheme, baselines marked), or without
    that study the data-parallel one (accuracy against speedup); ``(None, "")`` with
    neither."""
    if sfl_res is not None and sfl_res.schemes:
        from flowsplit.experiments.sfl.report import tradeoff_caption, tradeoff_figure

        return tradeoff_figure(sfl_res), "Split learning: " + tradeoff_caption(sfl_res)
    if dp_res is not None and dp_res.analysis.models:
        from flowsplit.experiments.dp.plots import verdict_chart

        return verdict_chart(dp_res), (
            "Data-parallel study: test accuracy (mean, 95 % CI) against the epoch-time "
            "speedup over centralised (centralised at 1x)."
        )
    return None, ""
