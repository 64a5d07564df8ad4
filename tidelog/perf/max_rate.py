"""``tidelog perf max-rate``: the largest rate a cluster sustains for one of the design's workloads.

The workload is the cases' (tidelog/perf/cases/profiles.py): a producer with acks=all or
acks=1 (snappy, the profile's record size and keys) and in-sync consumers reading everything
produced from the log end, on a cluster of its own with the cases' broker settings and a topic
as theirs. The offered rate goes up in steps of ``step_seconds``; a step holds when

- the producer's achieved rate (acknowledged bytes over the seconds from its start to its last
  acknowledgement) is at least ``1 - shortfall`` of the offered rate, and no produce failed;
- every in-sync consumer read at least ``1 - shortfall`` of the records acknowledged;
- the p99 of the step's produce latencies (each record's, from the time it was due) is at most
  ``p99_bound_ms``.

A step whose records are not all acknowledged by twice ``step_seconds`` ends there.

After a warm-up at the first rate (not counted: a fresh cluster is slow for its first
seconds), the rate starts at ``start_mb_per_broker`` and is multiplied by ``step_factor`` while
steps hold; after the first step that fails, ``refine`` more steps halve the gap between the
largest rate that held and the smallest that failed. The figure is the largest rate that held, per
leader broker (the cluster's rate / brokers: a broker leads 1/brokers of the partitions, as the
design gives its rates) and for the cluster. Figures are printed, never asserted.

A run directory per step under ``--out`` (acks.parquet and metadata.json, as tidelog/rundata.py
has them) and ``max-rate.json`` beside them hold every figure printed.
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tidelog import rundata
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.processes import cpu_used_between
from tidelog.controller import topics, zookeeper
from tidelog.perf.cases import clusters, profiles, runner
from tidelog.perf.producer import run_producer
from tidelog.perf.readers import Reader, ReaderSettings

MB = 1_000_000
KIND = "perf-max-rate"
TOPIC = "max-rate"
SUMMARY = "max-rate.json"
READERS_READY_TIMEOUT = 30.0
DRAIN_SECONDS = 1.0  # after the last acknowledgement, for the consumers to read the tail
OVERTIME_FACTOR = 2.0  # a step's producer stops at this many times step_seconds


@dataclass(frozen=True)
class Settings:
    """What ``tidelog perf max-rate`` was asked to do. Rates are MB/s per leader broker."""

    workload: str  # a key of profiles.WORKLOADS
    out: Path
    brokers: int = 3
    partitions: int = 30
    record_size: int = profiles.PROFILES["full"].record_size
    keys: int = profiles.PROFILES["full"].keys
    in_sync_consumers: int = profiles.PROFILES["full"].in_sync_consumers
    start_mb_per_broker: float = 0.25
    step_factor: float = 1.5
    refine: int = 2
    max_steps: int = 20
    step_seconds: float = 10.0
    warmup_seconds: float = 5.0
    shortfall: float = 0.1
    p99_bound_ms: float = 200.0
    seed: int = 0
    cluster_dir: Path | None = None  # kept afterwards; None: a temporary directory
    command: str = field(default_factory=lambda: shlex.join(["tidelog", *sys.argv[1:]]))


@dataclass(frozen=True)
class Step:
    """One offered rate and what came of it. Rates are the cluster's MB/s of keys and values;
    ``consumed`` is the records the slowest in-sync consumer read; CPU is in cores (seconds of
    CPU per second), the brokers' together and this process's (producer and consumers)."""

    number: int
    offered_mb_s: float
    achieved_mb_s: float
    acknowledged: int
    failed: int
    seconds: float
    p99_ms: float
    p95_ms: float
    consumed: int
    broker_cpu: float
    client_cpu: float
    load_average: float
    verdict: str  # "held", or each reason it did not

    @property
    def held(self) -> bool:
        return self.verdict == "held"


def verdict(settings: Settings, offered_mb_s: float, step: Step) -> str:
    """ "held", or the reasons the step did not, joined by "; "."""
    reasons = []
    if step.achieved_mb_s < (1 - settings.shortfall) * offered_mb_s:
        reasons.append(f"achieved under {1 - settings.shortfall:.0%} of offered")
    if step.failed:
        reasons.append(f"{step.failed} records failed")
    if step.consumed < (1 - settings.shortfall) * step.acknowledged:
        reasons.append("consumers behind")
    if not step.p99_ms <= settings.p99_bound_ms:
        reasons.append(f"p99 above {settings.p99_bound_ms:g} ms")
    return "; ".join(reasons) or "held"


def next_rate(settings: Settings, steps: list[Step]) -> float | None:
    """The next offered rate (cluster MB/s), or None when the search is over: multiplied by
    ``step_factor`` while steps hold (divided while none has held yet), then, once a rate that
    held lies below one that failed, ``refine`` bisections between the two; never more than
    ``max_steps`` steps."""
    if not steps:
        return settings.start_mb_per_broker * settings.brokers
    if len(steps) >= settings.max_steps:
        return None
    held = [s.offered_mb_s for s in steps if s.held]
    failed = [s.offered_mb_s for s in steps if not s.held]
    if not held:
        return min(failed) / settings.step_factor
    low = max(held)
    above = [rate for rate in failed if rate > low]
    if not above:
        return low * settings.step_factor
    bracketed_at = next(i for i in range(len(steps)) if _bracketed(steps[: i + 1]))
    if len(steps) - 1 - bracketed_at >= settings.refine:
        return None
    return (low + min(above)) / 2


def _bracketed(steps: list[Step]) -> bool:
    """Some rate that held lies below some rate that failed."""
    held = [s.offered_mb_s for s in steps if s.held]
    return bool(held) and any(not s.held and s.offered_mb_s > min(held) for s in steps)


def largest_held(steps: list[Step]) -> Step | None:
    held = [s for s in steps if s.held]
    return max(held, key=lambda s: s.offered_mb_s) if held else None


async def run_step(
    cluster: LocalCluster, settings: Settings, number: int, offered_mb_s: float, progress
) -> Step:
    """The in-sync consumers at the log end, then the producer at ``offered_mb_s`` for
    ``step_seconds``; writes the step's run directory."""
    workload = profiles.WORKLOADS[settings.workload]
    run_dir = settings.out / f"step-{number:02d}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    started_at = rundata.now()
    stop = asyncio.Event()
    readers = [
        Reader(cluster.bootstrap_servers, ReaderSettings(f"in-sync-{n}", TOPIC, from_start=False))
        for n in range(1, settings.in_sync_consumers + 1)
    ]
    reading = [asyncio.create_task(reader.run(stop)) for reader in readers]
    rate = offered_mb_s * MB / settings.record_size
    producer = workload.producer(
        TOPIC, rate, settings.step_seconds, settings.record_size, settings.seed, settings.keys
    )
    try:
        # every consumer has its start offsets before the first record goes out
        await _wait_for(
            lambda: all(len(r.offsets) == settings.partitions for r in readers),
            READERS_READY_TIMEOUT,
            "the in-sync consumers to find the log end of every partition",
        )
        cpu_before, client_before = cluster.brokers_cpu(), time.process_time()
        clock_before = time.monotonic()
        # a rate far above what the cluster takes would stretch the step: it ends anyway, and
        # what was acknowledged by then is its achieved rate
        overtime = asyncio.get_running_loop().call_later(
            settings.step_seconds * OVERTIME_FACTOR, stop.set
        )
        summary, errors = await run_producer(
            cluster.bootstrap_servers,
            producer,
            progress=lambda line: progress(f"    {line}"),
            run_dir=run_dir,
            stop=stop,
        )
        overtime.cancel()
        wall_seconds = time.monotonic() - clock_before
        broker_cpu = cpu_used_between(cpu_before, cluster.brokers_cpu()) / wall_seconds
        client_cpu = (time.process_time() - client_before) / wall_seconds
        with contextlib.suppress(TimeoutError):
            await _wait_for(
                lambda: all(r.records >= summary.records for r in readers),
                DRAIN_SECONDS,
                "the in-sync consumers to read the step's records",
            )
    finally:
        stop.set()
        await asyncio.gather(*reading)
    latency = summary.latency()
    step = Step(
        number=number,
        offered_mb_s=offered_mb_s,
        achieved_mb_s=summary.megabytes_per_second if summary.records else 0.0,
        acknowledged=summary.records,
        failed=sum(errors.values()),
        seconds=summary.seconds,
        p99_ms=latency["p99"],
        p95_ms=latency["p95"],
        consumed=min(r.records for r in readers) if readers else summary.records,
        broker_cpu=broker_cpu,
        client_cpu=client_cpu,
        load_average=os.getloadavg()[0],
        verdict="",
    )
    step = replace(step, verdict=verdict(settings, offered_mb_s, step))
    rundata.write_metadata(
        run_dir,
        rundata.RunMetadata(
            kind=KIND,
            case="normal",
            workload=workload.name,
            started_at=started_at,
            ended_at=rundata.now(),
            settings=_recorded(settings) | {"producer": asdict(producer) | {"codec": "snappy"}},
            machine=runner.machine(settings.out),
            verdict={
                "step": asdict(step),
                "producer": summary.as_dict(),
                "errors": errors,
                "readers": {r.settings.name: {"records": r.records} for r in readers},
            },
        ),
    )
    return step


