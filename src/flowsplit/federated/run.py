"""``sfl run`` as one library call, :func:`run_sfl`: the run directory checked, the plan
applied, the topology and the run prepared, the rounds simulated here or run by role
processes (launched here, or this one of a torchrun launch), and the finished model
scored and described as a ``train`` run's. ``flowsplit sfl run`` parses its options into
an :class:`~flowsplit.federated.config.SFLRunConfig` and a :class:`RunPlace` and calls it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowsplit.config_args import FORCE_HELP, check_threads, cli
from flowsplit.errors import ConfigError, InputError
from flowsplit.federated.config import SFLConfig, SFLRunConfig
from flowsplit.federated.plan_file import PlanFile

log = logging.getLogger("flowsplit.federated")

RUN_ARGS = "sfl-run.json"
"""``OUT/sfl-run.json``: what a dist run was started with, for ``sfl run --resume OUT``."""
RUN_FILES = ("topology.toml", "sfl-checkpoint.pt", RUN_ARGS)
"""Files only an ``sfl run`` directory holds (``--overwrite`` replaces nothing else)."""


ROLES = SFLRunConfig.CLI_GROUP
"""The ``--help`` section of the options of how the roles run."""


@dataclass
class RunPlace:
    """Where ``sfl run`` runs and what it may do there, beside its config (the flags are
    ``sfl run``'s options; the command reads ``out``, ``dataset``, ``plan`` and
    ``resume`` itself)."""

    out: Path = field(metadata=cli(enabled=False))
    dataset: str | None = field(metadata=cli(enabled=False))
    plan: PlanFile | None = field(default=None, metadata=cli(enabled=False))
    """A plan from ``sfl plan``: its choices replace the config's."""
    resume: bool = field(default=False, metadata=cli(enabled=False))
    """Continue the dist run in ``out`` from its checkpoint (the config is the saved one)."""
    overwrite: bool = field(default=False, metadata=cli(help="replace an existing run directory"))
    force: bool = field(default=False, metadata=cli(help=FORCE_HELP))
    quiet: bool = field(default=False, metadata=cli(help="no progress bar or round log"))
    bind: str | None = field(
        default=None,
        metadata=cli(
            metavar="ADDR", group=ROLES, help="dist under torchrun: address gloo binds to"
        ),
    )
    probe: bool = field(
        default=False,
        metadata=cli(
            group=ROLES,
            help="dist: measure every role's speed and its assigned links first (as `sfl "
            "probe`; OUT/probe.json, OUT/probe.toml) and predict each round's timeline on "
            "them",
        ),
    )


def run_sfl(
    rc: SFLRunConfig,
    place: RunPlace,
    *,
    model_factory: Callable[[SFLRunConfig], Any],
    saved: bool = False,
    on_launch: Callable[[SFLRunConfig], None] | None = None,
    policies: Callable[[SFLConfig], Any] | None = None,
) -> tuple[SFLRunConfig, Any] | None:
    """Run ``rc`` in ``place``; the effective config and the
    :class:`~flowsplit.federated.results.SFLResult`, or None for a torchrun rank that
    writes nothing.

    ``saved``: ``rc`` is the config a resumed run was started with (its plan already
    applied). ``model_factory`` makes the model factory of the config's model choice;
    ``on_launch`` is told the config before the roles start (``--resume`` reads it
    back); ``policies`` makes the run's assignment policy.
    """
    import torch

    from flowsplit.federated.dist import RoleArgs, launch_roles, run_under_torchrun
    from flowsplit.federated.results import finish_run
    from flowsplit.federated.sampling import sampling_configured
    from flowsplit.federated.setup import prepare_run
    from flowsplit.train.distributed import read_dist_env

    rc = _with_plan(rc, place.plan, saved)
    config, mode, out = rc.run, rc.mode, place.out
    env = read_dist_env()
    torchrun = env if mode == "dist" and env.is_distributed else None
    writes = torchrun is None or torchrun.rank == 0
    _check_out(place, mode, torchrun, writes)
    model_fn = model_factory(rc)
    topology = _topology(rc, place.plan)
    workers = client_workers(rc, sampling_configured(config), torchrun, topology)
    check_threads(config.threads, force=place.force)
    torch.set_num_threads(config.threads)
    setup = prepare_run(
        config,
        dataset=place.dataset,
        model_fn=model_fn,
        topology=topology,
        assignment=None if place.plan is None else place.plan.assignment,
    )
    if writes and not place.quiet:
        _log_start(rc, topology)
    probe = "run" if place.probe else None
    if probe and mode != "dist":
        raise ConfigError("--probe measures the hosts of a --mode dist run; add --mode dist")
    policy = None if policies is None else policies(config)
    roles: RoleArgs = {
        "dataset": place.dataset,
        "model_fn": model_fn,
        "out_dir": out,
        "quiet": place.quiet,
        "policy": policy,
        "probe": probe,
        "client_workers": workers,
    }
    if mode == "sim":
        result = simulate(setup, out, quiet=place.quiet, policy=policy)
    elif torchrun is not None:
        result = run_under_torchrun(setup, bind=place.bind, **roles)
        if result is None:
            return None
    else:
        if not place.resume and on_launch is not None:
            on_launch(rc)
        result = launch_roles(setup, resume=place.resume, **roles)
    # Per-class scores, predictions and the whole model, as a `train` run has them.
    finish_run(out, setup, result.model_state, model_fn)
    if writes:  # the effective config, which `sfl run --config OUT/config.toml` runs again
        from flowsplit.config_file import CONFIG_NAME, write_config_toml

        write_config_toml(
            out / CONFIG_NAME, rc, header=f"flowsplit sfl run: the effective config of {out}"
        )
    return rc, result


