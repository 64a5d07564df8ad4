"""Real clusters for integration tests: Debian's ZooKeeper and tidelog broker processes."""

from __future__ import annotations

import itertools
import json
import os
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper

_names = itertools.count()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """Three brokers shared by the tests that only add topics of their own."""
    local = LocalCluster(tmp_path_factory.mktemp("cluster"))
    local.up(3, progress=lambda _: None)
    yield local
    local.down(progress=lambda _: None)


# A broker of Kafka 2.1's protocol, with followers replicating by it (README, "Brokers of Kafka
# 0.11 to 2.1's protocol")
RELEASE_2_1 = {"broker.protocol.max.version": "2.1", "inter.broker.protocol.version": "2.1"}


@pytest.fixture(scope="session")
def cluster_2_1(tmp_path_factory) -> Iterator[LocalCluster]:
    """Three brokers of release 2.1 shared by the tests of its protocol and its clients."""
    local = LocalCluster(tmp_path_factory.mktemp("cluster-2-1"))
    local.up(3, overrides=RELEASE_2_1, progress=lambda _: None)
    yield local
    local.down(progress=lambda _: None)


@pytest.fixture
def new_topic(cluster):
    """new_topic(partitions=1, **config) creates a topic of its own and returns its name."""

    def create(partitions: int = 1, **config: str) -> str:
        name = f"topic-{next(_names)}"
        with zookeeper.session(cluster.zookeeper) as client:
            topics.create_topic(
                client, name, partitions, 1, {k.replace("_", "."): v for k, v in config.items()}
            )
        wait_for_leaders(cluster, name, partitions)
        return name

    return create


def admin(cluster: LocalCluster, broker_id: int, path: str) -> dict | None:
    """GET a broker's admin API; None for a 404."""
    port = cluster.broker(broker_id).admin_port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    except urllib.error.URLError:
        return None  # not listening (yet)


def wait_for_leaders(cluster: LocalCluster, topic: str, partitions: int) -> None:
    """Waits until every broker knows ``topic`` and each partition's leader has its log open."""

    def ready() -> bool:
        for broker_id in cluster.state.brokers:
            described = admin(cluster, broker_id, f"/topics/{topic}")
            if described is None or len(described["partitions"]) != partitions:
                return False
            for partition in described["partitions"]:
                if partition["leader"] < 0:
                    return False
                if partition["leader"] == broker_id and "log_end_offset" not in partition:
                    return False
        return True

    wait_until(ready, 30, f"the leaders of {topic} to serve it")


CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def entries_on_disk(
    cluster: LocalCluster, topic: str, partition: int = 0, broker_id: int | None = None
) -> list[tuple[int, str, int]]:
    """(magic, codec, records) of each top-level entry in a broker's segment files of a
    partition (the leader's by default), in log order, read from the bytes as the formats define
    them, not through tidelog's code: after offset int64 and size int32, a v0/v1 message's crc
    uint32, magic int8 and attributes int8 (one message, or a wrapper counted as one), or a v2
    batch's partition leader epoch int32, magic int8, crc uint32 and attributes int16, with its
    record count at byte 57; the codec is the attributes' low three bits."""
    if broker_id is None:
        broker_id = admin(cluster, 1, f"/topics/{topic}")["partitions"][partition]["leader"]
    directory = Path(cluster.broker(broker_id).config).parent / "logs" / f"{topic}-{partition}"
    found = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 18 <= len(data):
            _, size, _, magic, attributes = struct.unpack_from(">qiIbb", data, position)
            records = 1
            if magic == 2:
                (attributes,) = struct.unpack_from(">h", data, position + 21)
                (records,) = struct.unpack_from(">i", data, position + 57)
            found.append((magic, CODEC_NAMES[attributes & 0x07], records))
            position += 12 + size
    return found


def codecs_on_disk(cluster: LocalCluster, topic: str, partition: int = 0) -> set[str]:
    """The codecs of the top-level entries in the leader's segment files of a partition."""
    return {codec for _, codec, _ in entries_on_disk(cluster, topic, partition)}


def magics_on_disk(cluster: LocalCluster, broker_id: int, topic: str, partition: int = 0) -> list:
    """The magic byte of each top-level entry in a broker's segment files of a partition."""
    return [magic for magic, _, _ in entries_on_disk(cluster, topic, partition, broker_id)]


def run_tidelog(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The tidelog command in a new interpreter, as a user runs it (``env``: variables set for
    it on top of this process's); its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )
