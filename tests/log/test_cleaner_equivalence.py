"""The bulk cleaner, with its native loops and with the Python ones, writes exactly what the
message-at-a-time cleaner wrote: the same segment files, indexes and all, the same figures, and
the same failure when a segment's keys overflow the offset map. Logs are generated: formats v0,
v1 and v2 (mixed in one log, as after an upgrade), every codec (zstd in v2), null keys and
tombstones, sparse offsets (a compacted leader's), LogAppendTime wrappers and batches, record
headers, record times at the ends of the int64 range (their deltas wrap), v2 batches with and
without a producer id (the last batch of a producer id stays when a clean empties it), messages
larger than a read chunk, offset maps small enough to fill, a memory of looked-up keys small
enough to forget what a wrapper's look-ups remembered."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.log.message_at_a_time_cleaner import MessageAtATimeCleaner
from tidelog.clock import ManualClock
from tidelog.errors import KafkaError
from tidelog.log import cleaner as cleaner_module
from tidelog.log import compaction, offset_map
from tidelog.log.cleaner import Cleaner, LogToClean, log_to_clean
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.offset_map import OffsetMap, OffsetMapFull
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    TimestampType,
    build_message_set,
)
from tidelog.records.record_batch import BatchRecordInput, encode_batch

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "600", "index.interval.bytes": "100"}
FAR_TIMES = (-(2**63), 2**63 - 1)
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i", b"j", b"k", b"l"]

HEADERS = st.lists(
    st.tuples(st.sampled_from(["h", "trace"]), st.none() | st.binary(max_size=4)), max_size=2
)
BATCHES = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 2]),  # format
        st.sampled_from([*MESSAGE_SET_CODECS, Codec.ZSTD]),  # zstd: v2 only
        st.booleans(),  # LogAppendTime (v1, v2)
        st.integers(min_value=0, max_value=3),  # offsets skipped before the batch
        st.sampled_from([-1, -1, 7, 8]),  # v2: producer id
        st.lists(
            st.tuples(
                st.none() | st.sampled_from(KEYS),
                st.none() | st.binary(max_size=12) | st.just(b"x" * 700),
                HEADERS,
                # v2: the record's time around now, or at an end of the range, where a time
                # less another wraps as Kafka's longs do
                st.integers(min_value=-3, max_value=3) | st.sampled_from(FAR_TIMES),
            ),
            min_size=1,
            max_size=7,
        ),
    ),
    min_size=1,
    max_size=15,
)


def time_of(drawn: int, now: int) -> int:
    return drawn if drawn in FAR_TIMES else now + drawn


def append(partition_log: Log, batches, clock: ManualClock) -> None:
    offset = partition_log.log_end_offset
    sequences = {7: 0, 8: 5}
    for magic, codec, log_append_time, skipped, producer_id, records in batches:
        offset += skipped
        if magic == 2:
            now = clock.milliseconds()
            partition_log.append_as_follower(
                encode_batch(
                    [BatchRecordInput(k, v, time_of(t, now), tuple(h)) for k, v, h, t in records],
                    base_offset=offset,
                    codec=codec,
                    timestamp_type=TimestampType.LOG_APPEND_TIME
                    if log_append_time
                    else TimestampType.CREATE_TIME,
                    max_timestamp=now + 99 if log_append_time else None,
                    producer_id=producer_id,
                    producer_epoch=0 if producer_id >= 0 else -1,
                    base_sequence=sequences.get(producer_id, -1),
                    partition_leader_epoch=offset % 3,
                )
            )
            if producer_id >= 0:
                sequences[producer_id] += len(records)
            offset += len(records)
            clock.advance(7)
            continue
        if codec == Codec.ZSTD:
            codec = Codec.GZIP
        partition_log.append_as_follower(
            build_message_set(
                [Record(k, v, clock.milliseconds() + i) for i, (k, v, _, _) in enumerate(records)],
                magic=magic,
                codec=codec,
                base_offset=offset,
                timestamp_type=TimestampType.LOG_APPEND_TIME
                if log_append_time and magic == 1
                else TimestampType.CREATE_TIME,
                wrapper_timestamp=clock.milliseconds() + 99 if log_append_time else None,
            )
        )
        offset += len(records)
        clock.advance(7)
    partition_log.roll("the test cleans up to here")
    partition_log.high_watermark = partition_log.log_end_offset


def files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def clean(cleaner: Cleaner, to_clean: LogToClean, full: bool) -> tuple:
    """The clean's figures, or the error it raised."""
    try:
        stats = cleaner.clean(to_clean, full=full)
    except OffsetMapFull as error:
        return ("full", str(error).split(": ", 1)[1])
    except KafkaError as error:
        # A v1 wrapper that keeps an earlier inner message than its segment's base offset (a
        # follower's segment rolled at the wrapper's offset) does not fit the cleaned segment;
        # both cleaners fail there, each naming the position in what it appended.
        return ("failed", error.code)
    return (
        stats.end_offset,
        stats.bytes_read,
        stats.bytes_written,
        stats.messages_read,
        stats.messages_written,
        stats.map_bytes_read,
        stats.map_messages_read,
        stats.segments_cleaned,
        cleaner.offset_map.size,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=BATCHES,
    more=BATCHES,
    map_keys=st.sampled_from([3, 5, 8, 1000]),
    chunk=st.sampled_from([64, 250, cleaner_module.READ_CHUNK]),
    second_full=st.booleans(),
    # few: the keys a wrapper or batch looks up at once do not all stay remembered
    remembered_keys=st.sampled_from([3, offset_map.REMEMBERED_KEYS]),
    # the second clean's checkpoint at this share of the first's end: below 1 mostly inside a
    # segment, as a follower's truncation or a stopped clean leaves it
    checkpoint_at=st.sampled_from([1.0, 1.0, 0.5, 0.8]),
)
def test_the_bulk_cleaner_writes_what_the_message_at_a_time_cleaner_wrote(
    tmp_path_factory, batches, more, map_keys, chunk, second_full, remembered_keys, checkpoint_at
):
    root = tmp_path_factory.mktemp("equivalence")
    clock = ManualClock()
    written = Log(root / "written-0", LogConfig.from_topic_config(COMPACTED), clock=clock)
    append(written, batches, clock)
    first_end = written.active_segment.base_offset
    append(written, more, clock)  # cleaned the second time
    written.close()
    clock.advance(10)
    results = {}
    for name, kind, walk in (
        ("bulk", Cleaner, compaction.native),
        ("bulk-python", Cleaner, None),
        ("message-at-a-time", MessageAtATimeCleaner, None),
    ):
        directory = root / f"{name}-0"
        shutil.copytree(root / "written-0", directory)  # modification times too
        partition_log = Log(directory, LogConfig.from_topic_config(COMPACTED), clock=clock)
        cleaner = kind(OffsetMap(24 * map_keys), clock)
        with (
            mock.patch.object(compaction, "native", walk),
            mock.patch.object(offset_map, "native", walk),
            mock.patch.object(offset_map, "REMEMBERED_KEYS", remembered_keys),
            mock.patch.object(cleaner_module, "READ_CHUNK", chunk),
            mock.patch.object(MessageAtATimeCleaner, "chunk_size", chunk),
        ):
            everything = log_to_clean(("t", 0), partition_log, 0, clock.milliseconds())
            first = clean(
                cleaner, dataclasses.replace(everything, first_uncleanable=first_end), True
            )
            after_first = files(directory)
            # a clean past the delete horizon: tombstones go
            partition_log.update_config(
                LogConfig.from_topic_config({**COMPACTED, "delete.retention.ms": "0"})
            )
            first_dirty = int((first[0] if isinstance(first[0], int) else 0) * checkpoint_at)
            to_clean = log_to_clean(("t", 0), partition_log, first_dirty, clock.milliseconds())
            second = clean(cleaner, to_clean, second_full)
        results[name] = (first, after_first, second, files(directory))
        partition_log.close()

    reference = results["message-at-a-time"]
    for name in ("bulk", "bulk-python"):
        assert results[name][0] == reference[0], name
        assert results[name][1] == reference[1], name
        assert results[name][2] == reference[2], name
        assert results[name][3] == reference[3], name


def test_make_install_built_the_native_walk():
    assert compaction.native is not None, "tidelog/log/_entry_walk.c is not built (make install)"
