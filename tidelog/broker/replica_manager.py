"""The partitions a broker holds, as leader or follower, and what clients and replicas do."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from tidelog.broker.delete_records import DeleteRecordsPurgatory, Outcome, move_log_start
from tidelog.broker.metadata import MetadataCache
from tidelog.broker.purgatory import ProducePurgatory
from tidelog.clock import Clock
from tidelog.errors import ErrorCode, KafkaError
from tidelog.halt import HaltOnIOError
from tidelog.log.config import LogConfig
from tidelog.log.log import Log, LogAppendInfo, ReadResult
from tidelog.log.manager import LogManager
from tidelog.replication.fetch_session import FetchSessionCache
from tidelog.replication.fetcher import FetcherSettings, ReplicaFetcher
from tidelog.replication.partition import Partition
from tidelog.replication.throttle import ReplicationThrottle

if TYPE_CHECKING:
    from tidelog.tiered.manager import RemoteLogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
CONSUMER_REPLICA_ID = -1
# a request's current_leader_epoch when its sender names none (KIP-320): not checked
NO_LEADER_EPOCH = -1
# (topic, partition, leader epoch, ISR) of a led partition whose ISR changes
IsrChange = tuple[str, int, int, frozenset[int]]
# writes ISR changes to ZooKeeper all at once; whether each was written: True, False (not: a
# newer state there, or nothing sent), or None (not known: the reply was lost, and ZooKeeper may
# hold it)
PersistIsr = Callable[[list[IsrChange]], Awaitable[list[bool | None]]]
# an ISR write whose outcome is not known is sent again after this long
ISR_RETRY_SECONDS = 0.2


class RemoteReadNeeded(Exception):
    """A consumer's offset is below the local log start but not below the log start: the data
    is in the remote tier, read with ``ReplicaManager.read_remote`` (off the event loop)."""


class ReplicaManager:
    """Serves produce and fetch for the partitions this broker leads, and follows the others.

    Leadership comes from the partition states in the metadata (written to ZooKeeper by the
    controller): a partition whose state names this broker leader in a newer epoch becomes led
    here; one that names another live broker is followed, through a fetcher per leader. Anything
    asked of a partition not led here is NOT_LEADER_FOR_PARTITION, or UNKNOWN_TOPIC_OR_PARTITION
    if the cluster has no such partition. Appends and high-watermark moves wake the fetches and
    acks=all produces waiting on the partition.
    """

    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        metadata: MetadataCache,
        clock: Clock,
        *,
        persist_isr: PersistIsr | None = None,
        fetcher_settings: FetcherSettings | None = None,
        replica_lag_time_max_ms: int = 10000,
        fetch_session_slots: int = 1000,
        remote: RemoteLogManager | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.metadata = metadata
        self.clock = clock
        self.persist_isr = persist_isr
        self.fetcher_settings = fetcher_settings or FetcherSettings()
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)
        # acks=all produces waiting for replication, by partition
        self.purgatory = ProducePurgatory(self.leader_partition, self.partitions)
        # DeleteRecords waiting for the replicas' log starts, by partition
        self.deletes = DeleteRecordsPurgatory(self.leader_partition, lambda: self.metadata.brokers)
        # partitions with an ISR change under way, and the changes waiting for the write in
        # flight: one writer sends them together (after a pause, a follower rejoins the ISR
        # of thousands of partitions at once)
        self._isr_updates: set[TopicPartition] = set()
        self._isr_pending: dict[TopicPartition, tuple[Partition, int, frozenset[int]]] = {}
        self._isr_writer: asyncio.Task | None = None
        # incremental fetch sessions of the followers fetching from here (REPLICA_FETCH), and
        # when each follower last fetched (a caught-up partition it does not name stays in sync)
        self.fetch_sessions = FetchSessionCache(fetch_session_slots)
        self.last_fetch_ms: dict[int, int] = {}
        # called after every apply_metadata (the group coordinator loads or unloads groups)
        self.leadership_listeners: list[Callable[[], None]] = []
        self.remote = remote
        # KIP-73's replication throttle (set by the broker before any fetcher starts)
        self.throttle: ReplicationThrottle | None = None
        # the brokers alive at the last apply_metadata: a follower that fetched before this
        # broker knew it was alive gets its ISR expansion once it is known (see _recheck_isr)
        self._live_brokers: set[int] = set()
        # partitions stopped by a StopReplica without delete: not held again until a
        # LeaderAndIsr names them (stop_replicas, hold_again)
        self.stopped: set[TopicPartition] = set()

    # -- leadership ----------------------------------------------------------------------------

    def apply_metadata(self) -> None:
        """Brings every partition assigned here in line with its state in the metadata."""
        now = self.clock.milliseconds()
        joined = set(self.metadata.brokers) - self._live_brokers
        self._live_brokers = set(self.metadata.brokers)
        for key in [k for k in self.partitions if k[0] not in self.metadata.topics]:
            self._remove_from_fetchers(key)  # a deleted topic: no more fetching for it
            del self.partitions[key]
            self._wake(key)
        for name, topic in self.metadata.topics.items():
            config = LogConfig.from_topic_config(topic.config, self.logs.broker_config)
            if self.logs.topic_configs.get(name) != config:
                self.logs.update_topic_config(name, config)
            for number, replicas in topic.assignment.items():
                state = topic.states.get(number)
                if self.broker_id not in replicas or state is None:
                    continue
                key = (name, number)
                partition = self.partitions.get(key)
                if partition is None:
                    if key in self.stopped:
                        continue  # until a LeaderAndIsr names it (hold_again)
                    if name in self.metadata.deleting:
                        # its replica was (or is about to be) deleted by StopReplica; a late
                        # read of the topic must not bring its log back
                        continue
                    if key in self.logs.opening:
                        continue  # being opened off the event loop; applied once it is
                    partition_log = self.logs.get_or_create(name, number)
                    partition = Partition(name, number, self.broker_id, partition_log)
                    self.partitions[key] = partition
                leader_alive = state.leader in self.metadata.brokers
                if (
                    partition.leader_epoch == state.leader_epoch
                    and partition.leader_id == (state.leader if leader_alive else -1)
                    and partition.replicas == replicas
                ):
                    continue  # a reassignment's new replicas may come after its new epoch
                self._remove_from_fetchers(key)
                isr = frozenset(state.isr)
                if state.leader == self.broker_id:
                    partition.make_leader(state.leader_epoch, replicas, isr, now)
                    self._wake(key)
                elif leader_alive:
                    partition.make_follower(state.leader, state.leader_epoch, replicas, isr)
                    self._wake(key)  # fetches waiting on it learn it is no longer led here
                    self._fetcher_for(state.leader).add(partition)
                    log.info(
                        "%s-%d: following broker %d in epoch %d from offset %d",
                        name,
                        number,
                        state.leader,
                        state.leader_epoch,
                        partition.log.log_end_offset,
                    )
                else:
                    partition.make_follower(-1, state.leader_epoch, replicas, isr)
                    self._wake(key)  # produces waiting on it fail now, not at their timeout
        if joined:
            self._recheck_isr(joined)
        for listener in self.leadership_listeners:
            listener()

    def leader_epoch_if_leader(self, topic: str, number: int) -> int | None:
        """This broker's leader epoch of a partition it leads; None if it does not lead it."""
        partition = self.partitions.get((topic, number))
        return partition.leader_epoch if partition is not None and partition.is_leader else None

    def _fetcher_for(self, leader: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader)
        if fetcher is None:

            def address(leader: int = leader) -> tuple[str, int] | None:
                endpoint = self.metadata.brokers.get(leader)
                return endpoint.address(self.fetcher_settings.listener) if endpoint else None

            fetcher = ReplicaFetcher(
                self.broker_id,
                leader,
                address,
                self.fetcher_settings,
                self.throttle,
                self.remote.build_aux_state if self.remote is not None else None,
            )
            self.fetchers[leader] = fetcher
        return fetcher

    def _remove_from_fetchers(self, key: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    def stop_replicas(self, partitions: list[TopicPartition], delete: bool) -> None:
        """Stops holding partitions (StopReplica); with ``delete`` their logs go too. Without,
        the logs stay and a partition is not held again (a metadata update naming it is not
        enough) until a LeaderAndIsr names it: as Kafka's broker, which only a LeaderAndIsr
        makes a replica (the controller stops a broker in controlled shutdown following
        partitions this way). The leadership listeners hear of it once."""
        stopped = [key for key in partitions if self._stop_replica(*key, delete)]
        if stopped:
            for listener in self.leadership_listeners:
                listener()

    def _stop_replica(self, topic: str, number: int, delete: bool) -> bool:
        """Stops holding one partition; whether it was held."""
        key = (topic, number)
        if delete:
            self.stopped.discard(key)
        else:
            self.stopped.add(key)
        self._remove_from_fetchers(key)
        held = self.partitions.pop(key, None) is not None
        if held:
            self._wake(key)
            log.info(
                "%s-%d: no longer held here%s", topic, number, " (log deleted)" if delete else ""
            )
        if delete:
            partition_log = self.logs.get(topic, number)
            if (
                self.remote is not None
                and partition_log is not None
                and partition_log.config.remote_storage_enable
            ):
                self.remote.delete_partition(topic, number)
            self.logs.delete(topic, number)
        return held

    def hold_again(self, partitions: list[TopicPartition]) -> None:
        """A LeaderAndIsr named these partitions: those stopped without delete are held again
        (at the next apply_metadata)."""
        self.stopped.difference_update(partitions)

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()

    def check_leader_epoch(self, topic: str, number: int, current_leader_epoch: int) -> None:
        """KIP-320's fencing, before any other check of the partition (as Kafka 2.1 orders
        them): a request that names the leader epoch it knows (-1: it names none) is refused
        with FENCED_LEADER_EPOCH if that epoch is older than this broker's, UNKNOWN_LEADER_EPOCH
        if it is newer (this broker has not heard of the change yet)."""
        if current_leader_epoch == NO_LEADER_EPOCH:
            return
        partition = self.partitions.get((topic, number))
        if partition is None:
            return  # not hosted here: leader_partition says why
        if current_leader_epoch < partition.leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{topic}-{number}: epoch {current_leader_epoch} is older than "
                f"{partition.leader_epoch}",
            )
        if current_leader_epoch > partition.leader_epoch:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"{topic}-{number}: epoch {current_leader_epoch} is newer than "
                f"{partition.leader_epoch} on broker {self.broker_id}",
            )

    def leader_partition(self, topic: str, number: int) -> Partition:
        if not self.metadata.has_partition(topic, number):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{number}")
        partition = self.partitions.get((topic, number))
        if partition is None or not partition.is_leader:
            leader = self.metadata.leader_of(topic, number)
            raise KafkaError(
                ErrorCode.NOT_LEADER_FOR_PARTITION,
                f"broker {self.broker_id} does not lead {topic}-{number} (leader {leader})",
            )
        return partition

    def leader_log(self, topic: str, number: int) -> Log:
        return self.leader_partition(topic, number).log

    # -- produce -------------------------------------------------------------------------------

    def append(self, topic: str, number: int, records: memoryview, acks: int) -> LogAppendInfo:
        partition = self.leader_partition(topic, number)
        minimum = partition.log.config.min_insync_replicas
        if acks == -1 and len(partition.isr) < minimum:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{topic}-{number} has {len(partition.isr)} in-sync replicas "
                f"{sorted(partition.isr)}, min.insync.replicas is {minimum}",
            )
        partition.credit_caught_up(self.last_fetch_ms)
        with HaltOnIOError("appending to %s-%d", topic, number):
            info = partition.log.append_as_leader(records, leader_epoch=partition.leader_epoch)
        partition.maybe_advance_high_watermark()
        self._wake((topic, number))
        return info

    async def wait_for_replication(
        self, topic: str, number: int, offset: int, timeout: float
    ) -> None:
        """Returns once every in-sync replica has the messages below ``offset`` (acks=all)."""
        failed = await self.wait_for_replication_of({(topic, number): offset}, timeout)
        if failed:
            raise failed[(topic, number)]

    def delay_produce(
        self, offsets: Mapping[TopicPartition, int], timeout: float
    ) -> asyncio.Future[dict[TopicPartition, KafkaError]]:
        """One delayed produce for all partitions of a request: its future resolves once every
        in-sync replica of each partition has the messages below its offset, or the timeout
        passed, with the partitions that failed and why. It waits in the purgatory, keyed by
        partition: a high-watermark move wakes only the produces waiting on that partition."""
        return self.purgatory.add(offsets, timeout)

    async def wait_for_replication_of(
        self, offsets: Mapping[TopicPartition, int], timeout: float
    ) -> dict[TopicPartition, KafkaError]:
        """delay_produce, awaited."""
        return await self.delay_produce(offsets, timeout)

    # -- DeleteRecords -------------------------------------------------------------------------

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], timeout: float
    ) -> dict[TopicPartition, Outcome]:
        """Moves the log start of each partition led here to its offset (-1: the high
        watermark) and returns, per partition, its low watermark (the smallest log start of its
        replicas on live brokers) once that has reached the offset, or the error it failed with
        (REQUEST_TIMED_OUT after ``timeout`` seconds)."""
        outcomes: dict[TopicPartition, Outcome] = {}
        waiting: dict[TopicPartition, int] = {}
        for key, offset in offsets.items():
            try:
                partition = self.leader_partition(*key)
                wanted = move_log_start(partition, offset)
            except KafkaError as error:
                outcomes[key] = error
                continue
            self.fetch_sessions.resend(key)  # the followers hear of the new log start
            low_watermark = partition.low_watermark(self.metadata.brokers)
            if low_watermark >= wanted:
                outcomes[key] = low_watermark
            else:
                waiting[key] = wanted
        if waiting:
            outcomes.update(await self.deletes.add(waiting, timeout))
        return outcomes

    def note_follower_log_starts(self, replica_id: int, topics: list[dict]) -> None:
        """Records the log start offsets a follower's fetch names (Fetch v5 and later; -1 or
        absent from older versions) for the partitions led here; a DeleteRecords waiting on one
        that moved is checked."""
        partitions = self.partitions
        for topic in topics:
            name = topic["topic"]
            for wanted in topic["partitions"]:
                key = (name, wanted["partition"])
                partition = partitions.get(key)
                if partition is None:
                    continue
                # on every named partition of every fetch: the unchanged case costs two lookups
                # (a partition followed here has no followers)
                state = partition.followers.get(replica_id)
                log_start_offset = wanted.get("log_start_offset", -1)
                if state is None or state.log_start_offset == log_start_offset:
                    continue
                if (
                    log_start_offset >= 0
                    and partition.update_follower_log_start(replica_id, log_start_offset)
                    and self.deletes.by_partition
                ):
                    self.deletes.check(key)

    # -- fetch ---------------------------------------------------------------------------------

    def record_follower_position(self, partition: Partition, replica_id: int, offset: int) -> None:
        """Where follower ``replica_id`` is: the offset its fetch asked from as it arrived, which
        may move the high watermark or grow the ISR. A position past the log end is out of range
        (the read fails): recording it would count the follower as holding offsets it does not
        have, and Kafka records no position for a read that fails."""
        if offset > partition.log.log_end_offset:
            return
        if partition.update_follower(replica_id, offset, self.clock.milliseconds()):
            self._wake((partition.topic, partition.partition))
        if replica_id in self.metadata.brokers:  # a late fetch from a broker now gone
            self._maybe_update_isr(partition, partition.isr_to_expand(replica_id))

    def read(
        self,
        topic: str,
        number: int,
        offset: int,
        max_bytes: int,
        *,
        replica_id: int = CONSUMER_REPLICA_ID,
        min_one_message: bool = False,
        follower_position: bool = True,
    ) -> ReadResult:
        """A read for a consumer stops at the high watermark. A replica's read is not bounded
        and, with ``follower_position``, records where the follower is (which may move the high
        watermark or grow the ISR): a fetch's reads when it arrives, not those of a fetch parked
        here that a change woke (Kafka's delayed fetch does not update follower state either:
        the position it holds may be one the follower has since given up)."""
        partition = self.leader_partition(topic, number)
        if replica_id >= 0:
            if follower_position:
                self.record_follower_position(partition, replica_id, offset)
            max_offset = None
        else:
            max_offset = partition.log.high_watermark
        partition_log = partition.log
        if (
            replica_id < 0
            and self.remote is not None
            and partition_log.config.remote_storage_enable
            and partition_log.log_start_offset <= offset < partition_log.local_log_start_offset
        ):
            raise RemoteReadNeeded(f"{topic}-{number} offset {offset}")
        try:
            data = partition_log.read(
                offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
            )
        except OSError as error:
            # Kafka 0.10 answers the partition with the error and goes on (only a failed write
            # or flush halts a broker); a read that fails later, as the answer is sent, closes
            # the connection, as a failed transferTo does
            raise KafkaError(
                ErrorCode.UNKNOWN, f"{topic}-{number}: reading from offset {offset}: {error}"
            ) from error
        return ReadResult(
            data.slice,
            partition_log.high_watermark,
            partition_log.log_start_offset,
            partition_log.config.magic,
        )

    async def read_remote(
        self, topic: str, number: int, offset: int, max_bytes: int, *, min_one_message: bool
    ) -> ReadResult:
        """A consumer's read of data that is only in the remote tier (see RemoteReadNeeded)."""
        partition_log = self.leader_log(topic, number)
        if self.remote is None:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{topic}-{number}: no remote tier")
        data = await self.remote.read(
            (topic, number), partition_log, offset, max_bytes, min_one_message
        )
        return ReadResult(
            data,
            partition_log.high_watermark,
            partition_log.log_start_offset,
            partition_log.config.magic,
        )

    async def wait_for_change(self, partitions: Iterable[TopicPartition], timeout: float) -> bool:
        """Waits until one of ``partitions`` gets an append or a new high watermark."""
        future = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._waiters[key].add(future)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancellation that comes
            # as the future completes, and a stopping broker would wait on
            async with asyncio.timeout(timeout):
                await future
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                self._waiters[key].discard(future)

    def _wake(self, key: TopicPartition) -> None:
        self.fetch_sessions.mark_changed(key)
        self.purgatory.check(key)
        if self.deletes.by_partition:
            self.deletes.check(key)
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)

    # -- ISR -----------------------------------------------------------------------------------

    def check_isr(self) -> None:
        """Drops followers that have not caught up within replica.lag.time.max.ms."""
        now = self.clock.milliseconds()
        for partition in list(self.partitions.values()):
            if partition.is_leader:
                self._maybe_update_isr(
                    partition,
                    partition.isr_to_shrink(now, self.replica_lag_time_max_ms, self.last_fetch_ms),
                )

    def _recheck_isr(self, replicas: set[int]) -> None:
        """Marks the led partitions where one of ``replicas`` is out of the ISR as changed, so
        that its next fetch reads them and expands the ISR if it has caught up (Kafka expands
        on the fetch that reaches the high watermark). A fetch session re-reads only changed
        partitions: a caught-up follower whose expansion could not happen on its fetch (not
        yet known alive here, or another ISR write under way) would otherwise wait for the
        next append, forever on an idle partition."""
        for key, partition in self.partitions.items():
            if partition.is_leader and any(
                r in replicas and r not in partition.isr for r in partition.replicas
            ):
                self._wake(key)

    def _maybe_update_isr(self, partition: Partition, isr: frozenset[int] | None) -> None:
        key = (partition.topic, partition.partition)
        if (
            isr is None
            or isr == partition.isr
            or key in self._isr_updates
            or self.persist_isr is None
        ):
            return
        self._isr_updates.add(key)
        self._isr_pending[key] = (partition, partition.leader_epoch, isr)
        # from now on the controller may read the new ISR: the high watermark counts those
        # joining it at once (a shrink counts only once written: the larger ISR until then)
        partition.joining = isr - partition.isr
        if self._isr_writer is None or self._isr_writer.done():
            self._isr_writer = asyncio.get_running_loop().create_task(self._write_isr_changes())

    async def _write_isr_changes(self) -> None:
        """Writes the pending ISR changes, all that came meanwhile in one batch each time. A
        change whose outcome is not known (ZooKeeper may hold it) keeps its joining followers
        and is sent again until it is written or refused, or the leadership changes (Kafka
        2.7 retries such an AlterIsr alike)."""
        while self._isr_pending:
            batch, self._isr_pending = self._isr_pending, {}
            unknown: dict[TopicPartition, tuple[Partition, int, frozenset[int]]] = {}
            try:
                assert self.persist_isr is not None
                written = await self.persist_isr(
                    [(t, n, epoch, isr) for (t, n), (_, epoch, isr) in batch.items()]
                )
            except Exception:
                log.exception("could not write the ISR of %d partitions", len(batch))
                written = [None] * len(batch)
            for (key, change), ok in zip(batch.items(), written, strict=True):
                partition, epoch, isr = change
                if ok is None and partition.leader_epoch == epoch:
                    unknown[key] = change
                    continue
                if ok:
                    self._isr_written(partition, epoch, isr)
                self._isr_updates.discard(key)
                if partition.leader_epoch == epoch:  # else a new leadership reset it
                    partition.joining = frozenset()
            if unknown:
                await asyncio.sleep(ISR_RETRY_SECONDS)
                for key, change in unknown.items():
                    if change[0].leader_epoch == change[1]:
                        self._isr_pending[key] = change
                    else:
                        self._isr_updates.discard(key)

    def _isr_written(self, partition: Partition, epoch: int, isr: frozenset[int]) -> None:
        key = (partition.topic, partition.partition)
        if not (partition.is_leader and partition.leader_epoch == epoch):
            return
        change = "shrinks" if len(isr) < len(partition.isr) else "expands"
        log.info(
            "%s-%d: ISR %s from %s to %s (high watermark %d, log end %d)",
            partition.topic,
            partition.partition,
            change,
            sorted(partition.isr),
            sorted(isr),
            partition.log.high_watermark,
            partition.log.log_end_offset,
        )
        partition.isr = isr
        if partition.maybe_advance_high_watermark():
            self._wake(key)
        if any(r not in isr and r in self.metadata.brokers for r in partition.replicas):
            # a follower's expansion may have been skipped while this write was under way:
            # its next fetch reads the partition again
            self._wake(key)
