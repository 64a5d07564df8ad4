"""Running the cases: one case x workload on a cluster (its traffic, its event, its run directory
and figures), every case on one cluster, and both clusters (without and with the tier)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidelog import rundata
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.processes import cpu_used_between
from tidelog.perf.cases.clusters import (
    BROKER_OVERRIDES,
    REPLICATION_FACTOR,
    TOPIC,
    create_topic,
    load_history,
    topic_config,
)
from tidelog.perf.cases.events import CASES, Case, RunContext
from tidelog.perf.cases.profiles import MB, WORKLOADS, Profile, Workload
from tidelog.perf.producer import run_producer
from tidelog.perf.readers import ReaderSettings
from tidelog.perf.stats import percentile

KIND = "perf-tiered-storage"
WINDOW_SECONDS = 1.0  # the design's "average p99": the p99 of each second, averaged


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
    # over the traffic, in cores: the brokers' CPU (a broker started during it counts from its
    # start), and this process's (its producer, consumers and the case's event, on the same cores)
    brokers_cores: float = math.nan
    load_generator_cores: float = math.nan


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
    brokers_cpu_before, own_cpu_before = context.cluster.brokers_cpu(), time.process_time()
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
    brokers_cores = cpu_used_between(brokers_cpu_before, context.cluster.brokers_cpu()) / elapsed
    load_generator_cores = (time.process_time() - own_cpu_before) / elapsed
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
        brokers_cores=brokers_cores,
        load_generator_cores=load_generator_cores,
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
    """Runs everything: a cluster without the tier's use, then one with it (table.py writes
    the table of the results)."""
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
    return results
