"""locust runs the locustfile headless and distributed against a real cluster: every user class
reports requests and no failures, and the design's two workloads produce the rate they ask for."""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tidelog.cluster.local import wait_until
from tidelog.cluster.zookeeper import free_port
from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode
from tidelog.perf.locust.client import LATEST, BlockingClient
from tidelog.perf.locust.group import GroupMember
from tidelog.perf.producer import repeated_message_set
from tidelog.records.format import Codec

from .conftest import codecs_on_disk, entries_on_disk, wait_for_leaders

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "tidelog" / "perf" / "locust" / "locustfile.py"
WORKLOADS = LOCUSTFILE.parent / "workloads"
LOCUST = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
# a record size and batch that keep requests small for a quick run
QUICK = ["--record-size", "100", "--batch-bytes", "2000"]
# numbers the topics for the session's one cluster (an object's id is reused once it is freed)
_topic_numbers = itertools.count()


@pytest.fixture
def replicated_topic(cluster):
    """replicated_topic(partitions) creates a topic with three replicas and returns its name."""

    def create(partitions: int = 3) -> str:
        name = f"locust-{next(_topic_numbers)}"
        with zookeeper.session(cluster.zookeeper) as client:
            topics.create_topic(client, name, partitions, 3, {})
        wait_for_leaders(cluster, name, partitions)
        return name

    return create


def stats(prefix: Path) -> dict[tuple[str, str], dict[str, str]]:
    """locust's --csv statistics: (Type, Name) → the row."""
    with open(f"{prefix}_stats.csv", newline="") as table:
        return {(row["Type"], row["Name"]): row for row in csv.DictReader(table)}


def final_stats(path: Path) -> dict[tuple[str, str], dict]:
    """locust's --json-file: (method, name) → the entry, written after the users stopped (the
    CSV is rewritten every second or so, and may miss the last acknowledgements)."""
    return {(entry["method"], entry["name"]): entry for entry in json.loads(path.read_text())}


def groups_of(cluster, topic: str) -> set[str]:
    """The locustfile's consumer groups for ``topic`` (``tidelog-locust-<topic>-<n>``), as
    kafka-python's admin client lists them; locust-1's are not locust-10's."""
    prefix = f"tidelog-locust-{topic}-"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        return {
            group["group_id"]
            for group in admin.list_groups()
            if group["group_id"].startswith(prefix)
            and group["group_id"].removeprefix(prefix).isdigit()
            and group["protocol_type"] == "consumer"
        }
    finally:
        admin.close()


