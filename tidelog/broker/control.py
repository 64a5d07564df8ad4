"""The control plane as a broker receives it: LeaderAndIsr, UpdateMetadata and StopReplica from
the controller, over the admin HTTP API, fenced by controller epoch and leader epoch.

A request from a controller whose epoch is older than the newest this broker has seen is refused
whole (STALE_CONTROLLER_EPOCH): a deposed controller cannot undo its successor's decisions.
Within one controller epoch, requests carry a growing sequence number: one at or below the last
applied is a late copy of an attempt the controller already repeated (or a repeat of one
applied whose answer was lost), answered without being applied, so an older broker list or
state never replaces a newer one. A partition state older (by leader epoch) than the one the
broker holds is refused for that partition alone; one of the same leader epoch at an older
version of its ZooKeeper node (the leader has changed the ISR since the controller read it, and
this broker's own watch has read the change) is answered without being taken. Accepted states go
into the metadata cache and the replica manager acts on them at once, without waiting for its
ZooKeeper watches.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.broker.metadata import BrokerEndpoint, MetadataCache, PartitionState, TopicMetadata
from tidelog.errors import ErrorCode

log = logging.getLogger(__name__)


class ControlRequests:
    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        apply: Callable[[], None],
        stop_replicas: Callable[[list[tuple[str, int]], bool], None],
        hold_again: Callable[[list[tuple[str, int]]], None] = lambda partitions: None,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.apply = apply
        self.stop_replicas = stop_replicas
        # a LeaderAndIsr's partitions: those stopped without delete are held here again
        self.hold_again = hold_again
        # set once this broker is stopping: only then is a StopReplica without delete taken
        # (the controller sends one in a controlled shutdown; one that arrives late, at the
        # broker started again, would leave its partitions unreplicated here for good)
        self.stopping = False
        # set by a broker that can act as controller: answers a ControlledShutdown request
        self.shutdown_handler: Callable[[int], Awaitable[dict]] | None = None
        # False once this broker's own controlled shutdown has moved its leaderships away:
        # states are still taken, but no more fetchers start for a broker about to stop
        self.applying = True
        self.controller_epoch = -1
        self.sequence = 0  # the last applied in controller_epoch (0: none carried one)

    def _fenced(self, body: dict) -> dict | None:
        epoch = int(body["controller_epoch"])
        sequence = int(body.get("sequence", 0))
        if epoch < self.controller_epoch:
            log.warning(
                "refused a request from controller %s in epoch %d: epoch %d is current",
                body.get("controller_id"),
                epoch,
                self.controller_epoch,
            )
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH), "partitions": []}
        if epoch == self.controller_epoch and 0 < sequence <= self.sequence:
            log.info(
                "ignored request %d of controller %s (epoch %d): %d was applied already",
                sequence,
                body.get("controller_id"),
                epoch,
                self.sequence,
            )
            return {"error_code": int(ErrorCode.NONE), "partitions": [], "superseded": True}
        self.controller_epoch = epoch
        self.sequence = sequence
        return None

    def _take_states(self, body: dict) -> list[dict[str, Any]]:
        answers = []
        for entry in body.get("partitions", []):
            topic, number = entry["topic"], int(entry["partition"])
            state = PartitionState(
                int(entry["leader"]),
                int(entry["leader_epoch"]),
                tuple(entry["isr"]),
                int(body["controller_epoch"]),
                int(entry.get("zk_version", -1)),
            )
            metadata = self.metadata.topics.get(topic)
            if metadata is None:
                metadata = TopicMetadata(topic, {})
                self.metadata.topics[topic] = metadata
            current = metadata.states.get(number)
            if current is not None and state.leader_epoch < current.leader_epoch:
                code = ErrorCode.STALE_CONTROLLER_EPOCH
            elif current is not None and state.is_older_than(current):
                # the leader changed the ISR after the controller read this state, and this
                # broker's watch has read that change already: keep it
                code = ErrorCode.NONE
            else:
                metadata.assignment[number] = tuple(entry["replicas"])
                metadata.states[number] = state
                code = ErrorCode.NONE
            answers.append({"topic": topic, "partition": number, "error_code": int(code)})
        return answers

    def leader_and_isr(self, body: dict) -> dict:
        refused = self._fenced(body)
        if refused:
            return refused
        answers = self._take_states(body)
        self.hold_again([(a["topic"], a["partition"]) for a in answers if not a["error_code"]])
        if self.applying:
            self.apply()
        log.info(
            "LeaderAndIsr from controller %s (epoch %s) for %d partitions",
            body.get("controller_id"),
            body["controller_epoch"],
            len(answers),
        )
        return {"error_code": 0, "partitions": answers}

    def update_metadata(self, body: dict) -> dict:
        refused = self._fenced(body)
        if refused:
            return refused
        if "brokers" in body:
            self.metadata.brokers = {
                int(b["id"]): BrokerEndpoint.from_json(b) for b in body["brokers"]
            }
        self.metadata.controller_id = int(body.get("controller_id", self.metadata.controller_id))
        answers = self._take_states(body)
        if self.applying:
            self.apply()
        return {"error_code": 0, "partitions": answers}

    def stop_replica(self, body: dict) -> dict:
        refused = self._fenced(body)
        if refused:
            return refused
        delete = bool(body.get("delete", False))
        partitions = [(e["topic"], int(e["partition"])) for e in body.get("partitions", [])]
        if delete or self.stopping:
            self.stop_replicas(partitions, delete)
            code = ErrorCode.NONE
        else:
            log.warning(
                "refused a StopReplica without delete from controller %s for %d partitions: this "
                "broker is not shutting down (a controlled shutdown's request, late)",
                body.get("controller_id"),
                len(partitions),
            )
            code = ErrorCode.INVALID_REQUEST
        answers = [{"topic": t, "partition": p, "error_code": int(code)} for t, p in partitions]
        return {"error_code": 0, "partitions": answers}

    async def controlled_shutdown(self, body: dict) -> dict:
        """ControlledShutdown from broker ``broker_id``, answered by the controller: the
        partitions it still leads (Kafka's partitionsRemaining); NOT_CONTROLLER elsewhere."""
        if self.shutdown_handler is None:
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "partitions_remaining": []}
        return await self.shutdown_handler(int(body["broker_id"]))
