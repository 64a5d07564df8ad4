"""kafkatest's upgrade matrix, scaled down: from 0.9.0 and from 0.10.0, each with the codecs
none, snappy and lz4 (one topic per codec and producer era in the same run), under acks=all
production by v0- and v1-era producers and consumption by v0- and v1-era consumers.
The two runs took 3 min 10 s together (111 s and 69 s) on this shared 2-core machine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from kafka import KafkaProducer

from tidelog.upgrade.load import EraConsumer


@pytest.mark.parametrize("start", ["0.9.0", "0.10.0"])
def test_an_upgrade_under_load_keeps_every_acknowledged_message(tmp_path, start):
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable, "-m", "tidelog.cli", "scenario", "upgrade", "--from", start,
            "--codecs", "none,snappy,lz4", "--dir", str(tmp_path / "cluster"),
            "--report", str(report_path),
        ],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["ok"] and not report["failures"]
    assert len(report["topics"]) == 6
    for name, entry in report["topics"].items():
        assert entry["acked"] > 0, name
        assert entry["v0_consumer"]["missed"] == entry["v1_consumer"]["missed"] == 0
        assert entry["v0_consumer"]["formats"] == [0], name  # down-converted for Fetch v1
        assert not any(entry["delivery"].values()), (name, entry["delivery"])
    phases = report["phases"]
    if start == "0.9.0":
        assert list(phases) == [
            "phase 1: new code, pinned",
            "phase 1: protocol 0.10.0-IV0",
            "phase 2: format 0.10.0",
        ]
        assert phases["phase 2: format 0.10.0"]["checked"]["messages"] > 0  # v1 read off disk
        assert report["fetch_bytes"]["v1 converted"] > 0
        for entry in report["topics"].values():
            assert entry["v1_consumer"]["formats"] == [0, 1]  # a mixed log, read whole
    else:
        assert list(phases) == ["phase 1: new code, pinned"]
        assert phases["phase 1: new code, pinned"]["checked"]["messages"] > 0
    assert report["fetch_bytes"]["v2 zero_copy"] > 0


def test_a_consumer_told_to_drain_during_a_pass_reads_on_to_the_last_acknowledged_message(
    cluster, new_topic
):
    """The drain can begin while a pass is under way: the partitions fetched before it had only
    their high watermark to reach. A message acknowledged then is read before the consumer
    ends (a README run of `scenario upgrade` reported such a message as missed)."""
    topic = new_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for partition in (0, 1):
        producer.send(topic, b"before", partition=partition).get(timeout=10)
    stop, drain = asyncio.Event(), asyncio.Event()
    stop.set()  # the producers have stopped; the drain is about to be asked for

    class DrainAskedDuringAPass(EraConsumer):
        fetched: list[int] = []

        async def _fetch(self, connection, version, partition, offset):
            answer = await super()._fetch(connection, version, partition, offset)
            self.fetched.append(partition)
            if len(self.fetched) == 2:  # the pass's first partition is already judged caught up
                first = self.fetched[0]
                sent = producer.send(topic, b"last", partition=first).get(timeout=10)
                self.ends = {first: sent.offset + 1}
                drain.set()
            return answer

    consumer = DrainAskedDuringAPass(cluster.bootstrap_servers, topic, "v1")
    try:
        asyncio.run(asyncio.wait_for(consumer.run(stop, drain), timeout=60))
    finally:
        producer.close()
    read = [value for got in consumer.consumed.values() for _, value, _ in got]
    assert sorted(read) == [b"before", b"before", b"last"]
