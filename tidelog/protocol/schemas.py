"""The request and response schemas of the APIs 0.9/0.10 clients use, as data.

Field names follow Kafka's protocol guide. Adding a version is adding a schema here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from tidelog.protocol.types import (
    BOOLEAN,
    BYTES,
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
    OFFSETS_FOR_LEADER_EPOCH = 23
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
API_VERSIONS_RESPONSE_V0 = schema(
    ("error_code", INT16),
    (
        "api_versions",
        Array(schema(("api_key", INT16), ("min_version", INT16), ("max_version", INT16))),
    ),
)

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

PRODUCE_REQUEST_V0 = schema(
    ("acks", INT16),
    ("timeout", INT32),
    (
        "topic_data",
        Array(
            schema(
                ("topic", STRING),
                ("data", Array(schema(("partition", INT32), ("record_set", RECORDS)))),
            )
        ),
    ),
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

# -- Fetch ---------------------------------------------------------------------------------------

_FETCH_TOPICS = (
    "topics",
    Array(
        schema(
            ("topic", STRING),
            (
                "partitions",
                Array(schema(("partition", INT32), ("fetch_offset", INT64), ("max_bytes", INT32))),
            ),
        )
    ),
)
FETCH_REQUEST_V0 = schema(
    ("replica_id", INT32), ("max_wait_time", INT32), ("min_bytes", INT32), _FETCH_TOPICS
)
FETCH_REQUEST_V3 = schema(
    ("replica_id", INT32),
    ("max_wait_time", INT32),
    ("min_bytes", INT32),
    ("max_bytes", INT32),
    _FETCH_TOPICS,
)
_FETCH_RESPONSES = (
    "responses",
    Array(
        schema(
            ("topic", STRING),
            (
                "partition_responses",
                Array(
                    schema(
                        ("partition", INT32),
                        ("error_code", INT16),
                        ("high_watermark", INT64),
                        ("record_set", RECORDS),
                    )
                ),
            ),
        )
    ),
)
FETCH_RESPONSE_V0 = schema(_FETCH_RESPONSES)
FETCH_RESPONSE_V1 = schema(("throttle_time_ms", INT32), _FETCH_RESPONSES)
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
LIST_OFFSETS_REQUEST_V1 = schema(
    ("replica_id", INT32),
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                ("partitions", Array(schema(("partition", INT32), ("timestamp", INT64)))),
            )
        ),
    ),
)


def _list_offsets_response(partition: Schema) -> Schema:
    return schema(
        (
            "responses",
            Array(schema(("topic", STRING), ("partition_responses", Array(partition)))),
        )
    )


LIST_OFFSETS_RESPONSE_V0 = _list_offsets_response(
    schema(("partition", INT32), ("error_code", INT16), ("offsets", Array(INT64)))
)
LIST_OFFSETS_RESPONSE_V1 = _list_offsets_response(
    schema(("partition", INT32), ("error_code", INT16), ("timestamp", INT64), ("offset", INT64))
)

# -- OffsetsForLeaderEpoch (replication) ---------------------------------------------------------

OFFSETS_FOR_LEADER_EPOCH_REQUEST_V0 = schema(
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                ("partitions", Array(schema(("partition", INT32), ("leader_epoch", INT32)))),
            )
        ),
    )
)
OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V0 = schema(
    (
        "topics",
        Array(
            schema(
                ("topic", STRING),
                (
                    "partitions",
                    Array(
                        schema(("error_code", INT16), ("partition", INT32), ("end_offset", INT64))
                    ),
                ),
            )
        ),
    )
)


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
        Api(ApiKey.API_VERSIONS, (API_VERSIONS_REQUEST_V0,), (API_VERSIONS_RESPONSE_V0,)),
        Api(
            ApiKey.METADATA,
            (METADATA_REQUEST_V0, METADATA_REQUEST_V1, METADATA_REQUEST_V1),
            (METADATA_RESPONSE_V0, METADATA_RESPONSE_V1, METADATA_RESPONSE_V2),
        ),
        Api(
            ApiKey.PRODUCE,
            (PRODUCE_REQUEST_V0,) * 3,
            (PRODUCE_RESPONSE_V0, PRODUCE_RESPONSE_V1, PRODUCE_RESPONSE_V2),
        ),
        Api(
            ApiKey.FETCH,
            (FETCH_REQUEST_V0, FETCH_REQUEST_V0, FETCH_REQUEST_V0, FETCH_REQUEST_V3),
            (FETCH_RESPONSE_V0, FETCH_RESPONSE_V1, FETCH_RESPONSE_V1, FETCH_RESPONSE_V1),
        ),
        Api(
            ApiKey.LIST_OFFSETS,
            (LIST_OFFSETS_REQUEST_V0, LIST_OFFSETS_REQUEST_V1),
            (LIST_OFFSETS_RESPONSE_V0, LIST_OFFSETS_RESPONSE_V1),
        ),
        Api(
            ApiKey.OFFSETS_FOR_LEADER_EPOCH,
            (OFFSETS_FOR_LEADER_EPOCH_REQUEST_V0,),
            (OFFSETS_FOR_LEADER_EPOCH_RESPONSE_V0,),
        ),
        Api(
            ApiKey.GROUP_COORDINATOR,
            (GROUP_COORDINATOR_REQUEST_V0,),
            (GROUP_COORDINATOR_RESPONSE_V0,),
        ),
        Api(
            ApiKey.JOIN_GROUP,
            (JOIN_GROUP_REQUEST_V0, JOIN_GROUP_REQUEST_V1),
            (JOIN_GROUP_RESPONSE_V0, JOIN_GROUP_RESPONSE_V0),
        ),
        Api(ApiKey.SYNC_GROUP, (SYNC_GROUP_REQUEST_V0,), (SYNC_GROUP_RESPONSE_V0,)),
        Api(ApiKey.HEARTBEAT, (HEARTBEAT_REQUEST_V0,), (HEARTBEAT_RESPONSE_V0,)),
        Api(ApiKey.LEAVE_GROUP, (LEAVE_GROUP_REQUEST_V0,), (LEAVE_GROUP_RESPONSE_V0,)),
        Api(
            ApiKey.OFFSET_COMMIT,
            (OFFSET_COMMIT_REQUEST_V0, OFFSET_COMMIT_REQUEST_V1, OFFSET_COMMIT_REQUEST_V2),
            (OFFSET_COMMIT_RESPONSE_V0,) * 3,
        ),
        Api(
            ApiKey.OFFSET_FETCH,
            (OFFSET_FETCH_REQUEST_V0,) * 2,
            (OFFSET_FETCH_RESPONSE_V0,) * 2,
        ),
        Api(ApiKey.DESCRIBE_GROUPS, (DESCRIBE_GROUPS_REQUEST_V0,), (DESCRIBE_GROUPS_RESPONSE_V0,)),
        Api(ApiKey.LIST_GROUPS, (LIST_GROUPS_REQUEST_V0,), (LIST_GROUPS_RESPONSE_V0,)),
        Api(
            ApiKey.CREATE_TOPICS,
            (CREATE_TOPICS_REQUEST_V0, CREATE_TOPICS_REQUEST_V1),
            (CREATE_TOPICS_RESPONSE_V0, CREATE_TOPICS_RESPONSE_V1),
        ),
        Api(ApiKey.DELETE_TOPICS, (DELETE_TOPICS_REQUEST_V0,), (DELETE_TOPICS_RESPONSE_V0,)),
        Api(ApiKey.REPLICA_FETCH, (REPLICA_FETCH_REQUEST_V0,), (REPLICA_FETCH_RESPONSE_V0,)),
    ]
}

# -- Releases ------------------------------------------------------------------------------------

# What a broker of each release served (Kafka's Protocol.java at 0.9.0.1 and 0.10.0.1): API ->
# the highest version; an API not named was not served at all (a 0.9.0 broker has no
# ApiVersions and closes the connection of a client that asks). None: every version above
# (0.10.1, today's set). Selected by tidelog's broker.protocol.max.version.
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
RELEASE_API_VERSIONS: dict[str, dict[ApiKey, int] | None] = {
    "0.9.0": _RELEASE_0_9_0,
    "0.10.0": {
        **_RELEASE_0_9_0,
        ApiKey.PRODUCE: 2,
        ApiKey.FETCH: 2,
        ApiKey.METADATA: 1,
        ApiKey.API_VERSIONS: 0,
    },
    "0.10.1": None,
}
# tidelog's own replication needs these from a broker of any release (leader-epoch truncation,
# incremental fetch sessions); no client of the 0.9/0.10.0 era sends them, and they are not
# advertised by such a broker.
INTER_BROKER_API_VERSIONS = {ApiKey.OFFSETS_FOR_LEADER_EPOCH: 0, ApiKey.REPLICA_FETCH: 0}
