"""Broker configuration as a Kafka user writes it: stock files, derived keys, listeners."""

from __future__ import annotations

import pytest

from tidelog.config import (
    TOPIC_KEYS,
    ConfigError,
    Listener,
    broker_config,
    check_format_supported,
    config_listing,
    not_applicable_note,
    parse_config,
    read_properties,
)

# The server.properties Kafka 0.10.0 and 0.10.2 ship (config/server.properties), every key and
# value that is not a comment. 0.10.2's adds nothing that is not commented out.
KAFKA_0_10_SERVER_PROPERTIES = """\
broker.id=0
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=6000
"""

# What 0.10.2's file shows commented out, for a user to uncomment.
KAFKA_0_10_2_COMMENTED = {
    "delete.topic.enable": "true",
    "listeners": "PLAINTEXT://:9092",
    "advertised.listeners": "PLAINTEXT://your.host.name:9092",
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    ),
    "log.flush.interval.messages": "10000",
    "log.flush.interval.ms": "1000",
    "log.retention.bytes": "1073741824",
}


@pytest.fixture
def stock(tmp_path) -> dict[str, str]:
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_0_10_SERVER_PROPERTIES)
    return read_properties(path)


def test_kafka_s_own_server_properties_is_accepted_and_honoured(stock):
    config = broker_config(stock)
    assert config["log.dirs"] == ("/tmp/kafka-logs",)
    assert config["log.retention.ms"] == 168 * 3_600_000
    assert config["zookeeper.connection.timeout.ms"] == 6000
    assert config["listeners"] == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert "num.network.threads" not in config


def test_the_commented_out_keys_of_0_10_2_are_accepted_too(stock):
    config = broker_config({**stock, **KAFKA_0_10_2_COMMENTED})
    assert config["listeners"] == (Listener("PLAINTEXT", "", 9092),)
    assert config["advertised.listeners"] == (Listener("PLAINTEXT", "your.host.name", 9092),)
    assert config["inter.broker.listener.name"] == "PLAINTEXT"
    assert config["log.flush.interval.messages"] == 10000
    assert config["log.retention.bytes"] == 1073741824


def test_jvm_tuning_keys_are_named_once_as_not_applicable(stock):
    note = not_applicable_note(stock)
    assert note is not None and note.count("\n") == 0
    for name in ("num.network.threads", "num.io.threads", "socket.send.buffer.bytes"):
        assert name in note
    assert not_applicable_note({"broker.id": "1"}) is None


def test_a_key_kafka_does_not_know_is_refused_with_the_closest_name():
    with pytest.raises(ConfigError, match="did you mean 'log.retention.hours'"):
        broker_config({"broker.id": "0", "log.retention.hour": "1"})
    with pytest.raises(ConfigError) as raised:
        broker_config({"broker.id": "0", "colour": "blue"})
    assert "did you mean" not in str(raised.value)
    assert "unknown configuration key 'colour'" in str(raised.value)


@pytest.mark.parametrize(
    ("given", "retention_ms"),
    [
        ({"log.retention.hours": "2"}, 2 * 3_600_000),
        ({"log.retention.hours": "2", "log.retention.minutes": "3"}, 3 * 60_000),
        ({"log.retention.minutes": "3", "log.retention.ms": "5"}, 5),
        ({"log.retention.hours": "-1"}, -1),
        ({}, 168 * 3_600_000),
    ],
)
def test_retention_takes_the_finest_unit_given(given, retention_ms):
    assert broker_config({"broker.id": "0", **given})["log.retention.ms"] == retention_ms


def test_roll_hours_and_log_dir_are_kafka_s_older_names():
    config = broker_config({"broker.id": "0", "log.roll.hours": "1", "log.dir": "/data/k"})
    assert config["log.roll.ms"] == 3_600_000
    assert config["log.dirs"] == ("/data/k",)
    config = broker_config({"broker.id": "0", "log.roll.ms": "5", "log.roll.hours": "1"})
    assert config["log.roll.ms"] == 5


def test_host_name_and_port_make_the_listener_when_listeners_is_not_set():
    config = broker_config({"broker.id": "0", "host.name": "127.0.0.1", "port": "9999"})
    assert config["listeners"] == (Listener("PLAINTEXT", "127.0.0.1", 9999),)
    config = broker_config(
        {"broker.id": "0", "port": "9999", "advertised.host.name": "kafka.example"}
    )
    assert config["advertised.listeners"] == (Listener("PLAINTEXT", "kafka.example", 9999),)


