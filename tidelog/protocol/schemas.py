"""The request and response schemas of the APIs tidelog serves, as data: those 0.9/0.10
clients use, every version Kafka 0.11 to 2.1 added to them, and the admin APIs of those
releases that clients call (DescribeConfigs, AlterConfigs, DeleteRecords, CreatePartitions,
DescribeLogDirs).

Field names follow Kafka's protocol guide (Kafka 2.1.0's clients/.../requests/*.java). Adding a
version is adding a schema here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from tidelog.protocol.types import (
    BOOLEAN,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    Array,
    Schema,
    schema,
)


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    GROUP_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSETS_FOR_LEADER_EPOCH = 23
    # the admin APIs of Kafka 0.11 to 2.1 that clients' admin tools call
    DELETE_RECORDS = 21
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    # tidelog's own, between brokers only (never advertised to clients): incremental fetch
    # sessions in the spirit of KIP-227
    REPLICA_FETCH = 10001


REQUEST_HEADER = schema(
    ("api_key", INT16),
    ("api_version", INT16),
    ("correlation_id", INT32),
    ("client_id", NULLABLE_STRING),
)
RESPONSE_HEADER = schema(("correlation_id", INT32))

# -- ApiVersions ---------------------------------------------------------------------------------

API_VERSIONS_REQUEST_V0 = schema()
_API_VERSIONS = (
    "api_versions",
    Array(schema(("api_key", INT16), ("min_version", INT16), ("max_version", INT16))),
)
API_VERSIONS_RESPONSE_V0 = schema(("error_code", INT16), _API_VERSIONS)
# v1 adds the throttle time; v2 is v1 (throttled answers go out before the throttling)
API_VERSIONS_RESPONSE_V1 = schema(("error_code", INT16), _API_VERSIONS, ("throttle_time_ms", INT32))

# -- Metadata ------------------------------------------------------------------------------------

_PARTITION_METADATA = schema(
    ("error_code", INT16),
    ("partition", INT32),
    ("leader", INT32),
    ("replicas", Array(INT32)),
    ("isr", Array(INT32)),
)
METADATA_REQUEST_V0 = schema(("topics", Array(STRING)))
METADATA_REQUEST_V1 = schema(("topics", Array(STRING, nullable=True)))  # null: every topic
METADATA_RESPONSE_V0 = schema(
    ("brokers", Array(schema(("node_id", INT32), ("host", STRING), ("port", INT32)))),
    (
        "topic_metadata",
        Array(
            schema(
                ("error_code", INT16),
                ("topic", STRING),
                ("partition_metadata", Array(_PARTITION_METADATA)),
            )
        ),
    ),
)
_BROKER_V1 = schema(
    ("node_id", INT32), ("host", STRING), ("port", INT32), ("rack", NULLABLE_STRING)
)
_TOPIC_METADATA_V1 = schema(
    ("error_code", INT16),
    ("topic", STRING),
    ("is_internal", BOOLEAN),
    ("partition_metadata", Array(_PARTITION_METADATA)),
)
METADATA_RESPONSE_V1 = schema(
    ("brokers", Array(_BROKER_V1)),
    ("controller_id", INT32),
    ("topic_metadata", Array(_TOPIC_METADATA_V1)),
)
METADATA_RESPONSE_V2 = schema(
    ("brokers", Array(_BROKER_V1)),
    ("cluster_id", NULLABLE_STRING),
    ("controller_id", INT32),
    ("topic_metadata", Array(_TOPIC_METADATA_V1)),
)

# -- Produce -------------------------------------------------------------------------------------

_PRODUCE_TOPIC_DATA = (
    "topic_data",
    Array(
        schema(
            ("topic", STRING),
            ("data", Array(schema(("partition", INT32), ("record_set", RECORDS)))),
        )
    ),
)
PRODUCE_REQUEST_V0 = schema(("acks", INT16), ("timeout", INT32), _PRODUCE_TOPIC_DATA)
# v3 adds the transactional id and carries record batches (magic 2) only; v4-v7 are v3 (v7: zstd)
PRODUCE_REQUEST_V3 = schema(
    ("transactional_id", NULLABLE_STRING), ("acks", INT16), ("timeout", INT32), _PRODUCE_TOPIC_DATA
)


def _produce_response(partition: Schema, throttle: bool) -> Schema:
    responses = (
        "responses",
        Array(schema(("topic", STRING), ("partition_responses", Array(partition)))),
    )
    return schema(responses, ("throttle_time_ms", INT32)) if throttle else schema(responses)


_PRODUCE_PARTITION_V0 = schema(("partition", INT32), ("error_code", INT16), ("base_offset", INT64))
_PRODUCE_PARTITION_V2 = (*_PRODUCE_PARTITION_V0, ("log_append_time", INT64))
PRODUCE_RESPONSE_V0 = _produce_response(_PRODUCE_PARTITION_V0, throttle=False)
PRODUCE_RESPONSE_V1 = _produce_response(_PRODUCE_PARTITION_V0, throttle=True)
PRODUCE_RESPONSE_V2 = _produce_response(_PRODUCE_PARTITION_V2, throttle=True)
# v5 adds the log start offset
PRODUCE_RESPONSE_V5 = _produce_response(
    (*_PRODUCE_PARTITION_V2, ("log_start_offset", INT64)), throttle=True
)

# -- Fetch ---------------------------------------------------------------------------------------


def _fetch_topics(*partition: tuple[str, object]) -> tuple[str, object]:
    return ("topics", Array(schema(("topic", STRING), ("partitions", Array(schema(*partition))))))


_FETCH_TOPICS = _fetch_topics(("partition", INT32), ("fetch_offset", INT64), ("max_bytes", INT32))
# v5 adds the follower's log start offset (-1 from consumers)
_FETCH_TOPICS_V5 = _fetch_topics(
    ("partition", INT32), ("fetch_offset", INT64), ("log_start_offset", INT64), ("max_bytes", INT32)
)
# v9 adds the fetcher's current leader epoch (KIP-320; -1: not checked)
_FETCH_TOPICS_V9 = _fetch_topics(
    ("partition", INT32),
    ("current_leader_epoch", INT32),
    ("fetch_offset", INT64),
    ("log_start_offset", INT64),
    ("max_bytes", INT32),
)
_FETCH_HEAD = (("replica_id", INT32), ("max_wait_time", INT32), ("min_bytes", INT32))
FETCH_REQUEST_V0 = schema(*_FETCH_HEAD, _FETCH_TOPICS)
FETCH_REQUEST_V3 = schema(*_FETCH_HEAD, ("max_bytes", INT32), _FETCH_TOPICS)
# v4 adds the isolation level (0 read_uncommitted, 1 read_committed) and reads magic 2
FETCH_REQUEST_V4 = schema(
    *_FETCH_HEAD, ("max_bytes", INT32), ("isolation_level", INT8), _FETCH_TOPICS
)
FETCH_REQUEST_V5 = schema(
    *_FETCH_HEAD, ("max_bytes", INT32), ("isolation_level", INT8), _FETCH_TOPICS_V5
)
# v7 adds KIP-227's fetch session: its id and epoch, and the partitions it no longer wants
_FORGOTTEN_TOPICS = (
    "forgotten_topics_data",
    Array(schema(("topic", STRING), ("partitions", Array(INT32)))),
)


def _fetch_request_in_session(topics: tuple[str, object]) -> Schema:
    return schema(
        *_FETCH_HEAD,
        ("max_bytes", INT32),
        ("isolation_level", INT8),
        ("session_id", INT32),
        ("session_epoch", INT32),
        topics,
        _FORGOTTEN_TOPICS,
    )


FETCH_REQUEST_V7 = _fetch_request_in_session(_FETCH_TOPICS_V5)
FETCH_REQUEST_V9 = _fetch_request_in_session(_FETCH_TOPICS_V9)


def _fetch_responses(*partition: tuple[str, object]) -> tuple[str, object]:
    return (
        "responses",
        Array(schema(("topic", STRING), ("partition_responses", Array(schema(*partition))))),
    )


_FETCH_PARTITION_HEAD = (("partition", INT32), ("error_code", INT16), ("high_watermark", INT64))
_FETCH_RESPONSES = _fetch_responses(*_FETCH_PARTITION_HEAD, ("record_set", RECORDS))
_ABORTED_TRANSACTIONS = (
    "aborted_transactions",
    Array(schema(("producer_id", INT64), ("first_offset", INT64)), nullable=True),
)
# v4 adds the last stable offset and the aborted transactions; v5 the log start offset
_FETCH_RESPONSES_V4 = _fetch_responses(
    *_FETCH_PARTITION_HEAD,
    ("last_stable_offset", INT64),
    _ABORTED_TRANSACTIONS,
    ("record_set", RECORDS),
)
_FETCH_RESPONSES_V5 = _fetch_responses(
    *_FETCH_PARTITION_HEAD,
    ("last_stable_offset", INT64),
    ("log_start_offset", INT64),
    _ABORTED_TRANSACTIONS,
    ("record_set", RECORDS),
)
FETCH_RESPONSE_V0 = schema(_FETCH_RESPONSES)
FETCH_RESPONSE_V1 = schema(("throttle_time_ms", INT32), _FETCH_RESPONSES)
FETCH_RESPONSE_V4 = schema(("throttle_time_ms", INT32), _FETCH_RESPONSES_V4)
FETCH_RESPONSE_V5 = schema(("throttle_time_ms", INT32), _FETCH_RESPONSES_V5)
# v7 adds the session's error code and id
FETCH_RESPONSE_V7 = schema(
    ("throttle_time_ms", INT32), ("error_code", INT16), ("session_id", INT32), _FETCH_RESPONSES_V5
)


def fetch_magic(version: int) -> int:
    """The newest message format a Fetch of ``version`` reads (older data goes as it is, newer
    is converted down to it): v0-v1 read format v0, v2-v3 v1, v4 and later v2."""
    return 0 if version < 2 else 1 if version < 4 else 2


# KIP-227: a fetch session's epoch in a full fetch (0: open a session if the broker will keep
# one; -1: do not), and the session id of an answer for which the broker keeps none
FETCH_SESSION_INITIAL_EPOCH = 0
FETCH_SESSION_FINAL_EPOCH = -1
NO_FETCH_SESSION = 0
# REPLICA_FETCH: a Fetch v3 between brokers with a session (KIP-227's fields); "topics" names
# only the partitions whose fetch offset changed, "forgotten_topics" those no longer followed.
REPLICA_FETCH_REQUEST_V0 = schema(
    ("replica_id", INT32),
    ("max_wait_time", INT32),
    ("min_bytes", INT32),
    ("max_bytes", INT32),
    ("session_id", INT32),
    ("session_epoch", INT32),
    _FETCH_TOPICS,
    ("forgotten_topics", Array(schema(("topic", STRING), ("partitions", Array(INT32))))),
)
REPLICA_FETCH_RESPONSE_V0 = schema(
    ("throttle_time_ms", INT32), ("error_code", INT16), ("session_id", INT32), _FETCH_RESPONSES
)
# v1 carries log start offsets both ways, as Fetch v5 does (followers of
# inter.broker.protocol.version 0.11.0-IV1 to 1.0): a DeleteRecords waits for the followers' own
REPLICA_FETCH_REQUEST_V1 = schema(
    ("replica_id", INT32),
    ("max_wait_time", INT32),
    ("min_bytes", INT32),
    ("max_bytes", INT32),
    ("session_id", INT32),
    ("session_epoch", INT32),
    _FETCH_TOPICS_V5,
    ("forgotten_topics", Array(schema(("topic", STRING), ("partitions", Array(INT32))))),
)
REPLICA_FETCH_RESPONSE_V1 = schema(
    ("throttle_time_ms", INT32), ("error_code", INT16), ("session_id", INT32), _FETCH_RESPONSES_V5
)

# -- ListOffsets ---------------------------------------------------------------------------------

LIST_OFFSETS_REQUEST_V0 = schema(
    ("replica_id", INT32),
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                (
                    "partitions",
                    Array(
                        schema(
                            ("partition", INT32), ("timestamp", INT64), ("max_num_offsets", INT32)
                        )
                    ),
                ),
            )
        ),
    ),
)
_LIST_OFFSETS_TOPICS_V1 = (
    "topics",
    Array(
        schema(
            ("topic", STRING),
            ("partitions", Array(schema(("partition", INT32), ("timestamp", INT64)))),
        )
    ),
)
LIST_OFFSETS_REQUEST_V1 = schema(("replica_id", INT32), _LIST_OFFSETS_TOPICS_V1)
# v2 adds the isolation level; v3 is v2; v4 adds the current leader epoch (KIP-320)
LIST_OFFSETS_REQUEST_V2 = schema(
    ("replica_id", INT32), ("isolation_level", INT8), _LIST_OFFSETS_TOPICS_V1
)
LIST_OFFSETS_REQUEST_V4 = schema(
    ("replica_id", INT32),
    ("isolation_level", INT8),
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                (
                    "partitions",
                    Array(
                        schema(
                            ("partition", INT32),
                            ("current_leader_epoch", INT32),
                            ("timestamp", INT64),
                        )
                    ),
                ),
            )
        ),
    ),
)


def _list_offsets_response(partition: Schema, throttle: bool = False) -> Schema:
    responses = (
        "responses",
        Array(schema(("topic", STRING), ("partition_responses", Array(partition)))),
    )
    return schema(("throttle_time_ms", INT32), responses) if throttle else schema(responses)


LIST_OFFSETS_RESPONSE_V0 = _list_offsets_response(
    schema(("partition", INT32), ("error_code", INT16), ("offsets", Array(INT64)))
)
_LIST_OFFSETS_PARTITION_V1 = schema(
    ("partition", INT32), ("error_code", INT16), ("timestamp", INT64), ("offset", INT64)
)
LIST_OFFSETS_RESPONSE_V1 = _list_offsets_response(_LIST_OFFSETS_PARTITION_V1)
# v2 adds the throttle time; v4 the leader epoch of the offset found
LIST_OFFSETS_RESPONSE_V2 = _list_offsets_response(_LIST_OFFSETS_PARTITION_V1, throttle=True)
LIST_OFFSETS_RESPONSE_V4 = _list_offsets_response(
    (*_LIST_OFFSETS_PARTITION_V1, ("leader_epoch", INT32)), throttle=True
)

# -- OffsetsForLeaderEpoch (replication) ---------------------------------------------------------


def _epoch_topics(name: str, *partition: tuple[str, object]) -> tuple[str, object]:
    return ("topics", Array(schema(("topic", STRING), (name, Array(schema(*partition))))))


OFFSETS_FOR_LEADER_EPOCH_REQUEST_V0 = schema(
    _epoch_topics("partitions", ("partition", INT32), ("leader_epoch", INT32))
)
# v1 is v0; v2 adds the requester's current leader epoch (KIP-320 fencing)
OFFSETS_FOR_LEADER_EPOCH_REQUEST_V2 = schema(
    _epoch_topics(
        "partitions",
        ("partition", INT32),
        ("current_leader_epoch", INT32),
        ("leader_epoch", INT32),
    )
)
OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V0 = schema(
    _epoch_topics("partitions", ("error_code", INT16), ("partition", INT32), ("end_offset", INT64))
)
# v1 adds the epoch the end offset belongs to; v2 the throttle time
_EPOCH_END_V1 = _epoch_topics(
    "partitions",
    ("error_code", INT16),
    ("partition", INT32),
    ("leader_epoch", INT32),
    ("end_offset", INT64),
)
OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V1 = schema(_EPOCH_END_V1)
OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V2 = schema(("throttle_time_ms", INT32), _EPOCH_END_V1)


# -- Consumer groups -----------------------------------------------------------------------------

GROUP_COORDINATOR_REQUEST_V0 = schema(("group_id", STRING))
GROUP_COORDINATOR_RESPONSE_V0 = schema(
    ("error_code", INT16), ("coordinator_id", INT32), ("host", STRING), ("port", INT32)
)
_GROUP_PROTOCOLS = (
    "group_protocols",
    Array(schema(("protocol_name", STRING), ("protocol_metadata", BYTES))),
)
JOIN_GROUP_REQUEST_V0 = schema(
    ("group_id", STRING),
    ("session_timeout", INT32),
    ("member_id", STRING),
    ("protocol_type", STRING),
    _GROUP_PROTOCOLS,
)
JOIN_GROUP_REQUEST_V1 = schema(
    ("group_id", STRING),
    ("session_timeout", INT32),
    ("rebalance_timeout", INT32),
    ("member_id", STRING),
    ("protocol_type", STRING),
    _GROUP_PROTOCOLS,
)
JOIN_GROUP_RESPONSE_V0 = schema(
    ("error_code", INT16),
    ("generation_id", INT32),
    ("group_protocol", STRING),
    ("leader_id", STRING),
    ("member_id", STRING),
    ("members", Array(schema(("member_id", STRING), ("member_metadata", BYTES)))),
)
SYNC_GROUP_REQUEST_V0 = schema(
    ("group_id", STRING),
    ("generation_id", INT32),
    ("member_id", STRING),
    ("group_assignment", Array(schema(("member_id", STRING), ("member_assignment", BYTES)))),
)
SYNC_GROUP_RESPONSE_V0 = schema(("error_code", INT16), ("member_assignment", BYTES))
HEARTBEAT_REQUEST_V0 = schema(("group_id", STRING), ("generation_id", INT32), ("member_id", STRING))
HEARTBEAT_RESPONSE_V0 = schema(("error_code", INT16))
LEAVE_GROUP_REQUEST_V0 = schema(("group_id", STRING), ("member_id", STRING))
LEAVE_GROUP_RESPONSE_V0 = schema(("error_code", INT16))
# The "consumer" protocol type's own bytes, opaque to the coordinator: a member's subscription
# (JoinGroup's protocol_metadata) and the leader's assignment to it (SyncGroup's
# member_assignment), as Kafka's ConsumerProtocol writes them
CONSUMER_SUBSCRIPTION_V0 = schema(
    ("version", INT16), ("topics", Array(STRING)), ("user_data", BYTES)
)
CONSUMER_ASSIGNMENT_V0 = schema(
    ("version", INT16),
    ("partitions", Array(schema(("topic", STRING), ("partitions", Array(INT32))))),
    ("user_data", BYTES),
)


def _offset_commit_request(partition: Schema, *header: tuple[str, object]) -> Schema:
    topics = Array(schema(("topic", STRING), ("partitions", Array(partition))))
    return schema(("group_id", STRING), *header, ("topics", topics))


OFFSET_COMMIT_REQUEST_V0 = _offset_commit_request(
    schema(("partition", INT32), ("offset", INT64), ("metadata", NULLABLE_STRING))
)
OFFSET_COMMIT_REQUEST_V1 = _offset_commit_request(
    schema(
        ("partition", INT32),
        ("offset", INT64),
        ("timestamp", INT64),
        ("metadata", NULLABLE_STRING),
    ),
    ("generation_id", INT32),
    ("member_id", STRING),
)
OFFSET_COMMIT_REQUEST_V2 = _offset_commit_request(
    schema(("partition", INT32), ("offset", INT64), ("metadata", NULLABLE_STRING)),
    ("generation_id", INT32),
    ("member_id", STRING),
    ("retention_time", INT64),
)
OFFSET_COMMIT_RESPONSE_V0 = schema(
    (
        "responses",
        Array(
            schema(
                ("topic", STRING),
                (
                    "partition_responses",
                    Array(schema(("partition", INT32), ("error_code", INT16))),
                ),
            )
        ),
    )
)
OFFSET_FETCH_REQUEST_V0 = schema(
    ("group_id", STRING),
    (
        "topics",
        Array(schema(("topic", STRING), ("partitions", Array(schema(("partition", INT32)))))),
    ),
)
OFFSET_FETCH_RESPONSE_V0 = schema(
    (
        "responses",
        Array(
            schema(
                ("topic", STRING),
                (
                    "partition_responses",
                    Array(
                        schema(
                            ("partition", INT32),
                            ("offset", INT64),
                            ("metadata", NULLABLE_STRING),
                            ("error_code", INT16),
                        )
                    ),
                ),
            )
        ),
    )
)
DESCRIBE_GROUPS_REQUEST_V0 = schema(("group_ids", Array(STRING)))
DESCRIBE_GROUPS_RESPONSE_V0 = schema(
    (
        "groups",
        Array(
            schema(
                ("error_code", INT16),
                ("group_id", STRING),
                ("state", STRING),
                ("protocol_type", STRING),
                ("protocol", STRING),
                (
                    "members",
                    Array(
                        schema(
                            ("member_id", STRING),
                            ("client_id", STRING),
                            ("client_host", STRING),
                            ("member_metadata", BYTES),
                            ("member_assignment", BYTES),
                        )
                    ),
                ),
            )
        ),
    )
)
LIST_GROUPS_REQUEST_V0 = schema()
LIST_GROUPS_RESPONSE_V0 = schema(
    ("error_code", INT16),
    ("groups", Array(schema(("group_id", STRING), ("protocol_type", STRING)))),
)

# -- Topic admin ---------------------------------------------------------------------------------


def _create_topics_request(config_value: object, *tail: tuple[str, object]) -> Schema:
    topic = schema(
        ("topic", STRING),
        ("num_partitions", INT32),
        ("replication_factor", INT16),
        (
            "replica_assignment",
            Array(schema(("partition", INT32), ("replicas", Array(INT32)))),
        ),
        ("config_entries", Array(schema(("config_name", STRING), ("config_value", config_value)))),
    )
    return schema(("create_topic_requests", Array(topic)), ("timeout", INT32), *tail)


CREATE_TOPICS_REQUEST_V0 = _create_topics_request(STRING)
CREATE_TOPICS_REQUEST_V1 = _create_topics_request(NULLABLE_STRING, ("validate_only", BOOLEAN))
CREATE_TOPICS_RESPONSE_V0 = schema(
    ("topic_errors", Array(schema(("topic", STRING), ("error_code", INT16))))
)
CREATE_TOPICS_RESPONSE_V1 = schema(
    (
        "topic_errors",
        Array(schema(("topic", STRING), ("error_code", INT16), ("error_message", NULLABLE_STRING))),
    )
)
DELETE_TOPICS_REQUEST_V0 = schema(("topics", Array(STRING)), ("timeout", INT32))
DELETE_TOPICS_RESPONSE_V0 = schema(
    ("topic_error_codes", Array(schema(("topic", STRING), ("error_code", INT16))))
)

# -- Idempotent producers (KIP-98) ---------------------------------------------------------------

# Kafka 2.1's InitProducerIdRequest/Response: v1 is v0 (a throttled answer goes out before the
# throttling); a transactional id is null for an idempotent producer without transactions
INIT_PRODUCER_ID_REQUEST_V0 = schema(
    ("transactional_id", NULLABLE_STRING), ("transaction_timeout_ms", INT32)
)
INIT_PRODUCER_ID_RESPONSE_V0 = schema(
    ("throttle_time_ms", INT32),
    ("error_code", INT16),
    ("producer_id", INT64),
    ("producer_epoch", INT16),
)


# -- Kafka 0.11 to 2.1: Metadata, the group APIs and topic admin --------------------------------

# Metadata v4 adds whether a topic named may be auto-created; v5-v7 are v4
METADATA_REQUEST_V4 = schema(
    ("topics", Array(STRING, nullable=True)), ("allow_auto_topic_creation", BOOLEAN)
)
_TOPIC_METADATA_V5 = schema(
    ("error_code", INT16),
    ("topic", STRING),
    ("is_internal", BOOLEAN),
    (
        "partition_metadata",
        Array((*_PARTITION_METADATA, ("offline_replicas", Array(INT32)))),
    ),
)
# v7 adds each partition's leader epoch (KIP-320)
_TOPIC_METADATA_V7 = schema(
    ("error_code", INT16),
    ("topic", STRING),
    ("is_internal", BOOLEAN),
    (
        "partition_metadata",
        Array(
            schema(
                ("error_code", INT16),
                ("partition", INT32),
                ("leader", INT32),
                ("leader_epoch", INT32),
                ("replicas", Array(INT32)),
                ("isr", Array(INT32)),
                ("offline_replicas", Array(INT32)),
            )
        ),
    ),
)


def _metadata_response(topic: Schema) -> Schema:
    """Metadata v3 and later: v2's fields after the throttle time."""
    return schema(
        ("throttle_time_ms", INT32),
        ("brokers", Array(_BROKER_V1)),
        ("cluster_id", NULLABLE_STRING),
        ("controller_id", INT32),
        ("topic_metadata", Array(topic)),
    )


