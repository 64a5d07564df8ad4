"""Three brokers, replication factor 3, min.insync.replicas 2, 1 KiB records, on this machine.

    .venv/bin/python benchmarks/cluster.py [--seconds N]

- baseline, in the same run on the same cluster: unthrottled acks=1 produce to a topic with one
  replica, so the ratios show what replication costs;
- acks=all at 30 MB/s and acks=1 at 55 MB/s (the tiered-storage design's per-broker rates; there
  the p99 was 21 ms and 9 ms on 20-core machines): p95 and p99 produce latency;
- the largest rate each sustains: an unthrottled run;
- for each run, how many of the machine's cores the three brokers kept busy.

The producer is tidelog's pipelined client with 128 KiB batches and 3 ms linger (smaller
batches overload the brokers at these rates: a request costs more than its bytes), in this
process; the three brokers and ZooKeeper share the machine's cores with it, all on uvloop
(tidelog/runtime.py). The run starts with os.sync(), so that what an earlier benchmark left
for the kernel to write back is not measured here. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import MB, RECORD, create_topic, quiet

from tidelog import runtime
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.processes import cpu_used_between
from tidelog.perf.producer import ProducerSettings, run_producer

REPLICATED = {"min.insync.replicas": "2"}


async def produce(cluster: LocalCluster, topic: str, acks: int, seconds: float, rate: float = -1):  # type: ignore[no-untyped-def]
    """Returns the run's summary, its errors, and the cores the brokers kept busy."""
    records = int((rate if rate > 0 else 80 * MB / RECORD) * seconds)
    settings = ProducerSettings(
        topic, records, RECORD, throughput=rate, acks=acks, batch_size=128 * 1024, linger_ms=3
    )
    cpu = cluster.brokers_cpu()
    summary, errors = await run_producer(cluster.bootstrap_servers, settings, progress=quiet)
    cores = cpu_used_between(cpu, cluster.brokers_cpu()) / summary.seconds
    os.sync()  # the next run starts without this one's writeback
    return summary, errors, cores


def line(name: str, summary, errors, cores: float, baseline: float | None = None) -> str:  # type: ignore[no-untyped-def]
    latency = summary.latency()
    text = (
        f"{name:34} {summary.megabytes_per_second:7.1f} MB/s  p50 {latency['p50']:6.1f} ms  "
        f"p95 {latency['p95']:6.1f} ms  p99 {latency['p99']:6.1f} ms  max {latency['max']:6.1f} ms"
        f"  brokers {cores:4.2f} cores"
    )
    if baseline:
        text += f"  ({summary.megabytes_per_second / baseline:.2f} of baseline)"
    if errors:
        text += f"  errors {errors}"
    return text


async def measure(cluster: LocalCluster, seconds: float) -> None:
    create_topic(cluster, "baseline", partitions=3, replication_factor=1)
    baseline, errors, cores = await produce(cluster, "baseline", 1, seconds)
    print(line("baseline: 1 replica, acks=1, max", baseline, errors, cores))
    base = baseline.megabytes_per_second
    for acks, rate_mb, name in ((-1, 30, "acks=all"), (1, 55, "acks=1")):
        topic = f"replicated-{name.replace('=', '-')}"
        create_topic(cluster, topic, partitions=3, replication_factor=3, config=REPLICATED)
        paced, errors, cores = await produce(cluster, topic, acks, seconds, rate_mb * MB / RECORD)
        print(line(f"3 replicas, {name} at {rate_mb} MB/s", paced, errors, cores, base))
        fastest, errors, cores = await produce(cluster, topic, acks, seconds)
        print(line(f"3 replicas, {name}, max", fastest, errors, cores, base))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each run")
    args = parser.parse_args()
    os.sync()  # the previous benchmark's writeback is not this one's
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as directory:
        cluster = LocalCluster(Path(directory) / "cluster")
        cluster.up(3, progress=quiet)
        try:
            runtime.run(measure(cluster, args.seconds))
        finally:
            cluster.down(progress=quiet)


if __name__ == "__main__":
    main()
