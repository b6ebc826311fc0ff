"""``flowsplit sfl run|probe|profile``.

``flowsplit sfl`` is a command group that :mod:`flowsplit.cli` builds from the
``sfl_commands()`` of this module and of the packages built on this one (``plan`` in
flowsplit.planner, ``compare`` in flowsplit.experiments, ``privacy``), so this package
imports none of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowsplit.choices import ModelChoice, parse_model_option
from flowsplit.config_args import (
    add_config_arguments,
    add_dataset_argument,
    add_log_to_argument,
    add_out_option,
    add_renamed,
    command_parser,
    config_from_args,
    path_text,
)
from flowsplit.config_file import (
    add_config_file_option,
    build_config,
)
from flowsplit.errors import ConfigError, InputError
from flowsplit.federated.config import GROUPS, SFLConfig, SFLRunConfig
from flowsplit.federated.plan_file import read_plan
from flowsplit.federated.run import RUN_ARGS, RunPlace

log = logging.getLogger("flowsplit.federated")

# name -> factory(config) of an AssignmentPolicy (flowsplit.federated.assignment), added
# by flowsplit.cli from the packages built on this one (the planner's reassignment):
# ``reassign`` is what ``sfl run`` uses (the clients of a lost aggregator are moved).
SFL_POLICIES: dict[str, Callable[[SFLConfig], Any]] = {}


def add_sfl_policy(name: str, factory: Callable[[SFLConfig], Any]) -> None:
    """Register an assignment-policy factory for ``sfl run`` under ``name``."""
    SFL_POLICIES[name] = factory


def run_policy(config: SFLConfig):
    """The assignment policy ``sfl run`` gives its runtime (None: keep the assignment):
    ``--replan``'s (``every-round``), else ``reassign`` (only lost aggregators' clients move)."""
    factory = SFL_POLICIES.get(config.replan if config.replan != "never" else "reassign")
    return None if factory is None else factory(config)


def _neural_model(choice: ModelChoice):
    """The model factory of a :class:`ModelChoice` (a neural model, or a user's)."""
    from flowsplit.federated.setup import RegistryModel
    from flowsplit.models.registry import MODEL_SPECS, neural_models

    name, view, options = choice.model, choice.view, choice.model_options
    if name not in MODEL_SPECS and ":" not in name:
        raise ConfigError(f"unknown model {name!r}; choose one of {', '.join(neural_models())}")
    if name in MODEL_SPECS and name not in neural_models():
        raise ConfigError(
            f"{name} is not a neural model and cannot be split; choose one of "
            f"{', '.join(neural_models())}"
        )
    return RegistryModel(name, view, options)


# --- run -------------------------------------------------------------------------------


def _add_run(sub: argparse._SubParsersAction) -> None:
    """train with sfl, hsfl or hsfl-ll (simulated or as real processes)

    Train a model split across clients, edge aggregators and a server; write
    OUT/metrics.json (per round: accuracy, macro-F1, loss, simulated delay, bytes by
    hop/direction/message type; totals), topology.toml, config.json, profile.json and
    model.pt.
    """
    p = command_parser(sub, "run", _add_run)
    add_dataset_argument(
        p, "dataset directory (from `flowsplit prepare`; not with --resume)", nargs="?"
    )
    add_out_option(p, "run directory to write (required)", required=False)  # or --resume OUT
    add_config_file_option(p)
    p.add_argument(
        "--resume",
        nargs="?",
        const=False,  # bare --resume: the run in -o (not a text: argparse would check it)
        default=None,
        metavar="OUT",
        help="dist: continue the run in OUT from its sfl-checkpoint.pt (written after "
        f"every round) with the options it was started with (OUT/{RUN_ARGS}); "
        "`-o OUT --resume` with the same options works too",
        type=path_text,
    )
    # Every field of SFLRunConfig (the model, the topology, --mode and the run's
    # SFLConfig), with its docstring as help: a new field needs no edit here. Not given:
    # None, so that a --config file's values stand unless an option overrides them.
    add_config_arguments(p, SFLRunConfig, overrides=GROUPS, unset=True)
    add_renamed(p, "--backend", "--mode", "--backend is train's process-group backend")
    # Where it runs and what it may do there (--overwrite, --force, --quiet, --bind,
    # --probe): RunPlace's flags.
    add_config_arguments(p, RunPlace)
    p.add_argument(
        "--plan",
        default=None,
        metavar="PLAN.json",
        help="run a plan.json from `flowsplit sfl plan`: its "
        "scheme, cuts, assignment, topology, model, batch size, local epochs, "
        "partition, training rows, seed and rounds replace those options "
        "(--rounds, when given, replaces the plan's rounds)",
        type=path_text,
    )
    add_log_to_argument(p)
    p.set_defaults(func=cmd_run)


def run_config(args: argparse.Namespace) -> SFLRunConfig:
    """``sfl run``'s config: the defaults, then ``--config FILE``, then the options given."""
    return build_config(SFLRunConfig, args)


def _config_from_args(args: argparse.Namespace) -> SFLConfig:
    return run_config(args).run


_RUN_ARG_NAMES = ("dataset", "plan")


def _resolved(path: str | None) -> str | None:
    """A path as an absolute one when it names a file or folder (else as given: a preset)."""
    return str(Path(path).resolve()) if path and Path(path).exists() else path


def write_run_args(out: Path, args: argparse.Namespace, rc: SFLRunConfig) -> None:
    """Save what ``sfl run --resume OUT`` needs to start the same run again (atomic)."""
    from flowsplit.outputs import atomic_write_json

    saved = {name: _resolved(getattr(args, name)) for name in _RUN_ARG_NAMES}
    choices = dataclasses.asdict(rc)
    choices.pop("run")
    choices["topology"] = _resolved(choices["topology"])
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out / RUN_ARGS, {"args": saved, "choices": choices, "config": rc.run.to_dict()}
    )


