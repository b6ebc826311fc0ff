"""Command line: parse, build the config, dispatch. No logic lives here.

Each area of flowsplit registers its own sub-commands through a ``register``
function in its ``commands`` module, so this file only lists the areas.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from pathlib import Path

from flowsplit import __version__
from flowsplit.errors import ConfigError, FlowsplitError

USER_OS_ERRORS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        # A path the user gave that cannot be one: a file where a folder must be (or
        # the other way round), a name too long, a loop of links.
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ENAMETOOLONG,
        errno.ELOOP,
    }
)
"""OS errors reported as one line naming the file, not as an internal error."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the CLI prints it), not usage + message.

    Sub-command parsers inherit the class (argparse makes them with the parent's type).
    """

    examples: str | None = None
    """Shown as written at the end of ``--help`` (set from :data:`EXAMPLES`)."""

    def error(self, message: str):
        where = self.prog.removeprefix("flowsplit").strip()
        raise ConfigError(f"{where + ': ' if where else ''}{message} (see {self.prog} --help)")

    def format_help(self) -> str:
        text = super().format_help()
        if self.examples:
            lines = "".join(f"  {line}\n" if line else "\n" for line in self.examples.splitlines())
            text += "\nexamples:\n" + lines
        return text


EXAMPLES = {
    "flowsplit": """\
flowsplit prepare captures/ -o runs/ds          # one folder per class: labels by folder
flowsplit train runs/ds --model cnn -o runs/cnn
flowsplit evaluate runs/cnn runs/ds --predictions flows.csv
flowsplit sfl run runs/ds --scheme hsfl -o runs/hsfl
flowsplit demo                                   # the whole tour on the embedded capture""",
    "flowsplit prepare": """\
flowsplit prepare captures/ -o runs/ds                       # captures/CLASS/*.pcap
flowsplit prepare caps/ -o runs/ds --label-by file-csv --labels labels.csv
flowsplit prepare caps/ -o runs/ds --label-by ndpi --top-classes 8""",
    "flowsplit inspect": "flowsplit inspect runs/ds\nflowsplit inspect runs/ds --json",
    "flowsplit train": """\
flowsplit train runs/ds --model cnn -o runs/cnn
flowsplit train runs/ds --model cnn --workers 2 -o runs/cnn-2w     # data-parallel (DDP)
flowsplit train runs/ds --model xgboost -o runs/xgb
PYTHONPATH=. flowsplit train runs/ds --model my_models:build -o runs/mine   # your own model""",
    "flowsplit pretrain": """\
flowsplit pretrain captures/ --like runs/ds -o runs/pre      # masked byte modelling
flowsplit pretrain runs/ds -o runs/pre                       # a dataset's train rows
flowsplit train runs/ds --model transformer --init-from runs/pre -o runs/tr""",
    "flowsplit evaluate": """\
flowsplit evaluate runs/cnn runs/ds
flowsplit evaluate runs/cnn runs/ds --predictions flows.csv --json
flowsplit evaluate runs/cnn other-ds --split all     # a dataset the model never saw""",
    "flowsplit predict": """\
flowsplit predict runs/cnn new.pcap
flowsplit predict runs/cnn a.pcap b.pcap -o flows.csv --min-confidence 0.8""",
    "flowsplit compare": """\
flowsplit compare runs/ds --models cnn,xgboost --workers 1,2 --seeds 5 -o runs/study
flowsplit compare runs/ds --quick -o runs/quick""",
    "flowsplit report": "flowsplit report runs/study",
    "flowsplit demo": "flowsplit demo\nflowsplit demo -o runs/demo --seeds 2 --epochs 1",
    "flowsplit sfl run": """\
flowsplit sfl run runs/ds --scheme hsfl --clients 10 --aggregators 3 -o runs/hsfl
flowsplit sfl run runs/ds --plan plan.json -o runs/planned
flowsplit sfl run runs/ds --mode dist --clients 3 --aggregators 2 -o runs/dist""",
    "flowsplit sfl": """\
flowsplit sfl run runs/ds --scheme hsfl -o runs/hsfl
flowsplit sfl plan runs/ds --model cnn -o plan.json
flowsplit sfl compare runs/ds -o runs/sfl-study""",
    "flowsplit sfl probe": "flowsplit sfl probe -o runs/probe --model cnn --topology heterogeneous",
    "flowsplit testbed": "flowsplit testbed show --nodes 3\nflowsplit testbed run --nodes 2 -- flowsplit --version",
    "flowsplit testbed run": "flowsplit testbed run --nodes 2 --mbit 100 -- flowsplit --version",
    "flowsplit testbed show": "flowsplit testbed show --nodes 3",
    "flowsplit testbed compare": "flowsplit testbed compare topo.toml runs/ds -o gains.json --seeds 3",
    "flowsplit testbed clean": "flowsplit testbed clean\nflowsplit testbed clean --all",
    "flowsplit sfl profile": "flowsplit sfl profile --model cnn --dataset runs/ds",
    "flowsplit sfl plan": """\
flowsplit sfl plan runs/ds --model cnn --topology heterogeneous -o plan.json
flowsplit sfl run runs/ds --plan plan.json -o runs/planned""",
    "flowsplit sfl compare": "flowsplit sfl compare runs/ds --seeds 5 -o runs/sfl-study",
    "flowsplit sfl privacy": """\
flowsplit sfl privacy runs/ds --model cnn -o runs/privacy
flowsplit sfl privacy runs/ds -o runs/privacy --victim-run runs/hsfl --defences noise:0.5""",
}
"""An example or two for each command's ``--help`` (a test checks every command has one)."""