METADATA_RESPONSE_V3 = _metadata_response(_TOPIC_METADATA_V1)
METADATA_RESPONSE_V5 = _metadata_response(_TOPIC_METADATA_V5)
METADATA_RESPONSE_V7 = _metadata_response(_TOPIC_METADATA_V7)


def throttled(response: Schema) -> Schema:
    """A response of Kafka 0.11 and later: the same fields after the throttle time (always 0
    here: tidelog has no quotas)."""
    return schema(("throttle_time_ms", INT32), *response)


# FindCoordinator (GroupCoordinator renamed) v1 names the kind of coordinator: 0 a group's,
# 1 a transactional id's; its answer adds an error message. v2 is v1.
COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1
FIND_COORDINATOR_REQUEST_V1 = schema(("coordinator_key", STRING), ("coordinator_type", INT8))
FIND_COORDINATOR_RESPONSE_V1 = schema(
    ("throttle_time_ms", INT32),
    ("error_code", INT16),
    ("error_message", NULLABLE_STRING),
    ("coordinator_id", INT32),
    ("host", STRING),
    ("port", INT32),
)
# OffsetCommit v3-v4 are v2 (v3 answers with the throttle time); v5 drops the retention time
# (the broker's offsets.retention.minutes applies); v6 adds each offset's leader epoch
OFFSET_COMMIT_REQUEST_V5 = _offset_commit_request(
    schema(("partition", INT32), ("offset", INT64), ("metadata", NULLABLE_STRING)),
    ("generation_id", INT32),
    ("member_id", STRING),
)
OFFSET_COMMIT_REQUEST_V6 = _offset_commit_request(
    schema(
        ("partition", INT32),
        ("offset", INT64),
        ("committed_leader_epoch", INT32),
        ("metadata", NULLABLE_STRING),
    ),
    ("generation_id", INT32),
    ("member_id", STRING),
)
OFFSET_COMMIT_RESPONSE_V3 = throttled(OFFSET_COMMIT_RESPONSE_V0)
# OffsetFetch v2 takes null topics (every partition the group committed) and answers a
# group-wide error at the top; v3 adds the throttle time (v4 is v3); v5 each offset's epoch
OFFSET_FETCH_REQUEST_V2 = schema(
    ("group_id", STRING),
    (
        "topics",
        Array(
            schema(("topic", STRING), ("partitions", Array(schema(("partition", INT32))))),
            nullable=True,
        ),
    ),
)


