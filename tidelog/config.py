"""Broker and topic configuration under Kafka's own key names, declared as data.

A broker reads ``server.properties``; a topic's overrides live in ZooKeeper under
``/config/topics/{t}``. Each key says how its value is parsed and what is allowed, so a bad value
fails at start with a message that names the key and the allowed values. A topic key without an
override takes its broker default (``segment.bytes`` falls back to ``log.segment.bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


MESSAGE_FORMAT_VERSIONS = {"0.9.0": 0, "0.10.0": 1}
INTER_BROKER_PROTOCOL_VERSIONS = ("0.9.0", "0.10.0-IV0", "0.10.0")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")


def _host_port(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and int(port) < 65536


def host_and_port(value: str) -> tuple[str, int]:
    """("127.0.0.1", 9092) of "PLAINTEXT://127.0.0.1:9092" or of "127.0.0.1:9092"."""
    host, _, port = (
        value.partition("://")[2].rpartition(":") if "://" in value else value.rpartition(":")
    )
    return host, int(port)


def _listener(value: str) -> bool:
    scheme, _, address = value.partition("://")
    return scheme == "PLAINTEXT" and _host_port(address)


def _remote_uri(value: str) -> bool:
    return value == "" or value.startswith(("file://", "s3://"))


def _policies(value: tuple[str, ...]) -> bool:
    return bool(value) and all(policy in CLEANUP_POLICIES for policy in value)


# (topic key, broker key or None, key definition). A topic key's default is its broker key's value.
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
    ("max.message.bytes", "message.max.bytes", _int, 1000012, _at_least(0, INT_MAX)),
    ("remote.storage.enable", None, _bool, False, (lambda _: True, "true or false")),
    ("local.retention.ms", "log.local.retention.ms", _int, -2, _at_least(-2)),
    ("local.retention.bytes", "log.local.retention.bytes", _int, -2, _at_least(-2)),
    # tidelog's: one remoteLogIndex entry per this many bytes of remote data
    (
        "remote.log.index.interval.bytes",
        "remote.log.index.interval.bytes",
        _int,
        1048576,
        _at_least(1, INT_MAX),
    ),
]

TOPIC_KEYS: dict[str, ConfigKey] = {
    name: _key(name, parse, default, rule) for name, _, parse, default, rule in _TOPIC_KEYS
}
# Settings passed as they are to the remote storage back end (tidelog/tiered/storage.py).
RSM_CONFIG_PREFIX = "rsm.config."
TOPIC_TO_BROKER_KEY = {name: broker for name, broker, *_ in _TOPIC_KEYS if broker}

BROKER_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in [
        _key("broker.id", _int, None, _at_least(0, INT_MAX)),
        _key("listeners", _str, "PLAINTEXT://127.0.0.1:9092", (_listener, "PLAINTEXT://host:port")),
        _key("log.dirs", _list, ("/tmp/tidelog-logs",), (bool, "a comma-separated list of dirs")),
        _key("zookeeper.connect", _str, "127.0.0.1:2181"),
        _key("zookeeper.session.timeout.ms", _int, 6000, _at_least(1000, INT_MAX)),
        _key("num.partitions", _int, 1, _at_least(1, INT_MAX)),
        _key("auto.create.topics.enable", _bool, True, (lambda _: True, "true or false")),
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
        _key("replica.socket.timeout.ms", _int, 30000, _at_least(1, INT_MAX)),
        # tidelog's own: how a new follower truncates (Kafka 0.10 used the high watermark).
        _key(
            "replica.truncation.mode",
            _str,
            "leader-epoch",
            _one_of("leader-epoch", "high-watermark"),
        ),
        # tidelog's own, for tests: this broker's clock runs this far ahead (negative: behind).
        _key("broker.clock.skew.ms", _int, 0, (lambda _: True, "an integer (milliseconds)")),
        _key("unclean.leader.election.enable", _bool, False, (lambda _: True, "true or false")),
        _key("socket.request.max.bytes", _int, 104857600, _at_least(1, INT_MAX)),
        _key("log.retention.check.interval.ms", _int, 300000, _at_least(1)),
        # tidelog's own: where the admin HTTP API listens (port 0: any free port).
        _key("admin.listener", _str, "127.0.0.1:0", (_host_port, "host:port")),
        _key("log.flush.interval.ms", _int, LONG_MAX, _at_least(1)),
        _key("log.flush.offset.checkpoint.interval.ms", _int, 60000, _at_least(1)),
        _key("log.flush.start.offset.checkpoint.interval.ms", _int, 60000, _at_least(1)),
        _key("replica.high.watermark.checkpoint.interval.ms", _int, 5000, _at_least(1)),
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


def parse_value(key: ConfigKey, text: str) -> Any:
    try:
        value = key.parse(text)
    except ValueError:
        raise ConfigError(f"{key.name}: {text!r} is not valid; allowed: {key.allowed}") from None
    if not key.check(value):
        raise ConfigError(f"{key.name}: {text!r} is not allowed; allowed: {key.allowed}")
    return value


def broker_config(raw: Mapping[str, str]) -> dict[str, Any]:
    """A broker's settings from server.properties (plus overrides); broker.id is required."""
    rsm_config = {key: value for key, value in raw.items() if key.startswith(RSM_CONFIG_PREFIX)}
    values = parse_config({k: v for k, v in raw.items() if k not in rsm_config}, BROKER_KEYS)
    values.update(rsm_config)
    if values["remote.log.storage.system.enable"] and not values["remote.log.storage.uri"]:
        raise ConfigError(
            "remote.log.storage.uri: missing; allowed: an fsspec URI starting with file:// or "
            "s3:// (remote.log.storage.system.enable is true)"
        )
    if values["broker.id"] is None:
        raise ConfigError("broker.id: missing; allowed: an integer from 0 to 2147483647")
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
    return values


def parse_config(raw: Mapping[str, str], keys: Mapping[str, ConfigKey]) -> dict[str, Any]:
    """Every key's value: defaults, overridden by ``raw``. Unknown keys are an error."""
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConfigError(f"unknown configuration key {unknown[0]!r}; known keys: {sorted(keys)}")
    values = {name: key.default for name, key in keys.items()}
    for name, text in raw.items():
        values[name] = parse_value(keys[name], text)
    return values


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
