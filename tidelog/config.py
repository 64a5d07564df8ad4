"""Broker and topic configuration under Kafka's own key names, declared as data.

A broker reads ``server.properties``; a topic's overrides live in ZooKeeper under
``/config/topics/{t}``. Each key says how its value is parsed and what is allowed, so a bad value
fails at start with a message that names the key and the allowed values. A topic key without an
override takes its broker default (``segment.bytes`` falls back to ``log.segment.bytes``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """A configuration key is unknown or its value is not allowed."""


@dataclass(frozen=True)
class ConfigKey:
    name: str
    parse: Callable[[str], Any]
    default: Any
    allowed: str  # the allowed values, in words, for the error message
    check: Callable[[Any], bool] = lambda _: True


def _int(text: str) -> int:
    return int(text.strip())


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _float(text: str) -> float:
    return float(text.strip())


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _one_of(*values: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda value: value in values), "one of " + ", ".join(values)


def _at_least(minimum: int, maximum: int = LONG_MAX) -> tuple[Callable[[Any], bool], str]:
    return (lambda value: minimum <= value <= maximum), f"an integer from {minimum} to {maximum}"


def _key(name: str, parse: Callable[[str], Any], default: Any, rule: Any = None) -> ConfigKey:
    if rule is None:
        return ConfigKey(name, parse, default, "a string")
    check, allowed = rule
    return ConfigKey(name, parse, default, allowed, check)


# log.message.format.version / message.format.version: the magic each value writes (the
# releases from 0.11.0 on write v2 record batches, as Kafka's)
MESSAGE_FORMAT_VERSIONS = {
    "0.9.0": 0,
    "0.10.0": 1,
    "0.11.0": 2,
    "1.0": 2,
    "1.1": 2,
    "2.0": 2,
    "2.1": 2,
}
# broker.protocol.max.version: the release a broker keeps to ("old code" in a rolling upgrade),
# oldest first
BROKER_RELEASES = ("0.9.0", "0.10.0", "0.10.1", "0.11.0", "1.0", "1.1", "2.0", "2.1")
# inter.broker.protocol.version, oldest first (Kafka's ApiVersion.scala): each value's release
# (the oldest broker.protocol.max.version that knows it) and the newest message format (magic)
# its brokers can replicate. A value without an IV suffix is its release's last IV level.
INTER_BROKER_PROTOCOLS: dict[str, tuple[str, int]] = {
    "0.9.0": ("0.9.0", 0),
    "0.10.0-IV0": ("0.10.0", 1),
    "0.10.0": ("0.10.0", 1),
    "0.11.0-IV0": ("0.11.0", 2),
    "0.11.0-IV1": ("0.11.0", 2),
    "0.11.0-IV2": ("0.11.0", 2),
    "0.11.0": ("0.11.0", 2),
    "1.0-IV0": ("1.0", 2),
    "1.0": ("1.0", 2),
    "1.1-IV0": ("1.1", 2),
    "1.1": ("1.1", 2),
    "2.0-IV0": ("2.0", 2),
    "2.0-IV1": ("2.0", 2),
    "2.0": ("2.0", 2),
    "2.1-IV0": ("2.1", 2),
    "2.1-IV1": ("2.1", 2),
    "2.1-IV2": ("2.1", 2),
    "2.1": ("2.1", 2),
}
INTER_BROKER_PROTOCOL_VERSIONS = tuple(INTER_BROKER_PROTOCOLS)
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
CLEANUP_POLICIES = ("delete", "compact")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"


def _host_port(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and int(port) < 65536


def host_and_port(value: str) -> tuple[str, int]:
    """("127.0.0.1", 9092) of "PLAINTEXT://127.0.0.1:9092" or of "127.0.0.1:9092"."""
    host, _, port = (
        value.partition("://")[2].rpartition(":") if "://" in value else value.rpartition(":")
    )
    return host, int(port)


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` of ``listeners`` or ``advertised.listeners``. An empty host
    means every interface (for ``listeners``)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def _listeners(text: str) -> tuple[Listener, ...]:
    listeners = []
    for part in _list(text):
        name, separator, address = part.partition("://")
        host, _, port = address.rpartition(":")
        if not separator or not name or not port.isdigit() or int(port) > 65535:
            raise ValueError(part)
        listeners.append(Listener(name.upper(), host.strip("[]"), int(port)))
    names = [listener.name for listener in listeners]
    if not listeners or len(set(names)) != len(names):
        raise ValueError(text)
    return tuple(listeners)


def _protocol_map(text: str) -> dict[str, str]:
    mapping = {}
    for part in _list(text):
        name, separator, protocol = part.partition(":")
        if not separator or protocol.strip() not in SECURITY_PROTOCOLS:
            raise ValueError(part)
        mapping[name.strip().upper()] = protocol.strip()
    return mapping


def _optional_int(text: str) -> int | None:
    return int(text.strip()) if text.strip() else None


def _optional(minimum: int, maximum: int) -> tuple[Callable[[Any], bool], str]:
    check, allowed = _at_least(minimum, maximum)
    return (lambda value: value is None or check(value)), f"empty or {allowed}"


def _connection_overrides(text: str) -> bool:
    try:
        connection_overrides(text)
    except ValueError:
        return False
    return True


def connection_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``host:count,host:count``."""
    overrides = {}
    for part in _list(text):
        host, separator, count = part.rpartition(":")
        if not separator or not host or not count.strip().isdigit():
            raise ValueError(part)
        overrides[host.strip()] = int(count)
    return overrides


