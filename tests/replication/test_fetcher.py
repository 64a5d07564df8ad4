"""A follower's fetcher against leaders that misbehave."""

from __future__ import annotations

import asyncio

from tests.conftest import message_set
from tidelog.broker.handlers import RequestHandler
from tidelog.broker.metadata import BrokerEndpoint, MetadataCache, PartitionState, TopicMetadata
from tidelog.broker.metrics import Metrics
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.server import KafkaServer
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.log import Log
from tidelog.log.manager import LogManager
from tidelog.replication.fetcher import FetcherSettings, ReplicaFetcher
from tidelog.replication.partition import Partition
from tidelog.replication.throttle import ReplicationThrottle


async def follow_a_silent_leader(partition: Partition, settings: FetcherSettings) -> int:
    """Runs a fetcher for a second against a 'leader' that accepts connections and never
    answers; returns how many connections it opened."""
    accepted = 0
    held = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        held.append(writer)
        await reader.read()  # never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fetcher = ReplicaFetcher(2, 1, lambda: ("127.0.0.1", port), settings)
    fetcher.add(partition)
    await asyncio.sleep(1.0)
    await fetcher.stop()
    for writer in held:
        writer.close()
    server.close()
    return accepted


def test_a_leader_that_never_answers_is_given_up_and_asked_again(make_log):
    partition = Partition("t", 0, 2, make_log())
    partition.make_follower(1, 1, (1, 2), frozenset({1, 2}))
    settings = FetcherSettings(socket_timeout_ms=200, backoff_ms=50)

    connections = asyncio.run(follow_a_silent_leader(partition, settings))

    assert connections >= 3  # each request waited 0.2 s, then a new connection


def test_high_watermark_truncation_happens_before_any_word_from_the_leader(make_log):
    log = make_log()
    log.append_as_leader(message_set(10))
    log.high_watermark = 6
    partition = Partition("t", 0, 2, log)
    partition.make_follower(1, 1, (1, 2), frozenset({1, 2}))
    settings = FetcherSettings(truncation_mode="high-watermark")

    async def add_and_stop() -> None:
        fetcher = ReplicaFetcher(2, 1, lambda: None, settings)  # no leader reachable at all
        fetcher.add(partition)
        await fetcher.stop()

    asyncio.run(add_and_stop())

    assert log.log_end_offset == 6


class InProcessLeader:
    """Broker 1 leading topic t's ``partitions`` (t-0 alone by default) in this process: its
    real log manager, replica manager, request handler and Kafka protocol server, with the
    metadata filled in by hand."""

    def __init__(self, directory, clock, partitions: int = 1) -> None:  # type: ignore[no-untyped-def]
        config = parse_config({"log.dirs": str(directory)}, BROKER_KEYS)
        self.logs = LogManager([directory], config, clock=clock)
        self.logs.startup()
        self.metadata = MetadataCache()
        numbers = range(partitions)
        self.metadata.topics["t"] = TopicMetadata(
            "t", {n: (1, 2) for n in numbers}, {n: PartitionState(1, 3, (1, 2)) for n in numbers}
        )
        self.replicas = ReplicaManager(1, self.logs, self.metadata, clock)
        self.metrics = metrics = Metrics()
        handler = RequestHandler(
            1, self.replicas, self.metadata, metrics, clock, auto_create_topics=False, release="2.1"
        )
        self.server = KafkaServer(
            handler, metrics, host="127.0.0.1", port=0, max_request_bytes=100 * 1024 * 1024
        )

    @property
    def log(self):  # type: ignore[no-untyped-def]
        return self.log_of(0)

    def log_of(self, number: int):  # type: ignore[no-untyped-def]
        return self.logs.get_or_create("t", number)

    async def start(self) -> None:
        await self.server.bind()
        self.metadata.brokers[1] = BrokerEndpoint(1, "127.0.0.1", self.server.port)
        self.metadata.brokers[2] = BrokerEndpoint(2, "127.0.0.1", 1)
        self.replicas.apply_metadata()
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
        self.logs.shutdown()