def _offset_fetch_response(*partition: tuple[str, object]) -> tuple[str, object]:
    return (
        "responses",
        Array(schema(("topic", STRING), ("partition_responses", Array(schema(*partition))))),
    )


_OFFSET_FETCH_RESPONSES = _offset_fetch_response(
    ("partition", INT32), ("offset", INT64), ("metadata", NULLABLE_STRING), ("error_code", INT16)
)
OFFSET_FETCH_RESPONSE_V2 = schema(_OFFSET_FETCH_RESPONSES, ("error_code", INT16))
OFFSET_FETCH_RESPONSE_V3 = throttled(OFFSET_FETCH_RESPONSE_V2)
OFFSET_FETCH_RESPONSE_V5 = schema(
    ("throttle_time_ms", INT32),
    _offset_fetch_response(
        ("partition", INT32),
        ("offset", INT64),
        ("leader_epoch", INT32),
        ("metadata", NULLABLE_STRING),
        ("error_code", INT16),
    ),
    ("error_code", INT16),
)
# JoinGroup v2-v3, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups v1-v2: the
# requests as before, the answers with the throttle time first
JOIN_GROUP_RESPONSE_V2 = throttled(JOIN_GROUP_RESPONSE_V0)
SYNC_GROUP_RESPONSE_V1 = throttled(SYNC_GROUP_RESPONSE_V0)
HEARTBEAT_RESPONSE_V1 = throttled(HEARTBEAT_RESPONSE_V0)
LEAVE_GROUP_RESPONSE_V1 = throttled(LEAVE_GROUP_RESPONSE_V0)
DESCRIBE_GROUPS_RESPONSE_V1 = throttled(DESCRIBE_GROUPS_RESPONSE_V0)
LIST_GROUPS_RESPONSE_V1 = throttled(LIST_GROUPS_RESPONSE_V0)
# CreateTopics v2-v3 are v1 answered with the throttle time; DeleteTopics v1-v3 likewise
CREATE_TOPICS_RESPONSE_V2 = throttled(CREATE_TOPICS_RESPONSE_V1)
DELETE_TOPICS_RESPONSE_V1 = throttled(DELETE_TOPICS_RESPONSE_V0)

