"""The CLI's shared behaviour: one-line errors, --debug anywhere, the demo's --fresh."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flowsplit.cli import main
from flowsplit.errors import InputError


def test_errors_are_one_line_and_debug_works_after_the_sub_command(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["inspect", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flowsplit: error: {missing}")
    with pytest.raises(InputError):  # --debug shows the exception, wherever it is given
        main(["inspect", str(missing), "--debug"])
    with pytest.raises(InputError):
        main(["--debug", "inspect", str(missing)])


def test_demo_fresh_refuses_a_directory_that_is_not_a_demo(tmp_path, capsys):
    (tmp_path / "thesis.tex").write_text("precious")
    rc = main(["demo", "-o", str(tmp_path), "--fresh", "--quiet"])
    assert rc == 2 and "--fresh deletes only a demo directory" in capsys.readouterr().err
    assert (tmp_path / "thesis.tex").read_text() == "precious"


# --- options generated from the config dataclasses -------------------------------------


def _subparsers(parser, prefix=()):
    """``{("sfl", "plan"): parser, ...}`` of every sub-command of ``parser``."""
    import argparse

    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[(*prefix, name)] = sub
                found.update(_subparsers(sub, (*prefix, name)))
    return found


def test_every_config_field_is_an_option_of_its_command_with_its_docstring():
    # Prepare: each command and the dataclass its options come from.
    from dataclasses import fields, is_dataclass

    from flowsplit.cli import build_parser
    from flowsplit.config_args import field_docs
    from flowsplit.data.labels import LabelSpec
    from flowsplit.data.prepare import PrepareOptions
    from flowsplit.experiments.dp.config import CompareConfig
    from flowsplit.experiments.sfl.config import SFLCompareConfig
    from flowsplit.planner.study_config import StudyConfig
    from flowsplit.train.config import TrainConfig

    commands = _subparsers(build_parser())
    cases = [
        (("train",), TrainConfig, {"model_options"}),  # as --model-option KEY=VALUE
        (("prepare",), PrepareOptions, {"labels", "label_column"}),  # LabelSpec; shared
        (("prepare",), LabelSpec, {"label_column"}),
        (("compare",), CompareConfig, set()),
        (("sfl", "plan"), StudyConfig, {"only_cuts"}),  # from --max-leakage
        (("sfl", "compare"), SFLCompareConfig, {"only_cuts"}),
    ]
    for command, cls, elsewhere in cases:
        parser = commands[command]
        # Execute
        dests = {a.dest for a in parser._actions}
        helptext = " ".join(parser.format_help().split())
        # Assert: one option per field (a nested config's: one per field of its);
        # a field's docstring is its help unless overridden.
        nested = {f.name: f.default_factory for f in fields(cls) if is_dataclass(f.default_factory)}
        names = {f.name for f in fields(cls)} - set(nested)
        names |= {f.name for kind in nested.values() for f in fields(kind)}
        missing = names - elsewhere - dests
        assert not missing, (command, missing)
        docs = field_docs(cls)
        for kind in nested.values():
            docs |= field_docs(kind)
        hits = [f for f, doc in docs.items() if " ".join(doc.split()[:3]) in helptext]
        assert len(hits) >= len(names) // 2, (command, hits)


def test_help_of_every_command_shows_a_default_once_and_never_as_none():
    import argparse
    import re

    from flowsplit.cli import build_parser

    for command, parser in _subparsers(build_parser()).items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                continue
            text = formatter._expand_help(action)
            assert text.count("(default") <= 1, (command, action.dest, text)
            assert not re.search(r"\bNone\b", text), (command, action.dest, text)


def test_seeds_rounds_and_out_mean_the_same_in_compare_and_sfl_compare():
    from flowsplit.cli import build_parser

    parser = build_parser()
    compare = ["compare", "DS", "-o", "OUT"]
    sfl = ["sfl", "compare", "DS", "-o", "OUT"]
    for seeds, expected in (("3", (0, 1, 2)), ("0,4", (0, 4)), ("7", tuple(range(7)))):
        assert parser.parse_args([*compare, "--seeds", seeds]).seeds == expected
        assert parser.parse_args([*sfl, "--seeds", seeds]).seeds == expected
    commands = _subparsers(parser)
    helps = [
        next(a.help for a in commands[c]._actions if a.dest == "seeds")
        for c in (("compare",), ("sfl", "compare"))
    ]
    assert helps[0].split(" (default")[0] == helps[1].split(" (default")[0]
    for bad in ("0", "-2", "a,b"):
        assert main([*compare, "--seeds", bad]) == 2
        assert main([*sfl, "--seeds", bad]) == 2


def test_old_option_names_still_set_the_fields(tmp_path):
    # Prepare: the spellings the commands had before their options were generated.
    from flowsplit.cli import build_parser
    from flowsplit.data.commands import options_from_args
    from flowsplit.train.commands import config_from_args

    parser = build_parser()
    # Execute
    cfg, resume = config_from_args(
        parser.parse_args(
            ["train", str(tmp_path), "-m", "cnn", "-o", "R", "--max-epochs", "3", "-q",
             "--timeout", "5", "--scale-lr", "--model-option", "channels=[4]"]
        )
    )  # fmt: skip
    opts = options_from_args(
        parser.parse_args(
            ["prepare", "IN", "-o", "DS", "--no-mask-ports", "--no-reassembly", "--no-dedup",
             "--val", "0.2", "--test", "0.1", "--views", "seq,stats", "--classes", "a,b",
             "--exclude-classes", "c", "--label-by", "port", "--label-column", "app"]
        )
    )  # fmt: skip
    compare = parser.parse_args(
        ["compare", "DS", "-o", "OUT", "--margin", "2", "--workers", "2",
         "--train-arg=--lr=0.01", "--cell-timeout", "9", "--models", "cnn,xgboost"]
    )  # fmt: skip
    # Assert
    assert not resume and cfg.epochs == 3 and cfg.quiet and cfg.timeout_s == 5.0
    assert cfg.scale_lr and cfg.model_options == {"channels": [4]} and cfg.batch_size == 64
    assert (opts.mask_port, opts.reassemble, opts.dedup, opts.mask_ip) == (
        False,
        False,
        False,
        True,
    )
    assert (opts.val_frac, opts.test_frac, opts.views) == (0.2, 0.1, ("seq", "stats"))
    assert opts.classes == ("a", "b") and opts.exclude_classes == ("c",)
    assert opts.labels.by == "port" and opts.labels.label_column == opts.label_column == "app"
    assert compare.margin == 0.02 and compare.workers == (2,) and compare.cell_timeout_s == 9.0
    assert compare.train_args == ["--lr=0.01"] and compare.models == ("cnn", "xgboost")


def test_train_resume_sees_only_the_options_given(tmp_path):
    from flowsplit.cli import build_parser
    from flowsplit.config_args import cli_fields, config_values
    from flowsplit.train.config import TrainConfig

    args = build_parser().parse_args(["train", "--resume", str(tmp_path), "--epochs", "9"])
    given = config_values(args, [f.name for f in cli_fields(TrainConfig)], given_only=True)
    assert given == {"epochs": 9}


def test_help_imports_no_torch_and_the_lazy_policies_resolve():
    # --help must stay fast: building the parser imports no torch (a subprocess, so the
    # test's own imports do not count); the policies it registers load when a run asks.
    code = (
        "import sys; from flowsplit.cli import build_parser; build_parser(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    from flowsplit.cli import build_parser
    from flowsplit.federated.assignment import AssignmentPolicy
    from flowsplit.federated.commands import run_policy
    from flowsplit.federated.config import SFLConfig
    from flowsplit.planner.replan import ReplanPolicy

    build_parser()
    assert type(run_policy(SFLConfig())) is AssignmentPolicy  # --fail's reassignment
    assert isinstance(run_policy(SFLConfig(replan="every-round")), ReplanPolicy)


# --- one option name, one meaning ------------------------------------------------------

# Options whose value parser differs between commands although they mean the same thing:
# each with the reason. Every other shared option parses with the same function.
SAME_MEANING_OTHER_PARSER = {
    "--workers": "compare runs train's --workers over a comma list of worker counts",
    "--models": "demo splits the same comma list of model names itself",
    "--capacity": "sfl plan/compare parse the same comma list of integers themselves",
    "--train-limit": "sfl privacy also takes 'all'",
}


def _meaning(action) -> tuple:
    """What an option is, as far as a parser can tell: flag or value (or repeated),
    the choices, the field it sets (``n_clients`` = ``clients``) and the value parser."""
    import argparse

    if action.nargs == 0:
        kind = "flag"
    elif isinstance(action, argparse._AppendAction):
        kind = "repeated"
    else:
        kind = "value"  # train --resume RUN and sfl run --resume [OUT] alike
    parser = getattr(action.type, "__name__", "str")
    parser = "text" if parser in ("str", "Path") else parser
    parser = "path" if parser in ("path_arg", "path_text") else parser  # Path or str
    choices = tuple(action.choices) if action.choices else None
    return kind, choices, action.dest.removeprefix("n_"), parser


def _options() -> dict[str, dict[tuple[str, ...], tuple]]:
    """``{option: {command: meaning}}`` of every option of every command."""
    from flowsplit.cli import build_parser
    from flowsplit.config_args import is_renamed

    seen: dict[str, dict[tuple[str, ...], tuple]] = {}
    for command, parser in _subparsers(build_parser()).items():
        for action in parser._actions:
            if action.dest == "help" or is_renamed(action):
                continue
            for name in action.option_strings:
                seen.setdefault(name, {})[command] = _meaning(action)
    return seen


def test_an_option_name_means_the_same_in_every_command():
    options = _options()
    shared = {name: uses for name, uses in options.items() if len(uses) > 1}
    # The names the issue found changing meaning are shared, so the walk reaches them.
    assert {"-o", "--out", "--rounds", "--workers", "--seeds", "--quiet"} <= set(shared)
    for name, uses in shared.items():
        if name in SAME_MEANING_OTHER_PARSER:
            # Assert: the same but for the parser, and the parsers do differ (no stale entry).
            assert len({m[:3] for m in uses.values()}) == 1, (name, uses)
            assert len({m[3] for m in uses.values()}) > 1, (name, "no longer differs")
        else:
            assert len(set(uses.values())) == 1, (name, uses)
    # The old clashes: --backend is train's process group only, --rounds federated only.
    assert set(options["--backend"]) == {("train",)} and set(options["--mode"]) == {("sfl", "run")}
    assert set(options["--rounds"]) == {
        ("sfl", "run"),
        ("sfl", "plan"),
        ("sfl", "compare"),
        ("sfl", "probe"),  # probe builds the run's SFLConfig: the same --rounds
        ("testbed", "compare"),  # the rounds of each sfl run it starts
    }
    assert set(options["--boost-rounds"]) == {("train",), ("compare",)}
    assert {("evaluate",), ("predict",), ("sfl", "plan")} <= set(shared["-o"])


@pytest.mark.parametrize(
    ("argv", "new"),
    [
        (["sfl", "run", "{t}/ds", "-o", "{t}/o", "--backend", "dist"], "--mode"),
        (["train", "{t}/ds", "-m", "xgboost", "-o", "{t}/o", "--rounds", "5"], "--boost-rounds"),
        (["compare", "{t}/ds", "-o", "{t}/o", "--rounds", "5"], "--boost-rounds"),
        (["evaluate", "{t}/run", "{t}/ds", "--output", "{t}/m.json"], "--out"),
        (["predict", "{t}/run", "{t}/x.pcap", "--output", "{t}/p.csv"], "--out"),
        (["sfl", "privacy", "{t}/ds", "-o", "{t}/o", "--cuts", "1"], "--client-cuts"),
        (["sfl", "privacy", "{t}/ds", "-o", "{t}/o", "--weights", "{t}/run"], "--victim-run"),
    ],
)
def test_a_renamed_option_is_one_line_naming_its_new_name(tmp_path, capsys, argv, new):
    old = next(a for a in argv if a in ("--backend", "--rounds", "--output", "--cuts", "--weights"))
    rc = main([a.format(t=tmp_path) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"{old} is now {new} (" in err[0] and "Traceback" not in err[0], err
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_the_new_names_set_the_fields_the_old_ones_did(tmp_path):
    from flowsplit.cli import build_parser
    from flowsplit.train.commands import config_from_args

    parser = build_parser()
    cfg, _ = config_from_args(
        parser.parse_args(["train", "DS", "-m", "xgboost", "-o", "R", "--boost-rounds", "7"])
    )
    assert cfg.rounds == 7
    assert parser.parse_args(["compare", "DS", "-o", "O", "--boost-rounds", "9"]).rounds == 9
    from flowsplit.federated.commands import run_config

    assert parser.parse_args(["sfl", "run", "DS", "-o", "O", "--mode", "dist"]).mode == "dist"
    assert run_config(parser.parse_args(["sfl", "run", "DS", "-o", "O"])).mode == "sim"
    assert parser.parse_args(["evaluate", "R", "DS", "--out", "m.json"]).out == "m.json"
    assert parser.parse_args(["predict", "R", "x.pcap", "-o", "p.csv"]).out == "p.csv"
    privacy = parser.parse_args(
        ["sfl", "privacy", "DS", "-o", "O", "--client-cuts", "1,2", "--victim-run", "R"]
    )
    assert privacy.cuts == (1, 2) and str(privacy.victim_run) == "R"
    assert parser.parse_args(["sfl", "privacy", "DS", "-o", "O"]).cuts is None  # all


OTHER_METAVAR = {
    "-o": {"OUT", "RUN", "DIR", "FILE"},  # what is written: a folder, a run, a file
    "--out": {"OUT", "RUN", "DIR", "FILE"},
    "--resume": {"RUN", "OUT"},  # train resumes its RUN, sfl run its -o OUT
}
"""Options whose metavar names what the command writes or reads (one of these)."""


def _metavar(action) -> str | None:
    if action.nargs == 0:
        return None
    mv = action.metavar
    if isinstance(mv, tuple):
        mv = " ".join(mv)
    return mv or action.dest.upper()


def test_every_option_has_help_one_metavar_per_name_and_required_ones_are_marked():
    # Prepare: every option of every command, walked from the real parser.
    import argparse

    from flowsplit.cli import build_parser
    from flowsplit.config_args import is_renamed

    metavars: dict[str, dict[tuple[str, ...], str | None]] = {}
    datasets: dict[tuple[str, ...], str | None] = {}
    for command, parser in _subparsers(build_parser()).items():
        formatter = parser._get_formatter()
        usage = parser.format_usage()
        for action in parser._actions:
            if action.dest == "help" or is_renamed(action) or action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                continue
            # Assert: help text, and the default shown where there is one to show.
            assert action.help and action.help.strip(), (command, action.dest, "no help")
            text = formatter._expand_help(action)
            plain = action.default in (None, False, [], (), "", argparse.SUPPRESS)
            if action.option_strings and action.nargs != 0 and not plain:
                assert "(default" in text, (command, action.dest, text)
            for name in action.option_strings:
                metavars.setdefault(name, {})[command] = _metavar(action)
            if action.required and action.option_strings:  # marked: outside [brackets]
                first = action.option_strings[0]  # the name the usage line shows
                assert f"[{first} " not in usage and f" {first} " in usage, (command, first)
            if not action.option_strings and action.dest == "dataset":
                datasets[command] = _metavar(action)
    # Assert: a name has one metavar in every command, and DATASET is one name.
    for name, uses in metavars.items():
        if name in OTHER_METAVAR:  # still one metavar per kind of thing named
            assert set(uses.values()) <= OTHER_METAVAR[name], (name, uses)
        elif name not in SAME_MEANING_OTHER_PARSER:  # (their values differ in form)
            assert len(set(uses.values())) == 1, (name, uses)
    assert set(datasets.values()) == {"DATASET"}, datasets
    assert {("sfl", "run"), ("sfl", "privacy"), ("compare",), ("train",)} <= set(datasets)
