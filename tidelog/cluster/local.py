"""A local cluster: an embedded ZooKeeper (unless one is given) and N broker processes.

All of a cluster's state lives in one directory:

    DIR/cluster.json               what runs: ZooKeeper, and each broker's ports and process
    DIR/zookeeper/                 zoo.cfg, data, zookeeper.log (embedded ZooKeeper only)
    DIR/broker-{id}/server.properties, logs/ (log.dirs), broker.log
    DIR/network.json               with --netns: the namespaces and links (netns.py)

With ``netns`` each member runs in a network namespace of its own, at its own address on a
bridge the cluster owns (netns.py), listening on fixed ports (NETNS_PORTS); without, every
process listens on 127.0.0.1.

A process is recorded with its start time and its configuration file's path (see
``processes.ProcessRecord``), and is signalled only while it is still that process: a record
left by a crash or a reboot is reported as stale, never acted on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidelog.cluster import disks
from tidelog.cluster.netns import (
    ZOOKEEPER,
    ClusterNetwork,
    NetworkError,
    check_can_build,
    member_name,
)
from tidelog.cluster.processes import ProcessRecord, cpu_seconds, processes_with, stop_process
from tidelog.cluster.zookeeper import (
    EmbeddedZooKeeper,
    free_ports,
    is_serving,
    port_taken,
)
from tidelog.files import replace_text
from tidelog.reach import Unreachable

STATE_FILE = "cluster.json"
# With --netns every member has an address of its own, so the ports are the usual ones.
NETNS_KAFKA_PORT = 9092
NETNS_ADMIN_PORT = 9093
NETNS_ZOOKEEPER_PORT = 2181


class ClusterError(RuntimeError):
    pass


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    admin_port: int
    config: str
    process: ProcessRecord | None = None
    host: str = "127.0.0.1"  # its listeners' address: its namespace's with --netns

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.running()

    @property
    def admin_host(self) -> str:
        """Where its admin API listens (admin.listener): beside its listeners."""
        return self.host

    @property
    def stale(self) -> bool:
        """A process is recorded, but it is gone (or its id now names another process)."""
        return self.process is not None and not self.process.running()

    @property
    def pid(self) -> int | None:
        process = self.process
        return process.pid if process is not None and process.running() else None

    @property
    def log_path(self) -> Path:
        return Path(self.config).parent / "broker.log"

    def to_json(self) -> dict:
        document = asdict(self)
        document["process"] = self.process.to_json() if self.process else None
        return document

    @classmethod
    def from_json(cls, document: dict) -> BrokerProcess:
        return cls(**{**document, "process": ProcessRecord.from_json(document.get("process"))})


@dataclass
class ClusterState:
    zookeeper: str
    zookeeper_process: ProcessRecord | None  # None: an external ZooKeeper, not ours to stop
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)


def wait_until(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    interval: float = 0.1,
    state: Callable[[], str] | None = None,
) -> None:
    """Waits until ``condition()`` is true, at most ``timeout`` s; the error says ``what`` was
    waited for and, with ``state``, what was found instead."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            found = f"; found {state()}" if state is not None else ""
            raise ClusterError(f"timed out after {timeout} s waiting for {what}{found}")
        time.sleep(interval)


