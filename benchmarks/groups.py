"""Consumer groups on three brokers: offset commits per second and the time a group of 4 takes
to rebalance.

    .venv/bin/python benchmarks/groups.py [--seconds N] [--clients N]

- offset commits: ``--clients`` connections to a group's coordinator, each committing one
  partition's offset (OffsetCommit v2, written to ``__consumer_offsets`` with acks=all on three
  replicas) as fast as the answers come back; baseline, in the same run: the same connections
  producing one keyed message per request (Produce v2, acks=all) to a topic with three replicas,
  the write a commit makes without the coordinator around it;
- rebalance: four members join a new group at once, and later all rejoin (the rebalance a new
  subscription or a member's restart causes); the time from the first JoinGroup sent to the
  last SyncGroup answered. Baseline: one JoinGroup and one SyncGroup of a group of one.

Requests go out on tidelog's own protocol connections from this process; the brokers,
ZooKeeper and this process share the machine's cores. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from common import create_topic, quiet

from tidelog import runtime
from tidelog.cluster.local import LocalCluster
from tidelog.errors import ErrorCode
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set

SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x00"  # v0: topic "a"
NEW_SUBSCRIPTION = SUBSCRIPTION.replace(b"a", b"b")


async def coordinator(cluster: LocalCluster, group: str) -> Connection:
    """A connection to ``group``'s coordinator (``__consumer_offsets`` created if need be)."""
    port = next(iter(cluster.state.brokers.values())).port  # type: ignore[union-attr]
    bootstrap = await Connection.open("127.0.0.1", port)
    try:
        deadline = time.monotonic() + 60
        while True:
            found = await bootstrap.request(ApiKey.GROUP_COORDINATOR, 0, {"group_id": group})
            if found["error_code"] == 0:
                return await Connection.open(found["host"], found["port"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"no coordinator for {group}: error {found['error_code']}")
            await asyncio.sleep(0.2)
    finally:
        await bootstrap.close()


async def rate(
    connections: list[Connection],
    request: Callable[[Connection, int], Awaitable[dict]],
    seconds: float,
) -> tuple[float, list[float]]:
    """Requests per second over all connections, and each request's latency in ms."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def loop(connection: Connection) -> None:
        n = 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await request(connection, n)
            latencies.append((time.perf_counter() - started) * 1000)
            n += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in connections))
    return len(latencies) / (time.perf_counter() - started), latencies


def describe(name: str, per_second: float, latencies: list[float], baseline: float | None) -> str:
    ordered = sorted(latencies)
    text = (
        f"{name:40} {per_second:8.0f}/s  p50 {statistics.median(ordered):6.1f} ms  "
        f"p99 {ordered[int(len(ordered) * 0.99)]:6.1f} ms"
    )
    return text + (f"  ({per_second / baseline:.2f} of baseline)" if baseline else "")


async def commits(cluster: LocalCluster, seconds: float, clients: int) -> None:
    create_topic(cluster, "committed", partitions=1, replication_factor=3)
    create_topic(cluster, "produced", partitions=1, replication_factor=3)
    group = "bench-commits"
    first = await coordinator(cluster, group)
    connections = [first] + [
        await Connection.open(*first.writer.get_extra_info("peername")[:2])
        for _ in range(clients - 1)
    ]
    leader_port = await leader_port_of(cluster, "produced")
    producers = [await Connection.open("127.0.0.1", leader_port) for _ in range(clients)]

    async def produce(connection: Connection, n: int) -> dict:
        records = build_message_set([Record(b"key", b"%d" % n, int(time.time() * 1000))], magic=1)
        body = {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {"topic": "produced", "data": [{"partition": 0, "record_set": records}]}
            ],
        }
        return await connection.request(ApiKey.PRODUCE, 2, body)

    async def commit(connection: Connection, n: int) -> dict:
        body = {
            "group_id": group,
            "generation_id": -1,
            "member_id": "",
            "retention_time": -1,
            "topics": [
                {
                    "topic": "committed",
                    "partitions": [{"partition": 0, "offset": n, "metadata": ""}],
                }
            ],
        }
        answer = await connection.request(ApiKey.OFFSET_COMMIT, 2, body)
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0, answer
        return answer

    await rate(producers, produce, 1.0)  # warm-up
    produced, produce_latencies = await rate(producers, produce, seconds)
    print(
        describe(
            f"baseline: produce acks=all, {clients} clients", produced, produce_latencies, None
        )
    )
    committed, commit_latencies = await rate(connections, commit, seconds)
    print(describe(f"offset commits, {clients} clients", committed, commit_latencies, produced))
    for connection in connections + producers:
        await connection.close()


async def leader_port_of(cluster: LocalCluster, topic: str) -> int:
    port = next(iter(cluster.state.brokers.values())).port  # type: ignore[union-attr]
    connection = await Connection.open("127.0.0.1", port)
    try:
        metadata = await connection.request(ApiKey.METADATA, 1, {"topics": [topic]})
    finally:
        await connection.close()
    leader = metadata["topic_metadata"][0]["partition_metadata"][0]["leader"]
    return next(b["port"] for b in metadata["brokers"] if b["node_id"] == leader)


async def join_and_sync(
    connection: Connection, group: str, member_id: str, subscription: bytes = SUBSCRIPTION
) -> str:
    """Joins (or rejoins) and syncs as a client does: a rebalance that another member's join
    starts meanwhile (REBALANCE_IN_PROGRESS) means joining again."""
    while True:
        joined = await connection.request(
            ApiKey.JOIN_GROUP,
            1,
            {
                "group_id": group,
                "session_timeout": 10000,
                "rebalance_timeout": 10000,
                "member_id": member_id,
                "protocol_type": "consumer",
                "group_protocols": [{"protocol_name": "range", "protocol_metadata": subscription}],
            },
        )
        assert joined["error_code"] == 0, joined
        member_id = joined["member_id"]
        assignment = []
        if joined["leader_id"] == member_id:
            assignment = [
                {"member_id": m["member_id"], "member_assignment": b"x"} for m in joined["members"]
            ]
        synced = await connection.request(
            ApiKey.SYNC_GROUP,
            0,
            {
                "group_id": group,
                "generation_id": joined["generation_id"],
                "member_id": member_id,
                "group_assignment": assignment,
            },
        )
        if synced["error_code"] == 0:
            return member_id
        assert synced["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS, synced


async def rebalances(cluster: LocalCluster, rounds: int) -> None:
    single, forming, rejoining = [], [], []
    for number in range(rounds):
        group = f"bench-rebalance-{number}"
        alone = await coordinator(cluster, f"{group}-alone")
        started = time.perf_counter()
        await join_and_sync(alone, f"{group}-alone", "")
        single.append((time.perf_counter() - started) * 1000)
        await alone.close()

        connections = [await coordinator(cluster, group) for _ in range(4)]
        started = time.perf_counter()
        members = await asyncio.gather(*(join_and_sync(c, group, "") for c in connections))
        forming.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        # a new subscription: every member rejoins and the group rebalances
        await asyncio.gather(
            *(
                join_and_sync(c, group, m, NEW_SUBSCRIPTION)
                for c, m in zip(connections, members, strict=True)
            )
        )
        rejoining.append((time.perf_counter() - started) * 1000)
        for connection in connections:
            await connection.close()
    base = statistics.median(single)
    print(f"{'baseline: a group of 1 joins and syncs':40} {base:8.1f} ms (median of {rounds})")
    for name, times in (("a group of 4 forms", forming), ("a group of 4 rebalances", rejoining)):
        median = statistics.median(times)
        print(f"{name:40} {median:8.1f} ms (median of {rounds}, {median / base:.1f}x baseline)")


async def measure(cluster: LocalCluster, seconds: float, clients: int) -> None:
    await commits(cluster, seconds, clients)
    await rebalances(cluster, rounds=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each rate run")
    parser.add_argument("--clients", type=int, default=8, help="connections committing at once")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as directory:
        cluster = LocalCluster(Path(directory) / "cluster")
        cluster.up(3, progress=quiet)
        try:
            runtime.run(measure(cluster, args.seconds, args.clients))
        finally:
            cluster.down(progress=quiet)


if __name__ == "__main__":
    main()
