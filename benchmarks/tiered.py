"""Tiered storage on this machine: rebuild a wiped broker with and without the tier.

    .venv/bin/python benchmarks/tiered.py [--megabytes-per-broker 2000] [--rates 30,5]
    .venv/bin/python benchmarks/tiered.py --megabytes-per-broker 14000 --local-percent 0.5 \
        --rates '' --skip-read
    .venv/bin/python benchmarks/tiered.py --latency-only [--latency-rate 5] [--rounds 6]

One run, two three-broker clusters, the same data and the same retention: a topic of 3
partitions, replication factor 3 (every broker holds all of it), 1 KiB records, 1 MiB
segments; on the tiered cluster remote.storage.enable=true with local.retention.bytes
--local-percent (1% by default, the issue's) of a partition's data. The baseline cluster's files
are deleted before the tiered one starts.

The history is loaded in chunks of --chunk-megabytes, with progress between them; on the tiered
cluster each chunk waits until the leaders have offloaded it and kept only their local
retention, so that its disk holds about the history (in the tier) plus 3 x (a chunk and the
local retention), while the baseline cluster holds 3 x the history. A size the free disk cannot
hold with --keep-free-megabytes to spare is refused before anything starts (the message names
both figures), and the load stops if the free space falls below that meanwhile.

- rebuild (the figure the design reproduces): broker 3 is killed, the cluster left to notice
  (out of every ISR, its leaderships moved), its log dirs deleted, and it is started again. The
  rebuild duration is the design's: from the broker's restart (its process start included) to
  every replica of the topic back in its ISR, as ZooKeeper shows it. Printed with the bytes it
  replicated (its tidelog_replica_fetch_bytes_total), with the tier (median of
  --tier-rebuilds) and without it (the baseline), their ratios, and where the seconds went
  (from the brokers' logs: process up, registration, first fetch, reset to the leader's local
  log start, last ISR expansion);
- produce latency with copying on and off: acks=all at each of --rates MB/s (p95, p99; the
  issue's 30, and one this shared machine can keep up with) on each cluster,
  right after the load, while the tiered one copies its backlog (the MB copied meanwhile are
  printed);
- reading the whole topic from its start: from the tier (the tiered cluster, where nearly all
  of it is remote) next to the local disk (the baseline cluster).

With --latency-only it measures the overhead of copying alone: both clusters up at once, the
same topic (the baseline's retention.bytes equal to the tiered one's local.retention.bytes, so
both delete local segments alike and copying is the one difference), then --rounds short
acks=all runs at --latency-rate MB/s, alternating between them so that a change of the shared
machine's load falls on both; each side's p95/p99 over all its rounds, the overhead against
copying off (the baseline), the rate reached and the MB copied meanwhile.

The load average is printed with each figure: the machine is shared. The tiered rebuild's time
is mostly fixed (a Python broker's start, then a few fetch rounds), the baseline's grows with
the data. Nothing is asserted. At the default size it takes about 20 minutes and 6 GB of disk
(one cluster at a time).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from array import array
from datetime import datetime
from pathlib import Path

from common import MB, RECORD, create_topic, quiet

import tidelog
from tidelog import runtime
from tidelog.cluster.faults import has_full_isr, wait_for_full_isr
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.processes import cpu_seconds
from tidelog.controller import zookeeper
from tidelog.perf.consumer import run_consumer
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.perf.stats import Summary

TOPIC = "rebuild"
PARTITIONS = 3
SEGMENT = 1024 * 1024
TIERED_BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
}


def topic_config(tiered: bool, local_megabytes_per_broker: float) -> dict[str, str]:
    config = {"segment.bytes": str(SEGMENT), "min.insync.replicas": "2"}
    if tiered:
        per_partition = local_megabytes_per_broker * MB / PARTITIONS
        config["remote.storage.enable"] = "true"
        config["local.retention.bytes"] = str(max(SEGMENT, int(per_partition)))
    return config


def local_megabytes(args: argparse.Namespace, percent: float) -> float:
    """What the tiered cluster keeps locally per broker: --local-megabytes-per-broker, or
    ``percent`` (one of --local-percent's, 1% by default, the issue's) of the history."""
    if args.local_megabytes_per_broker is not None:
        return float(args.local_megabytes_per_broker)
    return args.megabytes_per_broker * percent / 100


def local_percents(args: argparse.Namespace) -> list[float]:
    """One tiered cluster per local retention: --local-percent's, or the one fixed size."""
    return [0.0] if args.local_megabytes_per_broker is not None else args.local_percent


