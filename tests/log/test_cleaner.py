"""The log cleaner on hand-built logs: which messages survive, what is never cleaned, partial
cleans, the checkpoint, Kafka's log line, and a crash at every step of the segment swap."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log import cleaner as cleaner_module
from tidelog.log import compaction
from tidelog.log.cleaner import CLEANER_CHECKPOINT, Cleaner, log_to_clean
from tidelog.log.compaction import MappedWrappers
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.manager import LogManager
from tidelog.log.offset_map import OffsetMap
from tidelog.log.segment import LogSegment
from tidelog.records.compression import compress, decompress
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    build_message_set,
    encode_entry,
    encode_message,
    iter_deep,
)

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "400",
    "index.interval.bytes": "64",
    "min.cleanable.dirty.ratio": "0",
}
TOPIC = "keyed"


def manager_in(directory: Path, clock: ManualClock, **broker: str) -> LogManager:
    """A LogManager whose cleaner threads stay off: tests call the cleaner themselves."""
    config = parse_config({"log.cleaner.enable": "false", **broker}, BROKER_KEYS)
    manager = LogManager(
        [directory],
        config,
        clock=clock,
        topic_configs={TOPIC: LogConfig.from_topic_config(COMPACTED, config)},
    )
    manager.startup()
    return manager


def append(partition_log: Log, records: list[tuple[bytes | None, bytes | None]], codec=Codec.NONE):
    partition_log.append_as_leader(
        build_message_set(
            [Record(k, v, partition_log.clock.milliseconds()) for k, v in records],
            magic=1,
            codec=codec,
        )
    )
    partition_log.high_watermark = partition_log.log_end_offset


def messages(partition_log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    data = b"".join(segment.log_path.read_bytes() for segment in partition_log.segments)
    return [(m.offset, m.key, m.value) for m in iter_deep(data)]


def last_per_key(before, keep_tombstones: bool):
    last = {}
    for offset, key, value in before:
        if key is not None:
            last[key] = (offset, key, value)
    return sorted(m for m in last.values() if m[2] is not None or keep_tombstones)


def clean_once(manager: LogManager, memory: int = 24 * 1000):
    to_clean = manager.cleaner.grab_filthiest()
    assert to_clean is not None, "nothing was dirty enough to clean"
    return manager.cleaner.clean(to_clean, OffsetMap(memory))


@pytest.fixture
def clock():
    return ManualClock()


RECORDS = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g"]),
        st.none() | st.binary(min_size=1, max_size=20),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.tuples(RECORDS, st.sampled_from(list(MESSAGE_SET_CODECS))), min_size=2, max_size=14
    )
)
def test_a_cleaned_log_holds_the_last_value_of_every_key_at_its_offset(tmp_path_factory, batches):
    clock = ManualClock()
    manager = manager_in(tmp_path_factory.mktemp("log"), clock)
    partition_log = manager.get_or_create(TOPIC, 0)
    for records, codec in batches:
        append(partition_log, records, codec)
        clock.advance(10)
    partition_log.roll("the test cleans everything")
    before = messages(partition_log)

    stats = clean_once(manager)

    assert messages(partition_log) == last_per_key(before, keep_tombstones=True)
    assert stats is not None and stats.messages_read == len(before)
    # A second pass after the delete horizon has passed drops every tombstone.
    partition_log.update_config(
        LogConfig.from_topic_config({**COMPACTED, "delete.retention.ms": "0"})
    )
    append(partition_log, [(b"fresh", b"x")])
    partition_log.roll("again")
    clock.advance(10)
    clean_once(manager)

    fresh = (len(before), b"fresh", b"x")
    assert messages(partition_log) == [*last_per_key(before, keep_tombstones=False), fresh]
    assert partition_log.log_end_offset == len(before) + 1
    manager.shutdown()


def test_the_active_segment_and_segments_within_the_compaction_lag_are_never_cleaned(
    tmp_path, clock
):
    manager = manager_in(tmp_path, clock)
    partition_log = manager.get_or_create(TOPIC, 0)
    for round_number in range(12):
        append(partition_log, [(b"k", b"old-%d" % round_number)] * 3)
        clock.advance(1000)
    partition_log.update_config(
        LogConfig.from_topic_config({**COMPACTED, "min.compaction.lag.ms": "5500"})
    )
    segments = list(partition_log.segments)
    young = [s for s in segments[:-1] if s.largest_timestamp > clock.milliseconds() - 5500]
    assert young, "the test needs segments younger than the lag"

    to_clean = log_to_clean((TOPIC, 0), partition_log, 0, clock.milliseconds())

    assert to_clean.first_uncleanable == young[0].base_offset
    before_active = partition_log.active_segment.log_path.read_bytes()
    young_bytes = [s.log_path.read_bytes() for s in young]
    clean_once(manager)
    assert partition_log.active_segment.log_path.read_bytes() == before_active
    assert [s.log_path.read_bytes() for s in young] == young_bytes
    manager.shutdown()


def test_a_full_offset_map_cleans_part_of_the_dirty_section_and_the_checkpoint_says_where(
    tmp_path, clock
):
    manager = manager_in(tmp_path, clock)
    partition_log = manager.get_or_create(TOPIC, 0)
    for number in range(60):  # 40 keys: the map holds those of about two segments
        append(partition_log, [(b"key-%d" % (number % 40), b"v%d" % number)])
    partition_log.roll("clean all")
    before = messages(partition_log)
    per_segment = max(s.next_offset - s.base_offset for s in partition_log.segments)

    first = clean_once(manager, memory=24 * (per_segment * 2))

    assert 0 < first.end_offset < partition_log.log_end_offset  # a partial clean
    checkpoint = (tmp_path / CLEANER_CHECKPOINT).read_text().split()
    assert checkpoint[-3:] == [TOPIC, "0", str(first.end_offset)]
    for _ in range(20):
        to_clean = manager.cleaner.grab_filthiest()
        if to_clean is None:
            break
        manager.cleaner.clean(to_clean, OffsetMap(24 * (per_segment * 2)))
    # the last value of each key survives every pass; older ones may wait for the next
    survivors = messages(partition_log)
    assert last_per_key(before, True) == last_per_key(survivors, True)
    assert {offset for offset, *_ in survivors} <= {offset for offset, *_ in before}
    manager.shutdown()


def test_each_clean_writes_kafkas_summary_line(tmp_path, clock, caplog):
    manager = manager_in(tmp_path, clock)
    partition_log = manager.get_or_create(TOPIC, 0)
    for number in range(40):
        append(partition_log, [(b"same-key", b"value-%d" % number)])
    partition_log.roll("clean all")

    with caplog.at_level(logging.INFO, logger="tidelog.log.cleaner"):
        clean_once(manager)

    text = caplog.text
    assert "Log cleaner thread 0 cleaned log keyed-0 (dirty section = [0, 40])" in text
    assert "size reduction" in text and "Start size:" in text and "(40 messages)" in text
    assert "End size:" in text and "(1 messages)" in text
    manager.shutdown()


# -- a crash at every step ------------------------------------------------------------------------

CRASHED = 17


def crash_on_call(owner, name: str, number: int) -> None:
    """Makes the ``number``-th call of ``owner.name`` end the process at once (os._exit: no
    cleanup runs, as when a broker is killed there)."""
    original = getattr(owner, name)
    calls = {"count": 0}

    def crashing(*args, **kwargs):
        calls["count"] += 1
        if calls["count"] == number:
            os._exit(CRASHED)
        return original(*args, **kwargs)

    setattr(owner, name, crashing)


# Where the clean of the first group dies, and whether the log then holds the old segments or
# the cleaned one. LogSegment.change_suffix is called for the cleaned segment (.swap), then for
# each old segment (.deleted), then for the cleaned segment again (live).
CRASHES = {
    "while the .cleaned segment is written": ("append_entries", 1, "old"),
    "before .cleaned becomes .swap": ("change_suffix", 1, "old"),
    "after .swap, before any old segment is .deleted": ("change_suffix", 2, "cleaned"),
    "before the .swap becomes the live segment": ("change_suffix", -1, "cleaned"),
    "after the swap, before the old files are deleted": ("_delete_files", 1, "cleaned"),
}


@pytest.mark.parametrize("where", CRASHES)
def test_a_crash_at_any_step_of_a_clean_leaves_the_old_or_the_cleaned_segments(
    tmp_path, clock, where
):
    directory = tmp_path / f"{TOPIC}-0"
    partition_log = Log(directory, LogConfig.from_topic_config(COMPACTED), clock=clock)
    for number in range(60):
        append(partition_log, [(b"key-%d" % (number % 40), b"value-%d" % number)])
    partition_log.roll("clean all")
    # cleaned segments may be larger than the ones written: a group merges several
    config = LogConfig.from_topic_config({**COMPACTED, "segment.bytes": "1500"})
    partition_log.update_config(config)
    before = messages(partition_log)
    segments = list(partition_log.segments)
    group = cleaner_module.group_by_size(segments[:-1], 1500, 10**7)[0]
    assert len(group) >= 2, "the first group should merge segments"
    group_end = segments[len(group)].base_offset
    latest = {key: offset for offset, key, _ in before}
    first_group_cleaned = [m for m in before if m[0] >= group_end or latest[m[1]] == m[0]]
    method, number, outcome = CRASHES[where]
    if number < 0:
        number = len(group) + 2
    to_clean = log_to_clean((TOPIC, 0), partition_log, 0, clock.milliseconds())

    pid = os.fork()
    if pid == 0:  # the broker that dies mid-clean
        owner = Log if method == "_delete_files" else LogSegment
        crash_on_call(owner, method, number)
        Cleaner(OffsetMap(24 * 1000), clock).clean(to_clean)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == CRASHED, "the clean did not reach the crash"
    reopened = Log(directory, config, clock=clock)  # as the restarted broker opens it

    assert messages(reopened) == (before if outcome == "old" else first_group_cleaned)
    leftovers = [
        p.name for p in directory.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")
    ]
    assert leftovers == []
    assert reopened.log_end_offset == len(before)
    Cleaner(OffsetMap(24 * 1000), clock).clean(
        log_to_clean((TOPIC, 0), reopened, 0, clock.milliseconds())
    )
    assert messages(reopened) == last_per_key(before, keep_tombstones=True)  # the next clean


def test_the_checkpoint_survives_a_restart_and_a_deleted_log_leaves_it(tmp_path, clock):
    manager = manager_in(tmp_path, clock)
    partition_log = manager.get_or_create(TOPIC, 0)
    for number in range(30):
        append(partition_log, [(b"k%d" % (number % 3), b"v")])
    partition_log.roll("clean all")
    end = clean_once(manager).end_offset
    manager.shutdown()

    restarted = manager_in(tmp_path, clock)
    assert restarted.cleaner.first_dirty_offset((TOPIC, 0)) == end
    restarted.delete(TOPIC, 0)
    assert TOPIC not in (tmp_path / CLEANER_CHECKPOINT).read_text()
    restarted.shutdown()


# -- generational compaction (tidelog's option) ---------------------------------------------------


def test_generational_cleans_leave_the_older_half_and_every_tombstone_until_a_full_clean(
    tmp_path, clock
):
    manager = manager_in(tmp_path, clock, **{"log.cleaner.generational.enable": "true"})
    partition_log = manager.get_or_create(TOPIC, 0)
    partition_log.update_config(
        LogConfig.from_topic_config({**COMPACTED, "delete.retention.ms": "0"})
    )
    fulls = []
    for round_number in range(5):
        round_start = partition_log.log_end_offset
        for number in range(30):
            key = b"key-%d" % (number % 12)
            append(partition_log, [(key, None if number % 12 == 0 else b"v%d" % round_number)])
        partition_log.roll("clean what is there")
        clock.advance(10)
        before = messages(partition_log)
        first_dirty = manager.cleaner.first_dirty_offset((TOPIC, 0))
        tail = [s for s in partition_log.segments if s.base_offset < first_dirty]
        old_half = cleaner_module.older_half(tail)
        old_bytes = [(s.base_offset, s.log_path.read_bytes()) for s in old_half]

        stats = clean_once(manager)
        fulls.append(stats.full)

        after = messages(partition_log)
        assert last_per_key(after, True)[-11:] == last_per_key(before, True)[-11:]
        if not stats.full:
            assert old_bytes, "a young clean should leave an older half"
            assert [(s.base_offset, s.log_path.read_bytes()) for s in old_half] == old_bytes
            assert {k for _, k, v in before if v is None} <= {k for _, k, v in after if v is None}
        if round_number == 3:  # the young cleans kept older tombstones...
            assert any(v is None and o < round_start for o, _, v in after)
    assert fulls == [True, False, False, False, True]
    # ...which the full clean drops: they are past the delete horizon
    assert not any(v is None and o < round_start for o, _, v in messages(partition_log))
    manager.shutdown()


def test_a_follower_truncation_during_a_clean_swaps_nothing_in_and_loses_nothing(
    tmp_path, clock, monkeypatch
):
    manager = manager_in(tmp_path, clock)
    partition_log = manager.get_or_create(TOPIC, 0)
    for round_number in range(8):
        append(partition_log, [(b"k%d" % (i % 3), b"v%d-%d" % (round_number, i)) for i in range(5)])
    partition_log.roll()
    truncate_at = partition_log.log_end_offset - 19
    real_filter = cleaner_module.filter_entries
    truncated = []

    def truncating_filter(*args, **kwargs):
        if not truncated:  # the fetcher truncates and appends while the clean is under way
            truncated.append(True)
            partition_log.truncate_to(truncate_at)
            append(partition_log, [(b"new", b"after the truncation")] * 3)
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(cleaner_module, "filter_entries", truncating_filter)
    to_clean = manager.cleaner.grab_filthiest()
    assert to_clean is not None
    assert manager.cleaner.clean(to_clean, OffsetMap(24 * 1000)) is None  # aborted
    after = messages(partition_log)
    assert [offset for offset, _, _ in after] == list(range(truncate_at + 3))
    assert after[-1][1:] == (b"new", b"after the truncation")
    assert (
        manager.cleaner.first_dirty_offset((TOPIC, 0)) <= partition_log.active_segment.base_offset
    )
    manager.shutdown()


def test_a_clean_that_fails_is_tried_again_only_after_the_backoff(tmp_path, clock, monkeypatch):
    manager = manager_in(tmp_path, clock, **{"log.cleaner.backoff.ms": "15000"})
    partition_log = manager.get_or_create(TOPIC, 0)
    for round_number in range(6):
        append(partition_log, [(b"k%d" % i, b"v%d" % round_number) for i in range(5)])
    partition_log.roll()

    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(cleaner_module, "filter_entries", broken)
    assert clean_once(manager) is None
    assert manager.cleaner.grab_filthiest() is None  # not at once again
    clock.advance(15_001)
    assert manager.cleaner.grab_filthiest() is not None
    manager.shutdown()


def test_a_follower_rolled_at_compressed_v0_wrappers_bases_segments_at_first_messages_and_cleans(
    make_log, clock
):
    # Each replicated wrapper (offset: its last message's) rolls a segment. Based at the
    # wrapper's offset, a segment would hold messages below its base, and a clean that drops a
    # wrapper's last message (a later "dup") re-wraps the rest below the cleaned segment's base.
    partition_log = make_log(
        segment_bytes=150, message_format_version="0.9.0", cleanup_policy=("compact",)
    )
    for batch in range(6):
        records = [Record(b"u%d" % batch, b"v" * 20, 0), Record(b"dup", b"%d" % batch, 0)]
        partition_log.append_as_follower(
            build_message_set(records, magic=0, codec=Codec.GZIP, base_offset=2 * batch)
        )
    partition_log.roll()
    partition_log.high_watermark = partition_log.log_end_offset
    assert [s.base_offset for s in partition_log.segments] == [0, 2, 4, 6, 8, 10, 12]

    Cleaner(OffsetMap(24 * 1000), clock).clean(
        log_to_clean((TOPIC, 0), partition_log, 0, clock.milliseconds())
    )

    assert [(offset, key) for offset, key, _ in messages(partition_log)] == [
        *((2 * batch, b"u%d" % batch) for batch in range(6)),
        (11, b"dup"),
    ]


@pytest.mark.skipif(compaction.native is None, reason="make install builds the C loops")
def test_a_wrapper_whose_every_message_has_a_later_one_is_dropped_without_reading_it_again(
    tmp_path, clock
):
    partition_log = Log(
        tmp_path / "keyed-0",
        LogConfig.from_topic_config({**COMPACTED, "segment.bytes": "100000"}),
        clock=clock,
    )
    for value in (b"1", b"2", b"3"):
        append(partition_log, [(b"a", value), (b"b", value), (b"c", value)], Codec.LZ4)
    append(partition_log, [(b"c", b"4")], Codec.LZ4)  # keeps "a" and "b" in the third
    partition_log.roll("the test cleans everything")
    read = []

    def counted(codec, data, magic):
        read.append(bytes(data))
        return decompress(codec, data, magic)

    to_clean = log_to_clean((TOPIC, 0), partition_log, 0, clock.milliseconds())
    with mock.patch.object(compaction, "decompress", counted):
        stats = Cleaner(OffsetMap(24 * 1000), clock).clean(to_clean)

    assert messages(partition_log) == [(6, b"a", b"3"), (7, b"b", b"3"), (9, b"c", b"4")]
    # each wrapper is read to map its keys; to filter, only the two that keep messages
    assert len(read) == 4 + 2 and read[4:] == [read[2], read[3]]
    assert (stats.messages_read, stats.messages_written) == (10, 3)
    partition_log.close()


def test_wrappers_noted_out_of_order_or_past_the_limit_are_not_taken_for_superseded():
    offset_map = OffsetMap(24 * 100)
    offset_map.put_all({b"a": 17})
    offset_map.mark_latest(0, 40)
    wrappers = MappedWrappers(limit=3)
    for offset in (4, 9, 19, 29):  # each holding the five offsets up to its own; 29 past the limit
        wrappers.note(offset, 5, offset - 4, offset)
    answers = [wrappers.superseded(offset, offset_map) for offset in (4, 9, 19, 29, 5)]
    # 19: 17, a's latest, is among its offsets; 29 and 5: not noted
    expected = [5, 5, None, None, None] if offset_map.marks is not None else [None] * 5
    assert answers == expected

    wrappers = MappedWrappers(limit=10)
    for offset, least in ((4, 0), (9, 5), (7, 6), (29, 25)):
        wrappers.note(offset, 5, least, offset)
    assert list(wrappers.offsets) == []  # out of order at 7: nothing stays noted
    wrappers = MappedWrappers(limit=10)
    for offset, least in ((4, 0), (9, 3), (29, 25)):  # 3: among the first wrapper's offsets
        wrappers.note(offset, 5, least, offset)
    assert list(wrappers.offsets) == []


@pytest.mark.parametrize(
    "magic, wrappers",
    [
        # a v0 wrapper at 4 holding x at 9, above its own offset (a follower copies wrappers
        # without opening them); q at 3 and p at 4 are superseded by the wrapper at 12
        (
            0,
            [
                (1, [(0, b"a"), (1, b"b")]),
                (4, [(3, b"q"), (9, b"x"), (4, b"p")]),
                (12, [(10, b"q"), (11, b"p"), (12, b"z")]),
            ],
        ),
        # a v0 wrapper at 12 holding k at 2, below the wrapper before it: k's offset read last
        # (2) is not its largest (5), and the k at 5 stays in the first wrapper
        (0, [(7, [(5, b"k"), (6, b"m"), (7, b"n")]), (12, [(2, b"k"), (11, b"m"), (12, b"n")])]),
        # a v1 wrapper at 10 whose relative offsets 0, 5, 1 put y at 14, above it
        (
            1,
            [
                (5, [(0, b"a"), (1, b"b"), (2, b"c")]),
                (10, [(0, b"q"), (5, b"y"), (1, b"p")]),
                (20, [(0, b"q"), (1, b"p"), (2, b"z")]),
            ],
        ),
    ],
)
def test_wrappers_with_messages_out_of_their_place_keep_what_reading_them_kept(
    tmp_path, clock, magic, wrappers
):
    """Wrappers a follower copied without opening them: the clean keeps what it keeps when it
    reads every wrapper again to filter it."""

    def cleaned(name: str) -> list[tuple[int, bytes | None, bytes | None]]:
        partition_log = Log(
            tmp_path / f"{name}-0",
            LogConfig.from_topic_config({**COMPACTED, "segment.bytes": "100000"}),
            clock=clock,
        )
        for wrapper_offset, inner in wrappers:
            body = b"".join(encode_entry(o, encode_message(magic, k, b"v", 0)) for o, k in inner)
            wrapper = encode_message(magic, None, compress(Codec.GZIP, body, magic), 0, Codec.GZIP)
            partition_log.append_as_follower(encode_entry(wrapper_offset, wrapper))
        partition_log.roll("the test cleans everything")
        partition_log.high_watermark = partition_log.log_end_offset
        to_clean = log_to_clean((TOPIC, 0), partition_log, 0, clock.milliseconds())
        Cleaner(OffsetMap(24 * 1000), clock).clean(to_clean)
        found = messages(partition_log)
        partition_log.close()
        return found

    with mock.patch.object(MappedWrappers, "superseded", lambda *_: None):
        read_again = cleaned("read-again")
    assert cleaned("noted") == read_again
