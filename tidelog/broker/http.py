"""A small HTTP/1.1 server on asyncio streams, for the admin API.

The admin API answers a few JSON and text routes; aiohttp's server did it, but importing aiohttp
costs a broker 0.25-0.4 s of CPU at every start (its client builds two TLS contexts from the
system's certificates at import), and that import ran while a restarted broker caught up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

log = logging.getLogger(__name__)

# The largest request body read (a controller's LeaderAndIsr for thousands of partitions is a
# few hundred KB of JSON); a larger one is answered 413 and its connection closed.
MAX_BODY_BYTES = 64 * 1024 * 1024
# The largest request line or header line (asyncio's stream limit).
MAX_LINE_BYTES = 64 * 1024
# A connection with no request for this long is closed.
IDLE_SECONDS = 300.0


@dataclass
class Request:
    """One request: its method, path (without the query), headers (lower-case names), body,
    and the named groups of the route pattern it matched (``match_info``)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    match_info: dict[str, str] = field(default_factory=dict)

    async def json(self) -> Any:
        """The body as JSON (ValueError if it is not)."""
        return json.loads(self.body)


@dataclass
class Response:
    """An answer: status, body bytes and their content type."""

    body: bytes
    status: int = 200
    content_type: str = "application/json; charset=utf-8"


def json_response(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value).encode(), status)


def text_response(text: str, status: int = 200) -> Response:
    return Response(text.encode(), status, "text/plain; charset=utf-8")


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    """Serves ``routes`` (method, path pattern with ``{name}`` parts matching one path segment,
    handler) on a bound, listening socket.

    Requests on a connection are answered in order; HTTP/1.1 connections stay open unless the
    client says ``Connection: close`` (HTTP/1.0 ones close unless it says keep-alive). A path no
    route has is 404, a known path with another method 405, a request that does not parse 400
    (and the connection closed), a handler that raises 500.
    """

    def __init__(self, routes: list[tuple[str, str, Handler]]) -> None:
        self.routes = [
            (method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"), handler)
            for method, path, handler in routes
        ]
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._serve, sock=sock, limit=MAX_LINE_BYTES)

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
        self._connections.add(task)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # the client went away, or was idle
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("admin API: closing a connection after an unexpected error")
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answers one request; whether the connection stays open."""
        async with asyncio.timeout(IDLE_SECONDS):
            line = await reader.readline()
        if not line:
            return False
        try:
            method, target, version = line.decode("latin-1").split()
            headers = {}
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
        except (ValueError, asyncio.LimitOverrunError):
            await self._send(writer, text_response("malformed request\n", 400), "HTTP/1.1", False)
            return False
        if "chunked" in headers.get("transfer-encoding", "").lower() or length < 0:
            await self._send(
                writer, text_response("a Content-Length is needed\n", 411), version, False
            )
            return False
        if length > MAX_BODY_BYTES:
            await self._send(writer, text_response("request body too large\n", 413), version, False)
            return False
        body = await reader.readexactly(length) if length else b""
        connection = headers.get("connection", "").lower()
        keep_alive = connection == "keep-alive" if version == "HTTP/1.0" else connection != "close"
        path = target.split("?", 1)[0]
        await self._send(
            writer, await self._answer(Request(method, path, headers, body)), version, keep_alive
        )
        return keep_alive

    async def _answer(self, request: Request) -> Response:
        allowed = []
        for method, pattern, handler in self.routes:
            matched = pattern.match(request.path)
            if matched is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            request.match_info = matched.groupdict()
            try:
                return await handler(request)
            except Exception:
                log.exception("admin API: %s %s failed", request.method, request.path)
                return text_response("internal error\n", 500)
        if allowed:
            return text_response(f"{request.method} not allowed here\n", 405)
        return text_response(f"no such path {request.path}\n", 404)

    async def _send(
        self, writer: asyncio.StreamWriter, response: Response, version: str, keep_alive: bool
    ) -> None:
        reason = HTTPStatus(response.status).phrase
        head = (
            f"{'HTTP/1.0' if version == 'HTTP/1.0' else 'HTTP/1.1'} {response.status} {reason}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + response.body)
        await writer.drain()