def _only(value: Any, why: str) -> tuple[Callable[[Any], bool], str]:
    """A key whose only allowed value is the one tidelog implements."""
    return (lambda given: given == value), f"{_shown(value) or 'empty'} only ({why})"


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(part) for part in value)
    return str(value)


def config_text(value: Any) -> str:
    """A parsed value as a properties file writes it (DescribeConfigs answers with it)."""
    return _shown(value)


def _remote_uri(value: str) -> bool:
    return value == "" or value.startswith(("file://", "s3://"))


def _throttled_replicas(value: str) -> bool:
    from tidelog.replication.throttle import valid_throttled_replicas

    return valid_throttled_replicas(value)


def _policies(value: tuple[str, ...]) -> bool:
    return bool(value) and all(policy in CLEANUP_POLICIES for policy in value)


# (topic key, broker key or None, key definition). A topic key's default is its broker key's value.
# Kafka's rule (an entry with an offset index entry when the largest timestamp grew), or at most
# one entry per minute of timestamps per segment (the granularity KIP-32/KIP-33 also proposed).
TIMEINDEX_GRANULARITY_MS = {"index.interval": 0, "minute": 60_000}
TIMEINDEX_GRANULARITIES = tuple(TIMEINDEX_GRANULARITY_MS)

_TOPIC_KEYS: list[tuple[str, str | None, Callable[[str], Any], Any, Any]] = [
    ("segment.bytes", "log.segment.bytes", _int, 1073741824, _at_least(14, INT_MAX)),
    ("segment.ms", "log.roll.ms", _int, 604800000, _at_least(1)),
    ("segment.index.bytes", "log.index.size.max.bytes", _int, 10485760, _at_least(8, INT_MAX)),
    ("index.interval.bytes", "log.index.interval.bytes", _int, 4096, _at_least(0, INT_MAX)),
    ("retention.ms", "log.retention.ms", _int, 604800000, _at_least(-1)),
    ("retention.bytes", "log.retention.bytes", _int, -1, _at_least(-1)),
    (
        "message.timestamp.type",
        "log.message.timestamp.type",
        _str,
        "CreateTime",
        _one_of(*TIMESTAMP_TYPES),
    ),
    (
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.difference.max.ms",
        _int,
        LONG_MAX,
        _at_least(0),
    ),
    (
        "message.format.version",
        "log.message.format.version",
        _str,
        "0.10.0",
        _one_of(*MESSAGE_FORMAT_VERSIONS),
    ),
    (
        "cleanup.policy",
        "log.cleanup.policy",
        _list,
        ("delete",),
        (_policies, "a comma-separated list of delete, compact"),
    ),
    ("min.insync.replicas", "min.insync.replicas", _int, 1, _at_least(1, INT_MAX)),
    ("flush.messages", "log.flush.interval.messages", _int, LONG_MAX, _at_least(1)),
    ("max.message.bytes", "message.max.bytes", _int, 1000012, _at_least(0, INT_MAX)),
    ("remote.storage.enable", None, _bool, False, (lambda _: True, "true or false")),
    ("local.retention.ms", "log.local.retention.ms", _int, -2, _at_least(-2)),
    ("local.retention.bytes", "log.local.retention.bytes", _int, -2, _at_least(-2)),
    # the log cleaner (Kafka 0.10's names and defaults)
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        _float,
        0.5,
        (lambda value: 0 <= value <= 1, "a number from 0 to 1"),
    ),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms", _int, 86400000, _at_least(0)),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", _int, 0, _at_least(0)),
    # tidelog's: one remoteLogIndex entry per this many bytes of remote data
    (
        "remote.log.index.interval.bytes",
        "remote.log.index.interval.bytes",
        _int,
        1048576,
        _at_least(1, INT_MAX),
    ),
    # KIP-73's replication throttle: the replicas the brokers' throttled rates apply to
    (
        "leader.replication.throttled.replicas",
        None,
        _str,
        "",
        (_throttled_replicas, "'*' or partition:broker pairs separated by ',' (0:1,1:2)"),
    ),
    (
        "follower.replication.throttled.replicas",
        None,
        _str,
        "",
        (_throttled_replicas, "'*' or partition:broker pairs separated by ',' (0:1,1:2)"),
    ),
    # the codec the leader stores: the producer's, or one it recompresses to (Kafka's values;
    # zstd only on topics of message format v2)
    ("compression.type", "compression.type", _str, "producer", _one_of(*COMPRESSION_TYPES)),
    # tidelog's: how often the time index gets an entry (KIP-32/KIP-33's minute alternative)
    (
        "timeindex.granularity",
        "log.timeindex.granularity",
        _str,
        "index.interval",
        _one_of(*TIMEINDEX_GRANULARITIES),
    ),
]

