"""The Kafka protocol listener: frames in, responses out, each connection's requests pipelined
and answered in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter, deque

from tidelog.broker.handlers import Pending, RequestHandler
from tidelog.broker.metrics import Metrics
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

LISTEN_BACKLOG = 128  # connections waiting to be served, in the kernel's queue

# What goes through the transport (copied) when a sendfile finds the socket full.
FULL_SOCKET_CHUNK = 64 * 1024
# Answers that are ready one after another go out in one write of at most this many.
COALESCED_RESPONSES = 64
# A response whose file slices hold at most this many bytes is copied into one buffer and goes
# out in one write with the answers around it: below this size a sendfile and the two setsockopt
# calls that cork the response cost more than the copy (a follower's fetch answer of one small
# batch is a few hundred bytes).
INLINE_SLICE_BYTES = 64 * 1024
# What a connection's reader takes from its stream at once; the frames in it are split without
# a further await each.
READ_BYTES = 256 * 1024


class Entry:
    """A request read on a connection and not answered yet: what its answer is encoded with
    (API key, version, correlation id), the answer (a body; None for no response; or a
    Pending body), its frame size, and the API name and start time its metrics are kept
    under (None: not counted)."""

    __slots__ = ("answer", "api", "api_key", "api_version", "correlation_id", "size", "started")

    def __init__(
        self,
        api_key: ApiKey,
        api_version: int,
        correlation_id: int,
        answer: dict | Pending | None,
        size: int,
        api: str | None,
        started: float,
    ) -> None:
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id
        self.answer, self.size, self.api, self.started = answer, size, api, started


class ResponseQueue:
    """The requests of one connection that were read and are not answered yet, in the order
    they were read, which is the order they are answered in.

    The reading side ``put``s an entry per request; the answering side takes the oldest with
    ``next`` (or ``next_ready``, which does not wait) and, once it has sent its answer, calls
    ``answered``. Read-ahead is bounded: ``room(size)`` returns once a request of ``size``
    bytes fits, that is fewer than ``max_requests`` entries and at most ``max_bytes`` of their
    frames; an empty queue always takes one request, so a single frame as large as
    socket.request.max.bytes is served. ``empty()`` returns once every entry is answered.
    After ``close()`` no entry is added, and ``next`` returns None once the last is answered.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        if max_requests < 1 or max_bytes < 1:
            raise ValueError(f"a read-ahead of {max_requests} requests and {max_bytes} bytes")
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.entries: deque[Entry] = deque()
        self.bytes = 0
        self.closed = False
        self._added = asyncio.Event()
        self._answered = asyncio.Event()

    def put(self, entry: Entry) -> None:
        if self.closed:
            raise RuntimeError("a request queued on a closed connection")
        self.entries.append(entry)
        self.bytes += entry.size
        self._added.set()

    def close(self) -> None:
        self.closed = True
        self._added.set()

    def fits(self, size: int) -> bool:
        entries = self.entries
        return not entries or (
            len(entries) < self.max_requests and self.bytes + size <= self.max_bytes
        )

    async def room(self, size: int) -> None:
        while not self.fits(size):
            self._answered.clear()
            await self._answered.wait()

    async def empty(self) -> None:
        while self.entries:
            self._answered.clear()
            await self._answered.wait()

    def next_ready(self) -> Entry | None:
        """The oldest entry if its answer is ready now, else None."""
        if not self.entries:
            return None
        entry = self.entries[0]
        answer = entry.answer
        if isinstance(answer, Pending) and not answer.future.done():
            return None
        return entry

    async def next(self) -> Entry | None:
        """The oldest entry (its answer may still be pending); None once closed and empty."""
        while not self.entries:
            if self.closed:
                return None
            self._added.clear()
            await self._added.wait()
        return self.entries[0]

    def answered(self) -> None:
        """The oldest entry has been answered."""
        entry = self.entries.popleft()
        self.bytes -= entry.size
        self._answered.set()

    def cancel_pending(self) -> None:
        """The connection is gone: what its requests still wait for is not needed."""
        for entry in self.entries:
            if isinstance(entry.answer, Pending):
                future = entry.answer.future
                if not future.cancel() and not future.cancelled():
                    future.exception()  # seen: not reported again as never retrieved


