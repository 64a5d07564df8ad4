"""The disk faults of a local cluster on compose.yaml's cluster: disk_errors (libfiu's POSIX
preload in the broker's container, switched on with fiu-ctrl through docker exec). It runs
through the replication scenario with its delivery verdict, is seen to halt the broker while it
holds, and leaves no fault variable or preload behind."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.containers.test_compose_network_faults import ClusterWatch, watching
from tidelog.cluster import faults
from tidelog.cluster.compose import ComposeCluster, run_docker
from tidelog.cluster.scenario import ScenarioSettings, run_scenario

pytestmark = pytest.mark.containers

# docker/entrypoint.py's variables for the disk faults
FAULT_VARIABLES = ("TIDELOG_FIU_CONTROL=", "TIDELOG_WAIT_FOR_LOG_DIR_MOUNT=")


def scenario(cluster: ComposeCluster, settings: ScenarioSettings) -> tuple[int, ClusterWatch, str]:
    """The scenario; its target, what was seen while it ran, what it said."""
    lines: list[str] = []
    with watching(cluster) as watch:
        topic, report = asyncio.run(run_scenario(cluster, settings, progress=lines.append))
    said = "\n".join(lines)
    assert report.acked > 100, said
    assert report.ok, f"{topic}\n{said}\n{report.table()}"
    target = re.search(r"broker (\d)", said.split("cycle 1/1: ", 1)[-1])
    assert target is not None, said
    return int(target[1]), watch, said


def in_container(cluster: ComposeCluster, broker_id: int, argv: list[str]) -> str:
    return run_docker(cluster.exec_command(broker_id, argv), 60)


def nothing_left(cluster: ComposeCluster) -> None:
    """No fault variable in any broker's env file or container, no libfiu in any broker."""
    for broker_id in cluster.broker_ids:
        assert cluster.fault_environment(broker_id) == {}, broker_id
        environment = cluster.inspect(cluster.broker(broker_id).service)["Config"]["Env"]
        assert not [v for v in environment if v.startswith(FAULT_VARIABLES)], environment
        assert "fiu" not in in_container(cluster, broker_id, ["cat", "/proc/1/maps"]), broker_id


def test_failing_disk_writes_halt_a_broker_and_lose_nothing_acknowledged(
    compose_cluster: ComposeCluster,
) -> None:
    settings = ScenarioSettings(
        "disk_errors",
        "leader",
        rate=100,
        settle_seconds=1.0,
        disk_errors=faults.DiskErrorSettings(("write",), 0.05),
    )
    target, watch, said = scenario(compose_cluster, settings)

    assert "halted on an I/O error" in said, said
    assert any(target not in seen for seen in watch.registered), said
    nothing_left(compose_cluster)
