"""The remote log metadata store over a real file:// tier, as two brokers see it: a listing
reads only new or rewritten objects, and still sees every state change the other one writes; the
segment ending at an offset is found reading only the objects at the top of the range."""

from __future__ import annotations

import pytest

from tidelog.tiered.metadata import RemoteLogMetadataStore, RemoteSegmentMetadata, SegmentState
from tidelog.tiered.storage import RemoteSegmentId, RemoteStorageError, RemoteStorageManager


def segment(
    start: int, state: SegmentState = SegmentState.COPY_SEGMENT_STARTED, end: int | None = None
):
    return RemoteSegmentMetadata(
        RemoteSegmentId("t", 0, start, f"{start:032x}"),
        start + 9 if end is None else end,
        1000 + start,
        100,
        0,
        state,
    )


def states(store: RemoteLogMetadataStore) -> dict[int, SegmentState]:
    return {m.start_offset: m.state for m in store.list_segments("t", 0)}


def test_a_listing_reads_only_what_is_new_or_rewritten(tmp_path):
    leader = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    follower = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    for start in (0, 10, 20):
        leader.put(segment(start))
    assert states(follower) == dict.fromkeys((0, 10, 20), SegmentState.COPY_SEGMENT_STARTED)
    assert follower.objects_read == 3

    assert states(follower) == dict.fromkeys((0, 10, 20), SegmentState.COPY_SEGMENT_STARTED)
    assert follower.objects_read == 3  # nothing changed: nothing read

    # rewritten right after the first write (the same clock tick for the file's mtime)
    leader.put(segment(10, SegmentState.COPY_SEGMENT_FINISHED))
    leader.put(segment(30))
    assert states(follower)[10] is SegmentState.COPY_SEGMENT_FINISHED
    assert set(states(follower)) == {0, 10, 20, 30}
    assert follower.objects_read == 5

    leader.put(segment(10, SegmentState.DELETE_SEGMENT_STARTED))
    assert states(follower)[10] is SegmentState.DELETE_SEGMENT_STARTED
    leader.remove(segment(10).segment_id)
    assert set(states(follower)) == {0, 20, 30}
    assert follower.objects_read == 6

    # the writer's own listing follows its writes too
    assert states(leader) == states(follower)


def test_a_torn_object_is_an_unfinished_copy_until_it_is_rewritten(tmp_path):
    store = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    other = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    store.put(segment(0, SegmentState.COPY_SEGMENT_FINISHED))
    [path] = (tmp_path / "t-0" / "metadata").glob("*.json")
    path.write_bytes(path.read_bytes()[:20])  # a write cut by a crash
    assert states(other) == {0: SegmentState.COPY_SEGMENT_STARTED}

    store.put(segment(0, SegmentState.COPY_SEGMENT_FINISHED))
    assert states(other) == {0: SegmentState.COPY_SEGMENT_FINISHED}


def test_a_listing_from_memory_follows_the_stores_own_writes_in_order(tmp_path):
    store = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    for start in (20, 0):
        store.put(segment(start))
    assert [m.start_offset for m in store.list_segments("t", 0)] == [0, 20]
    read = store.objects_read  # its own writes, read back by the listing

    def remembered() -> list[RemoteSegmentMetadata]:
        return store.list_segments("t", 0, afresh=False)

    remembered().clear()  # a caller's list is its own
    assert [m.start_offset for m in remembered()] == [0, 20]
    store.put(segment(10))
    store.put(segment(0, SegmentState.COPY_SEGMENT_FINISHED))
    assert [(m.start_offset, m.state) for m in remembered()] == [
        (0, SegmentState.COPY_SEGMENT_FINISHED),
        (10, SegmentState.COPY_SEGMENT_STARTED),
        (20, SegmentState.COPY_SEGMENT_STARTED),
    ]
    store.remove(segment(10).segment_id)
    assert [m.start_offset for m in remembered()] == [0, 20]
    assert store.objects_read == read  # all of it from memory