async def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


def _recorded(settings: Settings) -> dict:
    recorded = asdict(settings)
    recorded["out"] = str(settings.out)
    recorded["cluster_dir"] = str(settings.cluster_dir) if settings.cluster_dir else None
    return recorded


async def search(
    cluster: LocalCluster, settings: Settings, progress: Callable[[str], None]
) -> list[Step]:
    """A warm-up step (connections, leaders' caches, the consumers' first fetches: the first
    seconds of a fresh cluster are slow), then steps until ``next_rate`` says the search is
    over. The warm-up leaves its run directory (step-00) but is no step of the search."""
    if settings.warmup_seconds > 0:
        rate = settings.start_mb_per_broker * settings.brokers
        progress(f"warm-up: {rate:.3f} MB/s in all for {settings.warmup_seconds:g} s")
        warmup = replace(settings, step_seconds=settings.warmup_seconds)
        progress("  " + step_line(settings, await run_step(cluster, warmup, 0, rate, progress)))
    steps: list[Step] = []
    while (offered := next_rate(settings, steps)) is not None:
        number = len(steps) + 1
        progress(
            f"step {number}: offering {offered / settings.brokers:.3f} MB/s per leader broker "
            f"({offered:.3f} MB/s in all) for {settings.step_seconds:g} s"
        )
        step = await run_step(cluster, settings, number, offered, progress)
        progress("  " + step_line(settings, step))
        steps.append(step)
    return steps