def _add_examples(parser: argparse.ArgumentParser, path: str) -> None:
    """Attach :data:`EXAMPLES` to ``parser`` and every sub-command below it."""
    if isinstance(parser, _Parser):
        parser.examples = EXAMPLES.get(path)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _add_examples(sub, f"{path} {name}")


SFL_GROUP = "sfl"
"""In :data:`COMMAND_MODULES`: where the ``sfl`` group stands (built by :func:`_add_sfl_group`)."""
# Modules with a ``register(subparsers)`` function, in the order --help shows them.
COMMAND_MODULES = (
    "flowsplit.data.commands",
    "flowsplit.train.commands",
    "flowsplit.train.pretrain",
    "flowsplit.experiments.dp.commands",
    SFL_GROUP,
    "flowsplit.testbed.commands",
    "flowsplit.demo",
)
# Modules with an ``sfl_commands()`` function (name -> builder) adding ``flowsplit sfl``
# sub-commands, in the order --help shows them; listed here, not in flowsplit.federated,
# so that flowsplit.federated never imports the packages built on it.
SFL_COMMAND_MODULES = (
    "flowsplit.federated.commands",
    "flowsplit.planner.commands",
    "flowsplit.experiments.sfl.commands",
    "flowsplit.privacy.commands",
)
# The assignment policies ``sfl run`` may use (name -> module and factory), for the same
# reason; imported only when a run asks for one (they import torch, which --help must not).
SFL_POLICIES = {
    "reassign": ("flowsplit.planner.reassign", "reassigning_policy"),
    "every-round": ("flowsplit.planner.replan", "replanning_policy"),
}


def _lazy_policy(module: str, factory: str):
    """A factory that imports ``module`` when first called."""
    return lambda config: getattr(importlib.import_module(module), factory)(config)


def _add_sfl_group(sub: argparse._SubParsersAction) -> None:
    """``flowsplit sfl``: the sub-commands of :data:`SFL_COMMAND_MODULES`."""
    parser = sub.add_parser(
        SFL_GROUP,
        help="split federated learning: run, profile, plan and compare sfl/hsfl/hsfl-ll",
        description="Split federated learning across clients, edge aggregators and a server.",
    )
    sfl_sub = parser.add_subparsers(dest="sfl_command", metavar="SFL_COMMAND")
    parser.set_defaults(func=lambda args: _group_help(parser))
    for name in SFL_COMMAND_MODULES:
        for build in importlib.import_module(name).sfl_commands().values():
            build(sfl_sub)


def _group_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="flowsplit",
        description=(
            "Train network-traffic classifiers centralised, data-parallel, or split "
            "across devices, edge aggregators and the cloud, and measure what each costs."
        ),
    )
    parser.add_argument("--version", action="version", version=f"flowsplit {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback when something fails"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_sfl_policy = importlib.import_module("flowsplit.federated.commands").add_sfl_policy
    for policy, (module, factory) in SFL_POLICIES.items():
        add_sfl_policy(policy, _lazy_policy(module, factory))
    for name in COMMAND_MODULES:
        if name == SFL_GROUP:
            _add_sfl_group(sub)
        else:
            importlib.import_module(name).register(sub)
    _add_examples(parser, "flowsplit")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("FLOWSPLIT_DEBUG") == "1"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(message)s",
        stream=sys.stderr,
    )
    parser = build_parser()
    # --debug may come anywhere on the line, also after the sub-command's options.
    argv = [a for a in argv if a != "--debug"]
    try:
        args = parser.parse_args(argv)  # option parsers may raise FlowsplitError too
    except FlowsplitError as exc:
        if debug:
            raise
        print(f"flowsplit: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
        return int(rc or 0)
    except FlowsplitError as exc:
        if debug:
            raise
        print(f"flowsplit: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flowsplit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - last line of defence for the CLI
        if debug:
            raise
        line = user_os_error(exc)
        if line is not None:
            print(f"flowsplit: error: {line}", file=sys.stderr)
            return 2
        print(
            f"flowsplit: internal error: {type(exc).__name__}: {exc} "
            "(run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def one_line(exc: BaseException) -> str:
    """An error's message on one line: a message quoting a library's several lines
    (a file's parse error, say) must not spread the error over several."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip())


def user_os_error(exc: BaseException) -> str | None:
    """The one-line message of an OS error that is the user's to fix, else None.

    Full disk, no permission, read-only file system, or an output path that cannot be
    made because a file stands where a folder must: each names the path. Any other
    error (and these without a path) stays an internal error: it is a bug to report.
    """
    if not isinstance(exc, OSError) or not exc.filename:
        return None
    path = Path(os.fsdecode(exc.filename))
    if exc.errno == errno.EEXIST:
        # mkdir(exist_ok=True) says EEXIST when the name is taken by a file.
        if path.exists() and not path.is_dir():
            return f"{path}: exists and is not a directory; choose another path"
        return None
    if exc.errno not in USER_OS_ERRORS:
        return None
    if exc.errno == errno.ENOTDIR:
        blocker = next((p for p in (path, *path.parents) if p.is_file()), None)
        if blocker is not None and blocker != path:
            return f"{path}: cannot be made: {blocker} is a file, not a directory"
    return f"{path}: {exc.strerror}"
