"""The time index at minute granularity (timeindex.granularity=minute) beside Kafka's rule: which
entries it writes, that recovery, truncation and the cleaner keep that rule, and that a search by
timestamp returns exactly what it returns with Kafka's rule."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import message_set, read_everything
from tidelog.log.cleaner import Cleaner, log_to_clean
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.offset_map import OffsetMap
from tidelog.records.format import Codec, Record, build_message_set

MINUTE = 60_000
BASE = 28_333_334 * MINUTE  # a whole minute, in 2023


def time_entries(segment) -> list[tuple[int, int]]:
    return [segment.time_index.entry_at(i) for i in range(segment.time_index.entries)]


def ten_second_steps(log, count: int) -> None:
    for number in range(count):
        log.append_as_leader(message_set(1, timestamp=BASE + 10_000 * number))


def test_minute_granularity_writes_an_entry_only_when_a_later_minute_begins(make_log):
    default = make_log("t-0", index_interval_bytes=0)
    minute = make_log("t-1", index_interval_bytes=0, timeindex_granularity="minute")
    for log in (default, minute):
        ten_second_steps(log, 18)  # offsets 0-17, three minutes of timestamps

    # Kafka's rule: every offset index entry whose largest timestamp grew (all but the first).
    assert time_entries(default.active_segment) == [(BASE + 10_000 * n, n) for n in range(1, 18)]
    # Minute: the first entry as Kafka's, then only the first timestamp of each later minute;
    # entries still say (largest timestamp, its offset).
    assert time_entries(minute.active_segment) == [
        (BASE + 10_000, 1),
        (BASE + MINUTE, 6),
        (BASE + 2 * MINUTE, 12),
    ]
    # The offset index is the same either way.
    assert minute.active_segment.index.entries == default.active_segment.index.entries == 17

    minute.roll("test")
    assert time_entries(minute.segments[0])[-1] == (BASE + 170_000, 18)  # the entry at roll


def test_a_recovered_and_a_truncated_segment_keep_the_minute_rule(make_log):
    config = {"index_interval_bytes": 0, "timeindex_granularity": "minute"}
    log = make_log(**config)
    ten_second_steps(log, 18)
    written = time_entries(log.active_segment)
    log.active_segment.time_index.path.unlink()  # recovery rebuilds both indexes from the log
    log.close()

    recovered = make_log(**config)
    assert time_entries(recovered.active_segment) == written

    recovered.truncate_to(8)
    assert time_entries(recovered.active_segment) == [(BASE + 10_000, 1), (BASE + MINUTE, 6)]
    for number in range(8, 18):  # the same timestamps again after the truncation
        recovered.append_as_leader(message_set(1, timestamp=BASE + 10_000 * number))
    assert time_entries(recovered.active_segment) == written


def test_the_cleaners_rewritten_segments_keep_the_minute_rule(tmp_path, clock):
    topic = {
        "cleanup.policy": "compact",
        "segment.bytes": "2000",
        "index.interval.bytes": "0",
        "min.cleanable.dirty.ratio": "0",
        "timeindex.granularity": "minute",
    }
    log = Log(tmp_path / "keyed-0", LogConfig.from_topic_config(topic), clock=clock)
    for number in range(120):
        clock.advance(BASE + 5_000 * number - clock.milliseconds())  # ten minutes of them
        key = b"key-%d" % (number % 7)
        log.append_as_leader(build_message_set([Record(key, b"v", clock.milliseconds())], magic=1))
        log.high_watermark = log.log_end_offset
    log.roll("clean all")
    before = {(m.offset, m.timestamp) for m in read_everything(log)}

    Cleaner(OffsetMap(24 * 1000), clock).clean(
        log_to_clean(("keyed", 0), log, 0, clock.milliseconds())
    )

    after = {(m.offset, m.timestamp) for m in read_everything(log)}
    assert after < before
    for segment in log.segments[:-1]:
        entries = time_entries(segment)[:-1]  # all but the entry written at roll
        minutes = [timestamp // MINUTE for timestamp, _ in entries]
        assert minutes == sorted(set(minutes)), segment
    assert sum(len(time_entries(segment)) for segment in log.segments) < len(after)


def brute_force(log, target: int) -> tuple[int, int] | None:
    return next(
        ((m.timestamp, m.offset) for m in read_everything(log) if m.timestamp >= target), None
    )


batches = st.lists(
    st.tuples(
        st.lists(st.integers(0, 6 * MINUTE), min_size=1, max_size=4),  # out of order
        st.sampled_from([Codec.NONE, Codec.SNAPPY]),
        st.integers(0, 30_000),  # the producer's clock moves on between batches
    ),
    min_size=1,
    max_size=60,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=batches,
    segment_bytes=st.integers(400, 4000),
    index_interval_bytes=st.integers(0, 600),
    targets=st.lists(st.integers(-1000, 30 * MINUTE), min_size=1, max_size=40),
)
def test_a_search_by_timestamp_finds_the_same_offset_with_either_granularity(
    tmp_path_factory, clock, batches, segment_bytes, index_interval_bytes, targets
):
    directory = tmp_path_factory.mktemp("logs")
    logs = {
        granularity: Log(
            directory / f"t-{granularity}",
            LogConfig(
                segment_bytes=segment_bytes,
                index_interval_bytes=index_interval_bytes,
                timeindex_granularity=granularity,
            ),
            clock=clock,
        )
        for granularity in ("index.interval", "minute")
    }
    now = BASE
    for stamps, codec, step in batches:
        now += step
        data = message_set(len(stamps), codec=codec, timestamp=lambda i, s=stamps, t=now: t + s[i])
        for log in logs.values():
            log.append_as_leader(data)
    default, minute = logs["index.interval"], logs["minute"]
    assert [s.base_offset for s in default.segments] == [s.base_offset for s in minute.segments]

    for target in [BASE - 1, *(BASE + t for t in targets)]:
        expected = brute_force(default, target)
        for log in (default, minute):
            found = log.offset_for_timestamp(target)
            assert (found.timestamp, found.offset) == expected if expected else found is None
    for segment, default_segment in zip(minute.segments, default.segments, strict=True):
        entries = time_entries(segment)
        if segment is not minute.active_segment:
            entries = entries[:-1]
        minutes = [timestamp // MINUTE for timestamp, _ in entries]
        assert minutes == sorted(set(minutes))  # at most one entry per minute
        assert len(time_entries(segment)) <= len(time_entries(default_segment))
    for log in logs.values():
        log.close()


@pytest.mark.parametrize("granularity", ["index.interval", "minute"])
def test_a_topic_override_and_the_broker_default_choose_the_granularity(granularity):
    broker = {"log.timeindex.granularity": granularity}
    assert LogConfig.from_topic_config({}, broker).time_index_granularity_ms == (
        MINUTE if granularity == "minute" else 0
    )
    overridden = LogConfig.from_topic_config({"timeindex.granularity": "minute"}, broker)
    assert overridden.timeindex_granularity == "minute"
