"""The controller modules' ZooKeeper: a real one per module, with Kafka's layout."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tidelog.cluster.zookeeper import EmbeddedZooKeeper
from tidelog.controller import zookeeper


@pytest.fixture(scope="module")
def connect_string(tmp_path_factory) -> Iterator[str]:
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    process = server.start()
    try:
        with zookeeper.session(server.connect_string) as zk:
            zookeeper.ensure_layout(zk)
        yield server.connect_string
    finally:
        process.stop(10.0)
