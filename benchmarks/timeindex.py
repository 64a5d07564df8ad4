"""The time index's memory for 3,500 partitions, with Kafka's rule and at minute granularity.

    .venv/bin/python benchmarks/timeindex.py [--minutes N] [--partitions 3500]

KIP-33's table (a broker of 3,500 partitions; one entry per second: 86,400 entries per partition
a day, 3.4 GB; one per minute: 1,440 entries, 57 MB) is reproduced from segments written here.
One partition receives the tiered-storage design's traffic as one replica of a broker sees it:
62K messages/s of about 480 bytes per broker as leader, three replicas over 3,500 partitions, so
about 53 messages (26 KB) a second, one message per batch (librdkafka's defaults over thousands of
partitions). ``--minutes`` of it (timestamps one producer tick apart, from a manual clock) are
appended through ``Log`` with each setting in a temporary directory; the figures are measured
there (entries, the ``.timeindex`` file trimmed at roll, and the in-memory columns a search of
it loads) and scaled to a day, to a 1 GiB segment and to 3,500
partitions. Nothing is asserted; the table is printed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tidelog.clock import ManualClock
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.records.format import Record, build_message_set

DAY_MINUTES = 24 * 60
GIB = 1 << 30
ENTRY = 12  # bytes of a time index entry
GRANULARITIES = ("index.interval", "minute")


def column_bytes(index) -> int:
    """Bytes of the in-memory copies of an index's two columns a search reads (tidelog keeps
    those instead of Kafka's memory map), loaded by one lookup."""
    index.lookup(0)
    keys, values = index._keys, index._values
    return len(keys) * keys.itemsize + len(values) * values.itemsize


def write_partition(directory: Path, granularity: str, args) -> dict:
    clock = ManualClock()
    config = LogConfig(timeindex_granularity=granularity)  # Kafka's defaults otherwise
    log = Log(directory, config, clock=clock)
    value = os.urandom(args.record_bytes)  # random: a snappy batch of one would not shrink it
    tick_ms = 1000 / args.messages_per_second
    start = clock.milliseconds()
    began = time.perf_counter()
    count = int(args.minutes * 60 * args.messages_per_second)
    for number in range(count):
        timestamp = start + int(number * tick_ms)
        clock.advance(timestamp - clock.milliseconds())
        log.append_as_leader(build_message_set([Record(b"key", value, timestamp)], magic=1))
    seconds = time.perf_counter() - began
    active = log.active_segment
    entries, offset_entries = active.time_index.entries, active.index.entries
    log_bytes = active.size
    log.roll("measured")  # the final entry, then the trimmed file a closed segment keeps
    rolled = log.segments[0].time_index
    trimmed = rolled.path.stat().st_size
    resident = column_bytes(rolled)
    log.close()
    return {
        "entries": entries,
        "offset_entries": offset_entries,
        "resident": resident,
        "trimmed": trimmed,
        "log_bytes": log_bytes,
        "seconds": seconds,
        "messages": count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20, help="of traffic to write")
    parser.add_argument("--partitions", type=int, default=3500)
    parser.add_argument(
        "--messages-per-second", type=float, default=62_000 * 3 / 3500, help="per partition"
    )
    parser.add_argument("--record-bytes", type=int, default=480)
    parser.add_argument("--retention-days", type=float, default=7, help="Kafka's default")
    args = parser.parse_args()

    figures = {}
    with tempfile.TemporaryDirectory() as scratch:
        for granularity in GRANULARITIES:
            figures[granularity] = write_partition(Path(scratch) / granularity, granularity, args)

    default = figures["index.interval"]
    rate = default["log_bytes"] / (args.minutes * 60)
    print(
        f"one partition: {args.messages_per_second:.1f} messages/s of {args.record_bytes} B "
        f"({rate / 1000:.1f} KB/s of log, {args.minutes:g} minutes written, "
        f"{default['messages']} messages); log.index.interval.bytes=4096, 1 GiB segments "
        f"({GIB / rate / 3600:.1f} hours each)"
    )
    print(
        "granularity    | time index entries: written / per minute / per day / per 1 GiB "
        "segment | file at roll / in memory | bytes per partition a day | "
        f"{args.partitions} partitions: a day / {args.retention_days:g} days"
    )
    rows = {}
    for granularity, measured in figures.items():
        per_minute = measured["entries"] / args.minutes
        per_day = per_minute * DAY_MINUTES
        per_segment = per_minute * GIB / (rate * 60)
        day_bytes = per_day * ENTRY
        rows[granularity] = day_bytes
        print(
            f"{granularity:14} | {measured['entries']:7d} / {per_minute:8.1f} / {per_day:9.0f} / "
            f"{per_segment:9.0f} | {measured['trimmed']:7d} B / {measured['resident']:7d} B | "
            f"{day_bytes / 1e6:8.3f} MB | "
            f"{day_bytes * args.partitions / 1e9:7.3f} GB / "
            f"{day_bytes * args.partitions * args.retention_days / 1e9:7.3f} GB"
            f"   ({measured['seconds']:.1f} s to write)"
        )
    print(
        f"ratio index.interval / minute: {rows['index.interval'] / rows['minute']:.0f}x "
        f"(offset index entries, the same either way: {default['offset_entries']} in "
        f"{args.minutes:g} minutes)"
    )
    print("KIP-33's table for 3,500 partitions a day: one entry a second 3.4 GB, a minute 57 MB")


if __name__ == "__main__":
    main()
