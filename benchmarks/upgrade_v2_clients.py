"""A real client's produce on format v1 against v2, at the same offered rate: the upgrade's cost.

    .venv/bin/python benchmarks/upgrade_v2_clients.py [--seconds N] [--rate RECORDS_PER_S]

Three brokers of release 2.1 (inter.broker.protocol.version 2.1), one topic per case with three
partitions, replication factor 3, min.insync.replicas 2; confluent-kafka (librdkafka) produces
1 KiB records with acks=all at ``--rate`` records/s for ``--seconds``, plain and lz4:

- v1 topic, a 0.10-era client (``api.version.request=false``, ``broker.version.fallback=0.10.0``:
  Produce v2, v1 messages): the cluster before the upgrade, appended in place;
- v1 topic, a 2.1-era client (Produce v3+, v2 batches): between the upgrade's phases, new
  clients on a cluster still at format 0.10.0; the leader down-converts every batch to v1;
- v2 topic, a 2.1-era client: after phase 2, batches appended in place.

Records/s acknowledged, and the CPU time (user + system, /proc) the three brokers used per MB of
record payload acknowledged, with the load average at the end of each case. The brokers,
ZooKeeper and the client share the machine's cores. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from cluster import broker_cpu_seconds
from common import MB, RECORD, create_topic, quiet
from confluent_kafka import Producer

from tidelog.cluster.local import LocalCluster

RELEASE_2_1 = {"broker.protocol.max.version": "2.1", "inter.broker.protocol.version": "2.1"}
# log_level 3: librdkafka warns that these two settings are deprecated
OLD_CLIENT = {"api.version.request": "false", "broker.version.fallback": "0.10.0.0", "log_level": 3}
CASES = {  # name: (topic's message.format.version, client settings)
    "v1 topic, 0.10 client": ("0.10.0", OLD_CLIENT),
    "v1 topic, 2.1 client": ("0.10.0", {}),
    "v2 topic, 2.1 client": ("2.1", {}),
}


def produce(bootstrap: str, topic: str, client: dict, codec: str, rate: float, seconds: float):  # type: ignore[no-untyped-def]
    """(records acknowledged, errors, seconds from the first send to the last acknowledgement)."""
    acked, errors = [0], [0]

    def delivered(error, _message) -> None:  # type: ignore[no-untyped-def]
        if error is None:
            acked[0] += 1
        else:
            errors[0] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
            "enable.idempotence": False,
            **client,
        }
    )
    payloads = [random.Random(n).randbytes(RECORD) for n in range(64)]
    started = time.monotonic()
    total = int(rate * seconds)
    for number in range(total):
        due = started + number / rate
        while time.monotonic() < due:
            producer.poll(max(0.0, min(0.01, due - time.monotonic())))
        producer.produce(topic, payloads[number % 64], callback=delivered)
        if number % 100 == 0:
            producer.poll(0)
    producer.flush(60)
    return acked[0], errors[0], time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rate", type=float, default=3000, help="records/s offered")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-upgrade-v2-") as directory:
        cluster = LocalCluster(Path(directory))
        cluster.up(3, overrides=RELEASE_2_1, progress=quiet)
        try:
            print(
                f"confluent-kafka, acks=all, {RECORD} B records offered at {args.rate:.0f}/s "
                f"({args.rate * RECORD / MB:.1f} MB/s) for {args.seconds:.0f} s"
            )
            for codec in ("none", "lz4"):
                for number, (name, (message_format, client)) in enumerate(CASES.items()):
                    topic = f"bench-{codec}-{number}"
                    config = {"min.insync.replicas": "2", "message.format.version": message_format}
                    create_topic(cluster, topic, 3, 3, config)
                    os.sync()
                    cpu = broker_cpu_seconds(cluster)
                    acked, errors, seconds = produce(
                        cluster.bootstrap_servers, topic, client, codec, args.rate, args.seconds
                    )
                    used = broker_cpu_seconds(cluster) - cpu
                    megabytes = acked * RECORD / MB
                    load = os.getloadavg()[0]
                    print(
                        f"{codec:5} {name:22} {acked / seconds:7.0f} records/s  "
                        f"{megabytes / seconds:5.2f} MB/s  broker CPU {used:6.2f} s, "
                        f"{used / megabytes * 1000:6.1f} ms/MB  errors {errors}  load {load:.1f}"
                    )
        finally:
            cluster.down(progress=quiet)


if __name__ == "__main__":
    main()
