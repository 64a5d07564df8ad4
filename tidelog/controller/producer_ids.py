"""InitProducerId (KIP-98) for idempotent producers: producer ids from blocks taken in ZooKeeper.

Any broker answers, as Kafka's transaction coordinator does for a producer without a
transactional id: the next id of the block this broker holds (a new block from
``/latest_producer_id_block`` when it runs out), epoch 0. Transactions are not served: a
transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the answer Kafka gives a producer
that may not use its transactional id. Java's producer and librdkafka treat that code as fatal
and say so at once (``initTransactions()`` / ``rd_kafka_init_transactions`` fail with "not
authorized"), where a retriable code (COORDINATOR_NOT_AVAILABLE) would have them retry until
their timeout, and the same code already refuses a transactional Produce.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kazoo.client import KazooClient

from tidelog.controller import zookeeper
from tidelog.errors import ErrorCode
from tidelog.protocol.frames import Request
from tidelog.protocol.schemas import ApiKey

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class ProducerIdRequests:
    """Hands out producer ids. Invariant: ``next_id`` <= ``block_end`` + 1, and every id from
    ``next_id`` to ``block_end`` is this broker's alone (its block in ZooKeeper); an id is
    given once, ever."""

    def __init__(self, broker_id: int, zk: Callable[[], KazooClient | None]) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.next_id = 0
        self.block_end = -1
        self._lock = asyncio.Lock()  # one block claim at a time

    def handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[dict | None]]]:
        return {ApiKey.INIT_PRODUCER_ID: self.init_producer_id}

    async def init_producer_id(self, request: Request) -> dict:
        transactional_id = request.body["transactional_id"]
        if transactional_id is not None:
            log.warning(
                "InitProducerId from %s with transactional id %r refused: tidelog serves no "
                "transactions",
                request.client_id,
                transactional_id,
            )
            return self._answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        try:
            producer_id = await self.next_producer_id()
        except Exception as error:  # ZooKeeper away: the client retries (a retriable code)
            log.warning("broker %d: no producer id block: %s", self.broker_id, error)
            return self._answer(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)
        return self._answer(ErrorCode.NONE, producer_id, 0)

    async def next_producer_id(self) -> int:
        async with self._lock:
            if self.next_id > self.block_end:
                client = self.zk()
                if client is None:
                    raise ConnectionError("not connected to ZooKeeper")
                self.next_id, self.block_end = await asyncio.to_thread(
                    zookeeper.claim_producer_id_block, client, self.broker_id
                )
            producer_id = self.next_id
            self.next_id += 1
            return producer_id

    @staticmethod
    def _answer(
        code: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH
    ) -> dict:
        return {
            "throttle_time_ms": 0,
            "error_code": int(code),
            "producer_id": producer_id,
            "producer_epoch": epoch,
        }
