"""The Kafka protocol listener: frames in, responses out, one request at a time per connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter

from tidelog.broker.handlers import RequestHandler
from tidelog.broker.metrics import Metrics
from tidelog.errors import ErrorCode
from tidelog.log.segment import FileSlice
from tidelog.protocol.connection import STREAM_BUFFER_BYTES
from tidelog.protocol.frames import (
    SIZE,
    UnsupportedRequest,
    decode_request,
    encode_response,
)
from tidelog.protocol.schemas import ApiKey
from tidelog.protocol.types import ProtocolError

log = logging.getLogger(__name__)

# What goes through the transport (copied) when a sendfile finds the socket full.
FULL_SOCKET_CHUNK = 64 * 1024


class ConnectionQuotas:
    """Connections per client address across all of a broker's listeners, as Kafka counts
    them: at most max.connections.per.ip, or the address's max.connections.per.ip.overrides."""

    def __init__(self, per_ip: int = 2**31 - 1, overrides: dict[str, int] | None = None) -> None:
        self.per_ip = per_ip
        self.overrides = overrides or {}
        self.open: Counter[str] = Counter()

    def take(self, host: str) -> bool:
        """Counts a new connection from ``host``; False (and not counted) if over its limit."""
        if self.open[host] >= self.overrides.get(host, self.per_ip):
            return False
        self.open[host] += 1
        return True

    def give_back(self, host: str) -> None:
        self.open[host] -= 1
        if not self.open[host]:
            del self.open[host]


