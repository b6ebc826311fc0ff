"""``flowsplit`` with each round's raw event traces saved (for the testbed benchmarks).

    FLOWSPLIT_TRACE_DUMP=DIR python benchmarks/_sfl_traced.py sfl run ...

The server (the role that computes the round's timeline) writes ``DIR/roundNNN.pkl``:
``{"traces", "topology", "predict_on", "measured_on"}``, so that a timeline model can be
replayed offline on the very messages of a measured round. Without the variable it is
``flowsplit`` unchanged.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

from flowsplit.federated import schemes

_round_timing = schemes.round_timing


def _dumping_round_timing(outcome, topology, *args, **kwargs):
    out = _round_timing(outcome, topology, *args, **kwargs)
    where = os.environ.get("FLOWSPLIT_TRACE_DUMP")
    if where and outcome.traces is not None and len(outcome.traces):
        d = Path(where)
        d.mkdir(parents=True, exist_ok=True)
        k = len(list(d.glob("round*.pkl")))
        with open(d / f"round{k:03d}.pkl", "wb") as fh:
            pickle.dump(
                {
                    "traces": outcome.traces,
                    "topology": topology,
                    "predict_on": outcome.predict_on,
                    "measured_on": outcome.measured_on,
                },
                fh,
            )
    return out


schemes.round_timing = _dumping_round_timing

if __name__ == "__main__":
    from flowsplit.cli import main

    sys.exit(main(sys.argv[1:]))
