"""Followers fetching from leaders over the Kafka Fetch API (replica id = this broker's id)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidelog.errors import ErrorCode, KafkaError
from tidelog.halt import HaltOnIOError
from tidelog.log.leader_epoch import UNDEFINED_EPOCH_OFFSET
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.replication.fetch_session import FIRST_EPOCH, NEW_SESSION_ID
from tidelog.replication.partition import Partition
from tidelog.replication.throttle import ReplicationThrottle

if TYPE_CHECKING:
    from tidelog.log.log import Log

log = logging.getLogger(__name__)

# A partition the leader did not answer OffsetsForLeaderEpoch for (not led there yet) is asked
# again after this long.
TRUNCATION_RETRY_SECONDS = 0.1
# the first Fetch version with KIP-227's session fields
FIRST_FETCH_WITH_SESSIONS = 7
# inter.broker.protocol.version -> the Fetch and OffsetsForLeaderEpoch versions followers send,
# as Kafka 2.1's ReplicaFetcherThread picks them. Followers fetch in an incremental session:
# by Kafka's own Fetch from v7 (KIP-227's sessions, 1.1 and later), by tidelog's REPLICA_FETCH
# (the same session fields on Fetch v3's) from 0.10.0-IV0 to 1.0; either answer carries the
# leader's stored bytes whatever their format. 0.9.0 fetches plainly with Fetch v1.
REPLICA_REQUEST_VERSIONS: dict[str, tuple[int, int]] = {
    "0.9.0": (1, 0),
    "0.10.0-IV0": (2, 0),
    "0.10.0": (2, 0),
    "0.11.0-IV0": (4, 0),
    "0.11.0-IV1": (5, 0),
    "0.11.0-IV2": (5, 0),
    "0.11.0": (5, 0),
    "1.0-IV0": (5, 0),
    "1.0": (5, 0),
    "1.1-IV0": (7, 0),
    "1.1": (7, 0),
    "2.0-IV0": (7, 1),
    "2.0-IV1": (8, 1),
    "2.0": (8, 1),
    "2.1-IV0": (8, 1),
    "2.1-IV1": (8, 2),
    "2.1-IV2": (10, 2),
    "2.1": (10, 2),
}

Key = tuple[str, int]


@dataclass(frozen=True)
class FetcherSettings:
    """How followers fetch: Kafka's replica.fetch.* settings (``response_max_bytes`` bounds a
    REPLICA_FETCH answer; a plain Fetch v1/v2 answer has no bound), the Fetch and
    OffsetsForLeaderEpoch versions that inter.broker.protocol.version implies, and
    replica.truncation.mode."""

    fetch_version: int = 2
    leader_epoch_version: int = 0
    truncation_mode: str = "leader-epoch"
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1024 * 1024
    response_max_bytes: int = 10 * 1024 * 1024
    socket_timeout_ms: int = 30000
    backoff_ms: int = 1000
    listener: str = "PLAINTEXT"  # inter.broker.listener.name: the leader's address to fetch from

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FetcherSettings:
        fetch_version, leader_epoch_version = REPLICA_REQUEST_VERSIONS[
            config["inter.broker.protocol.version"]
        ]
        return cls(
            fetch_version=fetch_version,
            leader_epoch_version=leader_epoch_version,
            truncation_mode=config["replica.truncation.mode"],
            wait_max_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.max.bytes"],
            response_max_bytes=config["replica.fetch.response.max.bytes"],
            socket_timeout_ms=config["replica.socket.timeout.ms"],
            backoff_ms=config["replica.fetch.backoff.ms"],
            listener=config["inter.broker.listener.name"],
        )


class ReplicaFetcher:
    """Keeps the partitions this broker follows from one leader in step with it.

    Before its first fetch from a new leader, a partition is truncated: by leader epoch (the end
    offset the leader gives for the follower's latest epoch, OffsetsForLeaderEpoch) or, with
    replica.truncation.mode=high-watermark, to its own high watermark as Kafka 0.10 did (which
    can drop messages the old leader acknowledged; see cluster.faults.truncation_failover). Then
    each fetch asks from the log end offset; what comes back is appended as follower, and the
    high watermark follows the leader's.
    """

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        address: Callable[[], tuple[str, int] | None],
        settings: FetcherSettings,
        throttle: ReplicationThrottle | None = None,
        remote_aux_state: Callable[[Key, Log], Awaitable[None]] | None = None,
    ) -> None:
        self.broker_id = broker_id
        # KIP-405's buildRemoteLogAuxState: what a partition started at the leader's local log
        # start takes from the remote tier (the producer state of the segment below it)
        self.remote_aux_state = remote_aux_state
        # KIP-73: throttled partitions leave the fetch while the follower quota is exceeded,
        # except those whose last answer found them at the leader's high watermark (Kafka's
        # in-sync by lag): their next fetch tells the leader they caught up, so it adds them
        # to the ISR; held back, they would wait for the quota, or drop out again before this
        # broker learned they had joined (ISR thrashing)
        self.throttle = throttle
        self._held: set[Key] = set()
        self._at_high_watermark: set[Key] = set()
        self.leader_id = leader_id
        self.address = address
        self.settings = settings
        self.partitions: dict[Key, Partition] = {}
        self.needs_truncation: set[Key] = set()
        self.out_of_range: set[Key] = set()
        # The incremental fetch session with the leader (REPLICA_FETCH, Fetch v2 and up):
        # ``_session_positions`` is the fetch offset the leader holds for each partition,
        # ``_to_name`` the partitions whose offset the next fetch must tell it (appended to,
        # truncated, newly followed), ``_to_forget`` those it must drop.
        self.sessions = settings.fetch_version >= 2
        self._session_id = NEW_SESSION_ID
        self._session_epoch = FIRST_EPOCH
        self._session_positions: dict[Key, int] = {}
        self._to_name: set[Key] = set()
        self._to_forget: set[Key] = set()
        self._changed = asyncio.Event()
        self._stopping = False
        # Message bytes appended per partition from this leader (/metrics: what a rebuilt
        # broker replicated).
        self.bytes_appended: dict[Key, int] = {}
        self._task = asyncio.create_task(self._run())

    def add(self, partition: Partition) -> None:
        """Starts following ``partition``. With replica.truncation.mode=high-watermark it is
        truncated at once, as Kafka 0.10 did on becoming follower, before any word from the
        leader; by leader epoch it is truncated once the leader answers."""
        key = (partition.topic, partition.partition)
        self.partitions[key] = partition
        self._at_high_watermark.discard(key)
        self._renamed(key)
        if self.settings.truncation_mode == "high-watermark":
            self._cut(partition, partition.log.high_watermark, "its high watermark")
        else:
            self.needs_truncation.add(key)
        self._changed.set()

    def remove(self, key: Key) -> None:
        self.partitions.pop(key, None)
        self._held.discard(key)
        self._at_high_watermark.discard(key)
        self.needs_truncation.discard(key)
        self._to_name.discard(key)
        if self._session_positions.pop(key, None) is not None:
            self._to_forget.add(key)

    def describe_session(self) -> dict:
        """For the admin API: the session this follower holds with the leader (id 0: none)."""
        return {
            "session_id": self._session_id,
            "epoch": self._session_epoch,
            "partitions": len(self._session_positions),
            "following": len(self.partitions),
        }

    def _renamed(self, key: Key) -> None:
        """The partition's offset changed outside a fetch (truncation, a new epoch): the
        leader forgets its old position and is told the new one when the partition is ready."""
        if self._session_positions.pop(key, None) is not None:
            self._to_forget.add(key)
        self._to_name.add(key)

    def _reset_session(self) -> None:
        """The next fetch opens a new session naming every partition."""
        self._session_id, self._session_epoch = NEW_SESSION_ID, FIRST_EPOCH
        self._session_positions.clear()
        self._to_forget.clear()
        self._to_name = set(self.partitions)

    async def stop(self) -> None:
        self._stopping = True  # in case a cancellation is lost on the way, the loop ends too
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        connection: Connection | None = None
        try:
            while not self._stopping:
                try:
                    if not self.partitions:
                        self._changed.clear()
                        await self._changed.wait()
                        continue
                    if connection is None:
                        address = self.address()
                        if address is None:
                            await asyncio.sleep(self.settings.backoff_ms / 1000)
                            continue
                        async with asyncio.timeout(self.settings.socket_timeout_ms / 1000):
                            connection = await Connection.open(
                                *address, client_id=f"replica-{self.broker_id}"
                            )
                    if self.needs_truncation:
                        await self._truncate(connection)
                    if self.out_of_range:
                        await self._reset_out_of_range(connection)
                    if self.sessions:
                        await self._fetch_in_session(connection)
                    else:
                        await self._fetch(connection)
                except Exception as error:
                    if isinstance(error, OSError | KafkaError):  # timeouts and lost connections
                        log.info("fetching from broker %d: %s; retrying", self.leader_id, error)
                    else:
                        log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                    if connection is not None:
                        await connection.close()
                        connection = None
                    self._reset_session()  # the last fetch may or may not have been answered
                    await asyncio.sleep(self.settings.backoff_ms / 1000)
        finally:
            if connection is not None:
                await connection.close()

    async def _truncate(self, connection: Connection) -> None:
        """By leader epoch: each partition is cut where the leader says its latest epoch
        ended (OffsetsForLeaderEpoch); one the leader does not answer for is asked again."""
        keys = [k for k in self.needs_truncation if k in self.partitions]
        by_topic: dict[str, list[dict]] = {}
        for topic, number in keys:
            following = self.partitions[(topic, number)]
            by_topic.setdefault(topic, []).append(
                {
                    "partition": number,
                    "leader_epoch": following.log.leader_epochs.latest_epoch,
                    # v2: the leader fences a follower that is behind or ahead of its epoch
                    "current_leader_epoch": following.leader_epoch,
                }
            )
        response = await self._request(
            connection,
            ApiKey.OFFSETS_FOR_LEADER_EPOCH,
            self.settings.leader_epoch_version,
            {"topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()]},
        )
        for topic_answer in response["topics"]:
            for answer in topic_answer["partitions"]:
                key = (topic_answer["topic"], answer["partition"])
                partition = self.partitions.get(key)
                if partition is None or answer["error_code"]:
                    # not led there yet, or the leader's epoch and ours differ (FENCED_ or
                    # UNKNOWN_LEADER_EPOCH) until one of us hears of the change: asked again
                    continue
                end = answer["end_offset"]
                if end == UNDEFINED_EPOCH_OFFSET:
                    self._cut(
                        partition,
                        partition.log.high_watermark,
                        "its high watermark (no epoch known)",
                    )
                else:
                    self._cut(partition, end, "the end of its latest leader epoch on the leader")
                self.needs_truncation.discard(key)
        if self.needs_truncation:
            await asyncio.sleep(TRUNCATION_RETRY_SECONDS)

    async def _reset_out_of_range(self, connection: Connection) -> None:
        """Past the leader's log end: truncate to it. Behind its log start (retention): start
        an empty log there. Behind its local log start on a remote-enabled topic (a wiped or
        far-behind follower): start an empty log at the leader's local log start, keeping the
        leader's log start, so only local data is replicated; the remote part stays in the
        tier, and the remote log manager takes its indexes from there."""
        keys = [key for key in self.out_of_range if key in self.partitions]
        self.out_of_range.clear()
        if not keys:
            return
        # one ListOffsets per kind of offset for all of them, not three per partition, sent
        # together: one round trip to the leader
        tiered = [key for key in keys if self.partitions[key].log.config.remote_storage_enable]
        asked = [(keys, -2), (keys, -1)] + ([(tiered, -4)] if tiered else [])
        starts, ends, *local = await _all_or_first_error(
            self._leader_offsets(connection, which, timestamp) for which, timestamp in asked
        )
        local_starts = local[0] if local else {}
        emptied: list[tuple[Key, Log]] = []  # started at the leader's local log start
        for key in keys:
            partition = self.partitions.get(key)
            if partition is None:
                continue  # removed while the offsets were asked for
            start, end = starts[key], ends[key]
            local_start = local_starts.get(key, start)
            if partition.log.log_end_offset > end:
                self._cut(partition, end, "the leader's log end")
            elif partition.log.log_end_offset < local_start and local_start > start:
                partition.log.truncate_fully_and_start_at(local_start, log_start_offset=start)
                log.info(
                    "%s-%d: starting at the leader's local log start %d (log start %d is in "
                    "the remote tier)",
                    *key,
                    local_start,
                    start,
                )
                emptied.append((key, partition.log))
            elif partition.log.log_end_offset < start:
                partition.log.truncate_fully_and_start_at(start)
            self._renamed(key)
        if emptied and self.remote_aux_state is not None:
            # each from the tier on its own reader thread, before any of them is fetched
            aux_state = self.remote_aux_state
            await _all_or_first_error(aux_state(key, emptied_log) for key, emptied_log in emptied)

    async def _leader_offsets(
        self, connection: Connection, keys: list[Key], timestamp: int
    ) -> dict[Key, int]:
        """The leader's offsets of ``keys`` for a ListOffsets ``timestamp`` (-1 end, -2 log
        start, -4 local log start), in one request."""
        by_topic: dict[str, list[dict]] = {}
        for topic, number in keys:
            by_topic.setdefault(topic, []).append({"partition": number, "timestamp": timestamp})
        response = await self._request(
            connection,
            ApiKey.LIST_OFFSETS,
            1,
            {
                "replica_id": self.broker_id,
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
            },
        )
        offsets = {}
        for topic_answer in response["responses"]:
            for answer in topic_answer["partition_responses"]:
                key = (topic_answer["topic"], answer["partition"])
                if answer["error_code"]:
                    raise KafkaError(
                        ErrorCode(answer["error_code"]), f"listing offsets of {key[0]}-{key[1]}"
                    )
                offsets[key] = answer["offset"]
        return offsets

    async def _request(self, connection: Connection, api_key: ApiKey, version: int, body: dict):
        """A request to the leader, given up after replica.socket.timeout.ms (a leader that
        hangs; the connection is then opened again)."""
        try:
            async with asyncio.timeout(self.settings.socket_timeout_ms / 1000):
                return await connection.request(api_key, version, body)
        except TimeoutError:
            raise TimeoutError(
                f"no answer to {api_key.name} in replica.socket.timeout.ms "
                f"{self.settings.socket_timeout_ms}"
            ) from None

    def _cut(self, partition: Partition, offset: int, why: str) -> None:
        before = partition.log.log_end_offset
        if offset < before:
            partition.log.truncate_to(offset)
            self._renamed((partition.topic, partition.partition))
            log.info(
                "%s-%d: truncated from %d to %d, %s (leader %d, epoch %d)",
                partition.topic,
                partition.partition,
                before,
                partition.log.log_end_offset,
                why,
                self.leader_id,
                partition.leader_epoch,
            )

    def _hold_throttled(self) -> None:
        """While the follower quota is exceeded, the throttled partitions leave the fetch (and
        the session); they are named again once it is not."""
        throttle = self.throttle
        if throttle is None or throttle.follower.unlimited:
            if self._held:
                self._to_name |= self._held & set(self.partitions)
                self._held.clear()
            return
        if throttle.follower.exceeded():
            for key in self.partitions:
                if (
                    key not in self._held
                    and key not in self._at_high_watermark
                    and throttle.follower_throttled(*key)
                ):
                    self._held.add(key)
                    self._to_name.discard(key)
                    if self._session_positions.pop(key, None) is not None:
                        self._to_forget.add(key)
        elif self._held:
            self._to_name |= self._held & set(self.partitions)
            self._held.clear()

    async def _fetch(self, connection: Connection) -> None:
        self._hold_throttled()
        ready = {
            k: p
            for k, p in self.partitions.items()
            if k not in self.needs_truncation and k not in self._held
        }
        if not ready:
            return
        by_topic: dict[str, list[dict]] = {}
        for (topic, number), partition in ready.items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition": number,
                    "fetch_offset": partition.log.log_end_offset,
                    "max_bytes": self.settings.max_bytes,
                }
            )
        response = await self._request(
            connection,
            ApiKey.FETCH,
            self.settings.fetch_version,
            {
                "replica_id": self.broker_id,
                "max_wait_time": self.settings.wait_max_ms,
                "min_bytes": self.settings.min_bytes,
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
            },
        )
        for topic_answer in response["responses"]:
            for answer in topic_answer["partition_responses"]:
                key = (topic_answer["topic"], answer["partition"])
                fetched = ready.get(key)
                if fetched is None or self.partitions.get(key) is not fetched:
                    continue  # removed while the fetch was out
                self._apply(fetched, answer)

    async def _fetch_in_session(self, connection: Connection) -> None:
        """One fetch in the session (Fetch v7+ or REPLICA_FETCH): names only the partitions
        whose fetch offset the leader does not know yet (all of them when opening a session)
        and applies what the leader answers, only for partitions still where the leader thinks
        they are."""
        self._hold_throttled()
        named: dict[Key, int] = {}
        for key in list(self._to_name):
            partition = self.partitions.get(key)
            if partition is None or key in self._held:
                self._to_name.discard(key)
            elif key not in self.needs_truncation:
                named[key] = partition.log.log_end_offset
                self._to_name.discard(key)
        self._session_positions.update(named)
        by_topic: dict[str, list[dict]] = {}
        for (topic, number), offset in named.items():
            partition = self.partitions[(topic, number)]
            by_topic.setdefault(topic, []).append(
                {
                    "partition": number,
                    "current_leader_epoch": partition.leader_epoch,  # Fetch v9+
                    "fetch_offset": offset,
                    "log_start_offset": partition.log.log_start_offset,  # Fetch v5+
                    "max_bytes": self.settings.max_bytes,
                }
            )
        forgotten: dict[str, list[int]] = {}
        for topic, number in self._to_forget:
            forgotten.setdefault(topic, []).append(number)
        self._to_forget.clear()
        forgotten_topics = [{"topic": t, "partitions": p} for t, p in forgotten.items()]
        # Kafka's Fetch v7+ (1.1 and later) carries the sessions itself; before, REPLICA_FETCH
        # (v1, with log start offsets, where Kafka's followers send Fetch v5-v6)
        api_key, version = (
            (ApiKey.FETCH, self.settings.fetch_version)
            if self.settings.fetch_version >= FIRST_FETCH_WITH_SESSIONS
            else (ApiKey.REPLICA_FETCH, 1 if self.settings.fetch_version >= 5 else 0)
        )
        response = await self._request(
            connection,
            api_key,
            version,
            {
                "replica_id": self.broker_id,
                "max_wait_time": self.settings.wait_max_ms,
                "min_bytes": self.settings.min_bytes,
                "max_bytes": self.settings.response_max_bytes,
                "isolation_level": 0,
                "session_id": self._session_id,
                "session_epoch": self._session_epoch,
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
                "forgotten_topics": forgotten_topics,
                "forgotten_topics_data": forgotten_topics,
            },
        )
        code = response["error_code"]
        if code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            log.info(
                "fetch session %d with broker %d: %s; opening a new one",
                self._session_id,
                self.leader_id,
                ErrorCode(code).name,
            )
            self._reset_session()
            return
        if code:
            raise KafkaError(ErrorCode(code), f"replica fetch from broker {self.leader_id}")
        self._session_id = response["session_id"]
        self._session_epoch += 1
        for topic_answer in response["responses"]:
            for answer in topic_answer["partition_responses"]:
                key = (topic_answer["topic"], answer["partition"])
                partition = self.partitions.get(key)
                if (
                    partition is None
                    # only this task sets positions; a truncation or a new epoch drops them
                    or self._session_positions.get(key) != partition.log.log_end_offset
                ):
                    continue  # removed, truncated or re-added while the fetch was out
                before = partition.log.log_end_offset
                before_start = partition.log.log_start_offset
                self._apply(partition, answer)
                # a new log start is named too: the leader's DeleteRecords waits for it
                if (
                    partition.log.log_end_offset != before
                    or partition.log.log_start_offset != before_start
                ):
                    self._to_name.add(key)

    def _apply(self, partition: Partition, answer: dict) -> None:
        key = (partition.topic, partition.partition)
        code = answer["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log.warning(
                "%s-%d: offset %d is out of range on leader %d",
                partition.topic,
                partition.partition,
                partition.log.log_end_offset,
                self.leader_id,
            )
            self.out_of_range.add(key)
            self._at_high_watermark.discard(key)
            return
        if code:
            return  # NOT_LEADER_FOR_PARTITION and the like: metadata will tell
        records = answer["record_set"]
        if records:
            with HaltOnIOError("appending to %s-%d", partition.topic, partition.partition):
                info = partition.log.append_as_follower(
                    records, leader_epoch=partition.leader_epoch
                )
            if info is not None:
                self.bytes_appended[key] = self.bytes_appended.get(key, 0) + info.size
                if self.throttle is not None and self.throttle.follower_throttled(*key):
                    self.throttle.follower.record(info.size)
        partition.log.high_watermark = min(answer["high_watermark"], partition.log.log_end_offset)
        if partition.log.log_end_offset >= answer["high_watermark"]:
            self._at_high_watermark.add(key)
        else:
            self._at_high_watermark.discard(key)
        # the leader's log start (Fetch v5 and later), moved by a DeleteRecords or retention
        leader_log_start = answer.get("log_start_offset", -1)
        if leader_log_start > partition.log.log_start_offset:
            partition.log.maybe_increment_log_start_offset(
                leader_log_start, f"the log start of leader {self.leader_id}"
            )


async def _all_or_first_error(awaitables: Iterable[Awaitable[Any]]) -> list[Any]:
    """The results of ``awaitables`` run together, in their order; if any fails, every one is
    awaited first (none left running, no error unretrieved) and the first failure is raised."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
