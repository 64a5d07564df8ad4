"""Storage engine figures, next to a baseline measured in the same run on the same disk.

    .venv/bin/python benchmarks/storage.py [--megabytes N] [--dir DIR]

- append: 1 KiB v1 records in producer batches of 100, through validation, offset assignment,
  indexing and the write, uncompressed and snappy; the baseline is a raw append of the same
  bytes to a file in the same directory;
- offset-index and time-index lookups per second on a full index (log.index.size.max.bytes);
- search by timestamp per second over the log the append wrote;
- recovery: the scan of that log after a simulated crash, in MB/s.

Nothing here is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tidelog.clock import ManualClock
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.offset_index import OffsetIndex
from tidelog.log.time_index import TimeIndex
from tidelog.records.format import Codec, Record, build_message_set

RECORD_BYTES = 1024
BATCH = 100
MB = 1_000_000


def producer_batches(codec: Codec, count: int, start_ms: int) -> list[bytes]:
    """``count`` distinct producer sets of 100 records of 1 KiB (half random, half text)."""
    chance = random.Random(1)
    text = (b"tidelog keeps partition logs in Kafka's format. " * 20)[: RECORD_BYTES // 2]
    batches = []
    for number in range(count):
        records = [
            Record(b"key-%d" % i, chance.randbytes(RECORD_BYTES // 2) + text, start_ms + number)
            for i in range(BATCH)
        ]
        batches.append(build_message_set(records, magic=1, codec=codec))
    return batches


def raw_append(directory: Path, batches: list[bytes], rounds: int) -> tuple[float, float]:
    """Seconds to write the batches to a new file, and to write and fsync them."""
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started = time.perf_counter()
    for _ in range(rounds):
        for batch in batches:
            os.write(fd, batch)
    written = time.perf_counter() - started
    os.fsync(fd)
    durable = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    return written, durable


def log_append(
    log: Log, clock: ManualClock, batches: list[bytes], rounds: int
) -> tuple[float, float]:
    """Seconds to append the batches through the log, and to append and flush them."""
    started = time.perf_counter()
    for _ in range(rounds):
        for batch in batches:
            clock.advance(1)
            log.append_as_leader(batch)
    appended = time.perf_counter() - started
    log.flush()
    durable = time.perf_counter() - started
    return appended, durable


def rate(count: float, seconds: float) -> str:
    return f"{count / seconds:,.0f}"


def bench_append(
    directory: Path, megabytes: int, trials: int
) -> dict[str, tuple[Log, ManualClock, int]]:
    print(
        f"append: 1 KiB v1 records in batches of {BATCH}, {megabytes} MB of records per run, "
        f"raw and log runs alternated {trials} times (medians); 'cached' is until the last "
        "write returns, 'durable' until the fsync after it returns"
    )
    distinct = 64
    rounds = max(1, megabytes * MB // (RECORD_BYTES * BATCH * distinct))
    logs = {}
    for codec in (Codec.NONE, Codec.SNAPPY):
        batches = producer_batches(codec, distinct, ManualClock().milliseconds())
        records = BATCH * distinct * rounds
        wire_bytes = sum(map(len, batches)) * rounds
        raw_runs, log_runs = [], []
        for trial in range(trials):
            raw_runs.append(raw_append(directory, batches, rounds))
            clock = ManualClock()
            log = Log(directory / f"bench-{codec.name.lower()}-{trial}", LogConfig(), clock=clock)
            log_runs.append(log_append(log, clock, batches, rounds))
            if trial < trials - 1:
                log.delete()
        print(f"  {codec.name.lower()}: {wire_bytes / MB:,.0f} MB on disk, {records:,} records")
        for number, kind in enumerate(("cached", "durable")):
            raw_rate = wire_bytes / statistics.median(run[number] for run in raw_runs) / MB
            log_seconds = statistics.median(run[number] for run in log_runs)
            log_rate = wire_bytes / log_seconds / MB
            print(
                f"    {kind:8} raw file append {raw_rate:7.1f} MB/s   log append {log_rate:7.1f} "
                f"MB/s ({RECORD_BYTES * records / log_seconds / MB:6.1f} MB/s of records, "
                f"{rate(records, log_seconds)} records/s)   log/raw {log_rate / raw_rate:.2f}"
            )
        logs[codec.name] = (log, clock, wire_bytes)
    return logs


def bench_index_lookups(directory: Path) -> None:
    max_size = LogConfig().segment_index_bytes
    offsets = OffsetIndex(directory / "00000000000000000000.index", 0, max_size)
    for slot in range(offsets.max_entries):
        offsets.append(slot * 10 + 1, slot * 1024 + 100)
    times = TimeIndex(directory / "00000000000000000000.timeindex", 0, max_size)
    for slot in range(times.max_entries - 1):
        times.maybe_append(1_700_000_000_000 + slot * 3, slot * 10 + 1)
    chance = random.Random(2)
    offset_targets = [chance.randrange(0, offsets.max_entries * 10) for _ in range(100_000)]
    time_targets = [1_700_000_000_000 + t for t in offset_targets]
    for name, index, targets in (
        ("offset index", offsets, offset_targets),
        ("time index", times, time_targets),
    ):
        index.lookup(targets[0])  # builds the in-memory columns once, as a first lookup does
        passes = []
        for _ in range(7):
            started = time.perf_counter()
            for target in targets:
                index.lookup(target)
            passes.append(time.perf_counter() - started)
        print(
            f"  {name} lookups on a full index ({index.entries:,} entries): "
            f"{rate(len(targets), statistics.median(passes))}/s (median of 7 passes)"
        )
    offsets.close()
    times.close()


def bench_search(log: Log, clock: ManualClock, seconds: float = 1.5) -> None:
    first, last = log.segments[0].base_offset, clock.milliseconds()
    start_ms = ManualClock().milliseconds()
    chance = random.Random(3)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        log.offset_for_timestamp(chance.randrange(start_ms, last))
        done += 1
    elapsed = time.perf_counter() - started
    print(
        f"  search by timestamp over {len(log.segments)} segments "
        f"(log start {first}, end {log.log_end_offset}): {rate(done, elapsed)}/s"
    )


def bench_recovery(log: Log, clock: ManualClock, size: int) -> None:
    directory = log.directory
    for segment in log.segments:  # a crash: nothing trimmed, nothing flushed, no marker
        segment.index.close()
        segment.time_index.close()
        segment.file.close()
    started = time.perf_counter()
    recovered = Log(directory, log.config, clock=clock, recovery_point=0, needs_recovery=True)
    elapsed = time.perf_counter() - started
    assert recovered.log_end_offset == log.log_end_offset
    print(
        f"  recovery scan of {size / MB:,.0f} MB in {len(recovered.segments)} segments: "
        f"{size / elapsed / MB:,.1f} MB/s"
    )
    recovered.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=200, help="records per append run")
    parser.add_argument("--trials", type=int, default=3, help="alternated raw/log runs")
    parser.add_argument("--dir", help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="tidelog-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        logs = bench_append(directory, args.megabytes, args.trials)
        print("indexes:")
        bench_index_lookups(directory)
        print("search and recovery (uncompressed log):")
        log, clock, size = logs["NONE"]
        bench_search(log, clock)
        bench_recovery(log, clock, size)
        logs["SNAPPY"][0].close()
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
