"""CreateTopics and DeleteTopics over the protocol: kafka-python's KafkaAdminClient,
confluent-kafka's AdminClient, and raw requests for the errors clients do not show."""

from __future__ import annotations

import itertools

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError

from tests.integration.conftest import admin
from tests.integration.test_bad_input import connect, request
from tidelog.cluster.local import wait_until
from tidelog.controller import zookeeper
from tidelog.errors import ErrorCode
from tidelog.protocol.schemas import ApiKey

_names = itertools.count()


def name() -> str:
    return f"admin-topic-{next(_names)}"


def controller_of(cluster) -> int:
    with zookeeper.session(cluster.zookeeper) as client:
        return zookeeper.read_controller(client)


def topic_on_every_broker(cluster, topic: str, partitions: int) -> bool:
    for broker_id in cluster.state.brokers:
        described = admin(cluster, broker_id, f"/topics/{topic}")
        if described is None or len(described["partitions"]) != partitions:
            return False
    return True


def gone_from_every_broker(cluster, topic: str) -> bool:
    return all(admin(cluster, b, f"/topics/{topic}") is None for b in cluster.state.brokers)


def test_kafka_python_admin_client_creates_and_deletes_topics(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    topic, compacted = name(), name()
    try:
        client.create_topics(
            [
                NewTopic(topic, num_partitions=3, replication_factor=2),
                NewTopic(
                    compacted,
                    num_partitions=1,
                    replication_factor=1,
                    topic_configs={"cleanup.policy": "compact"},
                ),
            ],
            timeout_ms=30000,
        )
        # CreateTopics answers once the controller serves the topic (as Kafka's does); the
        # other brokers learn of it from ZooKeeper a moment later
        wait_until(lambda: topic_on_every_broker(cluster, topic, 3), 30, f"{topic} everywhere")
        described = admin(cluster, 1, f"/topics/{topic}")
        assert all(len(p["replicas"]) == 2 for p in described["partitions"])
        assert admin(cluster, 1, f"/topics/{compacted}")["config"] == {"cleanup.policy": "compact"}

        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([NewTopic(topic, 1, 1)], timeout_ms=10000)
        with pytest.raises(InvalidReplicationFactorError):
            client.create_topics([NewTopic(name(), 1, 5)], timeout_ms=10000)

        client.delete_topics([topic, compacted], timeout_ms=30000)
        wait_until(lambda: gone_from_every_broker(cluster, topic), 30, f"{topic} to be deleted")
    finally:
        client.close()


def test_confluent_admin_client_creates_and_deletes_topics(cluster):
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = name()

    futures = client.create_topics(
        [ConfluentNewTopic(topic, num_partitions=2, replication_factor=3)], request_timeout=30
    )
    futures[topic].result(timeout=60)
    wait_until(lambda: topic_on_every_broker(cluster, topic, 2), 30, f"{topic} everywhere")
    assert set(client.list_topics(timeout=10).topics) >= {topic}

    existing = client.create_topics([ConfluentNewTopic(topic, 1, 1)], request_timeout=10)
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS"):
        existing[topic].result(timeout=30)
    bad_config = name()
    rejected = client.create_topics(
        [ConfluentNewTopic(bad_config, 1, 1, config={"cleanup.policy": "shred"})],
        request_timeout=10,
    )
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        rejected[bad_config].result(timeout=30)

    client.delete_topics([topic], request_timeout=30)[topic].result(timeout=60)
    wait_until(lambda: gone_from_every_broker(cluster, topic), 30, f"{topic} to be deleted")


def create_body(*entries: dict, timeout: int = 10000, validate_only: bool = False) -> dict:
    defaults = {"num_partitions": 1, "replication_factor": 1, "replica_assignment": []}
    return {
        "create_topic_requests": [{**defaults, "config_entries": [], **entry} for entry in entries],
        "timeout": timeout,
        "validate_only": validate_only,
    }


def codes(response: dict, key: str = "topic_errors") -> dict[str, int]:
    return {entry["topic"]: entry["error_code"] for entry in response[key]}


def test_create_topics_answers_kafkas_error_for_each_bad_topic(cluster):
    good, assigned, validated = name(), name(), name()
    with connect(cluster, controller_of(cluster)) as connection:
        response = request(
            connection,
            ApiKey.CREATE_TOPICS,
            1,
            create_body(
                {"topic": good, "num_partitions": 2},
                {
                    "topic": assigned,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "replica_assignment": [
                        {"partition": 0, "replicas": [3, 1]},
                        {"partition": 1, "replicas": [1, 2]},
                    ],
                },
                {"topic": "bad/name"},
                {"topic": name(), "num_partitions": 0},
                {"topic": name(), "replication_factor": 4},
                {
                    "topic": name(),
                    "config_entries": [{"config_name": "no.such", "config_value": "1"}],
                },
                {
                    "topic": name(),
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "replica_assignment": [{"partition": 0, "replicas": [1, 9]}],
                },
                {"topic": name(), "replica_assignment": [{"partition": 0, "replicas": [1]}]},
            ),
        )
        errors = list(codes(response).values())
        assert errors == [
            ErrorCode.NONE,
            ErrorCode.NONE,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            ErrorCode.INVALID_PARTITIONS,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            ErrorCode.INVALID_CONFIG,
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ErrorCode.INVALID_REQUEST,
        ]
        assert "no.such" in response["topic_errors"][5]["error_message"]
        described = admin(cluster, 1, f"/topics/{assigned}")
        assert [p["replicas"] for p in described["partitions"]] == [[3, 1], [1, 2]]

        again = request(connection, ApiKey.CREATE_TOPICS, 0, create_body({"topic": good}))
        assert codes(again) == {good: ErrorCode.TOPIC_ALREADY_EXISTS}
        dry = request(
            connection,
            ApiKey.CREATE_TOPICS,
            1,
            create_body({"topic": validated}, validate_only=True),
        )
        assert codes(dry) == {validated: ErrorCode.NONE}
        assert admin(cluster, 1, f"/topics/{validated}") is None

        deleted = request(
            connection, ApiKey.DELETE_TOPICS, 0, {"topics": [good, "never-was"], "timeout": 30000}
        )
        assert codes(deleted, "topic_error_codes") == {
            good: ErrorCode.NONE,
            "never-was": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }


def test_brokers_other_than_the_controller_answer_not_controller(cluster):
    other = next(b for b in cluster.state.brokers if b != controller_of(cluster))
    topic = name()
    with connect(cluster, other) as connection:
        created = request(connection, ApiKey.CREATE_TOPICS, 0, create_body({"topic": topic}))
        deleted = request(connection, ApiKey.DELETE_TOPICS, 0, {"topics": [topic], "timeout": 0})

    assert codes(created) == {topic: ErrorCode.NOT_CONTROLLER}
    assert codes(deleted, "topic_error_codes") == {topic: ErrorCode.NOT_CONTROLLER}
    assert admin(cluster, 1, f"/topics/{topic}") is None
