"""The CPU one copy of rolled segments to the remote tier costs, per MiB, beside a file copy.

    .venv/bin/python benchmarks/tier_copy.py [--megabytes 64] [--segment-megabytes 1] \
        [--codec none,snappy] [--rounds 5] [--profile]

A log of 1 KiB v1 records in producer batches of 100 (CreateTime, one millisecond apart per
batch) is written with --segment-megabytes segments and the default index.interval.bytes and
remote.log.index.interval.bytes; then, alternating for --rounds rounds (medians printed):

- baseline: shutil.copyfile of each rolled segment's three files (.log, .index, .timeindex)
  into an empty directory on the same disk;
- tier copy: one remote log manager task on the calling thread that copies every rolled
  segment to a new file:// tier on the same disk (metadata STARTED, the remote log index
  entries, the data and indexes, FINISHED, the local remote indexes), as a leader's task does;
- of which the remote log index entries alone (derive_entries over the same segments, as the
  copy makes them), and beside it the walk over every entry's header (build_entries).

CPU is the process's (user and system, every thread: time.process_time), not wall time; the
segments are in the page cache throughout, as a leader's freshly rolled segments are. With
--profile, one more tier copy runs under cProfile and its top functions are printed. The load
average is printed with the figures: the machine may be shared. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.config import LogConfig
from tidelog.log.files import INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_file
from tidelog.log.log import Log
from tidelog.log.manager import LogManager
from tidelog.records.format import Codec, Record, build_message_set
from tidelog.tiered.manager import RemoteLogManager
from tidelog.tiered.remote_index import SUFFIXES, build_entries, derive_entries
from tidelog.tiered.storage import RemoteStorageManager

TOPIC = "copy"
KEY = (TOPIC, 0)
RECORD_BYTES = 1024
BATCH = 100
MIB = 1024 * 1024


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def fill(log: Log, clock: ManualClock, codec: Codec, megabytes: float) -> None:
    """Appends 1 KiB records (half random, half text) until the log holds ``megabytes`` MiB,
    then rolls, so that all of it is in rolled segments below the high watermark."""
    text = (b"tidelog keeps partition logs in Kafka's format. " * 20)[: RECORD_BYTES // 2]
    distinct = [os.urandom(RECORD_BYTES // 2) for _ in range(BATCH)]
    while log.size_in_bytes < megabytes * MIB:
        clock.advance(1)
        records = [
            Record(b"key-%d" % i, distinct[i] + text, clock.milliseconds()) for i in range(BATCH)
        ]
        log.append_as_leader(build_message_set(records, magic=1, codec=codec), leader_epoch=0)
    log.roll("the benchmark's data is written")
    log.high_watermark = log.log_end_offset


def rolled_bytes(log: Log) -> int:
    return sum(s.size for s in log.segments if s is not log.active_segment)


def copy_files(log: Log, target: Path) -> float:
    """CPU seconds to shutil.copyfile each rolled segment's files into ``target``."""
    target.mkdir()
    started = time.process_time()
    for segment in log.segments:
        if segment is log.active_segment:
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            source = segment_file(log.directory, segment.base_offset, suffix)
            shutil.copyfile(source, target / source.name)
        shutil.copyfile(segment.log_path, target / segment.log_path.name)
    taken = time.process_time() - started
    shutil.rmtree(target)
    return taken


def tier_copy(logs: LogManager, log: Log, tier: Path, clock: ManualClock) -> float:
    """CPU seconds of one task that copies every rolled segment to a new tier at ``tier``."""
    for suffix in SUFFIXES:
        for path in log.directory.glob(f"*{suffix}"):
            path.unlink()
    log.highest_offset_in_remote_storage = -1
    remote = RemoteLogManager(
        logs, RemoteStorageManager(f"file://{tier}"), clock, leader_epoch_of=lambda *_: 0
    )
    remote.storage.fs  # made before the clock starts: a broker makes it once  # noqa: B018
    started = time.process_time()
    remote.run_task_now(KEY)
    taken = time.process_time() - started
    copied = remote.stats.segments_copied
    remote.shutdown()
    shutil.rmtree(tier)
    rolled = sum(1 for s in log.segments if s is not log.active_segment)
    if copied != rolled:
        raise SystemExit(f"the task copied {copied} of {rolled} rolled segments")
    return taken


def index_entries(log: Log, build=derive_entries) -> float:
    """CPU seconds to make the remote log index entries of every rolled segment with ``build``
    (derive_entries, as a copy does, or build_entries, the walk over every entry)."""
    interval = log.config.remote_log_index_interval_bytes
    started = time.process_time()
    for segment in log.segments:
        if segment is not log.active_segment:
            build(segment, segment.base_offset, interval, "file:///tier/x.log")
    return time.process_time() - started


def per_mib(seconds: list[float], size: int) -> float:
    return statistics.median(seconds) * 1000 / (size / MIB)


def measure(directory: Path, codec: Codec, args: argparse.Namespace) -> None:
    clock = ManualClock()
    config = LogConfig(
        remote_storage_enable=True,
        segment_bytes=int(args.segment_megabytes * MIB),
        retention_ms=-1,
        local_retention_ms=-1,
    )
    logs = LogManager(
        [directory / "logs"],
        parse_config({}, BROKER_KEYS),
        clock=clock,
        topic_configs={TOPIC: config},
    )
    logs.startup()
    try:
        log = logs.get_or_create(*KEY)
        fill(log, clock, codec, args.megabytes)
        size = rolled_bytes(log)
        count = sum(1 for s in log.segments if s is not log.active_segment)
        baseline, tier, entries, walked = [], [], [], []
        for number in range(args.rounds):
            baseline.append(copy_files(log, directory / f"baseline-{number}"))
            tier.append(tier_copy(logs, log, directory / f"tier-{number}", clock))
            entries.append(index_entries(log))
            walked.append(index_entries(log, build_entries))
        print(
            f"{codec.name.lower()}: {size / MIB:.1f} MiB in {count} segments of "
            f"{args.segment_megabytes:g} MiB, CPU ms per MiB (median of {args.rounds}):"
        )
        print(f"  shutil.copyfile of the segments' files  {per_mib(baseline, size):6.2f}")
        print(
            f"  tier copy (one task)                    {per_mib(tier, size):6.2f}  "
            f"({per_mib(tier, size) / per_mib(baseline, size):.1f}x the file copy)"
        )
        print(f"    of which the remote log index entries {per_mib(entries, size):6.2f}")
        print(f"  (the same entries from a walk over every entry: {per_mib(walked, size):.2f})")
        print(f"  ({load()})")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            tier_copy(logs, log, directory / "tier-profiled", clock)
            profile.disable()
            stats = pstats.Stats(profile)
            stats.sort_stats("tottime").print_stats(args.profile_lines)
    finally:
        logs.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=64.0, help="MiB of log to copy")
    parser.add_argument("--segment-megabytes", type=float, default=1.0)
    parser.add_argument(
        "--codec",
        type=lambda text: [Codec[name.strip().upper()] for name in text.split(",")],
        default=[Codec.NONE, Codec.SNAPPY],
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile one more tier copy")
    parser.add_argument("--profile-lines", type=int, default=25)
    parser.add_argument("--dir", type=Path, help="where the log and the tier go (a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-tier-copy-", dir=args.dir) as name:
        for codec in args.codec:
            measure(Path(name) / codec.name.lower(), codec, args)


if __name__ == "__main__":
    main()
