"""What a cluster of containers does through the Docker engine, whoever runs the containers: a
compose project (``ComposeCluster``) or a Swarm stack (``SwarmCluster``).

``EngineCluster`` holds the faults the scenario machinery (``tidelog.cluster.faults``) injects
into a broker's container and the reads an upgrade makes of it, written once over what each
kind says of itself: ``broker_container`` (the container of a broker, as compose or Swarm
finds it), ``network`` (where the brokers and ZooKeeper talk) and ``wait_registered``. SIGKILL
and SIGTERM are ``docker kill``, SIGSTOP and SIGCONT ``docker pause`` and ``unpause``, a
partition ``docker network disconnect`` and ``connect``.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import tarfile
from pathlib import Path

from tidelog.cluster.local import ClusterError, wait_until
from tidelog.reach import Unreachable

# where the images keep a broker's effective settings and its log dir (docker/entrypoint.py)
EFFECTIVE_CONFIG = "/var/lib/tidelog/server.properties"
CONTAINER_LOG_DIR = "/var/lib/tidelog/logs"


class EngineCluster:
    """The faults and reads shared by the clusters whose brokers are containers."""

    directory: Path

    @property
    def network(self) -> str:
        raise NotImplementedError

    def broker_container(self, broker_id: int) -> str:
        """The id of the broker's container (running or not) on this engine."""
        raise NotImplementedError

    @property
    def zookeeper_members(self) -> list[str]:
        """ZooKeeper's services: ``zookeeper``, or the ensemble's three."""
        raise NotImplementedError

    def inspect_member(self, member: str) -> dict:
        """``docker inspect`` of the container of a service (``zookeeper``, ``broker-N``)."""
        raise NotImplementedError

    def broker_name(self, broker_id: int) -> str:
        """The name the broker has on the network (its INTERNAL listener's host)."""
        return f"broker-{broker_id}"

    def wait_registered(self, broker_ids: list[int], timeout: float = 60.0) -> None:
        """Waits until every one of ``broker_ids`` is registered in ZooKeeper."""
        wait_until(
            lambda: set(broker_ids) <= self.registered_brokers(),
            timeout,
            f"brokers {broker_ids} to register",
            interval=0.3,
        )

    @property
    def zookeeper(self) -> str:
        raise NotImplementedError

    def registered_brokers(self) -> set[int]:
        """The brokers registered in ZooKeeper now. A container's health lags behind: a broker
        put back on the network answers /health until it learns that its session expired."""
        from tidelog.controller import zookeeper

        with zookeeper.session(self.zookeeper) as client:
            return set(zookeeper.read_brokers(client))

    # -- faults ----------------------------------------------------------------------------------

    def signal_broker(self, broker_id: int, signum: signal.Signals) -> None:
        """SIGKILL and SIGTERM through ``docker kill``, waiting until the container exited;
        SIGSTOP and SIGCONT as ``docker pause`` and ``unpause`` (the freezer cgroup stops every
        process of the container)."""
        container = self.broker_container(broker_id)
        if signum == signal.SIGSTOP:
            # runc can fail to freeze the cgroup of a busy container ("unable to freeze", seen
            # under load); it is asked again until the deadline
            wait_until(
                lambda: _paused(container),
                60,
                f"broker {broker_id}'s container to pause",
                interval=0.5,
            )
        elif signum == signal.SIGCONT:
            run_docker(["docker", "unpause", container], 60)
        else:
            run_docker(
                ["docker", "kill", "--signal", signum.name.removeprefix("SIG"), container], 60
            )
            if signum in (signal.SIGKILL, signal.SIGTERM):
                self._wait_exited(broker_id, container)

    def kill_paused(self, broker_id: int) -> None:
        """Kills a paused broker without letting it run again: SIGKILL to its container's first
        process while the freezer holds it (the signal waits in the kernel), then unpause,
        which delivers it before any of the broker's own code runs (``docker kill`` refuses a
        paused container)."""
        container = self.broker_container(broker_id)
        pid = inspect_container(container)["State"]["Pid"]
        if pid:
            os.kill(pid, signal.SIGKILL)
        run_docker(["docker", "unpause", container], 60)
        self._wait_exited(broker_id, container)

    def _wait_exited(self, broker_id: int, container: str) -> None:
        wait_until(
            lambda: inspect_container(container)["State"]["Status"] in ("exited", "dead"),
            60,
            f"broker {broker_id}'s container to exit",
            interval=0.2,
        )

    def partition_broker(self, broker_id: int) -> None:
        """Takes the broker off the cluster's network: it reaches neither ZooKeeper nor the
        other brokers, and they do not reach it."""
        container = self.broker_container(broker_id)
        run_docker(["docker", "network", "disconnect", self.network, container], 60)

    def heal_broker(self, broker_id: int) -> None:
        """Puts the broker back on the cluster's network under its name."""
        run_docker(
            [
                *("docker", "network", "connect"),
                *("--alias", self.broker_name(broker_id)),
                self.network,
                self.broker_container(broker_id),
            ],
            60,
        )

    # -- reads -----------------------------------------------------------------------------------

    def broker_settings(self, broker_id: int) -> dict[str, str]:
        """The settings the broker's container started with (the server.properties its entry
        point wrote, copied to ``directory/broker-{id}/server.properties``), with ``log.dirs``
        as this host sees the log volume (link_log_dirs)."""
        from tidelog.config import read_properties

        name = self.broker_name(broker_id)
        archive = subprocess.run(
            ["docker", "cp", f"{self.broker_container(broker_id)}:{EFFECTIVE_CONFIG}", "-"],
            capture_output=True,
            timeout=60,
        )
        if archive.returncode != 0:
            raise ClusterError(f"{name}'s settings: {archive.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            member = tar.extractfile(Path(EFFECTIVE_CONFIG).name)
            assert member is not None, "docker cp archives the file under its own name"
            text = member.read().decode()
        copy = self.directory / name / "server.properties"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
        settings = read_properties(copy)
        if settings.get("log.dirs") == CONTAINER_LOG_DIR:
            settings["log.dirs"] = str(self.directory / name / "logs")
        return settings

    def log_dirs(self, broker_id: int) -> list[Path]:
        """The broker's log dir on this host: its volume (link_log_dirs)."""
        return [(self.directory / self.broker_name(broker_id) / "logs").resolve()]

    def link_volume(self, broker_id: int, volume: str) -> None:
        """``directory/broker-{id}/logs``: a link to the broker's log volume on this host."""
        mountpoint = json.loads(run_docker(["docker", "volume", "inspect", volume], 60))[0][
            "Mountpoint"
        ]
        link = self.directory / self.broker_name(broker_id) / "logs"
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(mountpoint)


def inspect_container(container: str) -> dict:
    return json.loads(run_docker(["docker", "inspect", container], 60))[0]


def _paused(container: str) -> bool:
    """Pauses the container; False if the freezer could not freeze it this time."""
    try:
        run_docker(["docker", "pause", container], 60)
    except ClusterError as error:
        if "unable to freeze" not in str(error):
            raise
        return False
    return True


# what the docker CLI (and its compose plugin) says when no engine takes its connection
NO_ENGINE = re.compile(r"Cannot connect to the Docker daemon at (?P<address>\S+?)\.? Is the docker")


def run_docker(command: list[str], timeout: float) -> str:
    """The output of a docker (or docker compose) command; ClusterError if it fails,
    Unreachable if no engine answers it."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ClusterError(
            f"{command[0]}: not found; scripts/docker-engine.sh installs it"
        ) from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{' '.join(command)}: no answer in {timeout} s") from None
    if done.returncode != 0:
        engine = NO_ENGINE.search(done.stderr)
        if engine is not None:
            raise Unreachable("the Docker engine", engine["address"], "no connection")
        raise ClusterError(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout
