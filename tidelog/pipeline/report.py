"""The figures of ``tidelog report``, computed by Spark from run directories (tidelog/rundata.py).

Percentiles are exact: Spark's ``percentile_disc`` sorts each group, and the p-th percentile of
n latencies is the ceil(p * n)-th smallest (nearest rank, as tidelog.perf.stats.percentile).
"Average p99" is the design's figure: the p99 of each window of ``window_seconds`` (by the
acknowledgement's time), averaged over the windows; "max p99" is the largest window's. The
driver only ever collects aggregates (a row per window, group or partition), never raw rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from tidelog import rundata

GROUP = ["run", "case", "workload", "tiered"]
CDF_FRACTIONS = [i / 100 for i in range(1, 100)] + [0.995, 0.999, 0.9999, 1.0]


@dataclass(frozen=True)
class Run:
    """A run directory, with the label its rows carry in the report."""

    label: str
    directory: Path
    metadata: rundata.RunMetadata


@dataclass
class ReportData:
    """Every table (lists of row dicts, in column order) and every series the plots draw."""

    runs: list[Run]
    window_seconds: float
    run_starts: dict[str, datetime] = field(default_factory=dict)  # each run's first ack
    latency: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)  # per run, group and window
    throughput: list[dict[str, Any]] = field(default_factory=list)  # per run and second
    throughput_summary: list[dict[str, Any]] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    cdf: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    delivery: list[dict[str, Any]] = field(default_factory=list)
    consumer_lag: list[dict[str, Any]] = field(default_factory=list)


def load_runs(directories: Sequence[str | Path]) -> list[Run]:
    """The runs, labelled by directory name (made unique with a number when two share one)."""
    runs: list[Run] = []
    seen: set[str] = set()
    for number, directory in enumerate(directories, 1):
        path = Path(directory)
        label = path.resolve().name
        if label in seen:
            label = f"{label}-{number}"
        seen.add(label)
        runs.append(Run(label, path, rundata.read_metadata(path)))
    return runs


def _table(spark: SparkSession, runs: list[Run], name: str) -> DataFrame | None:
    """Table ``name`` of every run that has it, with the run's label, case, workload, tiered."""
    frames = []
    for run in runs:
        path = rundata.table_path(run.directory, name)
        if not path.exists():
            continue
        frame = spark.read.parquet(str(path))
        meta = run.metadata
        frames.append(
            frame.select(
                F.lit(run.label).alias("run"),
                F.lit(meta.case).alias("case"),
                F.lit(meta.workload).alias("workload"),
                F.lit(bool(meta.tiered)).alias("tiered"),
                *frame.columns,
            )
        )
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def nearest_rank(
    frame: DataFrame, keys: Sequence[str], fractions: Sequence[float], column: str = "latency_ms"
) -> DataFrame:
    """Per group of ``keys``: records (count), max, and the nearest-rank percentile of ``column``
    for each fraction (columns q0, q1, ...): the ceil(f * n)-th smallest of the n values.

    One sort per group serves every fraction: each row gets its rank, and only the rows at a
    wanted rank are kept (a few per group) before the aggregation.
    """
    order = Window.partitionBy(*keys).orderBy(column)
    whole = Window.partitionBy(*keys)
    ranked = frame.select(
        *keys,
        column,
        F.row_number().over(order).alias("rank"),
        F.count("*").over(whole).alias("n"),
    )
    ranks = [F.greatest(F.lit(1), F.ceil(F.lit(f) * F.col("n"))) for f in fractions]
    picked = ranked.where(
        F.array_contains(F.array(*ranks), F.col("rank")) | (F.col("rank") == F.col("n"))
    )
    return picked.groupBy(*keys).agg(
        F.first("n").alias("records"),
        F.max(column).alias("max_ms"),
        *[
            F.max(F.when(F.col("rank") == rank, F.col(column))).alias(f"q{i}")
            for i, rank in enumerate(ranks)
        ],
    )


def _rows(frame: DataFrame, order: Sequence[str]) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.orderBy(*order).collect()]


SUMMARY_FRACTIONS = {"p50_ms": 0.50, "p95_ms": 0.95, "p99_ms": 0.99}


