"""``spark.read.format("tidelog")``: a PySpark Python data source over tidelog's segment files.

    spark.read.format("tidelog").option("topic", "events").load("my-cluster")
        .where("timestamp >= 1700000000000")

The path is a cluster directory, a broker's log directory or one partition directory; every
local segment is one input partition (tidelog/pipeline/segments.py reads it, ``tier = 'local'``),
and so is every remote segment holding offsets below the local log start (KIP-405's remote tier,
read range by range through the partition's remoteLogIndex by tidelog/pipeline/remote.py,
``tier = 'remote'``). Filters on ``offset`` and ``timestamp`` (>, >=, =, <, <=) and on ``topic``
and ``partition`` (=, IN) are pushed down: they skip segments and seek inside them with the
indexes (``.index``/``.timeindex`` locally, remoteOffsetIndex/remoteTimeIndex for the tier).
Spark still applies every filter to the rows, so a query's result never depends on how much was
skipped. Options ``rsm.config.*`` reach the tier's fsspec file system as the broker's do (an
``s3://`` tier's ``rsm.config.endpoint_url``, say); a ``file://`` tier needs none.

Option ``scanStatsDir``: a directory (one per query) where each segment's ScanStats is written
as JSON; ``scan_stats(directory)`` adds them up (``scan_stats(directory, "remote")`` those of the
remote tier alone), so a person can see the bytes a filter skipped.

``spark.readStream.format("tidelog")`` is tidelog/pipeline/stream.py.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from tidelog.pipeline.remote import RemoteSegmentScan, plan_remote, read_remote
from tidelog.pipeline.segments import (
    SPARK_SCHEMA,
    Bounds,
    ScanStats,
    SegmentScan,
    first_offset,
    partition_replicas,
    plan_segment,
    read_segment,
    segments_of,
)
from tidelog.tiered.storage import split_rsm_config

log = logging.getLogger(__name__)


class TidelogDataSource(DataSource):
    """Options: ``path`` (what ``load`` is given), ``topic``, ``scanStatsDir``,
    ``rsm.config.*``; for streaming, tidelog/pipeline/stream.py lists its own."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if "path" not in self.options:
            raise ValueError('spark.read.format("tidelog") needs a path: .load(DIRECTORY)')
        return SegmentReader(
            self.options["path"],
            self.options.get("topic"),
            self.options.get("scanStatsDir"),
            split_rsm_config(dict(self.options)),
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tidelog.pipeline.stream import FetchStreamReader

        return FetchStreamReader(dict(self.options))


class SegmentInput(InputPartition):
    """One segment's planned scan: a local SegmentScan or a RemoteSegmentScan."""

    def __init__(self, scan: SegmentScan | RemoteSegmentScan) -> None:
        super().__init__(scan.segment.name if isinstance(scan, SegmentScan) else scan.name)
        self.scan = scan


def _integer_bound(filter_: Filter) -> tuple[str, int | None, int | None] | None:
    """(column, lowest, highest) a comparison on an integer column allows, or None."""
    value = getattr(filter_, "value", None)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    column = ".".join(getattr(filter_, "attribute", ()))
    if isinstance(filter_, GreaterThan):
        return column, value + 1, None
    if isinstance(filter_, GreaterThanOrEqual):
        return column, value, None
    if isinstance(filter_, LessThan):
        return column, None, value - 1
    if isinstance(filter_, LessThanOrEqual):
        return column, None, value
    if isinstance(filter_, EqualTo):
        return column, value, value
    return None


class SegmentReader(DataSourceReader):
    """Plans one input partition per segment, local or remote, that the pushed filters do not
    rule out."""

    def __init__(
        self,
        path: str,
        topic: str | None,
        stats_dir: str | None,
        remote_options: dict[str, str] | None = None,
    ) -> None:
        # absolute: the executors of a cluster read (and write stats) in another directory
        self.path, self.topic = os.path.abspath(path), topic
        self.stats_dir = None if stats_dir is None else os.path.abspath(stats_dir)
        self.remote_options = remote_options or {}
        self.bounds = Bounds()
        self.partitions_wanted: set[int] | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for filter_ in filters:
            column = ".".join(getattr(filter_, "attribute", ()))
            if column == "topic" and isinstance(filter_, EqualTo):
                if self.topic not in (None, filter_.value):
                    self.partitions_wanted = set()  # two different topics: nothing matches
                self.topic = filter_.value
            elif column == "partition" and isinstance(filter_, EqualTo | In):
                values = {filter_.value} if isinstance(filter_, EqualTo) else set(filter_.value)
                wanted = self.partitions_wanted
                self.partitions_wanted = values if wanted is None else wanted & values
            elif (bound := _integer_bound(filter_)) is not None:
                self._narrow(*bound)
            yield filter_  # Spark checks the rows too: bounds only skip what cannot match

    def _narrow(self, column: str, lowest: int | None, highest: int | None) -> None:
        def tighter(current: int | None, new: int | None, pick) -> int | None:
            return current if new is None else new if current is None else pick(current, new)

        bounds = self.bounds
        if column == "offset":
            bounds = replace(
                bounds,
                min_offset=tighter(bounds.min_offset, lowest, max),
                max_offset=tighter(bounds.max_offset, highest, min),
            )
        elif column == "timestamp":
            bounds = replace(bounds, min_timestamp=tighter(bounds.min_timestamp, lowest, max))
        self.bounds = bounds

    def partitions(self) -> Sequence[InputPartition]:
        replicas = partition_replicas(self.path, self.topic)
        if self.partitions_wanted is not None:
            wanted = self.partitions_wanted
            replicas = {key: found for key, found in replicas.items() if key[1] in wanted}
        scans: list[SegmentScan | RemoteSegmentScan] = []
        local_starts: dict[tuple[str, int], int] = {}
        for segment in segments_of(replicas):
            key = (segment.topic, segment.partition)
            try:
                scans.append(plan_segment(segment, self.bounds))
                # by base offset within a partition: the first planned holds the local log start
                if key not in local_starts:
                    local_starts[key] = first_offset(segment)
            except FileNotFoundError:  # deleted since it was listed: the tier may hold it
                log.info("%s: deleted while the scan was planned", segment.name)
        for (topic, partition), directories in replicas.items():
            local_start = local_starts.get((topic, partition))
            scans += plan_remote(topic, partition, directories, local_start, self.bounds)
        planned = []
        for scan in scans:
            if not scan.skipped:
                planned.append(SegmentInput(scan))
            elif isinstance(scan, SegmentScan):
                _write_stats(self.stats_dir, scan, ScanStats(scan.segment.size, 0, 0))
            else:
                _write_stats(self.stats_dir, scan, ScanStats(scan.segment_bytes, 0, 0))
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        scan = partition.scan  # type: ignore[attr-defined]
        stats: list[ScanStats] = []
        if isinstance(scan, RemoteSegmentScan):
            yield from read_remote(scan, self.remote_options, stats=stats)
        else:
            yield from read_segment(scan, stats=stats)
        log.info(
            "%s: read %d of %d bytes (%d skipped), %d rows",
            partition.value,
            stats[0].bytes_read,
            stats[0].segment_bytes,
            stats[0].bytes_skipped,
            stats[0].rows,
        )
        _write_stats(self.stats_dir, scan, stats[0])


def _write_stats(
    directory: str | None, scan: SegmentScan | RemoteSegmentScan, stats: ScanStats
) -> None:
    """``{topic}-{partition}-{first offset}.{tier}.json``: one file per segment scanned."""
    if directory is None:
        return
    if isinstance(scan, SegmentScan):
        segment = scan.segment
        topic, partition, first, name = (
            segment.topic, segment.partition, segment.base_offset, segment.name
        )  # fmt: skip
        tier = "local"
    else:
        topic, partition, first, name = scan.topic, scan.partition, scan.first_offset, scan.name
        tier = "remote"
    path = Path(directory) / f"{topic}-{partition}-{first:020d}.{tier}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(stats) | {"segment": name, "tier": tier}))


def scan_stats(directory: str | Path, tier: str | None = None) -> ScanStats:
    """The ScanStats of every segment a query with ``scanStatsDir=directory`` covered (only
    those of ``tier``, "local" or "remote", if given)."""
    total = ScanStats()
    for path in sorted(Path(directory).glob("*.json")):
        fields = json.loads(path.read_text())
        if tier is None or fields["tier"] == tier:
            total += ScanStats(fields["segment_bytes"], fields["bytes_read"], fields["rows"])
    return total
