"""`flowsplit demo`: the main job on the embedded lab capture.

Stages, each writing under ``OUT``:

1. ``OUT/dataset``: prepare the lab capture that ships in ``demo/captures``
   (one folder per class) and print the dataset summary;
2. ``OUT/data-parallel``: CNN, LSTM and XGBoost (``--models`` adds ConvLSTM and
   ConvGRU) trained centralised and with 2 data-parallel workers over 3 seeds and 3
   epochs (`flowsplit compare`; its runs share long-lived processes, one set per
   worker count, so a run costs its training, not an interpreter and torch's import);
3. ``OUT/split-learning``: SFL, HSFL, the delay-only planner and the
   accuracy-aware planner on a heterogeneous topology (`flowsplit sfl compare`,
   quick settings but 8 rounds), the CNN over the ``seq`` view by default
   (``--sfl-view``): its delays and bytes are simulated, not timed, and over the
   784-byte view each step costs about 8 times the compute;
4. ``OUT/report.html`` (+ ``.md``, ``.json``): one page that links both studies and
   says in plain words what to use.

Finished stages are reused when the demo is run again (both comparisons resume
cell by cell); ``--fresh`` starts over.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from flowsplit.choices import seeds_field
from flowsplit.config_args import (
    add_config_arguments,
    cli,
    command_parser,
    config_from_args,
    path_arg,
)
from flowsplit.errors import ConfigError, InputError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CAPTURES = REPO_ROOT / "demo" / "captures"
MODELS = ("cnn", "lstm", "xgboost")  # the recurrent-convolutional pair takes minutes more
SFL_VIEW = "seq"
"""The split-learning stage's view: packet sizes, directions and gaps (32 x 10 per flow)."""
SFL_ROUNDS = 8
"""Rounds of the split-learning runs: over ``seq`` the schemes reach 90-94 % in 8 (about
80 % in sfl compare's quick recipe's rounds), for about a minute of CPU on the lab capture."""
SFL_VIEWS = ("default", "seq", "bytes", "pkt_bytes")
"""``--sfl-view`` choices: the model's own, or a tensor view (``data.store.TENSOR_VIEWS``;
not imported here: it pulls in pandas, which ``flowsplit --help`` does not need)."""
SKIPPABLE = ("data-parallel", "split-learning")
"""Stages ``--skip`` can leave out."""


def _model_list(text: str) -> tuple[str, ...]:
    """``--models``: the comma list of model names (checked by :class:`DemoPlan`)."""
    return tuple(m.strip() for m in text.split(",") if m.strip())


def _stages(text: str) -> frozenset[str]:
    """``--skip``: the comma list of stages (checked by :class:`DemoPlan`)."""
    return frozenset(s.strip() for s in text.split(",") if s.strip())


@dataclass
class DemoPlan:
    """What the demo runs: ``flowsplit demo``'s options (one per field), checked."""

    out: Path = field(
        default=Path("runs/demo"),
        metadata=cli(flag="-o", aliases=("--out",), parse=path_arg, help="output directory"),
    )
    captures: Path = field(
        default=DEFAULT_CAPTURES, metadata=cli(parse=path_arg, help="lab capture folder")
    )
    seeds: tuple[int, ...] = seeds_field(
        (0, 1, 2),
        ", for every cell of each comparison (an accuracy-equivalence verdict needs 5; "
        "with fewer the advice says 'not enough seeds')",
    )
    models: tuple[str, ...] = field(
        default=MODELS,
        metadata=cli(
            parse=_model_list,
            help="models of the data-parallel study (all five: cnn,lstm,convlstm,convgru,xgboost)",
        ),
    )
    epochs: int = field(default=3, metadata=cli(help="epochs per neural run"))
    sfl_model: str = field(default="cnn", metadata=cli(help="model cut for split learning"))
    sfl_view: str | None = field(
        default=SFL_VIEW,
        metadata=cli(
            choices=SFL_VIEWS,
            help="dataset view of the split-learning model ('default': the model's own; "
            "over the CNN's bytes view the stage takes several times longer)",
        ),
    )
    """None (``default`` on the command line): the model's own view."""
    sfl_rounds: int = field(
        default=SFL_ROUNDS, metadata=cli(help="federated rounds of every split-learning run")
    )
    skip: frozenset[str] = field(
        default=frozenset(),
        metadata=cli(
            parse=_stages,
            show=lambda _: "none",
            help="comma-separated stages to skip: data-parallel, split-learning",
        ),
    )
    fresh: bool = field(default=False, metadata=cli(help="delete OUT first instead of resuming"))
    quiet: bool = field(default=False, metadata=cli(help="no progress bars"))

    def __post_init__(self) -> None:
        """One-line errors before any work."""
        from flowsplit.experiments.dp.config import ALL_MODELS

        if self.sfl_view == "default":
            self.sfl_view = None
        self.seeds, self.models = tuple(self.seeds), tuple(self.models)
        self.skip = frozenset(self.skip)
        if not Path(self.captures).is_dir():
            raise InputError(
                self.captures, "lab capture folder not found (run from a flowsplit checkout)"
            )
        unknown = sorted(self.skip - set(SKIPPABLE))
        if unknown:  # before any work: a typo would otherwise run the stage it meant to skip
            raise ConfigError(f"--skip {','.join(unknown)}: choose from {', '.join(SKIPPABLE)}")
        if self.epochs < 1:  # --seeds is checked by parse_seeds
            raise ConfigError(f"--epochs must be >= 1, got {self.epochs}")
        if self.sfl_rounds < 1:
            raise ConfigError(f"--sfl-rounds must be >= 1, got {self.sfl_rounds}")
        unknown = [m for m in self.models if m not in ALL_MODELS]
        if unknown or not self.models:
            raise ConfigError(
                f"--models {','.join(self.models)!r}: choose from {', '.join(ALL_MODELS)}"
            )
        neural = [m for m in ALL_MODELS if m != "xgboost"]  # split learning cuts a network
        if self.sfl_model not in neural:
            raise ConfigError(f"--sfl-model {self.sfl_model!r}: choose from {', '.join(neural)}")


