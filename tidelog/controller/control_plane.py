"""The control plane as the controller sends it: LeaderAndIsr, UpdateMetadata and StopReplica to
brokers' admin APIs over aiohttp, each request carrying the controller's id, epoch and a sequence
number.

As Kafka's ControllerChannelManager does, the controller keeps one ordered queue per live broker:
a request is sent once every request queued before it for that broker was answered, and one that
fails (no answer, a refused connection, an HTTP error) is sent again after a back-off until the
broker answers, leaves the cluster, or this broker stops being the controller. The sequence
number (one counter per controller epoch) lets a broker drop a late copy of a request it has
already seen a newer one of: an attempt that timed out may still arrive after its retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from tidelog.broker.metadata import BrokerEndpoint, MetadataCache
from tidelog.controller.controller import Change
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

# between two attempts of a request that failed: doubled each time up to the maximum
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0


def partition_entry(topic: str, partition: int, replicas, state) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
        "zk_version": state.zk_version,
        "replicas": list(replicas),
    }


def _acknowledged(answer: asyncio.Future[dict | None]) -> bool:
    """Answered, with no error for the request nor for any of its partitions."""
    result = answer.result() if answer.done() else None
    return result is not None and not result.get("error_code") and not _partition_errors(result)


def _partition_errors(answer: dict) -> list[str]:
    """The partitions an answer gives an error for, as "topic-partition ERROR_NAME"."""
    return [
        f"{entry['topic']}-{entry['partition']} {_error_name(entry['error_code'])}"
        for entry in answer.get("partitions", ())
        if entry.get("error_code")
    ]


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class _Request:
    """One control request for one broker, and the future its answer (None: dropped) goes to."""

    def __init__(self, kind: str, body: dict) -> None:
        self.kind = kind
        self.body = body
        self.answer: asyncio.Future[dict | None] = asyncio.get_running_loop().create_future()

    def resolve(self, answer: dict | None) -> None:
        if not self.answer.done():
            self.answer.set_result(answer)


class BrokerQueue:
    """The control requests for one broker, sent one at a time in the order they were queued.

    Invariant: a request is sent only after every request queued before it was answered or
    dropped; a failed attempt is repeated (the same body, the same sequence number) until the
    broker answers. ``close`` drops what is left (each waiting future gets None)."""

    def __init__(self, plane: ControlPlane, endpoint: BrokerEndpoint) -> None:
        self.plane = plane
        self.endpoint = endpoint
        self.pending: asyncio.Queue[_Request] = asyncio.Queue()
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._run())

    def put(self, request: _Request) -> None:
        if self.closed:
            request.resolve(None)
        else:
            self.pending.put_nowait(request)

    async def close(self) -> None:
        self.closed = True
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        while not self.pending.empty():
            self.pending.get_nowait().resolve(None)

    async def _run(self) -> None:
        current: _Request | None = None
        try:
            while True:
                current = await self.pending.get()
                backoff = RETRY_BACKOFF_S
                attempt = 1
                while True:
                    answer = await self.plane.post(self.endpoint, current.kind, current.body)
                    if answer is not None:
                        current.resolve(answer)
                        break
                    if attempt == 1 or attempt % 10 == 0:
                        log.warning(
                            "controller: %s to broker %d failed (attempt %d); retrying while "
                            "it is registered",
                            current.kind,
                            self.endpoint.broker_id,
                            attempt,
                        )
                    attempt += 1
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
                current = None
        finally:
            if current is not None:
                current.resolve(None)


class ControlPlane:
    """Sends the controller's decisions to the brokers they concern, through one BrokerQueue per
    live broker. ``start_epoch`` begins a controller term (queues of an earlier term are
    dropped, the sequence restarts); ``resign`` ends it."""

    def __init__(self, controller_id: int, timeout_ms: int = 10000) -> None:
        self.controller_id = controller_id
        self.timeout_s = timeout_ms / 1000  # controller.socket.timeout.ms
        self._session: aiohttp.ClientSession | None = None
        self.brokers_told: set[int] = set()  # live brokers that have had a full LeaderAndIsr
        # the live brokers the last UpdateMetadata named: a change sends a new one
        self.brokers_announced: set[int] | None = None
        self.epoch: int | None = None
        self.sequence = 0
        self.queues: dict[int, BrokerQueue] = {}

    async def close(self) -> None:
        await self.resign()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def start_epoch(self, epoch: int) -> None:
        if self.epoch != epoch:
            await self.resign()
            self.epoch = epoch
            self.sequence = 0

    async def resign(self) -> None:
        """This broker is no longer the controller: what it had not delivered is dropped."""
        queues, self.queues = self.queues, {}
        for queue in queues.values():
            await queue.close()
        self.epoch = None
        self.brokers_told = set()
        self.brokers_announced = None

    async def track_brokers(self, live: dict[int, BrokerEndpoint]) -> None:
        """Queues follow the live brokers: a broker gone takes its queue (and what it held)
        with it; one registered again at another address gets a new queue."""
        for broker_id in list(self.queues):
            endpoint = live.get(broker_id)
            if endpoint is None or endpoint != self.queues[broker_id].endpoint:
                await self.queues.pop(broker_id).close()

    def enqueue(self, broker: BrokerEndpoint, kind: str, body: dict) -> asyncio.Future[dict | None]:
        """Queues a request for ``broker`` with this term's next sequence number; the future
        gets the broker's answer, or None if the request was dropped."""
        assert self.epoch is not None, "start_epoch first"
        self.sequence += 1
        header = {
            "controller_id": self.controller_id,
            "controller_epoch": self.epoch,
            "sequence": self.sequence,
        }
        request = _Request(kind, {**header, **body})
        if broker.admin is None:  # registered without tidelog's admin API: nothing to send to
            request.resolve(None)
            return request.answer
        queue = self.queues.get(broker.broker_id)
        if queue is None:
            queue = self.queues[broker.broker_id] = BrokerQueue(self, broker)
        queue.put(request)
        return request.answer

    async def post(self, broker: BrokerEndpoint, kind: str, body: dict) -> dict | None:
        """One attempt; the broker's answer, or None if there was none to be had."""
        assert broker.admin is not None
        import aiohttp  # here: a broker that never acts as controller does not load it

        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
        try:
            async with self._session.post(
                f"http://{broker.admin}/control/{kind}", json=body
            ) as reply:
                if reply.status >= 500:
                    raise aiohttp.ClientResponseError(
                        reply.request_info, (), status=reply.status, message=reply.reason or ""
                    )
                answer = await reply.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            why = str(error) or type(error).__name__
            if isinstance(error, TimeoutError):
                why = f"no answer in {self.timeout_s:g} s (controller.socket.timeout.ms)"
            log.info("controller: %s to broker %d: %s", kind, broker.broker_id, why)
            return None
        if answer.get("error_code"):
            log.warning("controller: broker %d refused %s: %s", broker.broker_id, kind, answer)
        elif kind == "stop-replica" and (refused := _partition_errors(answer)):
            log.warning(
                "controller: broker %d refused stop-replica for %d partitions: %s",
                broker.broker_id,
                len(refused),
                ", ".join(refused),
            )
        return answer

    async def _wait(self, answers: Iterable[asyncio.Future[dict | None]]) -> None:
        """Waits for the answers up to controller.socket.timeout.ms: the queues go on
        retrying past it, but the controller does not hold its next decisions for one
        unresponsive broker."""
        waiting = [answer for answer in answers if not answer.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=self.timeout_s)

    async def stop_replicas(
        self, metadata: MetadataCache, partitions: Iterable[tuple[str, int, int]], delete: bool
    ) -> list[int]:
        """StopReplica for each (topic, partition, broker) to that broker if it is live;
        returns the brokers that acknowledged all of theirs."""
        holders: dict[int, list[dict]] = defaultdict(list)
        for topic, number, broker_id in partitions:
            holders[broker_id].append({"topic": topic, "partition": number})
        answers = {
            b: self.enqueue(
                metadata.brokers[b], "stop-replica", {"delete": delete, "partitions": entries}
            )
            for b, entries in holders.items()
            if b in metadata.brokers
        }
        await self._wait(answers.values())
        return sorted(b for b, answer in answers.items() if _acknowledged(answer))

    async def stop_topic_replicas(
        self, metadata: MetadataCache, topic: str, delete: bool
    ) -> list[int]:
        """StopReplica for every partition of ``topic`` to the live brokers holding one."""
        described = metadata.topics.get(topic)
        return await self.stop_replicas(
            metadata,
            [
                (topic, number, replica)
                for number, replicas in (described.assignment.items() if described else [])
                for replica in replicas
            ],
            delete,
        )

    async def send(
        self,
        metadata: MetadataCache,
        changes: list[Change],
        live: dict[int, BrokerEndpoint] | None = None,
        *,
        wait: bool = True,
        not_told: Collection[tuple[str, int, int]] = (),
    ) -> None:
        """LeaderAndIsr for changed partitions to their replicas (but not the (topic, partition,
        broker) of ``not_told``: replicas stopped by a StopReplica), the whole state to brokers new
        since the last call, and UpdateMetadata to every live broker when a partition changed
        or the live brokers did. ``live``: the brokers as the controller last read them from
        ZooKeeper (the cache's by default); an UpdateMetadata must not name a broker the
        controller knows is gone, or a broker that already learned it from its own watch
        would take it back. ``wait``: up to controller.socket.timeout.ms for the answers
        (without, the requests are queued and the queues deliver them)."""
        live = metadata.brokers if live is None else live
        await self.track_brokers(live)
        per_broker: dict[int, list[dict]] = defaultdict(list)
        for change in changes:
            if change.state is None:
                continue
            entry = partition_entry(change.topic, change.partition, change.replicas, change.state)
            for replica in change.replicas:
                if (change.topic, change.partition, replica) not in not_told:
                    per_broker[replica].append(entry)
        for broker_id in set(live) - self.brokers_told:
            for name, topic in metadata.topics.items():
                for number, replicas in topic.assignment.items():
                    state = topic.states.get(number)
                    if (
                        state is not None
                        and broker_id in replicas
                        and (name, number, broker_id) not in not_told
                    ):
                        per_broker[broker_id].append(partition_entry(name, number, replicas, state))
        self.brokers_told = set(live)
        answers = [
            self.enqueue(live[b], "leader-and-isr", {"partitions": entries})
            for b, entries in per_broker.items()
            if b in live and entries
        ]
        if answers or changes or self.brokers_announced != set(live):
            self.brokers_announced = set(live)
            brokers = [b.to_json() for b in live.values()]
            changed = [
                partition_entry(c.topic, c.partition, c.replicas, c.state)
                for c in changes
                if c.state
            ]
            answers += [
                self.enqueue(broker, "update-metadata", {"brokers": brokers, "partitions": changed})
                for broker in live.values()
            ]
        if wait:
            await self._wait(answers)
