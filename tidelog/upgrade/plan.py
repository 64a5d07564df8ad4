"""What an upgrade does: the cluster as its brokers are set up, and the steps to a target.

The steps follow the message-format design's phases, which are also Kafka 0.11's upgrade notes
for format v2. Phase 1: every broker rolled to the new code with inter.broker.protocol.version
and log.message.format.version pinned to what the cluster runs now (0.9.0 from a 0.9 cluster),
then rolled again with the protocol bumped to the target's (TARGETS: 0.10.0-IV0, replication by
Fetch v2, for 0.10; 2.1 for 2.1) while the format is held. Phase 2, once the consumers are
upgraded: rolled with the target's log.message.format.version (0.10.0, format v1; 2.1, v2).
A step is one broker restarted with changed settings; a step whose settings the broker already
has is left out, so a plan made of a cluster half way through starts where it stands, and a
cluster at 0.10 goes on to 2.1 by the same two phases.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tidelog.cluster.rolling import RollableCluster
from tidelog.config import (
    BROKER_RELEASES,
    INTER_BROKER_PROTOCOL_VERSIONS,
    MESSAGE_FORMAT_VERSIONS,
    broker_config,
)


@dataclass(frozen=True)
class Target:
    """A release an upgrade goes to: the inter-broker protocol of its phase 1 and the message
    format of its phase 2 (each applied only to a broker below it)."""

    protocol: str
    message_format: str


TARGETS: dict[str, Target] = {
    "0.10.0": Target("0.10.0-IV0", "0.10.0"),
    "0.10.1": Target("0.10.0-IV0", "0.10.0"),
    "2.1": Target("2.1", "2.1"),
}
RELEASE_KEY = "broker.protocol.max.version"
PROTOCOL_KEY = "inter.broker.protocol.version"
FORMAT_KEY = "log.message.format.version"
PROTOCOL_ORDER = INTER_BROKER_PROTOCOL_VERSIONS  # oldest first, as Kafka's ApiVersion
FORMAT_ORDER = tuple(MESSAGE_FORMAT_VERSIONS)  # oldest first


@dataclass(frozen=True)
class BrokerSettings:
    """One broker's release, inter-broker protocol and message format, as it runs them."""

    broker_id: int
    release: str
    protocol: str
    message_format: str


@dataclass
class Step:
    """One broker restarted with ``settings`` written into its server.properties, in ``phase``;
    ``format_after`` is the magic its new segments must hold once the phase is done."""

    phase: str
    broker_id: int
    settings: dict[str, str]
    format_after: int
    status: str = "pending"  # pending, started, done, failed
    detail: dict = field(default_factory=dict)

    def describe(self) -> str:
        changes = ", ".join(f"{key}={value}" for key, value in self.settings.items())
        return f"{self.phase}: roll broker {self.broker_id} with {changes}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict) -> Step:
        return cls(**document)


def read_settings(cluster: RollableCluster) -> list[BrokerSettings]:
    """Each broker's effective settings, from its server.properties in the cluster directory."""
    found = []
    for broker_id in cluster.broker_ids:
        values = broker_config(cluster.broker_settings(broker_id))
        found.append(
            BrokerSettings(broker_id, values[RELEASE_KEY], values[PROTOCOL_KEY], values[FORMAT_KEY])
        )
    return found


def plan(brokers: list[BrokerSettings], target: str) -> list[Step]:
    """The steps from ``brokers`` as they are to ``target`` (a release of TARGETS)."""
    if target not in TARGETS:
        raise ValueError(f"--to {target!r}: allowed: {', '.join(TARGETS)}")
    protocol, message_format = TARGETS[target].protocol, TARGETS[target].message_format
    steps: list[Step] = []
    # the pins: what the oldest broker runs now, so new code speaks as the old code does
    pinned_protocol = min((b.protocol for b in brokers), key=PROTOCOL_ORDER.index)
    pinned_format = min((b.message_format for b in brokers), key=FORMAT_ORDER.index)
    formats_now = MESSAGE_FORMAT_VERSIONS[pinned_format]
    for broker in brokers:
        if BROKER_RELEASES.index(broker.release) < BROKER_RELEASES.index(target):
            settings = {
                RELEASE_KEY: target,
                PROTOCOL_KEY: pinned_protocol,
                FORMAT_KEY: pinned_format,
            }
            steps.append(Step("phase 1: new code, pinned", broker.broker_id, settings, formats_now))
    for broker in brokers:
        if PROTOCOL_ORDER.index(broker.protocol) < PROTOCOL_ORDER.index(protocol):
            settings = {PROTOCOL_KEY: protocol}
            steps.append(
                Step(f"phase 1: protocol {protocol}", broker.broker_id, settings, formats_now)
            )
    magic = MESSAGE_FORMAT_VERSIONS[message_format]
    for broker in brokers:
        if MESSAGE_FORMAT_VERSIONS[broker.message_format] < magic:
            settings = {FORMAT_KEY: message_format}
            steps.append(
                Step(f"phase 2: format {message_format}", broker.broker_id, settings, magic)
            )
    return steps
