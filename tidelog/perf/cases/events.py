"""The three cases and what goes in during each: nothing (normal traffic), out-of-sync consumers
reading from the earliest offset, or a broker killed and wiped before the traffic and rebuilt
during it, its duration measured until it is back in every ISR."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tidelog import rundata
from tidelog.cluster import faults
from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.controller import zookeeper
from tidelog.perf.cases.clusters import (
    BROKER_OVERRIDES,
    TOPIC,
    local_bytes,
    set_rebuild_throttle,
)
from tidelog.perf.cases.profiles import MB, Profile
from tidelog.perf.readers import Reader, ReaderSettings

REBUILD_POLL_INTERVAL = 0.2
PROGRESS_INTERVAL = 5.0


@dataclass
class RunContext:
    """What a case's event acts on, and what it records. ``events`` only grows."""

    cluster: LocalCluster
    profile: Profile
    tiered: bool
    bootstrap_servers: str
    stop: asyncio.Event
    progress: Callable[[str], None]
    events: list[rundata.Event] = field(default_factory=list)
    readers: list[Reader] = field(default_factory=list)
    reader_tasks: list[asyncio.Task] = field(default_factory=list)
    rebuilt_broker: int | None = None

    def record(self, event: rundata.Event) -> None:
        self.events.append(event)
        self.progress(f"  event {event.kind} on {event.target}: {event.detail}")

    def start_reader(self, settings: ReaderSettings) -> None:
        reader = Reader(self.bootstrap_servers, settings)
        self.readers.append(reader)
        self.reader_tasks.append(asyncio.create_task(reader.run(self.stop)))


@dataclass(frozen=True)
class Case:
    """A test case: its event (None: none), when it goes in (a fraction of the duration), what
    is done before the traffic starts, and whether the figure is the average or the largest
    window p99."""

    name: str
    title: str
    figure: str  # "avg" or "max"
    event_at: float
    before: Callable[[RunContext], Coroutine[Any, Any, None]] | None
    event: Callable[[RunContext], Coroutine[Any, Any, None]] | None


async def start_catch_up_readers(context: RunContext) -> None:
    profile = context.profile
    count = profile.catch_up_consumers
    each = profile.catch_up_mb_per_broker * profile.brokers * MB / count
    for number in range(1, count + 1):
        context.start_reader(
            ReaderSettings(
                f"catching-up-{number}", TOPIC, from_start=True, max_bytes_per_second=each
            )
        )
    context.record(
        rundata.Event(
            time.time(),
            "catch_up_consumers",
            f"{count} consumers",
            None,
            f"{count} out-of-sync consumers read from the earliest offset, "
            f"{each / MB:.2f} MB/s each at most",
        )
    )


def _rebuild_target(cluster: LocalCluster) -> int:
    """The broker to rebuild: the highest id that is not the controller."""
    with zookeeper.session(cluster.zookeeper) as client:
        controller = zookeeper.read_controller(client)
    return max(b for b in cluster.broker_ids if b != controller)


def in_no_isr(cluster: LocalCluster, topic: str, broker_id: int) -> bool:
    with zookeeper.session(cluster.zookeeper) as client:
        metadata = zookeeper.read_topic(client, topic)
    return metadata is not None and all(
        broker_id not in state.isr for state in metadata.states.values()
    )


def isrs_holding(cluster: LocalCluster, topic: str, broker_id: int) -> tuple[int, int]:
    """(ISRs that hold ``broker_id``, partitions it is a replica of), as ZooKeeper says. The
    other replicas may lag meanwhile: on a loaded machine their ISRs come and go."""
    with zookeeper.session(cluster.zookeeper) as client:
        metadata = zookeeper.read_topic(client, topic)
    if metadata is None:
        return 0, -1
    mine = [number for number, replicas in metadata.assignment.items() if broker_id in replicas]
    holding = sum(
        1
        for number in mine
        if number in metadata.states and broker_id in metadata.states[number].isr
    )
    return holding, len(mine)


