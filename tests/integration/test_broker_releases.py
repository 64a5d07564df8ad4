"""Brokers that keep to an older release (broker.protocol.max.version): the API versions they
serve and advertise, the settings they refuse, and real clients of each era against them.

One cluster in the first phase of an upgrade (inter.broker.protocol.version and
log.message.format.version pinned to 0.9.0): broker 1 restarted as a 0.9.0 broker, broker 2 as
0.10.0, broker 3 on today's code.
"""

from __future__ import annotations

import subprocess
import urllib.request

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import magics_on_disk, wait_for_leaders
from tests.integration.test_bad_input import closed_by_broker, connect, request
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.config import ConfigError
from tidelog.controller import topics, zookeeper
from tidelog.protocol.frames import encode_request
from tidelog.protocol.schemas import ApiKey

RELEASES = {1: "0.9.0", 2: "0.10.0", 3: "0.10.1"}
PHASE_ONE = {"inter.broker.protocol.version": "0.9.0", "log.message.format.version": "0.9.0"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("releases"))
    local.up(3, overrides=PHASE_ONE, progress=lambda _: None)
    try:
        for broker_id in (1, 2):
            local.restart_broker(
                broker_id,
                {"broker.protocol.max.version": RELEASES[broker_id]},
                progress=lambda _: None,
            )
        yield local
    finally:
        local.down(progress=lambda _: None)


def topic_on(cluster: LocalCluster, broker_id: int, name: str, **config: str) -> str:
    """A one-partition topic with its only replica on ``broker_id``."""
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, 1, 1, config, assignment={0: [broker_id]})
    wait_for_leaders(cluster, name, 1)
    return name


def advertised(cluster: LocalCluster, broker_id: int) -> dict[int, int]:
    with connect(cluster, broker_id) as connection:
        answer = request(connection, ApiKey.API_VERSIONS, 0, {})
    assert answer["error_code"] == 0
    return {v["api_key"]: v["max_version"] for v in answer["api_versions"]}


def test_restart_keeps_each_brokers_effective_settings_and_refuses_a_later_format(mixed):
    for broker_id, release in RELEASES.items():
        settings = mixed.broker_settings(broker_id)
        assert settings.get("broker.protocol.max.version", "0.10.1") == release
        assert settings["inter.broker.protocol.version"] == "0.9.0"
    pid = mixed.broker(1).pid
    for key in ("log.message.format.version", "inter.broker.protocol.version"):
        with pytest.raises(ConfigError, match=f"{key}: '0.10.0' is not allowed .*allowed: 0.9.0"):
            mixed.restart_broker(1, {key: "0.10.0"}, progress=lambda _: None)
    assert mixed.broker(1).pid == pid and mixed.is_registered(1)  # left running as it was
    assert "0.10.0" not in mixed.broker_settings(1)["log.message.format.version"]


def test_a_0_9_broker_has_no_api_versions_and_closes_the_connection(mixed):
    with connect(mixed, 1) as connection:
        connection.sendall(encode_request(ApiKey.API_VERSIONS, 0, 1, "probe", {}))
        assert closed_by_broker(connection)
    with connect(mixed, 1) as connection:  # what it serves, it answers
        assert len(request(connection, ApiKey.METADATA, 0, {"topics": []})["brokers"]) == 3


def test_each_release_advertises_what_it_served(mixed):
    # as Kafka's Protocol.java at 0.10.0.1 has them (kafka-python's table for (0, 10, 0) agrees,
    # less the SASL and controller APIs tidelog does not serve)
    assert advertised(mixed, 2) == {
        0: 2, 1: 2, 2: 0, 3: 1, 8: 2, 9: 1, 10: 0, 11: 0, 12: 0, 13: 0, 14: 0, 15: 0, 16: 0, 18: 0
    }  # fmt: skip
    today = advertised(mixed, 3)
    assert (today[1], today[2], today[3], today[11]) == (3, 1, 2, 1)
    assert {19, 20, 23} <= set(today)


@pytest.mark.parametrize(
    ("broker_id", "api_key", "version"),
    [
        (1, ApiKey.PRODUCE, 2),
        (1, ApiKey.FETCH, 2),
        (1, ApiKey.METADATA, 1),
        (2, ApiKey.FETCH, 3),
        (2, ApiKey.METADATA, 2),
        (2, ApiKey.LIST_OFFSETS, 1),
        (2, ApiKey.CREATE_TOPICS, 0),
    ],
)
def test_a_version_after_the_release_closes_the_connection(mixed, broker_id, api_key, version):
    bodies = {
        ApiKey.PRODUCE: {"acks": 1, "timeout": 1000, "topic_data": []},
        ApiKey.FETCH: {
            "replica_id": -1,
            "max_wait_time": 0,
            "min_bytes": 0,
            "max_bytes": 1024,
            "topics": [],
        },
        ApiKey.METADATA: {"topics": []},
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "topics": []},
        ApiKey.CREATE_TOPICS: {"create_topic_requests": [], "timeout": 1000},
    }
    with connect(mixed, broker_id) as connection:
        connection.sendall(encode_request(api_key, version, 1, "probe", bodies[api_key]))
        assert closed_by_broker(connection)
    if version:
        with connect(mixed, broker_id) as connection:  # one version lower is served
            request(connection, api_key, version - 1, bodies[api_key])


