"""Options generated from configs and command texts written once (issue 28 item 2)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import inspect
from dataclasses import fields
from pathlib import Path

import pytest

from flowsplit.config_args import add_config_arguments, cli, config_from_args
from flowsplit.errors import ConfigError, FlowsplitError

ROOT = Path(__file__).resolve().parents[1]


def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from flowsplit.cli import build_parser

    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[(*prefix, name)] = sub
                    walk(sub, (*prefix, name))

    walk(build_parser(), ())
    return found


def test_a_commands_summary_and_description_are_its_builders_docstring():
    from flowsplit.experiments.sfl.commands import add_compare_parser
    from flowsplit.train.commands import TRAIN_DESCRIPTION

    parsers = _parsers()
    summary, _, rest = inspect.cleandoc(add_compare_parser.__doc__).partition("\n")
    assert parsers[("sfl", "compare")].description == " ".join(rest.split())
    sfl = next(
        a for a in _parsers()[("sfl",)]._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert {c.dest: c.help for c in sfl._choices_actions}["compare"] == summary
    # A description with a layout of its own (examples) is kept as written.
    assert parsers[("train",)].description == TRAIN_DESCRIPTION


def test_testbed_compare_options_are_its_study_config_with_nothing_copied():
    from flowsplit.cli import build_parser
    from flowsplit.config_args import config_from_args
    from flowsplit.testbed.commands import CompareOptions
    from flowsplit.testbed.compare import _model_args

    args = build_parser().parse_args(
        ["testbed", "compare", "T", "D", "-o", "x.json", "--seeds", "0,3", "--rounds", "3",
         "--model-option", "channels=[4,8]", "--model-option", "kind=small", "--truth",
         "--pilots", "2"]
    )  # fmt: skip
    opts = config_from_args(CompareOptions, args)
    assert opts.seeds == (0, 3) and opts.truth is True and opts.model == "cnn"
    # The study it plans with: every field a study has, under the study's own names
    # (--pilots is n_pilots), the rest the study's defaults.
    cfg = opts.study_config("topo.toml")
    assert (cfg.model, cfg.model_options) == ("cnn", {"channels": [4, 8], "kind": "small"})
    assert (cfg.run.rounds, cfg.run.batch_size, cfg.run.train_limit) == (3, 16, 384)
    assert (cfg.n_pilots, cfg.pilot_steps, cfg.topology) == (2, 24, "topo.toml")
    assert cfg.planner.fixed_cuts == (1, 2) and cfg.pilot_train_limit is None
    # Each sfl run it starts is given the options as --model-option texts again.
    assert _model_args(opts) == [
        "--model", "cnn", "--model-option", "channels=[4, 8]", "--model-option", "kind=small"
    ]  # fmt: skip


def test_demo_options_are_the_fields_of_its_plan_and_checked_there(tmp_path):
    from flowsplit.cli import build_parser
    from flowsplit.config_args import config_from_args
    from flowsplit.demo import DemoPlan

    dests = {a.dest for a in _parsers()[("demo",)]._actions}
    assert {f.name for f in fields(DemoPlan)} <= dests
    args = build_parser().parse_args(["demo", "-o", str(tmp_path), "--sfl-view", "default"])
    plan = config_from_args(DemoPlan, args)
    assert plan.sfl_view is None and plan.out == tmp_path and plan.seeds == (0, 1, 2)
    with pytest.raises(ConfigError, match="--skip everything"):
        DemoPlan(out=tmp_path, skip=frozenset({"everything"}))
    with pytest.raises(FlowsplitError, match="lab capture folder not found"):
        DemoPlan(out=tmp_path, captures=tmp_path / "none")


def test_the_leakage_budget_options_come_from_their_dataclass():
    from flowsplit.cli import build_parser
    from flowsplit.planner.study_config import LeakageBudget, StudyConfig, study_options

    names = {f.name for f in fields(LeakageBudget)}
    for command in (("sfl", "plan"), ("sfl", "compare")):
        assert names <= {a.dest for a in _parsers()[command]._actions}, command
    args = build_parser().parse_args(["sfl", "plan", "DS", "-o", "p.json", "--rounds", "3"])
    # Only what was given (the mode's defaults fill the rest), in its nested config
    # (rounds: the runs'), and no budget: no only_cuts.
    assert study_options(args, StudyConfig) == {"run": {"rounds": 3}}


def _counter():
    spec = importlib.util.spec_from_file_location(
        "count_config_copies", ROOT / "scripts" / "count_config_copies.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copies_in(tmp_path, source: str, classes: set[str]) -> list[str]:
    """What the copy counter reports in a module of ``source``, sorted."""
    src = tmp_path / "m.py"
    src.write_text(source)
    return sorted(what for _, _, what in _counter().copies(src, classes))


def test_the_copy_counter_leaves_out_a_runtime_objects_setter_only(tmp_path):
    found = _copies_in(
        tmp_path,
        "class Topology:\n"
        "    def with_trace(self, trace):\n"
        "        return replace(self, trace=tuple(trace))\n"
        "class RunConfig:\n"
        "    def with_seed(self, seed):\n"
        "        return replace(self, seed=seed)\n"
        "def run(models, cfg):\n"
        "    return RunConfig(models=list(models), epochs=cfg.epochs)\n",
        {"RunConfig"},
    )
    # Assert: the runtime object's setter is not a copy; a config's setter and a config
    # rebuilt from parameters and another config are.
    assert found == [
        "RunConfig(epochs=cfg.epochs)",
        "RunConfig(models=models)",
        "replace(seed=seed)",
    ]


def test_the_copy_counter_counts_an_options_dicts_keys_into_a_resolved_config(tmp_path):
    found = _copies_in(
        tmp_path,
        "def plans(opts, saved):\n"
        "    cfg = resolve_study_config(False, rounds=opts['rounds'], n_pilots=opts['pilots'])\n"
        "    old = RunConfig(run=Config.from_dict(saved['config']))\n"
        "    return {'rounds': opts['rounds'], 'seed': saved['seed']}\n",
        {"RunConfig"},
    )
    # Assert: an options dict's keys copied into a resolve...config call or a dict are
    # copies; a document read back (``saved``) is not.
    assert found == [
        "resolve_study_config(n_pilots=opts.pilots)",
        "resolve_study_config(rounds=opts.rounds)",
        "{'rounds': opts.rounds}",
    ]


def test_a_nested_configs_keys_may_stand_at_the_top_of_a_config_file(tmp_path):
    # Prepare: sfl run's options are flattened on the command line (--rounds sets
    # SFLRunConfig.run.rounds); its file may write them as flat keys too.
    from flowsplit.config_file import instantiate, read_config_file
    from flowsplit.federated.config import SFLRunConfig

    flat = tmp_path / "flat.toml"
    flat.write_text('model = "lstm"\nrounds = 3\nscheme = "sfl"\ncuts = [2, 2]\n')
    table = tmp_path / "table.toml"
    table.write_text('model = "lstm"\n[run]\nrounds = 3\nscheme = "sfl"\ncuts = [2, 2]\n')
    # Execute / Assert: the same config either way ...
    rc = instantiate(SFLRunConfig, read_config_file(SFLRunConfig, flat))
    assert rc == instantiate(SFLRunConfig, read_config_file(SFLRunConfig, table))
    assert rc.model == "lstm" and rc.run.rounds == 3 and rc.run.cuts == (2, 2)
    # ... a key given both ways is refused, naming it, and an unknown one still is.
    both = tmp_path / "both.toml"
    both.write_text("rounds = 3\n[run]\nrounds = 4\n")
    with pytest.raises(ConfigError, match="'rounds' is given twice"):
        read_config_file(SFLRunConfig, both)
    bad = tmp_path / "bad.toml"
    bad.write_text("roundz = 3\n")
    with pytest.raises(ConfigError, match="unknown key 'roundz'"):
        read_config_file(SFLRunConfig, bad)


def test_no_config_field_is_copied_by_hand_in_src():
    # Execute: the counter over src/flowsplit (issue 28's goal: 0).
    counter = _counter()
    classes = counter._classes()
    found = [
        (path.name, line, what)
        for path in sorted(counter.ROOT.rglob("*.py"))
        for line, _, what in counter.copies(path, classes)
    ]
    # Assert: a config handed on whole (or nested), never field by field.
    assert found == []


def test_a_configs_checks_name_each_field_by_its_declared_option():
    from flowsplit.federated.config import SFLConfig
    from flowsplit.train.config import TrainConfig

    # Execute / Assert: every float field is checked, none listed by hand, and the
    # message names the option the field declares (timeout_s -> --timeout).
    with pytest.raises(ConfigError, match=r"^--timeout must be a finite number, got nan$"):
        SFLConfig(timeout_s=float("nan"))
    with pytest.raises(ConfigError, match=r"^--label-smoothing must be a finite number"):
        TrainConfig(dataset="d", model="cnn", out="o", label_smoothing=float("inf"))
    with pytest.raises(ConfigError, match=r"^--weight-decay must be >= 0"):
        SFLConfig(weight_decay=-1.0)


@dataclasses.dataclass
class _Inner:
    epochs: int = dataclasses.field(default=12, metadata=cli(flag="--inner-epochs"))


@dataclasses.dataclass
class _Outer:
    """An outer config and a nested one that share a field name, the nested one with an
    option of its own (as the privacy study's epochs and its attack's --attack-epochs)."""

    epochs: int = 3
    inner: _Inner = dataclasses.field(default_factory=_Inner)


def test_a_nested_field_with_its_own_option_keeps_its_own_value():
    # Prepare
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, _Outer)
    # Execute
    cfg = config_from_args(_Outer, parser.parse_args(["--epochs", "5"]))
    both = config_from_args(_Outer, parser.parse_args(["--inner-epochs", "2", "--epochs", "5"]))
    # Assert: --epochs is the outer's alone, --inner-epochs the nested one's
    assert (cfg.epochs, cfg.inner.epochs) == (5, 12)
    assert (both.epochs, both.inner.epochs) == (5, 2)