# -- Admin APIs of Kafka 0.11 to 2.1 ------------------------------------------------------------

# ConfigResource types (Kafka's ConfigResource.Type), and where a described value comes from
# (DescribeConfigsResponse.ConfigSource, v1 and later)
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
CONFIG_SOURCE_TOPIC = 1  # a topic's override
CONFIG_SOURCE_STATIC_BROKER = 4  # the broker's properties file
CONFIG_SOURCE_DEFAULT = 5

_DESCRIBE_CONFIGS_RESOURCES = (
    "resources",
    Array(
        schema(
            ("resource_type", INT8),
            ("resource_name", STRING),
            ("config_names", Array(STRING, nullable=True)),  # null: every key
        )
    ),
)
DESCRIBE_CONFIGS_REQUEST_V0 = schema(_DESCRIBE_CONFIGS_RESOURCES)
# v1 adds whether each value's synonyms (the broker keys it falls back to) are wanted; v2 is v1
DESCRIBE_CONFIGS_REQUEST_V1 = schema(_DESCRIBE_CONFIGS_RESOURCES, ("include_synonyms", BOOLEAN))


def _describe_configs_response(*entry: tuple[str, object]) -> Schema:
    return schema(
        ("throttle_time_ms", INT32),
        (
            "resources",
            Array(
                schema(
                    ("error_code", INT16),
                    ("error_message", NULLABLE_STRING),
                    ("resource_type", INT8),
                    ("resource_name", STRING),
                    ("config_entries", Array(schema(*entry))),
                )
            ),
        ),
    )


