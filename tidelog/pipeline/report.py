"""The figures of ``tidelog report``, computed by Spark from run directories (tidelog/rundata.py).

Percentiles are exact: ``nearest_rank`` ranks each group's values in one sort, and the p-th
percentile of n latencies is the ceil(p * n)-th smallest (as tidelog.perf.stats.percentile).
"Average p99" is the design's figure: the p99 of each window of ``window_seconds`` (by the
acknowledgement's time), averaged over the windows; "max p99" is the largest window's. The
driver only ever collects aggregates (a row per window, group or partition), never raw rows.

A run is a run directory, or a directory of run directories (``tidelog perf tiered-storage``
writes one per case x workload x tiered): its parts share the run's label, and a group (run,
case, workload, tiered) is one part's data. Times in the tables and plots are seconds since the
group's first acknowledgement (or first consumer sample, if it has none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from tidelog import rundata

GROUP = ["run", "case", "workload", "tiered"]
CDF_FRACTIONS = [i / 100 for i in range(1, 100)] + [0.995, 0.999, 0.9999, 1.0]


@dataclass(frozen=True)
class Run:
    """A run directory, with the label its rows carry in the report (shared by the parts of a
    directory of run directories)."""

    label: str
    directory: Path
    metadata: rundata.RunMetadata


@dataclass
class ReportData:
    """Every table (lists of row dicts, in column order) and every series the plots draw."""

    runs: list[Run]
    window_seconds: float
    starts: dict[tuple, datetime] = field(default_factory=dict)  # per group: its time zero
    latency: list[dict[str, Any]] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)  # per run, group and window
    throughput: list[dict[str, Any]] = field(default_factory=list)  # per run and second
    throughput_summary: list[dict[str, Any]] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    cdf: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    delivery: list[dict[str, Any]] = field(default_factory=list)
    consumer_lag: list[dict[str, Any]] = field(default_factory=list)  # per group and kind
    lag_windows: list[dict[str, Any]] = field(default_factory=list)  # per group, kind, window
    rebuilds: list[dict[str, Any]] = field(default_factory=list)  # per group

    @property
    def labels(self) -> list[str]:
        """The runs' labels, in the order given."""
        return list(dict.fromkeys(run.label for run in self.runs))


def group_key(row: dict[str, Any]) -> tuple:
    return tuple(row[name] for name in GROUP)


def load_runs(directories: Sequence[str | Path]) -> list[Run]:
    """The runs, labelled by directory name (made unique with a number when two share one); a
    directory without metadata.json whose sub-directories have one is a run of those parts."""
    runs: list[Run] = []
    seen: set[str] = set()
    for number, directory in enumerate(directories, 1):
        path = Path(directory)
        label = path.resolve().name
        if label in seen:
            label = f"{label}-{number}"
        seen.add(label)
        parts = [path] if (path / rundata.METADATA).exists() else []
        parts = parts or sorted(found.parent for found in path.glob(f"*/{rundata.METADATA}"))
        if not parts:
            raise FileNotFoundError(
                f"{path}: not a run directory (no {rundata.METADATA}), nor a directory of them"
            )
        runs += [Run(label, part, rundata.read_metadata(part)) for part in parts]
    return runs


def group_ids(runs: list[Run]) -> list[tuple]:
    """Every group (run, case, workload, tiered) of the runs, sorted: a group's id is its
    index. Spark's sorts, shuffles and joins key on the id, an int, not on four columns."""
    return sorted(
        {(run.label, run.metadata.case, run.metadata.workload, bool(run.metadata.tiered))
         for run in runs}
    )  # fmt: skip


