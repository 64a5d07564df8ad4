"""The admin API's HTTP server, through real clients: http.client (keep-alive), a raw HTTP/1.0
request as the images' healthcheck sends it, and aiohttp's client as the controller uses it."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
from collections.abc import Iterator

import aiohttp
import pytest

from tidelog.broker.http import HttpServer, Request, Response, json_response, text_response


async def echo(request: Request) -> Response:
    return json_response({"name": request.match_info["name"], "body": await request.json()})


async def hello(request: Request) -> Response:
    return text_response("hello\n")


async def broken(request: Request) -> Response:
    raise RuntimeError("a handler's bug")


@pytest.fixture
def server() -> Iterator[int]:
    """A server on a free port, run on its own event loop in a thread; yields the port."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    port = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    http_server = HttpServer(
        [("GET", "/hello", hello), ("POST", "/echo/{name}", echo), ("GET", "/broken", broken)]
    )
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(http_server.start(sock))
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10), "the server did not start in 10 s"
    yield port
    asyncio.run_coroutine_threadsafe(http_server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_requests_on_one_kept_alive_connection(server):
    connection = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    connection.request("GET", "/hello?x=1")
    reply = connection.getresponse()
    assert (reply.status, reply.read(), reply.getheader("Content-Type")) == (
        200,
        b"hello\n",
        "text/plain; charset=utf-8",
    )
    connection.request("POST", "/echo/abc", body=json.dumps({"n": 1}))
    reply = connection.getresponse()
    assert reply.status == 200
    assert json.loads(reply.read()) == {"name": "abc", "body": {"n": 1}}
    connection.request("GET", "/nowhere")
    reply = connection.getresponse()
    assert reply.status == 404 and b"/nowhere" in reply.read()
    connection.request("GET", "/echo/abc")
    reply = connection.getresponse()
    assert reply.status == 405
    reply.read()
    connection.request("GET", "/broken")
    reply = connection.getresponse()
    assert reply.status == 500
    reply.read()
    connection.request("POST", "/echo/abc", body=b"not json")
    reply = connection.getresponse()  # the handler's ValueError: a 500, the connection goes on
    assert reply.status == 500
    reply.read()
    connection.request("GET", "/hello")
    assert connection.getresponse().read() == b"hello\n"
    connection.close()


def raw_exchange(port: int, request: bytes) -> bytes:
    """Sends ``request`` and reads until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_an_http_1_0_request_is_answered_and_closed(server):
    answer = raw_exchange(server, b"GET /hello HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 200 OK\r\n") and answer.endswith(b"\r\n\r\nhello\n")


def test_a_request_that_does_not_parse_is_400_and_closed(server):
    assert raw_exchange(server, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    chunked = b"POST /echo/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert raw_exchange(server, chunked).startswith(b"HTTP/1.1 411 ")


def test_aiohttp_client_as_the_controller_sends(server):
    async def post() -> tuple[int, dict]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            for number in range(3):  # one pooled connection, reused
                async with session.post(
                    f"http://127.0.0.1:{server}/echo/n{number}", json={"k": number}
                ) as reply:
                    status, body = reply.status, await reply.json()
            return status, body

    assert asyncio.run(post()) == (200, {"name": "n2", "body": {"k": 2}})