def register(sub: argparse._SubParsersAction) -> None:
    """run the main job on the embedded lab capture

    Prepare the embedded lab capture, compare centralised and data-parallel training (CNN,
    LSTM, XGBoost by default), compare split federated learning schemes, and write one
    report that says what to use.
    """
    p = command_parser(sub, "demo", register)
    add_config_arguments(p, DemoPlan)
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """``flowsplit demo``: the four stages (see the module docstring); 0 when all finished."""
    page, advice, total_s = demo(config_from_args(DemoPlan, args))
    for line in advice:
        print(f"- {line}")
    print(f"\ndemo finished in {total_s:.0f} s; open {page}")
    return 0


def demo(plan: DemoPlan) -> tuple[Path, list[str], float]:
    """Run the demo's stages into ``plan.out``: the overview page, its advice and the
    seconds it took."""
    # Imported here, not at the top: the CLI imports this module to register the
    # sub-command, and these pull in pandas, matplotlib and torch (seconds), which
    # `flowsplit --help` does not need. No cycle is involved.
    from flowsplit.experiments.advice import overview_content
    from flowsplit.report.overview import write_overview

    out = plan.out
    if plan.fresh and out.exists():
        _clear_demo_outputs(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    ds = _prepare(plan, timings)
    dp_dir, sfl_dir = _studies(plan, timings)
    _stage("4/4 the report", plan.quiet)
    timings["total"] = time.perf_counter() - t0
    content = overview_content(dp_dir, sfl_dir)
    page = write_overview(
        out,
        manifest=ds.manifest,
        dp_dir=dp_dir,
        sfl_dir=sfl_dir,
        timings=timings,
        content=content,
    )
    return page, list(content.advice), timings["total"]


def _prepare(plan: DemoPlan, timings: dict[str, float]):
    """Stage 1: the lab capture prepared (once) into ``OUT/dataset``; the dataset."""
    from flowsplit.data.commands import format_summary
    from flowsplit.data.prepare import PrepareOptions, prepare_dataset
    from flowsplit.data.store import load_dataset

    _stage("1/4 prepare the lab capture", plan.quiet)
    dataset_dir = plan.out / "dataset"
    t = time.perf_counter()
    if not (dataset_dir / "manifest.json").exists():
        prepare_dataset([plan.captures], dataset_dir, PrepareOptions(), progress=not plan.quiet)
    ds = load_dataset(dataset_dir)
    print(format_summary(ds.manifest, dataset_dir, meta=ds.meta), flush=True)
    timings["prepare"] = time.perf_counter() - t
    return ds


def _studies(plan: DemoPlan, timings: dict[str, float]) -> tuple[Path | None, Path | None]:
    """Stages 2 and 3 (those not skipped): the two comparisons; their folders."""
    dataset_dir, out = plan.out / "dataset", plan.out
    dp_report = sfl_report = None
    if "data-parallel" not in plan.skip:
        from flowsplit.experiments.dp.compare import run_compare

        dp_report = _timed_study(
            "2/4 centralised vs data-parallel training (1 and 2 workers)",
            "data-parallel",
            timings,
            plan.quiet,
            lambda: run_compare(
                dataset_dir,
                out / "data-parallel",
                models=list(plan.models),
                workers=(1, 2),
                seeds=list(plan.seeds),
                same_cores_seeds=1,  # one same-cores centralised cell per model
                epochs=plan.epochs,
                quick=True,
                progress=not plan.quiet,
            ),
        )
    if "split-learning" not in plan.skip:
        from flowsplit.experiments.sfl.compare import run_sfl_compare

        sfl_report = _timed_study(
            "3/4 split federated learning: SFL, HSFL, delay-only, accuracy-aware",
            "split-learning",
            timings,
            plan.quiet,
            lambda: run_sfl_compare(
                dataset_dir,
                out / "split-learning",
                model=plan.sfl_model,
                view=plan.sfl_view,
                topology="heterogeneous",
                rounds=plan.sfl_rounds,
                seeds=tuple(plan.seeds),
                quick=True,
                quiet=plan.quiet,
            ),
        )
    return dp_report and dp_report.parent, sfl_report and sfl_report.parent


def _timed_study(title: str, name: str, timings: dict[str, float], quiet: bool, run) -> Path:
    """Stage ``title``: ``run()`` a study, time it as ``timings[name]``; its report path."""
    _stage(title, quiet)
    t = time.perf_counter()
    report = run()
    timings[name] = time.perf_counter() - t
    print(f"report: {report}", flush=True)
    return report


DEMO_OUTPUTS = (
    "dataset",
    "data-parallel",
    "split-learning",
    "report.html",
    "report.md",
    "report.json",
)


def _clear_demo_outputs(out: Path) -> None:
    """``--fresh``: delete what an earlier demo wrote in OUT, and refuse if OUT holds more."""
    if not out.is_dir():
        raise ConfigError(f"{out} exists and is not a directory; choose another -o")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in DEMO_OUTPUTS)
    if foreign:
        raise ConfigError(
            f"{out} holds more than a demo's outputs ({', '.join(foreign[:5])}); "
            "--fresh deletes only a demo directory: choose another -o"
        )
    for name in DEMO_OUTPUTS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def _stage(title: str, quiet: bool) -> None:
    if not quiet:
        print(f"\n== {title} ==", flush=True)