def _table(spark: SparkSession, runs: list[Run], name: str) -> DataFrame | None:
    """Table ``name`` of every run that has it, with its group's id in column ``group``.

    Read with the schema rundata writes the table in: a read that infers a file's schema
    runs a Spark job to read its footer, a job per run and table.
    """
    ids = {key: number for number, key in enumerate(group_ids(runs))}
    schema = from_arrow_schema(rundata.TABLES[name])
    frames = []
    for run in runs:
        path = rundata.table_path(run.directory, name)
        if not path.exists():
            continue
        # absolute: a cluster's executors read it from another working directory
        frame = spark.read.schema(schema).parquet(str(path.absolute()))
        meta = run.metadata
        key = (run.label, meta.case, meta.workload, bool(meta.tiered))
        frames.append(frame.select(F.lit(ids[key]).alias("group"), *frame.columns))
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def nearest_rank(
    frame: DataFrame,
    keys: Sequence[str],
    fractions: Sequence[float],
    column: str = "latency_ms",
    more: Sequence[Column] = (),
) -> DataFrame:
    """Per group of ``keys``: records (count), max_ms (the largest of ``column``), the
    aggregates ``more`` (named columns), and the nearest-rank percentile of ``column`` for each
    fraction (columns q0, q1, ...): the ceil(f * n)-th smallest of the n values.

    One sort per group serves every fraction: each row gets its rank in its group, and a hash
    join with the small table of wanted ranks (a few per group, broadcast) keeps the rows at
    those ranks, so only they reach the final aggregation. The group sizes come from an
    aggregation, not from a window over the whole group (which would buffer it); the wanted
    ranks carry the group's aggregates to the final one, where every group has a row (rank
    1 <= ceil(f * n) <= n).
    """
    keys = list(keys)
    counts = frame.groupBy(*keys).agg(
        F.count("*").alias("records"), F.max(column).alias("max_ms"), *more
    )
    carried = [name for name in counts.columns if name not in keys]
    ranks = [
        F.greatest(F.lit(1), F.ceil(F.lit(fraction) * F.col("records"))).cast("long")
        for fraction in fractions
    ]
    wanted = counts.select(*keys, *carried, F.posexplode(F.array(*ranks)).alias("q", "rank"))
    order = Window.partitionBy(*keys).orderBy(column)
    ranked = frame.select(*keys, column, F.row_number().over(order).cast("long").alias("rank"))
    picked = ranked.join(F.broadcast(wanted), [*keys, "rank"])
    return picked.groupBy(*keys, *carried).agg(
        *[
            F.max(F.when(F.col("q") == number, F.col(column))).alias(f"q{number}")
            for number in range(len(fractions))
        ]
    )


def _ascending(value: Any) -> tuple:
    """A sort key that orders as Spark's ascending sort does: nulls first."""
    return (0,) if value is None else (1, value)


def _rows(frame: DataFrame, order: Sequence[str], groups: list[tuple]) -> list[dict[str, Any]]:
    """The rows, collected, sorted by ``order`` and ``group`` replaced by the group's run,
    case, workload, tiered.

    The frames are aggregates of a few rows per group: the driver sorts them (a stable sort
    of the rows in the order collected), where Spark's orderBy would run a sampling job and a
    shuffle more for each.
    """
    collected = [row.asDict() for row in frame.collect()]
    collected.sort(key=lambda fields: tuple(_ascending(fields[name]) for name in order))
    found = []
    for fields in collected:
        named = dict(zip(GROUP, groups[fields.pop("group")], strict=True))
        found.append(named | fields)
    return found


SUMMARY_FRACTIONS = {"p50_ms": 0.50, "p95_ms": 0.95, "p99_ms": 0.99}


def _window(column: str, window_seconds: float) -> Column:
    """The number of the ``window_seconds`` window (counted from the epoch) a time falls in."""
    return F.floor(F.unix_micros(column) / int(window_seconds * 1_000_000)).cast("long")


def _seconds(row: dict[str, Any], starts: dict[tuple, datetime], window_seconds: float) -> float:
    """Where window ``row["window"]`` starts, in seconds since its group's time zero."""
    return row["window"] * window_seconds - starts[group_key(row)].timestamp()


FIRST = "first"  # a window's earliest time, of which its group's time zero is the least


def latency_windows(
    acks: DataFrame, window_seconds: float, groups: list[tuple]
) -> list[dict[str, Any]]:
    """Per group and window (collected, in order): records, max_ms, the SUMMARY_FRACTIONS'
    percentiles (q0, q1, ...) and FIRST, the window's first acknowledgement."""
    with_window = acks.withColumn("window", _window("acked_at", window_seconds))
    first = [F.min("acked_at").alias(FIRST)]
    ranked = nearest_rank(
        with_window, ["group", "window"], list(SUMMARY_FRACTIONS.values()), more=first
    )
    return _rows(ranked, ["group", "window"], groups)


