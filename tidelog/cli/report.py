"""``tidelog report``: run directories through Spark into tables, plots and one HTML page."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from tidelog.cli.common import fail
from tidelog.reach import Unreachable

EXECUTOR_TIMEOUT = 60.0  # tidelog.pipeline.session's, without importing pyspark for --help


def add(commands) -> None:
    report = commands.add_parser(
        "report",
        help="tables, plots and an HTML page from run directories (Spark)",
        description=(
            "Reads the run directories that perf, scenario and load runs write (--out), "
            "computes exact latency percentiles, average and max windowed p99, throughput, "
            "delivery per partition, consumer lag and rebuild durations with Spark (in local "
            "mode, or on a Spark standalone cluster with --master spark://HOST:PORT), and "
            "writes CSV "
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
    report.add_argument(
        "--master",
        metavar="MASTER",
        help=(
            "where Spark runs the job: local[N] (the default, local[--cores]) or a standalone "
            "cluster's master, spark://HOST:PORT; the run directories must be at the same "
            "paths on its workers, and tidelog importable there"
        ),
    )
    report.add_argument(
        "--cores",
        type=int,
        help="Spark local cores (default 2); with --master spark://..., the most cores the "
        "job takes from the cluster (spark.cores.max; default every core it offers)",
    )
    report.add_argument(
        "--executor-timeout",
        type=float,
        default=EXECUTOR_TIMEOUT,
        metavar="SECONDS",
        help="how long a cluster's master may take to give the job an executor "
        f"(default {EXECUTOR_TIMEOUT:g})",
    )
    report.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from pyspark.errors import PySparkRuntimeError

        from tidelog.pipeline.render import write_report
        from tidelog.pipeline.report import compute, load_runs
        from tidelog.pipeline.session import check_master, executors, progress, session
    except ImportError as error:
        return fail(
            "report", f"{error}; install the pipeline extra: pip install 'tidelog[pipeline]'"
        )
    if args.cores is not None and args.cores < 1:
        return fail("report", f"--cores {args.cores}: give 1 or more")
    if args.executor_timeout <= 0:
        return fail("report", f"--executor-timeout {args.executor_timeout:g}: give a positive time")
    local = args.master is None or args.master.startswith("local")
    if args.master is not None and local and args.cores is not None:
        return fail("report", "--cores is local[N]'s N: give --master local[N] or --cores N")
    master = args.master or f"local[{args.cores or 2}]"
    try:
        check_master(master)
        runs = load_runs(args.run_dirs)
    except (OSError, ValueError, TypeError) as error:
        return fail("report", error)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its "closing down" at exit
    started = time.monotonic()
    try:
        spark = session(
            master,
            "tidelog-report",
            cores=None if local else args.cores,
            executor_timeout=args.executor_timeout,
        )
    except PySparkRuntimeError as error:  # its JVM did not start, or did not answer
        reason = str(error).split("] ", 1)[-1].rstrip(".")
        raise Unreachable("Spark", master, reason) from None
    try:
        if not local:
            print(
                f"Spark at {master}: {executors(spark)} executor(s), "
                f"{spark.sparkContext.defaultParallelism} core(s)",
                flush=True,
            )
        with progress(spark, sys.stderr):
            data = compute(spark, runs, window_seconds=args.window_seconds)
    finally:
        spark.stop()
    print(f"computed in {time.monotonic() - started:.1f} s", flush=True)
    written = write_report(data, args.out)
    print(f"report of {len(runs)} run(s) written to {args.out}: {len(written)} files")
    print(f"open {Path(args.out) / 'report.html'}")
    return 0