def create_topic(cluster: LocalCluster, settings: Settings) -> None:
    """The cases' topic settings, with size retention so that a long search fits the disk."""
    config = {
        "min.insync.replicas": "2",
        "segment.bytes": str(4 * 1024 * 1024),
        "retention.bytes": str(16 * 1024 * 1024),
    }
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, TOPIC, settings.partitions, clusters.REPLICATION_FACTOR, config)
    faults.wait_for_full_isr(cluster, TOPIC)


def run(settings: Settings, progress: Callable[[str], None] = print) -> list[Step]:
    """Starts the cluster, searches, stops it; writes max-rate.json and returns the steps."""
    from tidelog import runtime

    settings.out.mkdir(parents=True, exist_ok=True)
    directory = settings.cluster_dir or Path(tempfile.mkdtemp(prefix="tidelog-max-rate-"))
    cluster = LocalCluster(directory)
    progress(f"starting {settings.brokers} brokers in {cluster.directory}")
    cluster.up(settings.brokers, overrides=clusters.BROKER_OVERRIDES, progress=lambda _: None)
    try:
        create_topic(cluster, settings)
        steps = runtime.run(search(cluster, settings, progress))
    finally:
        with contextlib.suppress(Exception):
            cluster.down(progress=lambda _: None)
        if settings.cluster_dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    (settings.out / SUMMARY).write_text(json.dumps(summary(settings, steps), indent=2) + "\n")
    return steps