TOPIC_KEYS: dict[str, ConfigKey] = {
    name: _key(name, parse, default, rule) for name, _, parse, default, rule in _TOPIC_KEYS
}
# Settings passed as they are to the remote storage back end (tidelog/tiered/storage.py).
RSM_CONFIG_PREFIX = "rsm.config."
TOPIC_TO_BROKER_KEY = {name: broker for name, broker, *_ in _TOPIC_KEYS if broker}

_TRUE_OR_FALSE = (lambda _: True, "true or false")

BROKER_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in [
        _key("broker.id", _int, None, _at_least(0, INT_MAX)),
        _key("reserved.broker.max.id", _int, 1000, _at_least(0, INT_MAX)),
        _key("broker.rack", _str, None),
        _key(
            "listeners",
            _listeners,
            _listeners(DEFAULT_LISTENERS),
            (bool, "a comma-separated list of NAME://host:port"),
        ),
        _key(
            "advertised.listeners",
            _listeners,
            None,
            (bool, "a comma-separated list of NAME://host:port"),
        ),
        # Kafka 0.10's older way to say the same; used only when listeners is not set.
        _key("host.name", _str, ""),
        _key("port", _int, 9092, _at_least(0, 65535)),
        _key("advertised.host.name", _str, None),
        _key("advertised.port", _int, None, _at_least(0, 65535)),
        _key(
            "listener.security.protocol.map",
            _protocol_map,
            _protocol_map(",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)),
            (
                bool,
                "a comma-separated list of NAME:PROTOCOL, PROTOCOL one of "
                + ", ".join(SECURITY_PROTOCOLS),
            ),
        ),
        _key("inter.broker.listener.name", _str, None),
        _key(
            "security.inter.broker.protocol",
            _str,
            "PLAINTEXT",
            _only("PLAINTEXT", "tidelog serves PLAINTEXT listeners only"),
        ),
        _key("max.connections.per.ip", _int, INT_MAX, _at_least(1, INT_MAX)),
        _key(
            "max.connections.per.ip.overrides",
            _str,
            "",
            (_connection_overrides, "a comma-separated list of host:count"),
        ),
        _key("connections.max.idle.ms", _int, 600000, _at_least(1)),
        # tidelog's: how far a connection's requests are read ahead of their answers
        _key("connection.max.inflight.requests", _int, 1000, _at_least(1, INT_MAX)),
        _key("connection.max.inflight.bytes", _int, 64 * 1024 * 1024, _at_least(1, INT_MAX)),
        _key("log.dirs", _list, ("/tmp/tidelog-logs",), (bool, "a comma-separated list of dirs")),
        _key("log.dir", _str, "/tmp/tidelog-logs", (bool, "a directory")),
        _key("zookeeper.connect", _str, "127.0.0.1:2181"),
        _key("zookeeper.session.timeout.ms", _int, 6000, _at_least(1000, INT_MAX)),
        _key("zookeeper.connection.timeout.ms", _optional_int, None, _optional(1, INT_MAX)),
        _key(
            "zookeeper.set.acl", _bool, False, _only(False, "tidelog writes ZooKeeper without ACLs")
        ),
        _key("num.partitions", _int, 1, _at_least(1, INT_MAX)),
        _key("auto.create.topics.enable", _bool, True, _TRUE_OR_FALSE),
        _key("delete.topic.enable", _bool, True, _TRUE_OR_FALSE),
        _key("default.replication.factor", _int, 1, _at_least(1, INT_MAX)),
        _key(
            "inter.broker.protocol.version",
            _str,
            "0.10.0",
            _one_of(*INTER_BROKER_PROTOCOL_VERSIONS),
        ),
        _key("replica.lag.time.max.ms", _int, 10000, _at_least(1)),
        _key("replica.fetch.wait.max.ms", _int, 500, _at_least(0, INT_MAX)),
        _key("replica.fetch.min.bytes", _int, 1, _at_least(1, INT_MAX)),
        _key("replica.fetch.max.bytes", _int, 1048576, _at_least(0, INT_MAX)),
        # the bytes of one REPLICA_FETCH answer, all partitions together (Kafka's default)
        _key("replica.fetch.response.max.bytes", _int, 10485760, _at_least(0, INT_MAX)),
        _key("replica.fetch.backoff.ms", _int, 1000, _at_least(0, INT_MAX)),
        _key("replica.socket.timeout.ms", _int, 30000, _at_least(1, INT_MAX)),
        # incremental fetch sessions between brokers (KIP-227); tidelog has no session-less
        # REPLICA_FETCH, so at least one slot (inter.broker.protocol.version 0.9.0 fetches plainly)
        _key("max.incremental.fetch.session.cache.slots", _int, 1000, _at_least(1, INT_MAX)),
        # Kafka's default is 30 s; tidelog's controller waits for each round of requests before
        # the next, so one unresponsive (paused) broker would hold elections up that long.
        _key("controller.socket.timeout.ms", _int, 10000, _at_least(1, INT_MAX)),
        # tidelog's own: how a new follower truncates (Kafka 0.10 used the high watermark).
        _key(
            "replica.truncation.mode",
            _str,
            "leader-epoch",
            _one_of("leader-epoch", "high-watermark"),
        ),
        # tidelog's own, for tests: this broker's clock runs this far ahead (negative: behind).
        _key("broker.clock.skew.ms", _int, 0, (lambda _: True, "an integer (milliseconds)")),
        # tidelog's own: behave as a broker of this release (its API versions, its settings).
        _key("broker.protocol.max.version", _str, "0.10.1", _one_of(*BROKER_RELEASES)),
        _key("unclean.leader.election.enable", _bool, False, _TRUE_OR_FALSE),
        _key("auto.leader.rebalance.enable", _bool, True, _TRUE_OR_FALSE),
        _key("leader.imbalance.per.broker.percentage", _int, 10, _at_least(0, 100)),
        _key("leader.imbalance.check.interval.seconds", _int, 300, _at_least(1, INT_MAX)),
        _key("controlled.shutdown.enable", _bool, True, _TRUE_OR_FALSE),
        # KIP-73: bytes a second for throttled replicas (/config/brokers/{id} overrides them)
        _key("leader.replication.throttled.rate", _int, LONG_MAX, _at_least(0)),
        _key("follower.replication.throttled.rate", _int, LONG_MAX, _at_least(0)),
        _key("controlled.shutdown.max.retries", _int, 3, _at_least(1, INT_MAX)),
        _key("controlled.shutdown.retry.backoff.ms", _int, 5000, _at_least(0, INT_MAX)),
        _key("socket.request.max.bytes", _int, 104857600, _at_least(1, INT_MAX)),
        _key("log.retention.check.interval.ms", _int, 300000, _at_least(1)),
        _key("log.retention.minutes", _int, None, _at_least(-1, INT_MAX)),
        _key("log.retention.hours", _int, 168, _at_least(-1, INT_MAX)),
        _key("log.roll.hours", _int, 168, _at_least(1, INT_MAX)),
        _key("log.roll.jitter.ms", _int, 0, _only(0, "segments roll without jitter")),
        _key("log.roll.jitter.hours", _int, 0, _only(0, "segments roll without jitter")),
        _key("log.preallocate", _bool, False, _only(False, "segment files grow as they fill")),
        _key("authorizer.class.name", _str, "", _only("", "tidelog has no authorizer")),
        _key(
            "create.topic.policy.class.name",
            _str,
            "",
            _only("", "tidelog has no topic creation policies"),
        ),
        _key("quota.producer.default", _int, LONG_MAX, _only(LONG_MAX, "tidelog has no quotas")),
        _key("quota.consumer.default", _int, LONG_MAX, _only(LONG_MAX, "tidelog has no quotas")),
        # tidelog's own: where the admin HTTP API listens (port 0: any free port).
        _key("admin.listener", _str, "127.0.0.1:0", (_host_port, "host:port")),
        _key("log.flush.interval.ms", _int, LONG_MAX, _at_least(1)),
        _key("log.flush.offset.checkpoint.interval.ms", _int, 60000, _at_least(1)),
        _key("log.flush.start.offset.checkpoint.interval.ms", _int, 60000, _at_least(1)),
        _key("replica.high.watermark.checkpoint.interval.ms", _int, 5000, _at_least(1)),
        # the log cleaner (Kafka 0.10's names and defaults)
        _key("log.cleaner.enable", _bool, True, (lambda _: True, "true or false")),
        _key("log.cleaner.threads", _int, 1, _at_least(1, 64)),
        _key("log.cleaner.dedupe.buffer.size", _int, 134217728, _at_least(24, 2**40)),
        _key(
            "log.cleaner.io.buffer.load.factor",
            _float,
            0.9,
            (lambda value: 0 < value <= 1, "a number above 0, at most 1"),
        ),
        _key("log.cleaner.backoff.ms", _int, 15000, _at_least(0)),
        # tidelog's own: the design's generational compaction (tidelog/log/cleaner.py)
        _key("log.cleaner.generational.enable", _bool, False, (lambda _: True, "true or false")),
        # consumer groups and __consumer_offsets (Kafka 0.10's names and defaults)
        _key("offsets.topic.num.partitions", _int, 50, _at_least(1, INT_MAX)),
        _key("offsets.topic.replication.factor", _int, 3, _at_least(1, 32767)),
        _key("offsets.topic.segment.bytes", _int, 104857600, _at_least(14, INT_MAX)),
        _key("offsets.retention.minutes", _int, 1440, _at_least(1, INT_MAX)),
        _key("offsets.retention.check.interval.ms", _int, 600000, _at_least(1)),
        # idempotent producers (KIP-98): how long a partition keeps a producer id's state after
        # its last batch (Kafka 2.1 expires producer ids by this), and how often it looks
        # (Kafka 2.1's fixed 10 minutes; the setting is Kafka 3.4's name for it)
        _key("transactional.id.expiration.ms", _int, 604800000, _at_least(1, INT_MAX)),
        _key("producer.id.expiration.check.interval.ms", _int, 600000, _at_least(1, INT_MAX)),
        _key("offsets.commit.timeout.ms", _int, 5000, _at_least(1, INT_MAX)),
        _key("offsets.commit.required.acks", _int, -1, (lambda v: v in (-1, 1), "-1 or 1")),
        _key("offsets.load.buffer.size", _int, 5242880, _at_least(1, INT_MAX)),
        _key("offset.metadata.max.bytes", _int, 4096, _at_least(0, INT_MAX)),
        _key("group.min.session.timeout.ms", _int, 6000, _at_least(0, INT_MAX)),
        _key("group.max.session.timeout.ms", _int, 300000, _at_least(0, INT_MAX)),
        # Tiered storage (KIP-405): Kafka's names, plus tidelog's remote.log.storage.uri (where
        # the tier lives, an fsspec URI: file:// or s3://) and rsm.config.* (back-end options).
        _key("remote.log.storage.system.enable", _bool, False, (lambda _: True, "true or false")),
        _key("remote.log.manager.task.interval.ms", _int, 30000, _at_least(1)),
        _key("remote.log.reader.threads", _int, 10, _at_least(1, 1000)),
        _key("remote.fetch.max.wait.ms", _int, 500, _at_least(1, INT_MAX)),
        _key(
            "remote.log.storage.uri",
            _str,
            "",
            (_remote_uri, "an fsspec URI starting with file:// or s3://"),
        ),
    ]
}
for _topic_name, _broker_name in TOPIC_TO_BROKER_KEY.items():
    if _broker_name not in BROKER_KEYS:
        _topic = TOPIC_KEYS[_topic_name]
        BROKER_KEYS[_broker_name] = ConfigKey(
            _broker_name, _topic.parse, _topic.default, _topic.allowed, _topic.check
        )

