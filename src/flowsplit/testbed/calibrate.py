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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--view", default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args(argv)

    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.setup import RegistryModel
    from flowsplit.federated.system.profile import profile_model

    torch.set_num_threads(1)
    model_fn = RegistryModel(args.model, args.view)
    ds = load_dataset(args.dataset)
    model = model_fn(input_shape=ds.view_shape(model_fn.resolved_view()), n_classes=ds.n_classes)
    profile = profile_model(model)
    flops = float((profile.fwd_flops * (1.0 + profile.bwd_ratio)).sum()) * args.batch_size
    model.train()
    x = torch.randint(0, 256, (args.batch_size, *model.input_shape)).float()
    times = []
    for k in range(args.steps + 1):
        start = time.perf_counter()
        out = model(x)
        out.float().sum().backward()
        if k:  # the first pass is warm-up
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    print(
        json.dumps(
            {
                "model": args.model,
                "batch_size": args.batch_size,
                "flops_per_step": flops,
                "step_s": step,
                "flops_per_s": flops / step,
                "steps": args.steps,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
