"""Request handlers: one method per API, from a decoded request body to a response body."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.broker.delete_records import INVALID_LOW_WATERMARK
from tidelog.broker.metadata import MetadataCache
from tidelog.broker.metrics import Metrics
from tidelog.broker.replica_fetch import answer_replica_fetch
from tidelog.broker.replica_manager import (
    CONSUMER_REPLICA_ID,
    NO_LEADER_EPOCH,
    RemoteReadNeeded,
    ReplicaManager,
)
from tidelog.clock import Clock
from tidelog.coordinator.records import OFFSETS_TOPIC
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.leader_epoch import UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from tidelog.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Log,
    ReadResult,
    TimestampOffset,
)
from tidelog.log.segment import FileSlice
from tidelog.protocol.checks import is_transactional
from tidelog.protocol.frames import Request
from tidelog.protocol.schemas import (
    APIS,
    FETCH_SESSION_FINAL_EPOCH,
    FETCH_SESSION_INITIAL_EPOCH,
    INTER_BROKER_API_VERSIONS,
    NO_FETCH_SESSION,
    RELEASE_API_VERSIONS,
    ApiKey,
    fetch_magic,
)
from tidelog.records.conversion import convert_message_set

log = logging.getLogger(__name__)

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
NO_LIMIT = 2**31 - 1
# a leader epoch that is not known (Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH)
UNDEFINED_EPOCH = -1


# the refusals of an idempotent producer's batch (tidelog/log/producer_state.py)
PRODUCER_STATE_ERRORS = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_PRODUCER_ID,
    }
)


class Pending:
    """A response body still to come: ``finish`` turns the result of ``future`` into it. The
    future runs (or is completed) on its own, whether or not anyone awaits it yet, so a
    connection can check ``future.done()`` and answer in order."""

    __slots__ = ("finish", "future")

    def __init__(self, future: asyncio.Future, finish: Callable[[Any], dict | None]) -> None:
        self.future, self.finish = future, finish

    async def body(self) -> dict | None:
        return self.finish(await self.future)


def valid_topic_name(name: str) -> bool:
    return bool(LEGAL_TOPIC.match(name)) and name not in (".", "..")


def _fill_offsets(response: dict, high_watermark: int, log_start_offset: int) -> None:
    """A fetched partition's offsets: with no transactions, the last stable offset is the
    high watermark."""
    response["high_watermark"] = response["last_stable_offset"] = high_watermark
    response["log_start_offset"] = log_start_offset


def epoch_of_offset(epochs: LeaderEpochCache, offset: int) -> int:
    """The leader epoch that wrote ``offset`` (the latest epoch starting at or before it; the
    log end belongs to the latest epoch), UNDEFINED_EPOCH if the cache knows none."""
    found = UNDEFINED_EPOCH
    for epoch, start in epochs.entries:
        if start > offset:
            break
        found = epoch
    return found


class RequestHandler:
    """Answers the APIs of the 0.9/0.10 era, and the versions Kafka 0.11 to 2.1 added to those
    that carry records and offsets. ``create_topic`` is called for auto-creation.
    ``release`` (broker.protocol.max.version) bounds the API versions served and advertised to
    what that release served (RELEASE_API_VERSIONS)."""

    def __init__(
        self,
        broker_id: int,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        metrics: Metrics,
        clock: Clock,
        *,
        auto_create_topics: bool,
        create_topic: Callable[[str], Awaitable[None]] | None = None,
        release: str = "0.10.1",
        remote_fetch_max_wait_ms: int = 500,
    ) -> None:
        self.broker_id = broker_id
        self.release_versions = RELEASE_API_VERSIONS[release]
        self._served_tops: dict[int, int | None] = {}  # serves(): max_version(advertised=False)
        self.replicas = replicas
        self.metadata = metadata
        self.metrics = metrics
        self.clock = clock
        self.auto_create_topics = auto_create_topics
        self.create_topic = create_topic
        self.remote_fetch_max_wait_ms = remote_fetch_max_wait_ms
        self.handlers: dict[ApiKey, Callable[[Request], Awaitable[dict | None]]] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata_request,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.OFFSETS_FOR_LEADER_EPOCH: self.offsets_for_leader_epoch,
            ApiKey.REPLICA_FETCH: self.replica_fetch,
            ApiKey.DELETE_RECORDS: self.delete_records,
        }

    # The APIs a connection pipelines (KafkaServer): a request's first stage runs as it is read,
    # in arrival order (a produce's appends), the rest while the requests after it are read.
    # A Fetch is not one of them: started as it is read, it would see a produce read after it
    # on the same connection (and miss one read before it that waits for its followers), which
    # one request at a time never allows; and each waiting fetch would hold its whole answer.
    # Consumers and followers keep one fetch in flight per connection anyway.
    PIPELINED = frozenset({ApiKey.PRODUCE})

    def start(self, request: Request) -> dict | Pending | None:
        """Starts a request of a PIPELINED API: its first stage runs now; returns its response
        body (None: no response) or what gives it once the rest is done."""
        return self.start_produce(request)

    def register(self, handlers: dict[ApiKey, Callable[[Request], Awaitable[dict | None]]]) -> None:
        """Adds the handlers of APIs served by other packages (groups, topic admin)."""
        self.handlers.update(handlers)
        self._served_tops.clear()

    def serves(self, api_key: int, api_version: int = 0) -> bool:
        """Whether ``api_key`` at ``api_version`` is served (by this broker's release); asked
        of every request, so each API's answer is kept until ``register`` changes it."""
        tops = self._served_tops
        if api_key not in tops:
            tops[api_key] = self.max_version(api_key, advertised=False)
        top = tops[api_key]
        return top is not None and api_version <= top

    def max_version(self, api_key: int, *, advertised: bool = True) -> int | None:
        """The highest version of ``api_key`` served, None if it is not served (or, with
        ``advertised``, not told to clients: the inter-broker APIs of an older release)."""
        if api_key not in self.handlers:
            return None
        top = APIS[api_key].max_version
        limit = self.release_versions.get(ApiKey(api_key))
        if limit is None and not advertised:
            limit = INTER_BROKER_API_VERSIONS.get(ApiKey(api_key))
        return None if limit is None else min(top, limit)

    async def handle(self, request: Request, listener: str = "PLAINTEXT") -> dict | None:
        """The response body to ``request``, which came in on ``listener`` (Metadata answers
        with each broker's address on that listener, as Kafka does)."""
        if request.api_key == ApiKey.METADATA:
            return await self.metadata_request(request, listener)
        return await self.handlers[request.api_key](request)

    def _error(self, code: ErrorCode, where: str, error: KafkaError | None = None) -> int:
        self.metrics.errors[code.name] += 1
        if error is not None and code not in (
            ErrorCode.NOT_LEADER_FOR_PARTITION,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.OFFSET_OUT_OF_RANGE,
        ):
            log.warning("%s: %s", where, error)
        return int(code)

    # -- ApiVersions ---------------------------------------------------------------------------

    async def api_versions(self, request: Request) -> dict:
        tops = {key: self.max_version(key) for key in sorted(self.handlers)}
        return {
            "error_code": 0,
            "api_versions": [
                {"api_key": int(key), "min_version": 0, "max_version": top}
                for key, top in tops.items()
                # REPLICA_FETCH is between brokers only: clients never see it
                if top is not None and key != ApiKey.REPLICA_FETCH
            ],
            "throttle_time_ms": 0,
        }

    def unsupported_api_versions(self) -> dict:
        """The answer, in a v0 body, to an ApiVersions request of a version this broker does
        not serve: UNSUPPORTED_VERSION with the versions of ApiVersions it does serve, so the
        client asks again at the highest of them (KIP-511's answer; librdkafka and
        kafka-python retry at that version, and at v0 when the list is empty)."""
        top = self.max_version(ApiKey.API_VERSIONS)
        served = (
            []
            if top is None
            else [{"api_key": int(ApiKey.API_VERSIONS), "min_version": 0, "max_version": top}]
        )
        return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_versions": served}

    # -- Metadata ------------------------------------------------------------------------------

    async def metadata_request(self, request: Request, listener: str = "PLAINTEXT") -> dict:
        requested = request.body["topics"]
        version = request.api_version
        every_topic = requested is None or (version == 0 and not requested)
        names = sorted(self.metadata.topics) if every_topic else requested
        # v4 and later say whether a topic named may be auto-created
        may_create = not every_topic and request.body.get("allow_auto_topic_creation", True)
        topics = []
        for name in names:
            topics.append(await self._topic_metadata(name, may_create=may_create))
        brokers = []
        for broker in sorted(self.metadata.brokers.values(), key=lambda b: b.broker_id):
            address = broker.address(listener)
            if address is not None:  # a broker without this listener is left out, as in Kafka
                host, port = address
                brokers.append(
                    {"node_id": broker.broker_id, "host": host, "port": port, "rack": broker.rack}
                )
        body: dict[str, Any] = {
            "brokers": brokers,
            "topic_metadata": topics,
            "controller_id": self.metadata.controller_id,
            "cluster_id": self.metadata.cluster_id,
            "throttle_time_ms": 0,
        }
        return body

    async def _topic_metadata(self, name: str, may_create: bool) -> dict:
        topic = self.metadata.topics.get(name)
        if topic is None:
            if not valid_topic_name(name):
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
            elif may_create and self.auto_create_topics and self.create_topic is not None:
                await self.create_topic(name)
                code = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return {
                "error_code": int(code),
                "topic": name,
                "is_internal": False,
                "partition_metadata": [],
            }
        partitions = []
        for partition, replicas in sorted(topic.assignment.items()):
            leader = self.metadata.leader_of(name, partition)
            state = topic.states.get(partition)
            partitions.append(
                {
                    "error_code": 0 if leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
                    "partition": partition,
                    "leader": leader,
                    "leader_epoch": state.leader_epoch if state else UNDEFINED_EPOCH,  # v7
                    "replicas": list(replicas),
                    "isr": list(state.isr) if state else [],
                    # v5: the replicas on brokers not alive, as Kafka's controller counts them
                    "offline_replicas": [r for r in replicas if r not in self.metadata.brokers],
                }
            )
        return {
            "error_code": 0,
            "topic": name,
            "is_internal": name == OFFSETS_TOPIC,
            "partition_metadata": partitions,
        }

    def _each_partition(
        self,
        topics: list[dict],
        partitions_key: str,
        blank: dict[str, Any],
        fill: Callable[[str, int, dict, dict], None],
        where: str,
        responses_key: str = "partition_responses",
    ) -> list[dict]:
        """Kafka's response layout, per topic and partition: ``blank`` filled in by
        ``fill(topic, partition, wanted, response)``; a KafkaError it raises becomes that
        partition's error code (and the partition keeps the blank values)."""
        out = []
        for topic_data in topics:
            topic = topic_data["topic"]
            answers = []
            for wanted in topic_data[partitions_key]:
                partition = wanted["partition"]
                response = {"partition": partition, "error_code": 0, **blank}
                try:
                    fill(topic, partition, wanted, response)
                except KafkaError as error:
                    response.update(blank)
                    response["error_code"] = self._error(
                        error.code, f"{where} {topic}-{partition}", error
                    )
                answers.append(response)
            out.append({"topic": topic, responses_key: answers})
        return out

    # -- Produce -------------------------------------------------------------------------------

    async def produce(self, request: Request) -> dict | None:
        answer = self.start_produce(request)
        return await answer.body() if isinstance(answer, Pending) else answer

    def start_produce(self, request: Request) -> dict | Pending | None:
        """A produce's first stage, now: every partition's message set validated and appended
        to the leader's log, in the request's order. Returns the response body (None for
        acks=0) or, for acks=all, what awaits replication and then gives the body."""
        acks = request.body["acks"]
        waiting: dict[tuple[str, int], int] = {}  # acks=all: offset to wait for, per partition
        waiting_responses: dict[tuple[str, int], dict] = {}
        refused = self._transactions_refused(request)

        def append(topic: str, partition: int, data: dict, response: dict) -> None:
            if refused is not None:
                raise refused
            if acks not in (-1, 0, 1):
                raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}")
            if data["record_set"] is None:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "null message set")
            # every format goes to the log's one validation, which converts it to the topic's
            info = self.replicas.append(topic, partition, data["record_set"], acks)
            response["base_offset"] = info.first_offset
            response["log_append_time"] = info.log_append_time
            # appended: the partition is led here (no second leadership check)
            leader_log = self.replicas.partitions[(topic, partition)].log
            response["log_start_offset"] = leader_log.log_start_offset
            if acks == -1:
                waiting[(topic, partition)] = info.last_offset + 1
                waiting_responses[(topic, partition)] = response

        responses = self._each_partition(
            request.body["topic_data"],
            "data",
            {"base_offset": -1, "log_append_time": -1, "log_start_offset": -1},
            append,
            f"produce from {request.client_id} to",
        )
        if acks == 0:
            return None
        self._fill_log_start_of_refused(responses)
        body = {"responses": responses, "throttle_time_ms": 0}
        if not waiting:
            return body
        # acks=all: one delayed produce for the whole request
        replicated = self.replicas.delay_produce(waiting, max(request.body["timeout"], 0) / 1000)

        def finish(failed: dict[tuple[str, int], KafkaError]) -> dict:
            for (topic, partition), error in failed.items():
                waiting_responses[(topic, partition)]["error_code"] = self._error(
                    error.code, f"produce from {request.client_id} to {topic}-{partition}", error
                )
            return body

        return Pending(replicated, finish)

    def _fill_log_start_of_refused(self, responses: list[dict]) -> None:
        """As Kafka 2.1: a batch refused by the producer state is answered with the log start
        offset, by which an idempotent producer tells whether its state went with its data
        (retention) and it may reset its sequences."""
        for topic in responses:
            for response in topic["partition_responses"]:
                if response["error_code"] in PRODUCER_STATE_ERRORS:
                    partition = self.replicas.partitions.get(
                        (topic["topic"], response["partition"])
                    )
                    if partition is not None:
                        response["log_start_offset"] = partition.log.log_start_offset

    @staticmethod
    def _transactions_refused(request: Request) -> KafkaError | None:
        """tidelog has no transaction coordinator: a Produce from a transactional producer (a
        transactional id, or a transactional batch) fails on every partition with
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers a producer that may not use
        transactions, and nothing is appended."""
        if request.api_version < 3:
            return None
        transactional_id = request.body["transactional_id"]
        if transactional_id is None and not any(
            is_transactional(data["record_set"])
            for topic in request.body["topic_data"]
            for data in topic["data"]
        ):
            return None
        return KafkaError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"transactional id {transactional_id!r}: tidelog serves no transactions",
        )

    # -- Fetch ---------------------------------------------------------------------------------

    async def fetch(self, request: Request) -> dict:
        """Fetch v0-v10. A follower's fetch v7 and later goes in its incremental session, as
        REPLICA_FETCH does (replica_fetch). Client fetch sessions are declined: a full
        fetch is answered in full with session id 0, which tells the fetcher that this broker
        keeps no session for it (as Kafka 1.1+ answers when its session cache has no room), so
        it sends full fetches from then on; an incremental fetch names a session this broker
        does not have, and gets FETCH_SESSION_ID_NOT_FOUND (it then starts over with a full
        fetch). With no transactions, the last stable offset is the high watermark, and
        read_committed reads what read_uncommitted reads."""
        body, version = request.body, request.api_version
        if version >= 7 and body["replica_id"] >= 0:
            # a follower (inter.broker.protocol.version 1.1 and later): its session is kept
            return await answer_replica_fetch(self.replicas, body, self._error)
        if version >= 7 and body["session_epoch"] not in (
            FETCH_SESSION_INITIAL_EPOCH,
            FETCH_SESSION_FINAL_EPOCH,
        ):
            code = self._error(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                f"fetch session {body['session_id']} of {request.client_id}",
                KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "this broker keeps none"),
            )
            return {
                "throttle_time_ms": 0,
                "error_code": code,
                "session_id": NO_FETCH_SESSION,
                "responses": [],
            }
        if body["replica_id"] >= 0 and version >= 5:
            self.replicas.note_follower_log_starts(body["replica_id"], body["topics"])
        keys = [(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(body["max_wait_time"], 0) / 1000
        arrived = True  # a follower's positions are recorded by the reads as the fetch arrives
        while True:
            responses, total = await self._read_partitions(request, arrived)
            arrived = False
            failed = any(r["error_code"] for t in responses for r in t["partition_responses"])
            remaining = deadline - loop.time()
            if total >= body["min_bytes"] or failed or remaining <= 0:
                return {
                    "throttle_time_ms": 0,
                    "error_code": 0,
                    "session_id": NO_FETCH_SESSION,
                    "responses": responses,
                }
            await self.replicas.wait_for_change(keys, remaining)

    async def replica_fetch(self, request: Request) -> dict:
        """A follower's fetch in an incremental fetch session (broker.replica_fetch)."""
        return await answer_replica_fetch(self.replicas, request.body, self._error)

    async def _read_partitions(
        self, request: Request, arrived: bool = True
    ) -> tuple[list[dict], int]:
        """One pass over the fetched partitions; returns the responses and the bytes in them.
        A follower's positions are recorded by the pass of a fetch that ``arrived``, not by
        those of one woken while parked (ReplicaManager.read).
        Fetch v3's max_bytes bounds the whole response; its first partition with data returns
        at least one whole message. Partitions whose data is in the remote tier are read after
        the local ones, all at once on the reader pool; each fails or times out on its own."""
        body, version = request.body, request.api_version
        budget = body.get("max_bytes", NO_LIMIT)
        total = 0
        remote: list[tuple[str, int, dict, dict, int, bool]] = []

        def read(topic: str, partition: int, wanted: dict, response: dict) -> None:
            nonlocal total
            max_bytes = min(wanted["max_bytes"], max(budget - total, 0))
            self.replicas.check_leader_epoch(
                topic, partition, wanted.get("current_leader_epoch", NO_LEADER_EPOCH)
            )
            try:
                result = self.replicas.read(
                    topic,
                    partition,
                    wanted["fetch_offset"],
                    min(wanted["max_bytes"], max(budget - total, 0)),
                    replica_id=body["replica_id"],
                    min_one_message=version >= 3 and total == 0,
                    follower_position=arrived,
                )
            except RemoteReadNeeded:
                remote.append(
                    (topic, partition, wanted, response, max_bytes, version >= 3 and total == 0)
                )
                return
            response["record_set"] = self._records_for(result, version)
            _fill_offsets(response, result.high_watermark, result.log_start_offset)
            total += result.size

        # read_committed (1) sees the aborted transactions, none here; read_uncommitted gets null
        aborted: list | None = [] if body.get("isolation_level") == 1 else None
        responses = self._each_partition(
            body["topics"],
            "partitions",
            {
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": aborted,
                "record_set": b"",
            },
            read,
            f"fetch by {request.client_id} from",
        )
        if remote:
            sizes = await asyncio.gather(
                *(self._read_remote(request, *pending) for pending in remote)
            )
            total += sum(sizes)
        return responses, total

    async def _read_remote(
        self,
        request: Request,
        topic: str,
        partition: int,
        wanted: dict,
        response: dict,
        max_bytes: int,
        min_one_message: bool,
    ) -> int:
        """One partition's read from the remote tier. A slow one answers no data this time (the
        consumer asks again); a failed one answers its error; neither holds up the others for
        longer than remote.fetch.max.wait.ms."""
        try:
            async with asyncio.timeout(self.remote_fetch_max_wait_ms / 1000):
                result = await self.replicas.read_remote(
                    topic,
                    partition,
                    wanted["fetch_offset"],
                    max_bytes,
                    min_one_message=min_one_message,
                )
            records = self._records_for(result, request.api_version)
        except TimeoutError:
            log.info("remote read of %s-%d took over remote.fetch.max.wait.ms", topic, partition)
            partition_log = self.replicas.leader_log(topic, partition)
            _fill_offsets(response, partition_log.high_watermark, partition_log.log_start_offset)
            return 0
        except KafkaError as error:
            response["error_code"] = self._error(
                error.code, f"remote read by {request.client_id} of {topic}-{partition}", error
            )
            return 0
        response["record_set"] = records
        _fill_offsets(response, result.high_watermark, result.log_start_offset)
        return result.size

    def _records_for(self, result: ReadResult, version: int) -> FileSlice | bytes:
        """The data as read (a file slice goes with zero copy) when the fetcher reads its
        format (Fetch v4 and later read every format); converted down to the newest format the
        fetch version reads otherwise (fetch_magic: v1 data to v0 below Fetch v2, v2 data to
        v1 for Fetch v2-v3 and to v0 below). Both are counted on /metrics by fetch version."""
        target = fetch_magic(version)
        if result.magic <= target or not result.size:
            if result.size:
                stored = "zero_copy" if isinstance(result.data, FileSlice) else "copied"
                self.metrics.record_fetch(version, stored, result.size)
            return result.data
        converted = convert_message_set(result.read_bytes(), target, self.clock.milliseconds())
        self.metrics.record_fetch(version, "converted", len(converted))
        return converted

    # -- DeleteRecords ---------------------------------------------------------------------------

    async def delete_records(self, request: Request) -> dict:
        """DeleteRecords v0-v1 (Kafka 2.1's): each partition's log start moved on its leader,
        answered with its low watermark once every live replica's log start has reached the
        offset, or REQUEST_TIMED_OUT after the request's timeout."""
        body = request.body
        offsets = {
            (topic["topic"], wanted["partition"]): wanted["offset"]
            for topic in body["topics"]
            for wanted in topic["partitions"]
        }
        outcomes = await self.replicas.delete_records(offsets, max(body["timeout"], 0) / 1000)

        def answer(topic: str, partition: int, wanted: dict, response: dict) -> None:
            outcome = outcomes[(topic, partition)]
            if isinstance(outcome, KafkaError):
                raise outcome
            response["low_watermark"] = outcome

        topics = self._each_partition(
            body["topics"],
            "partitions",
            {"low_watermark": INVALID_LOW_WATERMARK},
            answer,
            f"delete records by {request.client_id} of",
            responses_key="partitions",
        )
        return {"throttle_time_ms": 0, "topics": topics}

    # -- OffsetsForLeaderEpoch ----------------------------------------------------------------

    async def offsets_for_leader_epoch(self, request: Request) -> dict:
        """Where the asked epoch ended on this leader: the start of the next epoch it knows, or
        its log end offset for its latest epoch (KIP-101); from v1 with the epoch that end
        belongs to (the latest epoch it knows not after the one asked, KIP-279), from v2 after
        the requester's current leader epoch is checked (KIP-320)."""

        def end_offset(topic: str, partition: int, wanted: dict, response: dict) -> None:
            self.replicas.check_leader_epoch(
                topic, partition, wanted.get("current_leader_epoch", NO_LEADER_EPOCH)
            )
            partition_log = self.replicas.leader_log(topic, partition)
            epochs = partition_log.leader_epochs
            asked = wanted["leader_epoch"]
            end = epochs.end_offset_for(asked, partition_log.log_end_offset)
            response["end_offset"] = end
            response["leader_epoch"] = (
                UNDEFINED_EPOCH
                if end == UNDEFINED_EPOCH_OFFSET
                else max(e for e, _ in epochs.entries if e <= asked)
            )

        topics = self._each_partition(
            request.body["topics"],
            "partitions",
            {"end_offset": UNDEFINED_EPOCH_OFFSET, "leader_epoch": UNDEFINED_EPOCH},
            end_offset,
            "leader epoch of",
            responses_key="partitions",
        )
        return {"topics": topics, "throttle_time_ms": 0}

    # -- ListOffsets ---------------------------------------------------------------------------

    async def list_offsets(self, request: Request) -> dict:
        body, version = request.body, request.api_version

        remote_searches = []

        def offsets(topic: str, partition: int, wanted: dict, response: dict) -> None:
            self.replicas.check_leader_epoch(
                topic, partition, wanted.get("current_leader_epoch", NO_LEADER_EPOCH)
            )
            partition_log = self.replicas.leader_log(topic, partition)
            if version == 0:
                response["offsets"] = self._offsets_before(
                    partition_log,
                    wanted["timestamp"],
                    wanted["max_num_offsets"],
                    body,
                    self._remote_segments(topic, partition, partition_log),
                )
            elif wanted["timestamp"] >= 0 and self._has_remote_part(partition_log):
                remote_searches.append(
                    self._remote_offset_for_time(
                        topic, partition, partition_log, wanted["timestamp"], body, response
                    )
                )
            else:
                response["timestamp"], response["offset"] = self._offset_for_time(
                    partition_log, wanted["timestamp"], body["replica_id"]
                )

        responses = self._each_partition(
            body["topics"],
            "partitions",
            {"offsets": [], "timestamp": -1, "offset": -1, "leader_epoch": UNDEFINED_EPOCH},
            offsets,
            "list offsets of",
        )
        await asyncio.gather(*remote_searches)
        if version >= 4:
            self._add_leader_epochs(responses)
        return {"responses": responses, "throttle_time_ms": 0}

    def _add_leader_epochs(self, responses: list[dict]) -> None:
        """ListOffsets v4: the leader epoch of each offset found, from this leader's epoch
        cache (the epoch that wrote it; for the log end, the latest epoch); -1 when none."""
        for topic_answer in responses:
            for answer in topic_answer["partition_responses"]:
                if answer["error_code"] or answer["offset"] < 0:
                    continue
                epochs = self.replicas.leader_log(topic_answer["topic"], answer["partition"])
                answer["leader_epoch"] = epoch_of_offset(epochs.leader_epochs, answer["offset"])

    def _has_remote_part(self, partition_log: Log) -> bool:
        return (
            self.replicas.remote is not None
            and partition_log.config.remote_storage_enable
            and partition_log.log_start_offset < partition_log.local_log_start_offset
        )

    def _remote_segments(
        self, topic: str, partition: int, partition_log: Log
    ) -> list[tuple[int, int]]:
        """(start offset, largest timestamp) of the remote segments below the local log start
        and not below the log start."""
        if not self._has_remote_part(partition_log):
            return []
        assert self.replicas.remote is not None
        return [
            (max(m.start_offset, partition_log.log_start_offset), m.max_timestamp)
            for m in self.replicas.remote.remote_segments.get((topic, partition), [])
            if partition_log.log_start_offset <= m.end_offset
            and m.start_offset < partition_log.local_log_start_offset
        ]

    async def _remote_offset_for_time(
        self,
        topic: str,
        partition: int,
        partition_log: Log,
        timestamp: int,
        body: dict,
        response: dict,
    ) -> None:
        """ListOffsets v1 by timestamp over a log part of which is in the remote tier: the
        remote part is searched first (on the reader pool), then the local one."""
        assert self.replicas.remote is not None
        try:
            found: TimestampOffset | None = await self.replicas.remote.offset_for_timestamp(
                (topic, partition), partition_log, timestamp
            )
        except KafkaError as error:
            response["error_code"] = self._error(
                error.code, f"list offsets of {topic}-{partition}", error
            )
            return
        if found is not None:
            response["timestamp"], response["offset"] = found.timestamp, found.offset
        else:
            response["timestamp"], response["offset"] = self._offset_for_time(
                partition_log, timestamp, body["replica_id"]
            )

    def _latest(self, partition_log: Log, replica_id: int) -> int:
        if replica_id == CONSUMER_REPLICA_ID:
            return partition_log.high_watermark
        return partition_log.log_end_offset

    def _offset_for_time(
        self, partition_log: Log, timestamp: int, replica_id: int
    ) -> tuple[int, int]:
        if timestamp == LATEST_TIMESTAMP:
            return -1, self._latest(partition_log, replica_id)
        if timestamp == EARLIEST_TIMESTAMP:
            return -1, partition_log.log_start_offset
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return -1, partition_log.local_log_start_offset
        found = partition_log.offset_for_timestamp(timestamp)
        if found is None or found.offset >= self._latest(partition_log, replica_id):
            return -1, -1
        return found.timestamp, found.offset

    def _offsets_before(
        self,
        partition_log: Log,
        timestamp: int,
        count: int,
        body: dict,
        remote_segments: list[tuple[int, int]],
    ) -> list[int]:
        """ListOffsets v0: Kafka's old answer, the base offsets of segments last modified
        before ``timestamp`` (newest first), with the log end standing for "now"."""
        latest = self._latest(partition_log, body["replica_id"])
        if timestamp == EARLIEST_TIMESTAMP:
            return [partition_log.log_start_offset][:count]
        candidates = remote_segments + [
            (s.base_offset, s.last_modified_ms) for s in partition_log.segments
        ]
        if partition_log.active_segment.size:
            candidates.append((latest, self.clock.milliseconds()))
        else:
            candidates[-1] = (latest, self.clock.milliseconds())
        if timestamp == LATEST_TIMESTAMP:
            chosen = candidates
        else:
            chosen = [c for c in candidates if c[1] <= timestamp]
        return [offset for offset, _ in reversed(chosen)][:count]
