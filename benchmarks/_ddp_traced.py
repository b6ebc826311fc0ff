"""``python -m flowsplit.train`` with every rank's step timeline saved (testbed_ddp.py).

    FLOWSPLIT_DDP_TRACE=DIR python benchmarks/_ddp_traced.py DATASET --model cnn ...

Each rank writes ``DIR/rank<R>.json`` at exit: one row per optimiser step, ``[epoch,
t_start, t_first_launch, t_last_launch, t_done, t_backward_end, cpu_s, buckets]``:
the step's start (the optimiser step before it ended; for the first step of an epoch,
the epoch's start), its first and last gradient bucket's all-reduce launch, the last
one's completion, the end of ``backward`` (DDP has waited for every bucket), this
process's CPU seconds so far (every thread) and the buckets launched. Written as the worker exits
(``flowsplit.util.exit_without_finalising``). Times are
``time.perf_counter()``: CLOCK_MONOTONIC, one clock for every process of the machine,
so ranks in different network namespaces line up. One node (no DDP, no buckets): the
launch and completion fields are null. Epochs count from 0 as the run's history does
(0: the warm-up epoch). Without the variable it is ``python -m flowsplit.train``.
"""

from __future__ import annotations

import json
import os
import runpy
import time
from pathlib import Path

from torch.optim.optimizer import register_optimizer_step_post_hook

from flowsplit import util
from flowsplit.train import distributed

_rows: list[list] = []
_epoch = [-2]  # CommMeter() resets once when made, then once before every epoch
_step: dict = {}


def _reset(meter, _orig=distributed.CommMeter.reset) -> None:
    _orig(meter)
    _epoch[0] += 1
    _step.clear()
    _step["start"] = time.perf_counter()


def _start(meter, _orig=distributed.CommMeter.start) -> float:
    t = _orig(meter)
    _step.setdefault("first", t)
    _step["buckets"] = _step.get("buckets", 0) + 1
    return t


def _completed(meter, start, _orig=distributed.CommMeter.completed) -> None:
    _orig(meter, start)
    _step["done"] = max(_step.get("done", 0.0), time.perf_counter())


def _step_done(meter, _orig=distributed.CommMeter.step_done) -> None:
    t = time.perf_counter()
    last = meter._last_launch if meter._last_launch != float("-inf") else None
    _orig(meter)
    _rows.append(
        [
            _epoch[0],
            _step.get("start"),
            _step.get("first"),
            last,
            _step.get("done"),
            t,
            time.process_time(),
            _step.get("buckets", 0),
        ]  # fmt: skip
    )
    _step.clear()


def _opt_step_end(optimizer, *_args, **_kwargs) -> None:
    _step["start"] = time.perf_counter()


def _write() -> None:
    where = os.environ.get("FLOWSPLIT_DDP_TRACE")
    if not where:
        return
    out = Path(where)
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "steps": _rows}))


if os.environ.get("FLOWSPLIT_DDP_TRACE"):
    distributed.CommMeter.reset = _reset
    distributed.CommMeter.start = _start
    distributed.CommMeter.completed = _completed
    distributed.CommMeter.step_done = _step_done
    _exit = util.exit_without_finalising  # os._exit: atexit would not run

    def _write_and_exit(code):
        _write()
        _exit(code)

    util.exit_without_finalising = _write_and_exit

if __name__ == "__main__":
    if os.environ.get("FLOWSPLIT_DDP_TRACE"):
        register_optimizer_step_post_hook(_opt_step_end)
    runpy.run_module("flowsplit.train", run_name="__main__", alter_sys=True)
