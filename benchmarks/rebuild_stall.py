"""acks=all produce latency through each phase of a broker's kill, wipe and rebuild.

Three local brokers, a topic with replication factor 3 and min.insync.replicas 2, some history
(with --tiered most of it in the remote tier), and a paced acks=all producer. During the traffic
the highest-numbered broker that is not the controller is killed (SIGKILL; with --before-traffic,
before the traffic starts, as `tidelog perf tiered-storage` case 3 does), its data is wiped once
the cluster has seen it gone, it is started again and rebuilds; with --elect a preferred leader
election gives it its partitions back afterwards. Each record's latency is put in the phase it
was due in, by the events and the brokers' log lines:

    baseline   before the kill
    a          kill -> the controller moves its leaderships and ISRs (zookeeper.session.timeout.ms)
    b          after the move, until the restart (the producer's backlog drains)
    c          restart -> its first ISR join (it catches up)
    c2         first ISR join -> in every ISR
    quiet      in every ISR, before the election
    d          the 3 s after the preferred leader election is asked for
    after      the rest

The brokers run with a loop watchdog (TIDELOG_LOOP_WATCHDOG_MS, --watchdog-ms): each block of a
broker's event loop of at least that long is put in the phase it began in, per broker, with the
stacks that held the loop longest.

    .venv/bin/python benchmarks/rebuild_stall.py --tiered --elect
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
from common import create_topic

from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import zookeeper
from tidelog.loop_watchdog import ENVIRONMENT_VARIABLE as WATCHDOG_VARIABLE
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.records.format import Codec

TOPIC = "stall"
RECORD = 480
LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
LOOP_BLOCK = re.compile(
    r"event loop blocked (\d+) ms .*?(?:on cpu (\d+), runnable (\d+), asleep (\d+) ms.*)?"
    r"samples in: (.*)$"
)
OVERRIDES = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
}


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def log_lines(cluster: LocalCluster, pattern: str) -> list[tuple[float, int, re.Match]]:
    """(wall-clock time, broker id, match) of the brokers' log lines matching ``pattern``."""
    found = []
    for broker_id in cluster.broker_ids:
        for line in cluster.broker(broker_id).log_path.read_text().splitlines():
            stamp = LOG_TIME.match(line)
            matched = re.search(pattern, line) if stamp else None
            if stamp and matched:
                moment = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
                found.append((moment.timestamp(), broker_id, matched))
    return sorted(found, key=lambda found_line: found_line[0])


def log_times(cluster: LocalCluster, pattern: str) -> list[float]:
    """Wall-clock times of the brokers' log lines matching ``pattern``, in order."""
    return [moment for moment, _, _ in log_lines(cluster, pattern)]


@dataclass(frozen=True)
class LoopBlock:
    """A block of a broker's event loop the watchdog logged: when it began, for how long, how
    much of it the loop's thread was on a CPU, runnable without one, or asleep (system calls,
    the GIL), and the stack seen in most of its samples (innermost frame first)."""

    broker_id: int
    began: float
    milliseconds: int
    on_cpu_ms: int
    runnable_ms: int
    asleep_ms: int
    stack: str


def loop_blocks(cluster: LocalCluster) -> list[LoopBlock]:
    blocks = []
    for ended, broker_id, found in log_lines(cluster, LOOP_BLOCK.pattern):
        milliseconds, on_cpu, runnable, asleep = (int(found.group(n) or 0) for n in range(1, 5))
        began = ended - milliseconds / 1000
        blocks.append(
            LoopBlock(broker_id, began, milliseconds, on_cpu, runnable, asleep, found.group(5))
        )
    return blocks