def test_named_listeners_each_advertise_their_own_address():
    config = broker_config(
        {
            "broker.id": "0",
            "listeners": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
            "advertised.listeners": "INTERNAL://broker-1:9092,EXTERNAL://127.0.0.1:19092",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    assert [str(listener) for listener in config["advertised.listeners"]] == [
        "INTERNAL://broker-1:9092",
        "EXTERNAL://127.0.0.1:19092",
    ]
    assert config["inter.broker.listener.name"] == "INTERNAL"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"listeners": "SSL://127.0.0.1:9093"}, "uses security protocol SSL"),
        ({"listeners": "INSIDE://127.0.0.1:9093"}, "a listener name of listener.security"),
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "listeners: 'PLAINTEXT://127.0.0.1' is not valid"),
        (
            {"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"},
            "listeners: 'PLAINTEXT://a:1,PLAINTEXT://b:2' is not valid",
        ),
        (
            {"advertised.listeners": "EXTERNAL://127.0.0.1:19092"},
            "allowed: the names of listeners",
        ),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "not empty, not 0.0.0.0"),
        ({"inter.broker.listener.name": "OTHER"}, "the name of an advertised listener"),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
            "security.inter.broker.protocol: 'SSL' is not allowed",
        ),
        ({"listener.security.protocol.map": "A:TLS"}, "listener.security.protocol.map"),
        ({"log.preallocate": "true"}, "log.preallocate: 'true' is not allowed; allowed: false"),
        (
            {"compression.type": "brotli"},
            "allowed: one of producer, uncompressed, gzip, snappy, lz4, zstd",
        ),
        ({"compression.type": "zstd"}, "compression.type: 'zstd' is not allowed for the broker"),
        ({"broker.id": "1001"}, "at most reserved.broker.max.id"),
        ({"max.connections.per.ip.overrides": "a"}, "max.connections.per.ip.overrides"),
    ],
)
def test_a_listener_or_setting_tidelog_cannot_honour_is_refused_by_name(given, message):
    with pytest.raises(ConfigError, match=message):
        broker_config({"broker.id": "0", **given})


def test_every_accepted_key_is_listed():
    listing = config_listing()
    for name in ("advertised.listeners", "log.retention.hours", "num.io.threads", "segment.ms"):
        assert f"  {name}" in listing


def test_the_time_index_granularity_is_kafkas_by_default_or_minute_and_nothing_else():
    assert broker_config({"broker.id": "1"})["log.timeindex.granularity"] == "index.interval"
    minute = broker_config({"broker.id": "1", "log.timeindex.granularity": "minute"})
    assert minute["log.timeindex.granularity"] == "minute"
    with pytest.raises(ConfigError) as raised:
        broker_config({"broker.id": "1", "log.timeindex.granularity": "hour"})
    assert str(raised.value) == (
        "log.timeindex.granularity: 'hour' is not allowed; allowed: one of index.interval, minute"
    )
    with pytest.raises(ConfigError, match="^timeindex.granularity: 'second' is not allowed"):
        parse_config({"timeindex.granularity": "second"}, TOPIC_KEYS)
    listing = config_listing()
    assert "  log.timeindex.granularity = index.interval    [one of index.interval, minute]" in (
        listing
    )
    assert "  timeindex.granularity = broker's log.timeindex.granularity" in listing


def test_a_0_9_0_broker_defaults_to_0_9_0_and_refuses_later_formats():
    old = broker_config({"broker.id": "1", "broker.protocol.max.version": "0.9.0"})
    assert old["inter.broker.protocol.version"] == old["log.message.format.version"] == "0.9.0"
    for key in ("inter.broker.protocol.version", "log.message.format.version"):
        with pytest.raises(ConfigError, match=f"^{key}: '0.10.0' is not allowed .*allowed: 0.9.0"):
            broker_config({"broker.id": "1", "broker.protocol.max.version": "0.9.0", key: "0.10.0"})
    newer = broker_config({"broker.id": "1", "broker.protocol.max.version": "0.10.0"})
    assert newer["log.message.format.version"] == "0.10.0"
    with pytest.raises(
        ConfigError, match="broker.protocol.max.version: .*0.9.0, 0.10.0, 0.10.1, 0.11.0, .*2.1$"
    ):
        broker_config({"broker.id": "1", "broker.protocol.max.version": "2.2"})


