"""``python -m flowsplit.testbed.calibrate --model M --dataset D``: this node's FLOP/s, measured.

Run inside a testbed node (:meth:`flowsplit.testbed.Testbed.calibrate`), so the CPU
quota applies. Profiles the model as ``flowsplit sfl profile`` does (FLOPs of every
block, backward/forward ratio measured per block type), then times ``--steps``
forward+backward passes of a batch after one warm-up pass, and prints one JSON line:
``flops_per_s`` = the profile's FLOPs per step / the median step time. That is the
compute speed the cost model should charge this node, in place of an assumed one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

from flowsplit.config_args import add_config_arguments, config_from_args, fields_of


@dataclass
class Calibration:
    """What a calibration times (its options; the JSON line repeats :data:`ECHOED`)."""

    model: str
    """Model to profile and time."""
    dataset: str
    """Dataset directory (the model's input shape and classes)."""
    view: str | None = None
    """Dataset view (default: the model's)."""
    batch_size: int = 64
    """Rows per timed step."""
    steps: int = 5
    """Timed forward+backward passes (after one warm-up pass)."""


ECHOED = ("model", "batch_size", "steps")
"""The options the JSON line states beside the measurement."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    add_config_arguments(p, Calibration)
    cal = config_from_args(Calibration, p.parse_args(argv))

    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.setup import RegistryModel
    from flowsplit.federated.system.profile import profile_model

    torch.set_num_threads(1)
    model_fn = RegistryModel(cal.model, cal.view)
    ds = load_dataset(cal.dataset)
    model = model_fn(input_shape=ds.view_shape(model_fn.resolved_view()), n_classes=ds.n_classes)
    profile = profile_model(model)
    flops = float((profile.fwd_flops * (1.0 + profile.bwd_ratio)).sum()) * cal.batch_size
    model.train()
    x = torch.randint(0, 256, (cal.batch_size, *model.input_shape)).float()
    times = []
    for k in range(cal.steps + 1):
        start = time.perf_counter()
        out = model(x)
        out.float().sum().backward()
        if k:  # the first pass is warm-up
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    print(
        json.dumps(
            {
                **fields_of(cal, ECHOED),
                "flops_per_step": flops,
                "step_s": step,
                "flops_per_s": flops / step,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
