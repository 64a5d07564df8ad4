"""The longest time a partition goes without an acks=all acknowledgement while `tidelog cluster
stop N` stops the broker leading the most partitions, with controlled shutdown (Kafka's default)
and without.

    .venv/bin/python benchmarks/controlled_shutdown.py [--rate 500] [--runs 3]

librdkafka (confluent-kafka) at its defaults with acks=all, a fixed offered rate round-robin over
6 partitions of replication factor 3 (min.insync.replicas 2) on 3 local brokers. The window is
from the stop command to 10 s after it. Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.acked_producer import AckedProducer
from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper

TOPIC = "bench"
PARTITIONS = 6


def one_run(controlled: bool, rate: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as directory:
        cluster = LocalCluster(Path(directory))
        cluster.up(
            3,
            overrides={
                "controlled.shutdown.enable": str(controlled).lower(),
                "min.insync.replicas": "2",
            },
            progress=lambda _: None,
        )
        try:
            with zookeeper.session(cluster.zookeeper) as client:
                topics.create_topic(client, TOPIC, PARTITIONS, 3)
            wait_for_full_isr(cluster, TOPIC)
            with zookeeper.session(cluster.zookeeper) as client:
                found = zookeeper.read_topic(client, TOPIC)
            assert found is not None
            led = [state.leader for state in found.states.values()]
            stopping = max(set(led), key=led.count)
            producer = AckedProducer(cluster.bootstrap_servers, TOPIC, PARTITIONS, rate).start()
            wait_until(lambda: producer.count() > 2 * rate, 60, "two seconds of acknowledgements")
            start = time.monotonic()
            cluster.stop_broker(stopping)
            wait_until(lambda: time.monotonic() > start + 10, 20, "10 s after the stop")
            producer.stop()
            return producer.longest_gap(start, start + 10), len(producer.failed)
        finally:
            cluster.down(progress=lambda _: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=500, help="messages per second offered")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    for controlled in (True, False):
        gaps = [one_run(controlled, args.rate) for _ in range(args.runs)]
        label = "controlled shutdown" if controlled else "no controlled shutdown"
        print(
            f"{label:24}: longest gap without an acks=all acknowledgement "
            + ", ".join(f"{gap * 1000:.0f} ms ({failed} failed)" for gap, failed in gaps)
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
