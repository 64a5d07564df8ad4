"""KIP-73's quota and throttled-replica lists: a quota lets through its rate over time plus one
second of burst, and only the replicas a list names on this broker (or '*') are throttled, and
never one in the ISR."""

from __future__ import annotations

import pytest

from tidelog.broker.metadata import MetadataCache, PartitionState, TopicMetadata
from tidelog.replication.throttle import (
    UNTHROTTLED,
    Quota,
    ReplicationThrottle,
    parse_throttled_replicas,
    valid_throttled_replicas,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_quota_admits_its_rate_over_time_and_one_second_of_burst():
    clock = Clock()
    quota = Quota(1000, clock)
    admitted = 0
    for _ in range(100):  # 10 s of 100-byte records, each sent whenever the quota allows
        while not quota.exceeded():
            quota.record(100)
            admitted += 100
        clock.now += 0.1
    assert 10_000 <= admitted <= 11_200


def test_an_unlimited_quota_is_never_exceeded():
    quota = Quota(UNTHROTTLED, Clock())
    quota.record(10**12)
    assert not quota.exceeded()


@pytest.mark.parametrize(
    ("value", "valid"),
    [("", True), ("*", True), ("0:1,1:2", True), ("0:1,", True), ("0-1", False), ("a:b", False)],
)
def test_throttled_replica_lists(value, valid):
    assert valid_throttled_replicas(value) is valid


def test_only_listed_replicas_outside_the_isr_are_throttled():
    metadata = MetadataCache(
        topics={
            "t": TopicMetadata(
                "t",
                {0: (1, 2, 3), 1: (1, 2, 3)},
                {0: PartitionState(1, 0, (1, 2)), 1: PartitionState(1, 0, (1, 2, 3))},
                {"follower.replication.throttled.replicas": "0:3,1:3"},
            )
        }
    )
    follower = ReplicationThrottle(3, metadata, follower_rate=1000)
    assert follower.follower_throttled("t", 0)
    assert not follower.follower_throttled("t", 1)  # 3 is in this partition's ISR
    assert not ReplicationThrottle(2, metadata, follower_rate=1000).follower_throttled("t", 0)
    assert not ReplicationThrottle(3, metadata).follower_throttled("t", 0)  # no rate set
    assert parse_throttled_replicas("*") is None