# Kafka 0.10 keys that tune the JVM broker's internals (threads, buffers, queues, metrics, the
# security providers of listeners tidelog does not serve). They are accepted, and the broker
# says once at start that they do not apply.
NOT_APPLICABLE_KEYS: dict[str, str] = {
    **dict.fromkeys(
        [
            "num.network.threads",
            "num.io.threads",
            "background.threads",
            "queued.max.requests",
            "num.recovery.threads.per.data.dir",
            "num.replica.fetchers",
        ],
        "one event loop does this work",
    ),
    **dict.fromkeys(
        [
            "socket.send.buffer.bytes",
            "socket.receive.buffer.bytes",
            "replica.socket.receive.buffer.bytes",
        ],
        "the kernel sizes socket buffers",
    ),
    **dict.fromkeys(
        [
            "request.timeout.ms",
            "fetch.purgatory.purge.interval.requests",
            "producer.purgatory.purge.interval.requests",
            "log.flush.scheduler.interval.ms",
            "log.segment.delete.delay.ms",
            "zookeeper.sync.time.ms",
            "broker.id.generation.enable",
        ],
        "a JVM broker internal",
    ),
    **dict.fromkeys(
        [
            "metric.reporters",
            "metrics.num.samples",
            "metrics.sample.window.ms",
            "metrics.recording.level",
            "quota.window.num",
            "quota.window.size.seconds",
            "replication.quota.window.num",
            "replication.quota.window.size.seconds",
        ],
        "tidelog's metrics are on the admin API's /metrics",
    ),
    **dict.fromkeys(
        [
            "principal.builder.class",
            "ssl.protocol",
            "ssl.provider",
            "ssl.cipher.suites",
            "ssl.enabled.protocols",
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.password",
            "ssl.key.password",
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.password",
            "ssl.keymanager.algorithm",
            "ssl.trustmanager.algorithm",
            "ssl.endpoint.identification.algorithm",
            "ssl.secure.random.implementation",
            "ssl.client.auth",
            "sasl.mechanism.inter.broker.protocol",
            "sasl.enabled.mechanisms",
            "sasl.kerberos.service.name",
            "sasl.kerberos.kinit.cmd",
            "sasl.kerberos.ticket.renew.window.factor",
            "sasl.kerberos.ticket.renew.jitter",
            "sasl.kerberos.min.time.before.relogin",
            "sasl.kerberos.principal.to.local.rules",
        ],
        "tidelog serves PLAINTEXT listeners only",
    ),
}


