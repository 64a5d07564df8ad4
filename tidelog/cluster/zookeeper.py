"""An embedded ZooKeeper server: Debian's zookeeper package, started and stopped by tidelog."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tidelog.cluster.processes import ProcessRecord, stop_process

JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
JAR_DIRECTORY = "/usr/share/java"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperError(RuntimeError):
    pass


# Ports picked here are at or above this one: the ones below are left to fixed choices, which
# could otherwise find one taken by a cluster on picked ports (the README's --base-port
# examples at 19092-19698, compose.yaml's defaults at 12181, 18081-18083 and 19091-19093).
LOWEST_LISTENER_PORT = 20000
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now and below the kernel's ephemeral range. A listener restarted on a port
    from that range can find it taken as some outgoing connection's local port (seen: a
    broker restarted in a test failed with 'address already in use')."""
    first_ephemeral = 32768
    with contextlib.suppress(OSError, ValueError):
        first_ephemeral = int(EPHEMERAL_PORTS.read_text().split()[0])
    for _ in range(100):
        if first_ephemeral <= LOWEST_LISTENER_PORT:
            break
        port = random.randrange(LOWEST_LISTENER_PORT, first_ephemeral)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # no room below the ephemeral range: any free port
        probe.bind((host, 0))
        return probe.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different ports, each free now (as ``free_port``). Each is held bound until
    all are chosen, so one cluster's listeners are never planned onto the same port."""
    ports: list[int] = []
    with contextlib.ExitStack() as held:
        for _ in range(100 * count):
            if len(ports) == count:
                return ports
            port = free_port(host)
            probe = held.enter_context(socket.socket())
            try:
                probe.bind((host, port))
            except OSError:  # taken since free_port looked
                continue
            ports.append(port)
        if len(ports) == count:
            return ports
    raise ZooKeeperError(f"found {len(ports)} free ports of the {count} needed on {host}")


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener could not bind ``port`` now (connections of a listener that just
    closed, in TIME_WAIT, do not count: listeners bind with SO_REUSEADDR, as this probe)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(word.encode())
        chunks = []
        while chunk := connection.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def is_serving(host: str, port: int) -> bool:
    """``srvr`` answers with a Mode: line only once the server serves (``ruok`` answers before)."""
    try:
        return "Mode:" in four_letter_word(host, port, "srvr")
    except OSError:
        return False


def classpath() -> str:
    jars = [path for path in JARS if os.path.exists(path)]
    if len(jars) < len(JARS):
        raise ZooKeeperError(
            "ZooKeeper is not installed: run 'make install' (it installs Debian's zookeeper "
            "package) or give --zookeeper host:port"
        )
    # The server also needs its own dependencies, which Debian ships beside it.
    extra = [
        str(path)
        for path in Path(JAR_DIRECTORY).glob("*.jar")
        if path.name.startswith(("zookeeper-jute", "netty-", "slf4j-api", "metrics-core", "snappy"))
    ]
    return ":".join([*jars, *extra])


class EmbeddedZooKeeper:
    """A standalone ZooKeeper under ``directory`` (zoo.cfg, data, zookeeper.log), on ``host``
    (127.0.0.1 unless given). ``launch`` wraps its command line (``ip netns exec NAME``: a
    command that execs the server, so that the process started is the server)."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        host: str = "127.0.0.1",
        launch: Callable[[list[str]], list[str]] = lambda argv: argv,
    ) -> None:
        self.directory = Path(directory)
        self.host = host
        self.port = port or free_port(host)
        self.launch = launch
        self.process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> Path:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=*",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout: float = 30.0) -> ProcessRecord:
        """Starts the server and waits until it serves; returns its process."""
        config = self.write_config()
        log_file = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            self.launch(["java", "-Xmx256m", "-cp", classpath(), MAIN_CLASS, str(config)]),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {self.process.returncode}; see "
                    f"{self.directory / 'zookeeper.log'}"
                )
            if is_serving(self.host, self.port):
                return ProcessRecord.of(self.process.pid, str(config))
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperError(f"ZooKeeper did not serve on {self.connect_string} in {timeout} s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is not None:
            stop_process(self.process.pid, timeout)
            self.process.wait()
            self.process = None