def latency_tables(
    acks: DataFrame, window_seconds: float, run_starts: dict[str, datetime]
) -> tuple[list, list, list]:
    """(summary per group, p50/p95/p99 per window, CDF points per group). Windows are counted
    in seconds since each run's first acknowledgement; the averages and maxima over windows are
    taken on the driver from the per-window rows."""
    window_us = int(window_seconds * 1_000_000)
    fractions = list(SUMMARY_FRACTIONS.values())
    with_window = acks.withColumn(
        "window", F.floor(F.unix_micros("acked_at") / window_us).cast("long")
    )
    windows = []
    for row in _rows(nearest_rank(with_window, [*GROUP, "window"], fractions), [*GROUP, "window"]):
        start = run_starts[row["run"]].timestamp()
        windows.append(
            {key: row[key] for key in GROUP}
            | {"second": row["window"] * window_seconds - start, "records": row["records"]}
            | {name: row[f"q{i}"] for i, name in enumerate(SUMMARY_FRACTIONS)}
            | {"max_ms": row["max_ms"]}
        )
    summary, cdf = [], []
    for row in _rows(nearest_rank(acks, GROUP, fractions + CDF_FRACTIONS), GROUP):
        key = {name: row[name] for name in GROUP}
        mine = [w for w in windows if all(w[name] == key[name] for name in GROUP)]
        summary.append(
            key
            | {"records": row["records"]}
            | {name: row[f"q{i}"] for i, name in enumerate(SUMMARY_FRACTIONS)}
            | {
                "max_ms": row["max_ms"],
                "windows": len(mine),
                "avg_p95_ms": sum(w["p95_ms"] for w in mine) / len(mine),
                "avg_p99_ms": sum(w["p99_ms"] for w in mine) / len(mine),
                "max_p95_ms": max(w["p95_ms"] for w in mine),
                "max_p99_ms": max(w["p99_ms"] for w in mine),
            }
        )
        offset = len(fractions)
        points = [(row[f"q{offset + i}"], f) for i, f in enumerate(CDF_FRACTIONS)]
        cdf.append(key | {"points": points})
    return summary, windows, cdf


def throughput_tables(acks: DataFrame, run_starts: dict[str, datetime]) -> tuple[list, list]:
    """(records and bytes acknowledged in each second of each run, counted from its first
    acknowledgement's whole second, and a summary per run)."""
    per_second = (
        acks.withColumn("epoch_second", F.floor(F.unix_micros("acked_at") / 1_000_000))
        .groupBy("run", "epoch_second")
        .agg(F.count("*").alias("records"), F.sum("bytes").alias("bytes"))
    )
    found: dict[str, dict[int, tuple[int, float]]] = {}
    for row in _rows(per_second, ["run", "epoch_second"]):
        second = row["epoch_second"] - int(run_starts[row["run"]].timestamp())
        found.setdefault(row["run"], {})[second] = (row["records"], row["bytes"] / 1_000_000)
    seconds: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for run, counts in sorted(found.items()):
        # a second in which nothing was acknowledged is a zero, not a gap
        duration = max(counts) + 1
        in_order = [counts.get(second, (0, 0.0)) for second in range(duration)]
        seconds += [
            {"run": run, "second": second, "records": records, "megabytes": megabytes}
            for second, (records, megabytes) in enumerate(in_order)
        ]
        records = sum(count for count, _ in in_order)
        summary.append(
            {
                "run": run,
                "seconds": duration,
                "records": records,
                "mean_records_per_s": records / duration,
                "peak_records_per_s": max(count for count, _ in in_order),
                "mean_mb_per_s": sum(megabytes for _, megabytes in in_order) / duration,
            }
        )
    return seconds, summary