def test_the_segment_ending_at_an_offset_is_read_alone_among_many(tmp_path):
    leader = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    for start in range(0, 1000, 10):  # segments 0-9, 10-19, ... 990-999
        leader.put(segment(start, SegmentState.COPY_SEGMENT_FINISHED))
    leader.put(segment(1000))  # a copy under way above it
    follower = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))

    found = follower.finished_ending_at("t", 0, 509)

    assert found == segment(500, SegmentState.COPY_SEGMENT_FINISHED)
    assert follower.objects_read == 1
    assert follower.finished_ending_at("t", 0, 999).start_offset == 990
    assert follower.finished_ending_at("t", 0, 505) is None  # no segment ends inside another
    assert follower.finished_ending_at("t", 0, 1009) is None  # that one is not finished
    assert follower.finished_ending_at("t", 1, 9) is None  # a partition with nothing copied


def test_an_orphan_beside_the_segment_ending_there_is_passed_over(tmp_path):
    store = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    store.put(segment(0, SegmentState.COPY_SEGMENT_FINISHED))
    store.put(segment(10, SegmentState.COPY_SEGMENT_FINISHED))
    orphan = RemoteSegmentMetadata(
        RemoteSegmentId("t", 0, 10, "f" * 32), 19, 1010, 100, 0, SegmentState.COPY_SEGMENT_STARTED
    )
    store.put(orphan)  # a copy of the same segment that a crash cut short

    assert store.finished_ending_at("t", 0, 19) == segment(10, SegmentState.COPY_SEGMENT_FINISHED)
    assert store.finished_ending_at("t", 0, 9) == segment(0, SegmentState.COPY_SEGMENT_FINISHED)


def test_a_segment_ending_there_under_an_overlapping_one_is_found(tmp_path):
    """Two brokers copying as leaders at once: 50-149 copied by one over 0-99 by the other."""
    store = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    store.put(segment(0, SegmentState.COPY_SEGMENT_FINISHED, end=99))
    store.put(segment(50, SegmentState.COPY_SEGMENT_FINISHED, end=149))

    assert store.finished_ending_at("t", 0, 99) == segment(
        0, SegmentState.COPY_SEGMENT_FINISHED, end=99
    )
    assert store.finished_ending_at("t", 0, 149).start_offset == 50


def test_the_lookup_in_a_tier_that_is_away_is_an_error_not_a_missing_segment(tmp_path):
    store = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path / 'tier'}"))
    store.put(segment(0, SegmentState.COPY_SEGMENT_FINISHED))
    (tmp_path / "tier").rename(tmp_path / "away")

    with pytest.raises(RemoteStorageError):
        store.finished_ending_at("t", 0, 9)


def removed_right_after_listing(store: RemoteLogMetadataStore, monkeypatch, doomed: str) -> None:
    """The store's listings see ``doomed`` (an object's name), which the leader then removes
    before the store reads it."""
    fs = store.storage.fs
    real_ls = fs.ls

    def ls(path, *args, **kwargs):
        listed = real_ls(path, *args, **kwargs)
        for entry in listed:
            name = entry["name"] if isinstance(entry, dict) else entry
            if name.endswith(doomed):
                fs.rm_file(name)
        return listed

    monkeypatch.setattr(fs, "ls", ls)


def test_an_object_removed_between_the_listing_and_its_read_is_left_out(tmp_path, monkeypatch):
    leader = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    for start in (0, 10, 20):
        leader.put(segment(start, SegmentState.COPY_SEGMENT_FINISHED))
    follower = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    removed_right_after_listing(follower, monkeypatch, f"{segment(10).segment_id.name}.json")

    assert set(states(follower)) == {0, 20}  # not a tier that is away: the task goes on
    assert follower.finished_ending_at("t", 0, 9) == segment(0, SegmentState.COPY_SEGMENT_FINISHED)


def test_the_lookup_passes_over_an_object_removed_after_the_listing(tmp_path, monkeypatch):
    leader = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    for start in (0, 10):
        leader.put(segment(start, SegmentState.COPY_SEGMENT_FINISHED))
    follower = RemoteLogMetadataStore(RemoteStorageManager(f"file://{tmp_path}"))
    removed_right_after_listing(follower, monkeypatch, f"{segment(10).segment_id.name}.json")

    assert follower.finished_ending_at("t", 0, 19) is None
