"""Ports for local clusters: free, and out of the way of outgoing connections."""

from __future__ import annotations

import socket

from tidelog.cluster import zookeeper
from tidelog.cluster.compose import host_ports
from tidelog.cluster.local import _port_plan
from tidelog.cluster.zookeeper import EPHEMERAL_PORTS, LOWEST_LISTENER_PORT, free_port


def test_a_listener_port_is_free_and_below_the_ephemeral_range():
    first_ephemeral = int(EPHEMERAL_PORTS.read_text().split()[0])

    ports = {free_port() for _ in range(20)}

    assert all(LOWEST_LISTENER_PORT <= port < first_ephemeral for port in ports)
    assert len(ports) > 1  # picked at random, so clusters side by side rarely meet
    for port in ports:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))


def test_one_clusters_ports_are_all_different_when_the_random_picks_repeat(monkeypatch):
    """Each port is free when picked, but nothing binds it until the brokers and ZooKeeper
    start: a plan whose picks repeat would put two listeners of one cluster on the same port.
    ZooKeeper's is in the plan (a CI run saw a broker find its port taken when ZooKeeper's was
    picked after the brokers' were released)."""
    picks = iter([20101, 20101, 20102, 20101, 20103, 20102, 20104, 20105, 20106, 20107, 20108])
    monkeypatch.setattr(zookeeper.random, "randrange", lambda *_: next(picks))

    plan = _port_plan(3, None)

    ports = [port for broker_id in (1, 2, 3) for port in plan.broker(broker_id)]
    ports.append(plan.zookeeper)
    assert len(set(ports)) == 7 and set(ports) <= set(range(20101, 20109))


def test_a_compose_clusters_host_ports_are_all_different(monkeypatch):
    picks = iter([20201] * 3 + list(range(20202, 20212)))
    monkeypatch.setattr(zookeeper.random, "randrange", lambda *_: next(picks))

    ports = host_ports()

    assert len(set(ports.values())) == len(ports) == 7