def _saved_run_config(saved: dict) -> SFLRunConfig:
    """The :class:`SFLRunConfig` of an ``sfl-run.json`` (also one saved before the
    choices were a config: its options under their command-line names)."""
    choices = saved.get("choices")
    if choices is None:
        old = saved["args"]
        choices = {
            "model": old["model"],
            "view": old["view"],
            "model_options": [parse_model_option(o) for o in old.get("model_option") or []],
            "topology": old["topology"],
            "n_clients": old["clients"],
            "n_aggregators": old["aggregators"],
            "mode": old["mode"],
            "client_workers": old.get("client_workers"),
        }
    return SFLRunConfig(**choices, run=SFLConfig.from_dict(saved["config"]))


def _resume_args(args: argparse.Namespace) -> SFLRunConfig | None:
    """Fill ``args`` for ``--resume OUT``; returns the saved config (None: the old form,
    ``DATASET ... -o OUT --resume``, whose options are the command line's)."""
    if args.resume is None:
        if args.dataset is None or args.out is None:
            raise ConfigError("sfl run needs a DATASET and -o OUT (or --resume OUT)")
        return None
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise ConfigError(f"--resume {args.resume} and -o {args.out}: name one run directory")
    args.out = args.resume or args.out
    if not args.out:
        raise ConfigError("--resume needs the run directory: --resume OUT")
    if args.dataset is not None:
        return None
    path = Path(args.out) / RUN_ARGS
    if not path.is_file():
        raise InputError(
            path,
            "missing: not a dist run started by this version of sfl run; resume with the "
            "run's options: sfl run DATASET ... -o OUT --resume",
        )
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        for name in _RUN_ARG_NAMES:
            setattr(args, name, saved["args"][name])
        return _saved_run_config(saved)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"unreadable ({type(exc).__name__}: {exc})") from None


def cmd_run(args: argparse.Namespace) -> int:
    """``sfl run`` under the lock of its run directory: a second ``sfl run -o SAME`` (or
    ``train -o SAME``) is refused naming this one. torchrun's ranks share OUT: unlocked."""
    from flowsplit.data.store import OutputLock
    from flowsplit.train.distributed import read_dist_env

    out = args.resume or args.out
    dist = (args.mode or (run_config(args).mode if args.config_file else None)) == "dist"
    if out is None or (dist and read_dist_env().is_distributed):
        return _run(args)
    with OutputLock(out):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from flowsplit.federated.run import run_sfl

    saved = _resume_args(args)
    place = config_from_args(
        RunPlace,
        args,
        out=Path(args.out),
        dataset=args.dataset,
        plan=read_plan(args.plan) if args.plan else None,
        resume=args.resume is not None,
    )
    done = run_sfl(
        saved if saved is not None else run_config(args),
        place,
        model_factory=_neural_model,
        saved=saved is not None,
        on_launch=lambda rc: write_run_args(place.out, args, rc),
        policies=run_policy,
    )
    if done is None:  # a torchrun rank that writes nothing
        return 0
    result, out = done[1], place.out
    totals = result.totals()
    tracked = ""
    if getattr(args, "log_to", None) is not None:
        from flowsplit.tracking import write_run

        tracked = f" (tensorboard: {write_run(args.log_to, out)})"
    print(
        f"wrote {out / 'metrics.json'}: accuracy {totals['final_accuracy']:.4f}, "
        f"macro-F1 {totals['final_macro_f1']:.4f}, {totals['bytes_total'] / 1e6:.2f} MB, "
        f"{delay_summary(result.history, result.topology.name)} over {totals['rounds']} rounds"
        f"{tracked}"
    )
    return 0


