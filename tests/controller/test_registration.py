"""A broker's registration in ZooKeeper (/brokers/ids/N, ephemeral), against a real ZooKeeper:
a second registration by the same session (a reconnection racing the first) finds its own node
and is done at once; a node another live session holds is waited on, then refused."""

from __future__ import annotations

import json
import time

import pytest

from tidelog.broker.metadata import BrokerEndpoint
from tidelog.controller import zookeeper


def broker(port: int) -> BrokerEndpoint:
    return BrokerEndpoint(1, "127.0.0.1", port, None, None)


def test_a_second_registration_by_the_same_session_is_done_at_once(connect_string):
    with zookeeper.session(connect_string) as client:
        zookeeper.register_broker(client, broker(9001))
        started = time.monotonic()

        zookeeper.register_broker(client, broker(9002), wait=30)

        assert time.monotonic() - started < 1.0
        data, _ = client.get("/brokers/ids/1")
        assert json.loads(data)["port"] == 9002


def test_an_id_another_live_session_holds_is_refused_after_the_wait(connect_string):
    with zookeeper.session(connect_string) as holder, zookeeper.session(connect_string) as other:
        zookeeper.register_broker(holder, BrokerEndpoint(2, "127.0.0.1", 9003, None, None))

        with pytest.raises(RuntimeError, match="registered in ZooKeeper by another live broker"):
            zookeeper.register_broker(
                other, BrokerEndpoint(2, "127.0.0.1", 9004, None, None), wait=1.5
            )