DESCRIBE_CONFIGS_RESPONSE_V0 = _describe_configs_response(
    ("config_name", STRING),
    ("config_value", NULLABLE_STRING),
    ("read_only", BOOLEAN),
    ("is_default", BOOLEAN),
    ("is_sensitive", BOOLEAN),
)
DESCRIBE_CONFIGS_RESPONSE_V1 = _describe_configs_response(
    ("config_name", STRING),
    ("config_value", NULLABLE_STRING),
    ("read_only", BOOLEAN),
    ("config_source", INT8),
    ("is_sensitive", BOOLEAN),
    (
        "config_synonyms",
        Array(
            schema(
                ("config_name", STRING),
                ("config_value", NULLABLE_STRING),
                ("config_source", INT8),
            )
        ),
    ),
)
# AlterConfigs v1 is v0 (v1's throttled answers go out after the throttling)
ALTER_CONFIGS_REQUEST_V0 = schema(
    (
        "resources",
        Array(
            schema(
                ("resource_type", INT8),
                ("resource_name", STRING),
                (
                    "config_entries",
                    Array(schema(("config_name", STRING), ("config_value", NULLABLE_STRING))),
                ),
            )
        ),
    ),
    ("validate_only", BOOLEAN),
)
ALTER_CONFIGS_RESPONSE_V0 = schema(
    ("throttle_time_ms", INT32),
    (
        "resources",
        Array(
            schema(
                ("error_code", INT16),
                ("error_message", NULLABLE_STRING),
                ("resource_type", INT8),
                ("resource_name", STRING),
            )
        ),
    ),
)
# DeleteRecords v1 is v0; an offset of -1 means the high watermark
DELETE_RECORDS_REQUEST_V0 = schema(
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                ("partitions", Array(schema(("partition", INT32), ("offset", INT64)))),
            )
        ),
    ),
    ("timeout", INT32),
)
DELETE_RECORDS_RESPONSE_V0 = schema(
    ("throttle_time_ms", INT32),
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                (
                    "partitions",
                    Array(
                        schema(
                            ("partition", INT32), ("low_watermark", INT64), ("error_code", INT16)
                        )
                    ),
                ),
            )
        ),
    ),
)
# CreatePartitions v1 is v0; an assignment (nullable) names the replicas of each new partition
CREATE_PARTITIONS_REQUEST_V0 = schema(
    (
        "topic_partitions",
        Array(
            schema(
                ("topic", STRING),
                (
                    "new_partitions",
                    schema(
                        ("count", INT32),
                        ("assignment", Array(Array(INT32), nullable=True)),
                    ),
                ),
            )
        ),
    ),
    ("timeout", INT32),
    ("validate_only", BOOLEAN),
)
CREATE_PARTITIONS_RESPONSE_V0 = throttled(CREATE_TOPICS_RESPONSE_V1)
# DescribeLogDirs v1 is v0; null topics: every partition the broker holds
DESCRIBE_LOG_DIRS_REQUEST_V0 = schema(
    (
        "topics",
        Array(schema(("topic", STRING), ("partitions", Array(INT32))), nullable=True),
    )
)
DESCRIBE_LOG_DIRS_RESPONSE_V0 = schema(
    ("throttle_time_ms", INT32),
    (
        "log_dirs",
        Array(
            schema(
                ("error_code", INT16),
                ("log_dir", STRING),
                (
                    "topics",
                    Array(
                        schema(
                            ("topic", STRING),
                            (
                                "partitions",
                                Array(
                                    schema(
                                        ("partition", INT32),
                                        ("size", INT64),
                                        ("offset_lag", INT64),
                                        ("is_future", BOOLEAN),
                                    )
                                ),
                            ),
                        )
                    ),
                ),
            )
        ),
    ),
)


