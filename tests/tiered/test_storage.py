"""The RemoteStorageManager over file://: copy and delete are idempotent; failures are
RemoteStorageError."""

from __future__ import annotations

import pytest

from tidelog.tiered.storage import (
    IndexType,
    LogSegmentData,
    RemoteSegmentId,
    RemoteStorageError,
    RemoteStorageManager,
)


@pytest.fixture
def segment_data(tmp_path):
    files = {}
    for suffix, content in ((".log", b"L" * 100), (".index", b"I" * 8), (".timeindex", b"T" * 12)):
        files[suffix] = tmp_path / f"00000000000000000000{suffix}"
        files[suffix].write_bytes(content)
    return LogSegmentData(files[".log"], files[".index"], files[".timeindex"], b"0\n0\n", b"R")


def test_copy_fetch_and_delete_are_idempotent(tmp_path, segment_data):
    storage = RemoteStorageManager(f"file://{tmp_path}/tier")
    segment = RemoteSegmentId("t", 0, 0, "abc")
    storage.copy_log_segment_data(segment, segment_data)
    storage.copy_log_segment_data(segment, segment_data)  # again: same objects

    assert storage.fetch_log_segment(segment, 10, 20) == b"L" * 10
    assert storage.fetch_range(storage.object_uri(segment), 95, 200) == b"L" * 5
    assert storage.fetch_index(segment, IndexType.TIMESTAMP) == b"T" * 12
    assert storage.fetch_index(segment, IndexType.REMOTE_LOG_INDEX) == b"R"
    assert storage.object_uri(segment) == f"file://{tmp_path}/tier/t-0/00000000000000000000-abc.log"

    storage.delete_log_segment_data(segment)
    storage.delete_log_segment_data(segment)  # again: nothing left, no error
    assert list((tmp_path / "tier" / "t-0").iterdir()) == []
    with pytest.raises(RemoteStorageError, match="fetch"):
        storage.fetch_log_segment(segment, 0, 10)


def test_a_missing_back_end_is_refused_with_the_key(tmp_path):
    with pytest.raises(RemoteStorageError, match="remote.log.storage.uri"):
        RemoteStorageManager("nosuchprotocol://x")
