"""The ground-floor helpers: strict JSON, typed documents, peak memory, parent death."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from flowsplit.util import (
    available_cores,
    jsonable,
    typed_from_dict,
    typed_to_dict,
)


def test_jsonable_makes_strict_json_of_numpy_and_nan():
    doc = {1: np.float32(0.5), "a": (np.int64(3), math.nan), "b": np.arange(2), "c": math.inf}
    assert jsonable(doc) == {"1": 0.5, "a": [3, None], "b": [0, 1], "c": None}
    assert type(jsonable(np.int64(3))) is int


@dataclass
class _Inner:
    mean: float
    n: int


@dataclass
class _Doc:
    name: str
    by_key: dict[str, _Inner]
    cuts: list[list[int]]
    maybe: _Inner | None = None
    added_later: list[str] = field(default_factory=list)


def test_typed_documents_round_trip_with_nan_as_null():
    doc = _Doc("x", {"a": _Inner(math.nan, 2)}, [[1, 2]])
    data = typed_to_dict(doc)
    assert data == {
        "name": "x",
        "by_key": {"a": {"mean": None, "n": 2}},
        "cuts": [[1, 2]],
        "maybe": None,
        "added_later": [],
    }
    back = typed_from_dict(_Doc, data)
    assert math.isnan(back.by_key["a"].mean) and back.by_key["a"].n == 2
    assert back.cuts == [[1, 2]] and back.maybe is None


def test_a_field_added_later_may_be_missing_and_unknown_keys_are_ignored():
    back = typed_from_dict(_Doc, {"name": "x", "by_key": {}, "cuts": [], "new": 1})
    assert back.added_later == [] and back.maybe is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"by_key": {}, "cuts": []}, "doc lacks name"),
        (
            {"name": "x", "by_key": {"a": {"mean": "high", "n": 1}}, "cuts": []},
            "doc.by_key['a'].mean: str, not float",
        ),
        ({"name": "x", "by_key": {}, "cuts": [[1, True]]}, "doc.cuts[0][1]: bool, not int"),
        ([], "doc: list, not an object"),
    ],
)
def test_a_wrong_document_names_the_place(data, message):
    with pytest.raises(ValueError) as err:
        typed_from_dict(_Doc, data, "doc")
    assert str(err.value).startswith(message)


def test_available_cores_is_the_affinity_mask():
    assert available_cores() == len(os.sched_getaffinity(0))


@pytest.mark.slow  # three processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux")
def test_a_child_dies_with_its_parent():
    # The middle process starts a grandchild that asked to die with it, then exits.
    code = (
        "import subprocess, sys, signal\n"
        "from flowsplit.util import die_with_parent\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " preexec_fn=lambda: die_with_parent(signal.SIGKILL))\n"
        "print(p.pid, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the grandchild outlived its parent")


@dataclass
class _Loose:
    name: str
    class_name: str = field(default="", metadata={"key": "class"})
    rest: dict = field(default_factory=dict, metadata={"rest": True})


def test_renamed_keys_and_the_rest_round_trip():
    data = {"name": "x", "class": "web", "seen": [1], "n": 2}
    back = typed_from_dict(_Loose, data)
    assert back.class_name == "web" and back.rest == {"seen": [1], "n": 2}
    assert typed_to_dict(back) == data


def test_jsonable_not_strict_keeps_infinities_for_typing_in_memory():
    doc = {"mean": math.inf, "n": np.int64(2)}
    assert jsonable(doc, strict=False) == {"mean": math.inf, "n": 2}
    assert typed_from_dict(_Inner, jsonable(doc, strict=False)).mean == math.inf
