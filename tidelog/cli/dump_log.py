"""``tidelog dump-log``: the messages of segments and the entries of indexes, local or remote."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add(commands) -> None:
    dump = commands.add_parser(
        "dump-log",
        help=(
            "print the messages of .log files or the entries of .index/.timeindex files and "
            "of the remote indexes (.remoteLogIndex/.remoteOffsetIndex/.remoteTimeIndex)"
        ),
        description=(
            "Like Kafka's DumpLogSegments: prints each message of a .log segment (offset, "
            "position, magic, codec, timestamp, key and value sizes, CRC validity) or each "
            "entry of an index. Exits 1 if a log has invalid bytes or an index a mismatch."
        ),
    )
    dump.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help=".log, .index, .timeindex, .remoteLogIndex, .remoteOffsetIndex or .remoteTimeIndex",
    )
    dump.add_argument(
        "--deep-iteration", action="store_true", help="also print the messages inside wrappers"
    )
    dump.add_argument(
        "--print-data-log", action="store_true", help="print keys and values as text too"
    )
    dump.add_argument(
        "--verify-index",
        action="store_true",
        help=(
            "check every index entry against the .log file beside it (a remote index: CRCs, "
            "and the messages in the remote data) and report mismatches"
        ),
    )
    dump.add_argument("--json", action="store_true", help="machine-readable output")
    dump.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tidelog.log.dump import dump_file, format_dump
    from tidelog.tiered import dump as remote_dump

    failed = False
    dumps = []
    for name in args.files:
        remote = remote_dump.is_remote_index(Path(name))
        try:
            if remote:
                dump = remote_dump.dump_remote_index(Path(name), verify=args.verify_index)
            else:
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
            print("\n".join((remote_dump.format_dump if remote else format_dump)(dump)))
    if args.json:
        print(json.dumps(dumps if len(dumps) != 1 else dumps[0], indent=2))
    return 1 if failed else 0
