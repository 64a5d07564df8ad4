"""tidelog.testing.TidelogContainer: one broker with its own ZooKeeper, as a user's test uses it."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer

from tidelog.testing import TidelogContainer

pytestmark = pytest.mark.containers


def test_tidelog_container_serves_kafka_python(docker_engine: None) -> None:
    with TidelogContainer().with_config("num.partitions", "2") as tidelog:
        bootstrap = tidelog.get_bootstrap_server()
        assert bootstrap.startswith("127.0.0.1:")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        values = [b"m-%03d" % i for i in range(100)]
        for future in [producer.send("users-topic", value) for value in values]:
            future.get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(
            "users-topic",
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
            group_id=None,
        )
        consumed = sorted(record.value for record in consumer)
        partitions = consumer.partitions_for_topic("users-topic")
        consumer.close()
    assert consumed == values
    assert partitions == {0, 1}  # num.partitions reached the broker
