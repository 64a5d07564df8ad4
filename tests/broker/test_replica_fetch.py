"""A follower's fetch parked at the leader answers once a partition it holds changes, or at its
max_wait_time with nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.conftest import message_set
from tidelog.broker.metadata import MetadataCache, PartitionState, TopicMetadata
from tidelog.broker.replica_fetch import answer_replica_fetch
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.manager import LogManager
from tidelog.replication.throttle import ReplicationThrottle


def fetch(session_id: int, epoch: int, named: bool, max_wait_ms: int) -> dict:
    partitions = [{"partition": 0, "fetch_offset": 0, "max_bytes": 1 << 20}] if named else []
    return {
        "replica_id": 2,
        "max_wait_time": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": "t", "partitions": partitions}] if named else [],
        "forgotten_topics": [],
    }


def leading_t0(tmp_path: Path) -> tuple[LogManager, ReplicaManager]:
    """Broker 1's logs and replica manager, leading t-0 with broker 2 in its ISR."""
    logs = LogManager(
        [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=ManualClock()
    )
    logs.startup()
    metadata = MetadataCache()
    metadata.topics["t"] = TopicMetadata("t", {0: (1, 2)}, {0: PartitionState(1, 3, (1, 2))})
    replicas = ReplicaManager(1, logs, metadata, ManualClock())
    replicas.apply_metadata()
    return logs, replicas


async def parked(tmp_path: Path, append_after: float | None) -> tuple[float, dict]:
    """How long the second fetch of a session waited, and its answer; an append comes
    ``append_after`` seconds into it (None: none)."""
    logs, replicas = leading_t0(tmp_path)

    def report(code, what, error) -> int:  # type: ignore[no-untyped-def]
        return int(code)

    try:
        opened = await answer_replica_fetch(replicas, fetch(0, 0, True, 0), report)
        if append_after is not None:
            asyncio.get_running_loop().call_later(
                append_after, lambda: replicas.append("t", 0, memoryview(message_set(2)), 1)
            )
        started = time.monotonic()
        answer = await answer_replica_fetch(
            replicas, fetch(opened["session_id"], 1, False, 400), report
        )
        return time.monotonic() - started, answer
    finally:
        logs.shutdown()


def test_a_parked_fetch_answers_at_its_max_wait_with_nothing(tmp_path):
    waited, answer = asyncio.run(parked(tmp_path, None))
    assert 0.35 <= waited < 2 and answer["error_code"] == 0 and answer["responses"] == []


def test_a_parked_fetch_answers_as_soon_as_a_partition_it_holds_gets_data(tmp_path):
    waited, answer = asyncio.run(parked(tmp_path, 0.05))
    assert waited < 0.3
    (partition,) = answer["responses"][0]["partition_responses"]
    assert partition["error_code"] == 0 and partition["record_set"].length > 0


def test_a_parked_fetch_woken_by_a_new_epoch_does_not_take_its_follower_back_in(tmp_path):
    """The controller took follower 2 out of the ISR in a new epoch (a controlled shutdown:
    the follower has stopped the partition). Its fetch parked here since, at the position it
    named in the old epoch, is woken by the change; that position is not recorded in the new
    epoch (as Kafka's delayed fetch records none), so the follower is not taken back in. The
    next fetch, as it arrives, records where the follower is."""
    isr_writes: list[tuple[str, int, int, frozenset[int]]] = []

    async def persist_isr(changes: list) -> list[bool]:
        isr_writes.extend(changes)
        return [True] * len(changes)

    async def scenario() -> tuple[int, int]:
        logs = LogManager(
            [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=ManualClock()
        )
        logs.startup()
        metadata = MetadataCache()
        metadata.brokers = {1: None, 2: None}  # type: ignore[dict-item]  # live, not reached
        metadata.topics["t"] = TopicMetadata("t", {0: (1, 2)}, {0: PartitionState(1, 3, (1, 2))})
        replicas = ReplicaManager(1, logs, metadata, ManualClock(), persist_isr=persist_isr)
        replicas.apply_metadata()
        partition = replicas.partitions[("t", 0)]

        def report(code, what, error) -> int:  # type: ignore[no-untyped-def]
            return int(code)

        try:
            opened = await answer_replica_fetch(replicas, fetch(0, 0, True, 0), report)
            parked = asyncio.create_task(
                answer_replica_fetch(replicas, fetch(opened["session_id"], 1, False, 300), report)
            )
            await asyncio.sleep(0.05)
            metadata.topics["t"].states[0] = PartitionState(1, 4, (1,))
            replicas.apply_metadata()  # the new epoch wakes the parked fetch
            await parked
            await asyncio.sleep(0.05)  # any ISR write it caused is made
            after_parked = partition.followers[2].log_end_offset
            assert isr_writes == []  # checked here: the next fetch may take it back in
            await answer_replica_fetch(replicas, fetch(opened["session_id"], 2, False, 0), report)
            return after_parked, partition.followers[2].log_end_offset
        finally:
            logs.shutdown()

    position_after_wake, position_after_next_fetch = asyncio.run(scenario())
    assert position_after_wake == -1
    assert position_after_next_fetch == 0  # the log end it named, caught up


def test_a_fetch_from_past_the_log_end_records_no_position_for_the_follower(tmp_path):
    """Follower 2 asks from offset 10 of a log that ends at 5 (a log that went its own way):
    the read fails, and the leader does not take the follower as holding offsets 0 to 4."""
    logs, replicas = leading_t0(tmp_path)
    partition = replicas.partitions[("t", 0)]
    try:
        replicas.append("t", 0, memoryview(message_set(5)), 1)
        with pytest.raises(KafkaError) as error:
            replicas.read("t", 0, 10, 1 << 20, replica_id=2)
        assert error.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert partition.high_watermark == 0
        assert partition.followers[2].log_end_offset == -1
    finally:
        logs.shutdown()


def test_a_caught_up_follower_rejoins_while_the_leader_quota_holds_its_data_back(tmp_path):
    """Follower 2, out of the ISR and throttled, asks from the leader's log end while the
    leader's quota is spent: the answer carries no data, but the leader records where the
    follower is (as Kafka's throttled read does) and writes it back into the ISR."""
    isr_writes: list[tuple[str, int, int, frozenset[int]]] = []

    async def persist_isr(changes: list) -> list[bool]:
        isr_writes.extend(changes)
        return [True] * len(changes)

    async def scenario() -> dict:
        logs = LogManager(
            [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=ManualClock()
        )
        logs.startup()
        metadata = MetadataCache()
        metadata.brokers = {1: None, 2: None}  # type: ignore[dict-item]  # live, not reached
        metadata.topics["t"] = TopicMetadata(
            "t",
            {0: (1, 2)},
            {0: PartitionState(1, 3, (1,))},
            {"leader.replication.throttled.replicas": "*"},
        )
        replicas = ReplicaManager(1, logs, metadata, ManualClock(), persist_isr=persist_isr)
        replicas.throttle = ReplicationThrottle(1, metadata, leader_rate=200)
        replicas.apply_metadata()
        try:
            replicas.append("t", 0, memoryview(message_set(5)), 1)
            replicas.throttle.leader.record(10**9)  # spent for weeks
            request = fetch(0, 0, True, 0)
            request["topics"][0]["partitions"][0]["fetch_offset"] = 5
            answer = await answer_replica_fetch(replicas, request, lambda code, *_: int(code))
            await asyncio.sleep(0.05)  # the ISR write runs as a task
            return answer
        finally:
            logs.shutdown()

    answer = asyncio.run(scenario())

    assert not any(p["record_set"] for t in answer["responses"] for p in t["partition_responses"])
    assert isr_writes == [("t", 0, 3, frozenset({1, 2}))]
