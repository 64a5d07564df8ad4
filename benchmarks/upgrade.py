"""Upgrade paths on three brokers: phase durations, produce p99 during the rolling bounces, and
fetch throughput of a v0 consumer on v1 data (down-converted) next to a v1 consumer (zero copy).

    .venv/bin/python benchmarks/upgrade.py [--mb N] [--seconds N]

- A cluster starts at release 0.9.0 and gets a topic with replication factor 3 holding --mb MB
  of 1 KB messages (format v0) on each broker; `tidelog upgrade run --to 0.10.0` then takes it
  through the three rolls; each phase's time is read from the journal.
- Produce latency: one acks=all producer (Produce v1, 1 KB, one message a request, 50 a second,
  topic with replication factor 3 and min.insync.replicas 2) runs for --seconds before the
  upgrade (the baseline) and throughout it; p50/p99 of the acknowledged requests of each.
- Fetch: after the upgrade, a topic of --mb MB written in format v1 is read whole by Fetch v1
  (the broker down-converts every message set to v0) and by Fetch v2 (sent with sendfile), 1 MB
  a request, alternately three times; the best of each, and their ratio.

Brokers, ZooKeeper and this process share the machine's cores. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from common import MB, RECORD, create_topic, quiet

from tidelog import runtime
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set
from tidelog.upgrade.run import UpgradeRun

BATCH = 100


def produce_body(topic: str, records: bytes, acks: int) -> dict:
    data = [{"partition": 0, "record_set": records}]
    return {"acks": acks, "timeout": 30000, "topic_data": [{"topic": topic, "data": data}]}


async def leader_connection(cluster: LocalCluster, topic: str) -> Connection:
    from tidelog.protocol.client import Client

    client = Client(cluster.bootstrap_servers)
    (partition,) = await client.partitions(topic)
    port = cluster.broker(partition.leader).port
    await client.close()
    return await Connection.open("127.0.0.1", port)


async def fill(cluster: LocalCluster, topic: str, megabytes: int, magic: int) -> None:
    connection = await leader_connection(cluster, topic)
    value = b"x" * RECORD
    now = int(time.time() * 1000)
    batch = build_message_set([Record(None, value, now)] * BATCH, magic=magic)
    for _ in range(megabytes * MB // (RECORD * BATCH)):
        await connection.request(ApiKey.PRODUCE, 2 if magic else 1, produce_body(topic, batch, -1))
    await connection.close()


async def read_all(cluster: LocalCluster, topic: str, version: int) -> tuple[int, float]:
    connection = await leader_connection(cluster, topic)
    offset, total = 0, 0
    started = time.perf_counter()
    while True:
        wanted = {"partition": 0, "fetch_offset": offset, "max_bytes": MB}
        body = {
            "replica_id": -1,
            "max_wait_time": 0,
            "min_bytes": 0,
            "topics": [{"topic": topic, "partitions": [wanted]}],
        }
        answer = (await connection.request(ApiKey.FETCH, version, body))["responses"][0][
            "partition_responses"
        ][0]
        records = bytes(answer["record_set"] or b"")
        if not records:
            break
        total += len(records)
        offset = last_offset(records) + 1
    seconds = time.perf_counter() - started
    await connection.close()
    return total, seconds


def last_offset(records: bytes) -> int:
    """The offset of the last whole entry of a message set."""
    position, last = 0, -1
    while position + 12 <= len(records):
        offset = int.from_bytes(records[position : position + 8], "big", signed=True)
        size = int.from_bytes(records[position + 8 : position + 12], "big", signed=True)
        if position + 12 + size > len(records):
            break
        last, position = offset, position + 12 + size
    return last


async def latency_producer(cluster: LocalCluster, topic: str, stop: asyncio.Event, out: list):
    """(time, seconds) of each acknowledged acks=all request; failures as (time, None)."""
    from tidelog.protocol.client import Client

    client = Client(cluster.bootstrap_servers)
    records = build_message_set([Record(None, b"y" * RECORD, 0)], magic=0)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            (partition,) = await client.partitions(topic, wait=5)
            connection = await client.connection(partition.leader)
            async with asyncio.timeout(30):
                answer = await connection.request(
                    ApiKey.PRODUCE, 1, produce_body(topic, records, -1)
                )
            code = answer["responses"][0]["partition_responses"][0]["error_code"]
            out.append((time.monotonic(), None if code else time.perf_counter() - started))
        except (OSError, ConnectionError, TimeoutError, KeyError, Exception):
            await client.close()
            out.append((time.monotonic(), None))
        await asyncio.sleep(max(0.0, 0.02 - (time.perf_counter() - started)))
    await client.close()


def percentiles(samples: list) -> str:
    ok = sorted(s for _, s in samples if s is not None)
    failed = sum(1 for _, s in samples if s is None)
    if not ok:
        return f"no acknowledged requests ({failed} failed)"
    p99 = ok[min(len(ok) - 1, int(len(ok) * 0.99))]
    return (
        f"p50 {statistics.median(ok) * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms  "
        f"({len(ok)} acknowledged, {failed} failed)"
    )


async def main(megabytes: int, seconds: float) -> None:
    directory = Path(tempfile.mkdtemp(prefix="tidelog-bench-upgrade-"))
    cluster = LocalCluster(directory)
    overrides = {**SCENARIO_OVERRIDES, "log.segment.bytes": str(64 * MB)}
    overrides["broker.protocol.max.version"] = "0.9.0"
    cluster.up(3, overrides=overrides, progress=quiet)
    try:
        create_topic(cluster, "bulk", replication_factor=3)
        create_topic(cluster, "latency", replication_factor=3, config={"min.insync.replicas": "2"})
        started = time.perf_counter()
        await fill(cluster, "bulk", megabytes, magic=0)
        print(f"filled {megabytes} MB (x3 replicas) in {time.perf_counter() - started:.1f} s")
        stop, samples = asyncio.Event(), []
        producer = asyncio.create_task(latency_producer(cluster, "latency", stop, samples))
        await asyncio.sleep(seconds)
        upgrade_started = time.monotonic()
        journal = await asyncio.to_thread(UpgradeRun(cluster, "0.10.0", progress=quiet).run)
        stop.set()
        await producer
        steady = [s for s in samples if s[0] < upgrade_started]
        rolling = [s for s in samples if s[0] >= upgrade_started]
        print(f"\nupgrade 0.9.0 -> 0.10.0, 3 brokers with {megabytes} MB each:")
        for name, phase in journal.phases.items():
            print(f"  {name:32} {phase['seconds']:7.1f} s")
        print(f"  {'total':32} {time.monotonic() - upgrade_started:7.1f} s")
        print("\nproduce, acks=all, 1 KB (Produce v1):")
        print(f"  steady state ({seconds:.0f} s)         {percentiles(steady)}")
        print(f"  during the rolling bounces    {percentiles(rolling)}")
        create_topic(cluster, "v1data", replication_factor=1)
        await fill(cluster, "v1data", megabytes, magic=1)
        best: dict[int, float] = {}
        for _ in range(3):
            for version in (1, 2):
                size, took = await read_all(cluster, "v1data", version)
                best[version] = max(best.get(version, 0.0), size / MB / took)
        print(f"\nfetch of {megabytes} MB of format v1 data, 1 MB a request (best of 3):")
        print(f"  Fetch v2, zero copy (baseline)   {best[2]:8.1f} MB/s")
        print(f"  Fetch v1, down-converted to v0   {best[1]:8.1f} MB/s")
        print(f"  ratio v1/v2                      {best[1] / best[2]:8.2f}")
    finally:
        cluster.down(progress=quiet)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50, help="MB per broker (default 50)")
    parser.add_argument("--seconds", type=float, default=10, help="steady-state seconds")
    arguments = parser.parse_args()
    runtime.run(main(arguments.mb, arguments.seconds))