def summary(settings: Settings, steps: list[Step]) -> dict:
    """max-rate.json: the settings, every step, and the largest rate that held."""
    best = largest_held(steps)
    return {
        "kind": KIND,
        "workload": settings.workload,
        "settings": _recorded(settings),
        "machine": runner.machine(settings.out),
        "steps": [asdict(step) | {"held": step.held} for step in steps],
        "max_rate": None
        if best is None
        else {
            "step": best.number,
            "offered_mb_s": best.offered_mb_s,
            "offered_mb_s_per_broker": best.offered_mb_s / settings.brokers,
            "achieved_mb_s": best.achieved_mb_s,
            "achieved_mb_s_per_broker": best.achieved_mb_s / settings.brokers,
            "records_per_second": best.achieved_mb_s * MB / settings.record_size,
            "p99_ms": best.p99_ms,
            "load_average": best.load_average,
        },
    }


def step_line(settings: Settings, step: Step) -> str:
    return (
        f"offered {step.offered_mb_s:8.3f}  achieved {step.achieved_mb_s:8.3f} MB/s  "
        f"({step.acknowledged} acknowledged in {step.seconds:.2f} s, {step.failed} failed)  "
        f"p99 {step.p99_ms:7.1f}  p95 {step.p95_ms:7.1f} ms  consumers read >= {step.consumed}  "
        f"CPU brokers {step.broker_cpu:.2f} client {step.client_cpu:.2f}  "
        f"load {step.load_average:.2f}  {step.verdict}"
    )


def format_report(settings: Settings, steps: list[Step]) -> str:
    """Every step (the cluster's MB/s of keys and values), then the largest rate that held."""
    workload = profiles.WORKLOADS[settings.workload]
    lines = [
        f"workload {workload.name}: {settings.brokers} brokers, {settings.partitions} partitions "
        f"x {clusters.REPLICATION_FACTOR} replicas, {settings.record_size}-byte records (snappy), "
        f"{settings.in_sync_consumers} in-sync consumers, {settings.step_seconds:g} s steps",
        f"a step holds when it achieves {1 - settings.shortfall:.0%} of the offered rate with no "
        f"failures, every consumer reads {1 - settings.shortfall:.0%} of what was acknowledged, "
        f"and p99 <= {settings.p99_bound_ms:g} ms",
        "",
        "step  " + "cluster MB/s, latency, CPU in cores, load average",
    ]
    lines += [f"{step.number:4d}  {step_line(settings, step)}" for step in steps]
    best = largest_held(steps)
    lines.append("")
    if best is None:
        lines.append(
            f"max rate: no step held (the first offered "
            f"{steps[0].offered_mb_s / settings.brokers if steps else math.nan:.3f} MB/s per "
            f"leader broker)"
        )
    else:
        per_broker = best.offered_mb_s / settings.brokers
        lines.append(
            f"max rate {workload.name}: {per_broker:.3f} MB/s per leader broker, "
            f"{best.offered_mb_s:.3f} MB/s for the cluster "
            f"({best.achieved_mb_s * MB / settings.record_size:,.0f} records/s achieved, "
            f"p99 {best.p99_ms:.1f} ms, load average {best.load_average:.2f}; step {best.number})"
        )
        design = profiles.PROFILES["full"]
        asked = workload.mb_per_broker(design)
        lines.append(
            f"  the design's {asked:g} MB/s per leader broker is {asked / per_broker:.0f} times "
            f"that: --scale {per_broker / asked:.4f} fits the full profile to this rate"
        )
    return "\n".join(lines)
