"""A broker with two named listeners, as in a container network: each advertises its own
address, and a client is told the addresses of the listener it came in on."""

from __future__ import annotations

import socket
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.test_bad_input import closed_by_broker, request
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.zookeeper import free_port
from tidelog.controller import topics, zookeeper
from tidelog.protocol.schemas import ApiKey


@pytest.fixture(scope="module")
def two_listeners(cluster, tmp_path_factory):
    """One broker of its own (in a ZooKeeper chroot of the shared ZooKeeper) listening as
    INTERNAL (advertised as localhost) and EXTERNAL (advertised as 127.0.0.1)."""
    internal, external = free_port(), free_port()
    chroot = f"{cluster.zookeeper}/listeners"
    with zookeeper.session(cluster.zookeeper) as client:
        client.ensure_path("/listeners")
    local = LocalCluster(tmp_path_factory.mktemp("listeners"))
    local.up(
        1,
        zookeeper=chroot,
        overrides={
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "advertised.listeners": (
                f"INTERNAL://localhost:{internal},EXTERNAL://127.0.0.1:{external}"
            ),
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "max.connections.per.ip.overrides": "127.0.0.2:5",
            "connections.max.idle.ms": "1500",
            "num.network.threads": "3",
        },
        progress=lambda _: None,
    )
    yield local, internal, external, chroot
    local.down(progress=lambda _: None)


def metadata_brokers(port: int) -> list[tuple[str, int]]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        answer = request(connection, ApiKey.METADATA, 1, {"topics": []})
    return [(b["host"], b["port"]) for b in answer["brokers"]]


def test_each_listener_advertises_its_own_address(two_listeners):
    local, internal, external, chroot = two_listeners
    assert metadata_brokers(internal) == [("localhost", internal)]
    assert metadata_brokers(external) == [("127.0.0.1", external)]
    with zookeeper.session(chroot) as client:
        (registered,) = zookeeper.read_brokers(client).values()
    assert (registered.host, registered.port) == ("localhost", internal)  # inter-broker
    log = (local.directory / "broker-1" / "broker.log").read_text()
    assert "not applicable to tidelog: num.network.threads" in log


def test_a_client_on_the_external_listener_produces_and_consumes(two_listeners):
    _, _, external, chroot = two_listeners
    with zookeeper.session(chroot) as client:
        topics.create_topic(client, "through-external", 1, 1, {})
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{external}", acks=1)
    for i in range(50):
        producer.send("through-external", f"message {i}".encode())
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{external}", consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition("through-external", 0)])
    consumer.seek_to_beginning()
    values = [message.value for message in consumer]
    consumer.close()
    assert values == [f"message {i}".encode() for i in range(50)]


def from_127_0_0_2(port: int) -> socket.socket:
    """A connection from a client address of its own, so that no other test's counts."""
    return socket.create_connection(
        ("127.0.0.1", port), timeout=10, source_address=("127.0.0.2", 0)
    )


def test_connections_beyond_the_address_s_limit_are_closed_on_every_listener(two_listeners):
    _, internal, external, _ = two_listeners
    held = [from_127_0_0_2(port) for port in (internal, external, internal, external, internal)]
    try:
        for connection in held:  # each one is served
            request(connection, ApiKey.METADATA, 0, {"topics": []})
        with from_127_0_0_2(external) as one_too_many:
            assert closed_by_broker(one_too_many)
    finally:
        for connection in held:
            connection.close()

    def served_again() -> bool:
        with from_127_0_0_2(internal) as connection:
            try:
                return bool(request(connection, ApiKey.METADATA, 0, {"topics": []})["brokers"])
            except ConnectionError:
                return False

    wait_until(served_again, 10, "connections from 127.0.0.2 to be served again")


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(two_listeners):
    _, internal, _, _ = two_listeners
    with socket.create_connection(("127.0.0.1", internal), timeout=10) as connection:
        request(connection, ApiKey.METADATA, 0, {"topics": []})
        started = time.monotonic()
        assert closed_by_broker(connection)
        assert 1.0 < time.monotonic() - started < 8.0
