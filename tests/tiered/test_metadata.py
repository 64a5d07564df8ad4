"""The remote log metadata store over a real file:// tier, as two brokers see it: a listing
reads only new or rewritten objects, and still sees every state change the other one writes."""

from __future__ import annotations

from tidelog.tiered.metadata import RemoteLogMetadataStore, RemoteSegmentMetadata, SegmentState
from tidelog.tiered.storage import RemoteSegmentId, RemoteStorageManager


def segment(start: int, state: SegmentState = SegmentState.COPY_SEGMENT_STARTED):
    return RemoteSegmentMetadata(
        RemoteSegmentId("t", 0, start, f"{start:032x}"), start + 9, 1000 + start, 100, 0, state
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
