"""Kafka load for locust against a tidelog (or any 0.10-speaking) cluster.

    locust -f tidelog/perf/locust/locustfile.py --headless -u 6 -r 6 -t 30s \\
        --bootstrap 127.0.0.1:19092 --topic events --acks all --rate-per-user 1

Users:

- ``ProducerUser`` sends message sets of ``--batch-bytes`` (records of ``--record-size`` bytes,
  ``--codec``, ``--keys`` distinct keys) with ``--acks``, in ``--message-format`` 1 (v1
  messages, Produce v2) or 2 (v2 record batches, Produce v3; v7 for zstd, a format 2.1
  topic's), each user at ``--rate-per-user`` MB/s
  times ``--scale``, paced like locust's ``constant_throughput`` (one task run is one batch)
  but making up time lost to slow acknowledgements (``Schedule``).
- ``InSyncConsumerUser`` is a member of one of ``--consumer-groups`` groups (users are dealt to
  them in turn, so N groups read the topic N times over: the design's in-sync consumers at 4x
  are four groups); it starts at the group's committed offsets or the log end, and commits.
- ``CatchUpConsumerUser`` reads every partition from the earliest offset, at
  ``--catch-up-rate-per-user`` MB/s times ``--scale`` (0: as fast as it can; paced as fetches of
  ``--fetch-bytes``, so the rate is an upper bound where partitions hold less); a partition read
  to its high watermark starts again from the earliest, so it keeps reading old data.

Every produce acknowledgement and every fetch fires a locust request event (type ``produce`` or
``fetch``; joins and commits of in-sync consumers as ``join`` and ``commit``) with its latency
and the bytes of keys and values it carried, so locust's statistics, CSV and web UI show them. A
Kafka error is a failure named with Kafka's error name (``KafkaError('NOT_ENOUGH_REPLICAS...``).
``--producers``, ``--in-sync-consumers`` and ``--catch-up-consumers`` fix how many users of each
class run (locust's ``fixed_count``); the workload files in ``workloads/`` set them.

The client is tidelog's blocking client (``tidelog/perf/locust/client.py``), not kafka-python:
see that package's docstring (``tidelog/perf/locust/__init__.py``) for the figures.
"""

from __future__ import annotations

import argparse
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust import User, events, task
from locust.env import Environment

from tidelog.errors import ErrorCode, KafkaError
from tidelog.perf.consumer import count_records
from tidelog.perf.locust.client import EARLIEST, LATEST, PRODUCE_VERSION, BlockingClient
from tidelog.perf.locust.group import COORDINATOR_MOVED, STALE_MEMBERSHIP, GroupMember
from tidelog.perf.producer import repeated_batch, repeated_message_set
from tidelog.protocol.client import PartitionLeader
from tidelog.records.format import Codec

MEGABYTE = 1_000_000
ACKS = {"all": -1, "-1": -1, "1": 1}
CODECS = {codec.name.lower(): codec for codec in Codec}
HEARTBEAT_INTERVAL = 1.0  # seconds; the session timeout is ten
COMMIT_INTERVAL = 1.0
# errors after which the partitions' leaders are looked up again
STALE_METADATA = {
    ErrorCode.NOT_LEADER_FOR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
}


def at_least(smallest: float, kind: type = int) -> Callable[[str], float]:
    """An argparse type that refuses values below ``smallest``, saying what is allowed."""

    def parse(text: str) -> float:
        value = kind(text)
        if value < smallest:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {smallest}")
        return value

    return parse


