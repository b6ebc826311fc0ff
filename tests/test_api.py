"""A newcomer's script: only the public API (``import flowsplit as fs``), on the embedded capture.

Prepare the lab capture that ships in ``demo/captures``, train a small CNN, evaluate it
with per-flow predictions, plan a split and run the plan, and read every result back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import flowsplit as fs
from flowsplit.errors import FlowsplitError

CAPTURES = Path(__file__).resolve().parents[1] / "demo" / "captures"
SMALL_CNN = {"embed": 4, "channels": [4, 8], "hidden": 8, "kernel": 3, "pool": 4}


def test_import_is_light_and_lists_the_api():
    code = "import sys, flowsplit as fs; print('torch' in sys.modules, ' '.join(dir(fs)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, names = out.stdout.split(" ", 1)
    assert heavy == "False"  # the API is imported on first use
    for name in ("prepare", "load_dataset", "train", "evaluate", "predict", "sfl", "compare"):
        assert name in names.split()


def test_the_lazy_names_are_the_api_modules():
    # flowsplit/__init__.py repeats api.__all__ so that `import flowsplit` loads no torch:
    # the two lists must not drift apart, and each name must resolve.
    import flowsplit
    from flowsplit import api

    assert set(flowsplit._API) == set(api.__all__)
    # (fs.train is the flowsplit.train package itself, made callable: importing the
    # package binds that name; see flowsplit/train/__init__.py.)
    same = [n for n in api.__all__ if n != "train"]
    assert all(getattr(flowsplit, name) is getattr(api, name) for name in same)
    assert callable(flowsplit.train) and flowsplit.train.__name__ == "flowsplit.train"


def test_a_newcomers_script(tmp_path):
    # Prepare: the embedded capture, labels by folder (one per class).
    ds = fs.prepare(CAPTURES, tmp_path / "ds", views=("bytes", "stats"))
    assert ds.n_classes == 8 and "dns" in ds.classes
    x, y = ds.xy("stats", "train")
    assert len(x) == len(y) > 0

    # Train: a small CNN for one epoch.
    run = fs.train(
        dataset=ds.root,
        model="cnn",
        out=tmp_path / "cnn",
        epochs=1,
        model_options=SMALL_CNN,
        threads=1,
    )
    assert isinstance(run, fs.RunResult) and run.kind == "train"
    assert run.classes == ds.classes and 0.0 <= run.accuracy <= 1.0

    # Evaluate: scores and one row per flow with the probability of every class.
    ev = fs.evaluate(tmp_path / "cnn", ds.root)
    table = ev.predictions
    assert len(table) == ev.summary["n"] == len(ds.split_indices("test"))
    assert {"flow_id", "source", "ip_a", "port_b", "true", "predicted"} <= set(table.columns)
    assert (table["predicted"] == table["true"]).mean() == pytest.approx(run.accuracy)
    assert ev.summary["accuracy"] == pytest.approx(run.accuracy)
    assert sum(ev.summary["per_class_support"].values()) == len(table)
    assert "precision" in ev.report and "confusion matrix" in ev.report

    # Split learning: plan a split for 4 clients and 2 aggregators, then run the plan.
    plan = fs.sfl.plan(
        ds.root,
        tmp_path / "plan.json",
        model="cnn",
        clients=4,
        aggregators=2,
        rounds=1,
        train_limit=200,
        no_pilots=True,
    )
    assert len(plan["cuts"]) == 2 and len(plan["assignment"]) == 4
    # The same plan from a config object (the options the command reads from it).
    from flowsplit.planner.study_config import StudyConfig, StudyRunConfig

    study = StudyConfig(
        model="cnn", n_clients=4, n_aggregators=2, run=StudyRunConfig(rounds=1, train_limit=200)
    )
    again = fs.sfl.plan(ds.root, tmp_path / "plan2.json", study, no_pilots=True)
    assert (again["cuts"], again["assignment"], again["run"]) == (
        plan["cuts"],
        plan["assignment"],
        plan["run"],
    )
    sfl = fs.sfl.run(ds.root, tmp_path / "hsfl", plan=tmp_path / "plan.json")
    assert sfl.kind == "sfl" and len(sfl.rounds) == plan["run"]["rounds"] == 1
    assert sfl.cuts == plan["cuts"] and sfl.bytes_total > 0
    assert sfl.rounds[0].bytes_total == pytest.approx(plan["predicted"]["bytes_per_round"])
    assert set(sfl.per_class_f1) == set(ds.classes)
    # A split run's whole model classifies new captures like a train run's.
    flows = fs.predict(tmp_path / "hsfl", CAPTURES / "dns" / "dns-01.pcap")
    assert len(flows) > 0 and set(flows["predicted"]) <= set(ds.classes)

    # Read back: the same results from the run directories.
    assert fs.read_result(tmp_path / "hsfl").accuracy == sfl.accuracy
    model, config = fs.load_model(tmp_path / "cnn")
    assert config["model"]["classes"] == ds.classes


def test_prepare_takes_a_config_object(tmp_path):
    from flowsplit.data.prepare import PrepareOptions

    # Execute: the same dataset from an options object and from keywords.
    ds = fs.prepare(CAPTURES, tmp_path / "a", PrepareOptions(views=("stats",), top_classes=4))
    same = fs.prepare(CAPTURES, tmp_path / "b", views=("stats",), top_classes=4)
    # Assert
    assert ds.classes == same.classes and len(ds.classes) == 4
    assert (ds.xy("stats", "train")[1] == same.xy("stats", "train")[1]).all()
    with pytest.raises(TypeError, match="in the config"):
        fs.prepare(CAPTURES, tmp_path / "c", PrepareOptions(), top_classes=4)


def test_bad_input_is_one_flowsplit_error(tmp_path):
    with pytest.raises(FlowsplitError, match="manifest"):
        fs.load_dataset(tmp_path)
    with pytest.raises(FlowsplitError):
        fs.sfl.run(tmp_path, tmp_path / "out", scheme="nope")


def test_keyword_options_may_be_field_names_or_option_names():
    from flowsplit.api import as_flags

    # Execute: the config's field names, whose options are spelt otherwise, and the
    # options' own names, for `sfl run` and `prepare`.
    by_field = as_flags({"n_clients": 4, "timeout_s": 30.0, "quiet": True}, ["sfl", "run"])
    by_option = as_flags({"clients": 4, "timeout": 30.0, "quiet": True}, ["sfl", "run"])
    off = as_flags({"mask_port": False, "reassemble": False, "top_classes": None}, ["prepare"])
    # Assert: both give the command's flags; False gives an option's --no- form.
    assert by_field == by_option == ["--clients", "4", "--timeout", "30.0", "--quiet"]
    assert off == ["--no-mask-ports", "--no-reassembly"]


def test_a_one_seed_list_and_repeated_train_args_reach_the_command_as_given():
    from flowsplit.api import as_flags
    from flowsplit.cli import build_parser

    # Execute: the flags of seeds=[3] (the seed 3; "--seeds 3" is a count) and of two
    # train arguments (joined into one value starting with "-", argparse refused them)
    argv = as_flags({"seeds": [3], "train_args": ["--lr=0.01", "--batch-size=32"]}, ["compare"])
    args = build_parser().parse_args(["compare", "DS", "-o", "O", *argv])
    # Assert
    assert args.seeds == (3,)
    assert args.train_args == ["--lr=0.01", "--batch-size=32"]
    assert as_flags({"seeds": 3}, ["compare"]) == ["--seeds", "3"]  # a count stays one


def test_a_missing_path_or_a_mistyped_option_is_one_flowsplit_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # out=None used to run into a folder called "None"; epochs=True trained 1 epoch
    with pytest.raises(FlowsplitError, match="out is null"):
        fs.train(dataset=tmp_path, model="cnn", out=None)
    with pytest.raises(FlowsplitError, match="epochs is True, not int"):
        fs.train(dataset=tmp_path, model="cnn", out="r", epochs=True)
    with pytest.raises(FlowsplitError, match="out: give a path, not None"):
        fs.compare(tmp_path, None, models=["cnn"])
    with pytest.raises(FlowsplitError, match="out: give a path, not None"):
        fs.sfl.run(tmp_path, None)
    with pytest.raises(FlowsplitError, match="dataset: give a path, not None"):
        fs.sfl.compare(None, "o")
    assert list(tmp_path.iterdir()) == []


def _sfl_config(**fields):
    from flowsplit.federated.config import SFLConfig

    return SFLConfig(**fields)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (
            lambda t: fs.prepare(CAPTURES, t / "o", {"seq_len": 5}),
            "give a PrepareOptions, not dict",
        ),
        (lambda t: fs.prepare(CAPTURES, t / "o", top_classes="3"), "top_classes is '3', not int"),
        (lambda t: fs.prepare(CAPTURES, t / "o", mask_ip="yes"), "mask_ip is 'yes', not bool"),
        (lambda t: fs.prepare(CAPTURES, t / "o", classes="dns"), "classes is 'dns', not tuple"),
        (lambda t: fs.prepare(CAPTURES, t / "o", seed=2**70), "--seed must be an integer"),
        (lambda t: fs.prepare(None, t / "o"), "inputs: give a path, not None"),
        (lambda t: fs.predict(None, CAPTURES), "run: give a path, not None"),
        (lambda t: fs.predict(t, [CAPTURES, None]), "captures: give a path, not None"),
        (lambda t: fs.predict(t, CAPTURES, min_confidence="0.5"), "'0.5' is not a probability"),
        (lambda t: fs.train(fs.sfl), "config: give a TrainConfig, not module"),
        (lambda t: fs.sfl.run(t, t / "o", rounds=False), "rounds=False: --rounds takes a value"),
        (lambda t: fs.compare(t, t / "o", help=True), "help: not an option of a call"),
        (lambda t: _sfl_config(cuts=(1.5, 2)), "cuts (1.5, 2): give integers"),  # was 1, 2
    ],
)
def test_a_call_python_would_take_is_refused_as_the_command_would(tmp_path, call, says):
    # Each failed deep inside (AttributeError, numpy's ValueError, SystemExit from
    # --help), or ran: "yes" taken as true, "dns" as the classes d, n and s, rounds=False
    # left out so that the default 5 rounds ran.
    with pytest.raises(FlowsplitError) as caught:
        call(tmp_path)
    assert says in str(caught.value)
    assert not (tmp_path / "o").exists()


def test_a_bad_config_object_is_named_not_its_temporary_file(tmp_path):
    from flowsplit.planner.study_config import StudyConfig

    study = StudyConfig()
    study.topology_seed = "x"  # set after construction, as a script might
    with pytest.raises(FlowsplitError) as caught:
        fs.sfl.plan(tmp_path, tmp_path / "p.json", study)
    assert str(caught.value) == "config (StudyConfig): key 'topology_seed' is 'x', not int"


def test_prepare_takes_every_labelling_keyword(tmp_path):
    # Prepare: a file-csv labelling whose label column is not called "label".
    caps = [sorted((CAPTURES / app).glob("*.pcap"))[0] for app in ("dns", "http", "redis")]
    table = tmp_path / "labels.csv"
    table.write_text("file,app\n" + "".join(f"{p.name},{p.parent.name}\n" for p in caps))
    # Execute
    ds = fs.prepare(caps, tmp_path / "ds", label_by="file-csv", labels=table, label_column="app")
    # Assert
    assert sorted(ds.classes) == sorted({p.parent.name for p in caps})


def test_the_label_column_reaches_both_the_labelling_and_the_flow_csv_reader(tmp_path, monkeypatch):
    import flowsplit.data.prepare as prepare_module

    # Prepare: catch the options prepare_dataset is given (``--label-column`` names the
    # label column of a label CSV and of flow CSVs alike).
    seen = []
    monkeypatch.setattr(prepare_module, "prepare_dataset", lambda *a, **k: seen.append(a[2]))
    monkeypatch.setattr(fs.api, "load_dataset", lambda path: None)
    # Execute
    fs.prepare(tmp_path, tmp_path / "ds", label_column="app", file_column="pcap", top_classes=3)
    # Assert
    (opts,) = seen
    assert opts.label_column == "app" and opts.labels.label_column == "app"
    assert opts.labels.file_column == "pcap" and opts.top_classes == 3


def test_prepare_and_predict_take_one_path_or_any_iterable_of_paths():
    from flowsplit.api import _paths

    caps = sorted(CAPTURES.glob("dns/*.pcap"))
    assert _paths("inputs", CAPTURES) == [str(CAPTURES)]
    # A generator (Path.glob's) is its paths, as before the path checks: not one bad path
    assert _paths("inputs", (p for p in caps)) == [str(p) for p in caps]
    with pytest.raises(FlowsplitError, match="captures: give a path, not int"):
        _paths("captures", 3)
