"""Delayed acks=all produces: completed when their partitions' high watermarks reach them, keyed
by partition, timed out by one timer."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import message_set
from tidelog.broker.purgatory import ProducePurgatory
from tidelog.errors import ErrorCode, KafkaError
from tidelog.replication.partition import Partition


@pytest.fixture
def partitions(make_log):  # type: ignore[no-untyped-def]
    """Partitions t-0 and t-1 led by broker 1 with followers 2 and 3, ten messages each and a
    high watermark of 0 (the followers have nothing yet)."""
    held = {}
    for number in (0, 1):
        partition = Partition("t", number, 1, make_log(f"t-{number}", min_insync_replicas=2))
        partition.log.append_as_leader(message_set(10))
        partition.make_leader(1, (1, 2, 3), frozenset({1, 2, 3}), 0)
        held[("t", number)] = partition
    return held


def purgatory_over(partitions: dict) -> ProducePurgatory:
    def leader_partition(topic: str, number: int) -> Partition:
        partition = partitions.get((topic, number))
        if partition is None or not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION, f"{topic}-{number}")
        return partition

    return ProducePurgatory(leader_partition, partitions)


def follow(partition: Partition, offset: int) -> None:
    """Both followers fetch from ``offset``: the high watermark moves there."""
    for replica in (2, 3):
        partition.update_follower(replica, offset, 0)


def test_a_produce_completes_once_every_partition_reached_its_offset(partitions):
    async def scenario() -> None:
        purgatory = purgatory_over(partitions)
        done = purgatory.add({("t", 0): 5, ("t", 1): 10}, timeout=30)
        follow(partitions[("t", 0)], 5)
        purgatory.check(("t", 0))
        assert not done.done()
        follow(partitions[("t", 1)], 9)
        purgatory.check(("t", 1))
        assert not done.done()
        follow(partitions[("t", 1)], 10)
        purgatory.check(("t", 1))
        assert done.done() and done.result() == {}
        assert len(purgatory) == 0

    asyncio.run(scenario())


def test_a_check_completes_only_the_produces_its_high_watermark_reached(partitions):
    async def scenario() -> None:
        purgatory = purgatory_over(partitions)
        waiting = [purgatory.add({("t", 0): offset}, timeout=30) for offset in range(1, 11)]
        other = purgatory.add({("t", 1): 1}, timeout=30)
        follow(partitions[("t", 0)], 4)
        purgatory.check(("t", 0))
        assert [f.done() for f in waiting] == [True] * 4 + [False] * 6
        assert not other.done()
        assert len(purgatory) == 7  # the completed ones left their queue

    asyncio.run(scenario())


def test_a_produce_already_replicated_completes_at_once(partitions):
    async def scenario() -> None:
        follow(partitions[("t", 0)], 10)
        done = purgatory_over(partitions).add({("t", 0): 10}, timeout=30)
        assert done.done() and done.result() == {}

    asyncio.run(scenario())


def test_produces_past_their_deadline_time_out_where_they_still_wait(partitions):
    async def scenario() -> None:
        purgatory = purgatory_over(partitions)
        short = purgatory.add({("t", 0): 3, ("t", 1): 3}, timeout=0.05)
        long = purgatory.add({("t", 0): 3}, timeout=30)
        follow(partitions[("t", 1)], 3)
        purgatory.check(("t", 1))
        failed = await asyncio.wait_for(short, 2)
        assert list(failed) == [("t", 0)]
        assert failed[("t", 0)].code == ErrorCode.REQUEST_TIMED_OUT
        assert not long.done()
        follow(partitions[("t", 0)], 3)
        purgatory.check(("t", 0))
        assert long.done() and long.result() == {}

    asyncio.run(scenario())


def test_a_partition_no_longer_led_fails_its_produces(partitions):
    async def scenario() -> None:
        purgatory = purgatory_over(partitions)
        done = purgatory.add({("t", 0): 3, ("t", 1): 3}, timeout=30)
        partitions[("t", 0)].make_follower(2, 2, (1, 2, 3), frozenset({2, 3}))
        purgatory.check(("t", 0))
        follow(partitions[("t", 1)], 3)
        purgatory.check(("t", 1))
        assert done.done()
        assert {key: error.code for key, error in done.result().items()} == {
            ("t", 0): ErrorCode.NOT_LEADER_FOR_PARTITION
        }

    asyncio.run(scenario())


def test_an_isr_below_min_insync_replicas_fails_with_not_enough_replicas_after_append(
    partitions,
):
    async def scenario() -> None:
        purgatory = purgatory_over(partitions)
        done = purgatory.add({("t", 0): 3}, timeout=30)
        partition = partitions[("t", 0)]
        partition.isr = frozenset({1})  # both followers dropped: the leader alone moves it
        partition.maybe_advance_high_watermark()
        purgatory.check(("t", 0))
        assert done.result()[("t", 0)].code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    asyncio.run(scenario())


def test_a_cancelled_produce_is_dropped_when_its_turn_comes(partitions):
    async def scenario() -> None:
        purgatory = purgatory_over(partitions)
        gone = purgatory.add({("t", 0): 2}, timeout=30)
        kept = purgatory.add({("t", 0): 3}, timeout=30)
        gone.cancel()  # its connection closed
        follow(partitions[("t", 0)], 3)
        purgatory.check(("t", 0))
        assert kept.done() and len(purgatory) == 0

    asyncio.run(scenario())