def data_megabytes(args: argparse.Namespace) -> float:
    """The topic's data per broker: the history and the paced runs' records."""
    return args.megabytes_per_broker + sum(args.rates) * args.seconds


# Bytes on disk per byte of record values: batch and record headers (4,133 MB replicated for
# 4,000 MB of 1 KiB values) and the offset and time indexes, with some room.
ON_DISK = 1.05
# File descriptors a broker needs beyond one per segment (sockets, indexes being written, ...).
DESCRIPTOR_ROOM = 2000


def megabytes_on_disk(args: argparse.Namespace) -> float:
    """The most either cluster holds at once: the baseline's three copies of the data, or the
    tier's one copy and, on each broker, a chunk being loaded on top of the local retention."""
    data = data_megabytes(args)
    baseline = 3 * data
    most = max(local_megabytes(args, percent) for percent in local_percents(args))
    local = min(args.chunk_megabytes, data) + most + 4 * SEGMENT / MB
    tiered = data + 3 * local
    return ON_DISK * max(baseline, tiered)


def free_megabytes(directory: Path) -> float:
    return shutil.disk_usage(directory).free / MB


def refusal(directory: Path, args: argparse.Namespace) -> str | None:
    """Why this machine cannot hold the run (disk, or a broker's file descriptors: one per
    segment), or None. Raises the descriptor limit to its hard limit first (the brokers, child
    processes, inherit it)."""
    needed, free = megabytes_on_disk(args), free_megabytes(directory)
    keep = args.keep_free_megabytes
    if needed + keep > free:
        fits = (free - keep) / ON_DISK / 3 - (data_megabytes(args) - args.megabytes_per_broker)
        return (
            f"--megabytes-per-broker {args.megabytes_per_broker:,.0f} needs {needed + keep:,.0f}"
            f" MB of disk: {needed:,.0f} MB at once (3 x {data_megabytes(args):,.0f} MB of data "
            f"on the baseline cluster) and {keep:,.0f} MB kept free (--keep-free-megabytes); "
            f"{free:,.0f} MB are free under {directory}, enough for at most {fits:,.0f} MB "
            "per broker"
        )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    segments = ON_DISK * data_megabytes(args) * MB / SEGMENT
    if segments + DESCRIPTOR_ROOM > hard:
        return (
            f"--megabytes-per-broker {args.megabytes_per_broker:,.0f} makes about "
            f"{segments:,.0f} segments per broker, each an open file, and the limit on open "
            f"files is {hard:,} (ulimit -Hn)"
        )
    return None


def broker_bytes(cluster: LocalCluster, broker_id: int) -> int:
    logs = Path(cluster.directory) / f"broker-{broker_id}" / "logs"
    total = 0
    for path in logs.glob(f"{TOPIC}-*/*.log"):
        with contextlib.suppress(FileNotFoundError):  # deleted by retention since the glob
            total += path.stat().st_size
    return total


def leaders_off(cluster: LocalCluster, broker_id: int) -> bool:
    with zookeeper.session(cluster.zookeeper) as client:
        if broker_id in zookeeper.read_brokers(client):
            return False
        metadata = zookeeper.read_topic(client, TOPIC)
        return all(
            state.leader != broker_id and broker_id not in state.isr
            for state in metadata.states.values()
        )


def log_times(path: Path, since: float, pattern: str) -> list[float]:
    """Wall-clock times (seconds since the epoch) of a broker log's lines at or after
    ``since`` that contain ``pattern``."""
    times = []
    for line in path.read_text(errors="replace").splitlines():
        if pattern in line:
            try:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            if stamp >= since:
                times.append(stamp)
    return times