def parse_value(key: ConfigKey, text: str) -> Any:
    try:
        value = key.parse(text)
    except ValueError:
        raise ConfigError(f"{key.name}: {text!r} is not valid; allowed: {key.allowed}") from None
    if not key.check(value):
        raise ConfigError(f"{key.name}: {text!r} is not allowed; allowed: {key.allowed}")
    return value


def broker_config(raw: Mapping[str, str]) -> dict[str, Any]:
    """A broker's settings from server.properties (plus overrides); broker.id is required.

    Keys that Kafka 0.10 derives from others are resolved here, with Kafka's precedence:
    log.retention.ms over .minutes over .hours, log.roll.ms over log.roll.hours, log.dirs over
    log.dir, listeners over host.name/port, advertised.listeners over
    advertised.host.name/advertised.port over listeners. The keys of NOT_APPLICABLE_KEYS are
    accepted and left out of the result; rsm.config.* keys go to the remote tier's back end."""
    rsm_config = {key: value for key, value in raw.items() if key.startswith(RSM_CONFIG_PREFIX)}
    applicable = {
        name: text
        for name, text in raw.items()
        if name not in NOT_APPLICABLE_KEYS and name not in rsm_config
    }
    values = parse_config(applicable, BROKER_KEYS)
    values.update(rsm_config)
    if values["remote.log.storage.system.enable"] and not values["remote.log.storage.uri"]:
        raise ConfigError(
            "remote.log.storage.uri: missing; allowed: an fsspec URI starting with file:// or "
            "s3:// (remote.log.storage.system.enable is true)"
        )
    if values["broker.id"] is None:
        raise ConfigError("broker.id: missing; allowed: an integer from 0 to 2147483647")
    if values["broker.id"] > values["reserved.broker.max.id"]:
        raise ConfigError(
            f"broker.id: {values['broker.id']} is not allowed; allowed: at most "
            f"reserved.broker.max.id ({values['reserved.broker.max.id']})"
        )
    if values["replica.socket.timeout.ms"] < values["replica.fetch.wait.max.ms"]:
        # as Kafka requires: a fetch may be held that long before it is answered
        raise ConfigError(
            f"replica.socket.timeout.ms: {values['replica.socket.timeout.ms']} is not allowed; "
            f"allowed: at least replica.fetch.wait.max.ms ({values['replica.fetch.wait.max.ms']})"
        )
    if values["replica.fetch.wait.max.ms"] > values["replica.lag.time.max.ms"]:
        # as Kafka requires: an idle follower would otherwise drop out of the ISR between fetches
        raise ConfigError(
            f"replica.fetch.wait.max.ms: {values['replica.fetch.wait.max.ms']} is not allowed; "
            f"allowed: at most replica.lag.time.max.ms ({values['replica.lag.time.max.ms']})"
        )
    _keep_to_release(raw, values)
    if "log.retention.ms" not in raw:
        if values["log.retention.minutes"] is not None:
            values["log.retention.ms"] = _scaled(values["log.retention.minutes"], 60_000)
        else:
            values["log.retention.ms"] = _scaled(values["log.retention.hours"], 3_600_000)
    if "log.roll.ms" not in raw:
        values["log.roll.ms"] = values["log.roll.hours"] * 3_600_000
    if "log.dirs" not in raw:
        values["log.dirs"] = (values["log.dir"],)
    _resolve_listeners(raw, values)
    return values