class IdleTimer:
    """Closes a connection (cancels its task, ``fired`` set) once ``seconds`` have passed since
    it was last ``active`` (a request read, answers sent) with none of its requests in flight
    (queued, or ``busy`` being served). One timer per connection, re-armed when it comes due,
    not one per request."""

    def __init__(self, seconds: float, task: asyncio.Task, responses: ResponseQueue) -> None:
        self.loop = asyncio.get_running_loop()
        self.seconds, self.task, self.responses = seconds, task, responses
        self.busy = False
        self.fired = False
        self.last_active = self.loop.time()
        self._handle = self.loop.call_at(self.last_active + seconds, self._check)

    def active(self) -> None:
        self.last_active = self.loop.time()

    def _check(self) -> None:
        now = self.loop.time()
        # in flight: the connection is not idle, and its idle time counts from the answer
        due = (
            now + self.seconds
            if self.busy or self.responses.entries
            else self.last_active + self.seconds
        )
        if now >= due:
            self.fired = True
            self.task.cancel()
        else:
            self._handle = self.loop.call_at(due, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


def _failure(task: asyncio.Task) -> BaseException | None:
    if not task.done() or task.cancelled():
        return None
    return task.exception()


def _stop_reading_if_failed(
    answering: asyncio.Task, reading: asyncio.Task, idle: IdleTimer
) -> None:
    """The answering side of a connection failed: its reading side stops too, at once unless
    it is serving a request (a commit half applied is worse than one answered to nobody: the
    reading side stops once that request is done)."""
    if _failure(answering) is not None and not idle.busy:
        reading.cancel()


class _Idle(Exception):
    """The connection was closed for connections.max.idle.ms."""


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

    Each connection's requests are answered in order, as Kafka does, but read ahead of their
    answers (after Redpanda's connection_context): a request of the handler's PIPELINED APIs
    (Produce) starts as it is read, in arrival order (a produce's appends happen there, so each
    partition's appends follow the arrival order, as with one request at a time), and the rest
    of it (waiting for the followers) runs while the requests after it are read; any other
    request, Fetch included, is served once every request before it is answered. Read-ahead stops at
    ``max_inflight_requests`` unanswered requests or ``max_inflight_bytes`` of their frames
    (connection.max.inflight.requests / .bytes). A frame larger than
    socket.request.max.bytes, bytes that do not parse, or an API or version not served close
    that connection (an ApiVersions request above the versions served is answered
    UNSUPPORTED_VERSION in a v0 body listing them, so clients fall back; a broker of release
    0.9.0 closes it, as 0.9 brokers did), after the requests before it are answered; every other
    connection goes on.
    The versions served are the handler's. A file
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
        max_inflight_requests: int = 1000,
        max_inflight_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.handler = handler
        self.metrics = metrics
        self.host = host
        self.port = port
        self.listener = listener
        self.max_request_bytes = max_request_bytes
        self.quotas = quotas or ConnectionQuotas()
        self.idle_seconds = connections_max_idle_ms / 1000
        self.max_inflight_requests = max_inflight_requests
        self.max_inflight_bytes = max_inflight_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def bind(self) -> None:
        """Takes the port (so that it can be registered) and listens on it, but serves no
        connection yet: one made before ``start`` waits in the kernel's backlog (as Kafka's
        acceptors take connections before its request processors start), where a socket
        bound but not listening would refuse it, and a client that read the broker's
        registration a moment early would fail."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, backlog=LISTEN_BACKLOG)
        self._server = await asyncio.start_server(
            self._serve, sock=sock, start_serving=False, limit=STREAM_BUFFER_BYTES,
            backlog=LISTEN_BACKLOG,
        )  # fmt: skip
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
        responses = ResponseQueue(self.max_inflight_requests, self.max_inflight_bytes)
        idle = IdleTimer(self.idle_seconds, task, responses)
        answering = asyncio.create_task(self._answer(responses, writer, idle))
        answering.add_done_callback(lambda done: _stop_reading_if_failed(done, task, idle))
        try:
            try:
                try:
                    await self._read_requests(reader, responses, idle, peer, answering)
                except (asyncio.IncompleteReadError, ConnectionError):
                    raise
                except Exception:
                    # a request failed past its error codes: the connection closes, once the
                    # requests read before it are answered (they may have been appended)
                    log.exception("closing the connection from %s after an unexpected error", peer)
                # no more requests: the ones read are answered, then the connection closes
                responses.close()
                await answering
            except asyncio.CancelledError:
                failure = _failure(answering)
                if failure is not None:
                    task.uncancel()  # the answering side failed: its error says why
                    raise failure from None
                if idle.fired:
                    task.uncancel()
                    raise _Idle from None
                raise
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            # normal traffic: a client closed its connection, perhaps in the middle of a response
            log.debug("connection from %s closed by the client (%s)", peer, type(error).__name__)
        except _Idle:
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
            idle.cancel()
            answering.cancel()
            responses.cancel_pending()
            self._connections.discard(task)
            self.quotas.give_back(host)
            writer.close()

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        responses: ResponseQueue,
        idle: IdleTimer,
        peer: str,
        answering: asyncio.Task,
    ) -> None:
        """Reads requests until the input ends, one must close the connection, or the answering
        side has failed. A pipelined request (RequestHandler.PIPELINED) starts at once, in
        arrival order, and is queued for its answer; any other request is served only after
        every request before it has been answered, so it sees all their effects."""
        handler, metrics, listener = self.handler, self.metrics, self.listener
        client_host = "/" + peer.rpartition(":")[0]
        pipelined = handler.PIPELINED
        read_size = SIZE.size
        buffer, position = b"", 0  # bytes read from the stream, and where the next frame starts
        while True:
            if len(buffer) - position < read_size:
                chunk = await reader.read(READ_BYTES)
                if not chunk:
                    if len(buffer) > position:
                        raise asyncio.IncompleteReadError(buffer[position:], read_size)
                    return  # the client has sent all it will: what it sent is answered
                buffer, position = buffer[position:] + chunk, 0
                continue  # a header may still be incomplete
            (size,) = SIZE.unpack_from(buffer, position)
            idle.active()
            if not 0 < size <= self.max_request_bytes:
                log.warning(
                    "closing the connection from %s: a frame of %d bytes "
                    "(socket.request.max.bytes is %d)",
                    peer,
                    size,
                    self.max_request_bytes,
                )
                return
            if not responses.fits(size):
                await responses.room(size)
            start, end = position + read_size, position + read_size + size
            if end <= len(buffer):
                frame = buffer[start:end]
                position = end
            else:  # the rest of the frame in one await, whatever its size
                frame = buffer[start:] + await reader.readexactly(end - len(buffer))
                buffer, position = b"", 0
            metrics.bytes_in += read_size + size
            started = time.perf_counter()
            try:
                request = decode_request(frame)
            except UnsupportedRequest as unsupported:
                if unsupported.api_key == ApiKey.API_VERSIONS and handler.serves(
                    ApiKey.API_VERSIONS
                ):
                    responses.put(
                        Entry(
                            ApiKey.API_VERSIONS,
                            0,
                            unsupported.correlation_id,
                            handler.unsupported_api_versions(),
                            size,
                            None,
                            0.0,
                        )
                    )
                    continue
                log.warning("closing the connection from %s: %s", peer, unsupported)
                return
            except ProtocolError as error:
                log.warning("closing the connection from %s: malformed request (%s)", peer, error)
                return
            request.client_host = client_host
            request.listener = listener
            api_key = request.api_key
            if not handler.serves(api_key, request.api_version):
                if api_key == ApiKey.API_VERSIONS and handler.serves(api_key):
                    responses.put(
                        Entry(
                            api_key,
                            0,
                            request.correlation_id,
                            handler.unsupported_api_versions(),
                            size,
                            None,
                            0.0,
                        )
                    )
                    continue
                log.warning(
                    "closing the connection from %s: API %s v%d is not served",
                    peer,
                    api_key,
                    request.api_version,
                )
                return
            if api_key in pipelined:
                answer = handler.start(request)
            else:
                await responses.empty()
                idle.busy = True
                try:
                    answer = await handler.handle(request, listener)
                finally:
                    idle.busy = False
                if answering.done():
                    return  # the answers can no longer be sent (_stop_reading_if_failed)
            responses.put(
                Entry(
                    api_key,
                    request.api_version,
                    request.correlation_id,
                    answer,
                    size,
                    api_key.name,
                    started,
                )
            )

    async def _answer(
        self, responses: ResponseQueue, writer: asyncio.StreamWriter, idle: IdleTimer
    ) -> None:
        """Sends the answers strictly in request order, each once it is ready. Answers that are
        ready one after another go out in one write. If a request's second stage fails, the
        answers before it still go out, and the connection closes."""
        transport = writer.transport
        ready: list[bytes | bytearray] = []
        while True:
            entry = responses.next_ready()
            if entry is None or len(ready) >= COALESCED_RESPONSES:
                if ready:
                    transport.writelines(ready)
                    ready = []
                    await writer.drain()
                idle.active()
                entry = await responses.next()
                if entry is None:
                    return
            answer = entry.answer
            if isinstance(answer, Pending):
                try:
                    answer = answer.finish(await answer.future)
                except BaseException:
                    transport.writelines(ready)  # sent before the connection closes
                    raise
            if answer is not None:
                parts = encode_response(
                    entry.api_key, entry.api_version, entry.correlation_id, answer
                )
                frame = _inlined(parts)
                if frame is not None:
                    ready.append(frame)
                    self.metrics.bytes_out += len(frame)
                else:
                    if ready:
                        transport.writelines(ready)
                        ready = []
                    await self._send(writer, parts)
            if entry.api is not None:
                self.metrics.record_request(entry.api, time.perf_counter() - entry.started)
            responses.answered()

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


def _inlined(parts: list) -> bytes | bytearray | None:
    """A response as one buffer if it has no file slices or they hold at most
    INLINE_SLICE_BYTES (read from the page cache), else None: it goes out with sendfile."""
    if len(parts) == 1 and not isinstance(parts[0], FileSlice):
        return parts[0]
    sliced = 0
    for part in parts:
        if isinstance(part, FileSlice):
            sliced += part.length
            if sliced > INLINE_SLICE_BYTES:
                return None
    pieces = []
    for part in parts:
        if isinstance(part, FileSlice):
            data = part.read()
            if len(data) != part.length:
                raise OSError(
                    f"{part.file.name}: {part.length - len(data)} bytes of a slice are gone"
                )
            pieces.append(data)
        else:
            pieces.append(part)
    return b"".join(pieces)


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