def latency_tables(
    acks: DataFrame,
    per_window: list[dict[str, Any]],
    window_seconds: float,
    starts: dict[tuple, datetime],
    groups: list[tuple],
) -> tuple[list, list, list]:
    """(summary per group, p50/p95/p99 per window, CDF points per group), ``per_window``
    being latency_windows'. The averages and maxima over windows are taken on the driver from
    the per-window rows."""
    fractions = list(SUMMARY_FRACTIONS.values())
    windows = []
    for row in per_window:
        windows.append(
            {key: row[key] for key in GROUP}
            | {"second": _seconds(row, starts, window_seconds), "records": row["records"]}
            | {name: row[f"q{i}"] for i, name in enumerate(SUMMARY_FRACTIONS)}
            | {"max_ms": row["max_ms"]}
        )
    by_group: dict[tuple, list[dict[str, Any]]] = {}
    for window in windows:
        by_group.setdefault(group_key(window), []).append(window)
    summary, cdf = [], []
    for row in _rows(nearest_rank(acks, ["group"], fractions + CDF_FRACTIONS), ["group"], groups):
        key = {name: row[name] for name in GROUP}
        mine = by_group[group_key(row)]
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


def throughput_tables(
    acks: DataFrame, starts: dict[tuple, datetime], groups: list[tuple]
) -> tuple[list, list]:
    """(records and bytes acknowledged in each second of each group, counted from its first
    acknowledgement's whole second, and a summary per group)."""
    per_second = (
        acks.withColumn("window", _window("acked_at", 1.0))
        .groupBy("group", "window")
        .agg(F.count("*").alias("records"), F.sum("bytes").alias("bytes"))
    )
    found: dict[tuple, dict[int, tuple[int, float]]] = {}
    for row in _rows(per_second, ["group", "window"], groups):
        second = row["window"] - int(starts[group_key(row)].timestamp())
        found.setdefault(group_key(row), {})[second] = (row["records"], row["bytes"] / 1_000_000)
    seconds: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for key, counts in sorted(found.items()):
        group = dict(zip(GROUP, key, strict=True))
        # a second in which nothing was acknowledged is a zero, not a gap
        duration = max(counts) + 1
        in_order = [counts.get(second, (0, 0.0)) for second in range(duration)]
        seconds += [
            group | {"second": second, "records": records, "megabytes": megabytes}
            for second, (records, megabytes) in enumerate(in_order)
        ]
        records = sum(count for count, _ in in_order)
        summary.append(
            group
            | {
                "seconds": duration,
                "records": records,
                "mean_records_per_s": records / duration,
                "peak_records_per_s": max(count for count, _ in in_order),
                "mean_mb_per_s": sum(megabytes for _, megabytes in in_order) / duration,
            }
        )
    return seconds, summary


