"""``python -m flowsplit.train``: one worker of a torchrun job (or a single process).

    torchrun --nnodes 2 --node-rank R --nproc-per-node 2 \\
        --master-addr HOST --master-port PORT \\
        -m flowsplit.train DATASET --model cnn -o RUN

Ranks and world size come from torchrun; ``--workers`` is ignored. Rank 0 checks
the options and writes RUN (which need not be on a shared disk: rank 0 sends the
checkpoint to the others); after a torchrun restart (``--max-restarts``) the workers
resume from RUN's last checkpoint, provided RUN holds this job's run (same options)
and it has not finished.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowsplit.errors import ConfigError, FlowsplitError


def main(argv: list[str] | None = None) -> int:
    from flowsplit.models.registry import get_spec
    from flowsplit.train.commands import (
        add_train_arguments,
        check_before_launch,
        check_restart,
        config_from_args,
    )
    from flowsplit.train.distributed import read_dist_env
    from flowsplit.train.loop import train_worker
    from flowsplit.train.runs import CONFIG_NAME, clear_run, remove_stale_temps

    parser = argparse.ArgumentParser(
        prog="python -m flowsplit.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    try:
        env = read_dist_env()
        cfg, resume = config_from_args(args, env)  # workers: the job's world size
        if get_spec(cfg.model).kind != "torch":
            raise ConfigError(
                "torchrun runs the neural models; train XGBoost with flowsplit train --workers N "
                "or --dask-scheduler"
            )
        if env.rank == 0:
            if env.restart_count > 0 and (Path(cfg.out) / CONFIG_NAME).is_file():
                check_restart(cfg)  # this job wrote RUN before it failed: resume it
            else:
                check_before_launch(
                    cfg,
                    resume,
                    overwrite=args.overwrite,
                    force=args.force,
                    local_workers=env.local_world_size,
                )
                if args.overwrite and not resume:
                    clear_run(cfg.out)  # attempt 0 only: a restart resumes what it wrote
                else:
                    remove_stale_temps(cfg.out)
        train_worker(cfg, resume)
    except FlowsplitError as exc:
        print(f"flowsplit.train: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from flowsplit.util import exit_without_finalising

    exit_without_finalising(main())  # see there: a finished gloo worker could abort at exit
