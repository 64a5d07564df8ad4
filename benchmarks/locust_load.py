"""The produce rate locust generates against three brokers, by client and by process count.

    .venv/bin/python benchmarks/locust_load.py [--seconds N] [--users N] [--workers N]

Unpaced producers (acks=1, 100-byte records, 16 KiB batches, a topic of 3 partitions with one
replica each, so that the brokers do as little as they can) for ``--seconds`` each:

- tidelog's locustfile, one user, one locust process;
- the baseline, in the same run: kafka-python's producer in one locust user, one process
  (benchmarks/locust_kafka_python.py; its sender thread is a greenlet under gevent, and each
  acknowledgement is timed from send() to its callback);
- tidelog's locustfile, ``--users`` users in one process;
- the same users spread over a master and ``--workers`` worker processes.

Records per second are the records on the brokers over the time from locust's start to its last
acknowledgement (locust's --json-file; a master's figures may miss its workers' last reports);
latencies are locust's median and 99th percentile. The brokers, ZooKeeper and locust share the
machine's cores, so the figures say how far one machine gets, not how far a client would get
alone. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import create_topic, quiet

from tidelog.cluster.local import LocalCluster
from tidelog.cluster.zookeeper import free_port
from tidelog.perf.locust.client import LATEST, BlockingClient

HERE = Path(__file__).resolve().parent
LOCUSTFILE = HERE.parent / "tidelog" / "perf" / "locust" / "locustfile.py"
BASELINE = HERE / "locust_kafka_python.py"
RECORD_SIZE, BATCH_BYTES = 100, 16384


def records_in(cluster: LocalCluster, topic: str) -> int:
    client = BlockingClient(cluster.bootstrap_servers)
    try:
        return sum(
            client.list_offsets(p.leader, topic, [p.partition], LATEST)[p.partition]
            for p in client.partitions(topic)
        )
    finally:
        client.close()


def run(
    locustfile: Path,
    cluster: LocalCluster,
    topic: str,
    users: int,
    seconds: int,
    directory: Path,
    workers: int = 0,
) -> dict:
    """One headless locust run; its statistics entry for the producers, and records/s."""
    result = directory / f"{topic}-{users}-{workers}"
    options = [
        "--bootstrap", cluster.bootstrap_servers, "--topic", topic, "--acks", "1",
        "--record-size", str(RECORD_SIZE), "--batch-bytes", str(BATCH_BYTES),
    ]  # fmt: skip
    headless = ["--headless", "-u", str(users), "-r", str(users), "-t", f"{seconds}s"]
    command = [sys.executable, "-m", "locust", "-f", str(locustfile)]
    started = []
    master = [*command, *headless, *options, "--json-file", str(result)]
    if locustfile == LOCUSTFILE:
        master.append("ProducerUser")
    if workers:
        port = free_port()
        master += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
        master += ["--expect-workers", str(workers)]
        for _ in range(workers):
            started.append(
                subprocess.Popen(
                    [
                        *command,
                        "--worker",
                        "--master-host",
                        "127.0.0.1",
                        "--master-port",
                        str(port),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    try:
        done = subprocess.run(master, capture_output=True, text=True, timeout=seconds + 120)
        if done.returncode not in (0, 1):  # 1: some requests failed, counted below
            raise RuntimeError(done.stderr[-2000:])
    finally:
        for worker in started:
            worker.wait(timeout=30)
    (entry,) = (
        e for e in json.loads(result.with_suffix(".json").read_text()) if e["method"] == "produce"
    )
    elapsed = entry["last_request_timestamp"] - entry["start_time"]
    records = records_in(cluster, topic)  # the master's figures may miss the workers' last
    times = sorted(int(t) for t, n in entry["response_times"].items() for _ in range(n))
    return {
        "records_per_second": records / elapsed,
        "failures": entry["num_failures"],
        "p50": times[len(times) // 2] if times else float("nan"),
        "p99": times[int(len(times) * 0.99)] if times else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        cluster = LocalCluster(directory / "cluster")
        cluster.up(3, progress=quiet)
        try:
            cases = [
                ("tidelog client, 1 user, 1 process", LOCUSTFILE, 1, 0),
                ("kafka-python (baseline), 1 user, 1 process", BASELINE, 1, 0),
                (
                    f"tidelog client, {arguments.users} users, 1 process",
                    LOCUSTFILE,
                    arguments.users,
                    0,
                ),
                (
                    f"tidelog client, {arguments.users} users, {arguments.workers} workers",
                    LOCUSTFILE,
                    arguments.users,
                    arguments.workers,
                ),
            ]
            figures = {}
            for number, (what, locustfile, users, workers) in enumerate(cases):
                topic = f"bench-{number}"
                create_topic(cluster, topic, partitions=3)
                figures[what] = run(
                    locustfile, cluster, topic, users, arguments.seconds, directory, workers
                )
                found = figures[what]
                print(
                    f"{what}: {found['records_per_second']:,.0f} records/s "
                    f"({found['records_per_second'] * RECORD_SIZE / 1e6:.2f} MB/s), "
                    f"p50 {found['p50']} ms, p99 {found['p99']} ms, "
                    f"{found['failures']} failures",
                    flush=True,
                )
            ours, baseline = (figures[what] for what, *_ in cases[:2])
            print(
                "tidelog client / kafka-python, one user: "
                f"{ours['records_per_second'] / baseline['records_per_second']:.1f}x"
            )
        finally:
            cluster.down(progress=quiet)


if __name__ == "__main__":
    main()