def test_kafka_python_asking_a_0_10_0_broker_finds_that_release(mixed):
    """kafka-python without api_version asks ApiVersions and infers the release from the answer
    (its 3.x has no probing for brokers without ApiVersions: against broker 1 it cannot
    bootstrap, as against a real 0.9 broker, so the 0.9 era's clients name api_version)."""
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{mixed.broker(2).port}")
    try:
        assert consumer.config["api_version"][:3] == (0, 10, 0)
    finally:
        consumer.close()


def kcat(cluster: LocalCluster, broker_id: int, *args: str, input: str | None = None) -> str:
    fallback_0_9 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0.1"]
    result = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{cluster.broker(broker_id).port}", *fallback_0_9, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_0_9_broker_writes_format_v0_even_for_a_topic_set_to_0_10_0(mixed):
    topic = topic_on(mixed, 1, "on-0.9-broker", **{"message.format.version": "0.10.0"})
    lines = [f"key-{n}:value-{n}" for n in range(10)]
    kcat(mixed, 1, "-P", "-t", topic, "-K:", "-z", "snappy", input="\n".join(lines) + "\n")
    out = kcat(mixed, 1, "-C", "-t", topic, "-o", "beginning", "-c", "10", "-e", "-f", "%k:%s\n")
    assert out.splitlines() == lines
    produce(mixed, topic, (0, 9), [b"from kafka-python"])
    assert [v for _, v in consume(mixed, topic, (0, 9), 11)][-1] == b"from kafka-python"
    assert set(magics_on_disk(mixed, 1, topic)) == {0}


def metrics(cluster: LocalCluster, broker_id: int) -> dict[tuple[str, str], int]:
    """tidelog_fetch_bytes_total by (version, path)."""
    port = cluster.broker(broker_id).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("tidelog_fetch_bytes_total{"):
            labels, value = line[len("tidelog_fetch_bytes_total{") :].split("} ")
            parts = dict(part.split("=") for part in labels.split(","))
            found[parts["version"].strip('"'), parts["path"].strip('"')] = int(value)
    return found


def consume(cluster: LocalCluster, topic: str, api_version: tuple, count: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        api_version=api_version,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        records: list = []
        wait_until(
            lambda: (
                records.extend(r for b in consumer.poll(500).values() for r in b)
                or len(records) >= count
            ),
            30,
            f"{count} messages of {topic} for a consumer at {api_version}",
        )
        return [(r.offset, r.value) for r in records]
    finally:
        consumer.close()


def produce(cluster: LocalCluster, topic: str, api_version: tuple, values: list[bytes]) -> None:
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, api_version=api_version, acks=1
    )
    try:
        for value in values:
            producer.send(topic, value=value).get(timeout=30)  # one at a time: in order
    finally:
        producer.close()


def test_message_format_changes_apply_live_and_mixed_segments_read_whole(mixed):
    """kafkatest's message_format_change path on one topic (0.9.0 -> 0.10.0 -> 0.9.0) on today's
    broker, without a restart: new messages take the format in force and a new client reads the
    mixed log whole. While the topic is at 0.10.0 an old consumer reads it down-converted, and
    /metrics counts those bytes apart from the zero-copy ones. (As in Kafka 0.10, a topic set
    back to 0.9.0 is not down-converted, so only new clients read it afterwards.)"""
    topic = topic_on(mixed, 3, "format-change", **{"message.format.version": "0.9.0"})
    values: list[bytes] = []
    for step, (version, magic) in enumerate([("0.9.0", 0), ("0.10.0", 1), ("0.9.0", 0)]):
        with zookeeper.session(mixed.zookeeper) as client:
            topics.alter_topic_config(client, topic, {"message.format.version": version})

        def written_as_set(values=values, version=version, magic=magic, step=step) -> bool:
            value = f"{step}-{version}-{len(values)}".encode()
            produce(mixed, topic, (0, 10, 0), [value])
            values.append(value)
            return magics_on_disk(mixed, 3, topic)[-1] == magic

        wait_until(written_as_set, 30, f"{topic}'s new messages to be written at format {magic}")
        more = [f"{step}-{version}-{n}".encode() for n in range(len(values), len(values) + 5)]
        produce(mixed, topic, (0, 9), more)
        values += more
        assert magics_on_disk(mixed, 3, topic)[-5:] == [magic] * 5
        if version == "0.10.0":
            before = metrics(mixed, 3)
            old = consume(mixed, topic, (0, 9), len(values))
            assert [v for _, v in old] == values
            new = consume(mixed, topic, (0, 10, 0), len(values))
            assert [v for _, v in new] == values
            after = metrics(mixed, 3)
            grew = {key for key, n in after.items() if n > before.get(key, 0)}
            assert ("1", "converted") in grew  # v1 messages down-converted for Fetch v1
            assert ("2", "zero_copy") in grew  # sent as stored for Fetch v2
            assert ("2", "converted") not in after
    assert {0, 1} <= set(magics_on_disk(mixed, 3, topic))
    new = consume(mixed, topic, (0, 10, 0), len(values))
    assert [v for _, v in new] == values
    assert [o for o, _ in new] == list(range(len(values)))
