"""``--config FILE.toml`` for compare, sfl compare and sfl run: keys are the config's
field names (nested configs as tables), defaults < file < flags, bad files are one
line naming the file and the key, and the effective config is written into OUT."""

from __future__ import annotations

import tomllib

import pytest

from flowsplit.cli import build_parser, main
from flowsplit.errors import FlowsplitError
from tests.federated._toy import write_toy_dataset

SMALL_CNN = ["--model", "cnn", "--model-option", "channels=[4,4]", "--model-option", "hidden=8"]


def _toml(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_compare_takes_the_file_and_the_flags_override_it(tmp_path):
    # Prepare: a file setting four fields; the command line sets one of them again.
    from flowsplit.experiments.dp.commands import compare_config
    from flowsplit.experiments.dp.config import CompareConfig

    f = _toml(
        tmp_path / "study.toml",
        'models = ["cnn"]\nseeds = [0, 1]\nepochs = 3\nmargin = 0.02\nquick = true\n',
    )
    argv = ["compare", "DS", "-o", "OUT", "--config", f, "--seeds", "4", "--alpha", "0.1"]
    # Execute
    cfg = compare_config(build_parser().parse_args(argv))
    # Assert: flag > file > recipe (quick) > default, field by field.
    assert cfg.seeds == [0, 1, 2, 3]  # the flag, not the file's [0, 1]
    assert cfg.alpha == 0.1  # a flag the file does not set
    assert cfg.epochs == 3 and cfg.margin == 0.02 and cfg.models == ["cnn"]  # the file
    assert cfg.rounds == 20  # quick's recipe (the file asked for quick), no one else set it
    assert cfg.threads == CompareConfig.threads and (cfg.dataset, cfg.out) == ("DS", "OUT")


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    # Windows Notepad's UTF-8 starts with a BOM, which tomllib calls an invalid statement.
    from flowsplit.experiments.dp.commands import compare_config

    f = tmp_path / "bom.toml"
    f.write_bytes(b"\xef\xbb\xbfepochs = 3\n")
    argv = ["compare", "DS", "-o", "OUT", "--config", str(f)]
    assert compare_config(build_parser().parse_args(argv)).epochs == 3


def test_sfl_run_file_has_tables_for_nested_configs_and_flags_win(tmp_path):
    from flowsplit.federated.commands import run_config

    f = _toml(
        tmp_path / "run.toml",
        'model = "lstm"\nn_clients = 6\nmode = "sim"\n'
        'model_options = {hidden = 8}\n\n[run]\nrounds = 2\nscheme = "sfl"\ncuts = [2, 2]\n',
    )
    args = build_parser().parse_args(
        ["sfl", "run", "DS", "-o", "OUT", "--config", f, "--rounds", "7", "--clients", "4"]
    )
    rc = run_config(args)
    assert rc.run.rounds == 7 and rc.n_clients == 4  # flags
    assert rc.run.scheme == "sfl" and rc.run.cuts == (2, 2)  # [run] of the file
    assert rc.model == "lstm" and rc.model_options == {"hidden": 8}
    assert rc.topology == "homogeneous" and rc.run.batch_size == 32  # defaults


def test_sfl_compare_file_over_the_quick_recipe_under_the_flags(tmp_path):
    from flowsplit.experiments.sfl.commands import compare_config

    f = _toml(
        tmp_path / "cmp.toml",
        "quick = true\nrounds = 3\nseeds = [5, 6, 7]\nonly_cuts = [[1, 2], [2, 3]]\n",
    )
    args = build_parser().parse_args(
        ["sfl", "compare", "DS", "-o", "OUT", "--config", f, "--seeds", "2"]
    )
    cfg = compare_config(args)
    assert cfg.seeds == (0, 1)  # flag
    assert cfg.run.rounds == 3 and cfg.planner.only_cuts == ((1, 2), (2, 3))  # file (flat keys)
    assert cfg.run.train_limit == 600 and cfg.n_clients == 8 and cfg.quick  # the quick recipe
    assert "hsfl" in cfg.schemes


@pytest.mark.parametrize(
    ("argv", "text", "names"),
    [
        (["compare", "DS", "-o", "O"], "epochs = 3\nepoch = 4\n", "'epoch'"),
        (["compare", "DS", "-o", "O"], 'epochs = "three"\n', "'epochs' is 'three', not int"),
        (["compare", "DS", "-o", "O"], 'dataset = "other"\n', "'dataset' is given on the command"),
        (["compare", "DS", "-o", "O"], "margin = nan\n", "'margin' is nan, not a finite"),
        (["sfl", "run", "DS", "-o", "O"], "[run]\nround = 2\n", "unknown key 'run.round'"),
        (["sfl", "run", "DS", "-o", "O"], "run = 3\n", "'run' is a table ([run])"),
        (["sfl", "run", "DS", "-o", "O"], "[run]\nrounds = true\n", "'run.rounds' is True"),
        (["sfl", "compare", "DS", "-o", "O"], "seeds = 2\n", "'seeds' is 2, not tuple"),
        (["sfl", "compare", "DS", "-o", "O"], "rounds = [", "not a TOML file"),
        # The items of a list: model names given as numbers, a pair of cuts left empty
        (["compare", "DS", "-o", "O"], "models = [1, 2]\n", "item 1 (1) not str"),
        (["compare", "DS", "-o", "O"], 'workers = [1, "two"]\n', "item 2 ('two') not int"),
        (["sfl", "plan", "DS", "-o", "O"], "[planner]\nfixed_cuts = []\n", "not 2 values"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_key(tmp_path, capsys, argv, text, names):
    f = _toml(tmp_path / "bad.toml", text)
    rc = main([*argv, "--config", f])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"flowsplit: error: {f}") and names in err[0], err
    assert not (tmp_path / "O").exists()


@pytest.mark.parametrize(
    ("argv", "text", "says"),
    [
        (["sfl", "plan"], "topology_seed = 4294967296\n", "--topology-seed must be an integer"),
        (["sfl", "plan"], "[planner]\nweights = [0, 0, 0]\n", "--weights: objective weights"),
        (["sfl", "compare"], "[planner]\nonly_cuts = [[2, 1]]\n", "only_cuts: (2, 1) is no"),
        (
            ["sfl", "compare"],
            'baselines = ["fedavg", "fedavg"]\n',
            "--baselines fedavg,fedavg: a name",
        ),
        (["sfl", "plan"], "[run]\nthreads = 0\n", "--threads must be >= 1"),  # torch refused it
        (["compare"], "seeds = [-1, 2]\n", "--seeds -1,2: -1 is no seed"),  # not --train-arg's
        (["sfl", "compare"], "seeds = [4294967296]\n", "--seeds 4294967296: 4294967296 is"),
        (["compare"], "seeds = [0, 0]\n", "seed 0 is given twice"),  # it ran seed 0 once
        (["sfl", "compare"], "schemes = []\n", "--schemes: give at least one"),  # ran all
        (["compare"], 'cross_source = ""\n', "--cross-source: an empty path"),
        (["compare"], "rounds = -1\n", "--boost-rounds must be >= 1"),  # ran: no xgboost
        (["sfl", "run"], "[run]\ncuts = [1.5, 2]\n", "not int"),  # was the cuts 1, 2
    ],
)
def test_a_file_value_the_command_line_would_refuse_is_refused(tmp_path, capsys, argv, text, says):
    # The checks of a value the options parser makes, made on the config built from the
    # file too (named by the option: the value may come from the file or a flag). They
    # used to be taken as given: a seed numpy refuses, a planner with nothing to weigh.
    f = _toml(tmp_path / "bad.toml", text)
    rc = main([*argv, "DS", "-o", str(tmp_path / "O"), "--config", f])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("flowsplit: error: "), err
    assert says in err[0], err
    assert not (tmp_path / "O").exists()


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    rc = main(
        ["sfl", "run", "DS", "-o", str(tmp_path / "o"), "--config", str(tmp_path / "no.toml")]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "no.toml: config file not found" in err and "\n" not in err


def test_the_effective_config_round_trips_through_toml(tmp_path):
    # Every kind of field: nested tables, tuples of tuples, dicts, None (left out).
    from flowsplit.config_file import read_config_file, write_config_toml
    from flowsplit.experiments.sfl.compare import resolve_config
    from flowsplit.experiments.sfl.config import SFLCompareConfig
    from flowsplit.federated.config import SFLConfig, SFLRunConfig

    cfg = resolve_config(True, seeds=(3, 4), only_cuts=((1, 2),), model_options={"k": [1, 2]})
    path = write_config_toml(tmp_path / "c.toml", cfg, header="h")
    again = resolve_config(**{"quick": True, **read_config_file(SFLCompareConfig, path)})
    assert again == cfg
    rc = SFLRunConfig(n_clients=3, run=SFLConfig(rounds=2, fail=["aggregator:1@round2"]))
    path = write_config_toml(tmp_path / "r.toml", rc)
    from flowsplit.config_file import instantiate

    assert instantiate(SFLRunConfig, read_config_file(SFLRunConfig, path)) == rc


def test_sfl_run_writes_its_effective_config_which_runs_it_again(tmp_path, capsys):
    # Prepare: a run from a file plus a flag.
    data = write_toy_dataset(tmp_path / "ds", n=80)
    f = _toml(tmp_path / "run.toml", "[run]\nrounds = 1\ntrain_limit = 40\nseed = 3\n")
    out = tmp_path / "r1"
    # Execute
    rc = main(["sfl", "run", str(data), *SMALL_CNN, "-o", str(out), "--config", f, "--quiet",
               "--clients", "3", "--aggregators", "1"])  # fmt: skip
    # Assert: OUT/config.toml holds the file's, the flags' and the defaults' values...
    assert rc == 0, capsys.readouterr().err
    written = tomllib.loads((out / "config.toml").read_text())
    assert written["run"]["rounds"] == 1 and written["run"]["seed"] == 3
    assert written["n_clients"] == 3 and written["model_options"] == {
        "channels": [4, 4],
        "hidden": 8,
    }
    assert written["run"]["batch_size"] == 32 and written["mode"] == "sim"
    # ... and running it again alone gives the same run (same metrics, bit for bit).
    out2 = tmp_path / "r2"
    rc = main(["sfl", "run", str(data), "-o", str(out2), "--config", str(out / "config.toml"),
               "--quiet"])  # fmt: skip
    assert rc == 0
    import json

    rows = [json.loads((o / "metrics.json").read_text())["rounds"] for o in (out, out2)]
    same = ("train_loss", "accuracy", "macro_f1", "bytes", "participants")
    assert [[r.get(k) for k in same] for r in rows[0]] == [
        [r.get(k) for k in same] for r in rows[1]
    ]
    assert rows[0][0]["train_loss"] > 0


def test_the_python_api_takes_a_run_config(tmp_path):
    # fs.sfl.run(dataset, out, SFLRunConfig(...)): the command's checks and files.
    import flowsplit.sfl as fs_sfl
    from flowsplit.config_file import instantiate, read_config_file
    from flowsplit.federated.config import SFLConfig, SFLRunConfig

    data = write_toy_dataset(tmp_path / "ds", n=80)
    cfg = SFLRunConfig(
        model_options={"channels": [4, 4], "hidden": 8},
        n_clients=3,
        n_aggregators=1,
        run=SFLConfig(rounds=1, train_limit=40, scheme="sfl", cuts=(1, 1)),
    )
    result = fs_sfl.run(data, tmp_path / "r", cfg, seed=2)  # a keyword over the config
    assert len(result.rounds) == 1
    written = instantiate(
        SFLRunConfig, read_config_file(SFLRunConfig, tmp_path / "r" / "config.toml")
    )
    assert written.run.seed == 2 and written.run.scheme == "sfl" and written.n_clients == 3
    with pytest.raises(FlowsplitError, match="unrecognized arguments: --no-such-option"):
        fs_sfl.run(data, tmp_path / "r2", cfg, no_such_option=1)