def release_of(version: str) -> str:
    """The release (of BROKER_RELEASES) that introduced an inter.broker.protocol.version or
    log.message.format.version value: "0.11.0-IV2" -> "0.11.0"."""
    if version in INTER_BROKER_PROTOCOLS:
        return INTER_BROKER_PROTOCOLS[version][0]
    return version.partition("-")[0]


def _keep_to_release(raw: Mapping[str, str], values: dict[str, Any]) -> None:
    """A broker knows no inter-broker protocol or message format after its release
    (broker.protocol.max.version): a later value is refused, and where the default is later
    (0.10.0 on a 0.9.0 broker) the key defaults to the release's own. Then, as Kafka requires,
    the message format must be one the inter-broker protocol replicates (v2 needs 0.11.0-IV0)."""
    release = values["broker.protocol.max.version"]
    newest = BROKER_RELEASES.index(release)
    for name, known in (
        ("inter.broker.protocol.version", INTER_BROKER_PROTOCOL_VERSIONS),
        ("log.message.format.version", tuple(MESSAGE_FORMAT_VERSIONS)),
    ):
        allowed = [v for v in known if BROKER_RELEASES.index(release_of(v)) <= newest]
        if name not in raw:
            if values[name] not in allowed:
                values[name] = allowed[-1]
        elif values[name] not in allowed:
            raise ConfigError(
                f"{name}: {raw[name]!r} is not allowed with broker.protocol.max.version="
                f"{release}; allowed: {', '.join(allowed)}"
            )
    protocol = values["inter.broker.protocol.version"]
    message_format = values["log.message.format.version"]
    if values["compression.type"] == "zstd":
        raise ConfigError(
            "compression.type: 'zstd' is not allowed for the broker as a whole; allowed: "
            "producer, uncompressed, gzip, snappy, lz4 (zstd needs message format 2.1, a topic's "
            "choice: set compression.type=zstd on such a topic)"
        )
    if MESSAGE_FORMAT_VERSIONS[message_format] > INTER_BROKER_PROTOCOLS[protocol][1]:
        first = next(
            v
            for v, (_, magic) in INTER_BROKER_PROTOCOLS.items()
            if magic >= MESSAGE_FORMAT_VERSIONS[message_format]
        )
        raise ConfigError(
            f"log.message.format.version: {message_format!r} is not allowed with "
            f"inter.broker.protocol.version={protocol}; allowed: a format up to the protocol's "
            f"(raise inter.broker.protocol.version to {first} or later first)"
        )