def tiered_ratios(latency: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """avg p99 and p95 with tiered storage over without, where a run has both for a case."""
    by_key = {(r["run"], r["case"], r["workload"], r["tiered"]): r for r in latency}
    rows = []
    for (run, case, workload, tiered), with_tiered in sorted(by_key.items()):
        without = by_key.get((run, case, workload, False))
        if not tiered or without is None:
            continue
        rows.append(
            {
                "run": run,
                "case": case,
                "workload": workload,
                "avg_p99_with_ms": with_tiered["avg_p99_ms"],
                "avg_p99_without_ms": without["avg_p99_ms"],
                "avg_p99_ratio": with_tiered["avg_p99_ms"] / without["avg_p99_ms"],
                "avg_p95_ratio": with_tiered["avg_p95_ms"] / without["avg_p95_ms"],
            }
        )
    return rows


def delivery_table(acks: DataFrame, consumed: DataFrame) -> list[dict[str, Any]]:
    """Per run and partition: acknowledged, consumed, lost (acknowledged, never consumed),
    duplicated (consumed copies beyond the first), reordered (a sequence number below the one
    consumed before it, in offset order)."""
    acked = acks.where(F.col("message").isNotNull())
    keys = ["run", "partition", "message"]
    lost = (
        acked.select(*keys)
        .join(consumed.select(*keys), keys, "left_anti")
        .groupBy("run", "partition")
        .agg(F.count("*").alias("lost"))
    )
    duplicated = (
        consumed.groupBy(*keys)
        .count()
        .groupBy("run", "partition")
        .agg(F.sum(F.col("count") - 1).alias("duplicated"))
    )
    in_order = Window.partitionBy("run", "partition").orderBy("offset")
    sequence = F.element_at(F.split("message", "-"), -1).cast("long")
    reordered = (
        consumed.withColumn("sequence", sequence)
        .withColumn("previous", F.lag("sequence").over(in_order))
        .groupBy("run", "partition")
        .agg(F.sum((F.col("sequence") <= F.col("previous")).cast("int")).alias("reordered"))
    )
    counts = (
        acked.groupBy("run", "partition")
        .agg(F.count("*").alias("acknowledged"))
        .join(
            consumed.groupBy("run", "partition").agg(F.count("*").alias("consumed")),
            ["run", "partition"],
            "full",
        )
    )
    table = (
        counts.join(lost, ["run", "partition"], "left")
        .join(duplicated, ["run", "partition"], "left")
        .join(reordered, ["run", "partition"], "left")
        .na.fill(0, ["acknowledged", "consumed", "lost", "duplicated", "reordered"])
    )
    return _rows(
        table.select(
            "run", "partition", "acknowledged", "consumed", "lost", "duplicated", "reordered"
        ),
        ["run", "partition"],
    )


def lag_table(consumer: DataFrame) -> list[dict[str, Any]]:
    """Per run and consumer: the largest and the mean lag summed over its partitions."""
    total = consumer.groupBy("run", "consumer", "sampled_at").agg(F.sum("lag").alias("lag"))
    summary = total.groupBy("run", "consumer").agg(
        F.count("*").alias("samples"), F.max("lag").alias("max_lag"), F.avg("lag").alias("mean_lag")
    )
    return _rows(summary, ["run", "consumer"])


def compute(spark: SparkSession, runs: list[Run], window_seconds: float = 1.0) -> ReportData:
    """Every figure of the report."""
    data = ReportData(runs, window_seconds)
    acks = _table(spark, runs, "acks")
    if acks is not None:
        acks = acks.cache()
        first = acks.groupBy("run").agg(F.min("acked_at").alias("first")).collect()
        data.run_starts = {row["run"]: row["first"] for row in first}
        data.latency, data.windows, data.cdf = latency_tables(acks, window_seconds, data.run_starts)
        data.throughput, data.throughput_summary = throughput_tables(acks, data.run_starts)
        data.ratios = tiered_ratios(data.latency)
        consumed = _table(spark, runs, "consumed")
        if consumed is not None:
            data.delivery = delivery_table(acks, consumed)
        acks.unpersist()
    events = _table(spark, runs, "events")
    if events is not None:
        data.events = _rows(
            events.select("run", "at", "kind", "target", "duration_ms", "detail"), ["run", "at"]
        )
    consumer = _table(spark, runs, "consumer")
    if consumer is not None:
        data.consumer_lag = lag_table(consumer)
    return data
