"""A local cluster: an embedded ZooKeeper (unless one is given) and N broker processes.

All of a cluster's state lives in one directory:

    DIR/cluster.json               what runs: ZooKeeper, and each broker's ports and process id
    DIR/zookeeper/                 zoo.cfg, data, zookeeper.log (embedded ZooKeeper only)
    DIR/broker-{id}/server.properties, logs/ (log.dirs), broker.log
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidelog.cluster.zookeeper import (
    EmbeddedZooKeeper,
    free_port,
    is_serving,
    process_alive,
    stop_process,
)

STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    pass


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    admin_port: int
    config: str
    pid: int | None = None

    @property
    def alive(self) -> bool:
        return self.pid is not None and process_alive(self.pid)


@dataclass
class ClusterState:
    zookeeper: str
    zookeeper_pid: int | None  # None: an external ZooKeeper, not ours to stop
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)


def wait_until(condition, timeout: float, what: str, interval: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class LocalCluster:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).resolve()
        self.state: ClusterState | None = self._load()

    # -- state ---------------------------------------------------------------------------------

    def _load(self) -> ClusterState | None:
        path = self.directory / STATE_FILE
        if not path.exists():
            return None
        document = json.loads(path.read_text())
        brokers = {int(k): BrokerProcess(**v) for k, v in document["brokers"].items()}
        return ClusterState(document["zookeeper"], document["zookeeper_pid"], brokers)

    def _save(self) -> None:
        assert self.state is not None
        document = {
            "zookeeper": self.state.zookeeper,
            "zookeeper_pid": self.state.zookeeper_pid,
            "brokers": {str(k): asdict(v) for k, v in self.state.brokers.items()},
        }
        (self.directory / STATE_FILE).write_text(json.dumps(document, indent=2) + "\n")

    @property
    def running(self) -> bool:
        if self.state is None:
            return False
        zookeeper_alive = self.state.zookeeper_pid is not None and process_alive(
            self.state.zookeeper_pid
        )
        return zookeeper_alive or any(b.alive for b in self.state.brokers.values())

    @property
    def bootstrap_servers(self) -> str:
        assert self.state is not None
        return ",".join(f"127.0.0.1:{b.port}" for b in self.state.brokers.values())

    @property
    def zookeeper(self) -> str:
        assert self.state is not None
        return self.state.zookeeper

    def broker(self, broker_id: int) -> BrokerProcess:
        if self.state is None or broker_id not in self.state.brokers:
            raise ClusterError(f"no broker {broker_id} in the cluster at {self.directory}")
        return self.state.brokers[broker_id]

    # -- up and down ---------------------------------------------------------------------------

    def up(
        self,
        brokers: int,
        *,
        zookeeper: str | None = None,
        overrides: dict[str, str] | None = None,
        timeout: float = 60.0,
        progress=print,  # type: ignore[no-untyped-def]
    ) -> None:
        if self.running:
            raise ClusterError(
                f"a cluster is already running in {self.directory}; "
                f"'tidelog cluster down --dir {self.directory}' stops it"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        zookeeper_pid = None
        if zookeeper is None:
            embedded = EmbeddedZooKeeper(self.directory / "zookeeper")
            progress(f"starting ZooKeeper on {embedded.connect_string}")
            zookeeper_pid = embedded.start()
            zookeeper = embedded.connect_string
        self._prepare_zookeeper(zookeeper)
        self.state = ClusterState(zookeeper, zookeeper_pid)
        for broker_id in range(1, brokers + 1):
            self.state.brokers[broker_id] = self._configure_broker(broker_id, overrides or {})
        self._save()
        for broker_id in self.state.brokers:
            progress(f"starting broker {broker_id}")
            self.start_broker(broker_id, wait=False)
        self.wait_registered(list(self.state.brokers), timeout)
        everyone = sorted(self.state.brokers)
        wait_until(
            lambda: all(self.health(b).get("brokers") == everyone for b in everyone),
            timeout,
            "every broker to know every other",
            interval=0.2,
        )
        progress(f"{brokers} brokers registered; bootstrap servers: {self.bootstrap_servers}")

    def _prepare_zookeeper(self, connect: str) -> None:
        from tidelog.controller import zookeeper

        with zookeeper.session(connect) as client:
            zookeeper.ensure_layout(client)

    def _configure_broker(self, broker_id: int, overrides: dict[str, str]) -> BrokerProcess:
        directory = self.directory / f"broker-{broker_id}"
        directory.mkdir(parents=True, exist_ok=True)
        port, admin_port = free_port(), free_port()
        assert self.state is not None
        properties = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "admin.listener": f"127.0.0.1:{admin_port}",
            "log.dirs": str(directory / "logs"),
            "zookeeper.connect": self.state.zookeeper,
            # the tier every broker of the cluster shares, used once remote storage is enabled
            "remote.log.storage.uri": f"file://{(self.directory / 'remote').resolve()}",
            **overrides,
        }
        config = directory / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        return BrokerProcess(broker_id, port, admin_port, str(config))

    def down(self, timeout: float = 30.0, progress=print) -> None:  # type: ignore[no-untyped-def]
        if self.state is None:
            raise ClusterError(f"no cluster in {self.directory}")
        for broker in self.state.brokers.values():
            if broker.alive:
                progress(f"stopping broker {broker.broker_id}")
                stop_process(broker.pid, timeout)  # type: ignore[arg-type]
            broker.pid = None
        if self.state.zookeeper_pid is not None and process_alive(self.state.zookeeper_pid):
            progress("stopping ZooKeeper")
            stop_process(self.state.zookeeper_pid, timeout)
        self._save()

    # -- single brokers ------------------------------------------------------------------------

    def start_broker(self, broker_id: int, wait: bool = True, timeout: float = 60.0) -> None:
        broker = self.broker(broker_id)
        if broker.alive:
            raise ClusterError(f"broker {broker_id} is already running (pid {broker.pid})")
        directory = Path(broker.config).parent
        with open(directory / "broker.log", "ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "tidelog.cli", "broker", "--config", broker.config],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        broker.pid = process.pid
        self._save()
        if wait:
            self.wait_registered([broker_id], timeout)

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM), waited for."""
        broker = self.broker(broker_id)
        if not broker.alive:
            raise ClusterError(f"broker {broker_id} is not running")
        if not stop_process(broker.pid, timeout):  # type: ignore[arg-type]
            raise ClusterError(f"broker {broker_id} did not stop in {timeout} s and was killed")
        broker.pid = None
        self._save()

    def signal_broker(self, broker_id: int, signum: signal.Signals) -> None:
        broker = self.broker(broker_id)
        if not broker.alive:
            raise ClusterError(f"broker {broker_id} is not running")
        os.kill(broker.pid, signum)  # type: ignore[arg-type]
        if signum in (signal.SIGKILL, signal.SIGTERM):
            wait_until(lambda: not broker.alive, 30, f"broker {broker_id} to exit")
            broker.pid = None
            self._save()

    # -- looking -------------------------------------------------------------------------------

    def registered_brokers(self) -> set[int]:
        from tidelog.controller import zookeeper

        host, _, port = self.zookeeper.rpartition(":")
        if not is_serving(host, int(port)):
            return set()
        with zookeeper.session(self.zookeeper) as client:
            return set(zookeeper.read_brokers(client))

    def health(self, broker_id: int) -> dict:
        """The broker's own /health answer ({} if it does not answer)."""
        port = self.broker(broker_id).admin_port
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                return json.loads(reply.read())
        except (OSError, ValueError):
            return {}

    def is_registered(self, broker_id: int) -> bool:
        """Whether the broker process says it is registered: a znode left by a killed process
        does not count."""
        return bool(self.health(broker_id).get("registered"))

    def wait_registered(self, broker_ids: list[int], timeout: float = 60.0) -> None:
        def all_registered() -> bool:
            for broker_id in broker_ids:
                broker = self.broker(broker_id)
                if broker.pid is not None and not broker.alive:
                    log_path = Path(broker.config).parent / "broker.log"
                    tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                    raise ClusterError(
                        f"broker {broker_id} exited while starting; {log_path} ends with:\n"
                        + "\n".join(tail)
                    )
            return all(self.is_registered(broker_id) for broker_id in broker_ids)

        wait_until(all_registered, timeout, f"brokers {broker_ids} to register", interval=0.3)

    def status(self) -> list[dict]:
        if self.state is None:
            raise ClusterError(f"no cluster in {self.directory}")
        registered = self.registered_brokers() if self.running else set()
        return [
            {
                "broker": broker.broker_id,
                "pid": broker.pid if broker.alive else None,
                "running": broker.alive,
                "registered": broker.broker_id in registered,
                "port": broker.port,
                "admin_port": broker.admin_port,
            }
            for broker in self.state.brokers.values()
        ]