def timeline(cluster: LocalCluster, broker_id: int, since: float, ended: float) -> str:
    """Where a rebuild's seconds went, from the brokers' logs: the rebuilt broker's start,
    registration, first fetches, LeaderAndIsr, reset to the leader's local log start, its remote
    indexes built from the tier, and the last ISR expansion on the leaders, each as seconds
    after the restart (in the order they happened)."""
    own = Path(cluster.directory) / f"broker-{broker_id}" / "broker.log"
    steps = [
        ("process up (imports done)", log_times(own, since, "starting: loading logs")[:1]),
        ("registered in ZooKeeper", log_times(own, since, "registered in ZooKeeper")[:1]),
        ("serving", log_times(own, since, f"broker {broker_id} started:")[:1]),
        ("first partition followed", log_times(own, since, ": following broker")[:1]),
        ("LeaderAndIsr received", log_times(own, since, "LeaderAndIsr from controller")[:1]),
        ("last reset to local log start", log_times(own, since, "local log start")[-1:]),
        ("remote indexes built", log_times(own, since, "remote segments from the tier")[-1:]),
    ]
    expansions = [
        stamp
        for other in cluster.broker_ids
        if other != broker_id
        for stamp in log_times(
            Path(cluster.directory) / f"broker-{other}" / "broker.log", since, "ISR expands"
        )
    ]
    steps.append(("last ISR expansion on a leader", sorted(expansions)[-1:]))
    steps.append(("seen in ZooKeeper by the benchmark", [ended]))
    found = sorted((stamps[0], what) for what, stamps in steps if stamps)
    return ", ".join(f"{what} {stamp - since:.2f}" for stamp, what in found)


def rebuild(cluster: LocalCluster, broker_id: int, tiered: bool) -> tuple[float, int, str]:
    """Seconds from the wiped broker's restart to every replica in every ISR (the design's
    rebuild duration), the bytes it holds then, and where the seconds went. With the tier,
    the timeline waits (after the duration is taken) for the broker's remote indexes of every
    partition, which may be built after it is back in the ISRs."""
    cluster.signal_broker(broker_id, signal.SIGKILL)
    wait_until(lambda: leaders_off(cluster, broker_id), 120, f"broker {broker_id} out of every ISR")
    shutil.rmtree(Path(cluster.directory) / f"broker-{broker_id}" / "logs")
    since = time.time()
    started = time.perf_counter()
    cluster.start_broker(broker_id, wait=False)
    with zookeeper.session(cluster.zookeeper) as client:  # one session: polls cost no connect
        wait_until(lambda: has_full_isr(client, TOPIC), 3600, f"{TOPIC} to have full ISRs", 0.02)
    taken = time.perf_counter() - started
    used = cpu_seconds(cluster.broker(broker_id).pid)
    cpu = float("nan") if used is None else used
    if tiered:
        own = Path(cluster.directory) / f"broker-{broker_id}" / "broker.log"
        wait_until(
            lambda: len(log_times(own, since, "remote segments from the tier")) >= PARTITIONS,
            120,
            f"broker {broker_id} to index the remote segments of every partition",
        )
    where = timeline(cluster, broker_id, since, since + taken)
    return taken, broker_bytes(cluster, broker_id), f"{where}; the broker used {cpu:.2f} s of CPU"


def wait_offloaded(cluster: LocalCluster, local_megabytes_per_broker: float) -> None:
    """Until the leaders keep about their local retention: all older data is in the tier."""
    limit = 3 * SEGMENT + local_megabytes_per_broker * MB

    def small() -> bool:
        return all(broker_bytes(cluster, b) / PARTITIONS < limit for b in (1, 2, 3))

    wait_until(small, 1800, "local retention to leave only recent data on each broker")


async def produce(cluster: LocalCluster, megabytes: float, rate: float, acks: int):  # type: ignore[no-untyped-def]
    settings = ProducerSettings(
        TOPIC,
        int(megabytes * MB / RECORD),
        RECORD,
        throughput=rate,
        acks=acks,
        batch_size=128 * 1024,
        linger_ms=3,
    )
    summary, _ = await run_producer(cluster.bootstrap_servers, settings, progress=quiet)
    return summary


def metric_total(cluster: LocalCluster, broker_id: int, name: str, topic: str = "") -> float:
    """The sum of a /metrics counter's lines on a broker (those of ``topic`` if given)."""
    port = cluster.broker(broker_id).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if (line.startswith(name + "{") or line.startswith(name + " "))
        and (not topic or f'topic="{topic}"' in line)
    )


def copied(cluster: LocalCluster) -> float:
    return sum(
        metric_total(cluster, b, "tidelog_remote_copy_bytes_total") for b in cluster.broker_ids
    )


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text} ({load()})", flush=True)


