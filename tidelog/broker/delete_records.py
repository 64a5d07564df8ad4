"""DeleteRecords on the leader (Kafka 2.1's ReplicaManager.deleteRecords and
DelayedDeleteRecords): the log start offset moved, then the answer held until every live
replica's log start has followed it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Mapping

from tidelog.errors import ErrorCode, KafkaError
from tidelog.replication.partition import Partition

TopicPartition = tuple[str, int]
# DeleteRecords' offset that stands for the high watermark, and the low watermark of a failed
# partition (Kafka's DeleteRecordsRequest.HIGH_WATERMARK and INVALID_LOW_WATERMARK)
HIGH_WATERMARK = -1
INVALID_LOW_WATERMARK = -1
# a partition's outcome: its low watermark, or the error it failed with
Outcome = int | KafkaError


def move_log_start(partition: Partition, offset: int) -> int:
    """A DeleteRecords' first stage on the leader of ``partition`` (Partition.
    deleteRecordsOnLeader): the log start moved to ``offset`` (HIGH_WATERMARK: the high
    watermark); returns the offset asked for. Raises POLICY_VIOLATION for a topic whose
    cleanup.policy has no delete, OFFSET_OUT_OF_RANGE for an offset below -1 or above the high
    watermark."""
    partition_log = partition.log
    name = f"{partition.topic}-{partition.partition}"
    if "delete" not in partition_log.config.cleanup_policy:
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"records of {name} cannot be deleted: cleanup.policy is "
            f"{','.join(partition_log.config.cleanup_policy)}",
        )
    wanted = partition_log.high_watermark if offset == HIGH_WATERMARK else offset
    if wanted < 0:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{name}: offset {offset} is not valid")
    if wanted > partition_log.high_watermark:
        raise KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"{name}: cannot delete below {wanted}, above the high watermark "
            f"{partition_log.high_watermark}",
        )
    partition_log.maybe_increment_log_start_offset(wanted, "DeleteRecords")
    return wanted


class DelayedDeleteRecords:
    """One DeleteRecords request waiting for the replicas' log starts.

    ``waiting`` maps each partition whose low watermark has not reached its offset to that
    offset; ``outcomes`` holds each partition done (its low watermark or its error). ``future``
    is resolved with ``outcomes`` once, when nothing waits any more or at the deadline (then the
    partitions still waiting fail with REQUEST_TIMED_OUT)."""

    __slots__ = ("future", "outcomes", "timer", "waiting")

    def __init__(self, future: asyncio.Future, waiting: Mapping[TopicPartition, int]) -> None:
        self.future = future
        self.waiting = dict(waiting)
        self.outcomes: dict[TopicPartition, Outcome] = {}
        self.timer: asyncio.TimerHandle | None = None

    def partition_done(self, key: TopicPartition, outcome: Outcome) -> None:
        if self.waiting.pop(key, None) is None:
            return
        self.outcomes[key] = outcome
        if not self.waiting and not self.future.done():
            if self.timer is not None:
                self.timer.cancel()
            self.future.set_result(self.outcomes)


class DeleteRecordsPurgatory:
    """The DeleteRecords requests waiting on the partitions this broker leads.

    ``check(key)`` is called when a partition's replicas' log starts may have moved (a
    follower's fetch named a new one) or its leadership changed: it completes the requests whose
    offset the partition's low watermark reached and fails those waiting on a partition no
    longer led here. ``by_partition`` is empty unless a request waits: the append and fetch
    paths test it before calling. A DeleteRecords is an administrator's rare request: one timer
    per request."""

    def __init__(
        self,
        leader_partition: Callable[[str, int], Partition],
        live_brokers: Callable[[], Container[int]],
    ) -> None:
        self._leader_partition = leader_partition
        self._live_brokers = live_brokers
        self.by_partition: dict[TopicPartition, list[DelayedDeleteRecords]] = {}

    def add(
        self, offsets: Mapping[TopicPartition, int], timeout: float
    ) -> asyncio.Future[dict[TopicPartition, Outcome]]:
        """A request that waits until the low watermark of each partition reaches its offset,
        for ``timeout`` seconds at most."""
        loop = asyncio.get_running_loop()
        delayed = DelayedDeleteRecords(loop.create_future(), offsets)
        for key in offsets:
            self.by_partition.setdefault(key, []).append(delayed)
            self._check_one(key, delayed)
        if not delayed.future.done():
            delayed.timer = loop.call_later(max(timeout, 0.0), self._expire, delayed)
        self._drop_done(offsets)
        return delayed.future

    def check(self, key: TopicPartition) -> None:
        waiting = self.by_partition.get(key)
        if waiting is None:
            return
        for delayed in list(waiting):
            self._check_one(key, delayed)
        self._drop_done((key,))

    def _check_one(self, key: TopicPartition, delayed: DelayedDeleteRecords) -> None:
        offset = delayed.waiting.get(key)
        if offset is None:
            return
        try:
            partition = self._leader_partition(*key)
        except KafkaError as error:
            delayed.partition_done(key, error)
            return
        low_watermark = partition.low_watermark(self._live_brokers())
        if low_watermark >= offset:
            delayed.partition_done(key, low_watermark)

    def _drop_done(self, keys) -> None:
        for key in keys:
            waiting = self.by_partition.get(key)
            if waiting is None:
                continue
            waiting[:] = [d for d in waiting if key in d.waiting and not d.future.done()]
            if not waiting:
                del self.by_partition[key]

    def _expire(self, delayed: DelayedDeleteRecords) -> None:
        delayed.timer = None
        for key, offset in list(delayed.waiting.items()):
            try:
                partition = self._leader_partition(*key)
                outcome: Outcome = KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{key[0]}-{key[1]}: the low watermark "
                    f"{partition.low_watermark(self._live_brokers())} did not reach {offset} "
                    "in time",
                )
            except KafkaError as error:
                outcome = error
            delayed.partition_done(key, outcome)
        self._drop_done(list(self.by_partition))
