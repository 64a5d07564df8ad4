"""LogSegments: the ordered collection of a log's segments, and the file-name helper."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.log.files import base_offset_of, segment_file, segment_files, segment_name
from tidelog.log.segment import LogSegment
from tidelog.log.segments import LogSegments


@pytest.fixture
def segments(tmp_path: Path):
    collection = LogSegments()
    opened = []
    for base in (40, 0, 20):  # added out of order on purpose
        segment = LogSegment(tmp_path, base, index_interval_bytes=4096, max_index_size=1024)
        opened.append(segment)
        collection.add(segment)
    yield collection
    for segment in opened:
        segment.close()


def test_segments_are_kept_in_base_offset_order(segments):
    assert segments.base_offsets == [0, 20, 40]
    assert [s.base_offset for s in segments] == [0, 20, 40]
    assert (segments.first.base_offset, segments.last.base_offset) == (0, 40)
    assert (segments[0].base_offset, segments[-1].base_offset) == (0, 40)


@pytest.mark.parametrize(
    ("offset", "floor", "higher"),
    [
        (-1, None, 0),
        (0, 0, 20),
        (19, 0, 20),
        (20, 20, 40),
        (39, 20, 40),
        (40, 40, None),
        (99, 40, None),
    ],
)
def test_floor_and_higher_lookups(segments, offset, floor, higher):
    found_floor, found_higher = segments.floor(offset), segments.higher(offset)
    assert (found_floor.base_offset if found_floor else None) == floor
    assert (found_higher.base_offset if found_higher else None) == higher


def test_removing_a_segment_keeps_the_order_and_refuses_a_stranger(segments, tmp_path):
    middle = segments.floor(20)
    segments.remove(middle)
    assert segments.base_offsets == [0, 40]
    assert middle not in segments
    assert segments.floor(25).base_offset == 0
    with pytest.raises(KeyError):
        segments.remove(middle)
    assert [s.base_offset for s in segments.from_offset(45)] == [40]
    assert [s.base_offset for s in segments.clear()] == [0, 40]
    assert len(segments) == 0


def test_segment_file_names_have_twenty_digits_and_read_back(tmp_path):
    path = segment_file(tmp_path, 1234, ".timeindex")
    assert path.name == "00000000000000001234.timeindex" == segment_name(1234, ".timeindex")
    assert base_offset_of(path) == 1234
    with pytest.raises(ValueError, match="not a segment file name"):
        base_offset_of(tmp_path / "leader-epoch-checkpoint")
    for base in (300, 7):
        segment_file(tmp_path, base, ".log").touch()
    (tmp_path / "notes.log").touch()
    assert [p.name for p in segment_files(tmp_path)] == [
        "00000000000000000007.log",
        "00000000000000000300.log",
    ]
