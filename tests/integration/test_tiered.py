"""Tiered storage through real brokers: segments offloaded to a file:// tier, then read back
by kcat and kafka-python (formats v0 and v1, compressed and not), listed by timestamp, kept,
deleted and rebuilt, in the spirit of Kafka's TieredStorageTestBuilder."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from tests.integration.conftest import admin, wait_for_leaders
from tests.integration.test_kafka_python import consume as python_consume
from tests.integration.test_kafka_python import produce
from tests.integration.test_kcat import CLIENTS, kcat
from tests.integration.test_kcat import consume as kcat_consume
from tests.tiered.remote_format import parse_remote_log_index
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.scenario import ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey

TIERED_BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "300",
    "log.retention.check.interval.ms": "300",
    "remote.fetch.max.wait.ms": "10000",  # a loaded machine is not a slow tier
}
TIERED_TOPIC = {
    "remote.storage.enable": "true",
    "segment.bytes": "16384",
    "local.retention.bytes": "16384",  # about one rolled segment stays local
    "remote.log.index.interval.bytes": "4096",
}


def value(n: int) -> bytes:
    """Text that does not compress away (so compressed topics roll segments too)."""
    return b"%06d-" % n + hashlib.sha512(b"%d" % n).hexdigest().encode()


_names = iter(range(10**6))


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("tiered"))
    cluster.up(3, overrides=TIERED_BROKER, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def create(cluster, replication_factor=3, partitions=1, **config: str) -> str:
    name = f"tiered-{next(_names)}"
    settings = {**TIERED_TOPIC, **{k.replace("_", "."): v for k, v in config.items()}}
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, partitions, replication_factor, settings)
    wait_for_leaders(cluster, name, partitions)
    return name


def leader_view(cluster, topic: str, partition: int = 0) -> dict:
    for broker_id in cluster.state.brokers:
        described = admin(cluster, broker_id, f"/topics/{topic}")
        if described:
            entry = described["partitions"][partition]
            if entry["leader"] == broker_id and "log_end_offset" in entry:
                return entry
    return {}


def wait_offloaded(cluster, topic: str, end: int, partition: int = 0) -> dict:
    """Waits until the leader has deleted local data that is in the tier."""

    def offloaded() -> bool:
        view = leader_view(cluster, topic, partition)
        return (
            view.get("log_end_offset") == end
            and view.get("log_start_offset") == 0
            and view.get("local_log_start_offset", 0) > 0
            and view.get("remote_segments", 0) > 0
            # all but the active segment and local.retention.bytes moved: copying caught up
            and view["local_size_bytes"] <= 2 * int(TIERED_TOPIC["local.retention.bytes"])
        )

    wait_until(offloaded, 60, f"{topic}-{partition} to move its older segments to the tier")
    return leader_view(cluster, topic, partition)


def fill(cluster, topic: str, count: int, compression=None, api_version=(0, 10, 1)) -> None:
    produce(
        cluster,
        topic,
        api_version,
        [(None, value(n), {}) for n in range(count)],
        compression=compression,
        acks=-1,
    )


def remote_dir(cluster, topic: str, partition: int = 0) -> Path:
    return Path(cluster.directory) / "remote" / f"{topic}-{partition}"


@pytest.mark.parametrize(
    ("message_format", "compression"),
    [("0.9.0", None), ("0.10.0", None), ("0.9.0", "gzip"), ("0.10.0", "snappy")],
)
def test_offloaded_data_is_consumed_from_the_start_by_every_client(
    tiered, message_format, compression
):
    topic = create(tiered, message_format_version=message_format)
    fill(tiered, topic, 1500, compression)
    view = wait_offloaded(tiered, topic, 1500)
    expected = [value(n) for n in range(1500)]

    for api_version in [(0, 9), (0, 10, 1)]:
        records = python_consume(tiered, topic, api_version, 1500, timeout=60)
        assert [r.offset for r in records] == list(range(1500)), api_version
        assert [r.value for r in records] == expected, api_version
    for client in ("0.9", "negotiated"):
        rows = kcat_consume(tiered, topic, CLIENTS[client], 1500)
        assert [o for _, o, *_ in rows] == list(range(1500)), client
        assert [s.encode() for _, _, _, s, _ in rows] == expected, client

    # The leader's remote indexes, read by the parser written from the format.
    leader_dir = Path(tiered.directory) / f"broker-{view['leader']}" / "logs" / f"{topic}-0"
    entries = [
        entry
        for path in sorted(leader_dir.glob("*.remoteLogIndex"))
        for entry in parse_remote_log_index(path.read_bytes())
    ]
    assert len(entries) >= view["remote_segments"]
    if compression is None:  # (a compressed batch is one entry, however large)
        assert len(entries) > view["remote_segments"]  # several entries per remote segment
    assert entries[0].first_offset == 0
    for before, after in itertools.pairwise(entries):
        assert after.first_offset == before.last_offset + 1
    # (copying may have gone on since the view was taken)
    assert entries[-1].last_offset >= view["highest_offset_in_remote_storage"]


def test_list_offsets_earliest_and_by_timestamp_cover_the_remote_part(tiered):
    topic = create(tiered)
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: inside retention.ms
    produce(
        tiered,
        topic,
        (0, 10, 1),
        [(None, value(n), {"timestamp_ms": base + n * 10}) for n in range(1500)],
        acks=-1,
    )
    view = wait_offloaded(tiered, topic, 1500)
    consumer = KafkaConsumer(bootstrap_servers=tiered.bootstrap_servers, api_version=(0, 10, 1))
    try:
        partition = TopicPartition(topic, 0)
        assert consumer.beginning_offsets([partition]) == {partition: 0}
        for n in [0, 1, 57, 333, view["local_log_start_offset"] - 1, 1499]:
            target = base + n * 10 - 5  # between two messages: brute force says message n
            found = consumer.offsets_for_times({partition: target})[partition]
            assert (found.offset, found.timestamp) == (n, base + n * 10), n
    finally:
        consumer.close()
    assert view["local_log_start_offset"] > 333  # so the searches above went to the tier
    for client in ("0.9", "negotiated"):  # ListOffsets v0 and v1: the start includes the tier
        answer = kcat(tiered, "-Q", "-t", f"{topic}:0:-2", *CLIENTS[client])
        assert f"{topic} [0] offset 0" in answer, (client, answer)

    described = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "describe", "--dir", str(tiered.directory),
         "--topic", topic],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "\tLogStartOffset: 0\t" in described
    assert "RemoteLogStartOffset: 0\t" in described
    # (local retention may have gone on since the view was taken: never backwards)
    local_start = int(described.split("LocalLogStartOffset: ")[1].split()[0])
    assert local_start >= view["local_log_start_offset"] > 0
    remote_size = int(described.split("RemoteSize: ")[1].split()[0])
    assert remote_size >= view["remote_size_bytes"] > 0
    fetched = metrics_of(tiered, view["leader"])
    assert metric(fetched, "tidelog_remote_fetch_bytes_total") > 0
    assert metric(fetched, "tidelog_remote_fetch_seconds_total") > 0
    assert metric(fetched, "tidelog_remote_copy_bytes_total") > 0


def test_total_retention_removes_remote_data(tiered):
    topic = create(tiered)
    fill(tiered, topic, 1500)
    wait_offloaded(tiered, topic, 1500)
    before = sorted(p.name for p in remote_dir(tiered, topic).glob("*.log"))

    with zookeeper.session(tiered.zookeeper) as client:
        topics.alter_topic_config(client, topic, {"retention.bytes": "40000"})

    def trimmed() -> bool:
        view = leader_view(tiered, topic)
        return view.get("log_start_offset", 0) > 0 and view["remote_segments"] < len(before)

    wait_until(trimmed, 60, f"{topic} to delete remote segments by retention.bytes")
    view = leader_view(tiered, topic)
    after = sorted(p.name for p in remote_dir(tiered, topic).glob("*.log"))
    assert len(after) == view["remote_segments"] < len(before)
    consumer = KafkaConsumer(bootstrap_servers=tiered.bootstrap_servers, api_version=(0, 10, 1))
    try:
        partition = TopicPartition(topic, 0)
        start = consumer.beginning_offsets([partition])[partition]
        assert start == view["log_start_offset"] > 0
    finally:
        consumer.close()
    records = python_consume(tiered, topic, (0, 10, 1), 1500 - start, timeout=60)
    assert [r.offset for r in records] == list(range(start, 1500))


def test_topic_deletion_removes_remote_data(tiered):
    topic = create(tiered)
    fill(tiered, topic, 1000)
    wait_offloaded(tiered, topic, 1000)
    assert list(remote_dir(tiered, topic).glob("*.log"))

    asked = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "delete", "--dir", str(tiered.directory),
         "--topic", topic],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    wait_until(
        lambda: not remote_dir(tiered, topic).exists(), 60, f"the remote data of {topic} to go"
    )


def test_remote_storage_is_refused_where_kafka_refuses_it(tiered, cluster):
    def create_with(target, **config: str) -> subprocess.CompletedProcess:
        options = [x for k, v in config.items() for x in ("--config", f"{k}={v}")]
        return subprocess.run(
            [sys.executable, "-m", "tidelog.cli", "topic", "create", "--dir",
             str(target.directory), "--topic", f"refused-{next(_names)}", "--partitions", "1",
             "--replication-factor", "1", *options],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    compacted = create_with(
        tiered, **{"remote.storage.enable": "true", "cleanup.policy": "compact"}
    )
    assert compacted.returncode != 0
    assert "Remote log storage is unsupported for the compacted topics" in compacted.stderr
    without_tier = create_with(cluster, **{"remote.storage.enable": "true"})
    assert without_tier.returncode != 0
    assert "Tiered Storage functionality is disabled in the broker" in without_tier.stderr


def test_an_unavailable_tier_keeps_local_data_and_other_partitions_served(tiered):
    stalled = create(tiered)
    fill(tiered, stalled, 1000)
    wait_offloaded(tiered, stalled, 1000)
    tier = Path(tiered.directory) / "remote"
    hidden = tier.with_name("remote-away")
    tier.rename(hidden)
    tier.write_bytes(b"not a directory")  # every access to the tier fails now
    try:
        fill(tiered, stalled, 1000)  # more segments roll; none can be copied

        def backlog_and_retention_done() -> bool:
            # Segments copied before the tier went away are deleted locally by the next
            # retention check; until then the local log starts below the first offset not in
            # the tier, and a read there would become a remote read under the test's feet.
            view = leader_view(tiered, stalled)
            text = metrics_of(tiered, view["leader"])
            return (
                "tidelog_remote_copy_lag_segments" in text
                and _lag(text, stalled) >= 2
                and view["local_log_start_offset"] == view["highest_offset_in_remote_storage"] + 1
            )

        wait_until(
            backlog_and_retention_done,
            60,
            f"a copy backlog of {stalled} on /metrics, local retention done with what is copied",
        )
        view = leader_view(tiered, stalled)
        # Nothing that is not in the tier was deleted locally: the backlog is all local.
        assert view["local_log_start_offset"] == view["highest_offset_in_remote_storage"] + 1
        assert view["highest_offset_in_remote_storage"] < 1000
        # The local part is still served; the remote part errors for this partition only.
        local_start = view["local_log_start_offset"]
        assert [r.offset for r in read_from(tiered, stalled, local_start, 10)] == list(
            range(local_start, local_start + 10)
        )
        # One fetch for the remote part of this partition and for another topic's partition on
        # the same leader: the first gets an error, the second its data.
        other = create(tiered, replication_factor=1, partitions=3)
        fill(tiered, other, 300)
        number = next(
            p["partition"]
            for p in admin(tiered, view["leader"], f"/topics/{other}")["partitions"]
            if p["leader"] == view["leader"]
        )
        answers = asyncio.run(fetch(tiered, view["leader"], [(stalled, 0, 0), (other, number, 0)]))
        assert answers[(stalled, 0)]["error_code"] == ErrorCode.UNKNOWN
        assert answers[(other, number)]["error_code"] == 0
        assert answers[(other, number)]["record_set"]
        assert 'tidelog_remote_errors_total{kind="copy"}' in metrics_of(tiered, view["leader"])
    finally:
        tier.unlink()
        hidden.rename(tier)
    wait_until(
        lambda: _lag(metrics_of(tiered, leader_view(tiered, stalled)["leader"]), stalled) == 0,
        60,
        f"the copy backlog of {stalled} to clear once the tier is back",
    )
    records = python_consume(tiered, stalled, (0, 10, 1), 2000, timeout=60)
    assert [r.offset for r in records] == list(range(2000))


async def fetch(cluster, broker_id: int, wanted: list[tuple[str, int, int]]) -> dict:
    """One Fetch v2 to a broker for (topic, partition, offset)s; the answers by partition."""
    broker = cluster.broker(broker_id)
    connection = await Connection.open("127.0.0.1", broker.port)
    try:
        body = {
            "replica_id": -1,
            "max_wait_time": 100,
            "min_bytes": 1,
            "topics": [
                {
                    "topic": t,
                    "partitions": [{"partition": p, "fetch_offset": o, "max_bytes": 65536}],
                }
                for t, p, o in wanted
            ],
        }
        response = await connection.request(ApiKey.FETCH, 2, body)
    finally:
        await connection.close()
    return {
        (topic["topic"], answer["partition"]): answer
        for topic in response["responses"]
        for answer in topic["partition_responses"]
    }


def read_from(cluster, topic: str, offset: int, count: int, number: int = 0) -> list:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 10, 1))
    try:
        partition = TopicPartition(topic, number)
        consumer.assign([partition])
        consumer.seek(partition, offset)
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                got += batch
        return got[:count]
    finally:
        consumer.close()


def metrics_of(cluster, broker_id: int) -> str:
    import urllib.request

    port = cluster.broker(broker_id).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def metric(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return float(line.split()[1])


def _lag(text: str, topic: str) -> int:
    for line in text.splitlines():
        if line.startswith("tidelog_remote_copy_lag_segments{") and f'topic="{topic}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return -1


def test_a_leader_killed_while_copying_loses_nothing_and_copies_nothing_twice(tiered):
    topic = create(tiered)
    fill(tiered, topic, 1500)
    leader = leader_view(tiered, topic)["leader"]
    tiered.signal_broker(leader, signal.SIGKILL)  # copies of its rolled segments are under way
    tiered.start_broker(leader)
    faults.wait_for_full_isr(tiered, topic)
    wait_offloaded(tiered, topic, 1500)

    def settled() -> bool:  # the new leader has cleaned any orphan the killed one left
        names = [p.name for p in (remote_dir(tiered, topic) / "metadata").glob("*.json")]
        texts = [(remote_dir(tiered, topic) / "metadata" / n).read_text() for n in names]
        return bool(texts) and all("COPY_SEGMENT_FINISHED" in t for t in texts)

    wait_until(settled, 60, f"every remote segment of {topic} to be finished")
    metadata = sorted((remote_dir(tiered, topic) / "metadata").glob("*.json"))
    ranges = sorted(
        (
            json.loads(p.read_text())["segment_id"]["start_offset"],
            json.loads(p.read_text())["end_offset"],
        )
        for p in metadata
    )
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end + 1, ranges  # no offset twice, none missing
    assert len(list(remote_dir(tiered, topic).glob("*.log"))) == len(ranges)
    records = python_consume(tiered, topic, (0, 10, 1), 1500, timeout=60)
    assert [r.offset for r in records] == list(range(1500))


def test_a_wiped_broker_replicates_only_the_local_part_and_serves_the_remote_part(tiered):
    topic = create(tiered, replication_factor=2)
    fill(tiered, topic, 1500)
    view = wait_offloaded(tiered, topic, 1500)
    follower = next(r for r in view["replicas"] if r != view["leader"])

    done = faults.inject(tiered, "wipe_and_rebuild", follower, session_timeout_s=6, lag_s=10)
    assert "wiped" in done
    faults.wait_for_full_isr(tiered, topic)
    rebuilt_dir = Path(tiered.directory) / f"broker-{follower}" / "logs" / f"{topic}-0"
    local_start = leader_view(tiered, topic)["local_log_start_offset"]
    segments = sorted(int(p.name.split(".")[0]) for p in rebuilt_dir.glob("*.log"))
    assert segments[0] >= view["local_log_start_offset"] > 0  # only the local part came over

    def indexed() -> bool:
        entries = [
            e
            for p in sorted(rebuilt_dir.glob("*.remoteLogIndex"))
            for e in parse_remote_log_index(p.read_bytes())
        ]
        return (
            bool(entries)
            and entries[0].first_offset == 0
            and entries[-1].last_offset >= local_start - 1
        )

    wait_until(
        indexed, 60, f"broker {follower} to take the remote indexes of {topic} from the tier"
    )
    tiered.stop_broker(view["leader"])  # the rebuilt broker now leads and serves everything
    try:
        wait_until(
            lambda: leader_view(tiered, topic).get("leader") == follower,
            60,
            f"broker {follower} to lead {topic}",
        )
        records = python_consume(tiered, topic, (0, 10, 1), 1500, timeout=60)
        assert [r.offset for r in records] == list(range(1500))
    finally:
        tiered.start_broker(view["leader"])
        faults.wait_for_full_isr(tiered, topic)


@pytest.mark.parametrize("message_format", ["0.9.0", "0.10.0"])
def test_the_wipe_and_rebuild_chaos_scenario_replicates_only_the_local_part(tiered, message_format):
    pids = {b: tiered.broker(b).pid for b in tiered.broker_ids}
    settings = ScenarioSettings(
        failure="wipe_and_rebuild", target="follower", message_format=message_format, rate=300
    )
    topic, report = asyncio.run(run_scenario(tiered, settings, progress=lambda _: None))
    assert report.ok, f"{topic}:\n{report.table()}"  # nothing acknowledged was lost
    assert report.acked > 300, report.table()
    [rebuilt] = [b for b in tiered.broker_ids if tiered.broker(b).pid != pids[b]]

    # Each partition's rebuild started at its leader's local log start, above offset 0 ...
    text = (Path(tiered.directory) / f"broker-{rebuilt}" / "broker.log").read_text()
    starts = {}
    for number in range(settings.partitions):
        marker = f"{topic}-{number}: starting at the leader's local log start "
        assert marker in text, f"broker {rebuilt} did not start {topic}-{number} from the tier"
        starts[number] = int(text.split(marker)[-1].split()[0])
    # ... and it replicated only the bytes from there: the remote part below was not fetched.
    replicated = _replicated_bytes(metrics_of(tiered, rebuilt), topic)
    for number, start in starts.items():
        leader = leader_view(tiered, topic, number)
        segments = [
            json.loads(p.read_text())
            for p in (remote_dir(tiered, topic, number) / "metadata").glob("*.json")
        ]
        remote_below = sum(m["size"] for m in segments if m["end_offset"] < start)
        remote_end = max(m["end_offset"] for m in segments)
        total = sum(m["size"] for m in segments) + sum(
            s["size"] for s in leader["segments"] if s["base_offset"] > remote_end
        )
        assert start > 0 and remote_below > 0, (number, start)
        assert 0 < replicated[number] <= total - remote_below, (number, replicated, total)

    # The rebuilt broker serves the remote part: alone, it leads every partition and gives
    # back from offset 0 everything the scenario's check consumed.
    others = [b for b in tiered.broker_ids if b != rebuilt]
    for broker_id in others:
        tiered.stop_broker(broker_id)
    try:
        for number, expected in sorted(report.received.items()):
            wait_until(
                lambda n=number: leader_view(tiered, topic, n).get("leader") == rebuilt,
                60,
                f"broker {rebuilt} to lead {topic}-{number}",
            )
            records = read_from(tiered, topic, 0, len(expected), number)
            assert [(r.offset, r.value) for r in records] == expected, number
    finally:
        for broker_id in others:
            tiered.start_broker(broker_id)
        faults.wait_for_full_isr(tiered, topic)


def _replicated_bytes(text: str, topic: str) -> dict[int, int]:
    """tidelog_replica_fetch_bytes_total of ``topic``'s partitions, summed over leaders."""
    replicated: dict[int, int] = {}
    for line in text.splitlines():
        if line.startswith("tidelog_replica_fetch_bytes_total{") and f'topic="{topic}"' in line:
            number = int(line.split('partition="')[1].split('"')[0])
            replicated[number] = replicated.get(number, 0) + int(float(line.rsplit(" ", 1)[1]))
    return replicated
