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

    def error(self, message: str):
        where = self.prog.removeprefix("flowsplit").strip()
        raise ConfigError(f"{where + ': ' if where else ''}{message} (see {self.prog} --help)")


# Modules with a ``register(subparsers)`` function, in the order --help shows them.
COMMAND_MODULES = (
    "flowsplit.data.commands",
    "flowsplit.train.commands",
    "flowsplit.experiments.commands",
    "flowsplit.federated.commands",
    "flowsplit.testbed.commands",
    "flowsplit.demo",
)
# Modules with an ``sfl_commands()`` function (name -> builder) adding ``flowsplit sfl``
# sub-commands defined outside flowsplit.federated; registered here, not at import time,
# so that flowsplit.federated never imports the packages built on it.
SFL_COMMAND_MODULES = (
    "flowsplit.planner.commands",
    "flowsplit.experiments.sfl_commands",
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
    add_sfl_command = importlib.import_module("flowsplit.federated.commands").add_sfl_command
    for name in SFL_COMMAND_MODULES:
        for command, build in importlib.import_module(name).sfl_commands().items():
            add_sfl_command(command)(build)
    add_sfl_policy = importlib.import_module("flowsplit.federated.commands").add_sfl_policy
    for policy, (module, factory) in SFL_POLICIES.items():
        add_sfl_policy(policy, _lazy_policy(module, factory))
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
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