class LocalCluster:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).resolve()
        self.state: ClusterState | None = self._load()
        self.network: ClusterNetwork | None = ClusterNetwork.load(self.directory)
        # brokers started by this object: their exit is known exactly (and with its status)
        self._children: dict[int, subprocess.Popen] = {}

    # -- state ---------------------------------------------------------------------------------

    def _load(self) -> ClusterState | None:
        path = self.directory / STATE_FILE
        if not path.exists():
            return None
        document = json.loads(path.read_text())
        brokers = {int(k): BrokerProcess.from_json(v) for k, v in document["brokers"].items()}
        return ClusterState(
            document["zookeeper"],
            ProcessRecord.from_json(document.get("zookeeper_process")),
            brokers,
        )

    def _save(self) -> None:
        assert self.state is not None
        document = {
            "zookeeper": self.state.zookeeper,
            "zookeeper_process": (
                self.state.zookeeper_process.to_json() if self.state.zookeeper_process else None
            ),
            "brokers": {str(k): v.to_json() for k, v in self.state.brokers.items()},
        }
        # the state of a cluster a killed command leaves behind is read by the next command
        replace_text(self.directory / STATE_FILE, json.dumps(document, indent=2) + "\n")

    @property
    def running(self) -> bool:
        if self.state is None:
            return False
        return self.zookeeper_alive or any(b.alive for b in self.state.brokers.values())

    @property
    def zookeeper_alive(self) -> bool:
        assert self.state is not None
        process = self.state.zookeeper_process
        return process is not None and process.running()

    @property
    def bootstrap_servers(self) -> str:
        assert self.state is not None
        return ",".join(f"{b.host}:{b.port}" for b in self.state.brokers.values())

    @property
    def zookeeper(self) -> str:
        assert self.state is not None
        return self.state.zookeeper

    @property
    def broker_ids(self) -> list[int]:
        if self.state is None:
            raise ClusterError(f"no cluster in {self.directory}")
        return sorted(self.state.brokers)

    def broker(self, broker_id: int) -> BrokerProcess:
        if self.state is None:
            raise ClusterError(f"no cluster in {self.directory}")
        if broker_id not in self.state.brokers:
            raise ClusterError(f"no broker {broker_id} in the cluster at {self.directory}")
        return self.state.brokers[broker_id]

    def brokers_cpu(self) -> dict[int, float]:
        """The CPU seconds each running broker process has used so far, by process id (from
        /proc; a process that ended meanwhile is left out); processes.cpu_used_between two
        readings is the brokers' CPU in between."""
        readings = {pid: cpu_seconds(pid) for pid in (self.broker(b).pid for b in self.broker_ids)}
        return {pid: cpu for pid, cpu in readings.items() if pid is not None and cpu is not None}

    # -- up and down ---------------------------------------------------------------------------

    def up(
        self,
        brokers: int,
        *,
        zookeeper: str | None = None,
        overrides: dict[str, str] | None = None,
        base_port: int | None = None,
        timeout: float = 60.0,
        progress=print,
        netns: bool = False,
    ) -> None:
        """Starts ZooKeeper (unless ``zookeeper`` is given) and ``brokers`` brokers, and waits
        until every broker knows every other. With ``base_port`` N, broker i listens at
        N+i-1, its admin API at N+brokers+i-1, and an embedded ZooKeeper at N+2*brokers, so
        the bootstrap servers stay the same across restarts. With ``netns`` every member runs
        in a namespace of its own (needs root). If anything fails, whatever was started (and
        made) is stopped (and removed) again and the logs are kept."""
        if self.running or self.network is not None:
            raise ClusterError(
                f"a cluster is already running in {self.directory}; "
                f"'tidelog cluster down --dir {self.directory}' stops it"
            )
        if netns and (zookeeper is not None or base_port is not None):
            given = "--zookeeper" if zookeeper is not None else "--base-port"
            raise ClusterError(
                f"{given} does not go with --netns: in namespaces ZooKeeper is the cluster's own "
                f"and every member has its own address (ports {NETNS_KAFKA_PORT}, "
                f"{NETNS_ADMIN_PORT} and {NETNS_ZOOKEEPER_PORT})"
            )
        if netns:
            try:
                check_can_build()  # before anything is made or written
            except NetworkError as error:
                raise ClusterError(str(error)) from error
        ports = _port_plan(brokers, base_port) if not netns else PortPlan(None, brokers)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state = ClusterState(zookeeper or "", None)
        try:
            if netns:
                members = [ZOOKEEPER, *(member_name(b) for b in range(1, brokers + 1))]
                progress(f"making network namespaces for {', '.join(members)}")
                self.network = ClusterNetwork.create(self.directory, members)
            if zookeeper is None:
                embedded = self._embedded_zookeeper(ports)
                progress(f"starting ZooKeeper on {embedded.connect_string}")
                self.state.zookeeper_process = embedded.start()
                self.state.zookeeper = embedded.connect_string
                self._save()
            self._prepare_zookeeper(self.state.zookeeper)
            for broker_id in range(1, brokers + 1):
                self.state.brokers[broker_id] = self._configure_broker(
                    broker_id, overrides or {}, *self._listener(ports, broker_id)
                )
            self._save()
            for broker_id in self.state.brokers:
                progress(f"starting broker {broker_id}")
                self.start_broker(broker_id, wait=False)
            self._wait_serving(brokers, timeout)
        except BaseException as error:
            logs = self._log_paths()  # before the undo forgets the embedded ZooKeeper
            self._undo_up(progress)
            if isinstance(error, NetworkError) and not logs:
                raise ClusterError(str(error)) from error
            if not isinstance(error, Exception) or (isinstance(error, Unreachable) and not logs):
                raise  # nothing was started (ZooKeeper given did not answer): said as it is
            kept = f"; the logs are kept: {', '.join(str(path) for path in logs)}" if logs else ""
            raise ClusterError(f"{error}\nstopped what was started{kept}") from error
        progress(f"{brokers} brokers registered; bootstrap servers: {self.bootstrap_servers}")

    def _embedded_zookeeper(self, ports: PortPlan) -> EmbeddedZooKeeper:
        directory = self.directory / "zookeeper"
        if self.network is None:
            return EmbeddedZooKeeper(directory, ports.zookeeper)
        network = self.network
        return EmbeddedZooKeeper(
            directory,
            NETNS_ZOOKEEPER_PORT,
            host=network.address(ZOOKEEPER),
            launch=lambda argv: network.command(ZOOKEEPER, argv),
        )

    def _listener(self, ports: PortPlan, broker_id: int) -> tuple[int, int, str]:
        """(Kafka port, admin port, address) of a broker."""
        if self.network is None:
            return (*ports.broker(broker_id), "127.0.0.1")
        return NETNS_KAFKA_PORT, NETNS_ADMIN_PORT, self.network.address(member_name(broker_id))

    def _log_paths(self) -> list[Path]:
        assert self.state is not None
        paths = [broker.log_path for broker in self.state.brokers.values()]
        if self.state.zookeeper_process is not None:
            paths.insert(0, self.directory / "zookeeper" / "zookeeper.log")
        return [path for path in paths if path.exists()]

    def _undo_up(self, progress) -> None:
        """After a failed ``up``: every broker and the embedded ZooKeeper it started stop."""
        assert self.state is not None
        for broker in self.state.brokers.values():
            if broker.process is not None and broker.process.running():
                progress(f"stopping broker {broker.broker_id}")
                broker.process.stop(5.0)
            broker.process = None
        if self.state.zookeeper_process is not None:
            progress("stopping ZooKeeper")
            self.state.zookeeper_process.stop(5.0)
            self.state.zookeeper_process = None
        self._save()
        self._remove_network(progress)

    def _remove_network(self, progress) -> None:
        """Removes the namespaces and links recorded in network.json, if there are any."""
        network = self.network or ClusterNetwork.load(self.directory)
        if network is not None:
            progress("removing the cluster's network namespaces and links")
            network.destroy(progress=progress)
        self.network = None

    def _wait_serving(self, brokers: int, timeout: float) -> None:
        assert self.state is not None
        self.wait_registered(list(self.state.brokers), timeout)
        everyone = sorted(self.state.brokers)
        wait_until(
            lambda: all(self.health(b).get("brokers") == everyone for b in everyone),
            timeout,
            "every broker to know every other",
            interval=0.2,
        )

    def _prepare_zookeeper(self, connect: str) -> None:
        from tidelog.controller import zookeeper

        with zookeeper.session(connect) as client:
            zookeeper.ensure_layout(client)

    def _configure_broker(
        self, broker_id: int, overrides: dict[str, str], port: int, admin_port: int, host: str
    ) -> BrokerProcess:
        directory = self.directory / f"broker-{broker_id}"
        directory.mkdir(parents=True, exist_ok=True)
        assert self.state is not None
        properties = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{host}:{port}",
            "admin.listener": f"{host}:{admin_port}",
            "log.dirs": str(directory / "logs"),
            "zookeeper.connect": self.state.zookeeper,
            # the tier every broker of the cluster shares, used once remote storage is enabled
            "remote.log.storage.uri": f"file://{(self.directory / 'remote').resolve()}",
            **overrides,
        }
        config = directory / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        return BrokerProcess(broker_id, port, admin_port, str(config), host=host)

    def down(self, timeout: float = 30.0, progress=print) -> None:
        # another object or command may have restarted brokers since this one read the state
        self.state = self._load() or self.state
        if self.state is None:
            if ClusterNetwork.load(self.directory) is None:
                raise ClusterError(f"no cluster in {self.directory}")
            self._remove_network(progress)  # made by an up killed before it started anything
            return
        for broker in self.state.brokers.values():
            if broker.process is not None and broker.process.running():
                progress(f"stopping broker {broker.broker_id}")
                broker.process.stop(timeout)
            elif broker.stale:
                progress(f"broker {broker.broker_id}: not running (stale record)")
            broker.process = None
            for pid in self._unrecorded(broker):
                progress(
                    f"stopping broker {broker.broker_id} (pid {pid}), which a command killed "
                    "before it recorded the broker left running"
                )
                stop_process(pid, timeout)
        zookeeper = self.state.zookeeper_process
        if zookeeper is not None:
            if zookeeper.running():
                progress("stopping ZooKeeper")
                zookeeper.stop(timeout)
            else:
                progress("ZooKeeper: not running (stale record)")
            self.state.zookeeper_process = None
        self._save()
        disks.release_all(self.directory, progress)
        try:
            self._remove_network(progress)
        except NetworkError as error:
            raise ClusterError(str(error)) from error

    # -- single brokers ------------------------------------------------------------------------

    def start_broker(
        self,
        broker_id: int,
        wait: bool = True,
        timeout: float = 60.0,
        launcher: Sequence[str] = (),
    ) -> None:
        """Starts the broker, its command line after ``launcher`` (a command that execs it,
        as fiu-run does) if one is given."""
        broker = self.broker(broker_id)
        if broker.alive:
            raise ClusterError(f"broker {broker_id} is already running (pid {broker.pid})")
        for pid in self._unrecorded(broker):
            # it holds the broker's ports, so the new one would fail, and it would outlive down
            stop_process(pid, timeout)
        directory = Path(broker.config).parent
        argv = [*launcher, sys.executable, "-m", "tidelog.cli", "broker", "--config", broker.config]
        if self.network is not None:
            argv = self.network.command(member_name(broker_id), argv)
        with open(directory / "broker.log", "ab") as log_file:
            process = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        broker.process = ProcessRecord.of(process.pid, broker.config)
        self._children[broker_id] = process
        self._save()
        if wait:
            self.wait_registered([broker_id], timeout)

    @staticmethod
    def _unrecorded(broker: BrokerProcess) -> list[int]:
        """Processes serving ``broker``'s configuration that the state does not record: a
        command killed between starting the broker and saving the state leaves one behind."""
        recorded = broker.pid
        return [pid for pid in processes_with(f"--config {broker.config}") if pid != recorded]

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM), waited for."""
        broker, process = self._running_broker(broker_id)
        stopped = process.stop(timeout)
        broker.process = None
        self._save()
        if not stopped:
            raise ClusterError(f"broker {broker_id} did not stop in {timeout} s and was killed")

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        """The broker's effective settings: its server.properties in the cluster directory."""
        from tidelog.config import read_properties

        return read_properties(self.broker(broker_id).config)

    def restart_broker(
        self,
        broker_id: int,
        overrides: dict[str, str] | None = None,
        timeout: float = 60.0,
        progress=print,
    ) -> None:
        """A clean shutdown (if running), ``overrides`` written into its server.properties (so
        the cluster directory keeps its effective settings), a start, waited for until it is
        registered. The new settings are checked first: a setting the broker would refuse
        leaves it running as it was."""
        from tidelog.config import broker_config

        settings = {**self.broker_settings(broker_id), **(overrides or {})}
        broker_config(settings)  # raises ConfigError naming the key
        broker = self.broker(broker_id)
        if broker.alive:
            progress(f"stopping broker {broker_id}")
            self.stop_broker(broker_id)
        elif broker.stale:
            broker.process = None
        config = Path(broker.config)
        replace_text(config, "".join(f"{key}={value}\n" for key, value in settings.items()))
        changed = ", ".join(f"{k}={v}" for k, v in (overrides or {}).items()) or "no changes"
        progress(f"starting broker {broker_id} ({changed})")
        self.start_broker(broker_id, timeout=timeout)

    def signal_broker(self, broker_id: int, signum: signal.Signals) -> None:
        broker, process = self._running_broker(broker_id)
        process.signal(signum)
        if signum in (signal.SIGKILL, signal.SIGTERM):
            wait_until(lambda: not broker.alive, 30, f"broker {broker_id} to exit")
            broker.process = None
            self._save()

    def _running_broker(self, broker_id: int) -> tuple[BrokerProcess, ProcessRecord]:
        broker = self.broker(broker_id)
        if broker.stale:
            broker.process = None
            self._save()
            raise ClusterError(f"broker {broker_id} is not running (stale record)")
        if broker.process is None or not broker.process.running():
            raise ClusterError(f"broker {broker_id} is not running")
        return broker, broker.process

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
        broker = self.broker(broker_id)
        url = f"http://{broker.host}:{broker.admin_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
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
                exit_status = self._exit_status(broker_id)
                if exit_status is not None:
                    log_path = self.broker(broker_id).log_path
                    tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                    raise ClusterError(
                        f"broker {broker_id} exited while starting ({exit_status}); {log_path} "
                        "ends with:\n" + "\n".join(tail)
                    )
            return all(self.is_registered(broker_id) for broker_id in broker_ids)

        wait_until(all_registered, timeout, f"brokers {broker_ids} to register", interval=0.3)

    def _exit_status(self, broker_id: int) -> str | None:
        """How a starting broker ended, or None while it runs."""
        child = self._children.get(broker_id)
        if child is not None:
            code = child.poll()
            if code is None:
                return None
            return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        broker = self.broker(broker_id)
        if broker.process is not None and not broker.alive:
            return "no longer running"
        return None

    def status(self) -> list[dict]:
        if self.state is None:
            raise ClusterError(f"no cluster in {self.directory}")
        registered = self.registered_brokers() if self.running else set()
        return [
            {
                "broker": broker.broker_id,
                "pid": broker.pid,
                "running": broker.alive,
                "stale": broker.stale,
                "registered": broker.broker_id in registered,
                "port": broker.port,
                "admin_port": broker.admin_port,
            }
            for broker in self.state.brokers.values()
        ]


