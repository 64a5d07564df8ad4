"""The log cleaner on this machine: MB/s against a plain copy of the same segment files, and
bytes rewritten per byte reclaimed on a skewed (Zipf) key workload.

    .venv/bin/python benchmarks/cleaner.py [--megabytes N] [--keys N] [--rounds N]

- baseline, in the same run: copying the log's segment files with shutil.copyfile (what
  rewriting them costs with no work per message);
- one clean of a log of ``--megabytes`` of 100-byte values under ``--keys`` keys (uniform), in
  one thread: MB read per second, and its ratio to the copy;
- ``--rounds`` of appending a tenth of that under Zipf-distributed keys (s = 1.2) and cleaning
  again: bytes the cleaner wrote per byte it removed (Kafka's brute-force cleaner recopies the
  whole log each time).

Everything is in this process on a temporary directory; nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from tidelog.clock import SystemClock
from tidelog.log.cleaner import Cleaner, log_to_clean
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.offset_map import OffsetMap
from tidelog.records.format import Record, build_message_set

MB = 1024 * 1024
VALUE = b"v" * 100
CONFIG = LogConfig.from_topic_config({"cleanup.policy": "compact", "segment.bytes": str(8 * MB)})


def fill(partition_log: Log, megabytes: float, key_of) -> None:  # type: ignore[no-untyped-def]
    """Appends ``megabytes`` of keyed messages, 100 per batch; ``key_of()`` picks each key."""
    target = partition_log.size_in_bytes + megabytes * MB
    now = int(time.time() * 1000)
    while partition_log.size_in_bytes < target:
        batch = [Record(b"key-%d" % key_of(), VALUE, now) for _ in range(100)]
        partition_log.append_as_leader(build_message_set(batch, magic=1))
    partition_log.roll("the benchmark cleans everything")
    partition_log.high_watermark = partition_log.log_end_offset


def copy_seconds(partition_log: Log, target: Path) -> float:
    target.mkdir()
    started = time.perf_counter()
    for segment in list(partition_log.segments)[:-1]:
        shutil.copyfile(segment.log_path, target / segment.log_path.name)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=20, help="size of the first log")
    parser.add_argument("--keys", type=int, default=5000, help="distinct keys")
    parser.add_argument("--rounds", type=int, default=5, help="skewed append-and-clean rounds")
    args = parser.parse_args()
    chance = random.Random(7)
    clock = SystemClock()
    offset_map = OffsetMap(64 * MB)
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as directory:
        partition_log = Log(Path(directory) / "compacted-0", CONFIG, clock=clock)
        fill(partition_log, args.megabytes, lambda: chance.randrange(args.keys))
        size = partition_log.size_in_bytes
        copied = copy_seconds(partition_log, Path(directory) / "copy")
        copy_rate = size / MB / copied
        print(f"{'baseline: plain copy of the segments':44} {copy_rate:8.1f} MB/s")

        to_clean = log_to_clean(("compacted", 0), partition_log, 0, clock.milliseconds())
        stats = Cleaner(offset_map, clock).clean(to_clean)
        rate = stats.bytes_read / MB / stats.seconds
        print(
            f"{'one clean, uniform keys':44} {rate:8.1f} MB/s  ({rate / copy_rate:.3f} of the "
            f"copy; {100 * stats.size_reduction:.1f}% smaller)"
        )

        weights = [1 / (rank**1.2) for rank in range(1, args.keys + 1)]
        written = reclaimed = 0
        first_dirty = stats.end_offset
        for _ in range(args.rounds):
            fill(
                partition_log,
                args.megabytes / 10,
                lambda: chance.choices(range(args.keys), weights)[0],
            )
            to_clean = log_to_clean(
                ("compacted", 0), partition_log, first_dirty, clock.milliseconds()
            )
            stats = Cleaner(offset_map, clock).clean(to_clean)
            first_dirty = stats.end_offset
            written += stats.bytes_written
            reclaimed += stats.bytes_read - stats.bytes_written
        print(
            f"{'brute force, Zipf keys, ' + str(args.rounds) + ' rounds':44} "
            f"{written / max(reclaimed, 1):8.2f} bytes rewritten per byte reclaimed"
        )
        partition_log.close()


if __name__ == "__main__":
    main()
