"""Pieces the cluster benchmarks share."""

from __future__ import annotations

from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper

RECORD = 1024
MB = 1_000_000


def create_topic(
    cluster: LocalCluster,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    """Creates a topic and waits until its leaders serve it with a full ISR."""
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, partitions, replication_factor, config or {})
    wait_for_full_isr(cluster, name)
    import time

    time.sleep(1.0)  # every broker's cache learns of the topic through its watches


def quiet(_: str) -> None:
    pass