def check_format_supported(values: Mapping[str, Any], prefix: str = "") -> None:
    """A topic's format and codec that do not go together: zstd before format 2.1 (the log
    cleaner and the remote tier take every format). ``values``: topic-level names, parsed."""
    if values.get("compression.type") == "zstd" and values["message.format.version"] != "2.1":
        raise ConfigError(
            f"{prefix}compression.type: 'zstd' is not allowed with {prefix}"
            f"message.format.version={values['message.format.version']}; allowed: producer, "
            "uncompressed, gzip, snappy, lz4 (zstd needs message format 2.1, as in Kafka)"
        )


def _scaled(value: int, unit_ms: int) -> int:
    return -1 if value < 0 else value * unit_ms


def _resolve_listeners(raw: Mapping[str, str], values: dict[str, Any]) -> None:
    """listeners, advertised.listeners (never an empty or 0.0.0.0 host: another broker or a
    client has to connect to it) and inter.broker.listener.name, checked against
    listener.security.protocol.map as Kafka checks them."""
    if "listeners" not in raw and ("host.name" in raw or "port" in raw):
        values["listeners"] = (Listener("PLAINTEXT", values["host.name"], values["port"]),)
    listeners: tuple[Listener, ...] = values["listeners"]
    protocols: dict[str, str] = values["listener.security.protocol.map"]
    for listener in listeners:
        protocol = protocols.get(listener.name)
        if protocol is None:
            raise ConfigError(
                f"listeners: {listener} is not allowed; allowed: a listener name of "
                f"listener.security.protocol.map ({', '.join(protocols)})"
            )
        if protocol != "PLAINTEXT":
            raise ConfigError(
                f"listeners: {listener} uses security protocol {protocol}; allowed: listeners "
                "whose security protocol is PLAINTEXT (tidelog serves no SSL or SASL)"
            )
    if len({listener.port for listener in listeners if listener.port}) != len(
        [listener for listener in listeners if listener.port]
    ):
        raise ConfigError(f"listeners: {_text(listeners)} is not allowed; each needs its own port")
    advertised: tuple[Listener, ...] | None = values["advertised.listeners"]
    if advertised is None:
        if "advertised.host.name" in raw or "advertised.port" in raw:
            first = listeners[0]
            advertised = (
                Listener(
                    "PLAINTEXT",
                    values["advertised.host.name"] or values["host.name"] or first.host,
                    values["advertised.port"] or first.port,
                ),
            )
        else:
            advertised = listeners
    names = {listener.name for listener in listeners}
    for listener in advertised:
        if listener.name not in names:
            raise ConfigError(
                f"advertised.listeners: {listener} is not allowed; allowed: the names of "
                f"listeners ({', '.join(sorted(names))})"
            )
        if "advertised.listeners" in raw and listener.host in ("", "0.0.0.0", "::"):
            raise ConfigError(
                f"advertised.listeners: {listener} is not allowed; allowed: a host that clients "
                "can connect to (not empty, not 0.0.0.0)"
            )
    values["advertised.listeners"] = advertised
    if values["inter.broker.listener.name"] is not None:
        if "security.inter.broker.protocol" in raw:
            raise ConfigError(
                "inter.broker.listener.name: set together with security.inter.broker.protocol; "
                "allowed: only one of the two"
            )
        inter_broker = values["inter.broker.listener.name"].upper()
    else:
        inter_broker = values["security.inter.broker.protocol"]
    if inter_broker not in {listener.name for listener in advertised}:
        raise ConfigError(
            f"inter.broker.listener.name: {inter_broker!r} is not allowed; allowed: the name of "
            f"an advertised listener ({', '.join(listener.name for listener in advertised)})"
        )
    values["inter.broker.listener.name"] = inter_broker


