"""Single-broker figures, next to the raw loopback TCP throughput measured in the same run.

    .venv/bin/python benchmarks/broker.py [--seconds N]

- baseline: one TCP connection over loopback, 1 MiB writes to a reader that discards them;
- produce latency at 55 MB/s, the per-broker acks=1 rate of the tiered-storage design's test bed
  (run first, on a broker without any writeback pending);
- unthrottled acks=1 produce of 1 KiB records (tidelog's pipelined client, 256 KiB batches);
- consume of everything produced.

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

from common import MB, RECORD, create_topic, quiet

from tidelog import runtime
from tidelog.cluster.local import LocalCluster
from tidelog.perf.consumer import run_consumer
from tidelog.perf.producer import ProducerSettings, run_producer


def loopback_throughput(seconds: float) -> float:
    """MB/s through one loopback TCP connection: blocking sockets, a thread on each end."""
    listener = socket.create_server(("127.0.0.1", 0))
    received = 0

    def discard() -> None:
        nonlocal received
        connection, _ = listener.accept()
        buffer = bytearray(1 << 20)
        with connection:
            while count := connection.recv_into(buffer):
                received += count

    reader = threading.Thread(target=discard)
    reader.start()
    chunk = bytes(1 << 20)
    with socket.create_connection(listener.getsockname()) as sender:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            sender.sendall(chunk)
    reader.join()
    elapsed = time.perf_counter() - started
    listener.close()
    return received / elapsed / MB


async def measure(cluster: LocalCluster, seconds: float) -> None:
    bootstrap = cluster.bootstrap_servers
    baseline = loopback_throughput(seconds)
    print(f"baseline: loopback TCP, one connection: {baseline:,.0f} MB/s")

    create_topic(cluster, "paced")
    rate = 55 * MB / RECORD
    paced, errors = await run_producer(
        bootstrap,
        ProducerSettings(
            "paced", int(rate * seconds), RECORD, throughput=rate, acks=1, batch_size=256 * 1024
        ),
        progress=quiet,
    )
    latency = paced.latency()
    print(
        f"produce, acks=1, at 55 MB/s: achieved {paced.megabytes_per_second:,.1f} MB/s, "
        f"latency avg {latency['avg']:.1f} ms, p50 {latency['p50']:.1f} ms, "
        f"p95 {latency['p95']:.1f} ms, p99 {latency['p99']:.1f} ms, max {latency['max']:.1f} ms"
        + (f"; errors {errors}" if errors else "")
    )

    os.sync()  # the paced run's writeback is not the next run's business
    create_topic(cluster, "unthrottled")
    records = int(seconds * 120 * MB / RECORD)
    settings = ProducerSettings("unthrottled", records, RECORD, acks=1, batch_size=256 * 1024)
    produced, errors = await run_producer(bootstrap, settings, progress=quiet)
    latency = produced.latency()
    print(
        f"produce, acks=1, unthrottled: {produced.megabytes_per_second:,.1f} MB/s "
        f"({produced.records_per_second:,.0f} records/s), p95 {latency['p95']:.1f} ms, "
        f"p99 {latency['p99']:.1f} ms; {produced.megabytes_per_second / baseline:.3f} of loopback"
        + (f"; errors {errors}" if errors else "")
    )

    consumed = await run_consumer(
        bootstrap, "unthrottled", produced.records, fetch_size=4 << 20, progress=quiet
    )
    print(
        f"consume: {consumed.megabytes_per_second:,.1f} MB/s "
        f"({consumed.records_per_second:,.0f} records/s) of {consumed.records:,} records; "
        f"{consumed.megabytes_per_second / baseline:.3f} of loopback"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    args = parser.parse_args()
    os.sync()  # the previous benchmark's writeback is not this one's
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as directory:
        cluster = LocalCluster(Path(directory) / "cluster")
        cluster.up(1, progress=quiet, overrides={"log.segment.bytes": str(256 * 1024 * 1024)})
        try:
            runtime.run(measure(cluster, args.seconds))
        finally:
            cluster.down(progress=quiet)


if __name__ == "__main__":
    main()
