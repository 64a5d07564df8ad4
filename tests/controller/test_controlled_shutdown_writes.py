"""A controller's answer to its own controlled shutdown, and what ZooKeeper does to it."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import ConnectionLoss

from tidelog.config import broker_config
from tidelog.controller.broker_node import BrokerNode


def test_a_controllers_own_answer_failed_by_zookeeper_is_no_answer_not_a_crash(tmp_path):
    """A controller stopping as ZooKeeper goes: the request its own answer makes as the
    connection drops fails at once (ConnectionLoss; later ones wait). That attempt has no
    answer, as from a controller that did not answer, and the broker goes on to its next
    attempt; the error used to escape the broker's stop, which then never ended."""
    node = BrokerNode(
        broker_config(
            {
                "broker.id": "1",
                "log.dirs": str(tmp_path),
                "zookeeper.connect": "127.0.0.1:1",
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "admin.listener": "127.0.0.1:0",
            }
        )
    )

    async def zookeeper_fails(_broker_id: int) -> dict:
        raise ConnectionLoss()

    async def ask() -> dict | None:
        node.metadata.controller_id = 1  # itself
        node._answer_controlled_shutdown = zookeeper_fails  # type: ignore[method-assign]
        return await node._ask_for_controlled_shutdown()

    assert asyncio.run(ask()) is None
