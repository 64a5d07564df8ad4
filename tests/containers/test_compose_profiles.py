"""compose.yaml's optional parts on the session's compose cluster: the remote tier on a volume
the brokers share, the report pipeline over a run-data volume, locust's master and workers."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.containers.test_compose_cluster import consume_with_kcat, create_topic, produce
from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.local import wait_until

pytestmark = pytest.mark.containers

# about one rolled segment stays on a broker's disk, the rest goes to the tier
TIERED_TOPIC = {
    "remote.storage.enable": "true",
    "segment.bytes": "16384",
    "local.retention.bytes": "16384",
}


def leader_view(cluster: ComposeCluster, topic: str) -> dict:
    """Partition 0 as its leader's admin API shows it ({} while no broker leads it)."""
    for broker in cluster.state.brokers.values():
        url = f"http://127.0.0.1:{broker.admin_port}/topics/{topic}"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                entry = json.loads(reply.read())["partitions"][0]
        except OSError:
            continue
        if entry.get("leader") == broker.broker_id and "log_end_offset" in entry:
            return entry
    return {}


def run_data(tmp_path: Path) -> Path:
    """A host directory for the run-data volume, writable by the images' user (uid 10001)."""
    directory = tmp_path / "runs"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


def test_the_remote_tier_volume_serves_what_the_brokers_deleted(
    compose_cluster: ComposeCluster,
) -> None:
    topic = create_topic(compose_cluster, "tiered", partitions=1, config=TIERED_TOPIC)
    values = [b"%06d-" % n + hashlib.sha512(b"%d" % n).hexdigest().encode() for n in range(1500)]
    produce(compose_cluster, topic, values)

    def offloaded() -> bool:
        view = leader_view(compose_cluster, topic)
        return view.get("local_log_start_offset", 0) > 0 and view.get("remote_segments", 0) > 0

    wait_until(offloaded, 90, f"the leader of {topic}-0 to move old segments to the tier")
    # the oldest messages now come from the tier
    assert consume_with_kcat(compose_cluster, topic) == values
    volume = f"{compose_cluster.project}_remote-tier"
    mountpoint = json.loads(
        subprocess.run(
            ["docker", "volume", "inspect", volume], capture_output=True, check=True
        ).stdout
    )[0]["Mountpoint"]
    assert any(topic in str(path) for path in Path(mountpoint).rglob("*"))


def test_the_report_profile_turns_run_data_into_a_report(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    topic = create_topic(compose_cluster, "reported")
    runs = run_data(tmp_path)
    subprocess.run(
        [
            *(sys.executable, "-m", "tidelog.cli", "perf", "produce", "--topic", topic),
            *("--num-records", "3000", "--record-size", "100", "--acks", "all"),
            *("--bootstrap-server", compose_cluster.bootstrap_servers),
            *("--out", str(runs / "acks-all")),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    report = [*compose_cluster.compose_command(), "--profile", "report"]
    environment = {**os.environ, "TIDELOG_RUN_DATA": str(runs)}
    try:
        done = subprocess.run(
            [*report, "run", "--rm", "report"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=900,  # Spark's jobs, on a loaded machine
        )
    finally:
        subprocess.run(
            [*report, "rm", "--stop", "--force", "--volumes", "spark-master", "spark-worker"],
            env=environment,
            capture_output=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    # computed by the executors of the profile's two workers, which read the same volume
    assert "Spark at spark://spark-master:7077: 2 executor(s), 2 core(s)" in done.stdout
    assert "report of 1 run(s) written to /var/lib/tidelog/runs/report" in done.stdout
    page = (runs / "report" / "report.html").read_text()
    assert "acks-all" in page
    assert list((runs / "report").glob("*.png"))


def test_the_locust_profile_runs_headless_with_no_failures(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    """The master and two workers run each user class for 15 s (in-sync consumers join a group
    first) against the brokers' INTERNAL listeners; locust exits 1 if any request failed."""
    topic = create_topic(compose_cluster, "locust")
    runs = run_data(tmp_path)
    options = [
        *("--headless", "-u", "4", "-r", "4", "-t", "15s", "--topic", topic),
        *("--producers", "1", "--in-sync-consumers", "2", "--catch-up-consumers", "1"),
        *("--record-size", "100", "--batch-bytes", "2000"),
        *("--csv", "/var/lib/tidelog/runs/locust"),
    ]
    services = ["locust-master", "locust-worker"]
    locust = [*compose_cluster.compose_command(), "--profile", "locust"]
    environment = {
        **os.environ,
        "TIDELOG_LOCUST_OPTIONS": " ".join(options),
        "TIDELOG_RUN_DATA": str(runs),
    }
    try:
        done = subprocess.run(
            [*locust, "up", "--exit-code-from", "locust-master", *services],
            env=environment,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        subprocess.run(
            [*locust, "rm", "--stop", "--force", "--volumes", *services],
            env=environment,
            capture_output=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    with open(runs / "locust_stats.csv", newline="") as file:
        table = {(row["Type"], row["Name"]): row for row in csv.DictReader(file)}
    assert table[("", "Aggregated")]["Failure Count"] == "0"
    for request_type, name in [
        ("produce", f"{topic} acks=all"),
        ("fetch", f"{topic} in-sync"),
        ("fetch", f"{topic} catch-up"),
    ]:
        assert int(table[(request_type, name)]["Request Count"]) > 0, (request_type, name)