def run_locust(arguments: list[str], cwd: Path, timeout: float = 60) -> None:
    result = subprocess.run(
        [*LOCUST, *arguments], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr[-3000:]


def records_in(cluster, topic: str) -> int:
    client = BlockingClient(cluster.bootstrap_servers)
    try:
        leaders = client.partitions(topic)
        return sum(
            client.list_offsets(p.leader, topic, [p.partition], LATEST)[p.partition]
            for p in leaders
        )
    finally:
        client.close()


def produce_old_data(cluster, topic: str, batches: int = 30) -> None:
    """Records for the catch-up consumer to read, sent with the users' own client."""
    client = BlockingClient(cluster.bootstrap_servers)
    try:
        leaders = client.partitions(topic)
        for number in range(batches):
            target = leaders[number % len(leaders)]
            records = repeated_message_set(b"old" * 100, 20, int(time.time() * 1000), Codec.NONE)
            code, _ = client.produce(target.leader, topic, target.partition, records, acks=-1)
            assert code == ErrorCode.NONE
    finally:
        client.close()


def test_a_headless_run_of_each_user_class_reports_requests_and_no_failures(
    cluster, replicated_topic, tmp_path
):
    topic = replicated_topic(3)
    produce_old_data(cluster, topic)
    prefix = tmp_path / "classes"
    run_locust(
        [
            "--headless", "-u", "4", "-r", "4", "-t", "3s", "--csv", str(prefix),
            "--producers", "1", "--in-sync-consumers", "2", "--catch-up-consumers", "1",
            "--bootstrap", cluster.bootstrap_servers, "--topic", topic, *QUICK,
            "--keys", "3", "--codec", "gzip",
        ],
        tmp_path,
    )  # fmt: skip

    table = stats(prefix)
    assert table[("", "Aggregated")]["Failure Count"] == "0"
    for request_type, name in [
        ("produce", f"{topic} acks=all"),  # ProducerUser
        ("fetch", f"{topic} in-sync"),  # InSyncConsumerUser
        ("join", topic),
        ("fetch", f"{topic} catch-up"),  # CatchUpConsumerUser
    ]:
        assert int(table[(request_type, name)]["Request Count"]) > 0, (request_type, name)
    assert float(table[("fetch", f"{topic} catch-up")]["Average Content Size"]) > 0
    # the producer's batches went out compressed as asked, key k to partition k
    assert "gzip" in codecs_on_disk(cluster, topic, partition=1)
    reader = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    reader.assign([TopicPartition(topic, 1)])
    keys = {record.key for record in itertools.islice(reader, 1000)} - {None}  # None: old data
    reader.close()
    assert keys == {b"key-1"}


def test_producer_users_send_record_batches_with_message_format_2(cluster_2_1, tmp_path):
    """--message-format 2: each task run is one v2 record batch (Produce v3), stored as sent."""
    topic = "locust-format-2"
    with zookeeper.session(cluster_2_1.zookeeper) as client:
        topics.create_topic(client, topic, 2, 3, {"message.format.version": "2.1"})
    wait_for_leaders(cluster_2_1, topic, 2)
    prefix = tmp_path / "v2"
    run_locust(
        [
            "--headless", "-u", "1", "-r", "1", "-t", "3s", "--csv", str(prefix),
            "--bootstrap", cluster_2_1.bootstrap_servers, "--topic", topic, *QUICK,
            "--message-format", "2", "--codec", "lz4", "ProducerUser",
        ],
        tmp_path,
    )  # fmt: skip

    row = stats(prefix)[("produce", f"{topic} acks=all")]
    assert int(row["Request Count"]) > 0 and row["Failure Count"] == "0"
    batches = entries_on_disk(cluster_2_1, topic, 0) + entries_on_disk(cluster_2_1, topic, 1)
    per_batch = 2000 // 100  # QUICK's batch bytes over its record size
    assert batches and set(batches) == {(2, "lz4", per_batch)}  # whole v2 batches
    assert records_in(cluster_2_1, topic) == per_batch * len(batches)


def test_the_users_group_member_shares_a_group_with_kafka_pythons_consumer(
    cluster, replicated_topic
):
    """The in-sync consumers' group member speaks Kafka's consumer protocol: in one group with
    a kafka-python consumer, the two split the partitions between them, whichever leads."""
    topic = replicated_topic(3)
    group = f"{topic}-shared"
    theirs = KafkaConsumer(
        topic,
        group_id=group,
        bootstrap_servers=cluster.bootstrap_servers,
        heartbeat_interval_ms=300,
        session_timeout_ms=30000,  # a busy machine's slow rejoin does not drop a member
    )
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            theirs.poll(timeout_ms=100)

    def assigned_to_them() -> set[int]:
        return {p.partition for p in theirs.assignment()}

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    client = BlockingClient(cluster.bootstrap_servers)
    try:
        wait_until(lambda: assigned_to_them() == {0, 1, 2}, 30, "kafka-python to own the group")
        member = GroupMember(client, group, topic, session_timeout_ms=30000, wait=60)
        ours = set(member.join([0, 1, 2]))
        wait_until(
            lambda: assigned_to_them() == {0, 1, 2} - ours,
            60,
            f"kafka-python to take the partitions {ours} left to it",
        )
        assert len(ours) in (1, 2)  # range: one member gets two, the other one
        member.leave()
        wait_until(lambda: assigned_to_them() == {0, 1, 2}, 30, "kafka-python to take all back")
    finally:
        stop.set()
        poller.join()
        theirs.close()
        client.close()


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--record-size", "0", "must be at least 1"),
        ("--scale", "0", "must be greater than 0"),  # not "unpaced", as a rate of 0 is
    ],
)
def test_an_option_out_of_range_is_refused_naming_it(tmp_path, option, value, said):
    result = subprocess.run(
        [*LOCUST, "--headless", option, value], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert f"argument {option}:" in result.stderr and said in result.stderr


def test_a_master_and_two_workers_share_the_load_and_the_options(
    cluster, replicated_topic, tmp_path
):
    """The options given to the master alone (the topic, the acks) reach the workers' users."""
    topic = replicated_topic(3)
    port = free_port()
    workers = [
        subprocess.Popen(
            [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    prefix = tmp_path / "distributed"
    try:
        run_locust(
            [
                "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "--expect-workers", "2", "--headless", "-u", "4", "-r", "4", "-t", "8s",
                "--csv", str(prefix), "--bootstrap", cluster.bootstrap_servers,
                "--topic", topic, "--acks", "1", *QUICK, "ProducerUser",
            ],
            tmp_path,
        )  # fmt: skip
    finally:
        for worker in workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    row = stats(prefix)[("produce", f"{topic} acks=1")]
    assert int(row["Request Count"]) > 0
    assert row["Failure Count"] == "0"
    # the workers' users produced to the topic named to the master only; what the master
    # counted (from the workers' reports, every three seconds: hence an eight-second run) is on
    # the brokers
    assert records_in(cluster, topic) >= int(row["Request Count"]) * (2000 // 100)


# the design's figures per leader broker: MB/s of producers, and each record's size
WORKLOADS_ASKED = {"acks_all": ("all", 30, 484), "acks_1": ("1", 55, 458)}
ASKED = 500_000  # bytes/s of each workload, scaled down: both at once, three replicas, 2 cores


def test_the_workload_files_produce_their_scaled_rates(cluster, replicated_topic, tmp_path):
    """Each scaled to 0.5 MB/s (both at once, on topics of their own), the design's two
    workloads produce within 10% of the design's rate times the scale, by locust's figures and
    by the records that reached the brokers; their in-sync consumers read it four times over."""
    seconds = 10
    runs = {}
    for workload, (_, design_rate, _) in WORKLOADS_ASKED.items():
        topic = replicated_topic(3)
        prefix = tmp_path / workload
        command = [
            *LOCUST, "--config", str(WORKLOADS / f"{workload}.conf"), "--headless",
            "-t", f"{seconds}s", "--csv", str(prefix), "--json-file", str(prefix),
            "--bootstrap", cluster.bootstrap_servers, "--topic", topic,
            "--scale", str(ASKED / 1_000_000 / design_rate),
        ]  # fmt: skip
        process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        runs[workload] = (topic, prefix, process)
    for workload, (topic, prefix, process) in runs.items():
        _, errors = process.communicate(timeout=60)
        assert process.returncode == 0, errors[-3000:]

        acks, design_rate, record_size = WORKLOADS_ASKED[workload]
        table = stats(prefix)
        assert table[("", "Aggregated")]["Failure Count"] == "0"
        final = final_stats(prefix.with_suffix(".json"))
        produced = final[("produce", f"{topic} acks={acks}")]
        batches, per_batch = produced["num_requests"], 16384 // record_size
        # each of the 30 producers sends its first batch at once, and one per interval after
        # that: the rate is what came after the first batches, over the time they took
        elapsed = produced["last_request_timestamp"] - produced["start_time"]
        rate = (batches - 30) * per_batch * record_size / elapsed
        assert rate == pytest.approx(ASKED, rel=0.10), workload

        # a user stopped while it waited for an acknowledgement may have left a batch more
        on_brokers = records_in(cluster, topic)
        assert batches * per_batch <= on_brokers <= (batches + 30) * per_batch
        # the in-sync consumers are four groups, and no record was read twice in one: at most
        # four times what is on the brokers (each group starts at the log end once it has
        # joined, and on a busy machine a join takes seconds of the run)
        assert groups_of(cluster, topic) == {f"tidelog-locust-{topic}-{n}" for n in range(4)}
        read = final[("fetch", f"{topic} in-sync")]["total_content_length"]
        assert 0 < read <= 4 * on_brokers * record_size, workload
