"""A leader writes its ISR changes to ZooKeeper in the background. While a follower's entry into
the ISR is being written, the high watermark already counts it (Kafka's maximal ISR, KIP-497):
once written, the controller may elect it, so it must hold every acknowledged offset."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import message_set
from tidelog.broker.metadata import MetadataCache, PartitionState, TopicMetadata
from tidelog.broker.replica_manager import ISR_RETRY_SECONDS, PersistIsr, ReplicaManager
from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.manager import LogManager


def leading_t0(tmp_path: Path, persist_isr: PersistIsr) -> tuple[LogManager, ReplicaManager]:
    """Broker 1's logs and replica manager, leading t-0 (replicas 1, 2, 3; ISR 1, 2) in epoch
    3, every broker live, its ISR writes going to ``persist_isr``."""
    logs = LogManager(
        [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=ManualClock()
    )
    logs.startup()
    metadata = MetadataCache()
    metadata.brokers = {1: None, 2: None, 3: None}  # type: ignore[dict-item]  # live
    metadata.topics["t"] = TopicMetadata("t", {0: (1, 2, 3)}, {0: PartitionState(1, 3, (1, 2))})
    replicas = ReplicaManager(1, logs, metadata, ManualClock(), persist_isr=persist_isr)
    replicas.apply_metadata()
    return logs, replicas


def follower_3_joins_at_5(replicas: ReplicaManager) -> None:
    """Five offsets appended, follower 2 at 5 (the high watermark 5), then follower 3 at 5:
    caught up, its entry into the ISR goes to be written."""
    partition = replicas.partitions[("t", 0)]
    replicas.append("t", 0, memoryview(message_set(5)), -1)
    replicas.record_follower_position(partition, 2, 5)
    replicas.record_follower_position(partition, 3, 5)


def test_the_high_watermark_waits_for_a_follower_whose_entry_into_the_isr_is_being_written(
    tmp_path: Path,
) -> None:
    written = asyncio.Event()  # the ZooKeeper write, held until the scenario lets it finish
    isr_writes: list[frozenset[int]] = []

    async def persist_isr(changes: list) -> list[bool | None]:
        await written.wait()
        isr_writes.extend(isr for _, _, _, isr in changes)
        return [True] * len(changes)

    async def scenario() -> list[tuple[int, frozenset[int]]]:
        logs, replicas = leading_t0(tmp_path, persist_isr)
        partition = replicas.partitions[("t", 0)]
        seen = []
        try:
            follower_3_joins_at_5(replicas)
            await asyncio.sleep(0)
            seen.append((partition.high_watermark, partition.isr))

            # meanwhile five more offsets reach follower 2, but not follower 3
            replicas.append("t", 0, memoryview(message_set(5)), -1)
            replicas.record_follower_position(partition, 2, 10)
            seen.append((partition.high_watermark, partition.isr))

            written.set()
            await asyncio.sleep(0.05)  # the write's task completes
            seen.append((partition.high_watermark, partition.isr))

            replicas.record_follower_position(partition, 3, 10)
            seen.append((partition.high_watermark, partition.isr))
            return seen
        finally:
            logs.shutdown()

    seen = asyncio.run(scenario())

    assert isr_writes == [frozenset({1, 2, 3})]
    assert seen == [
        (5, frozenset({1, 2})),
        (5, frozenset({1, 2})),  # not 10: follower 3, about to be in the ISR, holds 5
        (5, frozenset({1, 2, 3})),
        (10, frozenset({1, 2, 3})),
    ]


def test_new_replicas_in_the_same_epoch_keep_a_follower_whose_entry_is_being_written(
    tmp_path: Path,
) -> None:
    """A reassignment's new replicas come in the leader's epoch (the metadata names more
    replicas, no new leadership): the ISR write of that epoch may still land, so the follower
    it adds still counts."""
    written = asyncio.Event()

    async def persist_isr(changes: list) -> list[bool | None]:
        await written.wait()
        return [True] * len(changes)

    async def scenario() -> int:
        logs, replicas = leading_t0(tmp_path, persist_isr)
        partition = replicas.partitions[("t", 0)]
        try:
            follower_3_joins_at_5(replicas)
            await asyncio.sleep(0)
            partition.make_leader(3, (1, 2, 3, 4), frozenset({1, 2}), 0)  # same epoch
            replicas.append("t", 0, memoryview(message_set(5)), -1)
            replicas.record_follower_position(partition, 2, 10)
            high_watermark = partition.high_watermark
            written.set()
            await asyncio.sleep(0.05)
            return high_watermark
        finally:
            logs.shutdown()

    assert asyncio.run(scenario()) <= 5  # follower 3, about to be in the ISR, holds 5


def test_a_write_whose_reply_is_lost_keeps_its_joining_follower_and_is_sent_again(
    tmp_path: Path,
) -> None:
    """The connection drops after the write went out: ZooKeeper may hold the new ISR, so the
    follower keeps counting, and the write goes again until its outcome is known."""
    attempts: list[frozenset[int]] = []

    async def persist_isr(changes: list) -> list[bool | None]:
        attempts.extend(isr for _, _, _, isr in changes)
        return [None if len(attempts) == 1 else True] * len(changes)

    async def scenario() -> list[tuple[int, frozenset[int]]]:
        logs, replicas = leading_t0(tmp_path, persist_isr)
        partition = replicas.partitions[("t", 0)]
        seen = []
        try:
            follower_3_joins_at_5(replicas)
            await asyncio.sleep(0.01)  # the first attempt: its reply lost
            replicas.append("t", 0, memoryview(message_set(5)), -1)
            replicas.record_follower_position(partition, 2, 10)
            seen.append((partition.high_watermark, partition.isr))
            await asyncio.sleep(ISR_RETRY_SECONDS + 0.1)  # sent again, written
            seen.append((partition.high_watermark, partition.isr))
            return seen
        finally:
            logs.shutdown()

    seen = asyncio.run(scenario())

    assert attempts == [frozenset({1, 2, 3})] * 2
    assert seen == [(5, frozenset({1, 2})), (5, frozenset({1, 2, 3}))]
