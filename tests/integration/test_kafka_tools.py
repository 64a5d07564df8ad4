"""Kafka's command-line tools from the checkout (bin/, KAFKA_HOME=the checkout) against a real
cluster, with the options of Kafka 0.10.2's documentation: the lines scripts read
(--describe, --list, --verify) as Kafka prints them, Kafka's exit codes, and an option Kafka's
tool does not have refused by name."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.integration.conftest import wait_for_leaders
from tidelog.cluster.local import wait_until
from tidelog.controller import zookeeper

HOME = Path(__file__).resolve().parents[2]


def tool(name: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(HOME / "bin" / f"{name}.sh"), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KAFKA_HOME": str(HOME)},
    )


def test_kafka_topics_creates_describes_alters_lists_and_deletes(cluster):
    zk = cluster.zookeeper
    created = tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "ledger", "--partitions", "3",
        "--replication-factor", "3", "--config", "cleanup.policy=compact",
    )  # fmt: skip
    assert created.returncode == 0, created.stdout + created.stderr
    assert created.stdout == 'Created topic "ledger".\n'
    wait_for_leaders(cluster, "ledger", 3)

    described = tool("kafka-topics", "--zookeeper", zk, "--describe", "--topic", "ledger")
    lines = described.stdout.splitlines()
    assert lines[0] == (
        "Topic:ledger\tPartitionCount:3\tReplicationFactor:3\tConfigs:cleanup.policy=compact"
    )
    for partition, line in enumerate(lines[1:]):
        assert re.fullmatch(
            rf"\tTopic: ledger\tPartition: {partition}\tLeader: \d\tReplicas: \d,\d,\d\t"
            r"Isr: \d(,\d)*",
            line,
        ), line

    again = tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "ledger", "--partitions", "1",
        "--replication-factor", "1",
    )  # fmt: skip
    assert again.returncode == 1
    assert again.stdout == 'Error while executing topic command : Topic "ledger" already exists.\n'
    quiet = tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "ledger", "--partitions", "1",
        "--replication-factor", "1", "--if-not-exists",
    )  # fmt: skip
    assert quiet.returncode == 0 and quiet.stdout == ""

    altered = tool(
        "kafka-topics", "--zookeeper", zk, "--alter", "--topic", "ledger", "--partitions", "5"
    )
    assert altered.returncode == 0
    assert altered.stdout.splitlines()[-1] == "Adding partitions succeeded!"
    wait_for_leaders(cluster, "ledger", 5)
    counted = tool("kafka-topics", "--zookeeper", zk, "--describe", "--topic", "ledger")
    assert counted.stdout.startswith("Topic:ledger\tPartitionCount:5\t")

    listed = tool("kafka-topics", "--zookeeper", zk, "--list")
    assert "ledger" in listed.stdout.splitlines()
    deleted = tool("kafka-topics", "--zookeeper", zk, "--delete", "--topic", "ledger")
    assert deleted.stdout.splitlines() == [
        "Topic ledger is marked for deletion.",
        "Note: This will have no impact if delete.topic.enable is not set to true.",
    ]
    with zookeeper.session(zk) as client:
        wait_until(
            lambda: zookeeper.read_topic(client, "ledger") is None, 30, "ledger to be deleted"
        )


def test_kafka_topics_refuses_what_kafkas_tool_refuses(cluster):
    zk = cluster.zookeeper
    unknown = tool("kafka-topics", "--zookeeper", zk, "--list", "--bogus-option")
    assert unknown.returncode == 1
    assert "bogus-option is not a recognized option" in unknown.stderr
    two = tool("kafka-topics", "--zookeeper", zk, "--list", "--describe")
    assert two.returncode == 1 and "exactly one action" in two.stderr
    mixed = tool("kafka-topics", "--zookeeper", zk, "--list", "--partitions", "3")
    assert mixed.returncode == 1
    assert 'Option "[partitions]" can\'t be used with option"[' in mixed.stderr
    missing = tool("kafka-topics", "--create", "--topic", "x", "--partitions", "1")
    assert missing.returncode == 1 and 'Missing required argument "[zookeeper]"' in missing.stderr
    bad_config = tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "badly", "--partitions", "1",
        "--replication-factor", "1", "--config", "retention.ms=soon",
    )  # fmt: skip
    assert bad_config.returncode == 1
    assert bad_config.stdout.startswith("Error while executing topic command : retention.ms")


def test_kafka_reassign_partitions_generates_executes_and_verifies(cluster, tmp_path):
    zk = cluster.zookeeper
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "shifted",
        "--replica-assignment", "1,2",
    )  # fmt: skip
    wait_for_leaders(cluster, "shifted", 2)
    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": "shifted"}]}))
    generated = tool(
        "kafka-reassign-partitions", "--zookeeper", zk, "--generate",
        "--topics-to-move-json-file", str(to_move), "--broker-list", "2,3",
    )  # fmt: skip
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1]) == {
        "version": 1,
        "partitions": [
            {"topic": "shifted", "partition": 0, "replicas": [1]},
            {"topic": "shifted", "partition": 1, "replicas": [2]},
        ],
    }
    assert lines[2:4] == ["", "Proposed partition reassignment configuration"]
    proposed = json.loads(lines[4])
    assert {b for p in proposed["partitions"] for b in p["replicas"]} <= {2, 3}

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "shifted", "partition": 0, "replicas": [3]},
                    {"topic": "shifted", "partition": 1, "replicas": [2]},
                ],
            }
        )
    )
    executed = tool(
        "kafka-reassign-partitions", "--zookeeper", zk, "--execute",
        "--reassignment-json-file", str(plan),
    )  # fmt: skip
    assert executed.returncode == 0
    assert executed.stdout.splitlines()[-1] == "Successfully started reassignment of partitions."

    def verified() -> list[str]:
        return tool(
            "kafka-reassign-partitions", "--zookeeper", zk, "--verify",
            "--reassignment-json-file", str(plan),
        ).stdout.splitlines()  # fmt: skip

    wait_until(
        lambda: (
            verified()
            == [
                "Status of partition reassignment: ",
                "Reassignment of partition [shifted,0] completed successfully",
                "Reassignment of partition [shifted,1] completed successfully",
            ]
        ),
        60,
        "--verify to say both partitions completed",
        interval=0.5,
    )
    malformed = tmp_path / "malformed.json"
    malformed.write_text("{")
    refused = tool(
        "kafka-reassign-partitions", "--zookeeper", zk, "--execute",
        "--reassignment-json-file", str(malformed),
    )  # fmt: skip
    assert refused.returncode == 0  # as Kafka's: the failure is printed, the exit code is 0
    assert refused.stdout.startswith("Partitions reassignment failed due to ")
    no_file = tool("kafka-reassign-partitions", "--zookeeper", zk, "--execute")
    assert no_file.returncode == 1
    assert "must include --reassignment-json-file" in no_file.stderr


def test_kafka_configs_alters_and_describes_topics_and_brokers(cluster):
    zk = cluster.zookeeper
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "tuned", "--partitions", "1",
        "--replication-factor", "1",
    )  # fmt: skip
    altered = tool(
        "kafka-configs", "--zookeeper", zk, "--alter", "--entity-type", "topics",
        "--entity-name", "tuned",
        "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]",
    )  # fmt: skip
    assert altered.stdout == "Completed Updating config for entity: topic 'tuned'.\n"
    described = tool(
        "kafka-configs", "--zookeeper", zk, "--describe", "--entity-type", "topics",
        "--entity-name", "tuned",
    )  # fmt: skip
    assert described.stdout == (
        "Configs for topic 'tuned' are retention.ms=60000,cleanup.policy=compact,delete\n"
    )
    removed = tool(
        "kafka-configs", "--zookeeper", zk, "--alter", "--entity-type", "topics",
        "--entity-name", "tuned", "--delete-config", "segment.ms",
    )  # fmt: skip
    assert removed.returncode == 0
    assert removed.stdout == "Error while executing config command Invalid config(s): segment.ms\n"

    throttled = tool(
        "kafka-configs", "--zookeeper", zk, "--alter", "--entity-type", "brokers",
        "--entity-name", "2", "--add-config", "follower.replication.throttled.rate=1000000",
    )  # fmt: skip
    assert throttled.stdout == "Completed Updating config for entity: brokers '2'.\n"
    broker = tool(
        "kafka-configs", "--zookeeper", zk, "--describe", "--entity-type", "brokers",
        "--entity-name", "2",
    )  # fmt: skip
    assert (
        broker.stdout == "Configs for brokers '2' are follower.replication.throttled.rate=1000000\n"
    )
    tool(
        "kafka-configs", "--zookeeper", zk, "--alter", "--entity-type", "brokers",
        "--entity-name", "2", "--delete-config", "follower.replication.throttled.rate",
    )  # fmt: skip
    quotas = tool("kafka-configs", "--zookeeper", zk, "--describe", "--entity-type", "clients")
    assert quotas.returncode == 1 and "tidelog has no client or user quotas" in quotas.stderr


def test_kafka_preferred_replica_election_starts_an_election(cluster, tmp_path):
    zk = cluster.zookeeper
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "elected", "--partitions", "2",
        "--replication-factor", "2",
    )  # fmt: skip
    wait_for_leaders(cluster, "elected", 2)
    wanted = tmp_path / "elect.json"
    wanted.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "elected", "partition": 0},
                    {"topic": "nope", "partition": 0},
                ]
            }
        )
    )
    started = tool(
        "kafka-preferred-replica-election", "--zookeeper", zk, "--path-to-json-file", str(wanted)
    )
    assert started.returncode == 0
    assert started.stdout.splitlines() == [
        'Created preferred replica election path with {"version":1,"partitions":'
        '[{"topic":"elected","partition":0}]}',
        "Successfully started preferred replica election for partitions Set([elected,0])",
        "Skipping preferred replica leader election for partition [nope,0] since it doesn't exist.",
    ]
    with zookeeper.session(zk) as client:
        wait_until(
            lambda: client.exists(zookeeper.PREFERRED_REPLICA_ELECTION) is None,
            30,
            "the controller to take the election",
        )


def test_kafka_consumer_groups_lists_and_describes_a_group(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    zk, bootstrap = cluster.zookeeper, cluster.bootstrap_servers
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "watched", "--partitions", "1",
        "--replication-factor", "1",
    )  # fmt: skip
    wait_for_leaders(cluster, "watched", 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for n in range(5):
        producer.send("watched", b"%d" % n)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="auditors")
    consumer.commit({TopicPartition("watched", 0): OffsetAndMetadata(3, "")})
    consumer.close()

    listed = tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list")
    assert "auditors" in listed.stdout.splitlines()
    described = tool(
        "kafka-consumer-groups",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--group",
        "auditors",
    )
    lines = described.stdout.splitlines()
    assert len(lines) == 3, described.stdout + described.stderr
    assert lines[1].split() == [
        "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
        "CLIENT-ID",
    ]  # fmt: skip
    assert lines[2].split() == ["watched", "0", "3", "5", "2", "-", "-", "-"]
    assert "Consumer group 'auditors' has no active members." in described.stderr
    old = tool("kafka-consumer-groups", "--zookeeper", zk, "--list")
    assert old.returncode == 1 and "use --bootstrap-server" in old.stderr


def test_console_producer_and_consumer_carry_keyed_lines(cluster):
    zk, bootstrap = cluster.zookeeper, cluster.bootstrap_servers
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "console", "--partitions", "1",
        "--replication-factor", "2",
    )  # fmt: skip
    wait_for_leaders(cluster, "console", 1)
    produced = subprocess.run(
        [str(HOME / "bin" / "kafka-console-producer.sh"), "--broker-list", bootstrap, "--topic",
         "console", "--property", "parse.key=true", "--property", "key.separator=:",
         "--request-required-acks", "all", "--sync"],
        input="k1:first\nk2:second\n", capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KAFKA_HOME": str(HOME)},
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = tool(
        "kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", "console",
        "--from-beginning", "--max-messages", "2", "--property", "print.key=true",
    )  # fmt: skip
    assert consumed.stdout.splitlines() == ["k1\tfirst", "k2\tsecond"]
    assert "Processed a total of 2 messages" in consumed.stderr
    refused = tool("kafka-console-consumer", "--zookeeper", zk, "--topic", "console")
    assert refused.returncode == 1 and "use --bootstrap-server" in refused.stderr


def test_kafka_run_class_dumps_log_segments(cluster):
    zk, bootstrap = cluster.zookeeper, cluster.bootstrap_servers
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "dumped", "--partitions", "1",
        "--replication-factor", "1",
    )  # fmt: skip
    wait_for_leaders(cluster, "dumped", 1)
    subprocess.run(
        [str(HOME / "bin" / "kafka-console-producer.sh"), "--broker-list", bootstrap, "--topic",
         "dumped", "--sync"],
        input="hello\n", capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "KAFKA_HOME": str(HOME)},
    )  # fmt: skip
    (segment,) = cluster.directory.glob("broker-*/logs/dumped-0/00000000000000000000.log")
    dumped = tool(
        "kafka-run-class", "kafka.tools.DumpLogSegments", "--files", str(segment),
        "--print-data-log",
    )  # fmt: skip
    assert dumped.returncode == 0, dumped.stderr
    assert "hello" in dumped.stdout
    other = tool("kafka-run-class", "kafka.tools.GetOffsetShell", "--topic", "dumped")
    assert other.returncode == 1
    assert "kafka.tools.GetOffsetShell: tidelog's kafka-run-class.sh runs" in other.stderr


def test_perf_tools_print_kafkas_summaries(cluster):
    zk, bootstrap = cluster.zookeeper, cluster.bootstrap_servers
    tool(
        "kafka-topics", "--zookeeper", zk, "--create", "--topic", "timed", "--partitions", "2",
        "--replication-factor", "1",
    )  # fmt: skip
    wait_for_leaders(cluster, "timed", 2)
    produced = tool(
        "kafka-producer-perf-test", "--topic", "timed", "--num-records", "2000",
        "--record-size", "100", "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert re.fullmatch(
        r"2000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.",
        produced.stdout.splitlines()[-1],
    ), produced.stdout
    consumed = tool(
        "kafka-consumer-perf-test", "--broker-list", bootstrap, "--topic", "timed",
        "--messages", "2000",
    )  # fmt: skip
    lines = consumed.stdout.splitlines()
    assert lines[0] == (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
    )
    assert lines[1].split(", ")[4] == "2000"
    refused = tool(
        "kafka-producer-perf-test", "--topic", "timed", "--num-records", "1", "--record-size",
        "1", "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
        "max.in.flight.requests.per.connection=1",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "max.in.flight.requests.per.connection" in refused.stderr
