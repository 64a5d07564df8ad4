"""Unreachable: a service tidelog needs (ZooKeeper, a broker, the Docker engine, ...) did not
answer at its address. The code that dials raises it; the command line says it in one line."""

from __future__ import annotations

import socket


class Unreachable(ConnectionError):
    """``service`` at ``address`` did not answer: ``reason`` says how (refused, silent for N s).
    A ConnectionError, so that code which retries a lost connection retries this one too."""

    def __init__(self, service: str, address: str, reason: str) -> None:
        super().__init__(f"{service} at {address} does not answer ({reason})")
        self.service, self.address, self.reason = service, address, reason


def refusal(address: str, timeout: float, default_port: int) -> str | None:
    """Why nothing can be dialled at ``address`` (host[:port]), or None if a TCP connection
    opens there within ``timeout`` seconds, or if the address is not one this can read (the
    client that dials it will say what is wrong). Whether the listener ever answers is the
    caller's to see."""
    host, colon, port = address.strip().rpartition(":")
    if not colon or "]" in port:  # no port, or an IPv6 address without one
        host, port = address.strip(), str(default_port)
    if not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except TimeoutError:
        return f"no connection in {timeout:g} s"
    except OSError as error:
        return (error.strerror or str(error)).lower()
