"""A tidelog cluster deployed as a Docker Swarm stack (``tidelog cluster stack``), driven through
the engine of a manager node as a ``ComposeCluster`` is driven through Compose.

A ``SwarmCluster`` is found from the stack's name alone: its services carry the labels
``tidelog.broker-id`` and ``tidelog.zookeeper-id`` (tidelog.cluster.stack), each broker's ports
are published in host mode on the node labelled ``tidelog.broker-N`` (its address, as Swarm
knows it, is where clients reach it). What it keeps is in ``directory`` (``swarm.json``, the
brokers' settings as their containers wrote them, an upgrade's journal).

Faults, as a compose cluster's (``tidelog.cluster.engine``): a broker's task's container is
killed (``docker kill``; the service is then scaled to 0 so that Swarm does not replace it before
the scenario starts it again), paused, or cut off the stack's overlay network; a clean stop
scales the broker's service to 0, a start scales it back to 1 (a new task on the same volume).
These need the container on this engine: the faults are injected from the node that runs it.
A partition drops the packets on the task's overlay interface (netfaults, in its network
namespace); the other network faults act on it as on a compose cluster's containers.
A restart with new settings or another image is ``docker service update`` (``--env-add``,
``--image``), which stops the old task before the new one starts (the stack's update_config).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.cluster import netfaults
from tidelog.cluster.compose import kafka_variable
from tidelog.cluster.engine import EngineCluster, inspect_container, run_docker
from tidelog.cluster.gateway import DEFAULT_IDLE_EXIT_S, READY
from tidelog.cluster.local import ClusterError, wait_until
from tidelog.cluster.stack import BROKER_LABEL, NETWORK, ZOOKEEPER_LABEL

STATE_FILE = "swarm.json"
# a task's states once it is over (Swarm's task life cycle)
ENDED = ("complete", "shutdown", "failed", "rejected", "orphaned", "remove")
STACK_LABEL = "com.docker.stack.namespace"
GATEWAY_LABEL = "tidelog.gateway-of"
GATEWAY_PORT = 18080  # broker i's admin API at 18080+i inside a gateway's container


@dataclass(frozen=True)
class SwarmBroker:
    """One broker service: where its node publishes its listener, where this host reaches its
    admin API (this process's AdminGateway, on 127.0.0.1: the stack publishes no admin API), and
    ``alive`` as Swarm sees its task (a paused container's task runs, as a stopped process is
    alive)."""

    broker_id: int
    service: str
    host: str
    port: int
    gateway_port: Callable[[], int] = field(repr=False, compare=False)
    health: Callable[[], str] = field(repr=False, compare=False)

    @property
    def admin_host(self) -> str:
        return "127.0.0.1"

    @property
    def admin_port(self) -> int:
        return self.gateway_port()

    @property
    def alive(self) -> bool:
        return self.health() not in ("no task", *ENDED)


class AdminGateway:
    """A container of this process's on a stack's overlay network, running
    ``tidelog.cluster.gateway`` from the brokers' image: broker i's admin API (``broker-i:8080``
    on the overlay) at ``ports[i]`` on this host's 127.0.0.1, the only address Docker publishes
    it on. Started on first use, removed when this process exits (or by ``close``); one left by
    a killed process exits by itself once idle (``--rm``), and ``SwarmCluster.remove`` removes
    any of the stack's before ``docker stack rm``, whose network it would otherwise hold."""

    def __init__(self, stack: str, image: str, broker_ids: list[int]) -> None:
        self.name = f"tidelog-gateway-{stack}-{os.getpid()}"
        routes = [f"{GATEWAY_PORT + b}=broker-{b}:8080" for b in broker_ids]
        self.close()  # one this process left (a pid the engine saw before)
        run_docker(
            [
                *("docker", "run", "--detach", "--rm", "--name", self.name),
                *("--label", f"{GATEWAY_LABEL}={stack}", "--network", f"{stack}_{NETWORK}"),
                *(a for b in broker_ids for a in ("--publish", f"127.0.0.1::{GATEWAY_PORT + b}")),
                *("--entrypoint", "python", image, "-m", "tidelog.cluster.gateway", *routes),
            ],
            120,
        )
        self.ports: dict[int, int] = {}
        try:
            wait_until(
                lambda: READY in run_docker(["docker", "logs", self.name], 60),
                30,
                f"the admin gateway {self.name} to listen",
                interval=0.1,
            )
            for broker_id in broker_ids:
                published = run_docker(
                    ["docker", "port", self.name, str(GATEWAY_PORT + broker_id)], 60
                )
                self.ports[broker_id] = int(published.split()[0].rsplit(":", 1)[1])
        except BaseException:
            self.close()  # not left holding the stack's network
            raise
        self.used = time.monotonic()

    def port(self, broker_id: int) -> int:
        self.used = time.monotonic()
        return self.ports[broker_id]

    def gone(self) -> bool:
        """Whether its container may have exited by itself (unused for a third of its idle
        exit) and has: a long command that stopped asking for a while needs a new one."""
        if time.monotonic() - self.used < DEFAULT_IDLE_EXIT_S / 3:
            return False
        try:
            return not inspect_container(self.name)["State"]["Running"]
        except ClusterError:
            return True

    def close(self) -> None:
        with contextlib.suppress(ClusterError):
            run_docker(["docker", "rm", "--force", self.name], 60)


# this process's gateways, by stack: shared by every SwarmCluster of the stack it makes
_gateways: dict[str, AdminGateway] = {}


def close_gateways() -> None:
    """Removes this process's gateways (at exit; a test, before it removes its stack)."""
    while _gateways:
        _gateways.popitem()[1].close()


atexit.register(close_gateways)


@dataclass
class SwarmState:
    brokers: dict[int, SwarmBroker] = field(default_factory=dict)


def default_directory(stack: str) -> Path:
    return Path(tempfile.gettempdir()) / f"tidelog-swarm-{stack}"


class SwarmCluster(EngineCluster):
    """The stack ``stack`` as the engine of a manager node sees it."""

    def __init__(self, stack: str, directory: str | Path | None = None) -> None:
        self.stack = stack
        self.directory = Path(directory or default_directory(stack)).resolve()
        self._images: dict[int, str] = {}  # the image of a broker's next restart
        services = self._services()
        if not services:
            raise ClusterError(
                f"no stack {stack} in this swarm (`docker stack ls`; this engine must be a manager)"
            )
        nodes = self._node_addresses()
        brokers = {}
        self.zookeepers: list[str] = []
        for service in sorted(services, key=lambda s: s["Spec"]["Name"]):
            spec = service["Spec"]
            labels = spec.get("Labels", {})
            ports = {
                p["TargetPort"]: p["PublishedPort"]
                for p in spec.get("EndpointSpec", {}).get("Ports", [])
                if "PublishedPort" in p
            }
            if BROKER_LABEL in labels:
                broker_id = int(labels[BROKER_LABEL])
                if 8080 in ports:
                    raise ClusterError(
                        f"{spec['Name']} publishes its admin API (port 8080): it changes brokers, "
                        "so it must stay on the stack's network; write the stack again with "
                        "`tidelog cluster stack`"
                    )
                if not ports:
                    raise ClusterError(f"{spec['Name']} publishes no listener")
                brokers[broker_id] = SwarmBroker(
                    broker_id,
                    spec["Name"],
                    nodes.get(f"tidelog.broker-{broker_id}", "127.0.0.1"),
                    next(iter(ports.values())),
                    functools.partial(self.admin_port, broker_id),
                    functools.partial(self.health, broker_id),
                )
            elif ZOOKEEPER_LABEL in labels and 2181 in ports:
                host = nodes.get(f"tidelog.zookeeper-{labels[ZOOKEEPER_LABEL]}", "127.0.0.1")
                self.zookeepers.append(f"{host}:{ports[2181]}")
        if not brokers or not self.zookeepers:
            raise ClusterError(f"stack {stack} has no tidelog brokers or no published ZooKeeper")
        self.state = SwarmState(dict(sorted(brokers.items())))
        if directory is not None:  # a directory named: open_cluster finds the stack there again
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / STATE_FILE).write_text(json.dumps({"stack": stack}) + "\n")

    @classmethod
    def open(cls, directory: str | Path) -> SwarmCluster:
        """The stack whose state is in ``directory`` (it holds swarm.json)."""
        state = json.loads((Path(directory) / STATE_FILE).read_text())
        return cls(state["stack"], directory)

    @classmethod
    def deploy(
        cls,
        stack_file: str | Path,
        stack: str,
        directory: str | Path | None = None,
        timeout: float = 180.0,
        progress: Callable[[str], object] = print,
    ) -> SwarmCluster:
        """``docker stack deploy`` of the file (images as the nodes have them, no registry asked),
        then waits until every broker's task is healthy and registered in ZooKeeper."""
        progress(f"deploying stack {stack} from {stack_file}")
        run_docker(
            [
                *("docker", "stack", "deploy", "--detach=true", "--resolve-image", "never"),
                *("--compose-file", str(stack_file), stack),
            ],
            120,
        )
        found: list[SwarmCluster] = []

        def listed() -> bool:
            cluster = _found(stack, directory)
            found[:] = [cluster] if cluster is not None else []
            return bool(found)

        wait_until(listed, 60, f"stack {stack}'s services", interval=0.5)
        cluster = found[0]
        cluster.wait_healthy(timeout=timeout)
        cluster.wait_registered(cluster.broker_ids, timeout)
        cluster.link_log_dirs()
        return cluster

    # -- addresses -----------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.state.brokers.values())

    @property
    def zookeeper(self) -> str:
        return ",".join(self.zookeepers)

    @property
    def network(self) -> str:
        return f"{self.stack}_{NETWORK}"

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.state.brokers)

    def broker(self, broker_id: int) -> SwarmBroker:
        if broker_id not in self.state.brokers:
            raise ClusterError(f"no broker {broker_id} in stack {self.stack}")
        return self.state.brokers[broker_id]

    @property
    def running(self) -> bool:
        return bool(self._services())

    def admin_port(self, broker_id: int) -> int:
        """Where this host reaches the broker's admin API: its port on this process's gateway
        (started on first use, from the first broker's image)."""
        gateway = _gateways.get(self.stack)
        if gateway is None or broker_id not in gateway.ports or gateway.gone():
            if gateway is not None:
                gateway.close()
            image = self.running_image(self.broker_ids[0])
            gateway = _gateways[self.stack] = AdminGateway(self.stack, image, self.broker_ids)
        return gateway.port(broker_id)

    # -- the engine ----------------------------------------------------------------------------

    def _services(self) -> list[dict]:
        ids = run_docker(
            ["docker", "service", "ls", "--quiet", "--filter", f"label={STACK_LABEL}={self.stack}"],
            60,
        ).split()
        return json.loads(run_docker(["docker", "service", "inspect", *ids], 60)) if ids else []

    def _node_addresses(self) -> dict[str, str]:
        """Each ``tidelog.*`` node label set to true, to the address of its node."""
        ids = run_docker(["docker", "node", "ls", "--quiet"], 60).split()
        found = {}
        for node in json.loads(run_docker(["docker", "node", "inspect", *ids], 60)):
            address = node["Status"].get("Addr", "0.0.0.0")
            if address == "0.0.0.0" and "ManagerStatus" in node:  # a manager may say so of itself
                address = node["ManagerStatus"]["Addr"].rsplit(":", 1)[0]
            for label, value in node["Spec"].get("Labels", {}).items():
                if label.startswith("tidelog.") and value == "true":
                    found[label] = address
        return found

    def tasks(self, broker_id: int) -> list[dict]:
        """The broker service's tasks, newest first."""
        return _tasks(self.broker(broker_id).service)

    def current_task(self, broker_id: int) -> dict | None:
        """The task Swarm wants running (its newest), or None if the service is scaled to 0."""
        tasks = [t for t in self.tasks(broker_id) if t["DesiredState"] == "running"]
        return tasks[0] if tasks else None

    def health(self, broker_id: int) -> str:
        """The broker's task's state: ``running`` once its healthcheck passed (Swarm holds a
        task with a healthcheck in ``starting`` until then), or ``no task``."""
        task = self.current_task(broker_id)
        return task["Status"]["State"] if task else "no task"

    def broker_container(self, broker_id: int) -> str:
        """The container of the broker's newest task, which must run on this engine's node."""
        return self._container_of(self.broker(broker_id).service)

    def _container_of(self, service: str) -> str:
        tasks = _tasks(service)
        with_container = [
            t for t in tasks if t["Status"].get("ContainerStatus", {}).get("ContainerID")
        ]
        if not with_container:
            raise ClusterError(f"{service} has no container")
        task = with_container[0]
        here = run_docker(["docker", "info", "--format", "{{.Swarm.NodeID}}"], 60).strip()
        if task["NodeID"] != here:
            raise ClusterError(
                f"{service}'s task runs on node {task['NodeID']}, not this one: its "
                "container's faults are injected from that node's engine"
            )
        return task["Status"]["ContainerStatus"]["ContainerID"]

    @property
    def zookeeper_members(self) -> list[str]:
        return ["zookeeper", "zookeeper-2", "zookeeper-3"][: len(self.zookeepers)]

    def inspect_member(self, member: str) -> dict:
        """The container of the service's task (``zookeeper``, ``broker-N``) on this node."""
        return inspect_container(self._container_of(f"{self.stack}_{member}"))

    def running_image(self, broker_id: int) -> str:
        """The image the broker's service runs (its digest, if Swarm pinned one, left out)."""
        service = json.loads(
            run_docker(["docker", "service", "inspect", self.broker(broker_id).service], 60)
        )[0]
        return service["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"].split("@", 1)[0]

    def image_for_tag(self, tag: str) -> str:
        """The brokers' image repository (as the first broker's service names it) with ``tag``."""
        current = self.running_image(self.broker_ids[0])
        repository = current.rsplit(":", 1)[0] if ":" in current.rsplit("/", 1)[-1] else current
        return f"{repository}:{tag}"

    def image(self, broker_id: int) -> str:
        return self._images.get(broker_id) or self.running_image(broker_id)

    def set_image_tag(self, broker_id: int, tag: str) -> None:
        """Broker ``broker_id``'s service runs ``image_for_tag(tag)`` from its next restart on."""
        self.broker(broker_id)
        self._images[broker_id] = self.image_for_tag(tag)

    def wait_healthy(self, broker_ids: list[int] | None = None, timeout: float = 90) -> None:
        wanted = broker_ids or self.broker_ids
        last: dict[int, str] = {}

        def healthy() -> bool:
            last.update({b: self.health(b) for b in wanted})
            return all(state == "running" for state in last.values())

        try:
            wait_until(
                healthy, timeout, f"brokers {wanted} of stack {self.stack} to run", interval=0.5
            )
        except ClusterError as error:
            states = ", ".join(f"broker {b} {state}" for b, state in last.items())
            raise ClusterError(f"{error} ({states})") from None

    def link_log_dirs(self) -> None:
        """``directory/broker-{id}/logs`` for each broker whose log volume is on this node."""
        volumes = set(run_docker(["docker", "volume", "ls", "--quiet"], 60).split())
        for broker in self.state.brokers.values():
            volume = f"{self.stack}_broker-{broker.broker_id}"
            if volume in volumes:
                self.link_volume(broker.broker_id, volume)

    def _scale(self, broker_id: int, replicas: int) -> None:
        service = self.broker(broker_id).service
        run_docker(["docker", "service", "scale", "--detach", f"{service}={replicas}"], 60)

    def remove(self, timeout: float = 120.0, progress: Callable[[str], object] = print) -> None:
        """``docker stack rm``, then waits until no service, container or network of it is left
        (the engine removes them in the background). Its volumes stay, as Swarm leaves them."""
        progress(f"removing stack {self.stack}")
        gateway = _gateways.pop(self.stack, None)
        if gateway is not None:
            gateway.close()
        left = run_docker(
            ["docker", "ps", "--all", "--quiet", "--filter", f"label={GATEWAY_LABEL}={self.stack}"],
            60,
        ).split()
        if left:  # other commands' gateways hold the stack's network
            with contextlib.suppress(ClusterError):  # one may be removing itself meanwhile
                run_docker(["docker", "rm", "--force", *left], 60)
        run_docker(["docker", "stack", "rm", self.stack], 120)
        label = f"label={STACK_LABEL}={self.stack}"

        def gone() -> bool:
            return not any(
                run_docker([*command, "--quiet", "--filter", label], 60).split()
                for command in (
                    ["docker", "service", "ls"],
                    ["docker", "ps", "--all"],
                    ["docker", "network", "ls"],
                )
            )

        wait_until(gone, timeout, f"stack {self.stack}'s services, containers, network to go")

    # -- faults and restarts, as a ComposeCluster's ----------------------------------------------

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """A clean shutdown: the service scaled to 0 (SIGTERM, SIGKILL after its
        stop_grace_period); returns once its task is over."""
        self._scale(broker_id, 0)
        wait_until(
            lambda: all(t["Status"]["State"] in ENDED for t in self.tasks(broker_id)),
            timeout + 30,
            f"broker {broker_id}'s task to stop",
            interval=0.3,
        )

    def start_broker(self, broker_id: int, wait: bool = True, timeout: float = 90.0) -> None:
        """The service scaled back to 1: a new task on the broker's node and volume."""
        self._scale(broker_id, 1)
        if wait:
            self.wait_healthy([broker_id], timeout)
            self.wait_registered([broker_id], timeout)

    def signal_broker(self, broker_id: int, signum: signal.Signals) -> None:
        """As EngineCluster's; a broker killed stays down (its service scaled to 0, so Swarm
        does not replace the task) until ``start_broker``."""
        super().signal_broker(broker_id, signum)
        if signum in (signal.SIGKILL, signal.SIGTERM):
            self._scale(broker_id, 0)

    def restart_broker(
        self,
        broker_id: int,
        overrides: dict[str, str] | None = None,
        timeout: float = 90.0,
        progress: Callable[[str], object] = print,
    ) -> None:
        """``docker service update`` with ``overrides`` added to the broker's environment and
        the image ``image(broker_id)`` names: the old task stops (SIGTERM), a new one starts on
        the same volume; returns once it runs (its healthcheck passed) and is registered. The
        new settings are checked first: a setting the broker would refuse leaves it as it was."""
        from tidelog.config import broker_config

        service = self.broker(broker_id).service
        if overrides:
            broker_config({**self.broker_settings(broker_id), **overrides})  # ConfigError
        before = {t["ID"] for t in self.tasks(broker_id)}
        image = self.image(broker_id)
        changed = ", ".join(f"{k}={v}" for k, v in (overrides or {}).items()) or "no changes"
        progress(f"updating {service} to {image} ({changed})")
        environment = [
            f"--env-add={kafka_variable(key)}={value}" for key, value in (overrides or {}).items()
        ]
        force = [] if environment or image != self.running_image(broker_id) else ["--force"]
        run_docker(
            [
                *("docker", "service", "update", "--detach", "--no-resolve-image"),
                *("--image", image, *environment, *force, service),
            ],
            120,
        )

        def replaced() -> bool:
            task = self.current_task(broker_id)
            return (
                task is not None
                and task["ID"] not in before
                and (task["Status"]["State"] == "running")
            )

        started = time.monotonic()
        wait_until(replaced, timeout, f"broker {broker_id}'s new task to run", interval=0.5)
        self.wait_registered([broker_id], max(10.0, timeout - (time.monotonic() - started)))
        self._images.pop(broker_id, None)

    def partition_broker(self, broker_id: int) -> None:
        """Takes the broker off the stack's network: every packet on its overlay interface
        dropped, both ways (rules in its container's network namespace, netfaults.cut). Not
        ``docker network disconnect``: a task's container connected again is left out of
        Swarm's names (its service's name resolves to nothing), so the others never reach it
        again."""
        from tidelog.cluster.container_network import ContainerNetwork

        netfaults.cut(ContainerNetwork(self), self.broker_name(broker_id))

    def heal_broker(self, broker_id: int) -> None:
        from tidelog.cluster.container_network import ContainerNetwork

        netfaults.heal(ContainerNetwork(self))

    def status(self) -> list[dict]:
        """Each broker as Swarm and ZooKeeper see it."""
        registered = self.registered_brokers()
        rows = []
        for broker in self.state.brokers.values():
            task = self.current_task(broker.broker_id)
            rows.append(
                {
                    "broker": broker.broker_id,
                    "service": broker.service,
                    "image": self.running_image(broker.broker_id),
                    "state": task["Status"]["State"] if task else "no task",
                    "node": task["NodeID"][:12] if task else "-",
                    "registered": broker.broker_id in registered,
                    "host": broker.host,
                    "port": broker.port,
                    "admin_port": broker.admin_port,
                }
            )
        return rows


