"""Many partitions: 3 brokers, replication factor 3, min.insync.replicas 2, per partition count.

    .venv/bin/python benchmarks/partitions.py [--counts 6,100,1000,3000] [--seconds 10]
                                              [--pause 30] [--profile DIR] [--idle-only]
                                              [--override KEY=VALUE ...]

For each count, on a fresh cluster: the time to create the topic (ZooKeeper written, then every
replica's log open with a full ISR); idle CPU (share of one core), open files and resident memory
per broker; the time to write once to every partition (first writes cost more), then
records/s of 100 B records with acks=all and acks=1 from librdkafka
(confluent-kafka, an independent client) and from tidelog's own producer; MB/s of 1 KiB snappy
records with acks=all; p99 produce latency at the design's 30 MB/s acks=all; and how long a
follower paused for ``--pause`` seconds under load takes to be back in every ISR. Figures are
printed with their ratio to the first (baseline) count of the same run. ``--profile DIR`` writes
py-spy's collapsed stacks (raw) of one leader under acks=all load. At the end of each count the
same checks run at every count, and the lines say whether they passed: every partition has a
leader and a full ISR, every replica has its leader's log end offset, and the leaders hold at
least as many records as were acknowledged (nothing acknowledged lost), not counting the acks=1
load of the pause: a paused leader's acks=1 records that no follower had are lost when it
comes back, as in Kafka (how many is printed). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from common import MB, quiet
from kazoo.exceptions import ConnectionLoss

from tidelog import runtime
from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.records.compression import Codec

TOPIC = "many"
SMALL = 100
LARGE = 1024
CONFIG = {"min.insync.replicas": "2"}
CATCH_UP_TIMEOUT = 600  # s


def brokers(cluster: LocalCluster) -> dict[int, int]:
    """broker id -> process id"""
    return {b.broker_id: b.pid for b in cluster.state.brokers.values() if b.pid}  # type: ignore[union-attr,misc]


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def create(cluster: LocalCluster, partitions: int) -> tuple[float, float]:
    """Seconds until ZooKeeper holds the topic, and until every leader serves it in full ISR."""
    start = time.monotonic()
    for attempt in range(3):  # a busy machine's ZooKeeper may drop the session mid-write
        try:
            with zookeeper.session(cluster.zookeeper) as client:
                if not client.exists(zookeeper.topic_path(TOPIC)):
                    topics.create_topic(client, TOPIC, partitions, 3, CONFIG)
            break
        except ConnectionLoss:
            print(f"  (ZooKeeper connection lost while creating the topic, attempt {attempt + 1})")
    written = time.monotonic() - start
    wait_for_full_isr(cluster, TOPIC, timeout=600)  # every replica's log open, too
    return written, time.monotonic() - start


def idle(cluster: LocalCluster, seconds: float) -> dict[int, tuple[float, int, float]]:
    """Per broker: share of one core used while nothing is produced, open files, MB resident."""
    pids = brokers(cluster)
    before = cluster.brokers_cpu()
    time.sleep(seconds)  # the measurement itself: CPU used over this window
    after = cluster.brokers_cpu()
    return {
        b: (
            (after[p] - before[p]) / seconds,
            len(os.listdir(f"/proc/{p}/fd")),
            resident_mb(p),
        )
        for b, p in pids.items()
    }


def librdkafka_rate(cluster: LocalCluster, acks: str, seconds: float) -> tuple[float, int]:
    """Records/s of 100 B records delivered by confluent-kafka, keyless over every partition,
    and how many were delivered."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": acks,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "api.version.request": True,
            "broker.version.fallback": "0.10.0",
            "log_level": 3,  # not the warnings that these settings are deprecated
        }
    )
    delivered = 0

    def count(error, _message) -> None:  # type: ignore[no-untyped-def]
        nonlocal delivered
        if error is None:
            delivered += 1

    payload = b"x" * SMALL
    deadline = time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < deadline:
        try:
            producer.produce(TOPIC, payload, on_delivery=count)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    return delivered / (time.monotonic() - start), delivered


def tidelog_run(cluster: LocalCluster, settings: ProducerSettings):  # type: ignore[no-untyped-def]
    summary, errors = runtime.run(run_producer(cluster.bootstrap_servers, settings, progress=quiet))
    return summary, errors