def _with_plan(rc: SFLRunConfig, plan: PlanFile | None, saved: bool) -> SFLRunConfig:
    """``rc`` with the plan's choices (a saved config has them already)."""
    if plan is None:
        return rc
    config = rc.run
    if not saved:  # the plan decides what its costs depend on
        config, notes = plan.apply(config)
        for note in notes:
            print(f"flowsplit: note: {note}", file=sys.stderr)
    return plan.choices(rc, run=config)


def _check_out(place: RunPlace, mode: str, torchrun: Any, writes: bool) -> None:
    """Refuse a run directory this run may not write (one-line errors)."""
    out = place.out
    # Other ranks of a torchrun launch may already have made OUT/logs: not a previous run.
    previous = out.is_dir() and any(p.name != "logs" for p in out.iterdir())
    if place.resume and (mode != "dist" or torchrun is not None):
        raise ConfigError("--resume continues a --mode dist run started by sfl run itself")
    if writes and previous and not place.overwrite and not place.resume:
        raise InputError(out, "exists and is not empty (use --overwrite to replace the run)")
    is_run = any((out / name).is_file() for name in RUN_FILES)
    if writes and previous and place.overwrite and not is_run:
        # --overwrite replaces an sfl run; a dataset, a train run or a user's folder is not one.
        raise InputError(out, "is not an `sfl run` directory; --overwrite replaces only a run")


def _topology(rc: SFLRunConfig, plan: PlanFile | None):
    """The run's topology (the plan's, else the preset or file), with its trace, checked
    against the clients and ``--min-clients``."""
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.federated.system.topology import resolve_trace

    config = rc.run
    if plan is not None:
        topology = plan.topology
    else:
        topology = resolve_topology(
            rc.topology, n_clients=rc.n_clients, n_aggregators=rc.n_aggregators, seed=config.seed
        )
    topology = resolve_trace(topology, config.trace, rounds=config.rounds)
    if topology.n_aggregators > topology.n_clients:
        raise ConfigError(
            f"{topology.n_aggregators} aggregators for {topology.n_clients} clients: some "
            "aggregator would serve no client; give --aggregators at most --clients"
        )
    if config.min_clients is not None and config.min_clients > topology.n_clients:
        raise ConfigError(
            f"--min-clients {config.min_clients} is more than the {topology.n_clients} clients"
        )
    return topology


def client_workers(rc: SFLRunConfig, sampled: bool, torchrun: Any, topology: Any) -> int | None:
    """``--client-workers`` as a worker count (None: a process per client); said once
    here, not by every role process the launcher would start."""
    from flowsplit.train.distributed import available_cores

    given = rc.client_workers
    if rc.mode != "dist":
        if given is not None:
            raise ConfigError("--client-workers hosts the clients of a --mode dist run")
        return None
    if given is None and not sampled:
        return None
    if torchrun is not None:  # the launch decides: every process but the upper tiers
        workers = torchrun.world_size - 1 - topology.n_aggregators
        if given not in (None, "auto") and str(given) != str(workers):
            raise ConfigError(
                f"--client-workers {given}: this torchrun launch has {workers} processes "
                f"for clients (1 server + {topology.n_aggregators} aggregators + P)"
            )
        return max(1, workers)
    if given is None or str(given).strip().lower() == "auto":
        return available_cores()
    try:
        workers = int(str(given))
    except ValueError:
        workers = 0
    if workers < 1:
        raise ConfigError(f"--client-workers {given!r}: give a number of processes >= 1 or auto")
    return workers


def _log_start(rc: SFLRunConfig, topology) -> None:
    config = rc.run
    log.info(
        "sfl run: %s, %s cut at %s, %d clients / %d aggregators (%s), %s partition, %s mode",
        config.scheme,
        rc.model,
        config.cuts,
        topology.n_clients,
        topology.n_aggregators,
        topology.name,
        config.partition,
        rc.mode,
    )


def simulate(setup, out: Path, *, quiet: bool, policy=None):
    """Train ``setup`` in this process with a progress bar and a tree per round; write OUT."""
    from flowsplit.federated.results import write_run
    from flowsplit.federated.schemes import round_log
    from flowsplit.federated.sim import run_simulation

    with round_log(setup.config.rounds, quiet=quiet) as on_round:
        result = run_simulation(setup, on_round=on_round, policy=policy)
    write_run(out, result)
    return result


__all__ = ["RUN_ARGS", "RunPlace", "client_workers", "run_sfl", "simulate"]
