"""A client connection speaking the Kafka protocol: pipelined requests, in-order responses."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque

from tidelog.protocol.frames import SIZE, decode_response, encode_request
from tidelog.protocol.schemas import ApiKey

# What a connection's reader (client or broker side) buffers before it stops reading the
# socket: asyncio's default of 64 KiB would pause and resume reading several times for each
# 1 MB produce request or replica fetch response.
STREAM_BUFFER_BYTES = 4 * 1024 * 1024


class Connection:
    """Requests go out as soon as they are sent; responses come back in order, so each is
    matched to the oldest request still waiting (and its correlation id checked)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: deque[tuple[int, ApiKey, int, asyncio.Future]] = deque()
        self.closed = False
        self._receiver = asyncio.create_task(self._receive())

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "tidelog") -> Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=STREAM_BUFFER_BYTES)
        return cls(reader, writer, client_id)

    def send(self, api_key: ApiKey, version: int, body: dict, expect_response: bool = True):
        """Sends a request; returns a future of its response body (None: no response)."""
        if self.closed:
            raise ConnectionError("the connection is closed")
        correlation_id = next(self._ids)
        self.writer.write(encode_request(api_key, version, correlation_id, self.client_id, body))
        if not expect_response:
            return None
        future = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, api_key, version, future))
        return future

    async def request(self, api_key: ApiKey, version: int, body: dict) -> dict:
        future = self.send(api_key, version, body)
        await self.writer.drain()
        return await future

    async def _receive(self) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await self.reader.readexactly(SIZE.size))
                frame = await self.reader.readexactly(size)
                correlation_id, api_key, version, future = self._pending.popleft()
                received_id, body = decode_response(api_key, version, frame)
                if received_id != correlation_id:
                    raise ConnectionError(f"response {received_id} for request {correlation_id}")
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, IndexError) as error:
            self.closed = True
            self.writer.close()
            while self._pending:
                _, _, _, future = self._pending.popleft()
                if not future.done():
                    future.set_exception(ConnectionError(f"connection lost: {error!r}"))

    async def close(self) -> None:
        self.closed = True
        self._receiver.cancel()
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
