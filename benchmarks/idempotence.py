"""Idempotence's cost: acks=all through librdkafka with and without enable.idempotence, and a
leader's append in-process with and without producer ids.

    .venv/bin/python benchmarks/idempotence.py [--records 40000] [--rounds 2] [--partitions 6]
                                               [--batches 20000]

- cluster: 3 local brokers of release 2.1, a topic of format 2.1 with replication factor 3 and
  min.insync.replicas 2; confluent-kafka (librdkafka) sends ``--records`` 480-byte records,
  acks=all, as fast as it takes them, alternately without and with idempotence, ``--rounds``
  times each. Throughput (MB/s of record values) and the three brokers' CPU (utime + stime from
  /proc) per MB;
- append: ``Log.append_as_leader`` of ``--batches`` one-record batches, without a producer id
  and as one idempotent producer's sequence (the producer-state check and update), CPU time of
  this process (time.process_time) per thousand batches.

The load average is printed with each figure (the machine may be shared). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import create_topic
from tidelog.clock import ManualClock
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.processes import cpu_used_between
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.records.record_batch import BatchRecordInput, encode_batch

VALUE = 480


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0]


def produce(
    cluster: LocalCluster, topic: str, records: int, idempotent: bool
) -> tuple[float, float]:
    """(MB/s, broker CPU seconds per MB) of one run."""
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 5,
        }
    )
    value = os.urandom(VALUE)
    failed: list = []
    cpu_before, started = cluster.brokers_cpu(), time.monotonic()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value, key=b"%08d" % n, on_delivery=_count(failed))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(120) == 0 and failed == [], failed[:3]
    elapsed = time.monotonic() - started
    cpu = cpu_used_between(cpu_before, cluster.brokers_cpu())
    mb = records * VALUE / 1e6
    return mb / elapsed, cpu / mb


def _count(failed: list):
    return lambda error, _: failed.append(error) if error else None


def append_cost(batches: int, idempotent: bool) -> float:
    """CPU seconds per thousand one-record batches through Log.append_as_leader."""
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as directory:
        log = Log(Path(directory) / "t-0", LogConfig(message_format_version="2.1"), clock=clock)
        sets = [
            encode_batch(
                [BatchRecordInput(b"k", b"v" * VALUE, clock.milliseconds())],
                producer_id=7 if idempotent else -1,
                producer_epoch=0 if idempotent else -1,
                base_sequence=n if idempotent else -1,
            )
            for n in range(batches)
        ]
        started = time.process_time()
        for data in sets:
            log.append_as_leader(data, leader_epoch=0)
        cost = time.process_time() - started
        log.close()
    return cost / batches * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=40000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--batches", type=int, default=20000)
    args = parser.parse_args()

    for idempotent in (False, True, False, True):
        print(
            f"append {'idempotent' if idempotent else 'plain     '}: "
            f"{append_cost(args.batches, idempotent) * 1000:.1f} ms CPU per 1000 batches "
            f"(load {load()})",
            flush=True,
        )
    cluster = LocalCluster(tempfile.mkdtemp(prefix="idempotence-"))
    cluster.up(
        3,
        overrides={"broker.protocol.max.version": "2.1", "inter.broker.protocol.version": "2.1"},
        progress=lambda _: None,
    )
    try:
        topic = "bench"
        config = {"message.format.version": "2.1", "min.insync.replicas": "2"}
        create_topic(cluster, topic, args.partitions, 3, config)
        for _ in range(args.rounds):
            for idempotent in (False, True):
                rate, cpu = produce(cluster, topic, args.records, idempotent)
                print(
                    f"librdkafka acks=all {'idempotent' if idempotent else 'plain     '}: "
                    f"{rate:.2f} MB/s, brokers {cpu:.3f} CPU s per MB (load {load()})",
                    flush=True,
                )
    finally:
        cluster.down(progress=lambda _: None)


if __name__ == "__main__":
    main()
