"""A replica stopped without delete (the controller's StopReplica to a broker in controlled
shutdown, for the partitions it follows) keeps its log and is not held again when metadata
naming it comes: only a LeaderAndIsr makes the broker its replica again, as in Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.broker.control import ControlRequests
from tidelog.broker.metadata import MetadataCache, PartitionState, TopicMetadata
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.errors import ErrorCode
from tidelog.log.manager import LogManager

STATE = {
    "topic": "t",
    "partition": 0,
    "leader": 2,
    "leader_epoch": 4,
    "isr": [2, 3],
    "replicas": [2, 1, 3],
}


def from_controller(sequence: int, **body: object) -> dict:
    return {"controller_id": 2, "controller_epoch": 1, "sequence": sequence, **body}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[ReplicaManager, ControlRequests]]:
    """Broker 1, following t-0 (led by broker 2, which it has not heard of: no fetcher)."""
    logs = LogManager(
        [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=ManualClock()
    )
    logs.startup()
    metadata = MetadataCache()
    metadata.topics["t"] = TopicMetadata("t", {0: (2, 1, 3)}, {0: PartitionState(2, 3, (1, 2, 3))})
    replicas = ReplicaManager(1, logs, metadata, ManualClock())
    replicas.apply_metadata()
    control = ControlRequests(
        1, metadata, replicas.apply_metadata, replicas.stop_replicas, replicas.hold_again
    )
    control.stopping = True  # the controller stops followed replicas in its shutdown
    try:
        yield replicas, control
    finally:
        logs.shutdown()


def test_a_replica_stopped_without_delete_keeps_its_log_and_stays_stopped_on_metadata(broker):
    replicas, control = broker
    assert ("t", 0) in replicas.partitions

    control.stop_replica(from_controller(1, delete=False, partitions=[STATE]))
    assert ("t", 0) not in replicas.partitions
    assert replicas.logs.get("t", 0) is not None  # the log stays

    # the state that took it out of the ISR reaches it in an UpdateMetadata only
    control.update_metadata(from_controller(2, partitions=[STATE]))
    assert ("t", 0) not in replicas.partitions


def test_a_leader_and_isr_naming_a_stopped_replica_makes_it_held_again(broker):
    replicas, control = broker
    control.stop_replica(from_controller(1, delete=False, partitions=[STATE]))

    control.leader_and_isr(
        from_controller(2, partitions=[{**STATE, "leader_epoch": 5, "isr": [1, 2, 3]}])
    )

    assert replicas.partitions[("t", 0)].leader_epoch == 5


def test_a_replica_stopped_with_delete_loses_its_log(broker):
    replicas, control = broker
    control.stop_replica(from_controller(1, delete=True, partitions=[STATE]))
    assert ("t", 0) not in replicas.partitions
    assert replicas.logs.get("t", 0) is None


def test_a_running_broker_refuses_a_stop_replica_without_delete(broker):
    """One that arrives late (a controlled shutdown's, at the broker started again) would
    leave the partition unreplicated here for good."""
    replicas, control = broker
    control.stopping = False

    answer = control.stop_replica(from_controller(1, delete=False, partitions=[STATE]))

    assert [p["error_code"] for p in answer["partitions"]] == [ErrorCode.INVALID_REQUEST]
    assert ("t", 0) in replicas.partitions