def delay_summary(history: list[dict[str, Any]], topology: str) -> str:
    """A run's delays, each saying whether it is predicted or measured, and on what."""
    bound = sum(r["delay_s"] for r in history)
    text = f"predicted {bound:.1f} s (cost-model bound, topology {topology})"
    # A round in which no client took part has no timeline: it is said, not summed as 0.
    timed = [r for r in history if "predicted_round_s" in r]
    gap = len(history) - len(timed)
    untimed = f"; {gap} round(s) without a client untimed" if gap else ""
    if timed:
        pred = sum(r["predicted_round_s"] for r in timed)
        on = timed[0]["timing"]["predicted"]["on"]
        text += f", predicted {pred:.1f} s (schedule, {on}{untimed})"
    measured = [r for r in timed if "measured_round_s" in r]
    if measured:
        meas = sum(r["measured_round_s"] for r in measured)
        text += f", measured {meas:.1f} s (on {measured[0]['timing']['measured']['on']})"
    later = [r for r in history if "calibrated_round_s" in r]
    on = [r["round"] for r in history if "calibration" in r.get("timing", {})]
    if later and on:
        cal = sum(r["calibrated_round_s"] for r in later)
        meas = sum(r["measured_round_s"] for r in later)
        text += (
            f"; rounds {later[0]['round']}-{later[-1]['round']}: predicted {cal:.1f} s "
            f"(schedule, stream buffer calibrated on round {on[0]}), measured {meas:.1f} s"
        )
    return text


# --- probe -----------------------------------------------------------------------------


def _add_probe(sub: argparse._SubParsersAction) -> None:
    """measure the hosts' compute speeds and links; write a topology to plan from

    Start the dist runner's roles (here, or under torchrun / the testbed, one per host) and
    measure what the planner needs: each role's compute speed (timed training steps of its
    part at the given cuts and batch size) and each client-aggregator and aggregator-server
    link's round trip and bandwidth (timed transfers over the runner's own transport).
    Writes the measured topology (`sfl plan --topology OUT`) and OUT's .json twin with every
    measurement.
    """
    p = command_parser(sub, "probe", _add_probe)
    add_dataset_argument(p)
    add_out_option(p, "measured topology TOML to write")
    # The model, the topology (how many roles, which links exist: its values are
    # replaced by the measured ones) and the run's settings, as sfl run's.
    add_config_arguments(
        p, SFLRunConfig, exclude=("mode", "client_workers"), overrides=GROUPS, unset=True
    )
    p.add_argument(
        "--bind", default=None, metavar="ADDR", help="under torchrun: address gloo binds to"
    )
    p.add_argument("--quiet", action="store_true", help="warnings only")
    p.set_defaults(func=cmd_probe)


def cmd_probe(args: argparse.Namespace) -> int:
    rc = run_config(args)
    return probe_command(args, rc.run, _neural_model(rc), rc)


def probe_command(args: Any, config: Any, model_fn: Any, choice: Any = None) -> int:
    """``flowsplit sfl probe``: the roles here (or this one under torchrun); rank 0 writes
    ``args.out`` (the measured topology) and its ``.json`` twin."""
    import shutil
    import tempfile
    from functools import partial

    import torch

    from flowsplit.federated.dist import launch_roles, run_under_torchrun
    from flowsplit.federated.probe import PROBE_JSON, PROBE_TOML
    from flowsplit.federated.setup import prepare_run
    from flowsplit.federated.system.presets import resolve_topology
    from flowsplit.train.distributed import read_dist_env

    out = Path(args.out)
    if out.suffix.lower() != ".toml":
        raise ConfigError(f"-o {out}: the measured topology is a .toml file")
    choice = choice if choice is not None else args  # the testbed's probe passes its args
    topology = resolve_topology(
        choice.topology,
        n_clients=getattr(choice, "n_clients", getattr(choice, "clients", None)),
        n_aggregators=getattr(choice, "n_aggregators", getattr(choice, "aggregators", None)),
        seed=config.seed,
    )
    torch.set_num_threads(config.threads)
    setup = prepare_run(config, dataset=args.dataset, model_fn=model_fn, topology=topology)
    env = read_dist_env()
    # Here every role, or under torchrun this process's role (rank 0 writes OUT).
    roles = partial(run_under_torchrun, bind=args.bind) if env.is_distributed else launch_roles
    with tempfile.TemporaryDirectory(prefix="flowsplit-probe-") as tmp:
        roles(
            setup,
            dataset=args.dataset,
            model_fn=model_fn,
            out_dir=tmp,
            quiet=args.quiet,
            probe="only",
        )
        if env.rank != 0:
            return 0
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / PROBE_TOML, out)
        shutil.copyfile(Path(tmp) / PROBE_JSON, out.with_suffix(".json"))
    print(f"wrote {out} (measured topology) and {out.with_suffix('.json')}")
    return 0


