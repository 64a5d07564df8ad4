"""The log cleaner on this machine: MB/s against a plain copy of the same segment files, and
bytes rewritten per byte reclaimed on a skewed (Zipf) key workload.

    .venv/bin/python benchmarks/cleaner.py [--megabytes N] [--keys N] [--rounds N] [--format 2]
        [--compression gzip|snappy|lz4|zstd] [--payload random]

- baseline, in the same run: copying the log's segment files with shutil.copyfile (what
  rewriting them costs with no work per message);
- a clean of a log of ``--megabytes`` of 100-byte values under ``--keys`` keys (uniform), in
  one thread: MB read per second, and its ratio to the copy. ``--repeats`` copies of the log
  are cleaned one after another with one offset map, as a cleaner thread keeps it, and the
  median is given (a process's first clean also pays its first allocations, which a broker
  pays once). ``--payload``: every value the same 100 bytes (the default), which a codec
  shrinks to a few bytes a record, or random bytes, as ``tidelog perf`` sends, which none
  shrinks;
- ``--rounds`` of appending a tenth of that under Zipf-distributed keys (s = 1.2) and cleaning
  again: bytes the cleaner wrote per byte it removed, for Kafka's brute-force cleaner (the
  whole log recopied each time) and for log.cleaner.generational.enable (young-generation
  cleans, a full one every FULL_CLEAN_EVERY), on the same appends; and the log's size after.

``--format 2`` writes format v2 record batches (100 records each, as a producer batches them)
where the default writes v1 message sets, so the cleaner's batch rewrite is what is measured;
``--compression`` compresses each batch (or v1 wrapper) with that codec (zstd: v2 only).
Each clean also gives its CPU seconds (this process's user + system time), which a loaded
machine disturbs less than MB/s. Everything is in this process on a temporary directory;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from tidelog.clock import SystemClock
from tidelog.log.cleaner import FULL_CLEAN_EVERY, Cleaner, CleanStats, log_to_clean
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.offset_map import OffsetMap
from tidelog.records.format import Codec, Record, build_message_set
from tidelog.records.record_batch import encode_batch

MB = 1024 * 1024
VALUE = b"v" * 100


def config_of(message_format: int) -> LogConfig:
    return LogConfig.from_topic_config(
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(8 * MB),
            "message.format.version": {1: "0.10.0", 2: "2.1"}[message_format],
        }
    )


CODEC = Codec.NONE  # --compression
PAYLOADS = random.Random(5)  # --payload random: the values, the same in every run
RANDOM_PAYLOAD = False


def fill(partition_log: Log, megabytes: float, key_of) -> None:  # type: ignore[no-untyped-def]
    """Appends ``megabytes`` of keyed messages, 100 per batch; ``key_of()`` picks each key and
    --payload each value."""
    target = partition_log.size_in_bytes + megabytes * MB
    now = int(time.time() * 1000)
    v2 = partition_log.config.magic == 2
    while partition_log.size_in_bytes < target:
        batch = [
            Record(b"key-%d" % key_of(), PAYLOADS.randbytes(100) if RANDOM_PAYLOAD else VALUE, now)
            for _ in range(100)
        ]
        if v2:
            data = encode_batch(batch, codec=CODEC)
        else:
            data = build_message_set(batch, magic=1, codec=CODEC)
        partition_log.append_as_leader(data)
    partition_log.roll("the benchmark cleans everything")
    partition_log.high_watermark = partition_log.log_end_offset


def copy_seconds(partition_log: Log, target: Path) -> float:
    target.mkdir()
    started = time.perf_counter()
    for segment in list(partition_log.segments)[:-1]:
        shutil.copyfile(segment.log_path, target / segment.log_path.name)
    return time.perf_counter() - started


def clean_a_copy(
    source: Path, copy: Path, config: LogConfig, offset_map: OffsetMap
) -> tuple[CleanStats, float]:
    """Cleans a copy of the log in ``source``: its stats and this process's CPU seconds."""
    shutil.copytree(source, copy / source.name)
    partition_log = Log(copy / source.name, config, clock=SystemClock())
    partition_log.high_watermark = partition_log.log_end_offset
    to_clean = log_to_clean(("compacted", 0), partition_log, 0, int(time.time() * 1000))
    cpu_before = time.process_time()
    stats = Cleaner(offset_map, SystemClock()).clean(to_clean)
    cpu = time.process_time() - cpu_before
    partition_log.close()
    return stats, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=20, help="size of the first log")
    parser.add_argument("--keys", type=int, default=5000, help="distinct keys")
    parser.add_argument("--rounds", type=int, default=5, help="skewed append-and-clean rounds")
    parser.add_argument(
        "--repeats", type=int, default=5, help="copies of the log cleaned for the median"
    )
    parser.add_argument(
        "--format", type=int, choices=(1, 2), default=1, help="message format of the logs"
    )
    parser.add_argument(
        "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none"
    )
    parser.add_argument(
        "--payload",
        choices=("repeated", "random"),
        default="repeated",
        help="every value the same bytes, or random bytes",
    )
    args = parser.parse_args()
    if args.compression == "zstd" and args.format != 2:
        parser.error("--compression zstd needs --format 2 (zstd came with message format v2)")
    global CODEC, RANDOM_PAYLOAD
    CODEC = Codec[args.compression.upper()]
    RANDOM_PAYLOAD = args.payload == "random"
    config = config_of(args.format)
    print(f"message format v{args.format}, compression {args.compression}, {args.payload} values")
    chance = random.Random(7)
    clock = SystemClock()
    offset_map = OffsetMap(16 * MB)  # room for far more keys than the workloads use
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as directory:
        partition_log = Log(Path(directory) / "compacted-0", config, clock=clock)
        fill(partition_log, args.megabytes, lambda: chance.randrange(args.keys))
        size = partition_log.size_in_bytes
        copied = copy_seconds(partition_log, Path(directory) / "copy")
        copy_rate = size / MB / copied
        print(f"{'baseline: plain copy of the segments':44} {copy_rate:8.1f} MB/s")

        partition_log.close()
        cleans = [
            clean_a_copy(
                partition_log.directory, Path(directory) / f"copy-{number}", config, offset_map
            )
            for number in range(max(1, args.repeats))
        ]
        stats, cpu = sorted(cleans, key=lambda clean: clean[0].seconds)[(len(cleans) - 1) // 2]
        rate = stats.bytes_read / MB / stats.seconds
        cpus = sorted(cpu for _, cpu in cleans)
        print(
            f"{'a clean, uniform keys (median)':44} {rate:8.1f} MB/s  ({rate / copy_rate:.3f} of "
            f"the copy; {100 * stats.size_reduction:.1f}% smaller; {cpu:.2f} CPU s, "
            f"{stats.bytes_read / MB / max(cpu, 1e-9):.1f} MB and "
            f"{stats.messages_read / max(cpu, 1e-9):,.0f} records per CPU s; CPU s of the "
            f"{len(cleans)} cleans {cpus[0]:.2f}-{cpus[-1]:.2f})"
        )
        weights = [1 / (rank**1.2) for rank in range(1, args.keys + 1)]
        for name, generational in (("brute force", False), ("generational", True)):
            skew = random.Random(11)  # the same appends for both
            skewed = Log(Path(directory) / f"{name.replace(' ', '-')}-0", config, clock=clock)
            fill(skewed, args.megabytes, lambda skew=skew: skew.randrange(args.keys))
            first_dirty = (
                Cleaner(offset_map, clock)
                .clean(log_to_clean(("skewed", 0), skewed, 0, clock.milliseconds()))
                .end_offset
            )
            written = reclaimed = 0
            for number in range(1, args.rounds + 1):
                fill(
                    skewed,
                    args.megabytes / 10,
                    lambda skew=skew: skew.choices(range(args.keys), weights)[0],
                )
                to_clean = log_to_clean(("skewed", 0), skewed, first_dirty, clock.milliseconds())
                full = not generational or number % FULL_CLEAN_EVERY == 0
                stats = Cleaner(offset_map, clock).clean(to_clean, full=full)
                first_dirty = stats.end_offset
                written += stats.bytes_written
                reclaimed += stats.bytes_read - stats.bytes_written
            print(
                f"{name + ', Zipf keys, ' + str(args.rounds) + ' rounds':44} "
                f"{written / max(reclaimed, 1):8.2f} bytes rewritten per byte reclaimed, "
                f"log {skewed.size_in_bytes / MB:.1f} MB after"
            )
            skewed.close()


if __name__ == "__main__":
    main()
