"""The delivery check's reading of a live replica's time indexes, which retention may delete
while they are read."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tidelog.cluster import delivery
from tidelog.cluster.delivery import time_index_mismatches
from tidelog.log.files import LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file
from tidelog.records.format import Record, build_message_set


@pytest.fixture
def segment_dir(tmp_path: Path) -> Path:
    """A segment of base offset 178 with no messages: an empty .log and .timeindex."""
    for suffix in (LOG_SUFFIX, TIME_INDEX_SUFFIX):
        segment_file(tmp_path, 178, suffix).write_bytes(b"")
    return tmp_path


def test_an_intact_segment_has_no_mismatches(segment_dir):
    assert time_index_mismatches(segment_file(segment_dir, 178, TIME_INDEX_SUFFIX)) == []


def test_a_segment_deleted_while_it_is_read_is_passed_over(segment_dir):
    index = segment_file(segment_dir, 178, TIME_INDEX_SUFFIX)
    segment_file(segment_dir, 178, LOG_SUFFIX).unlink()  # retention deletes the .log first
    later = threading.Timer(0.2, index.unlink)  # and its indexes after
    later.start()
    try:
        assert time_index_mismatches(index, settle_seconds=5) == []
    finally:
        later.join()


def test_an_index_left_without_its_log_is_an_error(segment_dir):
    index = segment_file(segment_dir, 178, TIME_INDEX_SUFFIX)
    segment_file(segment_dir, 178, LOG_SUFFIX).unlink()
    with pytest.raises(ValueError, match="needs 00000000000000000178.log beside it"):
        time_index_mismatches(index, settle_seconds=0.3)


def test_a_segment_deleted_after_the_listing_is_no_longer_held(tmp_path, monkeypatch):
    """The replicas' comparison lists a live replica's segments, then reads each: retention may
    delete one in between (the wipe_and_rebuild scenario's tier offloads every 300 ms)."""
    kept = segment_file(tmp_path, 0, LOG_SUFFIX)
    kept.write_bytes(build_message_set([Record(b"k", b"0-1", 1000)], magic=1))
    deleted = segment_file(tmp_path, 178, LOG_SUFFIX)  # listed, then gone before its read
    monkeypatch.setattr(delivery, "segment_files", lambda directory: [kept, deleted])

    assert delivery.replica_messages(tmp_path, 2**62) == [(0, b"0-1", 1000)]


@pytest.mark.parametrize(
    ("read_past_it", "seen_while_running", "kind"),
    [(True, False, "lost"), (False, True, "lost"), (True, True, "lost"), (False, False, "unseen")],
)
def test_a_missing_acknowledged_message_is_lost_or_unseen(read_past_it, seen_while_running, kind):
    assert delivery.missing_kind(read_past_it, seen_while_running) == kind
