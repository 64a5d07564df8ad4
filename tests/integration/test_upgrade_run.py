"""`tidelog upgrade run` on real broker processes: a broker that does not come back stops the
run with a report and a non-zero exit, and the same command resumes it where it stopped."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import urllib.error
import urllib.request
from types import SimpleNamespace

from tests.integration.conftest import run_tidelog
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.upgrade import checks

FROM_0_10_0 = {
    "broker.protocol.max.version": "0.10.0",
    "inter.broker.protocol.version": "0.10.0",
    "log.message.format.version": "0.10.0",
}


def tidelog(*args: str) -> subprocess.CompletedProcess:
    return run_tidelog(*args, timeout=600)


def test_a_failed_step_stops_the_run_and_the_same_command_resumes_it(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(3, overrides=FROM_0_10_0, progress=lambda _: None)
    try:
        with zookeeper.session(cluster.zookeeper) as client:
            topics.create_topic(client, "kept", 2, 3, {"min.insync.replicas": "2"})
        directory = str(cluster.directory)
        planned = tidelog("upgrade", "plan", "--dir", directory, "--to", "0.10.1")
        assert planned.returncode == 0, planned.stderr
        assert planned.stdout.splitlines()[-1] == "3 steps"
        dry = tidelog("upgrade", "run", "--dir", directory, "--to", "0.10.1", "--dry-run")
        assert (
            dry.stdout == planned.stdout
            and not (cluster.directory / "upgrade-journal.json").exists()
        )

        # broker 2 will not come back: its log directory cannot be made
        properties = cluster.directory / "broker-2" / "server.properties"
        good = properties.read_text()
        properties.write_text(good.replace(f"log.dirs={cluster.directory}", "log.dirs=/dev/null"))
        failed = tidelog("upgrade", "run", "--dir", directory, "--to", "0.10.1", "--timeout", "60")
        assert failed.returncode == 1
        assert "step 2/3 (phase 1: new code, pinned: roll broker 2" in failed.stderr
        assert "broker 2 exited while starting" in failed.stderr
        assert "the same command resumes from this step" in failed.stderr
        journal = json.loads((cluster.directory / "upgrade-journal.json").read_text())
        assert journal["state"] == "failed"
        assert [s["status"] for s in journal["steps"]] == ["done", "failed", "pending"]
        assert journal["failure"]["cluster"]["brokers"]["2"] == "not registered"
        pid_of_1 = LocalCluster(directory).broker(1).pid

        properties.write_text(
            properties.read_text().replace("log.dirs=/dev/null", f"log.dirs={cluster.directory}")
        )
        resumed = tidelog("upgrade", "run", "--dir", directory, "--to", "0.10.1", "--timeout", "60")
        assert resumed.returncode == 0, resumed.stderr
        assert "resuming the upgrade" in resumed.stdout
        assert "[1/3]" not in resumed.stdout and "[2/3]" in resumed.stdout
        journal = json.loads((cluster.directory / "upgrade-journal.json").read_text())
        assert journal["state"] == "done"
        after = LocalCluster(directory)
        assert after.broker(1).pid == pid_of_1  # a done step is not run again
        for broker_id in (1, 2, 3):
            assert after.broker_settings(broker_id)["broker.protocol.max.version"] == "0.10.1"
        again = tidelog("upgrade", "plan", "--dir", directory, "--to", "0.10.1")
        assert again.stdout.strip() == "nothing to do: the cluster runs 0.10.1"
    finally:
        LocalCluster(cluster.directory).down(progress=lambda _: None)


def test_leaders_count_as_applied_only_when_every_brokers_own_view_has_them(cluster, new_topic):
    """The upgrade's format marks wait for this after an election: a view one election behind
    (a broker that has not yet taken the new leader, and may still append as the old one)
    keeps it false."""
    topic = new_topic(partitions=2)
    wait_until(lambda: checks.leaders_applied(cluster), 30, "the brokers to take the new topic")

    real = cluster.status()
    port = real[0]["admin_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/topics/{topic}", timeout=5) as reply:
        view = json.loads(reply.read())
    view["partitions"][1]["leader_epoch"] -= 1
    behind = OneViewBehind(topic, view, port)
    try:
        stale = {"broker": 9, "registered": True, "admin_port": behind.server_port}
        lagging = SimpleNamespace(zookeeper=cluster.zookeeper, status=lambda: [*real, stale])
        assert not checks.leaders_applied(lagging)
        view["partitions"][1]["leader_epoch"] += 1  # it takes the election
        assert checks.leaders_applied(lagging)
    finally:
        behind.shutdown()


class OneViewBehind(http.server.ThreadingHTTPServer):
    """An admin API that answers GET /topics/{topic} with ``view`` and every other path as the
    broker at ``real_port`` does (the shared cluster holds other tests' topics too)."""

    def __init__(self, topic: str, view: dict, real_port: int) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = 200, json.dumps(outer.view).encode()
                if self.path != f"/topics/{topic}":
                    url = f"http://127.0.0.1:{real_port}{self.path}"
                    try:
                        with urllib.request.urlopen(url, timeout=5) as reply:
                            body = reply.read()
                    except urllib.error.HTTPError as error:
                        status, body = error.code, error.read()
                self.send_response(status)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.view = view
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()
