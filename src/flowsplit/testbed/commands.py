"""``flowsplit testbed``: run a command once per emulated node; show a spec; clean up.

    flowsplit testbed run TOPOLOGY.toml -- flowsplit sfl run DATA --mode dist \\
        --topology TOPOLOGY.toml -o RUN
    flowsplit testbed run --nodes 4 --mbit 100 --cpu 0.25 -- flowsplit train DATA -o RUN \\
        --threads 1 --steps-per-epoch 20
    flowsplit testbed show TOPOLOGY.toml | --nodes 4 ...
    flowsplit testbed clean [--all]
    flowsplit testbed compare TOPOLOGY.toml DATASET -o gains.json [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from flowsplit.config_args import (
    add_config_arguments,
    add_dataset_argument,
    add_out_option,
    cli,
    command_parser,
    config_from_args,
    finite_float,
    path_arg,
    path_text,
)
from flowsplit.errors import ConfigError
from flowsplit.testbed.compare import CompareOptions
from flowsplit.util.system import Stopped, stop_signals

RUN_DESCRIPTION = """\
Build an emulated network on this machine and run COMMAND once in every node, as
torchrun would start one process per node: RANK (the node's order), WORLD_SIZE,
MASTER_ADDR (the first node's address), MASTER_PORT, LOCAL_RANK=0 and
GLOO_SOCKET_IFNAME (the node's interface) are set; {rank}, {node} and {address} in
COMMAND become the node's. `flowsplit ...` runs this interpreter's flowsplit.

From a topology TOML (the one `sfl run --topology` reads) the nodes are the server,
the aggregators and the clients in the dist runner's rank order, every directed link
shaped to the topology's bandwidth, CPU shares in the ratio of the compute speeds.
With --nodes, N identical nodes each send at --mbit under a --cpu core quota.

Latency is not emulated (no netem on these kernels): the paths have tens of
microseconds. Everything made (namespaces, interfaces, qdiscs, cgroups, processes) is
removed when COMMAND ends, fails, or the testbed is stopped (Ctrl-C, SIGTERM). Needs root.
"""


def _add_spec_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", nargs="?", metavar="TOPOLOGY", help="topology TOML (sfl run's)")
    _add_spec_options(p)


@dataclass
class SpecChoice:
    """Which nodes a testbed has: a TOPOLOGY's, or a cluster of identical ones (the
    options of ``testbed run`` and ``testbed show``)."""

    nodes: int | None = field(
        default=None, metadata=cli(help="a cluster of N identical nodes instead")
    )
    mbit: float | None = field(
        default=None, metadata=cli(parse=float, help="cluster: each node's link rate, Mbit/s")
    )
    cpu: float | None = field(
        default=None, metadata=cli(parse=float, help="cluster: each node's CPU quota, cores")
    )
    cpu_budget: float | None = field(
        default=None,
        metadata=cli(
            parse=float,
            help="topology: cores all nodes may use together (default: this machine's)",
        ),
    )
    cpu_period_us: int = field(
        default=10_000, metadata=cli(help="cgroup CFS period (default 10000)")
    )

    def spec(self, topology: str | None):
        """The :class:`~flowsplit.testbed.spec.TestbedSpec` of these options and
        ``topology`` (one of the two)."""
        from flowsplit.testbed.spec import NodeSpec, TestbedSpec

        if (topology is None) == (self.nodes is None):
            raise ConfigError("give a TOPOLOGY file or --nodes N (one of them)")
        if self.nodes is not None:
            node = NodeSpec("node", cpu=self.cpu, mbit=self.mbit)  # each node of --nodes N
            return TestbedSpec.cluster(self.nodes, node, cpu_period_us=self.cpu_period_us)
        if self.mbit is not None or self.cpu is not None:
            raise ConfigError("--mbit and --cpu describe a --nodes cluster; a topology has its own")
        return TestbedSpec.from_topology(
            topology, cpu_budget=self.cpu_budget, cpu_period_us=self.cpu_period_us
        )


def _add_spec_options(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, SpecChoice)


def _run_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    _add_spec_options(p)
    p.add_argument("--port", type=int, default=29500, help="MASTER_PORT (default 29500)")
    p.add_argument("--logs", type=path_arg, help="write each node's output to LOGS/<node>.log")
    p.add_argument(
        "--time-limit",
        type=finite_float,
        metavar="SECONDS",
        help="end every node after this many seconds (default: no limit)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    return p


def spec_from_args(args: argparse.Namespace):
    """The testbed of ``testbed run``'s or ``testbed show``'s options."""
    return config_from_args(SpecChoice, args).spec(args.topology)


class _OptionParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(f"testbed run: {message} (see flowsplit testbed run --help)")


def cmd_run(args: argparse.Namespace) -> int:
    from flowsplit.testbed.bed import Testbed
    from flowsplit.testbed.system import require

    command = list(args.command)
    if "--" in command:
        # argparse's remainder starts at TOPOLOGY: the options between it and `--` are ours
        cut = command.index("--")
        _run_options(_OptionParser(prog="flowsplit testbed run")).parse_args(
            command[:cut], namespace=args
        )
        command = command[cut + 1 :]
    if args.nodes is not None and args.topology is not None:
        # with --nodes (no TOPOLOGY) argparse hands the command's first word to TOPOLOGY
        command, args.topology = [args.topology, *command], None
    if not command:
        raise ConfigError("testbed run: give the COMMAND to run after --")
    spec = spec_from_args(args)
    require()
    t0 = time.monotonic()
    stopped = None
    try:
        with stop_signals(), Testbed(spec) as tb:
            if not args.quiet:
                nodes = ", ".join(
                    f"{n.name} {n.address}" + (f" {n.spec.cpu:.2g} cpu" if n.spec.cpu else "")
                    for n in tb.nodes.values()
                )
                print(f"testbed {tb.tag}: {nodes}", file=sys.stderr)
            procs = tb.launch(command, master_port=args.port, log_dir=args.logs)
            codes = tb.wait(procs, args.time_limit)
    except (Stopped, KeyboardInterrupt) as exc:
        stopped = str(exc) or "SIGINT"
    if stopped:
        print(f"testbed: stopped by {stopped}; everything it made was removed", file=sys.stderr)
        return 130
    failed = {name: c for name, c in zip(spec_names(spec), codes, strict=True) if c}
    took = time.monotonic() - t0
    if failed:
        first = next(iter(failed.items()))
        print(
            f"testbed: {len(failed)} of {len(codes)} nodes failed (first: {first[0]} exit "
            f"{first[1]}) after {took:.1f} s; testbed removed",
            file=sys.stderr,
        )
        return first[1] if first[1] > 0 else 1
    if not args.quiet:
        print(f"testbed: {len(codes)} nodes done in {took:.1f} s; testbed removed", file=sys.stderr)
    return 0


def spec_names(spec) -> list[str]:
    return [n.name for n in spec.nodes]


def cmd_show(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    print(json.dumps(spec.to_dict(), indent=2))
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from flowsplit.testbed.system import clean_leftovers, require

    require()
    removed = clean_leftovers(all_testbeds=args.all)
    print(f"removed {len(removed)} testbed(s){': ' + ', '.join(removed) if removed else ''}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import tempfile

    from flowsplit.testbed.compare import compare_on_testbed, gains_lines
    from flowsplit.testbed.system import require

    if not Path(args.topology).is_file():
        raise ConfigError(f"testbed compare: {args.topology}: no such topology file")
    if not Path(args.dataset).is_dir():
        raise ConfigError(f"testbed compare: {args.dataset}: no such prepared dataset")
    options = config_from_args(CompareOptions, args)
    if len(options.seeds) < 2:  # (parsed as every command's --seeds)
        raise ConfigError("testbed compare: --seeds needs 2 seeds or more for an interval")
    require()
    say = (lambda *_: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="flowsplit-compare-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        try:
            with stop_signals():
                doc = compare_on_testbed(Path(args.topology), args.dataset, work, options, log=say)
        except (Stopped, KeyboardInterrupt) as exc:
            print(
                f"testbed compare: stopped by {exc or 'SIGINT'}; testbed removed", file=sys.stderr
            )
            return 130
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=str))
    for line in gains_lines(doc):
        print(line)
    print(f"wrote {args.out} (measured on the testbed; predicted beside it)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``flowsplit testbed`` and its sub-commands."""
    top = sub.add_parser(
        "testbed",
        help="emulated cluster or edge network on this machine (root)",
        description=(__doc__ or "").partition("\n")[0],
    )
    tsub = top.add_subparsers(dest="testbed_command", metavar="COMMAND")
    top.set_defaults(func=lambda _args: top.print_help() or 2)

    p = tsub.add_parser(
        "run",
        help="run a command once per node",
        description=RUN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("topology", nargs="?", metavar="TOPOLOGY", help="topology TOML (sfl run's)")
    _run_options(p)
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the command every node runs (after --)",
    )
    p.set_defaults(func=cmd_run)

    p = tsub.add_parser("show", help="print the nodes, CPU shares and link rates of a spec")
    _add_spec_arguments(p)
    p.set_defaults(func=cmd_show)

    _add_compare(tsub)

    p = tsub.add_parser("clean", help="remove what testbeds whose owner died left behind")
    p.add_argument("--all", action="store_true", help="also live testbeds' (all of them)")
    p.set_defaults(func=cmd_clean)


def _add_compare(tsub: argparse._SubParsersAction) -> None:
    """the planner's gains measured: probe, plan, run every plan (paired CIs)

    On a testbed of TOPOLOGY: probe every node (sfl probe), plan on the probe (acc-aware,
    delay; HSFL and hsfl-greedy as baselines) for every seed, run every plan (sfl run --mode
    dist), and compare measured delay and bytes against HSFL and hsfl-greedy, paired by seed
    (mean and 95 %% t interval), beside the predicted gains. Needs root.
    """
    p = command_parser(tsub, "compare", _add_compare)
    p.add_argument("topology", metavar="TOPOLOGY", help="topology TOML (sfl run's)")
    add_dataset_argument(p)
    add_out_option(p, "write the comparison JSON here", metavar="FILE")
    add_config_arguments(p, CompareOptions)
    p.add_argument(
        "--keep",
        metavar="DIR",
        help="keep plans, probes and runs in this directory",
        type=path_text,
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_compare)
