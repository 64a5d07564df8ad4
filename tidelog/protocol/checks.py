"""What Kafka checks while it parses a request, before any handler sees it: a request that fails
is not answered, its connection is closed (Kafka 2.1's RequestContext.parseRequest turns the
failure into an InvalidRequestException, and the socket server closes the channel).

- Produce v3 and later carries, for each partition, exactly one record batch of magic 2, and a
  batch compressed with zstd only from v7 (ProduceRequest.validateRecords). Older versions are
  not checked, as Kafka did not check them (clients that send the wrong magic for their version
  are served).
- Fetch v4 and later and ListOffsets v2 and later name an isolation level, 0 (read_uncommitted)
  or 1 (read_committed); any other value does not parse (IsolationLevel.forId).
- FindCoordinator v1 and later name a coordinator type, 0 (group) or 1 (transaction); any other
  does not parse (FindCoordinatorRequest.CoordinatorType.forId).

Only the first bytes of a batch are read here (its length, magic and attributes, where
records.record_batch places them); the log's validation reads the rest.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from tidelog.protocol.schemas import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, ApiKey
from tidelog.protocol.types import ProtocolError
from tidelog.records.format import Codec
from tidelog.records.record_batch import (
    ATTRIBUTES_AT,
    CODEC_MASK,
    MAGIC,
    MAGIC_AT,
    TRANSACTIONAL_BIT,
)

_LENGTH = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_LOG_OVERHEAD = 12  # base offset and length: an entry is this many bytes plus its length
_SMALLEST_ENTRY = 14  # the length of the smallest v0 message; a smaller length is corrupt
ISOLATION_LEVELS = (0, 1)  # read_uncommitted, read_committed
COORDINATOR_TYPES = (COORDINATOR_GROUP, COORDINATOR_TRANSACTION)


def first_batch_attributes(records: bytes | memoryview) -> int:
    """The attributes of the one v2 batch a checked Produce v3+ record set holds."""
    return _INT16.unpack_from(records, ATTRIBUTES_AT)[0]


def is_transactional(records: bytes | memoryview) -> bool:
    return bool(first_batch_attributes(records) & TRANSACTIONAL_BIT)


def _batch_size_at(records: bytes | memoryview, position: int) -> int | None:
    """The size of the whole batch at ``position``; None if the bytes left cannot hold one
    (Kafka's log input stream stops there). A length below the smallest entry is corrupt."""
    if len(records) - position < _LOG_OVERHEAD:
        return None
    (length,) = _LENGTH.unpack_from(records, position + 8)
    if length < _SMALLEST_ENTRY:
        raise ProtocolError(f"a record batch of length {length}")
    size = _LOG_OVERHEAD + length
    return size if len(records) - position >= size else None


def _check_produce(version: int, body: dict) -> None:
    if version < 3:
        return
    for topic in body["topic_data"]:
        for data in topic["data"]:
            records = data["record_set"]
            size = None if records is None else _batch_size_at(records, 0)
            if records is None or size is None:
                raise _refused(version, topic, data, "must carry one record batch")
            magic = records[MAGIC_AT]
            if magic != MAGIC:
                raise _refused(version, topic, data, f"carries magic {magic}; only 2 is allowed")
            if first_batch_attributes(records) & CODEC_MASK == Codec.ZSTD and version < 7:
                raise _refused(version, topic, data, "may not use zstd (Produce v7 and later may)")
            if len(records) > size and _batch_size_at(records, size) is not None:
                raise _refused(version, topic, data, "must carry exactly one record batch")


def _refused(version: int, topic: dict, data: dict, why: str) -> ProtocolError:
    return ProtocolError(f"Produce v{version} to {topic['topic']}-{data['partition']} {why}")


def _check_isolation_level(first_version: int) -> Callable[[int, dict], None]:
    def check(version: int, body: dict) -> None:
        if version >= first_version and body["isolation_level"] not in ISOLATION_LEVELS:
            raise ProtocolError(f"isolation level {body['isolation_level']}")

    return check


def _check_coordinator_type(version: int, body: dict) -> None:
    if version >= 1 and body["coordinator_type"] not in COORDINATOR_TYPES:
        raise ProtocolError(f"coordinator type {body['coordinator_type']}")


CHECKS: dict[ApiKey, Callable[[int, dict], None]] = {
    ApiKey.GROUP_COORDINATOR: _check_coordinator_type,
    ApiKey.PRODUCE: _check_produce,
    ApiKey.FETCH: _check_isolation_level(4),
    ApiKey.LIST_OFFSETS: _check_isolation_level(2),
}