@dataclass(frozen=True)
class PortPlan:
    """Where a cluster's processes listen: chosen free ports, or a fixed range from a base.
    Chosen ports are chosen together, so no two of one cluster's listeners get the same one
    (none is bound until its process starts)."""

    base: int | None
    brokers: int
    # without a base: each broker's two ports, in broker order, then an embedded ZooKeeper's
    chosen: tuple[int, ...] = ()

    @property
    def zookeeper(self) -> int | None:
        if self.base is None:
            return self.chosen[2 * self.brokers] if len(self.chosen) > 2 * self.brokers else None
        return self.base + 2 * self.brokers

    def broker(self, broker_id: int) -> tuple[int, int]:
        """(Kafka port, admin port) of a broker."""
        if self.base is None:
            return self.chosen[2 * broker_id - 2], self.chosen[2 * broker_id - 1]
        return self.base + broker_id - 1, self.base + self.brokers + broker_id - 1


def _port_plan(brokers: int, base_port: int | None) -> PortPlan:
    if base_port is None:
        return PortPlan(None, brokers, tuple(free_ports(2 * brokers + 1)))
    last = base_port + 2 * brokers
    if not base_port >= 1024 or last > 65535:
        raise ClusterError(
            f"--base-port {base_port}: the cluster needs ports {base_port}-{last}; "
            "allowed: a range within 1024-65535"
        )
    taken = [port for port in range(base_port, last + 1) if port_taken(port)]
    if taken:
        raise ClusterError(
            f"--base-port {base_port}: port {taken[0]} is in use; the cluster needs "
            f"{base_port}-{last}"
        )
    return PortPlan(base_port, brokers)