def _tasks(service: str) -> list[dict]:
    """The service's tasks as ``docker inspect`` gives them, newest first. Swarm prunes old
    tasks at any time (its task history limit): one gone between the listing and its
    inspection is left out."""
    ids = run_docker(["docker", "service", "ps", "--quiet", "--no-trunc", service], 60).split()
    if not ids:
        return []
    try:
        tasks = json.loads(run_docker(["docker", "inspect", "--type", "task", *ids], 60))
    except ClusterError as error:
        if not _task_gone(error):
            raise
        tasks = []
        for task in ids:
            try:
                tasks += json.loads(run_docker(["docker", "inspect", "--type", "task", task], 60))
            except ClusterError as missing:
                if not _task_gone(missing):
                    raise
    return sorted(tasks, key=lambda t: t["CreatedAt"], reverse=True)


def _task_gone(error: ClusterError) -> bool:
    """Whether ``docker inspect --type task`` failed on a task that no longer exists: the CLI
    says "No such task", the daemon "task ID not found" (seen when Swarm pruned one)."""
    text = str(error).lower()
    return "no such" in text or ("task " in text and " not found" in text)


def _found(stack: str, directory: str | Path | None) -> SwarmCluster | None:
    try:
        return SwarmCluster(stack, directory)
    except ClusterError:
        return None
