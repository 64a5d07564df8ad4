"""Delayed acks=all produces, kept by partition until their high watermarks reach them (after
Kafka's produce purgatory)."""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping

from tidelog.errors import ErrorCode, KafkaError
from tidelog.replication.partition import Partition

TopicPartition = tuple[str, int]
# the partition led here, or the KafkaError a client gets for it (ReplicaManager.leader_partition)
LeaderPartition = Callable[[str, int], Partition]


class DelayedProduce:
    """One acks=all produce request waiting for replication.

    ``waiting`` holds each partition whose high watermark has not reached its offset yet and
    that has not failed; ``failed`` each partition that failed, with why. ``future`` is resolved
    with ``failed`` exactly once: when nothing is waiting any more, or at the deadline (the
    partitions still waiting then fail with REQUEST_TIMED_OUT). A produce whose future is done
    (resolved, or cancelled because its connection went away) is only dropped lazily from the
    purgatory's queues.
    """

    __slots__ = ("failed", "future", "waiting")

    def __init__(self, future: asyncio.Future, offsets: Mapping[TopicPartition, int]) -> None:
        self.future = future
        self.waiting = dict(offsets)
        self.failed: dict[TopicPartition, KafkaError] = {}

    def partition_done(self, key: TopicPartition, error: KafkaError | None = None) -> None:
        if self.waiting.pop(key, None) is None:
            return
        if error is not None:
            self.failed[key] = error
        if not self.waiting and not self.future.done():
            self.future.set_result(self.failed)


class ProducePurgatory:
    """The acks=all produces waiting on the partitions this broker leads.

    ``check(key)`` is called on every change of a partition (an append, a high-watermark move, a
    leadership or ISR change): it completes the produces whose offset the partition's high
    watermark reached (failed with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is then below
    min.insync.replicas) and fails every produce waiting on a partition no longer led here.

    Invariants: a partition's queue holds (offset, produce) in increasing offset order (appends
    to one partition happen in order, and each produce joins the queue right after its append),
    so a check looks at the front of one queue only and pops what it completes: waking costs
    the produces completed, not the produces waiting. Timeouts are one heap of (deadline,
    sequence, produce) and one loop timer armed for its earliest entry, not a timer per produce.
    Produces already done are dropped lazily, from the front of a queue or the heap.
    """

    def __init__(self, leader_partition: LeaderPartition, partitions: Mapping) -> None:
        self._leader_partition = leader_partition
        self._partitions = partitions  # ReplicaManager.partitions: the fast lookup of a check
        self._by_partition: dict[TopicPartition, deque[tuple[int, DelayedProduce]]] = {}
        self._deadlines: list[tuple[float, int, DelayedProduce]] = []
        self._sequence = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        """Entries held in the partitions' queues (done produces included until dropped)."""
        return sum(len(queue) for queue in self._by_partition.values())

    def add(
        self, offsets: Mapping[TopicPartition, int], timeout: float
    ) -> asyncio.Future[dict[TopicPartition, KafkaError]]:
        """A produce that waits until the high watermark of each partition reaches its offset,
        for ``timeout`` seconds at most; its future gives the partitions that failed."""
        loop = asyncio.get_running_loop()
        produce = DelayedProduce(loop.create_future(), offsets)
        if not offsets:
            produce.future.set_result({})
            return produce.future
        for key, offset in offsets.items():
            try:
                done = self._replicated(key, offset)
            except KafkaError as error:
                produce.partition_done(key, error)
                continue
            if done:
                produce.partition_done(key)
                continue
            queue = self._by_partition.get(key)
            if queue is None:
                self._by_partition[key] = deque(((offset, produce),))
            elif queue[-1][0] <= offset:
                queue.append((offset, produce))
            else:  # not expected (appends are in order), but the order is what check relies on
                bisect.insort(queue, (offset, produce), key=lambda entry: entry[0])
        if produce.future.done():
            return produce.future
        deadline = loop.time() + max(timeout, 0.0)
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].future.done():
            heapq.heappop(deadlines)
        heapq.heappush(deadlines, (deadline, next(self._sequence), produce))
        if deadline < self._timer_at:
            self._arm(loop, deadline)
        return produce.future

    def check(self, key: TopicPartition) -> None:
        queue = self._by_partition.get(key)
        if queue is None:
            return
        partition = self._partitions.get(key)
        if partition is None or not partition.is_leader:
            del self._by_partition[key]
            try:
                self._leader_partition(*key)
                error = KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION, f"{key} is not led here")
            except KafkaError as raised:
                error = raised
            for _, produce in queue:
                produce.partition_done(key, error)
            return
        high_watermark = partition.log.high_watermark
        while queue and queue[0][0] <= high_watermark:
            _, produce = queue.popleft()
            if produce.future.done():
                continue
            produce.partition_done(key, self._isr_error(key, partition))
        while queue and queue[0][1].future.done():
            queue.popleft()
        if not queue:
            del self._by_partition[key]

    def _replicated(self, key: TopicPartition, offset: int) -> bool:
        """Whether the high watermark reached ``offset``; raises if the partition is not led
        here or (once reached) its ISR is below min.insync.replicas."""
        partition = self._partitions.get(key)
        if partition is None or not partition.is_leader:
            partition = self._leader_partition(*key)  # raises the error a client gets
        if partition.log.high_watermark < offset:
            return False
        error = self._isr_error(key, partition)
        if error is not None:
            raise error
        return True

    @staticmethod
    def _isr_error(key: TopicPartition, partition: Partition) -> KafkaError | None:
        minimum = partition.log.config.min_insync_replicas
        if len(partition.isr) >= minimum:
            return None
        return KafkaError(
            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            f"{key[0]}-{key[1]} shrank to {sorted(partition.isr)} in-sync replicas, "
            f"below min.insync.replicas {minimum}",
        )

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._expire)
        self._timer_at = deadline

    def _expire(self) -> None:
        """The timer: every produce past its deadline fails where it still waits."""
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].future.done()):
            _, _, produce = heapq.heappop(deadlines)
            if produce.future.done():
                continue
            for key, offset in list(produce.waiting.items()):
                produce.partition_done(key, self._timed_out(key, offset))
        if deadlines:
            self._arm(loop, deadlines[0][0])

    def _timed_out(self, key: TopicPartition, offset: int) -> KafkaError:
        try:
            partition = self._leader_partition(*key)
        except KafkaError as error:
            return error
        return KafkaError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"{key[0]}-{key[1]}: offset {offset - 1} not on every in-sync replica "
            f"{sorted(partition.isr)} in time (high watermark {partition.log.high_watermark})",
        )