async def follow_until(  # type: ignore[no-untyped-def]
    leader: InProcessLeader, partition: Partition, *steps, settings=None, throttle=None
) -> None:
    """Follows the leader with ``settings`` (and ``throttle``) until each of ``steps`` (a
    condition, and what to do once it holds, or None) has come true in turn."""
    await leader.start()
    settings = settings or FetcherSettings(truncation_mode="high-watermark")
    fetcher = ReplicaFetcher(
        2, 1, lambda: ("127.0.0.1", leader.server.port), settings, throttle=throttle
    )
    fetcher.add(partition)
    try:
        for done, then in steps:
            for _ in range(100):
                if done():
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the follower did not get in step with the leader")
            if then is not None:
                then()
    finally:
        await fetcher.stop()
        await leader.stop()


def test_a_follower_past_the_leaders_log_end_is_cut_back_to_it(tmp_path, make_log, clock):
    leader = InProcessLeader(tmp_path / "leader", clock)
    leader.log.append_as_leader(message_set(10))
    follower_log = make_log()
    follower_log.append_as_leader(message_set(15))  # five the leader never had
    follower_log.high_watermark = 15  # nothing to cut by its own high watermark
    partition = Partition("t", 0, 2, follower_log)
    partition.make_follower(1, 3, (1, 2), frozenset({1, 2}))

    asyncio.run(follow_until(leader, partition, (lambda: follower_log.log_end_offset == 10, None)))

    assert follower_log.log_end_offset == 10


def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path, make_log, clock):
    leader = InProcessLeader(tmp_path / "leader", clock)
    leader.log.truncate_fully_and_start_at(100)  # as retention leaves it
    leader.log.append_as_leader(message_set(5))
    follower_log = make_log()
    partition = Partition("t", 0, 2, follower_log)
    partition.make_follower(1, 3, (1, 2), frozenset({1, 2}))

    asyncio.run(follow_until(leader, partition, (lambda: follower_log.log_end_offset == 105, None)))

    assert (follower_log.log_start_offset, follower_log.log_end_offset) == (100, 105)


def test_partitions_wiped_together_take_their_state_from_the_tier_at_once(
    tmp_path, make_log, clock
):
    leader = InProcessLeader(tmp_path / "leader", clock, partitions=2)
    for number in (0, 1):  # offsets 0-99 are only in the tier, 100-104 on the leader's disk
        leader.log_of(number).truncate_fully_and_start_at(100, log_start_offset=0)
        leader.log_of(number).append_as_leader(message_set(5))
    followed = []
    for number in (0, 1):
        wiped = make_log(f"t-{number}", remote_storage_enable=True)
        partition = Partition("t", number, 2, wiped)
        partition.make_follower(1, 3, (1, 2), frozenset({1, 2}))
        followed.append(partition)
    asked: list[tuple[str, int]] = []

    async def from_the_tier(key: tuple[str, int], emptied: Log) -> None:
        # each waits for the other: one after the other, the first would wait for ever
        asked.append(key)
        while len(asked) < 2:
            await asyncio.sleep(0.01)
        assert emptied.log_end_offset == 100  # nothing fetched before the state is in

    async def rebuild() -> None:
        await leader.start()
        fetcher = ReplicaFetcher(
            2,
            1,
            lambda: ("127.0.0.1", leader.server.port),
            FetcherSettings(),
            remote_aux_state=from_the_tier,
        )
        for partition in followed:
            fetcher.add(partition)
        try:
            async with asyncio.timeout(10):
                while any(p.log.log_end_offset < 105 for p in followed):
                    await asyncio.sleep(0.05)
        finally:
            await fetcher.stop()
            await leader.stop()

    asyncio.run(rebuild())

    assert sorted(asked) == [("t", 0), ("t", 1)]
    assert [(p.log.log_start_offset, p.log.log_end_offset) for p in followed] == [(0, 105)] * 2


AT_PROTOCOL_2_1 = FetcherSettings(fetch_version=10, leader_epoch_version=2)


def test_a_follower_at_protocol_2_1_replicates_in_a_kafka_fetch_session(tmp_path, make_log, clock):
    leader = InProcessLeader(tmp_path / "leader", clock)
    leader.log.append_as_leader(message_set(10))
    follower_log = make_log()
    partition = Partition("t", 0, 2, follower_log)
    partition.make_follower(1, 3, (1, 2), frozenset({1, 2}))

    asyncio.run(
        follow_until(
            leader,
            partition,
            (lambda: follower_log.log_end_offset == 10, None),
            settings=AT_PROTOCOL_2_1,
        )
    )

    assert leader.metrics.requests["FETCH"] and not leader.metrics.requests["REPLICA_FETCH"]
    assert [s["replica_id"] for s in leader.replicas.fetch_sessions.describe()["sessions"]] == [2]