def greater_than_zero(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be greater than 0")
    return value


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    """tidelog's options: on the command line, in locust.conf files, in the web UI."""
    group = parser.add_argument_group("tidelog", "Kafka load on a tidelog cluster")
    group.add_argument("--bootstrap", default="127.0.0.1:9092", help="bootstrap servers")
    group.add_argument("--topic", default="locust", help="the topic to produce to and read")
    group.add_argument("--acks", choices=sorted(ACKS), default="all", help="producer acks")
    group.add_argument(
        "--record-size", type=at_least(1), default=484, help="bytes of value per record"
    )
    group.add_argument(
        "--batch-bytes",
        type=at_least(1),
        default=16384,
        help="a produce request's records (batch.size)",
    )
    group.add_argument(
        "--keys", type=at_least(0), default=0, help="distinct keys (0: records unkeyed)"
    )
    group.add_argument("--codec", choices=sorted(CODECS), default="none", help="compression")
    group.add_argument(
        "--message-format",
        type=int,
        choices=(1, 2),
        default=1,
        help="what producers send: 1, v1 messages (Produce v2); 2, v2 record batches "
        "(Produce v3, v7 with zstd)",
    )
    group.add_argument(
        "--rate-per-user",
        type=at_least(0, float),
        default=0,
        help="MB/s per producer user (0: unpaced)",
    )
    group.add_argument(
        "--catch-up-rate-per-user",
        type=at_least(0, float),
        default=0,
        help="MB/s per catch-up consumer user (0: unpaced)",
    )
    group.add_argument("--scale", type=greater_than_zero, default=1.0, help="multiplies every rate")
    group.add_argument(
        "--consumer-groups",
        type=at_least(1),
        default=1,
        help="groups the in-sync consumers are dealt to",
    )
    group.add_argument(
        "--group-prefix", default=None, help="consumer group ids (tidelog-locust-TOPIC-N)"
    )
    group.add_argument(
        "--fetch-bytes",
        type=at_least(1),
        default=1024 * 1024,
        help="max bytes per partition per fetch",
    )
    for name, what in (
        ("producers", "ProducerUser"),
        ("in-sync-consumers", "InSyncConsumerUser"),
        ("catch-up-consumers", "CatchUpConsumerUser"),
    ):
        group.add_argument(
            f"--{name}", type=at_least(0), default=None, help=f"run exactly this many {what}s"
        )
    group.add_argument("--seed", type=int, default=0, help="seeds payloads")


@events.init.add_listener
def fix_user_counts(environment: Environment, **_: Any) -> None:
    """--producers and friends become locust's fixed_count (on the master: it deals users)."""
    options = environment.parsed_options
    if options is None:
        return
    for user_class, count in (
        (ProducerUser, options.producers),
        (InSyncConsumerUser, options.in_sync_consumers),
        (CatchUpConsumerUser, options.catch_up_consumers),
    ):
        if count is not None:
            user_class.fixed_count = count


class Schedule:
    """One user's pacing: its task run k is due k / runs_per_second after the schedule was made
    (at the user's start), and ``wait`` sleeps until the next run is due, or not at all when the
    user is late. Like locust's constant_throughput, except that time lost to a slow answer is
    made up (as Kafka's producer perf test paces records): constant_throughput forgets it, which
    on this project's shared 2-core machine left a workload 18% short of its rate after a few
    stalled acknowledgements."""

    def __init__(self, runs_per_second: float) -> None:
        self.interval = 1 / runs_per_second
        self.next_due = time.monotonic()

    def wait(self) -> float:
        self.next_due += self.interval
        return max(0.0, self.next_due - time.monotonic())


def paced(megabytes_per_second: float, scale: float, bytes_per_run: int) -> Schedule | None:
    """A schedule for task runs that each move ``bytes_per_run`` bytes at the scaled rate; None
    for an unpaced user (a rate of 0)."""
    rate = megabytes_per_second * scale * MEGABYTE
    return Schedule(rate / bytes_per_run) if rate > 0 else None


class KafkaUser(User):
    """A user with its own blocking client; its events go to locust's request statistics."""

    abstract = True
    pacing: Schedule | None = None

    def wait_time(self) -> float:
        return self.pacing.wait() if self.pacing is not None else 0

    def on_start(self) -> None:
        self.options = self.environment.parsed_options
        self.client = BlockingClient(self.options.bootstrap)
        self.leaders: list[PartitionLeader] = []

    def on_stop(self) -> None:
        self.client.close()

    def refresh(self) -> None:
        self.leaders = self.client.partitions(self.options.topic)

    def fire(
        self,
        request_type: str,
        name: str,
        started: float,
        length: int = 0,
        exception: Exception | None = None,
    ) -> None:
        self.environment.events.request.fire(
            request_type=request_type,
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=length,
            exception=exception,
            context={},
        )

    def failed(self, request_type: str, name: str, started: float, error: Exception) -> None:
        """A failed request: reported; after a lost connection or an answer that says the
        leaders moved, they are looked up again before the next request."""
        self.fire(request_type, name, started, exception=error)
        if not isinstance(error, KafkaError) or error.code in STALE_METADATA:
            self.leaders = []


class ProducerUser(KafkaUser):
    """Produces one batch per task run to the partitions in turn (a keyed batch goes to its
    key's partition: key number k to partition k mod the partitions); the batch's
    acknowledgement is one request event whose length is the batch's key and value bytes."""

    def on_start(self) -> None:
        super().on_start()
        options = self.options
        self.acks = ACKS[options.acks]
        self.codec = CODECS[options.codec]
        if options.message_format == 2:  # v3 is the first with batches, v7 the first with zstd
            self.build, self.version = repeated_batch, 7 if self.codec == Codec.ZSTD else 3
        else:
            self.build, self.version = repeated_message_set, PRODUCE_VERSION
        self.payload = random.Random(options.seed).randbytes(options.record_size)
        self.per_batch = max(1, options.batch_bytes // options.record_size)
        self.keys = [f"key-{number}".encode() for number in range(options.keys)]
        self.name = f"{options.topic} acks={options.acks}"
        self.batches = itertools.count()
        batch_bytes = self.per_batch * options.record_size
        self.pacing = paced(options.rate_per_user, options.scale, batch_bytes)

    @task
    def produce(self) -> None:
        started = time.perf_counter()
        try:
            if not self.leaders:
                self.refresh()
            number = next(self.batches)
            key = None
            if self.keys:  # key k always to partition k mod the partitions
                number %= len(self.keys)
                key = self.keys[number]
            target = self.leaders[number % len(self.leaders)]
            records = self.build(
                self.payload, self.per_batch, int(time.time() * 1000), self.codec, key
            )
            started = time.perf_counter()
            code, _ = self.client.produce(
                target.leader,
                self.options.topic,
                target.partition,
                records,
                self.acks,
                self.version,
            )
        except (ConnectionError, KafkaError) as error:
            self.failed("produce", self.name, started, error)
            return
        if code != ErrorCode.NONE:
            self.failed("produce", self.name, started, KafkaError(code, self.name))
            return
        length = self.per_batch * (len(self.payload) + (len(key) if key else 0))
        self.fire("produce", self.name, started, length)


class _Reader(KafkaUser):
    """A consumer's fetch loop over ``offsets`` (partition → next offset to read): one fetch
    per task run, to the partitions' leaders in turn."""

    abstract = True
    kind = ""

    def on_start(self) -> None:
        super().on_start()
        self.offsets: dict[int, int] = {}
        self.name = f"{self.options.topic} {self.kind}"
        self.turns = itertools.count()

    def fetch(self, partitions: list[int], max_bytes: int) -> list[dict] | None:
        """Fetches ``partitions`` (all led by one broker) from their offsets; returns the
        partitions' answers, the event fired. None: the fetch failed (reported)."""
        leaders = {p.partition: p.leader for p in self.leaders}
        started = time.perf_counter()
        try:
            answers = self.client.fetch(
                leaders[partitions[0]],
                self.options.topic,
                {p: self.offsets[p] for p in partitions},
                max_bytes,
            )
        except ConnectionError as error:
            self.failed("fetch", self.name, started, error)
            return None
        length = 0
        for answer in answers:
            code = ErrorCode(answer["error_code"])
            if code != ErrorCode.NONE:
                self.failed("fetch", self.name, started, KafkaError(code, self.name))
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self.offsets.pop(answer["partition"])  # looked up again
                return None
            if answer["record_set"]:
                partition = answer["partition"]
                counted = count_records(answer["record_set"], self.offsets[partition], 2**62)
                self.offsets[partition] = counted.next_offset
                length += counted.record_bytes
        self.fire("fetch", self.name, started, length)
        return answers

    def by_leader(self, partitions: list[int]) -> list[list[int]]:
        grouped: dict[int, list[int]] = {}
        leaders = {p.partition: p.leader for p in self.leaders}
        for partition in partitions:
            grouped.setdefault(leaders[partition], []).append(partition)
        return [grouped[leader] for leader in sorted(grouped)]

    def start_offsets(self, partitions: list[int], timestamp: int) -> dict[int, int]:
        found: dict[int, int] = {}
        for led in self.by_leader(partitions):
            leader = next(p.leader for p in self.leaders if p.partition == led[0])
            found.update(self.client.list_offsets(leader, self.options.topic, led, timestamp))
        return found


_members = itertools.count()


class InSyncConsumerUser(_Reader):
    """A group member reading its assigned partitions at the log end (from the group's committed
    offsets, or the log end where there are none); heartbeats and commits between fetches."""

    kind = "in-sync"

    def on_start(self) -> None:
        super().on_start()
        runner = self.environment.runner
        worker = getattr(runner, "worker_index", 0) if runner is not None else 0
        number = (next(_members) + worker) % max(1, self.options.consumer_groups)
        prefix = self.options.group_prefix or f"tidelog-locust-{self.options.topic}"
        self.membership = GroupMember(self.client, f"{prefix}-{number}", self.options.topic)
        self.joined = False
        self.last_heartbeat = self.last_commit = time.monotonic()

    def on_stop(self) -> None:
        try:
            if self.joined:
                self.membership.commit(self.offsets)
                self.membership.leave()
        except (ConnectionError, KafkaError):
            pass  # the coordinator will time the member out
        super().on_stop()

    def join(self) -> None:
        started = time.perf_counter()
        if not self.leaders:
            self.refresh()
        assigned = self.membership.join([p.partition for p in self.leaders])
        self.offsets = {p: o for p, o in self.membership.committed().items() if p in assigned}
        self.joined = True
        self.fire("join", self.options.topic, started)

    @task
    def consume(self) -> None:
        started = time.perf_counter()
        try:
            if not self.leaders:
                self.refresh()
            if not self.joined:
                self.join()
            self.keep_membership()
            # no committed offset yet, or one out of range: from the log end
            missing = [p for p in self.membership.assigned if p not in self.offsets]
            if missing:
                self.offsets.update(self.start_offsets(missing, LATEST))
            if not self.offsets:  # more members than partitions: this one waits its turn
                time.sleep(HEARTBEAT_INTERVAL)
                return
        except (ConnectionError, KafkaError) as error:
            self.failed("join", self.options.topic, started, error)
            self.joined = False
            return
        groups = self.by_leader(sorted(self.offsets))
        self.fetch(groups[next(self.turns) % len(groups)], self.options.fetch_bytes)

    def keep_membership(self) -> None:
        """Heartbeats and commits when they are due; a rebalance means joining again."""
        now = time.monotonic()
        code = ErrorCode.NONE
        if now - self.last_commit >= COMMIT_INTERVAL and self.offsets:
            started = time.perf_counter()
            code = self.membership.commit(self.offsets)
            self.last_commit = self.last_heartbeat = now  # a commit proves liveness too
            if code not in STALE_MEMBERSHIP and code not in COORDINATOR_MOVED:
                failure = KafkaError(code, "commit") if code != ErrorCode.NONE else None
                self.fire("commit", self.options.topic, started, exception=failure)
        elif now - self.last_heartbeat >= HEARTBEAT_INTERVAL:
            code = self.membership.heartbeat()
            self.last_heartbeat = now
        if code in STALE_MEMBERSHIP:
            self.join()


class CatchUpConsumerUser(_Reader):
    """Reads every partition from the earliest offset, one partition per fetch; a partition
    read to its high watermark starts over from the earliest, so the reads stay on old data."""

    kind = "catch-up"

    def on_start(self) -> None:
        super().on_start()
        self.pacing = paced(
            self.options.catch_up_rate_per_user, self.options.scale, self.options.fetch_bytes
        )

    @task
    def consume(self) -> None:
        started = time.perf_counter()
        try:
            if not self.leaders:
                self.refresh()
            partitions = [p.partition for p in self.leaders]
            missing = [p for p in partitions if p not in self.offsets]
            if missing:
                self.offsets.update(self.start_offsets(missing, EARLIEST))
        except (ConnectionError, KafkaError) as error:
            self.failed("fetch", self.name, started, error)
            return
        partition = partitions[next(self.turns) % len(partitions)]
        answers = self.fetch([partition], self.options.fetch_bytes)
        for answer in answers or ():
            if self.offsets[answer["partition"]] >= answer["high_watermark"]:
                del self.offsets[answer["partition"]]  # read to the end: from the earliest again


# The imports above (pyarrow among them) can take seconds on a busy machine, and gevent's loop
# caches its clock: left stale, locust's --run-time timer, started next, would fire that much early.
gevent.get_hub().loop.update_now()
