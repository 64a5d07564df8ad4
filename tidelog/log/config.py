"""A partition log's settings: the topic-level keys, resolved against the broker's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tidelog.config import (
    LONG_MAX,
    MESSAGE_FORMAT_VERSIONS,
    TIMEINDEX_GRANULARITY_MS,
    TOPIC_KEYS,
    parse_config,
    topic_defaults,
)
from tidelog.records.format import Codec, TimestampType
from tidelog.records.validation import RecordsPolicy

# compression.type -> the codec the leader stores (None: the producer's)
COMPRESSION_CODECS: dict[str, Codec | None] = {
    "producer": None,
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


@dataclass(frozen=True)
class LogConfig:
    """One field per topic-level key, named after it (``segment.bytes`` -> ``segment_bytes``)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_format_version: str = "0.10.0"
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_insync_replicas: int = 1
    flush_messages: int = LONG_MAX
    max_message_bytes: int = 1000012
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    remote_log_index_interval_bytes: int = 1048576
    timeindex_granularity: str = "index.interval"
    compression_type: str = "producer"
    # KIP-73 (read by the replication throttle, not by the log)
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    @classmethod
    def from_topic_config(
        cls, overrides: Mapping[str, str] | None = None, broker: Mapping[str, Any] | None = None
    ) -> LogConfig:
        """The topic's settings: ``overrides`` (raw strings, as stored in ZooKeeper) on top of
        the broker's values (parsed, as from ``parse_config``). A broker of release 0.9.0
        keeps every topic at format v0."""
        values = topic_defaults(broker or {})
        if overrides:
            parsed = parse_config(overrides, TOPIC_KEYS)
            values.update({name: parsed[name] for name in overrides})
        if (broker or {}).get("broker.protocol.max.version") == "0.9.0":
            values["message.format.version"] = "0.9.0"  # a 0.9 broker writes format v0 only
        return cls(**{name.replace(".", "_"): value for name, value in values.items()})

    def to_properties(self) -> dict[str, str]:
        out = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, tuple):
                value = ",".join(value)
            elif isinstance(value, bool):
                value = str(value).lower()
            out[field.name.replace("_", ".")] = str(value)
        return out

    @property
    def magic(self) -> int:
        return MESSAGE_FORMAT_VERSIONS[self.message_format_version]

    @property
    def effective_local_retention_ms(self) -> int:
        """local.retention.ms, where -2 means retention.ms."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """local.retention.bytes, where -2 means retention.bytes."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def time_index_granularity_ms(self) -> int:
        """0 for an entry at every offset index entry (Kafka's), else the bucket width: an entry
        only when the largest timestamp reaches a later bucket than the last entry's."""
        return TIMEINDEX_GRANULARITY_MS[self.timeindex_granularity]

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def records_policy(self) -> RecordsPolicy:
        return RecordsPolicy(
            magic=self.magic,
            timestamp_type=(
                TimestampType.LOG_APPEND_TIME
                if self.message_timestamp_type == "LogAppendTime"
                else TimestampType.CREATE_TIME
            ),
            timestamp_difference_max_ms=self.message_timestamp_difference_max_ms,
            max_message_bytes=self.max_message_bytes,
            compacted=self.compacted,
            compression=COMPRESSION_CODECS[self.compression_type],
        )