@dataclass(frozen=True)
class Api:
    """One API: its request and response schema for each supported version (index = version)."""

    key: ApiKey
    requests: tuple[Schema, ...]
    responses: tuple[Schema, ...]

    @property
    def max_version(self) -> int:
        return len(self.requests) - 1


APIS: dict[int, Api] = {
    api.key: api
    for api in [
        Api(
            ApiKey.API_VERSIONS,
            (API_VERSIONS_REQUEST_V0,) * 3,
            (API_VERSIONS_RESPONSE_V0, API_VERSIONS_RESPONSE_V1, API_VERSIONS_RESPONSE_V1),
        ),
        Api(
            ApiKey.METADATA,
            (METADATA_REQUEST_V0, METADATA_REQUEST_V1, METADATA_REQUEST_V1, METADATA_REQUEST_V1)
            + (METADATA_REQUEST_V4,) * 4,
            (METADATA_RESPONSE_V0, METADATA_RESPONSE_V1, METADATA_RESPONSE_V2)
            + (METADATA_RESPONSE_V3,) * 2
            + (METADATA_RESPONSE_V5,) * 2
            + (METADATA_RESPONSE_V7,),
        ),
        Api(
            ApiKey.PRODUCE,
            (PRODUCE_REQUEST_V0,) * 3 + (PRODUCE_REQUEST_V3,) * 5,
            (PRODUCE_RESPONSE_V0, PRODUCE_RESPONSE_V1)
            + (PRODUCE_RESPONSE_V2,) * 3
            + (PRODUCE_RESPONSE_V5,) * 3,
        ),
        Api(
            ApiKey.FETCH,
            (FETCH_REQUEST_V0,) * 3
            + (FETCH_REQUEST_V3, FETCH_REQUEST_V4, FETCH_REQUEST_V5, FETCH_REQUEST_V5)
            + (FETCH_REQUEST_V7,) * 2
            + (FETCH_REQUEST_V9,) * 2,
            (FETCH_RESPONSE_V0,)
            + (FETCH_RESPONSE_V1,) * 3
            + (FETCH_RESPONSE_V4, FETCH_RESPONSE_V5, FETCH_RESPONSE_V5)
            + (FETCH_RESPONSE_V7,) * 4,
        ),
        Api(
            ApiKey.LIST_OFFSETS,
            (LIST_OFFSETS_REQUEST_V0, LIST_OFFSETS_REQUEST_V1)
            + (LIST_OFFSETS_REQUEST_V2,) * 2
            + (LIST_OFFSETS_REQUEST_V4,),
            (LIST_OFFSETS_RESPONSE_V0, LIST_OFFSETS_RESPONSE_V1)
            + (LIST_OFFSETS_RESPONSE_V2,) * 2
            + (LIST_OFFSETS_RESPONSE_V4,),
        ),
        Api(
            ApiKey.OFFSETS_FOR_LEADER_EPOCH,
            (OFFSETS_FOR_LEADER_EPOCH_REQUEST_V0,) * 2 + (OFFSETS_FOR_LEADER_EPOCH_REQUEST_V2,),
            (
                OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V0,
                OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V1,
                OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V2,
            ),
        ),
        Api(
            ApiKey.GROUP_COORDINATOR,
            (GROUP_COORDINATOR_REQUEST_V0,) + (FIND_COORDINATOR_REQUEST_V1,) * 2,
            (GROUP_COORDINATOR_RESPONSE_V0,) + (FIND_COORDINATOR_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.JOIN_GROUP,
            (JOIN_GROUP_REQUEST_V0,) + (JOIN_GROUP_REQUEST_V1,) * 3,
            (JOIN_GROUP_RESPONSE_V0,) * 2 + (JOIN_GROUP_RESPONSE_V2,) * 2,
        ),
        Api(
            ApiKey.SYNC_GROUP,
            (SYNC_GROUP_REQUEST_V0,) * 3,
            (SYNC_GROUP_RESPONSE_V0,) + (SYNC_GROUP_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.HEARTBEAT,
            (HEARTBEAT_REQUEST_V0,) * 3,
            (HEARTBEAT_RESPONSE_V0,) + (HEARTBEAT_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.LEAVE_GROUP,
            (LEAVE_GROUP_REQUEST_V0,) * 3,
            (LEAVE_GROUP_RESPONSE_V0,) + (LEAVE_GROUP_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.OFFSET_COMMIT,
            (OFFSET_COMMIT_REQUEST_V0, OFFSET_COMMIT_REQUEST_V1)
            + (OFFSET_COMMIT_REQUEST_V2,) * 3
            + (OFFSET_COMMIT_REQUEST_V5, OFFSET_COMMIT_REQUEST_V6),
            (OFFSET_COMMIT_RESPONSE_V0,) * 3 + (OFFSET_COMMIT_RESPONSE_V3,) * 4,
        ),
        Api(
            ApiKey.OFFSET_FETCH,
            (OFFSET_FETCH_REQUEST_V0,) * 2 + (OFFSET_FETCH_REQUEST_V2,) * 4,
            (OFFSET_FETCH_RESPONSE_V0,) * 2
            + (OFFSET_FETCH_RESPONSE_V2,)
            + (OFFSET_FETCH_RESPONSE_V3,) * 2
            + (OFFSET_FETCH_RESPONSE_V5,),
        ),
        Api(
            ApiKey.DESCRIBE_GROUPS,
            (DESCRIBE_GROUPS_REQUEST_V0,) * 3,
            (DESCRIBE_GROUPS_RESPONSE_V0,) + (DESCRIBE_GROUPS_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.LIST_GROUPS,
            (LIST_GROUPS_REQUEST_V0,) * 3,
            (LIST_GROUPS_RESPONSE_V0,) + (LIST_GROUPS_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.CREATE_TOPICS,
            (CREATE_TOPICS_REQUEST_V0,) + (CREATE_TOPICS_REQUEST_V1,) * 3,
            (CREATE_TOPICS_RESPONSE_V0, CREATE_TOPICS_RESPONSE_V1)
            + (CREATE_TOPICS_RESPONSE_V2,) * 2,
        ),
        Api(
            ApiKey.DELETE_TOPICS,
            (DELETE_TOPICS_REQUEST_V0,) * 4,
            (DELETE_TOPICS_RESPONSE_V0,) + (DELETE_TOPICS_RESPONSE_V1,) * 3,
        ),
        # the admin APIs of Kafka 0.11 to 2.1
        Api(
            ApiKey.DESCRIBE_CONFIGS,
            (DESCRIBE_CONFIGS_REQUEST_V0,) + (DESCRIBE_CONFIGS_REQUEST_V1,) * 2,
            (DESCRIBE_CONFIGS_RESPONSE_V0,) + (DESCRIBE_CONFIGS_RESPONSE_V1,) * 2,
        ),
        Api(
            ApiKey.ALTER_CONFIGS, (ALTER_CONFIGS_REQUEST_V0,) * 2, (ALTER_CONFIGS_RESPONSE_V0,) * 2
        ),
        Api(
            ApiKey.DELETE_RECORDS,
            (DELETE_RECORDS_REQUEST_V0,) * 2,
            (DELETE_RECORDS_RESPONSE_V0,) * 2,
        ),
        Api(
            ApiKey.CREATE_PARTITIONS,
            (CREATE_PARTITIONS_REQUEST_V0,) * 2,
            (CREATE_PARTITIONS_RESPONSE_V0,) * 2,
        ),
        Api(
            ApiKey.DESCRIBE_LOG_DIRS,
            (DESCRIBE_LOG_DIRS_REQUEST_V0,) * 2,
            (DESCRIBE_LOG_DIRS_RESPONSE_V0,) * 2,
        ),
        Api(
            ApiKey.INIT_PRODUCER_ID,
            (INIT_PRODUCER_ID_REQUEST_V0,) * 2,
            (INIT_PRODUCER_ID_RESPONSE_V0,) * 2,
        ),
        Api(
            ApiKey.REPLICA_FETCH,
            (REPLICA_FETCH_REQUEST_V0, REPLICA_FETCH_REQUEST_V1),
            (REPLICA_FETCH_RESPONSE_V0, REPLICA_FETCH_RESPONSE_V1),
        ),
    ]
}

# -- Releases ------------------------------------------------------------------------------------

# What a broker of each release served: API -> the highest version (Kafka's Protocol.java at
# 0.9.0.1, 0.10.0.1 and 0.11.0.0, each request class's schemaVersions() from 1.0.0 to 2.1.0). An
# API not named was not served at all (a 0.9.0 broker has no ApiVersions and closes the
# connection of a client that asks). A broker serves and advertises the lower of this and what
# tidelog implements (APIS): every version Kafka 2.1 served of each API in APIS. Selected by
# broker.protocol.max.version.
_RELEASE_0_9_0 = {
    ApiKey.PRODUCE: 1,
    ApiKey.FETCH: 1,
    ApiKey.LIST_OFFSETS: 0,
    ApiKey.METADATA: 0,
    ApiKey.OFFSET_COMMIT: 2,
    ApiKey.OFFSET_FETCH: 1,
    ApiKey.GROUP_COORDINATOR: 0,
    ApiKey.JOIN_GROUP: 0,
    ApiKey.HEARTBEAT: 0,
    ApiKey.LEAVE_GROUP: 0,
    ApiKey.SYNC_GROUP: 0,
    ApiKey.DESCRIBE_GROUPS: 0,
    ApiKey.LIST_GROUPS: 0,
}
_RELEASE_0_10_0 = {
    **_RELEASE_0_9_0,
    ApiKey.PRODUCE: 2,
    ApiKey.FETCH: 2,
    ApiKey.METADATA: 1,
    ApiKey.API_VERSIONS: 0,
}
# tidelog's 0.10.1 is the set it served before 0.11's versions were added (Kafka 0.10.1 had no
# OffsetCommit v2 nor CreateTopics v1, which tidelog has always advertised with it)
_RELEASE_0_10_1 = {
    **_RELEASE_0_10_0,
    ApiKey.FETCH: 3,
    ApiKey.LIST_OFFSETS: 1,
    ApiKey.METADATA: 2,
    ApiKey.JOIN_GROUP: 1,
    ApiKey.CREATE_TOPICS: 1,
    ApiKey.DELETE_TOPICS: 0,
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: 0,
}
_RELEASE_0_11_0 = {
    **_RELEASE_0_10_1,
    ApiKey.PRODUCE: 3,
    ApiKey.FETCH: 5,
    ApiKey.LIST_OFFSETS: 2,
    ApiKey.METADATA: 4,
    ApiKey.OFFSET_COMMIT: 3,
    ApiKey.OFFSET_FETCH: 3,
    ApiKey.GROUP_COORDINATOR: 1,
    ApiKey.JOIN_GROUP: 2,
    ApiKey.HEARTBEAT: 1,
    ApiKey.LEAVE_GROUP: 1,
    ApiKey.SYNC_GROUP: 1,
    ApiKey.DESCRIBE_GROUPS: 1,
    ApiKey.LIST_GROUPS: 1,
    ApiKey.API_VERSIONS: 1,
    ApiKey.CREATE_TOPICS: 2,
    ApiKey.DELETE_TOPICS: 1,
    ApiKey.DELETE_RECORDS: 0,
    ApiKey.DESCRIBE_CONFIGS: 0,
    ApiKey.ALTER_CONFIGS: 0,
    ApiKey.INIT_PRODUCER_ID: 0,
}
_RELEASE_1_0 = {
    **_RELEASE_0_11_0,
    ApiKey.PRODUCE: 5,
    ApiKey.FETCH: 6,
    ApiKey.METADATA: 5,
    ApiKey.CREATE_PARTITIONS: 0,
    ApiKey.DESCRIBE_LOG_DIRS: 0,
}
_RELEASE_1_1 = {**_RELEASE_1_0, ApiKey.FETCH: 7, ApiKey.DESCRIBE_CONFIGS: 1}
_RELEASE_2_0 = {
    **_RELEASE_1_1,
    ApiKey.PRODUCE: 6,
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.GROUP_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: 1,
    ApiKey.DELETE_RECORDS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.INIT_PRODUCER_ID: 1,
}
_RELEASE_2_1 = {
    **_RELEASE_2_0,
    ApiKey.PRODUCE: 7,
    ApiKey.FETCH: 10,
    ApiKey.LIST_OFFSETS: 4,
    ApiKey.METADATA: 7,
    ApiKey.OFFSET_COMMIT: 6,
    ApiKey.OFFSET_FETCH: 5,
    ApiKey.DELETE_TOPICS: 3,
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: 2,
}
RELEASE_API_VERSIONS: dict[str, dict[ApiKey, int]] = {
    "0.9.0": _RELEASE_0_9_0,
    "0.10.0": _RELEASE_0_10_0,
    "0.10.1": _RELEASE_0_10_1,
    "0.11.0": _RELEASE_0_11_0,
    "1.0": _RELEASE_1_0,
    "1.1": _RELEASE_1_1,
    "2.0": _RELEASE_2_0,
    "2.1": _RELEASE_2_1,
}
# tidelog's own replication needs these from a broker of any release (leader-epoch truncation,
# incremental fetch sessions); no client of the 0.9/0.10.0 era sends them, and they are not
# advertised by such a broker.
INTER_BROKER_API_VERSIONS = {ApiKey.OFFSETS_FOR_LEADER_EPOCH: 0, ApiKey.REPLICA_FETCH: 1}
