"""locust runs the locustfile headless and distributed against a real cluster: every user class
reports requests and no failures, and the design's two workloads produce the rate they ask for."""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode
from tidelog.perf.locust.client import LATEST, BlockingClient
from tidelog.perf.producer import repeated_message_set
from tidelog.records.format import Codec

from .conftest import wait_for_leaders

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "tidelog" / "perf" / "locust" / "locustfile.py"
WORKLOADS = LOCUSTFILE.parent / "workloads"
LOCUST = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
# a record size and batch that keep requests small for a quick run
QUICK = ["--record-size", "100", "--batch-bytes", "2000"]


@pytest.fixture
def replicated_topic(cluster):
    """replicated_topic(partitions) creates a topic with three replicas and returns its name."""
    created = iter(range(1000))

    def create(partitions: int = 3) -> str:
        name = f"locust-{id(create)}-{next(created)}"
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
    assert int(table[("join", topic)]["Request Count"]) >= 2  # each of the two users joined


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


def test_the_workload_files_produce_their_scaled_rates(cluster, replicated_topic, tmp_path):
    """Each scaled to about 1 MB/s (both at once, on topics of their own), the design's two
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
            "--scale", str(1 / design_rate),
        ]  # fmt: skip
        process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        runs[workload] = (topic, prefix, process)
    for workload, (topic, prefix, process) in runs.items():
        _, errors = process.communicate(timeout=60)
        assert process.returncode == 0, errors[-3000:]

        acks, design_rate, record_size = WORKLOADS_ASKED[workload]
        table = stats(prefix)
        assert table[("", "Aggregated")]["Failure Count"] == "0"
        produced = table[("produce", f"{topic} acks={acks}")]
        rate = float(produced["Requests/s"]) * float(produced["Average Content Size"])
        assert rate == pytest.approx(1_000_000, rel=0.10), workload

        final = final_stats(prefix.with_suffix(".json"))
        batches = final[("produce", f"{topic} acks={acks}")]["num_requests"]
        per_batch = 16384 // record_size
        # a user stopped while it waited for an acknowledgement may have left a batch more
        assert batches * per_batch <= records_in(cluster, topic) <= (batches + 10) * per_batch
        # each of the four groups starts at the log end once it has joined (in the run's first
        # second), so misses what came before
        written = final[("produce", f"{topic} acks={acks}")]["total_content_length"]
        read = final[("fetch", f"{topic} in-sync")]["total_content_length"]
        assert 0.75 * 4 * written <= read <= 4 * written, workload
