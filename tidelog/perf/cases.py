"""``tidelog perf tiered-storage``: the tiered-storage design's three test cases, reproduced.

The design (DESIGN.md, "Reference figures") ran two workloads, acks=all and acks=1, each with
in-sync consumers reading 4x what was produced, in three cases: normal traffic; the same plus
out-of-sync consumers reading old data; a broker rebuilt after its data was wiped. It reported
the average (case 3: the largest) p99 and p95 produce latency over one-second windows and the
rebuild duration, with tiered storage and without.

Here each {without, with} tiered storage gets a cluster of its own (the same broker settings,
remote tier enabled on every broker; only the topic's ``remote.storage.enable`` differs, so a
rebuild replicates one topic's data), a topic as the design's (snappy, replication factor 3,
min.insync.replicas 2, many partitions) and historical data; then every case x workload runs:

- the in-sync readers start at the log end, the producer at the workload's rate;
- the case's event goes in (``CASES``): nothing; catching-up readers start at the earliest
  offset; or (rebuild) a broker, killed and wiped before the traffic started, is started again,
  and the run waits until it is back in every ISR (the rebuild's duration, from its start);
- the traffic goes on to the end of ``duration`` (or a quarter of it past the event).

Every case x workload x tiered leaves a run directory (tidelog/rundata.py) under ``--out``:
acks.parquet (every produce acknowledgement, its time and latency), consumer.parquet (each
reader's offset and lag per partition every second), events.parquet (what was injected; the
rebuild as kind ``rebuild`` with ``duration_ms``, written only once the broker is in every ISR),
and metadata.json (the exact command, seed, profile, machine). The figures printed are taken
from the acks tables, in the design's table shape, beside the design's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
import urllib.request
from array import array
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tidelog import rundata
from tidelog.cluster import faults
from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.perf.readers import Reader, ReaderSettings
from tidelog.perf.stats import percentile
from tidelog.records.format import Codec

MB = 1_000_000
MIB = 1024 * 1024  # segment and retention sizes
TOPIC = "tiered-storage"
REPLICATION_FACTOR = 3
WINDOW_SECONDS = 1.0  # the design's "average p99": the p99 of each second, averaged
KIND = "perf-tiered-storage"
REBUILD_POLL_INTERVAL = 0.2
PROGRESS_INTERVAL = 5.0


@dataclass(frozen=True)
class Profile:
    """How big a run is. Rates are per broker, as the design gives them: a broker leads
    1/brokers of the partitions, so the cluster's producers send ``brokers`` times the rate.
    ``history_mb_per_broker`` is what each broker holds before the cases start (replication
    factor 3 on 3 brokers: the whole topic); ``local_retention_bytes`` is per partition."""

    name: str
    brokers: int
    partitions: int
    record_size: int  # the design's: 30 MB/s at ~62K messages/s, about 480 bytes
    keys: int
    acks_all_mb_per_broker: float
    acks_1_mb_per_broker: float
    in_sync_consumers: int  # each reads everything produced: the design's 4x
    catch_up_consumers: int
    catch_up_mb_per_broker: float  # all catching-up readers together, per broker
    history_mb_per_broker: float
    duration_s: float
    segment_bytes: int
    local_retention_bytes: int
    rebuild_timeout_s: float


PROFILES: dict[str, Profile] = {
    # for the tests and a first look: a few minutes on 2 shared cores
    "small": Profile(
        name="small",
        brokers=3,
        partitions=12,
        record_size=480,
        keys=1000,
        acks_all_mb_per_broker=0.3,
        acks_1_mb_per_broker=0.55,
        in_sync_consumers=2,
        catch_up_consumers=3,
        catch_up_mb_per_broker=1.8,
        history_mb_per_broker=20,
        duration_s=15,
        segment_bytes=256 * 1024,
        local_retention_bytes=256 * 1024,
        rebuild_timeout_s=300,
    ),
    # the design's per-broker rates and consumer counts; partitions and data scaled to what one
    # machine holds (the design: 6,300 partitions on 5 brokers, 12 TB and 34 TB per broker)
    "full": Profile(
        name="full",
        brokers=3,
        partitions=300,
        record_size=480,
        keys=100_000,
        acks_all_mb_per_broker=30,
        acks_1_mb_per_broker=55,
        in_sync_consumers=4,
        catch_up_consumers=9,
        catch_up_mb_per_broker=180,
        history_mb_per_broker=2000,
        duration_s=120,
        segment_bytes=1024 * 1024,
        # a partition holds about 6.7 MB of history: the tier takes most of it
        local_retention_bytes=1024 * 1024,
        rebuild_timeout_s=3600,
    ),
}


@dataclass(frozen=True)
class Workload:
    name: str  # as rundata.WORKLOADS spells it
    acks: int
    rate_field: str  # the Profile field with its MB/s per broker

    def mb_per_broker(self, profile: Profile) -> float:
        return float(getattr(profile, self.rate_field))

    def producer(
        self,
        topic: str,
        records_per_s: float,
        seconds: float,
        record_size: int,
        seed: int,
        keys: int,
    ) -> ProducerSettings:
        """The workload's producer, as the design's: keyed snappy records to ``topic`` at
        ``records_per_s`` for ``seconds``."""
        return ProducerSettings(
            topic=topic,
            num_records=max(1, int(records_per_s * seconds)),
            record_size=record_size,
            throughput=records_per_s,
            acks=self.acks,
            codec=Codec.SNAPPY,
            batch_size=64 * 1024,
            linger_ms=2,
            seed=seed,
            keys=keys,
        )


WORKLOADS: dict[str, Workload] = {
    "acks=all": Workload("acks=all", -1, "acks_all_mb_per_broker"),
    "acks=1": Workload("acks=1", 1, "acks_1_mb_per_broker"),
}


@dataclass(frozen=True)
class Reference:
    """One cell pair of the design's table: p99 and p95 in ms, the rebuild in seconds."""

    p99_ms: float
    p95_ms: float
    rebuild_s: float | None = None


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
    holds (read from ZooKeeper), and only then is its event recorded."""
    cluster, broker_id = context.cluster, context.rebuilt_broker
    assert broker_id is not None, "kill_and_wipe runs before the traffic"
    started_at = time.time()
    context.record(rundata.Event(started_at, "broker_start", f"broker {broker_id}", None, "empty"))
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
                f"{time.time() - started_at:.0f} s, {_local_bytes(cluster, broker_id) / MB:.1f} MB"
            )
        await asyncio.sleep(REBUILD_POLL_INTERVAL)
    back_at = time.time()
    holds = _local_bytes(cluster, broker_id)
    context.record(
        rundata.Event(
            started_at,
            "rebuild",
            f"broker {broker_id}",
            (back_at - started_at) * 1000,
            f"broker {broker_id} back in every ISR of {TOPIC} after {back_at - started_at:.1f} s, "
            f"holding {holds / MB:.1f} MB on its disk",
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

# The design's table (DESIGN.md, "Reference figures"): (case, workload, tiered) -> figures.
DESIGN: dict[tuple[str, str, bool], Reference] = {
    ("normal", "acks=all", True): Reference(25, 14),
    ("normal", "acks=all", False): Reference(21, 13),
    ("normal", "acks=1", True): Reference(9, 4),
    ("normal", "acks=1", False): Reference(9, 4),
    ("consumers", "acks=all", True): Reference(42, 18),
    ("consumers", "acks=all", False): Reference(60, 30),
    ("consumers", "acks=1", True): Reference(10, 5),
    ("consumers", "acks=1", False): Reference(10, 4),
    ("rebuild", "acks=all", True): Reference(56, 23, 2 * 60),
    ("rebuild", "acks=all", False): Reference(490, 290, 230 * 60),
    ("rebuild", "acks=1", True): Reference(12, 6, 4 * 60),
    ("rebuild", "acks=1", False): Reference(10, 5, 520 * 60),
}

# Both clusters: the remote tier on every broker (only the topic says whether it is used), and
# failure detection quick enough for a rebuild in a test.
BROKER_OVERRIDES = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
}


def topic_config(profile: Profile, tiered: bool, loading: bool = False) -> dict[str, str]:
    """The topic's settings in the cases; ``loading``: while the history goes in, with the tier
    but no local retention yet (see load_history)."""
    config = {"min.insync.replicas": "2", "segment.bytes": str(profile.segment_bytes)}
    if tiered:
        config["remote.storage.enable"] = "true"
        if not loading:
            config["local.retention.bytes"] = str(profile.local_retention_bytes)
    return config


@dataclass(frozen=True)
class Settings:
    """What ``tidelog perf tiered-storage`` was asked to do."""

    profile: Profile
    out: Path
    cases: tuple[str, ...] = tuple(CASES)
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    seed: int = 0
    cluster_dir: Path | None = None  # kept afterwards; None: a temporary directory
    command: str = field(default_factory=lambda: shlex.join(["tidelog", *sys.argv[1:]]))
    # the command line's changes to the named profile (scale, duration_s, ...): what the run's
    # metadata and table say it was scaled by
    scaling: dict[str, float] = field(default_factory=dict)


@dataclass
class Result:
    """One case x workload x tiered: the figures the table prints."""

    case: str
    workload: str
    tiered: bool
    run_dir: Path
    p99_ms: float
    p95_ms: float
    rebuild_s: float | None
    asked_mb_s: float
    produced_mb_s: float
    acknowledged: int
    failed: int
    in_sync_mb_s: float
    catch_up_mb_s: float
    load_average: float = math.nan  # the machine's 1-minute load average as the run ended


def run_dir_name(case: str, workload: str, tiered: bool) -> str:
    return f"{case}-{workload.replace('=', '_')}-{'tiered' if tiered else 'local'}"


def window_figures(run_dir: Path, figure: str) -> tuple[float, float]:
    """(p99, p95) of the run's acks table: each one-second window's (windows as ``tidelog
    report`` counts them, by the acknowledgement's epoch second), averaged or the largest."""
    acks = rundata.read_table(run_dir, "acks")
    if acks is None or acks.num_rows == 0:
        return float("nan"), float("nan")
    window_us = int(WINDOW_SECONDS * 1_000_000)
    windows: dict[int, array] = {}
    times = acks.column("acked_at").cast("int64").to_pylist()
    for moment, latency in zip(times, acks.column("latency_ms").to_pylist(), strict=True):
        windows.setdefault(moment // window_us, array("d")).append(latency)
    p99s, p95s = [], []
    for latencies in windows.values():
        ordered = sorted(latencies)
        p99s.append(percentile(ordered, 0.99))
        p95s.append(percentile(ordered, 0.95))
    if figure == "max":
        return max(p99s), max(p95s)
    return sum(p99s) / len(p99s), sum(p95s) / len(p95s)


def _local_bytes(cluster: LocalCluster, broker_id: int) -> int:
    """The bytes of the topic's segments on the broker's disk (retention deletes meanwhile)."""
    logs = Path(cluster.broker(broker_id).config).parent / "logs"
    total = 0
    for path in logs.glob(f"{TOPIC}-*/*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def machine(directory: Path) -> dict:
    """rundata.machine() and the disk the run wrote to."""
    usage = shutil.disk_usage(directory)
    return rundata.machine() | {"disk_total_bytes": usage.total, "disk_free_bytes": usage.free}


async def run_case(
    context: RunContext, settings: Settings, case: Case, workload: Workload
) -> Result:
    """One case x workload on a cluster whose topic holds its history; leaves its run dir."""
    profile, tiered = context.profile, context.tiered
    run_dir = settings.out / run_dir_name(case.name, workload.name, tiered)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    started_at = rundata.now()
    if case.before is not None:
        await case.before(context)
    rate = workload.mb_per_broker(profile) * profile.brokers * MB / profile.record_size
    longest = profile.duration_s + profile.rebuild_timeout_s + 60
    producer = workload.producer(
        TOPIC, rate, longest, profile.record_size, settings.seed, profile.keys
    )
    for number in range(1, profile.in_sync_consumers + 1):
        context.start_reader(ReaderSettings(f"in-sync-{number}", TOPIC, from_start=False))
    producing = asyncio.create_task(
        run_producer(
            context.bootstrap_servers,
            producer,
            progress=lambda line: context.progress(f"  {line}"),
            run_dir=run_dir,
            stop=context.stop,
        )
    )
    traffic_started = time.monotonic()
    try:
        await _sleep_or_fail(producing, case.event_at * profile.duration_s)
        if case.event is not None:
            event = asyncio.create_task(case.event(context))
            await asyncio.wait([event, producing], return_when=asyncio.FIRST_COMPLETED)
            if not event.done():  # the producer ended first: its exception ends the run
                event.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await event
                await _sleep_or_fail(producing, 0)
                raise RuntimeError(f"the producer ended before the {case.name} event did")
            await event
        tail = case.event_at * profile.duration_s if case.event is not None else 0.0
        end = max(traffic_started + profile.duration_s, time.monotonic() + tail)
        await _sleep_or_fail(producing, end - time.monotonic())
    finally:
        context.stop.set()
        summary, errors = await producing
        await asyncio.gather(*context.reader_tasks)
    elapsed = time.monotonic() - traffic_started
    samples = [reader.samples for reader in context.readers]
    if samples and any(s.sampled_at for s in samples):
        merged = samples[0]
        for other in samples[1:]:
            merged.extend(other)
        rundata.write_table(run_dir, "consumer", merged.columns())
    if context.events:
        rundata.write_events(run_dir, context.events)
    p99, p95 = window_figures(run_dir, case.figure)
    rebuild = next((e for e in context.events if e.kind == "rebuild"), None)

    def read_mb_s(prefix: str) -> float:
        return sum(r.bytes for r in context.readers if r.settings.name.startswith(prefix)) / (
            elapsed * MB
        )

    result = Result(
        case=case.name,
        workload=workload.name,
        tiered=tiered,
        run_dir=run_dir,
        p99_ms=p99,
        p95_ms=p95,
        rebuild_s=rebuild.duration_ms / 1000 if rebuild and rebuild.duration_ms else None,
        asked_mb_s=rate * profile.record_size / MB,
        produced_mb_s=summary.megabytes_per_second,
        acknowledged=summary.records,
        failed=sum(errors.values()),
        in_sync_mb_s=read_mb_s("in-sync"),
        catch_up_mb_s=read_mb_s("catching-up"),
        load_average=os.getloadavg()[0],
    )
    rundata.write_metadata(
        run_dir,
        rundata.RunMetadata(
            kind=KIND,
            case=case.name,
            workload=workload.name,
            tiered=tiered,
            started_at=started_at,
            ended_at=rundata.now(),
            settings={
                "command": settings.command,
                "seed": settings.seed,
                "case": case.title,
                "topic": TOPIC,
                "topic_config": topic_config(profile, tiered),
                "producer": asdict(producer) | {"codec": "snappy"},
                "window_seconds": WINDOW_SECONDS,
                "figure": case.figure,
                "scaling": settings.scaling,
            },
            profile=asdict(profile)
            | {"broker_overrides": BROKER_OVERRIDES, "replication_factor": REPLICATION_FACTOR},
            machine=machine(settings.out),
            verdict={
                "producer": summary.as_dict() | {"acknowledged": summary.records},
                "errors": errors,
                "readers": {
                    r.settings.name: {"records": r.records, "bytes": r.bytes, "errors": r.errors}
                    for r in context.readers
                },
                "figures": {k: v for k, v in asdict(result).items() if k != "run_dir"},
            },
        ),
    )
    return result


async def _sleep_or_fail(task: asyncio.Task, seconds: float) -> None:
    """Sleeps, but a producer that ended early (an exception) ends the run at once."""
    if seconds > 0:
        await asyncio.wait([task], timeout=seconds)
    if task.done() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


def create_topic(cluster: LocalCluster, profile: Profile, tiered: bool) -> None:
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(
            client,
            TOPIC,
            profile.partitions,
            REPLICATION_FACTOR,
            topic_config(profile, tiered, loading=True),
        )
    faults.wait_for_full_isr(cluster, TOPIC)


NUDGE_INTERVAL = 2.0


async def settle_history(cluster: LocalCluster, profile: Profile, seed: int, progress) -> None:
    """Waits until every replica holds the whole history. Meanwhile one record goes to every
    partition every NUDGE_INTERVAL seconds: after a burst, followers of some partitions were
    seen to stop thousands of offsets behind their leader until the leader appended again
    (runs on 2 cores, 60 partitions; broker logs in /work/runs/s5-trial-stuck-*), and the
    cases' traffic would otherwise start with those followers still catching up."""
    deadline = time.monotonic() + profile.rebuild_timeout_s
    nudge = ProducerSettings(
        topic=TOPIC,
        num_records=profile.partitions,
        record_size=profile.record_size,
        acks=1,
        batch_size=1,  # one record per produce request; the requests go round the partitions
        seed=seed + 2,
    )
    nudges = 0
    while not await asyncio.to_thread(replicas_caught_up, cluster):
        if time.monotonic() > deadline:
            raise ClusterError(
                f"timed out after {profile.rebuild_timeout_s} s waiting for every replica of "
                f"{TOPIC} to hold what its leader holds"
            )
        await run_producer(cluster.bootstrap_servers, nudge, progress=lambda _: None)
        nudges += 1
        await asyncio.sleep(NUDGE_INTERVAL)
    if nudges:
        progress(f"history: every replica caught up, after {nudges} records to each partition")


def replicas_caught_up(cluster: LocalCluster) -> bool:
    """Every replica of the topic ends where its leader's log ends, as each broker's admin API
    says: more than a full ISR, which keeps a follower up to replica.lag.time.max.ms behind."""
    ends: dict[int, list[int]] = {}
    for broker_id in cluster.broker_ids:
        port = cluster.broker(broker_id).admin_port
        try:
            url = f"http://127.0.0.1:{port}/topics/{TOPIC}"
            with urllib.request.urlopen(url, timeout=10) as reply:
                described = json.loads(reply.read())
        except (OSError, ValueError):
            return False  # not up, or not serving the topic yet
        for entry in described["partitions"]:
            if broker_id in entry["replicas"]:
                ends.setdefault(entry["partition"], []).append(entry.get("log_end_offset", -1))
    return bool(ends) and all(
        len(offsets) == REPLICATION_FACTOR and len(set(offsets)) == 1 for offsets in ends.values()
    )


def set_local_retention(cluster: LocalCluster, profile: Profile) -> None:
    with zookeeper.session(cluster.zookeeper) as client:
        topics.alter_topic_config(
            client, TOPIC, {"local.retention.bytes": str(profile.local_retention_bytes)}
        )


def offloaded(cluster: LocalCluster, profile: Profile) -> bool:
    """Whether each broker keeps about its local retention: the older data is in the tier."""
    per_broker = profile.partitions * REPLICATION_FACTOR / profile.brokers
    limit = per_broker * (profile.local_retention_bytes + 2 * profile.segment_bytes)
    return all(_local_bytes(cluster, b) <= limit for b in cluster.broker_ids)


async def load_history(
    cluster: LocalCluster, profile: Profile, tiered: bool, seed: int, progress
) -> None:
    """Fills the topic with ``history_mb_per_broker`` (acks=1, as fast as it goes); with the
    tier, then sets the topic's local retention and waits until the old segments have moved
    there and local retention removed them. Local retention starts only once every replica holds
    the whole history (a full ISR is not enough): a follower that falls behind the leader's
    local log start during a load as fast as the cluster takes is started again at it, and such
    followers took minutes to be back in the ISR, or did not come back; the cases start from the
    same state either way."""
    topic_bytes = profile.history_mb_per_broker * MB * profile.brokers / REPLICATION_FACTOR
    settings = ProducerSettings(
        topic=TOPIC,
        num_records=int(topic_bytes / profile.record_size),
        record_size=profile.record_size,
        acks=1,
        codec=Codec.SNAPPY,
        batch_size=256 * 1024,
        seed=seed + 1,
        keys=profile.keys,
    )
    summary, errors = await run_producer(cluster.bootstrap_servers, settings, progress=progress)
    if errors:
        raise RuntimeError(f"loading the history failed: {errors}")
    progress(f"history: {summary.line('records loaded')}")
    await settle_history(cluster, profile, seed, progress)
    await asyncio.to_thread(faults.wait_for_full_isr, cluster, TOPIC, profile.rebuild_timeout_s)
    if tiered:
        await asyncio.to_thread(set_local_retention, cluster, profile)
        await asyncio.to_thread(
            wait_until,
            lambda: offloaded(cluster, profile),
            profile.rebuild_timeout_s,
            "the history's old segments to move to the tier (local retention)",
            0.5,
        )
        sizes = ", ".join(f"{_local_bytes(cluster, b) / MB:.1f}" for b in cluster.broker_ids)
        progress(f"history moved to the tier; local MB per broker: {sizes}")


async def run_tiered(
    cluster: LocalCluster, settings: Settings, tiered: bool, progress
) -> list[Result]:
    """Every case x workload on one cluster (already up), in order."""
    profile = settings.profile
    await asyncio.to_thread(create_topic, cluster, profile, tiered)
    await load_history(cluster, profile, tiered, settings.seed, progress)
    results = []
    for case_name in settings.cases:
        for workload_name in settings.workloads:
            case, workload = CASES[case_name], WORKLOADS[workload_name]
            await asyncio.to_thread(
                faults.wait_for_full_isr, cluster, TOPIC, profile.rebuild_timeout_s
            )
            label = f"{case.name} / {workload.name} / {'tiered' if tiered else 'local only'}"
            progress(f"case {label}: {profile.duration_s:g} s of traffic")
            context = RunContext(
                cluster, profile, tiered, cluster.bootstrap_servers, asyncio.Event(), progress
            )
            result = await run_case(context, settings, case, workload)
            progress(
                f"case {label}: p99 {result.p99_ms:.1f} ms, p95 {result.p95_ms:.1f} ms, "
                f"{result.produced_mb_s:.2f} of {result.asked_mb_s:.2f} MB/s produced"
                + (f", rebuilt in {result.rebuild_s:.1f} s" if result.rebuild_s else "")
            )
            results.append(result)
    return results


def run(settings: Settings, progress: Callable[[str], None] = print) -> list[Result]:
    """Runs everything: a cluster without the tier's use, then one with it."""
    from tidelog import runtime

    settings.out.mkdir(parents=True, exist_ok=True)
    parent = settings.cluster_dir or Path(tempfile.mkdtemp(prefix="tidelog-tiered-storage-"))
    results: list[Result] = []
    for tiered in (False, True):
        cluster = LocalCluster(parent / ("tiered" if tiered else "without-tiered"))
        progress(f"starting {settings.profile.brokers} brokers in {cluster.directory}")
        cluster.up(settings.profile.brokers, overrides=BROKER_OVERRIDES, progress=lambda _: None)
        try:
            results += runtime.run(run_tiered(cluster, settings, tiered, progress))
        finally:
            with contextlib.suppress(Exception):
                cluster.down(progress=lambda _: None)
    if settings.cluster_dir is None:
        shutil.rmtree(parent, ignore_errors=True)
    table = describe_scaling(settings) + "\n\n" + format_table(results)
    (settings.out / "table.txt").write_text(table + "\n")
    return results


def _pair(first: float, second: float) -> str:
    return f"{first:.1f} / {second:.1f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds:.1f} s"


def _ratio(with_tier: float | None, without: float | None) -> str:
    if not with_tier or not without:
        return "-"
    return f"{with_tier / without:.2f}"


def _ratios(tiered: Result | None, local: Result | None) -> str:
    if tiered is None or local is None:
        return "-"
    return f"{_ratio(tiered.p99_ms, local.p99_ms)} / {_ratio(tiered.p95_ms, local.p95_ms)}"


def table_rows(results: list[Result]) -> list[list[str]]:
    """The design's table: a row per case x workload (and a rebuild-duration row per rebuild
    workload), this run's figures with and without the tier beside the design's, and the
    with/without ratios of both. A cell this run has no figure for is "-"."""
    by_key = {(r.case, r.workload, r.tiered): r for r in results}
    rows = []
    for case in CASES.values():
        for workload in WORKLOADS:
            tiered, local = (
                by_key.get((case.name, workload, True)),
                by_key.get((case.name, workload, False)),
            )
            if tiered is None and local is None:
                continue
            design_tiered = DESIGN[(case.name, workload, True)]
            design_local = DESIGN[(case.name, workload, False)]
            rows.append(
                [
                    case.title,
                    workload,
                    f"{case.figure} p99 / p95 ms",
                    _pair(tiered.p99_ms, tiered.p95_ms) if tiered else "-",
                    _pair(design_tiered.p99_ms, design_tiered.p95_ms),
                    _pair(local.p99_ms, local.p95_ms) if local else "-",
                    _pair(design_local.p99_ms, design_local.p95_ms),
                    _ratios(tiered, local),
                    f"{design_tiered.p99_ms / design_local.p99_ms:.2f} / "
                    f"{design_tiered.p95_ms / design_local.p95_ms:.2f}",
                ]
            )
            if design_tiered.rebuild_s is not None:
                rows.append(
                    [
                        case.title,
                        workload,
                        "rebuild duration",
                        _duration(tiered.rebuild_s) if tiered else "-",
                        _duration(design_tiered.rebuild_s),
                        _duration(local.rebuild_s) if local else "-",
                        _duration(design_local.rebuild_s),
                        _ratio(
                            tiered.rebuild_s if tiered else None, local.rebuild_s if local else None
                        ),
                        _ratio(design_tiered.rebuild_s, design_local.rebuild_s),
                    ]
                )
    return rows


HEADER = [
    "test case",
    "workload",
    "figure",
    "tiered (run)",
    "tiered (design)",
    "without (run)",
    "without (design)",
    "ratio (run)",
    "ratio (design)",
]


def format_table(results: list[Result]) -> str:
    """The design's table and, below it, the rates each run asked for and reached."""
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    text = [line(HEADER), line(["-" * w for w in widths]), *(line(row) for row in rows)]
    text += ["", "ratio = with tiered storage / without; MB/s of the whole cluster:"]
    for r in results:
        text.append(
            f"  {run_dir_name(r.case, r.workload, r.tiered):28} produced {r.produced_mb_s:6.2f} "
            f"of {r.asked_mb_s:6.2f} MB/s ({r.acknowledged} acknowledged, {r.failed} failed), "
            f"in-sync consumers {r.in_sync_mb_s:6.2f} MB/s, catching up "
            f"{r.catch_up_mb_s:6.2f} MB/s, load average {r.load_average:.2f}"
        )
    penalties = penalty_lines(results)
    if penalties:
        text += ["", "the out-of-sync consumers' penalty: avg p99 of case 2 / case 1 (run, design)"]
        text += penalties
    return "\n".join(text)


def penalty_lines(results: list[Result]) -> list[str]:
    """For each workload x tiered that ran both the normal and the consumers case: how much the
    out-of-sync consumers raised the average p99, beside the design's (42 / 25 ms with the tier,
    60 / 21 ms without, for acks=all)."""
    by_key = {(r.case, r.workload, r.tiered): r for r in results}
    lines = []
    for workload in WORKLOADS:
        for tiered in (True, False):
            normal = by_key.get(("normal", workload, tiered))
            loaded = by_key.get(("consumers", workload, tiered))
            if normal is None or loaded is None:
                continue
            design = (
                DESIGN[("consumers", workload, tiered)].p99_ms
                / DESIGN[("normal", workload, tiered)].p99_ms
            )
            lines.append(
                f"  {workload:8} {'tiered' if tiered else 'without':8} "
                f"{_ratio(loaded.p99_ms, normal.p99_ms):>6}  {design:.2f}"
            )
    return lines


def with_overrides(
    profile: Profile,
    duration_s: float | None = None,
    history_mb: float | None = None,
    scale: float | None = None,
    partitions: int | None = None,
    segment_bytes: int | None = None,
    local_retention_bytes: int | None = None,
    rebuild_timeout_s: float | None = None,
) -> Profile:
    """The profile with the command line's --duration, --history-mb-per-broker, --partitions,
    --segment-bytes, --local-retention-bytes, --rebuild-timeout and --scale (a factor on every
    rate: the producers' and the catching-up consumers')."""
    changes: dict[str, Any] = scaling(  # profile fields (ints or floats) and "scale"
        duration_s,
        history_mb,
        scale,
        partitions,
        segment_bytes,
        local_retention_bytes,
        rebuild_timeout_s,
    )
    factor = changes.pop("scale", None)
    profile = replace(profile, **changes)
    if factor is not None:
        profile = replace(
            profile,
            acks_all_mb_per_broker=profile.acks_all_mb_per_broker * factor,
            acks_1_mb_per_broker=profile.acks_1_mb_per_broker * factor,
            catch_up_mb_per_broker=profile.catch_up_mb_per_broker * factor,
        )
    return profile


def scaling(
    duration_s: float | None = None,
    history_mb: float | None = None,
    scale: float | None = None,
    partitions: int | None = None,
    segment_bytes: int | None = None,
    local_retention_bytes: int | None = None,
    rebuild_timeout_s: float | None = None,
) -> dict[str, float]:
    """The overrides given, by the profile field they change (``scale`` by itself)."""
    given = {
        "scale": scale,
        "duration_s": duration_s,
        "history_mb_per_broker": history_mb,
        "partitions": partitions,
        "segment_bytes": segment_bytes,
        "local_retention_bytes": local_retention_bytes,
        "rebuild_timeout_s": rebuild_timeout_s,
    }
    return {name: value for name, value in given.items() if value is not None}


def describe_scaling(settings: Settings) -> str:
    """The lines above the table: the profile as run, beside the design's size."""
    profile = settings.profile
    changed = ", ".join(f"{name} {value:g}" for name, value in settings.scaling.items())
    return "\n".join(
        [
            f"profile {profile.name}"
            + (f", scaled to this machine: {changed}" if changed else " as defined"),
            f"  per leader broker: acks=all {profile.acks_all_mb_per_broker:g} MB/s, acks=1 "
            f"{profile.acks_1_mb_per_broker:g} MB/s of {profile.record_size}-byte records; "
            f"{profile.in_sync_consumers} in-sync consumers; {profile.catch_up_consumers} "
            f"out-of-sync consumers reading {profile.catch_up_mb_per_broker:g} MB/s per broker",
            f"  {profile.brokers} brokers, {profile.partitions} partitions x "
            f"{REPLICATION_FACTOR} replicas, {profile.history_mb_per_broker:g} MB of history per "
            f"broker, {profile.duration_s:g} s of traffic per case; segments of "
            f"{profile.segment_bytes / MIB:g} MiB, with the tier "
            f"{profile.local_retention_bytes / MIB:g} MiB kept locally per partition",
            "  the design: 30 / 55 MB/s per leader broker, 4 in-sync and 9 out-of-sync consumers "
            "(180 MB/s per broker), 6,300 partitions on 5 brokers, 12 TB (acks=all) and 34 TB "
            "(acks=1) per broker",
            f"  load average as the table was written: {os.getloadavg()[0]:.2f} "
            f"(1 min) on {os.cpu_count()} cores",
        ]
    )