async def run(args: argparse.Namespace, directory: Path) -> None:
    os.environ[WATCHDOG_VARIABLE] = str(args.watchdog_ms)  # the brokers inherit it
    cluster = LocalCluster(directory)
    cluster.up(3, overrides=OVERRIDES, progress=lambda _: None)
    try:
        config = {"min.insync.replicas": "2", "segment.bytes": str(args.segment_bytes)}
        if args.tiered:
            config |= {
                "remote.storage.enable": "true",
                "local.retention.bytes": str(args.segment_bytes),
            }
        create_topic(cluster, TOPIC, args.partitions, 3, config)
        history = ProducerSettings(
            TOPIC, int(args.history_mb * 1e6 / RECORD), RECORD, acks=1, codec=Codec.SNAPPY,
            batch_size=64 * 1024, keys=10_000,
        )  # fmt: skip
        await run_producer(cluster.bootstrap_servers, history, progress=lambda _: None)
        with zookeeper.session(cluster.zookeeper) as client:
            controller = zookeeper.read_controller(client)
        target = max(b for b in cluster.broker_ids if b != controller)
        session_timeout_s = int(OVERRIDES["zookeeper.session.timeout.ms"]) / 1000
        events: dict[str, float] = {}
        if args.before_traffic:
            faults.kill_and_wipe(cluster, target, session_timeout_s=session_timeout_s)
        traffic = ProducerSettings(
            TOPIC, int(args.rate * args.seconds), RECORD, throughput=args.rate, acks=-1,
            codec=Codec.SNAPPY, batch_size=64 * 1024, linger_ms=2, keys=10_000,
        )  # fmt: skip
        acks_dir = directory / "acks"
        acks_dir.mkdir()
        started = time.time()

        async def inject() -> None:
            await asyncio.sleep(args.kill_at)
            if not args.before_traffic:
                events["kill"] = time.time()
                await asyncio.to_thread(
                    faults.kill_and_wipe, cluster, target, session_timeout_s=session_timeout_s
                )
            events["restart"] = time.time()
            await asyncio.to_thread(cluster.start_broker, target, False)
            with zookeeper.session(cluster.zookeeper) as client:
                await asyncio.to_thread(
                    wait_until,
                    lambda: faults.has_full_isr(client, TOPIC),
                    600,
                    f"broker {target} back in every ISR",
                    0.05,
                )
                events["back"] = time.time()
                if args.elect:
                    await asyncio.sleep(3)
                    events["elect"] = time.time()
                    zookeeper.request_preferred_leader_election(
                        client, [(TOPIC, p) for p in range(args.partitions)]
                    )

        injecting = asyncio.create_task(inject())
        _, errors = await run_producer(
            cluster.bootstrap_servers, traffic, progress=lambda _: None, run_dir=acks_dir
        )
        await injecting
        if "kill" in events:
            moved = log_times(cluster, r"controller: .*(brokers gone|leader \d+ -> \d+ in)")
            events["moved"] = next(t for t in moved if t > events["kill"])
        joined = log_times(cluster, r"ISR expands")
        events["joined"] = next(t for t in joined if t > events["restart"])
        report(args, target, started, events, acks_dir, errors, loop_blocks(cluster))
    finally:
        cluster.down(progress=lambda _: None)
        if args.keep_logs:
            Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
            for broker_id in cluster.broker_ids:
                destination = Path(args.keep_logs) / f"broker-{broker_id}.log"
                shutil.copyfile(cluster.broker(broker_id).log_path, destination)