def _text(listeners: tuple[Listener, ...]) -> str:
    return ",".join(str(listener) for listener in listeners)


def not_applicable_note(raw: Mapping[str, str]) -> str | None:
    """The one line a broker logs at start for the keys of NOT_APPLICABLE_KEYS it was given."""
    given = sorted(name for name in raw if name in NOT_APPLICABLE_KEYS)
    if not given:
        return None
    reasons: dict[str, list[str]] = {}
    for name in given:
        reasons.setdefault(NOT_APPLICABLE_KEYS[name], []).append(name)
    parts = "; ".join(f"{', '.join(names)} ({why})" for why, names in reasons.items())
    return f"accepted but not applicable to tidelog: {parts}"


def config_listing() -> str:
    """Every key a broker accepts, from the declarations: its default and allowed values, then
    the topic-level keys and the Kafka keys accepted without effect."""
    lines = ["Broker keys (server.properties, --override):"]
    for name in sorted(BROKER_KEYS):
        key = BROKER_KEYS[name]
        lines.append(f"  {name} = {_shown(key.default)}    [{key.allowed}]")
    lines.append("Topic keys (topic create --config, /config/topics/{topic}):")
    for name in sorted(TOPIC_KEYS):
        key = TOPIC_KEYS[name]
        broker = TOPIC_TO_BROKER_KEY.get(name)
        default = f"broker's {broker}" if broker else _shown(key.default)
        lines.append(f"  {name} = {default}    [{key.allowed}]")
    lines.append("Kafka keys accepted without effect (the broker says so at start):")
    for name in sorted(NOT_APPLICABLE_KEYS):
        lines.append(f"  {name}    ({NOT_APPLICABLE_KEYS[name]})")
    return "\n".join(lines)


def parse_config(raw: Mapping[str, str], keys: Mapping[str, ConfigKey]) -> dict[str, Any]:
    """Every key's value: defaults, overridden by ``raw``. Unknown keys are an error."""
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0], [*keys, *NOT_APPLICABLE_KEYS]))
    values = {name: key.default for name, key in keys.items()}
    for name, text in raw.items():
        values[name] = parse_value(keys[name], text)
    return values


def unknown_key_message(name: str, keys: Iterable[str]) -> str:
    """``unknown configuration key 'x'``, with the closest known key when one is close."""
    close = difflib.get_close_matches(name, list(keys), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown configuration key {name!r}{hint} (`tidelog broker --list-configs` lists them)"


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java-style .properties file: key=value lines, # and ! comments."""
    properties = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, separator, value = line.partition("=")
        if not separator:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        properties[key.strip()] = value.strip()
    return properties


def topic_defaults(broker: Mapping[str, Any]) -> dict[str, Any]:
    """Topic-level values as the broker's settings make them, before any topic override."""
    values = {name: key.default for name, key in TOPIC_KEYS.items()}
    for topic_name, broker_name in TOPIC_TO_BROKER_KEY.items():
        if broker_name in broker:
            values[topic_name] = broker[broker_name]
    return values
