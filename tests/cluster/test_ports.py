"""Ports for local clusters: free, and out of the way of outgoing connections."""

from __future__ import annotations

import socket

from tidelog.cluster.zookeeper import EPHEMERAL_PORTS, LOWEST_LISTENER_PORT, free_port


def test_a_listener_port_is_free_and_below_the_ephemeral_range():
    first_ephemeral = int(EPHEMERAL_PORTS.read_text().split()[0])

    ports = {free_port() for _ in range(20)}

    assert all(LOWEST_LISTENER_PORT <= port < first_ephemeral for port in ports)
    assert len(ports) > 1  # picked at random, so clusters side by side rarely meet
    for port in ports:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))
