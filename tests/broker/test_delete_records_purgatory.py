"""DeleteRecords on a leader: the log start moved at once, the answer held until the low
watermark (the smallest log start of the replicas on live brokers) reaches the offset, failed
when the partition is no longer led here, timed out otherwise."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import message_set
from tidelog.broker.delete_records import DeleteRecordsPurgatory, move_log_start
from tidelog.errors import ErrorCode, KafkaError
from tidelog.replication.partition import Partition

LIVE = {1, 2, 3}


@pytest.fixture
def partition(make_log):  # type: ignore[no-untyped-def]
    """t-0 led by broker 1 with followers 2 and 3, ten messages, all replicated."""
    led = Partition("t", 0, 1, make_log("t-0"))
    led.log.append_as_leader(message_set(10))
    led.make_leader(1, (1, 2, 3), frozenset({1, 2, 3}), 0)
    for follower in (2, 3):
        led.update_follower(follower, 10, 0)
        led.update_follower_log_start(follower, 0)
    return led


def purgatory_over(partition: Partition) -> DeleteRecordsPurgatory:
    def leader_partition(topic: str, number: int) -> Partition:
        if (topic, number) != ("t", 0) or not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION, f"{topic}-{number}")
        return partition

    return DeleteRecordsPurgatory(leader_partition, lambda: LIVE)


def test_the_log_start_moves_at_once_and_kafkas_refusals_hold(partition):
    assert move_log_start(partition, 4) == 4
    assert partition.log.log_start_offset == 4
    assert move_log_start(partition, -1) == 10  # the high watermark
    for offset in (11, -2):
        with pytest.raises(KafkaError) as refused:
            move_log_start(partition, offset)
        assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_the_answer_waits_for_every_live_replicas_log_start(partition):
    async def scenario() -> None:
        purgatory = purgatory_over(partition)
        move_log_start(partition, 6)
        done = purgatory.add({("t", 0): 6}, timeout=5)
        partition.update_follower_log_start(2, 6)
        purgatory.check(("t", 0))
        assert not done.done()
        partition.update_follower_log_start(3, 6)
        purgatory.check(("t", 0))
        assert await done == {("t", 0): 6}
        assert purgatory.by_partition == {}

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "ending",
    ["followers_catch_up", "leadership_goes", "timeout"],
)
def test_each_way_a_waiting_delete_ends(partition, ending):
    async def scenario() -> dict:
        purgatory = purgatory_over(partition)
        move_log_start(partition, 6)
        done = purgatory.add({("t", 0): 6}, timeout=0.05 if ending == "timeout" else 5)
        if ending == "followers_catch_up":
            for follower in (2, 3):
                partition.update_follower_log_start(follower, 7)
        elif ending == "leadership_goes":
            partition.make_follower(2, 2, (1, 2, 3), frozenset({2, 3}))
        purgatory.check(("t", 0))
        outcomes = await asyncio.wait_for(done, 2)
        assert purgatory.by_partition == {}
        return outcomes

    (outcome,) = asyncio.run(scenario()).values()
    if ending == "followers_catch_up":
        assert outcome == 6  # the leader's own log start is the smallest
    else:
        assert isinstance(outcome, KafkaError)
        expected = {
            "leadership_goes": ErrorCode.NOT_LEADER_FOR_PARTITION,
            "timeout": ErrorCode.REQUEST_TIMED_OUT,
        }[ending]
        assert outcome.code == expected
