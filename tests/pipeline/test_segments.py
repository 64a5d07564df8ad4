"""The segment reader under the Spark data source: rows, replicas, and bounded scans."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import message_set
from tidelog.pipeline.segments import (
    Bounds,
    find_segments,
    plan_segment,
    read_segment,
)
from tidelog.records.format import MESSAGE_SET_CODECS, Codec, iter_deep
from tidelog.records.record_batch import BatchRecordInput, encode_batch

STEP_MS = 10


def fill(log, clock, batches: int, *, codec=Codec.NONE, magic=1, per_batch=5):
    for _ in range(batches):
        clock.advance(STEP_MS)
        log.append_as_leader(
            message_set(per_batch, codec=codec, magic=magic, timestamp=clock.milliseconds())
        )


def rows_of(segments, bounds=None, stats=None):
    rows, bounds = [], bounds or Bounds()
    for segment in segments:
        for batch in read_segment(plan_segment(segment, bounds), stats=stats):
            rows += batch.to_pylist()
    return rows


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_rows_are_the_messages_of_every_segment(make_log, clock, tmp_path, magic, codec):
    log = make_log(
        segment_bytes=1000,
        index_interval_bytes=300,
        message_format_version="0.9.0" if magic == 0 else "0.10.0",
    )
    fill(log, clock, 30, codec=codec, magic=magic)
    log.flush()

    segments = find_segments(tmp_path)
    assert len(segments) > 1
    expected = [
        m for s in sorted((tmp_path / "t-0").glob("*.log")) for m in iter_deep(s.read_bytes())
    ]
    rows = rows_of(segments)
    assert [(r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows] == [
        (m.offset, m.timestamp, m.key, m.value) for m in expected
    ]
    assert {(r["topic"], r["partition"], r["magic"], r["tier"]) for r in rows} == {
        ("t", 0, magic, "local")
    }
    assert {r["codec"] for r in rows} == {codec.name.lower()}
    assert {r["timestamp_type"] for r in rows} == {0 if magic else -1}
    assert [r["offset"] for r in rows] == list(range(150))


def test_bounds_skip_segments_and_seek_inside_them(make_log, clock, tmp_path):
    log = make_log(segment_bytes=3000, index_interval_bytes=200)
    fill(log, clock, 60)
    log.flush()
    segments = find_segments(tmp_path)
    everything = rows_of(segments)
    middle = everything[len(everything) // 2]

    for bounds, wanted in [
        (
            Bounds(min_timestamp=middle["timestamp"]),
            lambda r: r["timestamp"] >= middle["timestamp"],
        ),
        (Bounds(min_offset=170, max_offset=200), lambda r: 170 <= r["offset"] <= 200),
    ]:
        stats: list = []
        rows = rows_of(segments, bounds, stats)
        # every matching row is there; the few extra ones Spark filters away
        assert [r for r in rows if wanted(r)] == [r for r in everything if wanted(r)]
        total = sum(stats[1:], stats[0])
        assert total.segment_bytes == sum(s.size for s in segments)
        assert total.bytes_skipped > total.segment_bytes // 3
        assert len(rows) < len([r for r in everything if wanted(r)]) + 40


def test_a_cluster_directory_is_read_from_the_replica_that_holds_most(make_log, clock, tmp_path):
    log = make_log(segment_bytes=2000)
    fill(log, clock, 20)
    log.flush()
    leader = tmp_path / "cluster" / "broker-1" / "logs" / "t-0"
    shutil.copytree(tmp_path / "t-0", leader)
    lagging = tmp_path / "cluster" / "broker-2" / "logs" / "t-0"
    lagging.mkdir(parents=True)
    first = sorted(leader.glob("00000000000000000000.*"))
    for path in first:
        shutil.copy(path, lagging / path.name)

    segments = find_segments(tmp_path / "cluster")

    assert {s.directory for s in segments} == {str(leader)}
    assert [r["offset"] for r in rows_of(segments)] == list(range(100))
    assert find_segments(tmp_path / "cluster", topic="other") == []


def test_a_segment_deleted_after_it_was_planned_has_no_rows(make_log, clock, tmp_path):
    """The data source plans a live broker's segments, then reads them: retention may delete
    one in between (seen on the suite's shared cluster), and its messages are gone."""
    log = make_log(segment_bytes=1000)
    fill(log, clock, 30)
    log.flush()
    first, second = find_segments(tmp_path)[:2]
    scans = [plan_segment(first, Bounds()), plan_segment(second, Bounds())]
    first.log_path.unlink()

    stats: list = []
    rows = [
        row
        for scan in scans
        for batch in read_segment(scan, stats=stats)
        for row in batch.to_pylist()
    ]

    assert rows and all(r["offset"] >= second.base_offset for r in rows)
    assert stats[0].bytes_read == 0 and stats[1].bytes_read > 0


@pytest.mark.parametrize("codec", list(Codec))
def test_rows_of_v2_batches_carry_their_records_headers(make_log, clock, tmp_path, codec):
    log = make_log(segment_bytes=2000, index_interval_bytes=300, message_format_version="2.1")
    for _ in range(20):
        clock.advance(STEP_MS)
        log.append_as_leader(
            encode_batch(
                [
                    BatchRecordInput(b"k", b"v%d" % i, clock.milliseconds(), (("n", b"%d" % i),))
                    for i in range(3)
                ],
                codec=codec,
            )
        )
    log.flush()

    rows = rows_of(find_segments(tmp_path))

    assert [r["offset"] for r in rows] == list(range(60))
    assert {(r["magic"], r["codec"], r["timestamp_type"]) for r in rows} == {
        (2, codec.name.lower(), 0)
    }
    assert rows[4]["value"] == b"v1"
    assert rows[4]["headers"] == [{"key": "n", "value": b"1"}]
