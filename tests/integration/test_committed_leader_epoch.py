"""OffsetCommit v6's committed leader epoch kept as Kafka 2.1 keeps it: stored in
``__consumer_offsets`` in offset commit value v3 and answered by OffsetFetch v5, from the
coordinator's memory and, once its broker has restarted and another broker has loaded the
offsets partition, from what that broker read back.
"""

from __future__ import annotations

import itertools

import pytest

from tests.integration.conftest import RELEASE_2_1, wait_for_leaders
from tests.integration.test_admin_2_1 import wait_until
from tests.integration.test_bad_input import connect, request
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.protocol.schemas import ApiKey

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("committed-epoch"))
    local.up(3, overrides=RELEASE_2_1, progress=lambda _: None)
    yield local
    local.down(progress=lambda _: None)


def coordinator_of(cluster: LocalCluster, group: str, asked: int) -> int | None:
    with connect(cluster, asked) as connection:
        body = {"coordinator_key": group, "coordinator_type": 0}
        answer = request(connection, ApiKey.GROUP_COORDINATOR, 2, body)
    return answer["coordinator_id"] if answer["error_code"] == 0 else None


def commit(cluster: LocalCluster, broker: int, group: str, topic: str, offsets: dict) -> list:
    """OffsetCommit v6 by a consumer that assigns its own partitions: partition -> (offset,
    committed leader epoch)."""
    with connect(cluster, broker) as connection:
        answer = request(
            connection,
            ApiKey.OFFSET_COMMIT,
            6,
            {
                "group_id": group,
                "generation_id": -1,
                "member_id": "",
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": p,
                                "offset": offset,
                                "committed_leader_epoch": epoch,
                                "metadata": f"at {offset}",
                            }
                            for p, (offset, epoch) in offsets.items()
                        ],
                    }
                ],
            },
        )
    return [p["error_code"] for t in answer["responses"] for p in t["partition_responses"]]


def fetched(cluster: LocalCluster, broker: int, group: str, topic: str) -> dict | None:
    """OffsetFetch v5 of the topic's partitions 0-2: partition -> (offset, leader epoch,
    metadata); None while the coordinator is loading or not this broker."""
    with connect(cluster, broker) as connection:
        answer = request(
            connection,
            ApiKey.OFFSET_FETCH,
            5,
            {
                "group_id": group,
                "topics": [{"topic": topic, "partitions": [{"partition": p} for p in range(3)]}],
            },
        )
    if answer["error_code"]:
        return None
    (responses,) = answer["responses"]
    return {
        p["partition"]: (p["offset"], p["leader_epoch"], p["metadata"])
        for p in responses["partition_responses"]
    }


def test_the_committed_leader_epoch_is_stored_and_read_back_after_the_coordinator_moves(cluster):
    topic = f"epochs-{next(_names)}"
    group = f"epochs-group-{next(_names)}"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, topic, 3, 3, {})
    wait_for_leaders(cluster, topic, 3)
    coordinator = wait_until(
        f"the coordinator of {group}", lambda: coordinator_of(cluster, group, 1)
    )
    offsets = {0: (7, 3), 1: (9, -1), 2: (11, 0)}
    # the first commits may find the offsets partition still loading (error 14)
    wait_until(
        f"a commit accepted by {coordinator}",
        lambda: commit(cluster, coordinator, group, topic, offsets) == [0, 0, 0],
    )
    expected = {0: (7, 3, "at 7"), 1: (9, -1, "at 9"), 2: (11, 0, "at 11")}
    assert fetched(cluster, coordinator, group, topic) == expected
    # the coordinator's broker goes: another loads the offsets partition from the log
    cluster.stop_broker(coordinator)
    try:
        other = next(b for b in cluster.broker_ids if b != coordinator)

        def moved() -> int | None:
            found = coordinator_of(cluster, group, other)
            return found if found not in (None, coordinator) else None

        successor = wait_until(f"a new coordinator of {group}", moved, timeout=60)
        assert (
            wait_until(
                f"the offsets of {group} loaded on {successor}",
                lambda: fetched(cluster, successor, group, topic),
            )
            == expected
        )
    finally:
        cluster.start_broker(coordinator)