def tiered_ratios(
    latency: list[dict[str, Any]], rebuilds: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per run, case and workload measured with and without tiered storage: avg p99 and p95,
    max window p99 and rebuild duration with over without."""
    by_key = {group_key(r): r for r in latency}
    rebuilt = {group_key(r): r for r in rebuilds}
    rows = []
    for (run, case, workload, tiered), with_tiered in sorted(by_key.items()):
        without = by_key.get((run, case, workload, False))
        if not tiered or without is None:
            continue
        row = {
            "run": run,
            "case": case,
            "workload": workload,
            "avg_p99_with_ms": with_tiered["avg_p99_ms"],
            "avg_p99_without_ms": without["avg_p99_ms"],
            "avg_p99_ratio": _ratio(with_tiered["avg_p99_ms"], without["avg_p99_ms"]),
            "avg_p95_ratio": _ratio(with_tiered["avg_p95_ms"], without["avg_p95_ms"]),
            "max_p99_ratio": _ratio(with_tiered["max_p99_ms"], without["max_p99_ms"]),
        }
        rebuild_with = rebuilt.get((run, case, workload, True))
        rebuild_without = rebuilt.get((run, case, workload, False))
        row["rebuild_duration_ratio"] = (
            _ratio(rebuild_with["total_s"], rebuild_without["total_s"])
            if rebuild_with and rebuild_without
            else None
        )
        rows.append(row)
    return rows


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def delivery_table(
    acks: DataFrame, consumed: DataFrame, groups: list[tuple]
) -> list[dict[str, Any]]:
    """Per group and partition: acknowledged, consumed, lost (acknowledged, never consumed),
    duplicated (consumed copies beyond the first), reordered (a sequence number below the one
    consumed before it, in offset order)."""
    keys = ["group", "partition", "message"]
    # per message: the copies acknowledged and consumed (null where there were none)
    acked = (
        acks.where(F.col("message").isNotNull())
        .groupBy(*keys)
        .agg(F.count("*").alias("acked_copies"))
    )
    consumed_copies = consumed.groupBy(*keys).agg(F.count("*").alias("consumed_copies"))
    counts = (
        acked.join(consumed_copies, keys, "full")
        .groupBy("group", "partition")
        .agg(
            F.sum("acked_copies").alias("acknowledged"),
            F.sum("consumed_copies").alias("consumed"),
            F.sum(F.when(F.col("consumed_copies").isNull(), F.col("acked_copies"))).alias("lost"),
            F.sum(F.col("consumed_copies") - 1).alias("duplicated"),
        )
    )
    in_order = Window.partitionBy("group", "partition").orderBy("offset")
    sequence = F.element_at(F.split("message", "-"), -1).cast("long")
    reordered = (
        consumed.withColumn("sequence", sequence)
        .withColumn("previous", F.lag("sequence").over(in_order))
        .groupBy("group", "partition")
        .agg(F.sum((F.col("sequence") <= F.col("previous")).cast("int")).alias("reordered"))
    )
    table = counts.join(reordered, ["group", "partition"], "left").na.fill(
        0, ["acknowledged", "consumed", "lost", "duplicated", "reordered"]
    )
    return _rows(
        table.select(
            "group", "partition", "acknowledged", "consumed", "lost", "duplicated", "reordered"
        ),
        ["group", "partition"],
        groups,
    )


CONSUMER_KIND = r"-\d+$"  # "catching-up-3" is one consumer of kind "catching-up"
LAG_FRACTIONS = {"p50_lag": 0.50, "p99_lag": 0.99}


def consumer_samples(consumer: DataFrame) -> DataFrame:
    """The samples, cached (two queries read them; unpersist after): a sample is one
    consumer's lag summed over its partitions at one ``sampled_at``, the records it has yet to
    read, with the consumer's kind."""
    return (
        consumer.groupBy("group", "consumer", "sampled_at")
        .agg(F.sum("lag").alias("lag"))
        .withColumn("kind", F.regexp_replace("consumer", CONSUMER_KIND, ""))
        .cache()
    )


def lag_windows(
    samples: DataFrame, window_seconds: float, groups: list[tuple]
) -> list[dict[str, Any]]:
    """Per group, consumer kind and window (collected, in order): max_lag, the largest lag of
    a consumer of that kind in the window, and FIRST, the window's first sample."""
    keys = ["group", "kind"]
    per_window = (
        samples.withColumn("window", _window("sampled_at", window_seconds))
        .groupBy(*keys, "window")
        .agg(F.max("lag").alias("max_lag"), F.min("sampled_at").alias(FIRST))
    )
    return _rows(per_window, [*keys, "window"], groups)


def consumer_lag_tables(
    samples: DataFrame,
    per_window: list[dict[str, Any]],
    window_seconds: float,
    starts: dict[tuple, datetime],
    groups: list[tuple],
) -> tuple[list, list]:
    """(per group and consumer kind: consumers, samples, mean, exact p50 and p99 and max lag;
    per group, kind and window: the largest lag of a consumer of that kind in the window),
    from consumer_samples' samples and lag_windows' rows. Percentiles are nearest rank over
    the samples of a kind.
    """
    keys = ["group", "kind"]
    # a set, not countDistinct: a kind has a few consumers, and a distinct count would add
    # an aggregation and a shuffle
    counted = [
        F.size(F.collect_set("consumer")).alias("consumers"),
        F.avg("lag").alias("mean_lag"),
    ]
    ranked = nearest_rank(samples, keys, list(LAG_FRACTIONS.values()), "lag", counted)
    summary = [
        {name: row[name] for name in [*GROUP, "kind"]}
        | {"consumers": row["consumers"], "samples": row["records"], "mean_lag": row["mean_lag"]}
        | {name: row[f"q{i}"] for i, name in enumerate(LAG_FRACTIONS)}
        | {"max_lag": row["max_ms"]}
        for row in _rows(ranked, keys, groups)
    ]
    windows = [
        {name: row[name] for name in [*GROUP, "kind"]}
        | {"second": _seconds(row, starts, window_seconds), "max_lag": row["max_lag"]}
        for row in per_window
    ]
    return summary, windows


# Events that are a broker rebuilt from its replicas: the load runs' "rebuild", and the chaos
# scenario's "wipe_and_rebuild" (its duration lasts until the partitions' ISR is full again).
REBUILDS = ["rebuild", "wipe_and_rebuild"]


def rebuild_table(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group: the rebuilds (events of a REBUILDS kind with a duration), their total and
    longest duration in seconds. From the events' rows on the driver (a run has a handful)."""
    durations: dict[tuple, list[float]] = {}
    for event in events:
        if event["kind"] in REBUILDS and event["duration_ms"] is not None:
            durations.setdefault(group_key(event), []).append(event["duration_ms"])
    return [
        dict(zip(GROUP, key, strict=True))
        | {"rebuilds": len(found), "total_s": sum(found) / 1000, "longest_s": max(found) / 1000}
        for key, found in sorted(durations.items())
    ]


def _starts(
    ack_windows: list[dict[str, Any]],
    sample_windows: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> dict[tuple, datetime]:
    """Each group's time zero: its first acknowledgement, or else its first consumer sample,
    or else its first event: the least FIRST of its latency windows, else of its lag windows
    (rows collected anyway), else the first of its events (in time order)."""
    starts: dict[tuple, datetime] = {}
    for windows in (ack_windows, sample_windows):
        firsts: dict[tuple, datetime] = {}
        for window in windows:
            key, first = group_key(window), window[FIRST]
            if first is not None and (key not in firsts or first < firsts[key]):
                firsts[key] = first
        for key, first in firsts.items():
            starts.setdefault(key, first)
    for event in events:
        if event["at"] is not None:
            starts.setdefault(group_key(event), event["at"])
    return starts


def compute(spark: SparkSession, runs: list[Run], window_seconds: float = 1.0) -> ReportData:
    """Every figure of the report."""
    data = ReportData(runs, window_seconds)
    groups = group_ids(runs)
    acks = _table(spark, runs, "acks")
    consumer = _table(spark, runs, "consumer")
    events = _table(spark, runs, "events")
    if acks is not None:
        acks = acks.cache()
    if events is not None:
        data.events = _rows(events, ["group", "at"], groups)
        data.rebuilds = rebuild_table(data.events)
    ack_windows = [] if acks is None else latency_windows(acks, window_seconds, groups)
    samples = None if consumer is None else consumer_samples(consumer)
    sample_windows = [] if samples is None else lag_windows(samples, window_seconds, groups)
    data.starts = _starts(ack_windows, sample_windows, data.events)
    if acks is not None:
        data.latency, data.windows, data.cdf = latency_tables(
            acks, ack_windows, window_seconds, data.starts, groups
        )
        data.throughput, data.throughput_summary = throughput_tables(acks, data.starts, groups)
        consumed = _table(spark, runs, "consumed")
        if consumed is not None:
            data.delivery = delivery_table(acks, consumed, groups)
        acks.unpersist()
    data.ratios = tiered_ratios(data.latency, data.rebuilds)
    if samples is not None:
        data.consumer_lag, data.lag_windows = consumer_lag_tables(
            samples, sample_windows, window_seconds, data.starts, groups
        )
        samples.unpersist()
    return data