async def kill_and_wipe(context: RunContext) -> None:
    """Before the traffic: the broker is killed, the cluster sees it gone (and out of every ISR,
    so that acks=all waits for the live replicas only), and its data is wiped."""
    cluster = context.cluster
    broker_id = await asyncio.to_thread(_rebuild_target, cluster)
    context.rebuilt_broker = broker_id
    killed_at = time.time()
    session_timeout_s = int(BROKER_OVERRIDES["zookeeper.session.timeout.ms"]) / 1000
    log_dirs = await asyncio.to_thread(
        faults.kill_and_wipe, cluster, broker_id, session_timeout_s=session_timeout_s
    )
    lag_s = int(BROKER_OVERRIDES["replica.lag.time.max.ms"]) / 1000
    await asyncio.to_thread(
        wait_until,
        lambda: in_no_isr(cluster, TOPIC, broker_id),
        lag_s * 3 + 30,
        f"broker {broker_id} to leave every ISR of {TOPIC}",
        0.2,
    )
    context.record(
        rundata.Event(
            killed_at,
            "kill_and_wipe",
            f"broker {broker_id}",
            (time.time() - killed_at) * 1000,
            f"killed broker {broker_id}, waited until it was out of every ISR, "
            f"deleted its log dirs {log_dirs}",
        )
    )


async def restart_and_rebuild(context: RunContext) -> None:
    """The wiped broker starts; the rebuild lasts until it is in the ISR of every partition it
    holds (read from ZooKeeper), and only then is its event recorded. With the profile's
    rebuild throttle, KIP-73's throttle holds the rebuild to it, and is removed after."""
    cluster, broker_id = context.cluster, context.rebuilt_broker
    assert broker_id is not None, "kill_and_wipe runs before the traffic"
    throttle_mb_s = context.profile.rebuild_throttle_mb_s
    if throttle_mb_s is not None:
        await asyncio.to_thread(set_rebuild_throttle, cluster, throttle_mb_s)
    try:
        await _rebuild(context, cluster, broker_id)
    finally:
        if throttle_mb_s is not None:
            await asyncio.to_thread(set_rebuild_throttle, cluster, None)


async def _rebuild(context: RunContext, cluster: LocalCluster, broker_id: int) -> None:
    started_at = time.time()
    throttle_mb_s = context.profile.rebuild_throttle_mb_s
    throttled = "" if throttle_mb_s is None else f", throttled to {throttle_mb_s:g} MB/s"
    context.record(
        rundata.Event(started_at, "broker_start", f"broker {broker_id}", None, "empty" + throttled)
    )
    await asyncio.to_thread(cluster.start_broker, broker_id)
    deadline = time.monotonic() + context.profile.rebuild_timeout_s
    last_progress = time.monotonic()
    while True:
        holding, partitions = await asyncio.to_thread(isrs_holding, cluster, TOPIC, broker_id)
        if holding == partitions:
            break
        if time.monotonic() > deadline:
            raise ClusterError(
                f"timed out after {context.profile.rebuild_timeout_s} s waiting for the "
                f"rebuilt broker {broker_id} to be in every ISR of {TOPIC} ({holding} of "
                f"{partitions})"
            )
        if time.monotonic() - last_progress >= PROGRESS_INTERVAL:
            last_progress = time.monotonic()
            context.progress(
                f"  rebuilding broker {broker_id}: in {holding} of {partitions} ISRs after "
                f"{time.time() - started_at:.0f} s, {local_bytes(cluster, broker_id) / MB:.1f} MB"
            )
        await asyncio.sleep(REBUILD_POLL_INTERVAL)
    back_at = time.time()
    holds = local_bytes(cluster, broker_id)
    context.record(
        rundata.Event(
            started_at,
            "rebuild",
            f"broker {broker_id}",
            (back_at - started_at) * 1000,
            f"broker {broker_id} back in every ISR of {TOPIC} after {back_at - started_at:.1f} s, "
            f"holding {holds / MB:.1f} MB on its disk{throttled}",
        )
    )


CASES: dict[str, Case] = {
    "normal": Case("normal", "1 normal traffic", "avg", 0.0, None, None),
    "consumers": Case(
        "consumers",
        "2 plus out-of-sync consumers reading old data",
        "avg",
        0.1,
        None,
        start_catch_up_readers,
    ),
    "rebuild": Case(
        "rebuild",
        "3 rebuild a broker (data wiped)",
        "max",
        0.25,
        kill_and_wipe,
        restart_and_rebuild,
    ),
}