def report(
    args: argparse.Namespace,
    target: int,
    started: float,
    events: dict[str, float],
    acks_dir: Path,
    errors: dict[str, int],
    blocks: list[LoopBlock],
) -> None:
    table = pq.read_table(acks_dir / "acks.parquet", columns=["acked_at", "latency_ms"])
    acked = [moment.timestamp() for moment in table.column("acked_at").to_pylist()]
    latencies = table.column("latency_ms").to_pylist()
    due = [at - ms / 1000 for at, ms in zip(acked, latencies, strict=True)]
    end = started + args.seconds
    bounds = [("baseline", started + 0.5, events.get("kill", events["restart"]))]
    if "kill" in events:
        bounds += [
            ("a", events["kill"], events["moved"]),
            ("b", events["moved"], events["restart"]),
        ]
    bounds += [("c", events["restart"], events["joined"]), ("c2", events["joined"], events["back"])]
    if "elect" in events:
        bounds += [
            ("quiet", events["back"], events["elect"]),
            ("d", events["elect"], events["elect"] + 3),
            ("after", events["elect"] + 3, end),
        ]
    else:
        bounds += [("after", events["back"], end)]
    kind = "tiered" if args.tiered else "without the tier"
    when = "before the traffic" if args.before_traffic else f"{args.kill_at:g} s into it"
    print(
        f"broker {target} killed {when}, rebuilt {kind}; {args.partitions} partitions, "
        f"{args.history_mb:g} MB of history, acks=all at {args.rate:g} records/s; {load()}"
    )
    baseline_p99 = None
    for name, low, high in bounds:
        inside = sorted(ms for at, ms in zip(due, latencies, strict=True) if low <= at < high)
        if not inside:
            print(f"  {name:8s} {high - low:6.2f} s  no records due")
            continue
        p99 = inside[min(len(inside) - 1, int(len(inside) * 0.99))]
        baseline_p99 = baseline_p99 or p99
        median = inside[len(inside) // 2]
        print(
            f"  {name:8s} {high - low:6.2f} s  n={len(inside):6d}  p50 {median:7.1f}"
            f"  p99 {p99:7.1f}  max {inside[-1]:7.1f} ms  (p99 {p99 / baseline_p99:5.1f}x baseline)"
        )
    print(f"  failed records: {errors or 'none'}")
    report_loop_blocks(args, target, bounds, blocks)


def report_loop_blocks(
    args: argparse.Namespace,
    target: int,
    bounds: list[tuple[str, float, float]],
    blocks: list[LoopBlock],
) -> None:
    """Per phase and broker: how many blocks of at least --watchdog-ms, their total and longest;
    then the stacks (their innermost frames) that held the loops longest in all."""
    print(f"event loop blocks of {args.watchdog_ms:g} ms or more (broker {target} rebuilt):")
    for name, low, high in bounds:
        by_broker: dict[int, list[LoopBlock]] = defaultdict(list)
        for block in blocks:
            if low <= block.began < high:
                by_broker[block.broker_id].append(block)
        cells = [
            f"broker {broker_id}: {len(found)} blocks, {sum(b.milliseconds for b in found)} ms "
            f"(cpu {sum(b.on_cpu_ms for b in found)}, runnable {sum(b.runnable_ms for b in found)}"
            f", asleep {sum(b.asleep_ms for b in found)}), max {max(b.milliseconds for b in found)}"
            for broker_id, found in sorted(by_broker.items())
        ]
        print(f"  {name:8s} {'; '.join(cells) or 'none'}")
    by_stack: dict[str, list[LoopBlock]] = defaultdict(list)
    for block in blocks:
        if bounds[0][1] <= block.began < bounds[-1][2]:
            innermost = " < ".join(block.stack.split(" < ")[: args.stack_frames])
            by_stack[innermost].append(block)
    ranked = sorted(by_stack.items(), key=lambda item: -sum(b.milliseconds for b in item[1]))
    for stack, found in ranked[: args.stacks]:
        print(
            f"  {len(found):4d} blocks, {sum(b.milliseconds for b in found):6d} ms (cpu "
            f"{sum(b.on_cpu_ms for b in found)}, runnable {sum(b.runnable_ms for b in found)}, "
            f"asleep {sum(b.asleep_ms for b in found)}), max "
            f"{max(b.milliseconds for b in found):4d}: {stack}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiered", action="store_true", help="the topic uses the remote tier")
    parser.add_argument("--elect", action="store_true", help="a preferred election afterwards")
    parser.add_argument("--before-traffic", action="store_true", help="kill and wipe first")
    parser.add_argument("--partitions", type=int, default=60)
    parser.add_argument("--history-mb", type=float, default=100)
    parser.add_argument("--rate", type=float, default=2000, help="records/s of 480 bytes")
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument(
        "--segment-bytes",
        type=int,
        default=256 * 1024,
        help="segment.bytes, and local.retention.bytes with --tiered (perf's full profile: 1 MiB)",
    )
    parser.add_argument("--kill-at", type=float, default=5, help="seconds into the traffic")
    parser.add_argument("--watchdog-ms", type=float, default=20, help="loop blocks reported")
    parser.add_argument("--stacks", type=int, default=12, help="stacks of loop blocks shown")
    parser.add_argument("--stack-frames", type=int, default=5, help="frames shown per stack")
    parser.add_argument("--keep-logs", help="a directory to copy the brokers' logs to")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="rebuild-stall-"))
    try:
        asyncio.run(run(args, directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