class KafkaServer:
    """Serves the Kafka wire protocol on one listener.

    Each connection's requests are answered in order, as Kafka does. A frame larger than
    socket.request.max.bytes, bytes that do not parse, or an API or version not served close
    that connection (an ApiVersions request above v0 is answered UNSUPPORTED_VERSION in a v0
    body, as 0.10 brokers do, so clients fall back); every other connection goes on. A file
    slice in a response goes out with ``os.sendfile`` (zero-copy). A connection beyond
    max.connections.per.ip (or its override) for its address is closed at once; one that sends
    nothing for connections.max.idle.ms is closed.
    """

    def __init__(
        self,
        handler: RequestHandler,
        metrics: Metrics,
        *,
        host: str,
        port: int,
        max_request_bytes: int,
        listener: str = "PLAINTEXT",
        quotas: ConnectionQuotas | None = None,
        connections_max_idle_ms: int = 600_000,
    ) -> None:
        self.handler = handler
        self.metrics = metrics
        self.host = host
        self.port = port
        self.listener = listener
        self.max_request_bytes = max_request_bytes
        self.quotas = quotas or ConnectionQuotas()
        self.idle_seconds = connections_max_idle_ms / 1000
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def bind(self) -> None:
        """Takes the port (so that it can be registered) without accepting connections yet."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, start_serving=False, limit=STREAM_BUFFER_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        if self._server is None:
            await self.bind()
        assert self._server is not None
        await self._server.start_serving()
        log.info("serving the Kafka protocol on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername")
        if not peername:  # reset by the client before it was accepted: nothing to serve
            log.debug("a connection to %s:%d was gone before it was served", self.host, self.port)
            writer.close()
            return
        host, port = peername[:2]
        peer = f"{host}:{port}"
        if not self.quotas.take(host):
            log.warning(
                "closing the connection from %s: %d connections from %s already "
                "(max.connections.per.ip)",
                peer,
                self.quotas.open[host],
                host,
            )
            writer.close()
            return
        self._connections.add(task)
        try:
            while await self._serve_one(reader, writer, peer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            # normal traffic: a client closed its connection, perhaps in the middle of a response
            log.debug("connection from %s closed by the client (%s)", peer, type(error).__name__)
        except TimeoutError:
            log.info(
                "closing the connection from %s: idle for %g s (connections.max.idle.ms)",
                peer,
                self.idle_seconds,
            )
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing the connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(task)
            self.quotas.give_back(host)
            writer.close()

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> bool:
        async with asyncio.timeout(self.idle_seconds):
            (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
        if not 0 < size <= self.max_request_bytes:
            log.warning(
                "closing the connection from %s: a frame of %d bytes (socket.request.max.bytes "
                "is %d)",
                peer,
                size,
                self.max_request_bytes,
            )
            return False
        frame = await reader.readexactly(size)
        self.metrics.bytes_in += SIZE.size + size
        started = time.perf_counter()
        try:
            request = decode_request(frame)
            request.client_host = "/" + peer.rpartition(":")[0]
            request.listener = self.listener
        except UnsupportedRequest as unsupported:
            if unsupported.api_key == ApiKey.API_VERSIONS:
                body = {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_versions": []}
                await self._send(
                    writer,
                    encode_response(ApiKey.API_VERSIONS, 0, unsupported.correlation_id, body),
                )
                return True
            log.warning("closing the connection from %s: %s", peer, unsupported)
            return False
        except ProtocolError as error:
            log.warning("closing the connection from %s: malformed request (%s)", peer, error)
            return False
        if not self.handler.serves(request.api_key):
            log.warning(
                "closing the connection from %s: API %s is not served", peer, request.api_key
            )
            return False
        answer = await self.handler.handle(request, self.listener)
        if answer is not None:
            parts = encode_response(
                request.api_key, request.api_version, request.correlation_id, answer
            )
            await self._send(writer, parts)
        self.metrics.record_request(request.api_key.name, time.perf_counter() - started)
        return True

    async def _send(self, writer: asyncio.StreamWriter, parts: list) -> None:
        """Writes a response; its file slices go by sendfile. A response with slices is corked
        (TCP_CORK) until its last byte, so the reader gets it in full-sized segments rather
        than a header first."""
        sliced = any(isinstance(part, FileSlice) for part in parts)
        sock = writer.transport.get_extra_info("socket") if sliced else None
        if sliced:
            _cork(sock, True)
        try:
            for part in parts:
                if isinstance(part, FileSlice):
                    await _send_slice(writer, sock, part)
                    self.metrics.bytes_out += part.length
                else:
                    writer.write(part)
                    self.metrics.bytes_out += len(part)
        finally:
            if sliced and not writer.transport.is_closing():
                _cork(sock, False)
        await writer.drain()


async def _send_slice(writer: asyncio.StreamWriter, sock, part: FileSlice) -> None:
    """Sends a file slice with ``os.sendfile`` straight from the page cache to the socket (the
    event loop's own ``loop.sendfile`` is not zero-copy on every loop, uvloop's not at all).

    Whatever the socket takes at once goes without a copy. When it is full, one chunk goes
    through the transport, which waits for room; once that chunk is out, sendfile goes on. So
    only one chunk per full socket buffer is copied, and nothing overtakes what the transport
    still holds.
    """
    transport = writer.transport
    out, source = sock.fileno(), part.file.fileno()
    position, remaining = part.position, part.length
    while remaining:
        if not transport.get_write_buffer_size():  # nothing queued ahead of it
            try:
                sent = os.sendfile(out, source, position, remaining)
            except BlockingIOError:
                sent = 0
            position, remaining = position + sent, remaining - sent
            if not remaining:
                return
        chunk = os.pread(source, min(remaining, FULL_SOCKET_CHUNK), position)
        if not chunk:
            raise OSError(f"{part.file.name}: {remaining} bytes of a slice are gone")
        writer.write(chunk)
        position, remaining = position + len(chunk), remaining - len(chunk)
        await _flushed(writer)


async def _flushed(writer: asyncio.StreamWriter) -> None:
    """Waits until the transport has handed everything it holds to the socket."""
    transport = writer.transport
    if not transport.get_write_buffer_size():
        return
    low, high = transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(high=0, low=0)
    try:
        await writer.drain()
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits(high=high, low=low)


def _cork(sock, on: bool) -> None:
    with contextlib.suppress(OSError):  # not TCP (a test's socket pair), or already closed
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1 if on else 0)
