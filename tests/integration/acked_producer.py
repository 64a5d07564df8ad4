"""A librdkafka producer (confluent-kafka) at a fixed offered rate, with acks=all, that records
when each partition's messages were acknowledged and which deliveries failed: what a scenario
that moves leadership under load checks (nothing failed, nothing acknowledged lost) and
measures (the longest time a partition went without an acknowledgement)."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Producer


@dataclass
class AckedProducer:
    """Sends ``rate`` messages a second round-robin over the partitions of ``topic`` from a
    thread until ``stop``. ``acked`` holds (partition, offset, value) of every acknowledged
    message, ``ack_times`` (partition, when) of each acknowledgement (monotonic), ``failed``
    the errors of failed deliveries. librdkafka's defaults, except acks=all and ``extra``."""

    bootstrap_servers: str
    topic: str
    partitions: int
    rate: int = 200
    extra: dict = field(default_factory=dict)
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)
    ack_times: list[tuple[int, float]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def _delivered(self, error: KafkaError | None, message) -> None:
        with self._lock:
            if error is not None:
                self.failed.append(str(error))
            else:
                self.acked.append((message.partition(), message.offset(), message.value()))
                self.ack_times.append((message.partition(), time.monotonic()))

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap_servers, "acks": "all", **self.extra}
        )
        sent = 0
        started = time.monotonic()
        while not self._stop.is_set():
            due = started + sent / self.rate
            pause = due - time.monotonic()
            if pause > 0:
                producer.poll(min(pause, 0.05))
                continue
            value = b"%08d" % sent
            producer.produce(
                self.topic, value, partition=sent % self.partitions, on_delivery=self._delivered
            )
            sent += 1
            producer.poll(0)
        self.unflushed = producer.flush(60)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time in [start, end] that a partition went without an acknowledgement,
        in seconds (the worst partition)."""
        with self._lock:
            ack_times = list(self.ack_times)
        gaps = []
        for partition in range(self.partitions):
            times = [start] + [t for p, t in ack_times if p == partition and start <= t <= end]
            gaps += [later - earlier for earlier, later in itertools.pairwise([*times, end])]
        return max(gaps)
