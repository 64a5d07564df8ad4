"""The broker's own behaviour through its real listener, admin API and command line."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import threading
import time
import urllib.request

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import admin
from tests.integration.test_bad_input import connect, leader_of, produce_body, request
from tests.integration.test_kafka_python import consume_all, produce
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set, iter_deep


def tidelog(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def fetch_body(topic: str, offset: int, max_wait: int, min_bytes: int = 1) -> dict:
    return {
        "replica_id": -1,
        "max_wait_time": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": offset, "max_bytes": 1 << 20}],
            }
        ],
    }


def test_a_fetch_waits_for_min_bytes_and_an_append_wakes_it(cluster, new_topic):
    topic = new_topic()
    leader = leader_of(cluster, topic)
    answers = {}
    asking = threading.Event()

    def waiting_fetch() -> None:
        with connect(cluster, leader) as connection:
            started = time.monotonic()
            asking.set()
            answers["response"] = request(connection, ApiKey.FETCH, 3, fetch_body(topic, 0, 10_000))
            answers["seconds"] = time.monotonic() - started

    fetcher = threading.Thread(target=waiting_fetch)
    fetcher.start()
    assert asking.wait(15)
    time.sleep(0.5)  # the fetch waits (min_bytes) for this long before the append wakes it
    with connect(cluster, leader) as connection:
        request(
            connection,
            ApiKey.PRODUCE,
            2,
            produce_body(topic, build_message_set([Record(b"k", b"wake up", 1)], magic=1)),
        )
    fetcher.join(timeout=15)

    partition = answers["response"]["responses"][0]["partition_responses"][0]
    assert 0.4 < answers["seconds"] < 5
    assert [m.value for m in iter_deep(partition["record_set"])] == [b"wake up"]
    assert partition["high_watermark"] == 1


def test_a_fetch_with_nothing_to_read_returns_empty_after_max_wait(cluster, new_topic):
    topic = new_topic()
    with connect(cluster, leader_of(cluster, topic)) as connection:
        started = time.monotonic()
        response = request(connection, ApiKey.FETCH, 1, fetch_body(topic, 0, 300))
        elapsed = time.monotonic() - started

    partition = response["responses"][0]["partition_responses"][0]
    assert 0.25 < elapsed < 3
    assert (partition["error_code"], bytes(partition["record_set"])) == (0, b"")


def test_list_offsets_v0_answers_latest_earliest_and_limits_the_count(cluster, new_topic):
    topic = new_topic()
    produce(cluster, topic, (0, 9), [(b"k", b"v%d" % n, {}) for n in range(7)])

    def offsets(timestamp: int, count: int) -> list[int]:
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "timestamp": timestamp, "max_num_offsets": count}
                    ],
                }
            ],
        }
        with connect(cluster, leader_of(cluster, topic)) as connection:
            response = request(connection, ApiKey.LIST_OFFSETS, 0, body)
        return response["responses"][0]["partition_responses"][0]["offsets"]

    assert offsets(-1, 10) == [7, 0]
    assert offsets(-1, 1) == [7]
    assert offsets(-2, 10) == [0]


def test_the_admin_api_shows_health_metrics_and_partitions(cluster, new_topic):
    topic = new_topic()
    produce(cluster, topic, (0, 10, 1), [(b"k", b"value", {}) for _ in range(5)])
    leader = leader_of(cluster, topic)

    assert admin(cluster, leader, "/health") == {
        "broker_id": leader,
        "registered": True,
        "status": "ok",
        "brokers": [1, 2, 3],
    }
    described = admin(cluster, leader, f"/topics/{topic}")
    (partition,) = described["partitions"]
    assert (partition["leader"], partition["log_end_offset"], partition["high_watermark"]) == (
        leader,
        5,
        5,
    )
    assert topic in admin(cluster, leader, "/topics")
    port = cluster.broker(leader).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert 'tidelog_requests_total{api="PRODUCE"}' in metrics
    assert f'tidelog_log_end_offset{{partition="0",topic="{topic}"}} 5' in metrics
    assert admin(cluster, leader, "/topics/no-such-topic") is None


def test_a_broker_freezes_what_it_holds_at_start_and_shows_its_collectors_pauses(cluster):
    port = cluster.broker(1).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        figures = dict(
            line.rsplit(" ", 1) for line in response.read().decode().splitlines() if line[0] != "#"
        )

    # its imports alone hold some tens of thousands of objects the collector no longer walks
    assert int(figures["tidelog_gc_frozen_objects"]) > 10_000
    for generation in (0, 1, 2):
        labels = f'{{generation="{generation}"}}'
        collections = int(figures[f"tidelog_gc_collections_total{labels}"])
        seconds = float(figures[f"tidelog_gc_pause_seconds_total{labels}"])
        longest = float(figures[f"tidelog_gc_longest_pause_seconds{labels}"])
        assert collections >= 0 and seconds >= longest >= 0
    # the full collection before the freeze
    assert int(figures['tidelog_gc_collections_total{generation="2"}']) >= 1


def test_a_topic_config_change_takes_effect_on_the_running_broker(cluster, new_topic):
    topic = new_topic()
    produce(cluster, topic, (0, 10, 1), [(b"k", b"before", {"timestamp_ms": 1000})])

    altered = tidelog(
        "topic",
        "alter-config",
        "--dir",
        str(cluster.directory),
        "--topic",
        topic,
        "--add-config",
        "message.timestamp.type=LogAppendTime",
    )
    assert "message.timestamp.type=LogAppendTime" in altered.stdout
    deadline = time.monotonic() + 20
    while True:
        produce(cluster, topic, (0, 10, 1), [(b"k", b"after", {"timestamp_ms": 1000})])
        records = consume_all(cluster, topic)
        if records[-1].timestamp != 1000 or time.monotonic() > deadline:
            break
        time.sleep(0.2)

    assert records[0].timestamp == 1000
    assert records[-1].timestamp > 1_600_000_000_000 and records[-1].timestamp_type == 1


def test_topic_commands_describe_and_refuse_bad_settings(cluster, new_topic):
    topic = new_topic(partitions=3)

    described = tidelog(
        "topic", "describe", "--dir", str(cluster.directory), "--topic", topic
    ).stdout
    listed = tidelog("topic", "list", "--dir", str(cluster.directory)).stdout
    bad = tidelog(
        "topic",
        "create",
        "--dir",
        str(cluster.directory),
        "--topic",
        "x",
        "--config",
        "cleanup.policy=shred",
        check=False,
    )
    again = tidelog(
        "topic", "create", "--dir", str(cluster.directory), "--topic", topic, check=False
    )

    assert f"Topic: {topic}\tPartitionCount: 3" in described and described.count("Leader:") == 3
    assert topic in listed.split()
    assert (
        bad.returncode == 2 and "cleanup.policy" in bad.stderr and "delete, compact" in bad.stderr
    )
    assert again.returncode == 2 and "exists" in again.stderr


def test_a_second_cluster_up_in_the_same_directory_says_it_is_running(cluster):
    result = tidelog("cluster", "up", "--dir", str(cluster.directory), check=False)
    status = tidelog("cluster", "status", "--dir", str(cluster.directory)).stdout

    assert result.returncode == 2 and "already running" in result.stderr
    serving = [line for line in status.splitlines() if " running " in line and " True " in line]
    assert len(serving) == 3, status


def test_a_broker_with_a_bad_setting_names_it_and_does_not_start(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("broker.id=1\nlog.message.timestamp.type=WallClock\n")

    result = tidelog("broker", "--config", str(config), check=False)
    missing = tidelog(
        "broker",
        "--config",
        str(config),
        "--override",
        "log.message.timestamp.type=CreateTime",
        "--override",
        "log.segment.byte=5",
        check=False,
    )

    assert result.returncode == 2
    assert (
        "log.message.timestamp.type: 'WallClock'" in result.stderr
        and "LogAppendTime" in result.stderr
    )
    assert (
        missing.returncode == 2 and "unknown configuration key 'log.segment.byte'" in missing.stderr
    )


def test_perf_produce_and_consume_report_their_figures(cluster, new_topic, tmp_path):
    topic = new_topic(partitions=3)
    report = tmp_path / "produce.json"

    produced = tidelog(
        "perf",
        "produce",
        "--dir",
        str(cluster.directory),
        "--topic",
        topic,
        "--num-records",
        "20000",
        "--record-size",
        "200",
        "--acks",
        "all",
        "--compression",
        "lz4",
        "--throughput",
        "20000",
        "--linger-ms",
        "5",
        "--json",
        str(report),
    )
    consumed = tidelog(
        "perf", "consume", "--dir", str(cluster.directory), "--topic", topic, "--messages", "20000"
    )
    fewer = tidelog(
        "perf", "consume", "--dir", str(cluster.directory), "--topic", topic, "--messages", "12345"
    )

    assert "20000 records sent" in produced.stdout and "99.9th" in produced.stdout
    figures = json.loads(report.read_text())["summary"]
    assert figures["records"] == 20000 and 0 < figures["latency_ms"]["p99"] < 5000
    # the throughput cap (20,000/s) holds; the floor only catches a producer held far below
    # it, as a loaded machine can halve the rate without anything being wrong
    assert 2_000 < figures["records_per_second"] < 25_000
    assert "20000 records consumed" in consumed.stdout
    assert "MB/sec of keys and values" in consumed.stdout and "MB/sec fetched" in consumed.stdout
    assert "12345 records consumed" in fewer.stdout  # exactly, although batches hold more


def test_a_minute_time_index_topic_answers_offsets_for_times_as_a_default_one(cluster, new_topic):
    """kafka-python's offsets_for_times (ListOffsets v1) on a topic with
    timeindex.granularity=minute gives the offsets a default topic gives for the same messages,
    while its time index files hold at most one entry per minute."""
    small = {"index_interval_bytes": "100", "segment_bytes": "20000"}
    topics = {
        "minute": new_topic(timeindex_granularity="minute", **small),
        "default": new_topic(**small),
    }
    base = (int(time.time()) // 60 - 60) * 60_000  # a whole minute, an hour ago
    stamps = [base + 3_000 * number for number in range(200)]  # ten minutes, in order
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 10, 1), batch_size=200
    )
    try:
        for topic in topics.values():
            for number, stamp in enumerate(stamps):  # one message a batch: an index entry each
                producer.send(topic, key=b"k", value=b"v%03d" % number, timestamp_ms=stamp).get(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 10, 1))
    targets = [base - 1, base, base + 1, base + 59_999, base + 60_000, base + 299_000]
    targets += [
        base + 3_000 * 199,
        base + 3_000 * 199 + 1,
        *range(base + 7, base + 600_000, 47_777),
    ]
    try:
        answers = {
            name: [
                consumer.offsets_for_times({TopicPartition(topic, 0): target})[
                    TopicPartition(topic, 0)
                ]
                for target in targets
            ]
            for name, topic in topics.items()
        }
    finally:
        consumer.close()

    expected = [next((n for n, s in enumerate(stamps) if s >= t), None) for t in targets]
    for name in topics:
        assert [a.offset if a else None for a in answers[name]] == expected, name

    def entries(topic: str) -> list[list[tuple[int, int]]]:
        files = sorted(cluster.directory.glob(f"broker-*/logs/{topic}-0/*.timeindex"))
        assert files, topic
        return [
            [e for e in struct.iter_unpack(">qi", path.read_bytes()) if e[0] > 0] for path in files
        ]

    minute, default = entries(topics["minute"]), entries(topics["default"])
    for index in minute:
        minutes = [stamp // 60_000 for stamp, _ in index[:-1]]  # the last may be the roll's
        assert minutes == sorted(set(minutes)), index
    assert sum(map(len, minute)) * 5 < sum(map(len, default)), (minute, default)
