"""The delivery oracle every scenario shares: produce numbered messages, then check them.

The producer sends each message once (never again after an error, so a message in the log twice
is a real duplicate) and records the offset of every acknowledged one; an idempotent one (KIP-98)
sends each again until it is acknowledged, with the same producer id and sequence, as Kafka's
idempotent producers retry, and the brokers must keep every message once and in order. The
check consumes every partition to its high watermark and reports:

- lost: acknowledged, and not in the final read although it read past the message's offset, or
  a consumer saw it before; unseen: acknowledged and never seen by any consumer, the final read
  ending before its offset (Jepsen's queue checker's words); for both, a look into the
  replicas' segment files tells "not in any log" from "in a log but not served";
- with a consumer polling during the run (``DeliveryConsumer``): polls whose offsets went
  backwards (nonmonotonic) or jumped over offsets (skipped), and offsets at which two reads
  found different messages (inconsistent offsets);
- duplicates, and messages out of order within a partition; an idempotent producer's
  sequences refused by a broker;
- diverged: in-sync replicas whose logs differ below the high watermark, message by message;
- time index entries that do not agree with their log; LogAppendTime that went backwards.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.cluster.availability import Availability
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.dump import dump_index_file
from tidelog.log.files import TIME_INDEX_SUFFIX, segment_files
from tidelog.protocol.client import Client, PartitionLeader
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Codec, Record, TimestampType, build_message_set, iter_deep
from tidelog.records.record_batch import BatchRecordInput, encode_batch

# what a broker answers a sequence it will not take: the idempotent producer starts over
SEQUENCE_REFUSALS = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.INVALID_PRODUCER_EPOCH,
    }
)


@dataclass(frozen=True)
class Acked:
    """An acknowledged message; ``acked_at`` in seconds since the epoch, ``latency_ms`` from
    its request to the answer."""

    partition: int
    offset: int
    value: bytes
    acked_at: float = 0.0
    latency_ms: float = -1.0
    key: bytes | None = None  # the value itself, unless the producer sends keys


@dataclass
class DeliveryProducer:
    """Messages ``{partition}-{sequence}`` at ``rate`` per second over the topic's partitions,
    keyed by themselves, or with ``keys`` by ``key-{partition}-{sequence % keys}`` (a compacted
    topic's workload: each key written again and again). ``sent`` counts each partition's
    messages sent, so a value ``{partition}-{n}`` with n at or above it was never produced."""

    bootstrap_servers: str
    topic: str
    acks: int
    rate: float
    # below 2: format v0 messages, as a 0.9 producer sends them; 3: v2 record batches
    produce_version: int = 2
    codec: Codec = Codec.NONE
    keys: int = 0
    # InitProducerId, a sequence per partition, each message retried until acknowledged (one
    # in flight: a partition's order is the order sent); needs produce_version 3
    idempotent: bool = False
    acked: list[Acked] = field(default_factory=list)
    sent_per_partition: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    failed: int = 0
    sent: int = 0
    # idempotent: the producer id and epoch (-1: none yet), each partition's next sequence,
    # and how often a broker refused a sequence and the producer started over with a new id
    producer: tuple[int, int] = (-1, -1)
    sequences: dict[int, int] = field(default_factory=dict)
    resets: list[str] = field(default_factory=list)
    last_error: int = 0
    _gate: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def hold(self) -> None:
        """Returns once the message in flight is answered; nothing more is sent until
        ``resume``. A fault that needs a quiet moment after an acknowledgement waits for this."""
        await self._gate.acquire()

    def resume(self) -> None:
        self._gate.release()

    async def run(self, stop: asyncio.Event) -> None:
        client = Client(self.bootstrap_servers)
        sequence = self.sent_per_partition
        started = time.monotonic()
        partitions = None
        try:
            while not stop.is_set():
                due = started + self.sent / self.rate
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
                waiting = time.monotonic()
                async with self._gate:
                    started += time.monotonic() - waiting  # held time does not count: no burst
                    if partitions is None:
                        try:
                            partitions = await client.partitions(self.topic, wait=5)
                        except (OSError, ConnectionError, KafkaError):
                            await asyncio.sleep(0.2)
                            continue
                    target = partitions[self.sent % len(partitions)]
                    number = sequence[target.partition]
                    value = b"%d-%08d" % (target.partition, number)
                    key = (
                        b"key-%d-%03d" % (target.partition, number % self.keys)
                        if self.keys
                        else value
                    )
                    sequence[target.partition] += 1
                    self.sent += 1
                    if self.idempotent:
                        partitions = await self._send_until_acked(
                            client, stop, partitions, target.partition, value, key
                        )
                    elif not await self._send(client, target.partition, target.leader, value, key):
                        partitions = None  # ask for the leaders again
        finally:
            await client.close()

    async def _send_until_acked(
        self,
        client: Client,
        stop: asyncio.Event,
        partitions: list[PartitionLeader] | None,
        partition: int,
        value: bytes,
        key: bytes,
    ) -> list[PartitionLeader] | None:
        """Sends one message, again after each failure with the same sequence, until it is
        acknowledged or the run stops; returns the leaders known then. A refused sequence
        (which a broker that keeps its producer state never gives this producer) is recorded
        in ``resets`` and the producer starts over with a new producer id."""
        while not stop.is_set():
            try:
                if partitions is None:
                    partitions = await client.partitions(self.topic, wait=5)
                if self.producer[0] < 0:
                    self.producer = await client.init_producer_id(partitions[0].leader)
                    self.sequences.clear()
            except (OSError, ConnectionError, TimeoutError, KafkaError, KeyError):
                partitions = None
                await asyncio.sleep(0.2)
                continue
            leader = next(p.leader for p in partitions if p.partition == partition)
            sequence = self.sequences.get(partition, 0)
            if await self._send(client, partition, leader, value, key, sequence):
                self.sequences[partition] = (sequence + 1) % 2**31
                return partitions
            if self.last_error in SEQUENCE_REFUSALS:
                self.resets.append(
                    f"partition {partition} sequence {sequence} of producer {self.producer[0]}: "
                    f"{ErrorCode(self.last_error).name}"
                )
                self.producer = (-1, -1)
            partitions = None  # ask for the leaders again
            await asyncio.sleep(0.1)
        return partitions

    async def _send(
        self,
        client: Client,
        partition: int,
        leader: int,
        value: bytes,
        key: bytes,
        sequence: int = -1,
    ) -> bool:
        version = await self.version_for(client, leader)
        now_ms = int(time.time() * 1000)
        if version >= 3:  # a v2 record batch, as every producer of 0.11 on sends
            producer_id, epoch = self.producer if sequence >= 0 else (-1, -1)
            records = encode_batch(
                [BatchRecordInput(key, value, now_ms)],
                codec=self.codec,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
            )
        else:
            records = build_message_set(
                [Record(key, value, now_ms)], magic=1 if version >= 2 else 0, codec=self.codec
            )
        body = {
            "transactional_id": None,  # Produce v3+
            "acks": self.acks,
            "timeout": 10000,
            "topic_data": [
                {"topic": self.topic, "data": [{"partition": partition, "record_set": records}]}
            ],
        }
        try:
            connection = await client.connection(leader)
            sent = time.perf_counter()
            async with asyncio.timeout(12):
                response = await connection.request(ApiKey.PRODUCE, version, body)
            latency_ms = (time.perf_counter() - sent) * 1000
        except (OSError, ConnectionError, TimeoutError, KeyError):
            stale = client.connections.pop(leader, None)
            if stale is not None:
                await stale.close()
            self.failed += 1
            self.last_error = -1
            return False
        answer = response["responses"][0]["partition_responses"][0]
        self.last_error = answer["error_code"]
        if answer["error_code"] == ErrorCode.NONE:
            self.acked.append(
                Acked(partition, answer["base_offset"], value, time.time(), latency_ms, key)
            )
            return True
        self.failed += 1
        return False

    async def version_for(self, client: Client, leader: int) -> int:
        """The Produce version sent to ``leader`` (a subclass may ask the broker)."""
        return self.produce_version


@dataclass
class DeliveryConsumer:
    """Reads every partition from offset 0 while the scenario runs, one fetch after another,
    as an in-sync consumer does; ``seen`` holds the first message read at each offset.

    Within a partition a poll's first offset must be the position asked for and each next one
    the one after: an offset at or below the one before is nonmonotonic, one further on is a
    skip (the scenario's topics are not compacted, so offsets have no gaps). A message read
    again at an offset where another was read is an inconsistent offset. When the leader's
    log ends below the position (a truncation), the position moves back to its end, and that
    is nonmonotonic too."""

    bootstrap_servers: str
    topic: str
    compacted: bool = False  # the cleaner removes offsets: a jump over them is no skip
    seen: dict[int, dict[int, bytes | None]] = field(default_factory=dict)
    nonmonotonic: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    polls: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        client = Client(self.bootstrap_servers)
        positions: dict[int, int] = defaultdict(int)
        partitions = None
        try:
            while not stop.is_set():
                try:
                    if partitions is None:
                        partitions = await client.partitions(self.topic, wait=5)
                    for partition in partitions:
                        positions[partition.partition] = await self._poll(
                            client, partition.partition, partition.leader, positions
                        )
                except (OSError, ConnectionError, TimeoutError, KafkaError, KeyError):
                    partitions = None  # a leader moved or went away: ask again
                    await asyncio.sleep(0.2)
                await asyncio.sleep(0.05)
        finally:
            await client.close()

    async def _poll(
        self, client: Client, partition: int, leader: int, positions: dict[int, int]
    ) -> int:
        position = positions[partition]
        connection = await client.connection(leader)
        body = {
            "replica_id": -1,
            "max_wait_time": 100,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": self.topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": position, "max_bytes": 1 << 20}
                    ],
                }
            ],
        }
        async with asyncio.timeout(10):
            response = await connection.request(ApiKey.FETCH, 2, body)
        answer = response["responses"][0]["partition_responses"][0]
        if answer["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE:
            log_end = await _log_end(connection, self.topic, partition)
            if log_end < position:  # read before, gone now: the next poll goes backwards
                self.nonmonotonic.append(
                    f"{self.topic}-{partition}: the log ends at {log_end}, below offset "
                    f"{position} read before"
                )
            return min(position, log_end)
        if answer["error_code"]:
            raise KafkaError(ErrorCode(answer["error_code"]), "poll")
        self.polls += 1
        name = f"{self.topic}-{partition}"
        expected = position
        seen = self.seen.setdefault(partition, {})
        for message in iter_deep(answer["record_set"] or b""):
            if message.offset < position:
                continue  # the start of a compressed wrapper holding the position
            if message.offset < expected:
                self.nonmonotonic.append(f"{name}: offset {message.offset} after {expected - 1}")
            elif message.offset > expected and not self.compacted:
                self.skipped.append(f"{name}: offsets {expected}-{message.offset - 1} skipped")
            earlier = seen.setdefault(message.offset, message.value)
            if earlier != message.value:
                self.inconsistent.append(
                    f"{name} offset {message.offset}: {_text(earlier)} then {_text(message.value)}"
                )
            expected = message.offset + 1
        return max(expected, position)


def _text(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", "replace")


async def _log_end(connection, topic: str, partition: int) -> int:
    wanted = {"partition": partition, "timestamp": -1, "max_num_offsets": 1}
    topics = [{"topic": topic, "partitions": [wanted]}]
    listed = await connection.request(ApiKey.LIST_OFFSETS, 0, {"replica_id": -1, "topics": topics})
    (offset,) = listed["responses"][0]["partition_responses"][0]["offsets"]
    return offset


@dataclass
class DeliveryReport:
    acked: int = 0
    consumed: int = 0
    lost: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)
    nonmonotonic: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    inconsistent_offsets: list[str] = field(default_factory=list)
    never_produced: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    # an idempotent producer's sequences that a broker refused (its state lost or wrong)
    sequence_refusals: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    time_index: list[str] = field(default_factory=list)
    timestamps_backwards: list[str] = field(default_factory=list)
    # (offset, value) of each message consumed, per partition: a run directory's consumed table
    received: dict[int, list[tuple[int, bytes | None]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # how long the producer went without an acknowledgement (set by the scenario that ran it)
    availability: Availability | None = field(default=None, compare=False)

    CHECKS = (
        "lost",
        "unseen",
        "nonmonotonic",
        "skipped",
        "inconsistent_offsets",
        "never_produced",
        "duplicates",
        "out_of_order",
        "sequence_refusals",
        "diverged",
        "time_index",
        "timestamps_backwards",
    )

    @property
    def ok(self) -> bool:
        return not any(getattr(self, name) for name in self.CHECKS)

    def table(self) -> str:
        rows = [f"{'check':24} {'verdict':8} detail", "-" * 72]
        rows.append(f"{'acknowledged':24} {'':8} {self.acked}")
        rows.append(f"{'consumed':24} {'':8} {self.consumed}")
        for name in self.CHECKS:
            found = getattr(self, name)
            detail = "; ".join(found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")
            rows.append(f"{name.replace('_', ' '):24} {'FAIL' if found else 'ok':8} {detail}")
        if self.availability is not None:
            rows += self.availability.rows()
        return "\n".join(rows)

    def as_dict(self) -> dict:
        document = {"ok": self.ok, "acked": self.acked, "consumed": self.consumed} | {
            name: getattr(self, name) for name in self.CHECKS
        }
        if self.availability is not None:
            document["availability"] = self.availability.as_dict()
        return document


async def consume_partition(client: Client, topic: str, partition: int, leader: int) -> list:
    """Every message of one partition up to its high watermark, read from its leader."""
    connection = await client.connection(leader)
    wanted = {"partition": partition, "timestamp": -2, "max_num_offsets": 1}
    topics = [{"topic": topic, "partitions": [wanted]}]
    # ListOffsets v0 and Fetch v2: served by brokers of every release from 0.10.0
    listed = await connection.request(ApiKey.LIST_OFFSETS, 0, {"replica_id": -1, "topics": topics})
    (offset,) = listed["responses"][0]["partition_responses"][0]["offsets"]
    messages: list = []
    while True:
        body = {
            "replica_id": -1,
            "max_wait_time": 0,
            "min_bytes": 0,
            "max_bytes": 4 << 20,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": offset, "max_bytes": 4 << 20}
                    ],
                }
            ],
        }
        answer = (await connection.request(ApiKey.FETCH, 2, body))["responses"][0][
            "partition_responses"
        ][0]
        if answer["error_code"]:
            raise RuntimeError(
                f"fetch from {topic}-{partition}: {ErrorCode(answer['error_code']).name}"
            )
        batch = [m for m in iter_deep(answer["record_set"] or b"") if m.offset >= offset]
        if not batch:
            return messages
        messages += batch
        offset = batch[-1].offset + 1


def _produced(value: bytes | None, partition: int, sent: int) -> bool:
    """Whether ``value`` is ``{partition}-{n}`` with n below what was sent there."""
    if value is None:
        return False
    number, _, sequence = value.partition(b"-")
    return number == b"%d" % partition and sequence.isdigit() and int(sequence) < sent


def missing_kind(read_past_it: bool, seen_while_running: bool) -> str:
    """What an acknowledged message the final read did not find is: ``lost`` when the read
    went past its offset (another message is there now) or a consumer saw it while the
    scenario ran (it was there, and went); ``unseen`` when no one ever saw it and the read
    ended before its offset (the high watermark never reached it)."""
    return "lost" if read_past_it or seen_while_running else "unseen"


def replica_messages(log_directory: Path, below: int) -> list[tuple[int, bytes | None, int]]:
    """(offset, value, timestamp) of every message a replica holds below ``below``; a segment
    that retention deletes between the listing and the read is no longer held."""
    found = []
    for segment in segment_files(log_directory):
        try:
            data = segment.read_bytes()
        except FileNotFoundError:
            continue
        for message in iter_deep(data):
            if message.offset < below:
                found.append((message.offset, message.value, message.timestamp))
    return found


async def verify(
    cluster,
    topic: str,
    acked: list[Acked],
    consumer: DeliveryConsumer | None = None,
    producer: DeliveryProducer | None = None,
    compacted: bool = False,
) -> DeliveryReport:
    """Checks a topic of a LocalCluster against what was acknowledged (and what ``consumer``,
    if given, read while the scenario ran; with ``producer``, that every message read was
    produced). ``compacted``: the audit of a compacted topic, per key: an acknowledged
    message may be missing only when a later message of its key is there (the cleaner
    dropped it as obsolete), so every key ends on its last acknowledged value or a later one
    sent, in publication order per partition."""
    report = DeliveryReport(acked=len(acked))
    client = Client(cluster.bootstrap_servers)
    try:
        partitions = await client.partitions(topic)
        consumed: dict[int, list] = {}
        for partition in partitions:
            consumed[partition.partition] = await consume_partition(
                client, topic, partition.partition, partition.leader
            )
    finally:
        await client.close()
    report.consumed = sum(len(messages) for messages in consumed.values())
    report.received = {
        number: [(m.offset, m.value) for m in messages] for number, messages in consumed.items()
    }
    values = Counter(m.value for messages in consumed.values() for m in messages)
    report.duplicates = [f"{v.decode()} x{n}" for v, n in values.items() if n > 1]
    for number, messages in consumed.items():
        sequences = [int(m.value.split(b"-")[1]) for m in messages if m.value]
        for before, after, message in zip(sequences, sequences[1:], messages[1:], strict=False):
            if after <= before:
                report.out_of_order.append(
                    f"{topic}-{number} offset {message.offset}: {after} after {before}"
                )
        log_append = [
            m.timestamp for m in messages if m.timestamp_type == TimestampType.LOG_APPEND_TIME
        ]
        for before, after in itertools.pairwise(log_append):
            if after < before:
                report.timestamps_backwards.append(f"{topic}-{number}: {after} after {before}")
    directories = sorted(Path(cluster.directory).glob(f"broker-*/logs/{topic}-*"))
    seen_live = (
        {v for offsets in consumer.seen.values() for v in offsets.values()} if consumer else set()
    )
    read_until = {
        number: (messages[-1].offset + 1 if messages else 0)
        for number, messages in consumed.items()
    }
    if consumer is not None:
        report.nonmonotonic = list(consumer.nonmonotonic)
        report.skipped = list(consumer.skipped)
        report.inconsistent_offsets = list(consumer.inconsistent)
        for number, messages in consumed.items():
            earlier = consumer.seen.get(number, {})
            for message in messages:
                if message.offset in earlier and earlier[message.offset] != message.value:
                    report.inconsistent_offsets.append(
                        f"{topic}-{number} offset {message.offset}: "
                        f"{_text(earlier[message.offset])} while running, "
                        f"{_text(message.value)} at the end"
                    )
    if producer is not None:
        report.sequence_refusals = list(producer.resets)
        for number, messages in consumed.items():
            sent = producer.sent_per_partition.get(number, 0)
            for message in messages:
                if not _produced(message.value, number, sent):
                    report.never_produced.append(
                        f"{topic}-{number} offset {message.offset}: {_text(message.value)}"
                    )
    last_offset_of_key: dict[tuple[int, bytes | None], int] = {}
    if compacted:
        for number, messages in consumed.items():
            for message in messages:
                last_offset_of_key[(number, message.key)] = message.offset
    for acked_message in acked:
        superseded = (
            last_offset_of_key.get((acked_message.partition, acked_message.key), -1)
            > acked_message.offset
        )
        if values[acked_message.value] == 0 and not superseded:
            holders = [
                d.parent.parent.name
                for d in directories
                if d.name == f"{topic}-{acked_message.partition}"
                and any(v == acked_message.value for _, v, _ in replica_messages(d, 2**62))
            ]
            where = (
                f"in the log of {', '.join(holders)} but not served"
                if holders
                else "in no replica's log"
            )
            name = f"{topic}-{acked_message.partition}"
            finding = (
                f"{acked_message.value.decode()} ({name} offset {acked_message.offset}): {where}"
            )
            read_past = read_until.get(acked_message.partition, 0) > acked_message.offset
            if missing_kind(read_past, acked_message.value in seen_live) == "lost":
                report.lost.append(finding)
            else:
                report.unseen.append(finding)
    for number, messages in consumed.items():
        high_watermark = messages[-1].offset + 1 if messages else 0
        replicas = [d for d in directories if d.name == f"{topic}-{number}"]
        copies = {d.parent.parent.name: replica_messages(d, high_watermark) for d in replicas}
        reference_name, reference = max(
            copies.items(), key=lambda item: len(item[1]), default=("", [])
        )
        for name, copy in copies.items():
            # A replica may hold less (it lags, or its older data is only in the remote tier);
            # what it holds must be what the others hold at the same offsets.
            at_offset = {message[0]: message for message in reference}
            for mine in copy:
                theirs = at_offset.get(mine[0])
                if theirs is not None and mine != theirs:
                    report.diverged.append(
                        f"{topic}-{number}: {name} and {reference_name} differ at offset {mine[0]}"
                    )
                    break
        for directory in replicas:
            for index in segment_files(directory, TIME_INDEX_SUFFIX):
                broker = index.parent.parent.parent.name
                for mismatch in time_index_mismatches(index):
                    report.time_index.append(f"{broker}/{directory.name}/{index.name}: {mismatch}")
    return report


def time_index_mismatches(index: Path, settle_seconds: float = 2.0) -> list[str]:
    """What --verify-index finds wrong in a live replica's time index. Retention may delete the
    segment while it is read (its .log first, then its indexes): a segment whose files are gone
    within ``settle_seconds`` was deleted, not wrong; an index left without its .log is."""
    try:
        return list(dump_index_file(index, verify=True)["mismatches"])
    except (FileNotFoundError, ValueError):
        deadline = time.monotonic() + settle_seconds
        while index.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not index.exists():
            return []
        raise
