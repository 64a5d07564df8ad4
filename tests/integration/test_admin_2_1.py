"""A cluster of Kafka 2.1 brokers serving Kafka 2.1's versions of Metadata, the group APIs and
topic admin, and the admin APIs clients call (DescribeConfigs, AlterConfigs, CreatePartitions,
DescribeLogDirs), and kafka-topics.sh --bootstrap-server: through kafka-python's
KafkaAdminClient, confluent-kafka's AdminClient and aiokafka's consumer group, and request by
request where a client would hide an answer. A broker of 0.10.1 still serves exactly its old set.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions
from kafka.admin import ConfigResource as PyConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.integration.conftest import admin, wait_for_leaders
from tests.integration.test_bad_input import (
    closed_by_broker,
    connect,
    produce_body,
    request,
    still_serves,
)
from tests.integration.test_kafka_tools import tool
from tests.integration.test_protocol_2_1 import (
    TEN_MESSAGES,
    advertised,
    leader_epoch,
    leader_of,
)
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.protocol.frames import encode_request
from tidelog.protocol.schemas import APIS, COORDINATOR_TRANSACTION, RESOURCE_TOPIC, ApiKey

_names = itertools.count()


def new_topic(cluster: LocalCluster, partitions: int = 1, **config: str) -> str:
    name = f"adm21-{next(_names)}"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, partitions, 2, config)
    wait_for_leaders(cluster, name, partitions)
    return name


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(f"127.0.0.1:{cluster.broker(b).port}" for b in (1, 2, 3))


def wait_until(what: str, done, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = done()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def overrides_in_force(cluster: LocalCluster, topic: str) -> dict:
    """The topic's overrides as broker 1's metadata holds them (its admin API)."""
    answer = admin(cluster, 1, f"/topics/{topic}")
    assert answer is not None
    return answer["config"]


# -- what each release advertises --------------------------------------------------------------


def test_a_0_10_1_broker_advertises_and_serves_exactly_its_old_set(cluster):
    assert advertised(cluster, 0) == {
        0: 2, 1: 3, 2: 1, 3: 2, 8: 2, 9: 1, 10: 0, 11: 1, 12: 0, 13: 0, 14: 0, 15: 0, 16: 0,
        18: 0, 19: 1, 20: 0, 23: 0,
    }  # fmt: skip
    # a version or API of a later release closes the connection, as an unknown one does
    for key, version, body in [
        (ApiKey.METADATA, 3, {"topics": []}),
        (ApiKey.DESCRIBE_CONFIGS, 0, {"resources": []}),
        (ApiKey.GROUP_COORDINATOR, 1, {"coordinator_key": "g", "coordinator_type": 0}),
    ]:
        with connect(cluster) as connection:
            connection.sendall(encode_request(key, version, 1, "probe", body))
            assert closed_by_broker(connection)
    assert still_serves(cluster)


# -- Metadata v3-v7 ----------------------------------------------------------------------------


def test_metadata_v7_names_the_cluster_controller_and_each_partitions_leader_epoch(cluster_2_1):
    name = new_topic(cluster_2_1)
    with connect(cluster_2_1) as connection:
        answer = request(
            connection,
            ApiKey.METADATA,
            7,
            {"topics": [name], "allow_auto_topic_creation": False},
        )
    assert answer["throttle_time_ms"] == 0
    assert answer["cluster_id"] and answer["controller_id"] in (1, 2, 3)
    assert sorted(b["node_id"] for b in answer["brokers"]) == [1, 2, 3]
    (topic,) = answer["topic_metadata"]
    assert (topic["error_code"], topic["is_internal"]) == (0, False)
    (partition,) = topic["partition_metadata"]
    assert partition["leader"] == leader_of(cluster_2_1, name)
    assert partition["leader_epoch"] == leader_epoch(cluster_2_1, name)
    assert partition["offline_replicas"] == [] and len(partition["replicas"]) == 2


def test_metadata_v4_creates_a_topic_only_when_allowed(cluster_2_1):
    refused, allowed = f"adm21-no-{next(_names)}", f"adm21-yes-{next(_names)}"
    with connect(cluster_2_1) as connection:
        body = {"topics": [refused], "allow_auto_topic_creation": False}
        (topic,) = request(connection, ApiKey.METADATA, 4, body)["topic_metadata"]
        assert topic["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        body = {"topics": [allowed], "allow_auto_topic_creation": True}
        (topic,) = request(connection, ApiKey.METADATA, 5, body)["topic_metadata"]
        assert topic["error_code"] == 5  # LEADER_NOT_AVAILABLE: being created
    wait_for_leaders(cluster_2_1, allowed, 1)
    with zookeeper.session(cluster_2_1.zookeeper) as client:
        assert zookeeper.read_topic(client, refused) is None


# -- FindCoordinator v1-v2 ---------------------------------------------------------------------


def test_a_transaction_coordinator_is_refused_with_a_message_and_a_bad_type_closes(cluster_2_1):
    with connect(cluster_2_1) as connection:
        body = {"coordinator_key": "my-txn", "coordinator_type": COORDINATOR_TRANSACTION}
        answer = request(connection, ApiKey.GROUP_COORDINATOR, 2, body)
        assert answer["error_code"] == 42  # INVALID_REQUEST: no coordinator will come
        assert "transactions" in answer["error_message"]
        assert answer["coordinator_id"] == -1
    with connect(cluster_2_1) as connection:
        body = {"coordinator_key": "g", "coordinator_type": 2}
        connection.sendall(encode_request(ApiKey.GROUP_COORDINATOR, 1, 1, "probe", body))
        assert closed_by_broker(connection)
    assert still_serves(cluster_2_1)


# -- the group APIs, through aiokafka 0.14 ----------------------------------------------------


def test_aiokafka_group_joins_commits_fetches_and_leaves_on_kafka_2_1s_versions(cluster_2_1):
    name = new_topic(cluster_2_1, partitions=2)
    group = f"adm21-group-{next(_names)}"

    async def scenario() -> tuple[dict, dict[int, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(cluster_2_1))
        await producer.start()
        try:
            for n in range(20):
                await producer.send_and_wait(name, f"v{n}".encode(), partition=n % 2)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            name,
            bootstrap_servers=bootstrap(cluster_2_1),
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            versions = consumer._client._conns  # the connections' negotiated versions
            seen = 0
            while seen < 20:
                batches = await consumer.getmany(timeout_ms=1000)
                seen += sum(len(records) for records in batches.values())
            await consumer.commit()
            committed = {p: await consumer.committed(TopicPartition(name, p)) for p in (0, 1)}
            negotiated = next(iter(versions.values()))._versions
        finally:
            await consumer.stop()  # LeaveGroup
        return negotiated, committed

    negotiated, committed = asyncio.run(scenario())
    # the client saw Kafka 2.1's versions and used them (it picks the highest it knows)
    for key in (8, 9, 10, 11, 12, 13, 14):
        assert negotiated[key][1] == APIS[key].max_version
    assert committed == {0: 10, 1: 10}
    # the same offsets, asked for by OffsetFetch v5 with null topics (every partition)
    coordinator = find_coordinator(cluster_2_1, group)
    with connect(cluster_2_1, coordinator) as connection:
        answer = request(connection, ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": None})
    assert answer["error_code"] == 0
    (topic,) = answer["responses"]
    assert sorted((p["partition"], p["offset"]) for p in topic["partition_responses"]) == [
        (0, 10),
        (1, 10),
    ]
    # a broker that is not the group's coordinator answers the error alone, at the top
    other = next(b for b in (1, 2, 3) if b != coordinator)
    with connect(cluster_2_1, other) as connection:
        answer = request(connection, ApiKey.OFFSET_FETCH, 4, {"group_id": group, "topics": None})
    assert (answer["error_code"], answer["responses"]) == (16, [])  # NOT_COORDINATOR
    # the member left: the group is empty, and ListGroups v2 lists it
    with connect(cluster_2_1, coordinator) as connection:
        (described,) = request(connection, ApiKey.DESCRIBE_GROUPS, 2, {"group_ids": [group]})[
            "groups"
        ]
        listed = request(connection, ApiKey.LIST_GROUPS, 2, {})
    assert (described["error_code"], described["state"], described["members"]) == (
        0,
        "Empty",
        [],
    )
    assert group in [g["group_id"] for g in listed["groups"]]


def find_coordinator(cluster: LocalCluster, group: str) -> int:
    def ask() -> int | None:
        with connect(cluster) as connection:
            body = {"coordinator_key": group, "coordinator_type": 0}
            answer = request(connection, ApiKey.GROUP_COORDINATOR, 2, body)
        return answer["coordinator_id"] if answer["error_code"] == 0 else None

    return wait_until(f"a coordinator for {group}", ask)


# -- DescribeConfigs, AlterConfigs, CreatePartitions: kafka-python -----------------------------


@pytest.fixture(scope="module")
def kafka_python_admin(cluster_2_1):
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster_2_1), client_id="adm21")
    yield client
    client.close()


def test_kafka_python_describes_and_alters_a_topics_configs(cluster_2_1, kafka_python_admin):
    name = new_topic(cluster_2_1, **{"retention.ms": "3600000"})
    described = kafka_python_admin.describe_configs(
        [PyConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all"
    )
    configs = described["topic"][name]
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["cleanup.policy"]["value"] == "delete"
    answer = kafka_python_admin.alter_configs(
        [PyConfigResource(ConfigResourceType.TOPIC, name, {"segment.ms": "60000"})]
    )
    assert answer["topic"][name] == "OK"
    # AlterConfigs replaces every override; the client sent back the one it found
    wait_until(
        "the new overrides in broker 1's metadata",
        lambda: (
            overrides_in_force(cluster_2_1, name)
            == {"retention.ms": "3600000", "segment.ms": "60000"}
        ),
    )


def test_kafka_python_alter_configs_refuses_unknown_keys_and_bad_values_by_name(
    cluster_2_1, kafka_python_admin
):
    name = new_topic(cluster_2_1)
    answer = kafka_python_admin.alter_configs(
        [PyConfigResource(ConfigResourceType.TOPIC, name, {"retention.msec": "1"})],
        raise_on_unknown=False,
    )
    assert "InvalidConfig" in answer["topic"][name] and "retention.msec" in answer["topic"][name]
    answer = kafka_python_admin.alter_configs(
        [PyConfigResource(ConfigResourceType.TOPIC, name, {"cleanup.policy": "shred"})]
    )
    assert "InvalidRequest" in answer["topic"][name] and "cleanup.policy" in answer["topic"][name]
    assert overrides_in_force(cluster_2_1, name) == {}


def test_kafka_python_adds_partitions_and_validate_only_adds_none(cluster_2_1, kafka_python_admin):
    name = new_topic(cluster_2_1)
    kafka_python_admin.create_partitions({name: 3}, validate_only=True)
    kafka_python_admin.create_partitions({name: 3}, timeout_ms=10_000)
    wait_for_leaders(cluster_2_1, name, 3)
    with zookeeper.session(cluster_2_1.zookeeper) as client:
        current = zookeeper.read_topic(client, name)
    assert current is not None and sorted(current.assignment) == [0, 1, 2]
    answer = kafka_python_admin.create_partitions({name: 2}, raise_errors=False)
    assert [r.error_code for r in answer.results] == [37]  # INVALID_PARTITIONS: only grows


# -- the same through confluent-kafka's AdminClient --------------------------------------------


@pytest.fixture(scope="module")
def confluent_admin(cluster_2_1):
    return AdminClient({"bootstrap.servers": bootstrap(cluster_2_1)})


# AlterConfigs itself is under test: IncrementalAlterConfigs (Kafka 2.3) is not served
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_describes_a_topic_and_a_broker_and_alters_a_topic(cluster_2_1, confluent_admin):
    name = new_topic(cluster_2_1)
    topic = ConfigResource(ConfigResource.Type.TOPIC, name)
    broker = ConfigResource(ConfigResource.Type.BROKER, "2")
    found = {r: f.result(30) for r, f in confluent_admin.describe_configs([topic, broker]).items()}
    assert found[topic]["retention.ms"].value == "604800000"
    assert found[topic]["retention.ms"].is_default
    assert found[broker]["broker.id"].value == "2" and found[broker]["broker.id"].is_read_only
    dry = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"retention.ms": "1000"})
    confluent_admin.alter_configs([dry], validate_only=True)[dry].result(30)
    assert overrides_in_force(cluster_2_1, name) == {}
    real = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"retention.ms": "1000"})
    confluent_admin.alter_configs([real])[real].result(30)
    wait_until(
        "retention.ms=1000 in broker 1's metadata",
        lambda: overrides_in_force(cluster_2_1, name) == {"retention.ms": "1000"},
    )
    with pytest.raises(KafkaException, match="cannot update"):
        changed = ConfigResource(ConfigResource.Type.BROKER, "2", set_config={"x": "1"})
        confluent_admin.alter_configs([changed])[changed].result(30)


def test_confluent_creates_partitions(cluster_2_1, confluent_admin):
    name = new_topic(cluster_2_1)
    confluent_admin.create_partitions([NewPartitions(name, 2)])[name].result(30)
    wait_for_leaders(cluster_2_1, name, 2)
    with pytest.raises(KafkaException, match="INVALID_PARTITIONS|only be increased"):
        confluent_admin.create_partitions([NewPartitions(name, 2)])[name].result(30)


# -- request by request: what a client would not send -----------------------------------------


def test_describe_configs_of_a_missing_topic_or_another_broker_errs_per_resource(cluster_2_1):
    name = new_topic(cluster_2_1, **{"segment.ms": "60000"})
    body = {
        "resources": [
            {
                "resource_type": RESOURCE_TOPIC,
                "resource_name": name,
                "config_names": ["segment.ms"],
            },
            {"resource_type": RESOURCE_TOPIC, "resource_name": "no-such", "config_names": None},
            {"resource_type": 4, "resource_name": "3", "config_names": None},
            {"resource_type": 9, "resource_name": "x", "config_names": None},
        ],
        "include_synonyms": True,
    }
    with connect(cluster_2_1, 1) as connection:
        found, missing, other_broker, unknown_type = request(
            connection, ApiKey.DESCRIBE_CONFIGS, 2, body
        )["resources"]
        v0 = request(connection, ApiKey.DESCRIBE_CONFIGS, 0, {"resources": body["resources"][:1]})
    (entry,) = found["config_entries"]
    assert (entry["config_name"], entry["config_value"], entry["config_source"]) == (
        "segment.ms",
        "60000",
        1,  # the topic's override
    )
    # its synonyms: the override, then the broker's log.roll.ms (its default here)
    assert [(s["config_name"], s["config_source"]) for s in entry["config_synonyms"]] == [
        ("segment.ms", 1),
        ("log.roll.ms", 5),
    ]
    assert missing["error_code"] == 3 and "no-such" in missing["error_message"]
    assert other_broker["error_code"] == 42 and unknown_type["error_code"] == 42
    (entry,) = v0["resources"][0]["config_entries"]
    assert (entry["config_value"], entry["is_default"]) == ("60000", False)


def test_alter_configs_validate_only_and_null_values_write_nothing(cluster_2_1):
    name = new_topic(cluster_2_1)

    def alter(entries: list[dict], validate_only: bool) -> dict:
        body = {
            "resources": [
                {"resource_type": RESOURCE_TOPIC, "resource_name": name, "config_entries": entries}
            ],
            "validate_only": validate_only,
        }
        with connect(cluster_2_1, 3) as connection:
            (answer,) = request(connection, ApiKey.ALTER_CONFIGS, 1, body)["resources"]
        return answer

    assert alter([{"config_name": "retention.ms", "config_value": "5"}], True)["error_code"] == 0
    null = alter([{"config_name": "retention.ms", "config_value": None}], False)
    assert null["error_code"] == 42 and "retention.ms" in null["error_message"]
    assert overrides_in_force(cluster_2_1, name) == {}


def test_create_partitions_named_twice_or_on_a_non_controller_is_refused(cluster_2_1):
    name = new_topic(cluster_2_1)
    new = {"count": 2, "assignment": None}
    body = {
        "topic_partitions": [{"topic": name, "new_partitions": new}] * 2,
        "timeout": 0,
        "validate_only": False,
    }
    with zookeeper.session(cluster_2_1.zookeeper) as client:
        controller = zookeeper.read_controller(client)
    other = next(b for b in (1, 2, 3) if b != controller)
    with connect(cluster_2_1, controller) as connection:
        (twice,) = request(connection, ApiKey.CREATE_PARTITIONS, 1, body)["topic_errors"]
    assert twice["error_code"] == 42
    body["topic_partitions"] = body["topic_partitions"][:1]
    with connect(cluster_2_1, other) as connection:
        (elsewhere,) = request(connection, ApiKey.CREATE_PARTITIONS, 0, body)["topic_errors"]
    assert elsewhere["error_code"] == 41  # NOT_CONTROLLER
    # an assignment naming a broker twice, or of the wrong size, is INVALID_REPLICA_ASSIGNMENT
    for assignment in ([[1, 1]], [[1]], [[1, 2], [2, 3]]):
        body["topic_partitions"][0]["new_partitions"] = {"count": 2, "assignment": assignment}
        with connect(cluster_2_1, controller) as connection:
            (bad,) = request(connection, ApiKey.CREATE_PARTITIONS, 1, body)["topic_errors"]
        assert bad["error_code"] == 39, assignment


@pytest.mark.parametrize(
    "key",
    [
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.OFFSET_FETCH,
        ApiKey.METADATA,
    ],
)
def test_a_cut_short_or_too_new_request_closes_only_its_connection(cluster_2_1, key):
    top = APIS[key].max_version
    bodies = {
        ApiKey.DESCRIBE_CONFIGS: {"resources": [], "include_synonyms": False},
        ApiKey.ALTER_CONFIGS: {"resources": [], "validate_only": False},
        ApiKey.CREATE_PARTITIONS: {"topic_partitions": [], "timeout": 0, "validate_only": True},
        ApiKey.OFFSET_FETCH: {"group_id": "g", "topics": None},
        ApiKey.METADATA: {"topics": None, "allow_auto_topic_creation": False},
    }
    whole = bytes(encode_request(key, top, 1, "probe", bodies[key]))
    cut = (len(whole) - 5).to_bytes(4, "big") + whole[4:-1]  # the body ends a byte short
    too_new = whole[:6] + (top + 1).to_bytes(2, "big") + whole[8:]
    for frame in (cut, too_new):
        with connect(cluster_2_1) as connection:
            connection.sendall(frame)
            assert closed_by_broker(connection)
    assert still_serves(cluster_2_1)


# -- kafka-topics.sh --bootstrap-server --------------------------------------------------------


def test_kafka_topics_through_the_brokers_creates_describes_alters_lists_and_deletes(cluster_2_1):
    servers = bootstrap(cluster_2_1)
    name = f"adm21-tool-{next(_names)}"
    created = tool(
        "kafka-topics", "--bootstrap-server", servers, "--create", "--topic", name,
        "--partitions", "2", "--replication-factor", "2", "--config", "retention.ms=60000",
    )  # fmt: skip
    assert created.returncode == 0, created.stdout + created.stderr
    wait_for_leaders(cluster_2_1, name, 2)
    again = tool(
        "kafka-topics", "--bootstrap-server", servers, "--create", "--topic", name,
        "--partitions", "2", "--replication-factor", "2",
    )  # fmt: skip
    assert again.returncode == 1
    assert again.stdout == f"Error while executing topic command : Topic {name} already exists\n"

    altered = tool(
        "kafka-topics", "--bootstrap-server", servers, "--alter", "--topic", name,
        "--partitions", "3",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stdout + altered.stderr
    wait_for_leaders(cluster_2_1, name, 3)
    described = tool("kafka-topics", "--bootstrap-server", servers, "--describe", "--topic", name)
    lines = described.stdout.splitlines()
    assert lines[0] == (
        f"Topic:{name}\tPartitionCount:3\tReplicationFactor:2\tConfigs:retention.ms=60000"
    )
    for partition, line in enumerate(lines[1:]):
        assert re.fullmatch(
            rf"\tTopic: {name}\tPartition: {partition}\tLeader: \d\tReplicas: \d,\d\t"
            r"Isr: \d(,\d)*",
            line,
        ), line
    shrunk = tool(
        "kafka-topics", "--bootstrap-server", servers, "--alter", "--topic", name,
        "--partitions", "2",
    )  # fmt: skip
    assert shrunk.returncode == 1 and "only be increased" in shrunk.stdout

    listed = tool("kafka-topics", "--bootstrap-server", servers, "--list")
    assert name in listed.stdout.splitlines()
    deleted = tool("kafka-topics", "--bootstrap-server", servers, "--delete", "--topic", name)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    with zookeeper.session(cluster_2_1.zookeeper) as client:
        wait_until(f"{name} deleted", lambda: zookeeper.read_topic(client, name) is None)


def test_kafka_topics_through_the_brokers_refuses_what_needs_zookeeper(cluster_2_1):
    servers = bootstrap(cluster_2_1)
    both = tool("kafka-topics", "--bootstrap-server", servers, "--zookeeper", "x", "--list")
    assert both.returncode == 1 and "Only one of --bootstrap-server or --zookeeper" in both.stderr
    for option in (["--delete-config", "x"], ["--if-exists"]):
        refused = tool(
            "kafka-topics", "--bootstrap-server", servers, "--alter", "--topic", "t",
            "--partitions", "2", *option,
        )  # fmt: skip
        assert refused.returncode == 1
        assert 'can\'t be used with option"[bootstrap-server]"' in refused.stderr
    configs = tool(
        "kafka-topics", "--bootstrap-server", servers, "--alter", "--topic", "t",
        "--partitions", "2", "--config", "retention.ms=1",
    )  # fmt: skip
    assert configs.returncode == 1 and 'Option "[config]"' in configs.stderr


# -- DescribeLogDirs v0-v1 ---------------------------------------------------------------------


def test_describe_log_dirs_lists_each_directory_and_the_partitions_in_it(
    cluster_2_1, kafka_python_admin
):
    name = new_topic(cluster_2_1, partitions=2)
    leader = leader_of(cluster_2_1, name)
    with connect(cluster_2_1, leader) as connection:
        request(connection, ApiKey.PRODUCE, 2, produce_body(name, TEN_MESSAGES, acks=-1))
        every = request(connection, ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": None})
        asked = {"topics": [{"topic": name, "partitions": [0]}]}
        one = request(connection, ApiKey.DESCRIBE_LOG_DIRS, 0, asked)
    (directory,) = every["log_dirs"]  # each test broker has one log directory
    assert directory["error_code"] == 0 and directory["log_dir"].startswith("/")
    held = {t["topic"]: t["partitions"] for t in directory["topics"]}
    assert 0 in [p["partition"] for p in held[name]]
    (topic,) = one["log_dirs"][0]["topics"]
    (partition,) = topic["partitions"]
    assert (topic["topic"], partition["partition"]) == (name, 0)
    assert partition["size"] == len(TEN_MESSAGES) and partition["offset_lag"] == 0
    assert not partition["is_future"]
    # kafka-python's admin client asks each broker
    described = kafka_python_admin.describe_log_dirs()
    assert sorted(answer["broker"] for answer in described) == [1, 2, 3]


def test_librdkafka_group_commits_and_reads_back_its_offsets_on_kafka_2_1s_versions(cluster_2_1):
    """librdkafka asks each group API at the highest version both sides know: on a 2.1 broker,
    which advertises Kafka 2.1's (test_protocol_2_1), FindCoordinator v2, JoinGroup v3,
    OffsetCommit v6 and OffsetFetch v5 among them."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as Partition

    name = new_topic(cluster_2_1)
    producer = Producer({"bootstrap.servers": bootstrap(cluster_2_1)})
    for n in range(10):
        producer.produce(name, f"v{n}".encode())
    assert producer.flush(30) == 0
    group = f"adm21-rd-{next(_names)}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster_2_1),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([name])
        values = []
        deadline = time.monotonic() + 60
        while len(values) < 10:
            assert time.monotonic() < deadline, f"read {len(values)} of 10"
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.commit(asynchronous=False)
        (committed,) = consumer.committed([Partition(name, 0)], timeout=30)
    finally:
        consumer.close()
    assert values == [f"v{n}".encode() for n in range(10)]
    assert committed.offset == 10
