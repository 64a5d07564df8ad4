"""The data source's planning, without a Spark session: which filters narrow the scan."""

from __future__ import annotations

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from tests.pipeline.test_segments import fill
from tidelog.pipeline.segments import Bounds
from tidelog.pipeline.source import SegmentReader, scan_stats


def test_offset_and_timestamp_filters_narrow_the_bounds_and_all_go_back_to_spark():
    reader = SegmentReader("unused", None, None)
    filters = [
        GreaterThanOrEqual(("offset",), 5),
        GreaterThan(("offset",), 0),
        LessThan(("offset",), 10),
        LessThanOrEqual(("offset",), 0 + 12),
        GreaterThan(("timestamp",), 100),
        LessThan(("timestamp",), 50),  # an upper time bound skips nothing
        In(("partition",), (1, 2)),
        EqualTo(("partition",), 2),
        StringStartsWith(("topic",), "t"),
    ]

    assert list(reader.pushFilters(filters)) == filters  # Spark checks every row still
    assert reader.bounds == Bounds(min_offset=5, max_offset=9, min_timestamp=101)
    assert reader.partitions_wanted == {2}


def test_planning_leaves_out_segments_the_bounds_rule_out(make_log, clock, tmp_path):
    log = make_log(segment_bytes=2000, index_interval_bytes=300)
    fill(log, clock, 40)
    log.flush()
    stats_dir = tmp_path / "stats"
    reader = SegmentReader(str(tmp_path / "t-0"), None, str(stats_dir))
    everything = len(SegmentReader(str(tmp_path / "t-0"), None, None).partitions())
    list(reader.pushFilters([GreaterThanOrEqual(("offset",), 150)]))

    planned = reader.partitions()

    assert 0 < len(planned) < everything
    assert all(p.scan.segment.next_base_offset is None or p.scan.segment.next_base_offset > 150
               for p in planned)  # fmt: skip
    offsets = [
        offset
        for partition in planned
        for batch in reader.read(partition)
        for offset in batch.column("offset").to_pylist()
    ]
    assert [o for o in offsets if o >= 150] == list(range(150, 200))
    assert min(offsets) > 100  # the seek inside the first planned segment skipped the rest
    stats = scan_stats(stats_dir)
    assert stats.rows >= 50 and stats.bytes_skipped > 0
    assert stats.segment_bytes == sum(p.stat().st_size for p in (tmp_path / "t-0").glob("*.log"))
