"""The locust users' group member: Kafka's range assignment, and the consumer protocol's bytes as
kafka-python writes and reads them. (The locustfile itself is not imported here: locust patches
the standard library with gevent on import; tests/integration/test_locust.py runs it.)"""

from __future__ import annotations

import pytest
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

from tidelog.perf.locust.group import range_assignment
from tidelog.protocol.schemas import CONSUMER_ASSIGNMENT_V0, CONSUMER_SUBSCRIPTION_V0
from tidelog.protocol.types import decode, encode


@pytest.mark.parametrize(
    ("members", "partitions", "expected"),
    [
        (["b", "a"], [0, 1, 2], {"a": [0, 1], "b": [2]}),
        (["a", "b", "c"], [5, 3, 4, 0, 1, 2, 6], {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}),
        (["a", "b", "c"], [0], {"a": [0], "b": [], "c": []}),
        (["only"], [1, 0], {"only": [0, 1]}),
    ],
)
def test_range_assignment_gives_members_in_id_order_consecutive_partitions(
    members, partitions, expected
):
    assert range_assignment(members, partitions) == expected


def test_a_subscription_reads_and_writes_as_kafka_python_does():
    ours = encode(CONSUMER_SUBSCRIPTION_V0, {"version": 0, "topics": ["t", "u"], "user_data": b""})
    theirs = ConsumerProtocolMemberMetadata_v0(0, ["t", "u"], b"").encode()
    assert ours == theirs
    decoded, _ = decode(CONSUMER_SUBSCRIPTION_V0, theirs)
    assert decoded["topics"] == ["t", "u"]


def test_an_assignment_reads_and_writes_as_kafka_python_does():
    value = {"version": 0, "partitions": [{"topic": "t", "partitions": [0, 2]}], "user_data": b""}
    ours = encode(CONSUMER_ASSIGNMENT_V0, value)
    theirs = ConsumerProtocolMemberAssignment_v0(0, [("t", [0, 2])], b"")
    assert ours == theirs.encode()
    assert ConsumerProtocolMemberAssignment_v0.decode(ours).partitions()[1].partition == 2
    decoded, _ = decode(CONSUMER_ASSIGNMENT_V0, theirs.encode())
    assert decoded["partitions"] == [{"topic": "t", "partitions": [0, 2]}]