def load_history(
    cluster: LocalCluster, name: str, directory: Path, args: argparse.Namespace, local: float
) -> float:
    """Produces the history (acks=1, as fast as it goes) in chunks; on the tiered cluster each
    chunk is offloaded before the next (to ``local`` MB per broker; 0: not tiered). Returns the
    producers' MB/s. Stops (SystemExit) if the free disk falls below --keep-free-megabytes plus
    what the next chunk takes."""
    megabytes = args.megabytes_per_broker
    loaded = producing = 0.0
    started = time.perf_counter()
    while loaded < megabytes:
        chunk = min(args.chunk_megabytes, megabytes - loaded)
        free = free_megabytes(directory)
        if free < args.keep_free_megabytes + 3 * ON_DISK * chunk:
            sys.exit(
                f"{name}: stopped after {loaded:,.0f} MB: {free:,.0f} MB free, and the next "
                f"chunk needs {3 * ON_DISK * chunk:,.0f} MB with {args.keep_free_megabytes:,.0f} "
                "MB kept free"
            )
        summary = runtime.run(produce(cluster, chunk, -1, 1))
        loaded += chunk
        producing += chunk / summary.megabytes_per_second
        if local:
            wait_offloaded(cluster, local)
        elapsed = time.perf_counter() - started
        fullest = max(broker_bytes(cluster, b) for b in cluster.broker_ids) / MB
        say(
            f"{name}: {loaded:,.0f} of {megabytes:,.0f} MB loaded "
            f"({summary.megabytes_per_second:.1f} MB/s this chunk), {fullest:,.0f} MB on the "
            f"fullest broker's disk, {free_megabytes(directory):,.0f} MB free, about "
            f"{elapsed / loaded * (megabytes - loaded):.0f} s to go"
        )
    wait_for_full_isr(cluster, TOPIC, timeout=1800)
    return megabytes / producing


def run(tiered: bool, directory: Path, args: argparse.Namespace, percent: float = 0.0) -> dict:
    """One cluster's run; the tiered one keeps ``percent`` of the history locally."""
    name = "tiered" if tiered else "baseline"
    if tiered and args.local_megabytes_per_broker is None:
        name = f"tiered (local {percent:g}%)"
    local = local_megabytes(args, percent) if tiered else 0.0
    megabytes, seconds = args.megabytes_per_broker, args.seconds
    cluster = LocalCluster(directory / ("tiered" if tiered else "baseline"))
    cluster.up(3, overrides=TIERED_BROKER if tiered else {}, progress=quiet)
    try:
        create_topic(cluster, TOPIC, PARTITIONS, 3, topic_config(tiered, local))
        load_mb_s = load_history(cluster, name, directory, args, local)
        say(f"{name}: loaded {megabytes:,.0f} MB at {load_mb_s:.1f} MB/s")
        os.sync()  # the paced run starts without the load's writeback
        paced = {}
        for rate_mb in args.rates:
            copied_before = copied(cluster) if tiered else 0.0
            load_during = os.getloadavg()[0]
            summary = runtime.run(produce(cluster, rate_mb * seconds, rate_mb * MB / RECORD, -1))
            copied_during = (copied(cluster) - copied_before) if tiered else 0.0
            paced[rate_mb] = (summary, load_during, copied_during)
            latency = summary.latency()
            say(
                f"{name}: acks=all at {rate_mb} MB/s: p95 {latency['p95']:.1f} ms, p99 "
                f"{latency['p99']:.1f} ms, {copied_during / MB:.0f} MB copied meanwhile"
            )
        if tiered:
            wait_offloaded(cluster, local)
            say(f"{name}: offloaded")
        total = megabytes + sum(args.rates) * seconds
        read_mb_s = float("nan")
        if not args.skip_read:
            read = runtime.run(
                run_consumer(
                    cluster.bootstrap_servers, TOPIC, int(total * MB / RECORD), progress=quiet
                )
            )
            read_mb_s = read.megabytes_per_second
            say(f"{name}: read the topic at {read_mb_s:.1f} MB/s")
        os.sync()
        rebuilds = []
        for _ in range(args.tier_rebuilds if tiered else 1):
            taken, held, where = rebuild(cluster, 3, tiered)
            replicated = metric_total(cluster, 3, "tidelog_replica_fetch_bytes_total", TOPIC)
            rebuilds.append((taken, replicated, held, os.getloadavg()[0], where))
            say(f"{name}: rebuilt in {taken:.2f} s, {replicated / MB:.1f} MB replicated: {where}")
        return {
            "local": local,
            "load_mb_s": load_mb_s,
            "paced": paced,
            "read_mb_s": read_mb_s,
            "rebuilds": rebuilds,
        }
    finally:
        cluster.down(progress=quiet)
        shutil.rmtree(cluster.directory, ignore_errors=True)  # gigabytes: not kept till the end


