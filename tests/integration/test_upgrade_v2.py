"""The step from format v1 to v2 on real brokers: a cluster at phase 1 of the upgrade to 2.1
(2.1 code, inter.broker.protocol.version 2.1, log.message.format.version 0.10.0) puts one broker
on format 2.1 and takes it back, under load from 0.9- and 0.10-era kafka-python clients (Fetch
v1 and v2: neither reads v2 batches). The rollback cannot un-write the v2 batches the canary
wrote: they stay on every replica, and the old consumers go on reading them down-converted;
new messages are v1 again. Then kafkajs (a client of the v2 era) across phase 2 of the same
cluster, and `scenario upgrade --from 0.10.0 --to 2.1` end to end."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import run_tidelog
from tests.integration.test_upgrade_canary import (
    CANARY,
    PARTITIONS,
    Load,
    assignment,
    command,
    last_magics,
    nothing_lost,
)
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.scenario import SCENARIO_OVERRIDES
from tidelog.controller import topics, zookeeper
from tidelog.upgrade.scenario import fetch_bytes

from .conftest import magics_on_disk

PHASE_ONE_OF_2_1_DONE = {
    "broker.protocol.max.version": "2.1",
    "inter.broker.protocol.version": "2.1",
    "log.message.format.version": "0.10.0",
}
TOPICS = {"old": "v2-canary-old", "new": "v2-canary-new"}  # Load's eras: (0, 9), (0, 10, 0)
ROOT = Path(__file__).resolve().parents[2]
KAFKAJS = ROOT / ".venv" / "node_modules"  # make install puts kafkajs there


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("v2canary") / "cluster")
    overrides = {**SCENARIO_OVERRIDES, **PHASE_ONE_OF_2_1_DONE}
    local.up(3, overrides=overrides, progress=lambda _: None)
    yield local
    LocalCluster(local.directory).down(progress=lambda _: None)


def test_a_v2_canary_rolled_back_leaves_its_batches_readable_by_old_consumers(cluster):
    directory = str(cluster.directory)
    with zookeeper.session(cluster.zookeeper) as client:
        for name in TOPICS.values():
            topics.create_topic(client, name, PARTITIONS, 3, {"min.insync.replicas": "2"})
    load = Load(cluster, TOPICS)
    load.start()
    try:
        load.wait_for_more(20, "before the canary")
        before = assignment(cluster)

        canary = command("upgrade", "canary", str(CANARY), "--dir", directory)
        assert canary.returncode == 0, canary.stderr
        assert "log.message.format.version 0.10.0 to 2.1" in canary.stdout
        journal = json.loads((cluster.directory / "upgrade-canary.json").read_text())
        checked = journal["data"]["checked"]
        assert not checked["wrong"]
        led = {p for p, (leader, _) in journal["data"]["leaders"].items() if leader == CANARY}
        assert len(led) == 1
        (kept,) = led
        assert cluster.broker_settings(CANARY)["log.message.format.version"] == "2.1"
        converted = fetch_bytes(cluster).get("v2 converted", 0)
        load.wait_for_more(40, "on the canary")
        # read from the segment bytes: v2 batches on every copy of what it leads only
        wait_until(
            lambda: all(
                set(last_magics(cluster, p).values()) == {2 if p == kept else 1} for p in before
            ),
            30,
            "new messages in v2 where the canary leads, v1 elsewhere",
        )
        # the 0.10-era consumer (Fetch v2) reads the canary's batches down-converted to v1
        wait_until(
            lambda: fetch_bytes(cluster).get("v2 converted", 0) > converted,
            30,
            "down-converted Fetch v2 bytes on /metrics",
        )

        rollback = command("upgrade", "rollback", str(CANARY), "--dir", directory)
        assert rollback.returncode == 0, rollback.stderr
        journal = json.loads((cluster.directory / "upgrade-canary.json").read_text())
        assert journal["data"]["led"] == [kept]
        assert journal["data"]["re_replicated"]["new_format_entries"] > 0  # copied back
        checked = journal["data"]["checked"]
        assert not checked["wrong"] and checked["messages"].get("v2", 0) == 0
        assert cluster.broker_settings(CANARY)["log.message.format.version"] == "0.10.0"
        assert assignment(cluster) == before

        load.wait_for_more(40, "after the rollback")
        wait_until(
            lambda: all(set(last_magics(cluster, p).values()) == {1} for p in before),
            30,
            "new messages in v1 on every copy",
        )
        # what the canary wrote is not un-written: its v2 batches stay on every copy
        topic, _, number = kept.rpartition("-")
        for broker_id in cluster.broker_ids:
            magics = magics_on_disk(cluster, broker_id, topic, int(number))
            assert 2 in magics and magics[-1] == 1, (broker_id, magics)
    finally:
        load.finish()
    nothing_lost(load)  # both old consumers read the v2 batches too, down-converted
    again = command("upgrade", "rollback", str(CANARY), "--dir", directory)
    assert again.returncode == 2 and "broker 2 is not a canary" in again.stderr


def kafkajs(cluster: LocalCluster, topic: str, count: int, headers: bool) -> dict:
    """kafkajs_roundtrip.js: ``count`` records (with a header each if ``headers``) sent with
    acks=all, then read back by a consumer group from the beginning."""
    assert (KAFKAJS / "kafkajs").is_dir(), f"no kafkajs in {KAFKAJS}: run make install"
    result = subprocess.run(
        [
            "node", str(Path(__file__).with_name("kafkajs_roundtrip.js")),
            cluster.bootstrap_servers, topic, str(count), "1" if headers else "0",
        ],
        capture_output=True, text=True, timeout=90, check=False,
        env={**os.environ, "NODE_PATH": str(KAFKAJS)},
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_kafkajs_headers_are_refused_before_phase_2_and_kept_after_it(cluster):
    """Between the phases the brokers' format is 0.10.0: a record with headers cannot be
    down-converted, so it is refused (UNSUPPORTED_FOR_MESSAGE_FORMAT) and nothing is dropped
    silently; after phase 2 the same topic (no format of its own) takes batches with headers."""
    topic = "kafkajs-upgrade"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, topic, 2, 3, {"min.insync.replicas": "2"})
    assert kafkajs(cluster, topic, 5, headers=True)["error"] == "UNSUPPORTED_FOR_MESSAGE_FORMAT"
    assert kafkajs(cluster, topic, 5, headers=False)["read"]  # v2 batches stored as v1

    upgrade = command("upgrade", "run", "--dir", str(cluster.directory), "--to", "2.1")
    assert upgrade.returncode == 0, upgrade.stderr
    assert json.loads(upgrade.stdout.splitlines()[-1])["phase_seconds"].keys() == {
        "phase 2: format 2.1"
    }

    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, f"{topic}-after", 2, 3, {"min.insync.replicas": "2"})
    answer = kafkajs(cluster, f"{topic}-after", 6, headers=True)
    assert sorted(r["value"] for r in answer["read"]) == [f"kafkajs-{n}" for n in range(6)]
    assert all(r["headers"] == {"trace": "t" + r["value"][7:]} for r in answer["read"])
    # the first topic takes them too: its log goes on from v1 messages to v2 batches
    mixed = kafkajs(cluster, topic, 3, headers=True)
    assert "error" not in mixed and len(mixed["read"]) >= 3
    magics = [m for number in range(2) for m in magics_on_disk(cluster, 1, topic, number)]
    assert set(magics) == {1, 2}


def test_an_upgrade_from_0_10_0_to_2_1_under_load_keeps_every_message(tmp_path):
    report_path = tmp_path / "report.json"
    result = run_tidelog(
        "scenario", "upgrade", "--from", "0.10.0", "--to", "2.1", "--codecs", "lz4",
        "--dir", str(tmp_path / "cluster"), "--report", str(report_path),
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["ok"] and not report["failures"]
    assert list(report["phases"]) == [
        "phase 1: new code, pinned",
        "phase 1: protocol 2.1",
        "phase 2: format 2.1",
    ]
    assert report["phases"]["phase 2: format 2.1"]["checked"]["messages"] > 0  # v2 off disk
    assert len(report["topics"]) == 3  # one per producer era: Produce v1, v2, v3
    for name, entry in report["topics"].items():
        assert entry["acked"] > 0, name
        assert not any(entry["delivery"].values()), (name, entry["delivery"])
        assert entry["v0_consumer"]["formats"] == [0], name  # Fetch v1: down-converted
        assert entry["v1_consumer"]["formats"] == [1], name  # Fetch v2: v2 down-converted
        assert entry["v2_consumer"]["formats"] == [1, 2], name  # Fetch v4: the log as it is
        for era in ("v0", "v1", "v2"):
            assert entry[f"{era}_consumer"]["missed"] == 0, (name, era)
    assert report["fetch_bytes"]["v2 converted"] > 0 < report["fetch_bytes"]["v4 zero_copy"]
