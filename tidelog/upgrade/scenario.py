"""`tidelog scenario upgrade`: an upgrade run under load from clients of every era, every
acknowledged message checked afterwards (kafkatest's upgrade test, scaled down).

One topic per codec and producer era (replication factor 3, min.insync.replicas 2, acks=all;
the v0- and v2-era producers' topics use CreateTime, the v1-era's LogAppendTime), each read
throughout by a consumer of every era. The eras are v0 and v1 on the way to 0.10, and v2 too on
the way to 2.1. Afterwards: the delivery oracle on every topic (nothing acknowledged lost, order
kept, replicas not diverged; duplicates counted), every acknowledged message seen by every
consumer, each consumer sent no format newer than its Fetch version reads (the v0-era's Fetch
v1 only v0, the v1-era's Fetch v2 only v0 and v1: down-converted), and /metrics showing
converted bytes for Fetch v1 (v2 on the way to 2.1) and zero-copy bytes for Fetch v2 (v4).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.cluster.delivery import Acked, verify
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.records.format import Codec
from tidelog.upgrade.load import ERAS, EraConsumer, EraProducer
from tidelog.upgrade.run import UpgradeFailed, UpgradeRun

# --from: the brokers' settings, and the targets (--to) an upgrade from there goes to, the
# default first
STARTS = {
    "0.9.0": ({"broker.protocol.max.version": "0.9.0"}, ("0.10.0", "2.1")),
    "0.10.0": (
        {
            "broker.protocol.max.version": "0.10.0",
            "inter.broker.protocol.version": "0.10.0",
            "log.message.format.version": "0.10.0",
        },
        ("0.10.1", "2.1"),
    ),
}
# the newest format (magic) each era's consumer may be sent: its Fetch version's
READABLE_FORMAT = {"v0": 0, "v1": 1, "v2": 2}
CODECS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4}


@dataclass(frozen=True)
class UpgradeScenario:
    start: str = "0.9.0"  # the release the cluster starts at (STARTS)
    codecs: tuple[str, ...] = ("none", "snappy", "lz4")
    rate: float = 20.0  # messages per second per producer
    partitions: int = 2
    timeout: float = 120.0
    to: str | None = None  # the target: one of STARTS[start]'s, the first if None

    def __post_init__(self) -> None:
        if self.start not in STARTS:
            raise ValueError(f"--from {self.start!r}: allowed: {', '.join(STARTS)}")
        if self.to is not None and self.to not in STARTS[self.start][1]:
            allowed = ", ".join(STARTS[self.start][1])
            raise ValueError(f"--to {self.to!r} from {self.start}: allowed: {allowed}")

    @property
    def target(self) -> str:
        return self.to or STARTS[self.start][1][0]

    @property
    def eras(self) -> tuple[str, ...]:
        """The producer and consumer eras: v2 too when the target writes format v2."""
        return (*ERAS, "v2") if self.target == "2.1" else ERAS


def create_topics(cluster: LocalCluster, scenario: UpgradeScenario) -> dict[tuple[str, str], str]:
    names = {}
    with zookeeper.session(cluster.zookeeper) as client:
        for codec in scenario.codecs:
            for era in scenario.eras:
                name = f"upgrade-{codec}-{era}-{int(time.time())}"
                timestamps = "LogAppendTime" if era == "v1" else "CreateTime"
                config = {"min.insync.replicas": "2", "message.timestamp.type": timestamps}
                topics.create_topic(client, name, scenario.partitions, 3, config)
                names[codec, era] = name
    return names


def describe_missed(acked: list[Acked], missed: set[bytes], consumer: EraConsumer) -> str:
    """The first missed messages, each with its partition and offset and what the consumer read
    at that offset, if anything."""
    read = {
        (partition, offset): value
        for partition, got in consumer.consumed.items()
        for offset, value, _ in got
    }
    described = []
    for ack in sorted(acked, key=lambda a: (a.partition, a.offset)):
        if ack.value in missed:
            there = read.get((ack.partition, ack.offset))
            seen = "nothing" if there is None else there.decode(errors="replace")
            described.append(f"{ack.value.decode()} at {ack.partition}/{ack.offset} (read: {seen})")
    return "; ".join(described[:5])


def fetch_bytes(cluster: LocalCluster) -> dict[str, int]:
    """tidelog_fetch_bytes_total summed over the brokers, by "v{version} {path}"."""
    total: dict[str, int] = {}
    for broker_id in cluster.broker_ids:
        port = cluster.broker(broker_id).admin_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        for line in text.splitlines():
            if line.startswith("tidelog_fetch_bytes_total{"):
                labels, value = line.split("{", 1)[1].split("} ")
                parts = dict(part.split("=") for part in labels.split(","))
                key = f"v{parts['version'].strip(chr(34))} {parts['path'].strip(chr(34))}"
                total[key] = total.get(key, 0) + int(value)
    return total


async def run_upgrade_scenario(
    cluster: LocalCluster, scenario: UpgradeScenario, progress: Callable[[str], None] = print
) -> dict:
    """Runs the upgrade of ``cluster`` (started at ``scenario.start``) under load; the report
    says ``ok`` and, for each check that failed, what it found."""
    names = create_topics(cluster, scenario)
    stop, drain = asyncio.Event(), asyncio.Event()
    producers = {
        key: EraProducer(
            cluster.bootstrap_servers,
            name,
            acks=-1,
            rate=scenario.rate,
            codec=CODECS[key[0]],
            era=key[1],
        )
        for key, name in names.items()
    }
    consumers = {
        (key, era): EraConsumer(cluster.bootstrap_servers, name, era)
        for key, name in names.items()
        for era in scenario.eras
    }
    tasks = [asyncio.create_task(p.run(stop)) for p in producers.values()]
    readers = [
        asyncio.create_task(c.run(stop, drain, scenario.timeout)) for c in consumers.values()
    ]
    await asyncio.to_thread(
        wait_until,
        lambda: all(p.acked for p in producers.values()),
        scenario.timeout,
        "every producer's first acknowledgement",
    )
    report: dict = {"start": scenario.start, "target": scenario.target, "failures": []}
    started = time.monotonic()
    runner = UpgradeRun(
        cluster, scenario.target, timeout=scenario.timeout, settle_seconds=3, progress=progress
    )
    try:
        journal = await asyncio.to_thread(runner.run)
        report["phases"] = {
            name: {"seconds": phase["seconds"], "checked": phase.get("checked")}
            for name, phase in journal.phases.items()
        }
    except UpgradeFailed as error:
        report["failures"].append(f"upgrade run: {error}")
    report["upgrade_seconds"] = round(time.monotonic() - started, 1)
    stop.set()
    await asyncio.gather(*tasks)
    for (key, _), consumer in consumers.items():
        for ack in producers[key].acked:
            consumer.ends[ack.partition] = max(consumer.ends.get(ack.partition, 0), ack.offset + 1)
    drain.set()
    await asyncio.gather(*readers)
    report["topics"] = {}
    for key, name in names.items():
        producer = producers[key]
        delivery = await verify(cluster, name, producer.acked)
        acked = {a.value for a in producer.acked}
        checked = {n: getattr(delivery, n) for n in delivery.CHECKS if n != "duplicates"}
        entry: dict[str, object] = {
            "acked": len(acked),
            "not_acked": producer.failed,
            "duplicates": len(delivery.duplicates),
            "delivery": checked,
        }
        for era in scenario.eras:
            consumer = consumers[key, era]
            seen = {value for got in consumer.consumed.values() for _, value, _ in got}
            magics = {magic for got in consumer.consumed.values() for *_, magic in got}
            entry[f"{era}_consumer"] = {
                "consumed": sum(len(got) for got in consumer.consumed.values()),
                "missed": len(acked - seen),
                "formats": sorted(magics),
            }
            if acked - seen:
                report["failures"].append(
                    f"{name}: {era} consumer missed {len(acked - seen)}: "
                    + describe_missed(producer.acked, acked - seen, consumer)
                )
            too_new = sorted(m for m in magics if m > READABLE_FORMAT[era])
            if too_new:
                report["failures"].append(
                    f"{name}: the {era} consumer was sent format {too_new}, newer than its "
                    "Fetch version reads"
                )
        for check, found in checked.items():
            if found:
                report["failures"].append(f"{name}: {check}: {found[:3]}")
        report["topics"][name] = entry
    metrics = fetch_bytes(cluster)
    report["fetch_bytes"] = metrics
    if scenario.target == "0.10.0" and not metrics.get("v1 converted"):
        report["failures"].append("no down-converted bytes for Fetch v1 on /metrics")
    if scenario.target == "2.1" and not metrics.get("v2 converted"):
        report["failures"].append("no down-converted bytes for Fetch v2 (v1-era) on /metrics")
    # the counters are each broker process's since its last start: what the last phase served
    if scenario.target != "2.1" and not metrics.get("v2 zero_copy"):
        report["failures"].append("no zero-copy bytes for Fetch v2 on /metrics")
    if scenario.target == "2.1" and not metrics.get("v4 zero_copy"):
        report["failures"].append("no zero-copy bytes for Fetch v4 (v2-era) on /metrics")
    report["ok"] = not report["failures"]
    return report


def summary(report: dict) -> str:
    lines = [f"upgrade {report['start']} -> {report['target']}: {report['upgrade_seconds']} s"]
    for name, phase in report.get("phases", {}).items():
        lines.append(f"  {name}: {phase['seconds']} s, new messages checked: {phase['checked']}")
    for name, entry in report["topics"].items():
        lines.append(f"  {name}: {json.dumps(entry)}")
    lines.append(f"  fetch bytes: {report['fetch_bytes']}")
    failures = "\n  ".join(report["failures"])
    lines.append("verdict: ok" if report["ok"] else f"verdict: FAIL\n  {failures}")
    return "\n".join(lines)
