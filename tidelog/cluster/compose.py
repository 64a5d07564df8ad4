"""A tidelog cluster run by Docker Compose from ``compose.yaml``, and faults through the engine.

A ``ComposeCluster`` is one compose project: ``docker compose -f compose.yaml --env-file
DIR/compose.env``. The env file names the project and the host ports (every published port is on
127.0.0.1), so several clusters can run side by side, and ``DIR/broker.env`` holds settings every
broker starts with (KAFKA_* variables). Brokers are the services ``broker-{id}``.
It offers what the scenario machinery (``tidelog.cluster.faults``, ``delivery``) uses of a
``LocalCluster``: ``bootstrap_servers``, ``zookeeper``, ``state.brokers``,
``broker(id).admin_port``, ``stop_broker``, ``start_broker``, ``signal_broker`` and a
``directory`` whose ``broker-{id}/logs`` are the brokers' log dirs (links to their volumes,
readable by root), each done with the engine: SIGKILL is ``docker kill -s KILL``, SIGSTOP and
SIGCONT are ``docker pause`` and ``unpause``, a clean stop is ``docker stop``;
``partition_broker`` and ``heal_broker`` take a broker off the compose network and put it back
(``tidelog.cluster.engine``, shared with a Swarm stack's cluster).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.cluster.engine import (
    CONTAINER_LOG_DIR,
    EFFECTIVE_CONFIG,
    NO_ENGINE,
    EngineCluster,
    run_docker,
)
from tidelog.cluster.local import ClusterError, wait_until
from tidelog.cluster.zookeeper import free_ports

BROKERS = (1, 2, 3)
ENV_FILE = "compose.env"
BROKER_SETTINGS_FILE = "broker.env"
ENSEMBLE_SETTINGS_FILE = "docker/ensemble.env"  # beside compose.yaml
REMOTE_TIER_SETTINGS_FILE = "docker/remote.env"  # beside compose.yaml
__all__ = ["CONTAINER_LOG_DIR", "EFFECTIVE_CONFIG", "NO_ENGINE", "ComposeCluster", "run_docker"]


def kafka_variable(key: str) -> str:
    """KAFKA_LOG_SEGMENT_BYTES of log.segment.bytes: a broker setting as tidelog's images take it
    from the environment (Confluent's spelling: '.' is '_', '_' is '__', '-' is '___')."""
    spelled = key.replace("-", "\0").replace("_", "__").replace(".", "_").replace("\0", "___")
    return "KAFKA_" + spelled.upper()


def setting_of(variable: str) -> str:
    """log.segment.bytes of KAFKA_LOG_SEGMENT_BYTES (the inverse of ``kafka_variable``)."""
    name = variable.removeprefix("KAFKA_").lower()
    return re.sub("_+", lambda run: {1: ".", 2: "_"}.get(len(run[0]), "-"), name)


def compose_environment(project: str, ports: dict[str, int]) -> dict[str, str]:
    """What compose.yaml reads: the project's name, its host ports, and the images' tag when
    TIDELOG_TAG names one (scripts/docker-engine.sh builds them under it)."""
    tag = {"TIDELOG_TAG": os.environ["TIDELOG_TAG"]} if "TIDELOG_TAG" in os.environ else {}
    return {
        "COMPOSE_PROJECT_NAME": project,
        **tag,
        **{key: str(value) for key, value in ports.items()},
    }


@dataclass(frozen=True)
class ComposeBroker:
    """One broker service: its host ports, and ``alive`` as the engine sees its container."""

    broker_id: int
    port: int
    admin_port: int
    health: Callable[[], str] = field(repr=False, compare=False)

    @property
    def service(self) -> str:
        return f"broker-{self.broker_id}"

    @property
    def host(self) -> str:
        """Where the host reaches its published ports."""
        return "127.0.0.1"

    @property
    def admin_host(self) -> str:
        return "127.0.0.1"

    @property
    def alive(self) -> bool:
        """Its container runs (a paused one too, as a stopped process is alive)."""
        return self.health() not in ("created", "exited", "dead", "no container")


@dataclass
class ComposeState:
    brokers: dict[int, ComposeBroker] = field(default_factory=dict)


def host_ports() -> dict[str, int]:
    """Host ports for one cluster, free now (compose.yaml's defaults are 19091-19093 etc.)."""
    names = ["TIDELOG_ZOOKEEPER_PORT"]
    for broker_id in BROKERS:
        names += [f"TIDELOG_BROKER_{broker_id}_PORT", f"TIDELOG_BROKER_{broker_id}_ADMIN_PORT"]
    return dict(zip(names, free_ports(len(names)), strict=True))


# a container's states that it does not leave by itself (no restart policy)
ENDED_STATES = ("exited", "dead")


class ComposeCluster(EngineCluster):
    """The compose project whose settings are in ``directory/compose.env``.

    ``create`` writes that file; every other method only reads it, so a ComposeCluster can be
    made again for a running project from its directory."""

    def __init__(self, directory: str | Path, compose_file: str | Path | None = None) -> None:
        self.directory = Path(directory).resolve()
        env_path = self.directory / ENV_FILE
        if not env_path.exists():
            raise ClusterError(f"no compose cluster in {self.directory} (no {ENV_FILE})")
        self.environment = _read_environment(env_path)
        # the compose file given, else the one the cluster was created with
        self.compose_file = Path(
            compose_file or self.environment.get("TIDELOG_COMPOSE_FILE", "compose.yaml")
        ).resolve()
        self.project = self.environment["COMPOSE_PROJECT_NAME"]
        self.state = ComposeState(
            {
                broker_id: ComposeBroker(
                    broker_id,
                    int(self.environment[f"TIDELOG_BROKER_{broker_id}_PORT"]),
                    int(self.environment[f"TIDELOG_BROKER_{broker_id}_ADMIN_PORT"]),
                    functools.partial(self.health, broker_id),
                )
                for broker_id in BROKERS
            }
        )

    @classmethod
    def create(
        cls,
        directory: str | Path,
        compose_file: str | Path,
        project: str,
        ports: dict[str, int] | None = None,
        settings: dict[str, str] | None = None,
        ensemble: bool = False,
        remote_tier: bool = False,
    ) -> ComposeCluster:
        """Writes ``directory/compose.env`` for a project with these host ports (free ones by
        default) and broker settings, on three ZooKeepers if ``ensemble`` (the settings of
        docker/ensemble.env), with the remote tier on a shared volume if ``remote_tier`` (those
        of docker/remote.env); starts nothing."""
        directory = Path(directory).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        root = Path(compose_file).resolve().parent
        environment = compose_environment(project, ports or host_ports())
        environment["TIDELOG_COMPOSE_FILE"] = str(Path(compose_file).resolve())
        environment["TIDELOG_BROKER_SETTINGS"] = str(directory / BROKER_SETTINGS_FILE)
        for broker_id in BROKERS:  # one file each, written by restart_broker
            path = directory / f"broker-{broker_id}.env"
            environment[f"TIDELOG_BROKER_{broker_id}_SETTINGS"] = str(path)
        if ensemble:
            environment |= _read_environment(root / ENSEMBLE_SETTINGS_FILE)
        if remote_tier:
            environment["TIDELOG_REMOTE_TIER_SETTINGS"] = str(root / REMOTE_TIER_SETTINGS_FILE)
        _write_environment(directory / ENV_FILE, environment)
        cluster = cls(directory, compose_file)
        cluster.set_broker_settings(settings or {})
        return cluster

    def set_broker_settings(self, settings: dict[str, str]) -> None:
        """Settings every broker starts with from now on, under Kafka's names (the broker
        refuses a wrong one at start, naming it)."""
        variables = {kafka_variable(key): value for key, value in settings.items()}
        _write_environment(Path(self.environment["TIDELOG_BROKER_SETTINGS"]), variables)

    def _broker_variables(self, broker_id: int) -> dict[str, str]:
        path = Path(self.environment[f"TIDELOG_BROKER_{broker_id}_SETTINGS"])
        return _read_environment(path) if path.exists() else {}

    def broker_overrides(self, broker_id: int) -> dict[str, str]:
        """This broker's own settings (Kafka's names), which win over every broker's."""
        return {
            setting_of(variable): value
            for variable, value in self._broker_variables(broker_id).items()
            if variable.startswith("KAFKA_")
        }

    def set_broker_overrides(self, broker_id: int, settings: dict[str, str]) -> None:
        """Settings broker ``broker_id`` starts with from its next (re)creation on (its fault
        environment is kept)."""
        variables = {kafka_variable(key): value for key, value in settings.items()}
        path = Path(self.environment[f"TIDELOG_BROKER_{broker_id}_SETTINGS"])
        _write_environment(path, {**variables, **self.fault_environment(broker_id)})

    def fault_environment(self, broker_id: int) -> dict[str, str]:
        """The entry point's variables a fault set for this broker (TIDELOG_FIU_CONTROL,
        TIDELOG_WAIT_FOR_LOG_DIR_MOUNT: docker/entrypoint.py), in its own env file."""
        return {
            variable: value
            for variable, value in self._broker_variables(broker_id).items()
            if variable.startswith("TIDELOG_")
        }

    def set_fault_environment(self, broker_id: int, variables: dict[str, str]) -> None:
        """The broker's fault variables from its next (re)creation on ({}: none); its own
        settings are kept."""
        wrong = [variable for variable in variables if not variable.startswith("TIDELOG_")]
        if wrong:
            raise ClusterError(f"fault variables are TIDELOG_*, not {', '.join(wrong)}")
        path = Path(self.environment[f"TIDELOG_BROKER_{broker_id}_SETTINGS"])
        kept = {
            variable: value
            for variable, value in self._broker_variables(broker_id).items()
            if not variable.startswith("TIDELOG_")
        }
        _write_environment(path, {**kept, **variables})

    def image(self, broker_id: int) -> str:
        """The image the broker's service runs from its next (re)creation on."""
        tag = self.environment.get(
            f"TIDELOG_BROKER_{broker_id}_TAG", self.environment.get("TIDELOG_TAG", "dev")
        )
        return f"tidelog:{tag}"

    def image_for_tag(self, tag: str) -> str:
        return f"tidelog:{tag}"

    def set_image_tag(self, broker_id: int, tag: str) -> None:
        """Broker ``broker_id`` runs ``tidelog:{tag}`` from its next (re)creation on."""
        self.broker(broker_id)
        self.environment[f"TIDELOG_BROKER_{broker_id}_TAG"] = tag
        _write_environment(self.env_file, self.environment)

    # -- addresses -----------------------------------------------------------------------------

    @property
    def env_file(self) -> Path:
        return self.directory / ENV_FILE

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.state.brokers.values())

    @property
    def zookeeper(self) -> str:
        return f"127.0.0.1:{self.environment['TIDELOG_ZOOKEEPER_PORT']}"

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.state.brokers)

    def broker(self, broker_id: int) -> ComposeBroker:
        if broker_id not in self.state.brokers:
            raise ClusterError(f"no broker {broker_id} in compose project {self.project}")
        return self.state.brokers[broker_id]

    # -- the engine ----------------------------------------------------------------------------

    def compose_command(self) -> list[str]:
        return ["docker", "compose", "-f", str(self.compose_file), "--env-file", str(self.env_file)]

    def compose(self, *arguments: str, timeout: float = 600) -> str:
        return run_docker([*self.compose_command(), *arguments], timeout)

    @property
    def running(self) -> bool:
        """Whether any container of the project runs."""
        return bool(self.compose("ps", "--quiet").split())

    def up(
        self,
        brokers: int = len(BROKERS),
        *,
        overrides: dict[str, str] | None = None,
        progress: Callable[[str], object] = print,
        build: bool = True,
    ) -> None:
        """Starts the project with these broker settings (Kafka's names) and returns once
        every service is healthy. As LocalCluster.up, for the scenario machinery; compose.yaml
        has three brokers."""
        if brokers != len(BROKERS):
            raise ClusterError(
                f"compose.yaml runs {len(BROKERS)} brokers, not {brokers}; allowed: {len(BROKERS)}"
            )
        if overrides:
            self.set_broker_settings(overrides)
        progress(f"starting compose project {self.project}")
        self.compose("up", "--wait", *(["--build"] if build else []))
        self.link_log_dirs()

    def down(self, progress: Callable[[str], object] = print) -> None:
        """Stops the project and removes its containers, network and volumes."""
        from tidelog.cluster import disks

        progress(f"removing compose project {self.project}")
        self.compose("down", "--volumes", "--timeout", "30")
        # the containers' mounts of small disks went with them: their images go too, and the
        # variables of faults in place, which a cluster started again here would start with
        disks.release_volume_disks(self.directory, progress)
        for broker_id in self.broker_ids:
            self.set_fault_environment(broker_id, {})

    def container(self, service: str) -> str:
        """The id of the service's container (running or not)."""
        found = self.compose("ps", "--all", "--quiet", service).split()
        if not found:
            raise ClusterError(f"compose project {self.project} has no container for {service}")
        return found[0]

    def inspect(self, service: str) -> dict:
        return json.loads(run_docker(["docker", "inspect", self.container(service)], 60))[0]

    def health(self, broker_id: int) -> str:
        """The engine's view of a broker: healthy, unhealthy, starting, or its state if it is
        not running (exited, paused)."""
        return self.healths().get(self.broker(broker_id).service, "no container")

    def healths(self) -> dict[str, str]:
        """``health`` of every service with a container, from one ``docker compose ps``: a wait
        polls this, and one call per poll instead of two per broker keeps the polling from
        competing for the CPU with the brokers it waits for."""
        found = {}
        for line in self.compose("ps", "--all", "--format", "json", timeout=60).splitlines():
            if line.strip():
                container = json.loads(line)
                running = container["State"] == "running"
                found[container["Service"]] = (
                    (container["Health"] or "running") if running else container["State"]
                )
        return found

    def wait_healthy(self, broker_ids: list[int] | None = None, timeout: float = 90) -> None:
        """Returns once the brokers' healthchecks pass; a broker whose container has exited
        (compose.yaml restarts none) is an error at once, not after ``timeout``."""
        wanted = broker_ids or list(self.state.brokers)
        services = [self.broker(b).service for b in wanted]
        last: dict[str, str] = {}

        def healthy() -> bool:
            last.update(self.healths())
            ended = [s for s in services if last.get(s) in ENDED_STATES]
            if ended:
                raise ClusterError(
                    f"broker container {', '.join(ended)} of compose project {self.project} "
                    "ended while it was waited for to be healthy"
                )
            return all(last.get(service) == "healthy" for service in services)

        try:
            wait_until(
                healthy,
                timeout,
                f"brokers {wanted} of compose project {self.project} to be healthy",
                interval=0.5,
            )
        except ClusterError as error:
            states = ", ".join(f"{service} {last.get(service)}" for service in services)
            raise ClusterError(f"{error} ({states})") from None

    def link_log_dirs(self) -> None:
        """``directory/broker-{id}/logs``: a link to the broker's log volume on this host."""
        for broker in self.state.brokers.values():
            self.link_volume(broker.broker_id, f"{self.project}_{broker.service}")

    # -- faults, as a LocalCluster's (see tidelog.cluster.faults) ---------------------------------

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """A clean shutdown: ``docker stop`` (SIGTERM, SIGKILL after ``timeout``)."""
        self.compose("stop", "--timeout", str(int(timeout)), self.broker(broker_id).service)

    def start_broker(self, broker_id: int, wait: bool = True, timeout: float = 90.0) -> None:
        self.compose("start", self.broker(broker_id).service)
        if wait:
            self.wait_healthy([broker_id], timeout)

    def restart_broker(
        self,
        broker_id: int,
        overrides: dict[str, str] | None = None,
        timeout: float = 90.0,
        progress: Callable[[str], object] = print,
    ) -> None:
        """A clean shutdown (``docker stop``: SIGTERM, SIGKILL after the service's
        stop_grace_period), then the service recreated on the same log volume, from the image
        ``image(broker_id)`` names and with ``overrides`` added to the broker's own settings;
        returns once its healthcheck passes. The new settings are checked first: a setting the
        broker would refuse leaves it running as it was."""
        from tidelog.config import broker_config

        service = self.broker(broker_id).service
        if overrides:
            broker_config({**self.broker_settings(broker_id), **overrides})  # ConfigError
            self.set_broker_overrides(broker_id, {**self.broker_overrides(broker_id), **overrides})
        changed = ", ".join(f"{k}={v}" for k, v in (overrides or {}).items()) or "no changes"
        progress(f"recreating {service} from {self.image(broker_id)} ({changed})")
        self.recreate_broker(broker_id, timeout=timeout)

    def recreate_broker(self, broker_id: int, wait: bool = True, timeout: float = 90.0) -> None:
        """The broker's container replaced by a new one from its service's current image and
        env files, on the same log volume (a running one is stopped cleanly first); with
        ``wait``, returns once its healthcheck passes. Not ``up --wait``, which gives up at the
        first unhealthy report: a broker still starting once the image's start period is over
        (a loaded machine, a broker under libfiu's preload) is reported unhealthy, and healthy
        a few seconds later. A broker not healthy in ``timeout`` is an error that carries the
        last lines its container wrote."""
        self.compose(
            *("up", "--detach", "--no-deps", "--no-build", "--pull", "never", "--force-recreate"),
            self.broker(broker_id).service,
            timeout=timeout + 60,
        )
        if not wait:
            return
        try:
            self.wait_healthy([broker_id], timeout)
        except ClusterError as error:
            try:
                written = self.broker_log(broker_id).splitlines()[-20:]
            except ClusterError:
                written = []
            raise ClusterError("\n".join([str(error), *written])) from None

    def broker_container(self, broker_id: int) -> str:
        return self.container(self.broker(broker_id).service)

    def has_container(self, broker_id: int) -> bool:
        """Whether the broker's service has a container, running or not (none once the project
        is down)."""
        return self.broker(broker_id).service in self.healths()

    def exec_command(self, broker_id: int, argv: list[str]) -> list[str]:
        """``argv`` run in the broker's container (as the image's user), as a command line."""
        return ["docker", "exec", self.broker_container(broker_id), *argv]

    def broker_log(self, broker_id: int) -> str:
        """What the broker's container wrote (its output and errors), since it was created."""
        container = self.broker_container(broker_id)
        done = subprocess.run(
            ["docker", "logs", container], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise ClusterError(f"docker logs {container}: {done.stderr.strip()}")
        return done.stdout + done.stderr

    def broker_pid(self, broker_id: int) -> int:
        """The host's process id of the broker container's first process (0: not running)."""
        return int(self.inspect(self.broker(broker_id).service)["State"]["Pid"])

    @property
    def zookeeper_members(self) -> list[str]:
        profiles = self.environment.get("COMPOSE_PROFILES", "").split(",")
        ensemble = "ensemble" in profiles
        return ["zookeeper", "zookeeper-2", "zookeeper-3"] if ensemble else ["zookeeper"]

    def inspect_member(self, member: str) -> dict:
        return self.inspect(member)

    def running_image(self, broker_id: int) -> str:
        """The image the broker's container runs now."""
        return self.inspect(self.broker(broker_id).service)["Config"]["Image"]

    def status(self) -> list[dict]:
        """Each broker as the engine and ZooKeeper see it."""
        registered = self.registered_brokers()
        return [
            {
                "broker": broker.broker_id,
                "service": broker.service,
                "image": self.inspect(broker.service)["Config"]["Image"],
                "state": self.health(broker.broker_id),
                "registered": broker.broker_id in registered,
                "port": broker.port,
                "admin_port": broker.admin_port,
            }
            for broker in self.state.brokers.values()
        ]


def _read_environment(path: Path) -> dict[str, str]:
    """KEY=value lines of an env file; # comments and blank lines skipped."""
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def _write_environment(path: Path, environment: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in environment.items()))
