"""The seam between an upgrade and the brokers it rolls: what a rolling restart needs of a cluster,
whether its brokers are processes on this host, services of a compose project or of a Swarm stack.

A ``RollableCluster`` restarts one broker at a time with new settings: a ``LocalCluster`` stops
the process (SIGTERM), rewrites its server.properties and starts it again; a ``ComposeCluster``
writes the broker's settings file and recreates its service (``docker stop``'s SIGTERM, then a
new container on the same log volume), with another image if one is named (``set_image_tag``);
a ``SwarmCluster`` updates its service (``docker service update --env-add --image``).
Either way ``restart_broker`` returns once the broker serves again; the upgrade's own checks
(every replica back in its ISR) come after it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tidelog.cluster.compose import ENV_FILE, ComposeCluster
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.swarm import STATE_FILE as SWARM_STATE_FILE
from tidelog.cluster.swarm import SwarmCluster


class RollableCluster(Protocol):
    """A cluster an upgrade can roll. ``broker_settings`` are a broker's effective settings under
    Kafka's names, with ``log.dirs`` as this host sees them (the upgrade reads segment files);
    ``restart_broker`` checks the new settings first, so a setting the broker would refuse
    leaves it running as it was."""

    directory: Path

    @property
    def zookeeper(self) -> str: ...

    @property
    def broker_ids(self) -> list[int]: ...

    def broker_settings(self, broker_id: int) -> dict[str, str]: ...

    def restart_broker(
        self,
        broker_id: int,
        overrides: dict[str, str] | None = None,
        timeout: float = 60.0,
        progress: Callable[[str], object] = print,
    ) -> None: ...

    def status(self) -> list[dict]: ...


def open_cluster(directory: str | Path) -> LocalCluster | ComposeCluster | SwarmCluster:
    """The cluster whose state is in ``directory``: a compose project if ``tidelog scenario
    --compose`` or ``ComposeCluster.create`` made it (it holds compose.env), a Swarm stack if a
    SwarmCluster was opened there (swarm.json, ``--swarm STACK --dir DIR``), else local
    processes (``tidelog cluster up``)."""
    if (Path(directory) / ENV_FILE).exists():
        return ComposeCluster(directory)
    if (Path(directory) / SWARM_STATE_FILE).exists():
        return SwarmCluster.open(directory)
    return LocalCluster(directory)
