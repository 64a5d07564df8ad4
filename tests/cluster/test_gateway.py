"""The gateway a tidelog command runs on a Swarm stack's network to reach the brokers' admin APIs
(tidelog.cluster.gateway), as a real process on this host: it forwards each port to its target
both ways, a refused target closes only that connection, it exits once idle, and a malformed
route is refused by name."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

from tidelog.cluster.gateway import READY
from tidelog.cluster.zookeeper import free_ports


def echo_server() -> tuple[socket.socket, int]:
    """A TCP server on 127.0.0.1 that sends back what it reads, upper-cased."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                while data := connection.recv(65536):
                    connection.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def gateway(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tidelog.cluster.gateway", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)


def test_each_port_reaches_its_target_and_an_idle_gateway_exits():
    server, target = echo_server()
    listen, refused_listen, nowhere = free_ports(3)
    process = gateway(
        f"{listen}=127.0.0.1:{target}", f"{refused_listen}=127.0.0.1:{nowhere}", "--idle-exit", "2"
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == READY
        with connect(listen) as client:
            payload = b"x" * 200_000
            client.sendall(payload)
            received = b""
            while len(received) < len(payload):
                received += client.recv(65536)
            assert received == payload.upper()
        with connect(refused_listen) as refused:
            assert refused.recv(10) == b""  # closed: its target refused the connection
        with connect(listen) as again:  # the refusal closed that connection only
            again.sendall(b"still")
            assert again.recv(10) == b"STILL"

        assert process.wait(timeout=15) == 0  # idle for 2 s once the last connection ended
    finally:
        process.kill()
        server.close()


def test_a_malformed_route_is_refused_by_name():
    process = gateway("8081-broker-1:8080")
    _, error = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "'8081-broker-1:8080': expected PORT=HOST:PORT" in error