def test_a_follower_behind_the_leaders_epoch_is_fenced_until_it_learns_the_epoch(
    tmp_path, make_log, clock
):
    leader = InProcessLeader(tmp_path / "leader", clock)  # leads t-0 in epoch 3
    leader.log.append_as_leader(message_set(10))
    follower_log = make_log()
    partition = Partition("t", 0, 2, follower_log)
    partition.make_follower(1, 2, (1, 2), frozenset({1, 2}))  # has not heard of epoch 3 yet
    seen_fenced = []

    def fenced() -> bool:
        if leader.metrics.errors["FENCED_LEADER_EPOCH"]:
            seen_fenced.append(follower_log.log_end_offset)
        return bool(seen_fenced)

    asyncio.run(
        follow_until(
            leader,
            partition,
            (fenced, lambda: partition.make_follower(1, 3, (1, 2), frozenset({1, 2}))),
            (lambda: follower_log.log_end_offset == 10, None),
            settings=AT_PROTOCOL_2_1,
        )
    )

    assert seen_fenced == [0]  # nothing fetched while fenced


def a_throttled_follower(  # type: ignore[no-untyped-def]
    tmp_path, make_log, clock
) -> tuple[InProcessLeader, Partition, ReplicationThrottle]:
    """Broker 1 leading t-0 with ten messages and its ISR itself alone (so its high watermark
    is its log end, and no ZooKeeper to write the follower back in); broker 2's empty replica,
    and its follower quota of 200 bytes a second on t-0, which its metadata shows out of the
    ISR: a throttled replica."""
    leader = InProcessLeader(tmp_path / "leader", clock)
    leader.metadata.topics["t"].states[0] = PartitionState(1, 3, (1,))
    leader.log.append_as_leader(message_set(10))
    partition = Partition("t", 0, 2, make_log())
    partition.make_follower(1, 3, (1, 2), frozenset({1}))
    metadata = MetadataCache(
        topics={
            "t": TopicMetadata(
                "t",
                {0: (1, 2)},
                {0: PartitionState(1, 3, (1,))},
                {"follower.replication.throttled.replicas": "*"},
            )
        }
    )
    return leader, partition, ReplicationThrottle(2, metadata, follower_rate=200)


def test_a_throttled_follower_at_the_leaders_high_watermark_is_not_held_back(
    tmp_path, make_log, clock
):
    leader, partition, throttle = a_throttled_follower(tmp_path, make_log, clock)
    follower_log = partition.log
    record = throttle.follower.record
    charged: list[int] = []

    def spend_the_quota_and_append() -> None:
        record(10**9)  # spent for weeks
        throttle.follower.record = charged.append  # type: ignore[assignment]
        leader.log.append_as_leader(message_set(5))
        leader.log.high_watermark = 15

    asyncio.run(
        follow_until(
            leader,
            partition,
            (lambda: follower_log.log_end_offset == 10, spend_the_quota_and_append),
            # its last answer left it at the high watermark: its fetches go on, and the next
            # tells the leader it caught up (Kafka's rule against ISR thrashing)
            (lambda: follower_log.log_end_offset == 15, None),
            throttle=throttle,
        )
    )

    assert charged == [len(message_set(5))]  # what it fetched still counted


def test_a_throttled_follower_below_the_leaders_high_watermark_is_held_back(
    tmp_path, make_log, clock
):
    leader, partition, throttle = a_throttled_follower(tmp_path, make_log, clock)
    follower_log = partition.log
    one_message_a_fetch = FetcherSettings(truncation_mode="high-watermark", max_bytes=1)
    ends = []

    async def follow() -> None:
        await leader.start()
        fetcher = ReplicaFetcher(
            2,
            1,
            lambda: ("127.0.0.1", leader.server.port),
            one_message_a_fetch,
            throttle=throttle,
        )
        fetcher.add(partition)
        try:
            while follower_log.log_end_offset == 0:
                await asyncio.sleep(0.01)
            throttle.follower.record(10**9)
            await asyncio.sleep(0.3)  # a fetch already out lands
            ends.append(follower_log.log_end_offset)
            await asyncio.sleep(1.0)
            ends.append(follower_log.log_end_offset)
        finally:
            await fetcher.stop()
            await leader.stop()

    asyncio.run(follow())

    assert ends[0] == ends[1] < 10