LATENCY_RETENTION = 8 * SEGMENT  # per partition: local on the tiered side, total on the other


def latency_topic(tiered: bool) -> dict[str, str]:
    config = {"segment.bytes": str(SEGMENT), "min.insync.replicas": "2"}
    if tiered:
        config["remote.storage.enable"] = "true"
        config["local.retention.bytes"] = str(LATENCY_RETENTION)
    else:
        config["retention.bytes"] = str(LATENCY_RETENTION)
    return config


def latency_only(directory: Path, args: argparse.Namespace) -> None:
    """Produce latency with copying off (baseline) and on, in alternating rounds."""
    clusters = {
        False: LocalCluster(directory / "copying-off"),
        True: LocalCluster(directory / "copying-on"),
    }
    try:
        for tiered, cluster in clusters.items():
            # retention checked as often on both sides: they delete local segments alike
            overrides = TIERED_BROKER if tiered else {"log.retention.check.interval.ms": "1000"}
            cluster.up(3, overrides=overrides, progress=quiet)
            create_topic(cluster, TOPIC, PARTITIONS, 3, latency_topic(tiered))
        rate, seconds = args.latency_rate, args.seconds
        latencies: dict[bool, list] = {False: [], True: []}
        reached: dict[bool, list[float]] = {False: [], True: []}
        copied_total = 0.0
        say(f"{args.rounds} rounds of {seconds:.0f} s at {rate} MB/s acks=all on each cluster")
        for number in range(args.rounds):
            order = (False, True) if number % 2 == 0 else (True, False)
            for tiered in order:
                cluster = clusters[tiered]
                before = copied(cluster) if tiered else 0.0
                load_before = os.getloadavg()[0]
                summary = runtime.run(produce(cluster, rate * seconds, rate * MB / RECORD, -1))
                during = (copied(cluster) - before) if tiered else 0.0
                copied_total += during
                latencies[tiered].append(summary.latencies_ms)
                reached[tiered].append(summary.megabytes_per_second)
                latency = summary.latency()
                say(
                    f"round {number + 1}, copying {'on ' if tiered else 'off'}: "
                    f"{summary.megabytes_per_second:.2f} MB/s reached, "
                    f"p95 {latency['p95']:.1f} ms, p99 {latency['p99']:.1f} ms, "
                    f"{during / MB:.0f} MB copied "
                    f"(load before {load_before:.1f})"
                )
        figures = {}
        for tiered in (False, True):
            merged = array("d")
            for part in latencies[tiered]:
                merged.extend(part)
            figures[tiered] = Summary(len(merged), len(merged) * RECORD, 1.0, merged).latency()
        off, on = figures[False], figures[True]
        print(f"acks=all at {rate} MB/s asked, {args.rounds} rounds of {seconds:.0f} s each side:")
        for tiered, label in ((False, "copying off (baseline)"), (True, "copying on")):
            mean_rate = sum(reached[tiered]) / len(reached[tiered])
            print(
                f"  {label:22} p95 {figures[tiered]['p95']:8.1f} ms  p99 "
                f"{figures[tiered]['p99']:8.1f} ms  ({mean_rate:.2f} MB/s reached on average)"
            )
        print(
            f"  overhead of copying: p95 {on['p95'] / off['p95'] - 1:+.0%}, "
            f"p99 {on['p99'] / off['p99'] - 1:+.0%}; {copied_total / MB:.0f} MB copied to the tier "
            f"during the copying-on rounds ({load()} at the end)"
        )
    finally:
        for cluster in clusters.values():
            cluster.down(progress=quiet)


