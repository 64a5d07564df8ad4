"""The ``tidelog`` command: ``main`` assembles the command groups, one module each.

Each module has ``add(commands)``, which declares its group's options beside the functions that
run them (``set_defaults(run=...)``). A module's top level imports only the standard library and
``tidelog.cli``; what a group needs to run, or for its choices, it imports inside the function:
every broker a local cluster starts is ``tidelog broker``, and pays for what is imported here.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from tidelog import __version__
from tidelog.cli.common import unreachable
from tidelog.reach import Unreachable

# each group's command and its module, in the order `tidelog --help` lists them; a module is
# imported only when its group is on the command line (or for the whole --help)
GROUPS = {
    "dump-log": "dump_log",
    "broker": "broker",
    "cluster": "cluster",
    "topic": "topic",
    "perf": "perf",
    "scenario": "scenario",
    "upgrade": "upgrade",
    "report": "report",
}


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is reported with its own usage
    (argparse would hand it up to the top level, whose usage says nothing about the option)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """tidelog's command line; ``only``: just that command's group, where the command line
    names it (a broker's start, or any one command, does not pay for the imports of the other
    commands' modules and choices: some import pyarrow and the fault catalogue, a second of a
    start; the modules themselves, about 12 ms of a broker's start)."""
    parser = argparse.ArgumentParser(
        prog="tidelog",
        description="A replicated, Kafka-compatible log broker and cluster testbed.",
    )
    parser.add_argument("--version", action="version", version=f"tidelog {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_SubcommandParser
    )
    for name, module in GROUPS.items():
        if only is None or name == only:
            importlib.import_module(f"tidelog.cli.{module}").add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    named = given[0] if given and given[0] in GROUPS else None
    args = build_parser(only=named).parse_args(given)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # a broker's log keeps kazoo's warnings (a lost session, a reconnect); a command says
        # what it could not reach in one line of its own
        quiet = logging.WARNING if args.command == "broker" else logging.CRITICAL
        logging.getLogger("kazoo").setLevel(quiet)
    try:
        return args.run(args)
    except Unreachable as error:
        return unreachable(args, error)
    except BrokenPipeError:
        # The reader went away (`tidelog dump-log ... | head`): stop quietly, as Unix tools do.
        # Python flushes stdout again at exit, so it is pointed at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a process ended by SIGPIPE
