"""The ``tidelog`` command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from tidelog import __version__


def _dump_log(args: argparse.Namespace) -> int:
    from tidelog.log.dump import dump_file, format_dump

    failed = False
    dumps = []
    for name in args.files:
        try:
            dump = dump_file(
                Path(name),
                deep_iteration=args.deep_iteration,
                print_data=args.print_data_log,
                verify=args.verify_index,
            )
        except (OSError, ValueError) as error:
            print(f"tidelog dump-log: {error}", file=sys.stderr)
            failed = True
            continue
        failed = failed or bool(dump.get("mismatches")) or bool(dump.get("invalid_bytes"))
        if args.json:
            dumps.append(dump)
        else:
            print("\n".join(format_dump(dump)))
    if args.json:
        print(json.dumps(dumps if len(dumps) != 1 else dumps[0], indent=2))
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidelog",
        description="A replicated, Kafka-compatible log broker and cluster testbed.",
    )
    parser.add_argument("--version", action="version", version=f"tidelog {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = commands.add_parser(
        "dump-log",
        help="print the messages of .log files or the entries of .index/.timeindex files",
        description=(
            "Like Kafka's DumpLogSegments: prints each message of a .log segment (offset, "
            "position, magic, codec, timestamp, key and value sizes, CRC validity) or each "
            "entry of an index. Exits 1 if a log has invalid bytes or an index a mismatch."
        ),
    )
    dump.add_argument("files", nargs="+", metavar="FILE", help=".log, .index or .timeindex files")
    dump.add_argument(
        "--deep-iteration", action="store_true", help="also print the messages inside wrappers"
    )
    dump.add_argument(
        "--print-data-log", action="store_true", help="print keys and values as text too"
    )
    dump.add_argument(
        "--verify-index",
        action="store_true",
        help="check every index entry against the .log file beside it and report mismatches",
    )
    dump.add_argument("--json", action="store_true", help="machine-readable output")
    dump.set_defaults(run=_dump_log)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
