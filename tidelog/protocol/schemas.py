"""The request and response schemas of the APIs 0.9/0.10 clients use, as data.

Field names follow Kafka's protocol guide. Adding a version is adding a schema here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from tidelog.protocol.types import (
    BOOLEAN,
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
    API_VERSIONS = 18
    OFFSETS_FOR_LEADER_EPOCH = 23


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
    ]
}
