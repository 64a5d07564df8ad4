"""The data source over a partition with a remote tier (a real file:// tier written by the remote
log manager): remote-only segments are read range by range and filters skip remote ranges."""

from __future__ import annotations

import pytest

from tests.tiered.test_manager import KEY, Broker, remote_config
from tidelog.cluster.local import wait_until
from tidelog.pipeline.remote import plan_remote
from tidelog.pipeline.segments import Bounds, partition_replicas
from tidelog.pipeline.source import SegmentReader, scan_stats
from tidelog.records.format import Codec, iter_deep

FORMATS = {0: "0.9.0", 1: "0.10.0"}


@pytest.fixture
def tier(tmp_path):
    return tmp_path / "remote"


def offloaded(tmp_path, tier, clock, magic=1, codec=Codec.NONE):
    """A broker whose partition t-0 keeps its older segments only in the tier, and every message
    it ever held (read before local retention ran), as (offset, timestamp, key, value)."""
    config = remote_config(
        message_format_version=FORMATS[magic], local_retention_ms=-1, local_retention_bytes=0
    )
    broker = Broker(tmp_path / "leader", tier, clock, config)
    broker.fill(clock, 40, codec=codec, magic=magic)
    everything = [
        (m.offset, m.timestamp, m.key, m.value)
        for segment in broker.log.segments
        for m in iter_deep(segment.log_path.read_bytes())
    ]
    broker.remote.run_task_now(KEY)
    assert broker.log.delete_old_segments() > 0
    assert broker.log.local_log_start_offset > 0
    wait_until(
        lambda: len(list(broker.log.directory.glob("*.log"))) == len(broker.log.segments),
        10,
        "the files of the segments local retention deleted to go",
    )
    return broker, everything


def read_all(reader: SegmentReader) -> list[dict]:
    return [
        row for partition in reader.partitions() for batch in reader.read(partition)
        for row in batch.to_pylist()
    ]  # fmt: skip


@pytest.mark.parametrize(("magic", "codec"), [(0, Codec.GZIP), (1, Codec.NONE), (1, Codec.LZ4)])
def test_remote_only_segments_are_rows_of_tier_remote(tmp_path, tier, clock, magic, codec):
    broker, everything = offloaded(tmp_path, tier, clock, magic, codec)
    try:
        local_start = broker.log.local_log_start_offset
        rows = read_all(SegmentReader(str(tmp_path / "leader"), None, str(tmp_path / "stats")))

        found = sorted((r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows)
        assert found == everything
        assert {r["tier"] for r in rows if r["offset"] < local_start} == {"remote"}
        assert {r["tier"] for r in rows if r["offset"] >= local_start} == {"local"}
        assert {(r["magic"], r["codec"]) for r in rows} == {(magic, codec.name.lower())}
        remote = scan_stats(tmp_path / "stats", "remote")
        assert remote.rows == local_start and remote.bytes_skipped == 0
        # one scan per remote segment
        scans = plan_remote("t", 0, [broker.log.directory], local_start, Bounds())
        assert len(scans) == len(broker.remote.metadata.finished(*KEY)) >= 1
    finally:
        broker.close()


def test_offset_and_timestamp_filters_skip_remote_segments_and_ranges(tmp_path, tier, clock):
    broker, everything = offloaded(tmp_path, tier, clock)
    try:
        local_start = broker.log.local_log_start_offset
        [replicas] = partition_replicas(tmp_path / "leader").values()
        full = plan_remote("t", 0, replicas, local_start, Bounds())
        full_ranges = sum(len(scan.ranges) for scan in full)
        cut = local_start // 2  # inside the remote part
        cut_timestamp = next(timestamp for offset, timestamp, *_ in everything if offset == cut)

        for bounds, keep in [
            (Bounds(min_offset=cut), lambda offset, _: offset >= cut),
            (Bounds(min_timestamp=cut_timestamp), lambda _, timestamp: timestamp >= cut_timestamp),
            (Bounds(max_offset=cut), lambda offset, _: offset <= cut),
        ]:
            stats_dir = tmp_path / f"stats-{bounds}"
            reader = SegmentReader(str(tmp_path / "leader"), None, str(stats_dir))
            reader.bounds = bounds
            rows = read_all(reader)
            found = {(r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows}
            expected = {row for row in everything if keep(row[0], row[1])}
            assert expected <= found, bounds  # every matching row; Spark drops the rest
            remote = scan_stats(stats_dir, "remote")
            assert remote.segment_bytes == sum(scan.segment_bytes for scan in full), bounds
            assert 0 < remote.bytes_read < remote.segment_bytes * 0.75, bounds
            planned = plan_remote("t", 0, replicas, local_start, bounds)
            assert 0 < sum(len(scan.ranges) for scan in planned) < full_ranges, bounds
            assert any(scan.skipped for scan in planned), bounds  # whole segments too
    finally:
        broker.close()


def test_nothing_below_the_log_start_offset_is_read(tmp_path, tier, clock):
    broker, everything = offloaded(tmp_path, tier, clock)
    try:
        local_start = broker.log.local_log_start_offset
        [replicas] = partition_replicas(tmp_path / "leader").values()
        first = plan_remote("t", 0, replicas, local_start, Bounds())[0]
        # a log start inside the first remote segment, as a DeleteRecords or retention leaves it
        broker.log.maybe_increment_log_start_offset(first.first_offset + 3, "a test")
        broker.logs.checkpoint_log_start_offsets()

        rows = read_all(SegmentReader(str(tmp_path / "leader"), None, None))

        assert sorted(r["offset"] for r in rows) == [o for o, *_ in everything if o >= 3]
    finally:
        broker.close()
