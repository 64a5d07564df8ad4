"""Request and response frames: a size, a header, a body of the API version's schema."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.checks import CHECKS
from tidelog.protocol.schemas import APIS, REQUEST_HEADER, RESPONSE_HEADER, ApiKey
from tidelog.protocol.types import ProtocolError, Writer, decode, read, write

SIZE = struct.Struct(">i")


class UnsupportedRequest(ProtocolError):
    """A request for an API or version this broker does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported API {api_key} version {api_version}")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@dataclass
class Request:
    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any]
    client_host: str = ""  # the peer's address, as Kafka reports it ("/127.0.0.1")
    listener: str = "PLAINTEXT"  # the listener it came in on (GroupCoordinator answers on it)


def decode_request(frame: bytes | memoryview) -> Request:
    """A request frame (without its size prefix). Raises UnsupportedRequest for an API or
    version not served, and ProtocolError for bytes that do not parse or a body that fails
    the checks Kafka makes while parsing (protocol.checks)."""
    view = memoryview(frame)
    try:
        header, position = read(REQUEST_HEADER, view, 0)
        api = APIS.get(header["api_key"])
        version = header["api_version"]
        if api is None or not 0 <= version <= api.max_version:
            raise UnsupportedRequest(header["api_key"], version, header["correlation_id"])
        body, position = read(api.requests[version], view, position)
    except struct.error as error:
        raise ProtocolError(str(error)) from None
    if position != len(frame):
        raise ProtocolError(f"{len(frame) - position} bytes left after the request body")
    check = CHECKS.get(api.key)
    if check is not None:
        check(version, body)
    return Request(api.key, version, header["correlation_id"], header["client_id"], body)


def encode_request(
    api_key: ApiKey, api_version: int, correlation_id: int, client_id: str | None, body: dict
) -> bytearray:
    """A request frame, size prefix included, in one buffer (a produce request's records are
    copied into it once)."""
    header = {
        "api_key": api_key,
        "api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    (frame,) = _frame((REQUEST_HEADER, header), (APIS[api_key].requests[api_version], body))
    return frame  # requests hold no file slices


def encode_response(
    api_key: ApiKey, api_version: int, correlation_id: int, body: dict
) -> list[Any]:
    """A response frame as parts (buffers, and file slices to send with sendfile)."""
    return _frame(
        (RESPONSE_HEADER, {"correlation_id": correlation_id}),
        (APIS[api_key].responses[api_version], body),
    )


def _frame(*pieces: tuple[Any, dict]) -> list[Any]:
    """Each (schema, value) encoded in turn, after a size prefix that is reserved first and
    filled in last, so that the frame goes out with its header in one write."""
    writer = Writer()
    writer.write(bytes(SIZE.size))
    for field_type, value in pieces:
        write(field_type, writer, value)
    size = writer.size - SIZE.size
    parts = writer.finish()
    head = parts[0]
    assert isinstance(head, bytearray)  # the reserved size prefix opens the first buffer
    SIZE.pack_into(head, 0, size)
    return parts


def decode_response(
    api_key: ApiKey, api_version: int, frame: bytes | memoryview
) -> tuple[int, dict]:
    """(correlation id, body) of a response frame without its size prefix."""
    header, position = decode(RESPONSE_HEADER, frame)
    body, _ = decode(APIS[api_key].responses[api_version], frame, position)
    return header["correlation_id"], body