# --- profile ---------------------------------------------------------------------------


def _add_profile(sub: argparse._SubParsersAction) -> None:
    """print a model's block profile and its legal cuts

    FLOPs, parameters and activation bytes of every block of a model built for a dataset,
    and the costs of every legal cut (a, c).
    """
    p = command_parser(sub, "profile", _add_profile)
    add_config_arguments(p, ModelChoice)
    p.add_argument(
        "--dataset", required=True, metavar="DATASET", help="dataset directory", type=path_text
    )
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from flowsplit.data.store import load_dataset
    from flowsplit.federated.system.profile import profile_model

    torch.set_num_threads(1)
    model_fn = _neural_model(build_config(ModelChoice, args))
    ds = load_dataset(args.dataset)
    view = model_fn.resolved_view()
    if not ds.has_view(view):
        raise ConfigError(
            f"dataset {ds.root} has no view {view!r} (it has {', '.join(ds.views)}); pass --view"
        )
    model = model_fn(input_shape=ds.view_shape(view), n_classes=ds.n_classes)
    profile = profile_model(model)
    if args.json:
        print(profile.to_json())
        return 0
    sys.stdout.write(format_profile(profile, view))
    return 0


def format_profile(profile, view: str) -> str:
    """The block table and the cut table of a profile, as text."""
    from flowsplit.federated.system.profile import cut_table

    lines = [
        f"model {profile.model} on view {view}: input {profile.input_shape}, "
        f"{profile.n_classes} classes, {profile.n_blocks} blocks",
        "",
        f"{'#':>2}  {'block':<8} {'type':<32} {'MFLOP/sample':>12} {'params':>9} "
        f"{'output':<18} {'KiB/sample':>10} {'bwd/fwd':>7}",
    ]
    ratios = profile.bwd_ratio
    for k in range(profile.n_blocks):
        lines.append(
            f"{k + 1:>2}  {profile.block_names[k]:<8} {profile.block_types[k][:32]:<32} "
            f"{profile.fwd_flops[k] / 1e6:>12.3f} {int(profile.params[k]):>9} "
            f"{str(tuple(profile.out_shapes[k])):<18} {profile.out_bytes[k] / 1024:>10.2f} "
            f"{ratios[k]:>7.2f}"
        )
    table = cut_table(profile)
    lines += [
        "",
        "legal cuts (a, c): client = blocks 1..a, aggregator = a+1..c (none when a == c), "
        "server = the rest",
        f"{'a':>2} {'c':>2}  {'client MFLOP':>12} {'agg MFLOP':>10} {'server MFLOP':>12} "
        f"{'client params':>13} {'cut a KiB':>9} {'cut c KiB':>9}   (training FLOPs per sample)",
    ]
    for r in range(len(table["a"])):
        lines.append(
            f"{table['a'][r]:>2} {table['c'][r]:>2}  {table['client_flops'][r] / 1e6:>12.3f} "
            f"{table['aggregator_flops'][r] / 1e6:>10.3f} {table['server_flops'][r] / 1e6:>12.3f} "
            f"{int(table['client_params'][r]):>13} {table['act_a_bytes'][r] / 1024:>9.2f} "
            f"{table['act_c_bytes'][r] / 1024:>9.2f}"
        )
    return "\n".join(lines) + "\n"


def sfl_commands() -> dict:
    """``flowsplit sfl`` sub-commands defined here: name -> builder(sfl_subparsers)."""
    return {"run": _add_run, "probe": _add_probe, "profile": _add_profile}
