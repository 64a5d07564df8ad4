"""A topic's compression.type as Kafka's: the leader recompresses what producers send into the
topic's codec, dump-log shows it stored so, and every client reads it back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.test_format_v2_clients import librdkafka_consume, librdkafka_produce
from tests.integration.test_format_v2_clients import new_topic as new_v2_topic
from tests.integration.test_kafka_python import consume_all, produce
from tests.integration.test_kcat import kcat
from tidelog.records.format import Codec, iter_shallow


def codecs_on_disk(cluster, topic: str) -> set[Codec]:
    return {
        entry.codec
        for path in Path(cluster.directory).glob(f"broker-*/logs/{topic}-0/*.log")
        for entry in iter_shallow(path.read_bytes())
    }


def test_an_uncompressed_producer_to_an_lz4_topic_is_stored_as_lz4(cluster, new_topic):
    topic = new_topic(compression_type="lz4")
    messages = [(b"k%d" % n, b"value %d" % n, {}) for n in range(200)]

    produce(cluster, topic, (0, 10, 1), messages)

    assert codecs_on_disk(cluster, topic) == {Codec.LZ4}
    segment = next(Path(cluster.directory).glob(f"broker-*/logs/{topic}-0/*.log"))
    dump = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "dump-log", str(segment)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "compresscodec: LZ4" in dump
    assert [m.value for m in consume_all(cluster, topic)] == [v for _, v, _ in messages]
    read = kcat(cluster, "-C", "-t", topic, "-o", "beginning", "-c", "200", "-e", "-f", "%s\\n")
    assert read.splitlines() == [v.decode() for _, v, _ in messages]


def test_a_gzip_producer_to_an_uncompressed_topic_is_stored_plain(cluster, new_topic):
    topic = new_topic(compression_type="uncompressed")

    produce(cluster, topic, (0, 10, 1), [(None, b"x" * 100, {})] * 50, compression="gzip")

    assert codecs_on_disk(cluster, topic) == {Codec.NONE}
    assert len(consume_all(cluster, topic)) == 50


def test_a_v2_topic_of_zstd_stores_zstd_whatever_librdkafka_sends(cluster_2_1):
    topic = new_v2_topic(cluster_2_1)
    with_zstd = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "alter-config", "--dir",
         str(cluster_2_1.directory), "--topic", topic, "--add-config", "compression.type=zstd"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert with_zstd.returncode == 0, with_zstd.stderr

    librdkafka_produce(cluster_2_1, topic, 30, **{"compression.type": "none"})

    assert codecs_on_disk(cluster_2_1, topic) == {Codec.ZSTD}
    assert [m.value() for m in librdkafka_consume(cluster_2_1, topic, 30)] == [
        b"value-%d" % n for n in range(30)
    ]
