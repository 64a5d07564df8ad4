"""The Spark pipeline's figures, next to a plain Python loop over the same files in the same run.

    .venv/bin/python benchmarks/pipeline.py [--records N] [--report-rows N] [--dir DIR]

- data source: ``spark.read.format("tidelog")`` counting every row and value byte of a log
  (v1, 200-byte values, snappy and uncompressed halves, several segments), on one core and on
  two (local[1], local[2]); the baseline is a plain Python loop over the same segment files
  (tidelog.records.iter_deep), and the reader under the data source without Spark;
- report: the time ``tidelog report`` takes to compute and write a run of --report-rows
  acknowledgements (600 s of synthetic latencies, lognormal) and a consumer sample per
  consumer and partition every 100 ms, session start-up excluded; split into the Spark
  computation and the writing (tables, plots, HTML).

Nothing here is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tidelog import rundata
from tidelog.clock import ManualClock
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.pipeline.segments import Bounds, find_segments, plan_segment, read_segment
from tidelog.records.format import Codec, Record, build_message_set, iter_deep

MB = 1_000_000
VALUE_BYTES = 200
BATCH = 100


def build_log(directory: Path, records: int) -> int:
    """A partition log of ``records`` records, half uncompressed, half snappy; its bytes."""
    clock = ManualClock()
    log = Log(directory / "bench-0", LogConfig(segment_bytes=8 * 1024 * 1024), clock=clock)
    chance = random.Random(1)
    for number in range(0, records, BATCH):
        clock.advance(1)
        codec = Codec.NONE if number < records // 2 else Codec.SNAPPY
        batch = [
            Record(b"key-%d" % (i % 10), chance.randbytes(VALUE_BYTES // 2) + b"v" * 100,
                   clock.milliseconds())
            for i in range(BATCH)
        ]  # fmt: skip
        log.append_as_leader(build_message_set(batch, magic=1, codec=codec))
    log.flush()
    log.close()
    return sum(path.stat().st_size for path in (directory / "bench-0").glob("*.log"))


def timed(function):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def python_loop(directory: Path) -> tuple[int, int]:
    rows = value_bytes = 0
    for path in sorted((directory / "bench-0").glob("*.log")):
        for message in iter_deep(path.read_bytes()):
            rows += 1
            value_bytes += len(message.value or b"")
    return rows, value_bytes


def reader_without_spark(directory: Path) -> tuple[int, int]:
    rows = value_bytes = 0
    for segment in find_segments(directory):
        for batch in read_segment(plan_segment(segment, Bounds())):
            rows += batch.num_rows
            value_bytes += batch.column("value").nbytes
    return rows, value_bytes


def spark_scan(directory: Path, cores: int) -> tuple[tuple[int, int], float]:
    from pyspark.sql import functions as F

    from tidelog.pipeline.session import local_session

    spark = local_session(cores=cores, app_name=f"bench-{cores}")
    try:

        def scan():  # type: ignore[no-untyped-def]
            # a new DataFrame each time: a collect of the same one reuses its shuffle output
            frame = spark.read.format("tidelog").load(str(directory))
            return frame.agg(F.count("*"), F.sum(F.length("value"))).collect()

        _, first = timed(scan)
        row, seconds = timed(scan)
        print(f"local[{cores}]: first query {first:.2f} s (workers start), next {seconds:.2f} s")
        return (row[0][0], row[0][1]), seconds
    finally:
        spark.stop()


def synthetic_run(run_dir: Path, rows: int) -> None:
    """acks.parquet of ``rows`` acknowledgements over 600 s, consumer.parquet of 3 consumers
    of 6 partitions sampled every 100 ms (numpy: a Python list per row would dominate)."""
    import numpy as np
    import pyarrow as pa

    chance = np.random.default_rng(2)
    start = rundata.epoch_microseconds(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    numbers = np.arange(rows, dtype=np.int64)
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": pa.array(start + numbers * 600_000_000 // rows).cast(rundata.TIME),
            "latency_ms": chance.lognormal(1.0, 0.8, rows),
            "partition": numbers % 6,
            "offset": numbers // 6,
            "bytes": np.full(rows, 1024),
            "message": pa.nulls(rows, pa.string()),
        },
    )
    samples = np.arange(6000, dtype=np.int64)
    grid = [(c, p, s) for c in range(3) for p in range(6) for s in (samples,)]
    rundata.write_table(
        run_dir,
        "consumer",
        {
            "sampled_at": pa.array(np.concatenate([start + s * 100_000 for *_, s in grid])).cast(
                rundata.TIME
            ),
            "consumer": [f"in-sync-{c}" for c, *_ in grid for _ in samples],
            "partition": np.concatenate([np.full(len(samples), p) for _, p, _ in grid]),
            "offset": np.concatenate([s * 10 for *_, s in grid]),
            "lag": chance.integers(0, 5000, len(grid) * len(samples)),
        },
    )
    rundata.write_metadata(run_dir, rundata.RunMetadata("synthetic", "normal", "acks=all"))


def report_time(run_dir: Path, out: Path) -> tuple[float, float]:
    """(seconds computing, seconds writing tables, plots and HTML)."""
    from tidelog.pipeline.render import write_report
    from tidelog.pipeline.report import compute, load_runs
    from tidelog.pipeline.session import local_session

    spark = local_session(cores=2, app_name="bench-report")
    try:
        data, computing = timed(lambda: compute(spark, load_runs([run_dir])))
        _, writing = timed(lambda: write_report(data, out))
        return computing, writing
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--report-rows", type=int, default=2_000_000)
    parser.add_argument("--dir", help="where to build the log (default: a temporary directory)")
    args = parser.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="tidelog-bench-pipeline-"))
    try:
        size, seconds = timed(lambda: build_log(directory, args.records))
        print(f"log: {args.records:,} records, {size / MB:.1f} MB in "
              f"{len(find_segments(directory))} segments (built in {seconds:.1f} s)")  # fmt: skip

        figures = {}
        (rows, _), seconds = timed(lambda: python_loop(directory))
        figures["plain Python loop (iter_deep)"] = (rows, seconds)
        (rows, _), seconds = timed(lambda: reader_without_spark(directory))
        figures["data source reader, no Spark"] = (rows, seconds)
        for cores in (1, 2):
            (rows, _), seconds = spark_scan(directory, cores)
            figures[f"spark.read.format('tidelog'), local[{cores}]"] = (rows, seconds)
        baseline = figures["plain Python loop (iter_deep)"][1]
        print(f"{'reader':45} {'rows/s':>12} {'MB/s':>8} {'vs loop':>8}")
        for name, (rows, seconds) in figures.items():
            assert rows == args.records, (name, rows)
            print(
                f"{name:45} {rows / seconds:12,.0f} {size / MB / seconds:8.1f} "
                f"{baseline / seconds:7.2f}x"
            )

        if not args.report_rows:
            return
        run_dir = directory / "run"
        _, seconds = timed(lambda: synthetic_run(run_dir, args.report_rows))
        print(
            f"\nreport: a run of {args.report_rows:,} acknowledgements (written in {seconds:.1f} s)"
        )
        computing, writing = report_time(run_dir, directory / "report")
        seconds = computing + writing
        print(f"tidelog report: {seconds:.1f} s on local[2] ({args.report_rows / seconds:,.0f} "
              f"rows/s): Spark {computing:.1f} s, tables/plots/HTML {writing:.1f} s")  # fmt: skip
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
