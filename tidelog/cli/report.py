"""``tidelog report``: run directories through Spark into tables, plots and one HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path

from tidelog.cli.common import fail
from tidelog.reach import Unreachable


def add(commands) -> None:
    report = commands.add_parser(
        "report",
        help="tables, plots and an HTML page from run directories (Spark)",
        description=(
            "Reads the run directories that perf, scenario and load runs write (--out), "
            "computes exact latency percentiles, average and max windowed p99, throughput, "
            "delivery per partition, consumer lag and rebuild durations with Spark in local "
            "mode, and writes CSV "
            "and Markdown tables, PNG plots and one self-contained report.html: what the runs "
            "share, a summary of the tiered-storage design's findings and its table as perf "
            "tiered-storage prints it, the plots, then tables with a row per run."
        ),
    )
    report.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories, or directories of them (one run of several cases)",
    )
    report.add_argument("--out", required=True, metavar="REPORT_DIR", help="where to write")
    report.add_argument(
        "--window-seconds",
        type=float,
        default=1.0,
        help="the window of 'average p99' (p99 per window, averaged); default 1",
    )
    report.add_argument("--cores", type=int, default=2, help="Spark local cores (default 2)")
    report.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from pyspark.errors import PySparkRuntimeError

        from tidelog.pipeline.render import write_report
        from tidelog.pipeline.report import compute, load_runs
        from tidelog.pipeline.session import local_session
    except ImportError as error:
        return fail(
            "report", f"{error}; install the pipeline extra: pip install 'tidelog[pipeline]'"
        )
    try:
        runs = load_runs(args.run_dirs)
    except (OSError, ValueError, TypeError) as error:
        return fail("report", error)
    try:
        spark = local_session(cores=args.cores, app_name="tidelog-report")
    except PySparkRuntimeError as error:  # its JVM did not start, or did not answer
        reason = str(error).split("] ", 1)[-1].rstrip(".")
        raise Unreachable("Spark", f"local[{args.cores}]", reason) from None
    try:
        data = compute(spark, runs, window_seconds=args.window_seconds)
    finally:
        spark.stop()
    written = write_report(data, args.out)
    print(f"report of {len(runs)} run(s) written to {args.out}: {len(written)} files")
    print(f"open {Path(args.out) / 'report.html'}")
    return 0
