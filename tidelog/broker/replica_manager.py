"""The partitions a broker holds, and the appends and reads clients make on them."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable

from tidelog.broker.metadata import MetadataCache
from tidelog.clock import Clock
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.log import FetchData, Log, LogAppendInfo
from tidelog.log.manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
CONSUMER_REPLICA_ID = -1


class ReplicaManager:
    """Serves produce and fetch for the partitions this broker leads.

    A partition is served only while the metadata names this broker its leader: anything else
    is NOT_LEADER_FOR_PARTITION, or UNKNOWN_TOPIC_OR_PARTITION if the cluster has no such
    partition. With one replica the high watermark follows the log end offset at every append.
    Appends wake the fetches waiting on the partition (delayed fetch).
    """

    def __init__(
        self, broker_id: int, logs: LogManager, metadata: MetadataCache, clock: Clock
    ) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.metadata = metadata
        self.clock = clock
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)

    # -- leadership ----------------------------------------------------------------------------

    def apply_metadata(self) -> None:
        """Opens a log for every partition this broker leads, with the topic's config."""
        for name, topic in self.metadata.topics.items():
            config = LogConfig.from_topic_config(topic.config, self.logs.broker_config)
            if self.logs.topic_configs.get(name) != config:
                self.logs.update_topic_config(name, config)
            for partition in topic.assignment:
                if self.metadata.leader_of(name, partition) == self.broker_id:
                    partition_log = self.logs.get_or_create(name, partition)
                    partition_log.high_watermark = partition_log.log_end_offset

    def leader_log(self, topic: str, partition: int) -> Log:
        if not self.metadata.has_partition(topic, partition):
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}"
            )
        leader = self.metadata.leader_of(topic, partition)
        partition_log = self.logs.get(topic, partition)
        if leader != self.broker_id or partition_log is None:
            raise KafkaError(
                ErrorCode.NOT_LEADER_FOR_PARTITION,
                f"broker {self.broker_id} does not lead {topic}-{partition} (leader {leader})",
            )
        return partition_log

    # -- produce -------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: memoryview, acks: int) -> LogAppendInfo:
        partition_log = self.leader_log(topic, partition)
        if acks == -1:
            state = self.metadata.topics[topic].states.get(partition)
            in_sync = len(state.isr) if state else 0
            if in_sync < partition_log.config.min_insync_replicas:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"{topic}-{partition} has {in_sync} in-sync replicas, "
                    f"min.insync.replicas is {partition_log.config.min_insync_replicas}",
                )
        info = partition_log.append_as_leader(records)
        partition_log.high_watermark = partition_log.log_end_offset
        self._wake((topic, partition))
        return info

    # -- fetch ---------------------------------------------------------------------------------

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        replica_id: int = CONSUMER_REPLICA_ID,
        min_one_message: bool = False,
    ) -> tuple[Log, FetchData]:
        """A read for a consumer stops at the high watermark; a replica's read does not."""
        partition_log = self.leader_log(topic, partition)
        max_offset = partition_log.high_watermark if replica_id < 0 else None
        data = partition_log.read(
            offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
        )
        return partition_log, data

    async def wait_for_append(self, partitions: Iterable[TopicPartition], timeout: float) -> bool:
        """Waits until one of ``partitions`` gets an append or ``timeout`` seconds pass."""
        future = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._waiters[key].add(future)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                self._waiters[key].discard(future)

    def _wake(self, key: TopicPartition) -> None:
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)
