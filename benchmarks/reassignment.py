"""How long a partition reassignment takes for a given history, unthrottled and throttled
(KIP-73), through `tidelog topic reassign` on 4 local brokers.

    .venv/bin/python benchmarks/reassignment.py [--megabytes 16] [--throttle 4000000]

A topic of 2 partitions, replication factor 2, on brokers 1 and 2 gets the history (1 KiB
records), then both partitions move to brokers 3 and 4; the time is from --execute to the new
assignment in ZooKeeper. Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka import KafkaProducer

from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper


def one_run(megabytes: int, throttle: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        cluster = LocalCluster(Path(directory))
        cluster.up(4, progress=lambda _: None)
        try:
            with zookeeper.session(cluster.zookeeper) as client:
                topics.create_topic(client, "history", -1, -1, assignment={0: [1, 2], 1: [2, 1]})
            wait_for_full_isr(cluster, "history")
            producer = KafkaProducer(
                bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=20
            )
            for n in range(megabytes * 1024):
                producer.send("history", b"x" * 1024, partition=n % 2)
            producer.flush(120)
            producer.close()
            plan = Path(directory) / "plan.json"
            plan.write_text(
                json.dumps(
                    {
                        "version": 1,
                        "partitions": [
                            {"topic": "history", "partition": 0, "replicas": [3, 4]},
                            {"topic": "history", "partition": 1, "replicas": [4, 3]},
                        ],
                    }
                )
            )
            command = [sys.executable, "-m", "tidelog.cli", "topic", "reassign", "--dir",
                       directory, "--execute", "--reassignment-json-file", str(plan)]  # fmt: skip
            if throttle > 0:
                command += ["--throttle", str(throttle)]
            started = time.monotonic()
            subprocess.run(command, check=True, capture_output=True)

            def moved() -> bool:
                with zookeeper.session(cluster.zookeeper) as client:
                    found = zookeeper.read_topic(client, "history")
                return found is not None and found.assignment == {0: (3, 4), 1: (4, 3)}

            wait_until(moved, 600, "the move to finish", interval=0.2)
            return time.monotonic() - started
        finally:
            cluster.down(progress=lambda _: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=16, help="history, in MiB")
    parser.add_argument("--throttle", type=int, default=4_000_000, help="bytes a second")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    unthrottled = one_run(args.megabytes, 0)
    throttled = one_run(args.megabytes, args.throttle)
    print(f"history {args.megabytes} MiB over 2 partitions, moved to 2 other brokers:")
    print(f"  unthrottled: {unthrottled:.1f} s")
    print(f"  --throttle {args.throttle} B/s: {throttled:.1f} s")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
