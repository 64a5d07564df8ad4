"""The leader's fetch session cache: what a session holds, which partitions it marks changed,
and how sessions end (a newer session of the same follower, an epoch mismatch, eviction)."""

from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode, KafkaError
from tidelog.replication.fetch_session import FetchSessionCache

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_a_new_session_holds_every_named_partition_as_changed():
    cache = FetchSessionCache(10)
    session = cache.open(2, {A: (0, 100), B: (5, 100)})
    assert session.partitions == {A: (0, 100), B: (5, 100)}
    assert set(session.changed) == {A, B}
    assert session.epoch == 0 and session.session_id != 0


def test_an_append_marks_only_the_sessions_holding_that_partition():
    cache = FetchSessionCache(10)
    first = cache.open(2, {A: (0, 100)})
    second = cache.open(3, {B: (0, 100)})
    first.changed.clear()
    second.changed.clear()
    first.event.clear()
    second.event.clear()
    cache.mark_changed(A)
    cache.mark_changed(C)  # in no session: nothing to do
    assert set(first.changed) == {A} and first.event.is_set()
    assert set(second.changed) == set() and not second.event.is_set()


def test_forgotten_partitions_leave_the_session_and_are_no_longer_marked():
    cache = FetchSessionCache(10)
    session = cache.open(2, {A: (0, 100), B: (0, 100)})
    session.changed.clear()
    cache.update(session, {C: (7, 100)}, [A])
    assert set(session.partitions) == {B, C}
    assert set(session.changed) == {C}
    cache.mark_changed(A)
    assert A not in session.changed
    assert A not in cache.by_partition


def test_an_incremental_fetch_must_carry_the_next_epoch():
    cache = FetchSessionCache(10)
    session = cache.open(2, {A: (0, 100)})
    session.epoch += 1  # the full fetch that opened it was answered
    assert cache.get(session.session_id, 1, 2) is session
    with pytest.raises(KafkaError) as error:
        cache.get(session.session_id, 5, 2)
    assert error.value.code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # the mismatch ends the session: the follower opens a new one
    with pytest.raises(KafkaError) as error:
        cache.get(session.session_id, 1, 2)
    assert error.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_session_belongs_to_its_follower_and_a_newer_one_replaces_it():
    cache = FetchSessionCache(10)
    old = cache.open(2, {A: (0, 100)})
    with pytest.raises(KafkaError):
        cache.get(old.session_id, 0, 3)  # another broker cannot use it
    new = cache.open(2, {B: (0, 100)})  # the follower restarted
    assert list(cache.sessions) == [new.session_id]
    assert A not in cache.by_partition
    assert old.event.is_set()  # a fetch still waiting on the old session answers at once
    assert cache.evictions == 0


def test_a_full_cache_evicts_the_session_used_least_recently():
    cache = FetchSessionCache(2)
    first = cache.open(2, {A: (0, 100)})
    second = cache.open(3, {B: (0, 100)})
    cache.get(first.session_id, 0, 2)  # the first was used since: the second is older
    third = cache.open(4, {C: (0, 100)})
    assert set(cache.sessions) == {first.session_id, third.session_id}
    assert cache.evictions == 1
    with pytest.raises(KafkaError) as error:
        cache.get(second.session_id, 0, 3)
    assert error.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert B not in cache.by_partition


def test_a_cache_without_slots_is_refused():
    with pytest.raises(ValueError, match="slot"):
        FetchSessionCache(0)
