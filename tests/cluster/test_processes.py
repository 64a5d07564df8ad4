"""A cluster directory's process records are acted on only for the very processes they name."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tidelog.cluster.local import ClusterError, LocalCluster
from tidelog.cluster.processes import ProcessRecord, cpu_seconds, cpu_used_between, start_time


@pytest.fixture
def bystander():
    """An unrelated process, as one that took a recorded process id after a reboot would be."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def cluster_recording(directory, pid: int, started: int | None) -> LocalCluster:
    config = directory / "broker-1" / "server.properties"
    document = {
        "zookeeper": "127.0.0.1:1",
        "zookeeper_process": {
            "pid": pid,
            "started": started,
            "marker": str(directory / "zookeeper" / "zoo.cfg"),
        },
        "brokers": {
            "1": {
                "broker_id": 1,
                "port": 1,
                "admin_port": 2,
                "config": str(config),
                "process": {"pid": pid, "started": started, "marker": str(config)},
            }
        },
    }
    directory.mkdir(exist_ok=True)
    (directory / "cluster.json").write_text(json.dumps(document))
    return LocalCluster(directory)


def test_a_reused_process_id_is_a_stale_record_and_is_never_signalled(tmp_path, bystander):
    cluster = cluster_recording(tmp_path, bystander.pid, start_time(bystander.pid))
    broker = cluster.broker(1)
    assert broker.stale and not broker.alive and broker.pid is None
    assert cluster.status()[0]["stale"]
    said: list[str] = []
    cluster.down(progress=said.append)
    assert said == ["broker 1: not running (stale record)", "ZooKeeper: not running (stale record)"]
    assert LocalCluster(tmp_path).broker(1).process is None
    cluster = cluster_recording(tmp_path, bystander.pid, start_time(bystander.pid))
    for act in (lambda: cluster.signal_broker(1, signal.SIGKILL), lambda: cluster.stop_broker(1)):
        with pytest.raises(ClusterError, match="not running"):
            act()
    assert bystander.poll() is None  # never signalled


def test_a_process_with_another_start_time_is_not_the_recorded_one(bystander):
    started = start_time(bystander.pid)
    assert started is not None
    marker = "time.sleep"
    assert ProcessRecord(bystander.pid, started, marker).running()
    assert not ProcessRecord(bystander.pid, started - 1, marker).running()
    assert not ProcessRecord(bystander.pid, started, "/some/cluster/server.properties").running()
    ProcessRecord(bystander.pid, started - 1, marker).stop(timeout=0.1)
    assert bystander.poll() is None


def test_a_process_cpu_is_what_it_used_and_none_for_a_process_that_is_gone(bystander):
    spinner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.5\n"
            "while time.process_time() < end: pass\ntime.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while (cpu_seconds(spinner.pid) or 0) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.4 <= (cpu_seconds(spinner.pid) or 0) < 5
        assert (cpu_seconds(bystander.pid) or 0) < 0.4  # asleep since it started
    finally:
        spinner.kill()
        spinner.wait()
    assert cpu_seconds(spinner.pid) is None
    assert cpu_seconds(None) is None


def test_cpu_used_between_two_readings_counts_a_process_started_between_from_its_start():
    before = {10: 5.0, 11: 2.0}  # 11 then restarted as 12; 13 started after the first reading
    after = {10: 7.5, 12: 0.5, 13: 1.0}
    assert cpu_used_between(before, after) == 2.5 + 0.5 + 1.0
