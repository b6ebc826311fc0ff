"""Bad option values of ``sfl privacy`` and ``pretrain``: one line naming the option.

Each case runs the CLI in this process on a tiny dataset of the shipped captures and
expects exit 2 and exactly one stderr line, ``flowsplit: error: ...``, that names the
option (never an internal error, a crash, or a run that exits 0 with nan in it).
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
import torch

from flowsplit.cli import main
from flowsplit.errors import FlowsplitError

CAPTURES = Path(__file__).resolve().parents[2] / "demo" / "captures"
PRIVACY = (
    "sfl privacy {ds} -o {out} --overwrite --quiet --epochs 1 --attack-epochs 1 "
    "--train-limit 64 --aux-limit 32 --eval-limit 32 --no-gradients --client-cuts 1 "
    "--defences none --model cnn --model-option channels=[4,4] --model-option hidden=8"
)
TINY = "--model-option dim=16 --model-option heads=2 --model-option ff=32 --model-option depth=1"
PRETRAIN = "pretrain {ds} -o {out} --overwrite -q --steps 2 --batch-size 8 " + TINY


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("options")
    for cls in ("dns", "ssh"):
        (root / "cap" / cls).mkdir(parents=True)
        for k in (1, 2):
            shutil.copy(CAPTURES / cls / f"{cls}-0{k}.pcap", root / "cap" / cls)
    argv = f"prepare {root / 'cap'} -o {root / 'ds'} --views bytes --split-by flow --quiet"
    assert main(shlex.split(argv)) == 0
    return root / "ds"


@pytest.fixture(autouse=True)
def _one_core(monkeypatch):
    """One core, so that a few threads are already too many; torch's threads kept."""
    monkeypatch.setattr("flowsplit.util.system.available_cores", lambda: 1)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


CASES = [
    # (base, extra options, what the line must name)
    (PRIVACY, "--batch-size 0", "--batch-size"),
    (PRIVACY, "--batch-size -1", "--batch-size"),
    (PRIVACY, "--threads 0", "--threads"),
    (PRIVACY, "--threads -1", "--threads"),
    (PRIVACY, "--threads 5", "--threads 5"),
    (PRIVACY, "--lr -1", "--lr"),
    (PRIVACY, "--lr 0", "--lr"),
    (PRIVACY, "--lr 1e12", "smaller --lr"),
    (PRIVACY, "--attack-epochs 0", "--attack-epochs"),
    (PRIVACY, "--train-limit 0", "--train-limit"),
    (PRIVACY, "--eval-limit -2", "--eval-limit"),
    (PRIVACY, "--defences noise:inf", "--defences"),
    (PRIVACY, "--defences nopeek:nan", "--defences"),
    (PRIVACY, "--defences quant:0", "--defences"),
    (PRIVACY, "--defences noise:1e300", "noise ratio must be at most 1000"),
    (PRETRAIN, "--threads 5", "--threads 5"),
    (PRETRAIN, "--lr 1e12", "smaller --lr"),
    (PRETRAIN, "--mask-ratio 1e-9", "--mask-ratio"),
    (PRETRAIN.replace("{ds}", str(CAPTURES / "dns")), "--split test", "--split"),
]


@pytest.mark.parametrize(
    ("base", "extra", "names"),
    CASES,
    ids=[
        f"{base.split()[0 if base.startswith('pretrain') else 1]}{extra}"
        for base, extra, _ in CASES
    ],
)
def test_bad_value_is_one_line_naming_the_option(ds, tmp_path, capsys, base, extra, names):
    out = tmp_path / "out"
    rc = main(shlex.split(base.format(ds=ds, out=out)) + shlex.split(extra))
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("flowsplit: error: "), err
    assert names in lines[0] and "internal error" not in err
    assert not (out / "encoder.pt").exists() and not (out / "privacy.json").exists()


def test_attack_epochs_and_epochs_are_two_options(ds, monkeypatch):
    seen = []

    def study(dataset, out, config, *rest, **kw):
        seen.append((config.epochs, config.attack.epochs))
        raise FlowsplitError("stop")

    monkeypatch.setattr("flowsplit.privacy.run.privacy_study", study)
    for order in ("--attack-epochs 2 --epochs 5", "--epochs 5 --attack-epochs 2", "--epochs 5"):
        assert main(shlex.split(f"sfl privacy {ds} -o x {order}")) == 2
    assert seen == [(5, 2), (5, 2), (5, 12)]