@pytest.mark.parametrize("release", ["0.11.0", "1.0", "1.1", "2.0", "2.1"])
def test_a_broker_of_a_later_release_keeps_the_default_protocol_and_format(release):
    values = broker_config({"broker.id": "1", "broker.protocol.max.version": release})
    assert values["inter.broker.protocol.version"] == "0.10.0"
    assert values["log.message.format.version"] == "0.10.0"
    same = broker_config(
        {"broker.id": "1", "broker.protocol.max.version": release, PROTOCOL: release}
    )
    assert same[PROTOCOL] == release


PROTOCOL = "inter.broker.protocol.version"


@pytest.mark.parametrize(
    ("release", "protocol"),
    [
        ("0.10.1", "0.11.0-IV0"),
        ("0.11.0", "1.0"),
        ("1.0", "1.1-IV0"),
        ("1.1", "2.0"),
        ("2.0", "2.1"),
    ],
)
def test_the_inter_broker_protocol_may_not_be_newer_than_the_release(release, protocol):
    with pytest.raises(
        ConfigError,
        match=f"^{PROTOCOL}: '{protocol}' is not allowed with "
        f"broker.protocol.max.version={release}; allowed: 0.9.0, 0.10.0-IV0, 0.10.0",
    ):
        broker_config(
            {"broker.id": "1", "broker.protocol.max.version": release, PROTOCOL: protocol}
        )


def test_every_iv_level_of_kafka_0_11_to_2_1_is_accepted_by_a_2_1_broker():
    for protocol in ("0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV1"):
        values = broker_config(
            {"broker.id": "1", "broker.protocol.max.version": "2.1", PROTOCOL: protocol}
        )
        assert values[PROTOCOL] == protocol


def test_a_format_newer_than_the_inter_broker_protocol_is_refused_as_kafka_refuses_it():
    with pytest.raises(
        ConfigError,
        match="^log.message.format.version: '0.10.0' is not allowed with "
        "inter.broker.protocol.version=0.9.0; .*raise inter.broker.protocol.version to "
        "0.10.0-IV0 or later first",
    ):
        broker_config({"broker.id": "1", PROTOCOL: "0.9.0"})


def test_a_0_9_0_broker_keeps_every_topic_at_format_v0():
    from tidelog.log.config import LogConfig

    old = broker_config({"broker.id": "1", "broker.protocol.max.version": "0.9.0"})
    assert LogConfig.from_topic_config({"message.format.version": "0.10.0"}, old).magic == 0
    new = broker_config({"broker.id": "1", "log.message.format.version": "0.9.0"})
    assert LogConfig.from_topic_config({"message.format.version": "0.10.0"}, new).magic == 1


def test_format_v2_is_a_topics_choice_where_tidelog_can_keep_it():
    from tidelog.log.config import LogConfig

    release_2_1 = {"broker.id": "1", "broker.protocol.max.version": "2.1"}
    assert broker_config(release_2_1)["log.message.format.version"] == "0.10.0"
    # the broker's format is also the compacted __consumer_offsets': the cleaner takes v2
    v2_broker = broker_config(
        {**release_2_1, "inter.broker.protocol.version": "2.1", "log.message.format.version": "2.1"}
    )
    assert v2_broker["log.message.format.version"] == "2.1"
    for policy in ({}, {"cleanup.policy": "compact"}, {"remote.storage.enable": "true"}):
        assert LogConfig.from_topic_config(policy, v2_broker).magic == 2
    check_format_supported(parse_config({"message.format.version": "2.1"}, TOPIC_KEYS))
    for taken in ({"cleanup.policy": "compact"}, {"remote.storage.enable": "true"}):
        check_format_supported(parse_config({"message.format.version": "1.1", **taken}, TOPIC_KEYS))
    check_format_supported(
        parse_config({"message.format.version": "2.1", "compression.type": "zstd"}, TOPIC_KEYS)
    )
    for older in ("0.10.0", "2.0"):
        values = parse_config(
            {"message.format.version": older, "compression.type": "zstd"}, TOPIC_KEYS
        )
        with pytest.raises(ConfigError, match="^compression.type: 'zstd' is not allowed with"):
            check_format_supported(values)
