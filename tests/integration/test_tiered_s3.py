"""The s3:// remote tier through s3fs, against moto's S3-compatible server started here."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import s3fs

from tests.integration.test_kafka_python import consume
from tests.integration.test_tiered import TIERED_BROKER, create, fill, wait_offloaded
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.zookeeper import free_port
from tidelog.tiered.metadata import RemoteLogMetadataStore, RemoteSegmentMetadata, SegmentState
from tidelog.tiered.storage import RemoteSegmentId, RemoteStorageManager

BUCKET = "tidelog-tier"
CREDENTIALS = {"key": "testing", "secret": "testing"}


def finished_segment(start: int) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(
        RemoteSegmentId("t", 0, start, f"{start:032x}"),
        start + 9,
        1000 + start,
        100,
        0,
        SegmentState.COPY_SEGMENT_FINISHED,
    )


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    port = free_port()
    log_file = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: _listening(port), 30, f"moto's S3 server on port {port}")
        endpoint = f"http://127.0.0.1:{port}"
        s3fs.S3FileSystem(endpoint_url=endpoint, **CREDENTIALS).mkdir(BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)
        log_file.close()


@pytest.fixture(scope="module")
def s3_cluster(s3_endpoint, tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("tiered-s3"))
    overrides = {
        **TIERED_BROKER,
        "remote.log.storage.uri": f"s3://{BUCKET}/cluster",
        "rsm.config.endpoint.url": s3_endpoint,
        "rsm.config.key": CREDENTIALS["key"],
        "rsm.config.secret": CREDENTIALS["secret"],
    }
    cluster.up(2, overrides=overrides, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def test_segments_go_to_s3_are_read_back_and_go_with_their_topic(s3_cluster, s3_endpoint):
    bucket = s3fs.S3FileSystem(endpoint_url=s3_endpoint, use_listings_cache=False, **CREDENTIALS)
    topic = create(s3_cluster, replication_factor=2)
    fill(s3_cluster, topic, 1200, compression="gzip")
    wait_offloaded(s3_cluster, topic, 1200)

    objects = bucket.ls(f"{BUCKET}/cluster/{topic}-0")
    assert any(name.endswith(".log") for name in objects)
    assert any(name.endswith(".remoteLogIndex") for name in objects)
    records = consume(s3_cluster, topic, (0, 10, 1), 1200, timeout=60)
    assert [r.offset for r in records] == list(range(1200))

    subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "delete", "--dir",
         str(s3_cluster.directory), "--topic", topic],
        check=True, capture_output=True,
    )  # fmt: skip
    wait_until(
        lambda: not bucket.exists(f"{BUCKET}/cluster/{topic}-0"),
        60,
        f"the objects of {topic} to leave the bucket",
    )


def test_the_segment_below_a_local_log_start_is_found_in_s3_reading_one_object(s3_endpoint):
    options = {"endpoint_url": s3_endpoint, **CREDENTIALS}
    leader = RemoteLogMetadataStore(RemoteStorageManager(f"s3://{BUCKET}/lookup", options))
    for start in range(0, 200, 10):
        leader.put(finished_segment(start))
    follower = RemoteLogMetadataStore(RemoteStorageManager(f"s3://{BUCKET}/lookup", options))

    assert follower.finished_ending_at("t", 0, 149) == finished_segment(140)
    assert follower.objects_read == 1
    assert follower.finished_ending_at("t", 0, 145) is None
    assert follower.finished_ending_at("t", 7, 9) is None