def catch_up(cluster: LocalCluster, pause_s: float, acked: list[int]) -> float:
    """Pauses a broker (SIGSTOP) for ``pause_s`` under a 5 MB/s acks=1 load, resumes it, and
    returns the seconds until it is back in every ISR; the records acknowledged go to
    ``acked``."""
    victim = max(cluster.broker_ids)
    load = ProducerSettings(
        TOPIC, int(5 * MB / LARGE * (pause_s + 5)), LARGE, throughput=5 * MB / LARGE, acks=1
    )
    thread = threading.Thread(
        target=lambda: acked.append(tidelog_run(cluster, load)[0].records), daemon=True
    )
    thread.start()
    cluster.signal_broker(victim, signal.SIGSTOP)
    time.sleep(pause_s)  # the pause being measured
    cluster.signal_broker(victim, signal.SIGCONT)
    resumed = time.monotonic()
    thread.join()
    try:
        wait_for_full_isr(cluster, TOPIC, timeout=CATCH_UP_TIMEOUT)
    except ClusterError as error:
        print(f"  ({error})")
        return float("inf")  # not back in every ISR within the timeout
    return time.monotonic() - resumed


def profile(cluster: LocalCluster, directory: Path, seconds: float) -> None:
    """py-spy's collapsed stacks of broker 1 while acks=all 100 B records are produced."""
    directory.mkdir(parents=True, exist_ok=True)
    pid = brokers(cluster)[min(cluster.broker_ids)]
    out = directory / f"leader-{len(cluster_partitions(cluster))}.txt"
    py_spy = str(Path(sys.executable).parent / "py-spy")
    command = [py_spy, "record", "-p", str(pid), "-o", str(out), "-f", "raw"]
    command += ["-d", str(int(seconds)), "-r", "50", "--nonblocking"]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rate = 20_000  # records/s: the run lasts as long as the profile
    load = ProducerSettings(TOPIC, int(rate * seconds), SMALL, throughput=rate, acks=-1)
    tidelog_run(cluster, load)
    spy.wait()
    print(f"  profile of broker 1 under acks=all load: {out}")


def check(cluster: LocalCluster, acknowledged: int, paused_acks_1: int) -> list[str]:
    """The checks every count must pass; what failed (nothing: all passed). ``acknowledged``
    must all be held; of ``paused_acks_1`` (acks=1 during the pause), how many were not is
    printed."""
    failures = []
    try:
        wait_for_full_isr(cluster, TOPIC, timeout=60)
    except ClusterError as error:
        failures.append(str(error))
    ends: dict[int, dict[int, int]] = {}  # partition -> broker -> log end offset
    leaders: dict[int, int] = {}
    for broker_id in cluster.broker_ids:
        port = cluster.broker(broker_id).admin_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/topics/{TOPIC}", timeout=60) as r:
            for partition in json.loads(r.read())["partitions"]:
                number = partition["partition"]
                ends.setdefault(number, {})[broker_id] = partition.get("log_end_offset", -1)
                leaders[number] = partition["leader"]
    behind = {p: e for p, e in ends.items() if len(set(e.values())) != 1}
    if behind:
        failures.append(f"{len(behind)} partitions with replicas at other log ends: {behind}")
    held = sum(ends[p].get(leader, 0) for p, leader in leaders.items())
    if held < acknowledged:
        failures.append(f"leaders hold {held} records, {acknowledged} were acknowledged")
    elif paused_acks_1:
        lost = max(acknowledged + paused_acks_1 - held, 0)
        print(f"  acks=1 records acknowledged during the pause and not held: {lost}")
    return failures


def cluster_partitions(cluster: LocalCluster) -> dict:
    with zookeeper.session(cluster.zookeeper) as client:
        metadata = zookeeper.read_topic(client, TOPIC)
    return metadata.assignment if metadata else {}


class Figures(dict):
    """A count's figures, each printed as it is measured, with its ratio to the baseline's."""

    def __init__(self, baseline: dict[str, float] | None, baseline_count: int) -> None:
        super().__init__()
        self.baseline = baseline or {}
        self.baseline_count = baseline_count

    def __setitem__(self, name: str, value: float) -> None:
        super().__setitem__(name, value)
        base = self.baseline.get(name)
        ratio = f"({value / base:.2f} of {self.baseline_count} partitions)" if base else ""
        load = os.getloadavg()[0]
        print(f"  {name:42} {value:12.1f}   {ratio:28} load {load:.1f}", flush=True)


def measure(
    count: int, args: argparse.Namespace, directory: Path, figures: Figures
) -> dict[str, float]:
    cluster = LocalCluster(directory / f"cluster-{count}")
    overrides = dict(item.split("=", 1) for item in args.override)
    cluster.up(3, overrides=overrides, progress=quiet)
    try:
        written, served = create(cluster, count)
        figures["creation: ZooKeeper written, s"] = written
        figures["creation: every replica serving, s"] = served
        wait_until(lambda: all(cluster.state.brokers), 10, "brokers", interval=0.5)  # type: ignore[union-attr]
        time.sleep(args.settle_seconds)  # the creation's aftermath is not idle time
        per_broker = idle(cluster, args.idle_seconds)
        figures["idle CPU per broker, max % of a core"] = 100 * max(
            c for c, _, _ in per_broker.values()
        )
        figures["open files per broker, max"] = max(f for _, f, _ in per_broker.values())
        figures["resident MB per broker, max"] = max(m for _, _, m in per_broker.values())
        if args.profile:
            profile(cluster, Path(args.profile), args.seconds)
        if args.idle_only:
            return figures
        # Each partition's first write in its leader epoch costs once what later ones do not
        # (the epoch checkpoint, the index pages): timed here, not in the steady rates below.
        acked: list[int] = []  # records acknowledged, per run
        start = time.monotonic()
        summary, _ = tidelog_run(
            cluster, ProducerSettings(TOPIC, count, SMALL, acks=-1, batch_size=SMALL + 50)
        )
        acked.append(summary.records)
        figures["first write to every partition, s"] = time.monotonic() - start
        for acks in ("all", "1"):
            rate, delivered = librdkafka_rate(cluster, acks, args.seconds)
            figures[f"librdkafka 100 B acks={acks} records/s"] = rate
            acked.append(delivered)
        for required_acks, name in ((-1, "all"), (1, "1")):
            settings = ProducerSettings(
                TOPIC, int(50_000 * args.seconds), SMALL, acks=required_acks, linger_ms=3
            )
            summary, _ = tidelog_run(cluster, settings)
            figures[f"tidelog 100 B acks={name} records/s"] = summary.records_per_second
            acked.append(summary.records)
        summary, _ = tidelog_run(
            cluster,
            ProducerSettings(
                TOPIC,
                int(30 * MB / LARGE * args.seconds),
                LARGE,
                acks=-1,
                codec=Codec.SNAPPY,
                batch_size=64 * 1024,
                linger_ms=3,
            ),
        )
        figures["tidelog 1 KiB snappy acks=all MB/s"] = summary.megabytes_per_second
        acked.append(summary.records)
        rate = 30 * MB / LARGE
        summary, _ = tidelog_run(
            cluster,
            ProducerSettings(TOPIC, int(rate * args.seconds), LARGE, throughput=rate, acks=-1),
        )
        figures["p99 at 30 MB/s acks=all, ms"] = summary.latency()["p99"]
        figures["MB/s reached in the 30 MB/s run"] = summary.megabytes_per_second
        acked.append(summary.records)
        paused: list[int] = []  # acks=1 records acknowledged during the pause
        if args.pause > 0:
            figures[f"catch-up after a {args.pause:.0f} s pause, s"] = catch_up(
                cluster, args.pause, paused
            )
        failures = check(cluster, sum(acked), sum(paused))
        figures["checks failed (0: all passed)"] = len(failures)
        for failure in failures:
            print(f"  CHECK FAILED: {failure[:2000]}")
    finally:
        cluster.down(progress=quiet)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="6,100,1000,3000", help="partition counts")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle CPU window")
    parser.add_argument(
        "--settle-seconds", type=float, default=20.0, help="wait after creation before idle"
    )
    parser.add_argument("--pause", type=float, default=30.0, help="follower pause; 0: skip")
    parser.add_argument("--profile", help="directory for py-spy profiles of a leader")
    parser.add_argument(
        "--idle-only", action="store_true", help="creation, idle CPU, files and memory only"
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for every count's cluster (repeatable)",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tidelog-partitions-") as directory:
        for count in counts:
            print(f"{count} partitions (load average {os.getloadavg()[0]:.1f}):", flush=True)
            figures = Figures(results.get(counts[0]), counts[0])
            results[count] = measure(count, args, Path(directory), figures)
    names = list(dict.fromkeys(name for figures in results.values() for name in figures))
    print(f"\n{'':42} " + " ".join(f"{count:>10}" for count in counts))
    for name in names:
        values = (results[count].get(name, float("nan")) for count in counts)
        print(f"{name:42} " + " ".join(f"{value:10.1f}" for value in values))


if __name__ == "__main__":
    main()
