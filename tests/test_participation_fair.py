"""--min-clients counts the round of a lost aggregator fairly (issue 31 item 7).

A client lost only with its aggregator is moved to a live one the next round
(reassignment): the round it was lost does not count it missing. A stopped run's
message says how to continue it.
"""

from __future__ import annotations

import json
import shlex

import pytest

from flowsplit.cli import main
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.schemes import ParticipationError, check_participation
from tests.train.synth import write_synthetic

SMALL = "--model cnn --model-option channels=[4,4] --model-option hidden=8 --quiet"


def test_a_lost_aggregators_clients_are_moved_not_counted_missing(tmp_path):
    # Prepare: 4 clients, 2 aggregators; aggregator 1 dies in round 2 (the case)
    data = write_synthetic(tmp_path / "ds", n=80, n_classes=2)
    out = tmp_path / "run"
    argv = f"sfl run {data} {SMALL} --clients 4 --aggregators 2 --rounds 3 --batch-size 8 "
    argv += f"--fail aggregator:1@round2 -o {out}"
    # Execute
    rc = main(shlex.split(argv))
    # Assert: the run goes on; round 2 lost the two clients it moves in round 3
    assert rc == 0
    rounds = json.loads((out / "metrics.json").read_text())["rounds"]
    assert [r["participants"] for r in rounds] == [4, 2, 4]
    assert rounds[1]["moving"] == 2 and len(rounds[2]["reassigned"]) == 2


def test_clients_lost_on_their_own_still_count():
    record = {"round": 2, "participants": 2, "scheduled": 4, "lost": [1, 3], "moving": 0}
    with pytest.raises(ParticipationError) as caught:
        check_participation(record, SFLConfig())
    assert "only 2 of 4" in str(caught.value)
    assert "sfl run --resume OUT" in str(caught.value)  # how to continue it
    check_participation({**record, "moving": 2}, SFLConfig())  # moved: the round holds
