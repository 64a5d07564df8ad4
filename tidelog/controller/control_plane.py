"""The control plane as the controller sends it: LeaderAndIsr and UpdateMetadata to brokers'
admin APIs over aiohttp, each request carrying the controller's id and epoch."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from tidelog.broker.metadata import BrokerEndpoint, MetadataCache
from tidelog.controller.controller import Change

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)


def partition_entry(topic: str, partition: int, replicas, state) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
        "replicas": list(replicas),
    }


class ControlPlane:
    """Sends the controller's decisions to the brokers they concern."""

    def __init__(self, controller_id: int, timeout_ms: int = 10000) -> None:
        self.controller_id = controller_id
        self.timeout_s = timeout_ms / 1000  # controller.socket.timeout.ms
        self._session: aiohttp.ClientSession | None = None
        self.brokers_told: set[int] = set()  # live brokers that have had a full LeaderAndIsr

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _post(self, broker: BrokerEndpoint, kind: str, body: dict) -> dict | None:
        if broker.admin is None:
            return None
        import aiohttp  # here: a broker that never acts as controller does not load it

        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
        try:
            async with self._session.post(
                f"http://{broker.admin}/control/{kind}", json=body
            ) as reply:
                answer = await reply.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            why = str(error) or type(error).__name__
            if isinstance(error, TimeoutError):
                why = f"no answer in {self.timeout_s:g} s (controller.socket.timeout.ms)"
            log.warning("controller: %s to broker %d failed: %s", kind, broker.broker_id, why)
            return None
        if answer.get("error_code"):
            log.warning("controller: broker %d refused %s: %s", broker.broker_id, kind, answer)
        return answer

    async def stop_replicas(
        self, epoch: int, metadata: MetadataCache, topic: str, delete: bool
    ) -> list[int]:
        """StopReplica for every partition of ``topic`` to the live brokers holding one;
        returns the brokers that acknowledged."""
        holders: dict[int, list[dict]] = defaultdict(list)
        described = metadata.topics.get(topic)
        for number, replicas in described.assignment.items() if described else []:
            for replica in replicas:
                holders[replica].append({"topic": topic, "partition": number})
        header = {"controller_id": self.controller_id, "controller_epoch": epoch, "delete": delete}
        targets = [b for b in holders if b in metadata.brokers]
        answers = await asyncio.gather(
            *(
                self._post(
                    metadata.brokers[b], "stop-replica", {**header, "partitions": holders[b]}
                )
                for b in targets
            )
        )
        return [
            b
            for b, answer in zip(targets, answers, strict=True)
            if answer and not answer.get("error_code")
        ]

    async def send(self, epoch: int, metadata: MetadataCache, changes: list[Change]) -> None:
        """LeaderAndIsr for changed partitions to their replicas, the whole state to brokers new
        since the last call, and UpdateMetadata to every live broker."""
        live = metadata.brokers
        per_broker: dict[int, list[dict]] = defaultdict(list)
        for change in changes:
            if change.state is None:
                continue
            entry = partition_entry(change.topic, change.partition, change.replicas, change.state)
            for replica in change.replicas:
                per_broker[replica].append(entry)
        for broker_id in set(live) - self.brokers_told:
            for name, topic in metadata.topics.items():
                for number, replicas in topic.assignment.items():
                    state = topic.states.get(number)
                    if state is not None and broker_id in replicas:
                        per_broker[broker_id].append(partition_entry(name, number, replicas, state))
        self.brokers_told = set(live)
        header = {"controller_id": self.controller_id, "controller_epoch": epoch}
        sends = [
            self._post(live[b], "leader-and-isr", {**header, "partitions": entries})
            for b, entries in per_broker.items()
            if b in live and entries
        ]
        if sends or changes:
            brokers = [b.to_json() for b in live.values()]
            changed = [
                partition_entry(c.topic, c.partition, c.replicas, c.state)
                for c in changes
                if c.state
            ]
            sends += [
                self._post(
                    broker, "update-metadata", {**header, "brokers": brokers, "partitions": changed}
                )
                for broker in live.values()
            ]
        await asyncio.gather(*sends)
