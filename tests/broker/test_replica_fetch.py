"""A follower's fetch parked at the leader answers once a partition it holds changes, or at its
max_wait_time with nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.conftest import message_set
from tidelog.broker.metadata import MetadataCache, PartitionState, TopicMetadata
from tidelog.broker.replica_fetch import answer_replica_fetch
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.manager import LogManager


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


async def parked(tmp_path: Path, append_after: float | None) -> tuple[float, dict]:
    """How long the second fetch of a session waited, and its answer; an append comes
    ``append_after`` seconds into it (None: none)."""
    logs = LogManager(
        [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=ManualClock()
    )
    logs.startup()
    metadata = MetadataCache()
    metadata.topics["t"] = TopicMetadata("t", {0: (1, 2)}, {0: PartitionState(1, 3, (1, 2))})
    replicas = ReplicaManager(1, logs, metadata, ManualClock())
    replicas.apply_metadata()

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