def compile_bytecode() -> None:
    """Writes tidelog's bytecode, so that brokers start from it as an installed package does.
    Where PYTHONDONTWRITEBYTECODE is set (as in the shells this benchmark ran in) nothing else
    writes it, and every broker start would compile tidelog's modules from source first: 0.12
    to 0.16 s of CPU, a third of a broker's imports, on both sides of every rebuild."""
    compileall.compile_dir(Path(tidelog.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes-per-broker", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the paced run")
    parser.add_argument(
        "--local-megabytes-per-broker",
        type=float,
        help="local retention of the tiered cluster (default: --local-percent of the history)",
    )
    parser.add_argument(
        "--local-percent",
        type=lambda text: [float(p) for p in text.split(",") if p.strip()],
        default=[1.0],
        help="local retention of the tiered cluster as a percentage of the history, "
        "comma-separated for one tiered cluster each against the same baseline (default 1)",
    )
    parser.add_argument(
        "--chunk-megabytes",
        type=float,
        default=1000.0,
        help="the history is loaded in chunks of this size (the tiered cluster offloads each)",
    )
    parser.add_argument(
        "--keep-free-megabytes",
        type=float,
        default=10_000.0,
        help="disk left free at every moment: a larger run is refused (default 10000)",
    )
    parser.add_argument(
        "--rates",
        type=lambda text: [float(r) for r in text.split(",") if r.strip()],
        default=[30.0, 5.0],
        help="paced acks=all runs, MB/s, comma-separated (default 30,5; '' for none)",
    )
    parser.add_argument(
        "--skip-read", action="store_true", help="leave out reading the topic from its start"
    )
    parser.add_argument(
        "--tier-rebuilds", type=int, default=3, help="rebuilds with the tier (median taken)"
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="only produce latency with copying off and on, in alternating rounds",
    )
    parser.add_argument("--latency-rate", type=float, default=5.0, help="MB/s (--latency-only)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per side (--latency-only)")
    args = parser.parse_args()
    compile_bytecode()
    os.sync()
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as name:
        directory = Path(name)
        if args.latency_only:
            latency_only(directory, args)
            return
        refused = refusal(directory, args)
        if refused:
            parser.exit(2, f"benchmarks/tiered.py: refused: {refused}\n")
        say(
            f"{args.megabytes_per_broker:,.0f} MB per broker: up to "
            f"{megabytes_on_disk(args):,.0f} MB on disk at once, "
            f"{free_megabytes(directory):,.0f} MB free"
        )
        base = run(False, directory, args)
        tiers = [run(True, directory, args, percent) for percent in local_percents(args)]
    data = data_megabytes(args)
    print(f"data per broker: {data:,.0f} MB (replication factor 3, {PARTITIONS} partitions)")
    base_s, base_bytes, _, base_load, base_where = base["rebuilds"][0]
    print("rebuild of a wiped broker (its restart to every replica back in every ISR):")
    print(
        f"  without tier {base_s:7.1f} s, {base_bytes / MB:8.1f} MB replicated "
        f"(load {base_load:.1f})"
    )
    print(f"  where the seconds went without tier: {base_where}")
    for tier in tiers:
        local = tier["local"]
        tier_s, tier_bytes, _, tier_load, tier_where = sorted(tier["rebuilds"])[
            len(tier["rebuilds"]) // 2
        ]
        runs = ", ".join(f"{r[0]:.2f}" for r in tier["rebuilds"])
        print(
            f"  with tier, local retention {local:,.1f} MB per broker ({local / data:.2%} of the "
            f"data): {tier_s:.2f} s, {tier_bytes / MB:.1f} MB replicated "
            f"(load {tier_load:.1f}; median of {runs} s)"
        )
        ratio = base_bytes / max(tier_bytes, 1)
        print(
            f"    time ratio {base_s / tier_s:.1f}x, bytes ratio {ratio:.1f}x "
            f"(local retention {local / data:.2%} of the data)"
        )
        print(f"    where the seconds went with tier: {tier_where}")
    tier = tiers[0]
    for rate in args.rates:
        for label, result in (("copying off (baseline)", base), ("copying on", tier)):
            summary, load_during, _ = result["paced"][rate]
            latency = summary.latency()
            print(
                f"acks=all at {rate:.0f} MB/s ({summary.megabytes_per_second:.1f} reached), "
                f"{label:22} p95 {latency['p95']:8.1f} ms  p99 {latency['p99']:8.1f} ms "
                f"(load {load_during:.1f})"
            )
        off, on = base["paced"][rate][0].latency(), tier["paced"][rate][0].latency()
        print(
            f"  copied to the tier meanwhile: {tier['paced'][rate][2] / MB:.0f} MB; overhead of "
            f"copying: p95 {on['p95'] / off['p95'] - 1:+.0%}, p99 {on['p99'] / off['p99'] - 1:+.0%}"
        )
    if args.skip_read:
        return
    print(
        f"read the topic from its start: local {base['read_mb_s']:.1f} MB/s, "
        f"remote tier {tier['read_mb_s']:.1f} MB/s "
        f"({tier['read_mb_s'] / base['read_mb_s']:.2f} of local)"
    )


if __name__ == "__main__":
    main()
