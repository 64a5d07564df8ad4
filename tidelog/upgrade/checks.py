"""What an upgrade checks between steps: replication caught up, and the format new messages take.

Formats are read from the segment files' bytes, on every replica, for the messages appended
after a mark. Every top-level entry starts with its offset (int64) and size (int32), and holds
its magic at byte 16: a v0/v1 message has its CRC at 12 and its offset is its last (a compressed
wrapper's is its last inner message's); a v2 batch has its partition leader epoch at 12, its
CRC-32C at 17, its last offset delta at 23 and its record count at 57.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

from tidelog.cluster.faults import topic_view
from tidelog.cluster.local import ClusterError, wait_until
from tidelog.cluster.rolling import RollableCluster
from tidelog.config import MESSAGE_FORMAT_VERSIONS, broker_config
from tidelog.controller import zookeeper

ENTRY_HEAD = struct.Struct(">qiIb")  # offset, size, crc (v0/v1), magic
BATCH_CRC_AND_DELTA = struct.Struct(">IhI")  # at byte 17 of a v2 batch: crc, attributes, delta
BATCH_COUNT = struct.Struct(">i")  # at byte 57 of a v2 batch
BATCH_HEAD_SIZE = 61
LOG_OVERHEAD = 12
Replica = tuple[str, int, int]  # topic, partition, broker id


def lagging(cluster: RollableCluster) -> tuple[list[str], list[str]]:
    """(under-replicated partitions, partitions without a leader), as "topic-partition"."""
    with zookeeper.session(cluster.zookeeper) as client:
        cache = zookeeper.read_cluster(client)
    under, leaderless = [], []
    for name, topic in sorted(cache.topics.items()):
        for number, replicas in sorted(topic.assignment.items()):
            state = topic.states.get(number)
            if state is None or state.leader < 0 or state.leader not in cache.brokers:
                leaderless.append(f"{name}-{number}")
            elif set(state.isr) != set(replicas):
                under.append(f"{name}-{number} (isr {list(state.isr)}, replicas {list(replicas)})")
    return under, leaderless


def wait_in_sync(cluster: RollableCluster, timeout: float) -> None:
    """Until every replica is in its partition's ISR (zero under-replicated partitions) and
    every partition has a live leader; TimeoutError naming what still lags."""
    last: list[tuple[list[str], list[str]]] = [([], [])]

    def caught_up() -> bool:
        last[0] = lagging(cluster)
        return not last[0][0] and not last[0][1]

    try:
        wait_until(caught_up, timeout, "every replica back in its ISR", interval=0.5)
    except ClusterError as error:  # wait_until's timeout: said again with what still lags
        under, leaderless = last[0]
        raise TimeoutError(
            f"{error}: {len(under)} under-replicated ({', '.join(under[:5])}), "
            f"{len(leaderless)} without a leader ({', '.join(leaderless[:5])})"
        ) from None


def elect_preferred_leaders(cluster: RollableCluster, timeout: float) -> None:
    """Moves each partition's leadership back to its preferred replica, as a rolling bounce
    would leave it on the brokers restarted first; waits until every one has it, in ZooKeeper
    and in every broker's own view (``leaders_applied``). The election
    is asked again whenever the controller has taken the last request and some partition is
    still elsewhere (its preferred replica was not yet in sync), and a request left pending (a
    run killed after asking) is waited for rather than refused."""

    def preferred() -> bool:
        with zookeeper.session(cluster.zookeeper) as client:
            now = zookeeper.read_cluster(client)
            elsewhere = [
                (name, p)
                for name, topic in now.topics.items()
                for p, replicas in topic.assignment.items()
                if replicas[0] in now.brokers
                and (topic.states.get(p) is None or topic.states[p].leader != replicas[0])
            ]
            if elsewhere:
                with contextlib.suppress(RuntimeError):  # one pending: the controller takes it
                    zookeeper.request_preferred_leader_election(client, elsewhere)
        return not elsewhere

    wait_until(preferred, timeout, "every partition led by its preferred replica", interval=0.5)
    wait_until(
        lambda: leaders_applied(cluster),
        timeout,
        "every broker to have taken the new leaders",
        interval=0.2,
    )


def leaders_applied(cluster: RollableCluster) -> bool:
    """Whether every registered broker's own view (its admin API) holds ZooKeeper's leader and
    leader epoch for every partition. Until then a replaced leader may still append: a mark of
    end offsets taken when ZooKeeper alone shows the new leader can have the old leader's
    messages after it."""
    with zookeeper.session(cluster.zookeeper) as client:
        truth = zookeeper.read_cluster(client)
    expected = {
        name: {number: [state.leader, state.leader_epoch] for number, state in t.states.items()}
        for name, t in truth.topics.items()
    }
    for broker in cluster.status():
        if not broker["registered"]:
            continue
        for name, states in expected.items():
            described = topic_view(broker["admin_port"], name)
            if described is None:  # not serving yet, or the topic not known yet
                return False
            seen = {
                p["partition"]: [p["leader"], p["leader_epoch"]] for p in described["partitions"]
            }
            if seen != states:
                return False
    return True


def leaders(cluster: RollableCluster) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's (leader, leader epoch) as ZooKeeper holds them."""
    with zookeeper.session(cluster.zookeeper) as client:
        cache = zookeeper.read_cluster(client)
    return {
        (name, number): (state.leader, state.leader_epoch)
        for name, topic in cache.topics.items()
        for number, state in topic.states.items()
    }


def partition_dirs(cluster: RollableCluster) -> dict[Replica, Path]:
    """Every replica's directory on disk."""
    found: dict[Replica, Path] = {}
    for broker_id in cluster.broker_ids:
        for log_dir in broker_config(cluster.broker_settings(broker_id))["log.dirs"]:
            for directory in Path(log_dir).glob("*-*"):
                topic, _, number = directory.name.rpartition("-")
                if directory.is_dir() and number.isdigit():
                    found[topic, int(number), broker_id] = directory
    return found


def entries(directory: Path, since: int = 0) -> Iterator[tuple[int, int]]:
    """(offset, magic) of each top-level entry whose last offset is at or after ``since``; a v2
    batch's offset is its base offset."""
    for offset, _, magic in headers(directory, since):
        yield offset, magic


def headers(directory: Path, since: int = 0) -> Iterator[tuple[int, int, int]]:
    """(offset, crc, magic) of each top-level entry whose last offset is at or after
    ``since``: a v0/v1 message's offset and CRC, a v2 batch's base offset and CRC-32C."""
    for first, _, crc, magic, _ in walk(directory, since):
        yield first, crc, magic


def walk(directory: Path, since: int = 0) -> Iterator[tuple[int, int, int, int, int]]:
    """(first offset, last offset, crc, magic, messages) of each top-level entry whose last
    offset is at or after ``since``: a v0/v1 message (first and last its own offset; a
    compressed wrapper counts once) or a v2 batch (its records counted)."""
    segments = sorted(directory.glob("*.log"), key=lambda path: int(path.stem))
    for index, segment in enumerate(segments):
        if index + 1 < len(segments) and int(segments[index + 1].stem) <= since:
            continue  # wholly before the mark
        with open(segment, "rb") as file:
            data = file.read()
        position = 0
        while position + ENTRY_HEAD.size <= len(data):
            offset, size, crc, magic = ENTRY_HEAD.unpack_from(data, position)
            if size <= 0 or position + LOG_OVERHEAD + size > len(data):
                break  # a partial entry at the end of an active segment
            last, count = offset, 1
            if magic >= 2 and size + LOG_OVERHEAD >= BATCH_HEAD_SIZE:
                crc, _, delta = BATCH_CRC_AND_DELTA.unpack_from(data, position + 17)
                last = offset + delta
                (count,) = BATCH_COUNT.unpack_from(data, position + 57)
            if last >= since:
                yield offset, last, crc, magic, count
            position += LOG_OVERHEAD + size


def end_offsets(cluster: RollableCluster) -> dict[str, int]:
    """Each replica's next offset on disk, keyed "topic/partition/broker"."""
    marks = {}
    for (topic, number, broker_id), directory in partition_dirs(cluster).items():
        last = -1
        segments = sorted(directory.glob("*.log"), key=lambda path: int(path.stem))
        if segments:
            last = int(segments[-1].stem) - 1
            for _, entry_last, *_ in walk(directory, last + 1):
                last = entry_last
        marks[f"{topic}/{number}/{broker_id}"] = last + 1
    return marks


def formats_since(cluster: RollableCluster, marks: dict[str, int]) -> dict[str, dict[int, int]]:
    """For each replica marked, how many messages of each magic it got after its mark (a
    compressed v0/v1 wrapper counts once, a v2 batch by its records)."""
    counts: dict[str, dict[int, int]] = {}
    for (topic, number, broker_id), directory in partition_dirs(cluster).items():
        key = f"{topic}/{number}/{broker_id}"
        if key not in marks:
            continue
        found: dict[int, int] = {}
        for *_, magic, messages in walk(directory, marks[key]):
            found[magic] = found.get(magic, 0) + messages
        if found:
            counts[key] = found
    return counts


def expected_formats(cluster: RollableCluster, broker_format: int) -> dict[str, int]:
    """Each topic's format (magic): its message.format.version override, or the brokers'
    (``broker_format``). A negative ``broker_format`` stays negative: "the brokers'"."""
    with zookeeper.session(cluster.zookeeper) as client:
        cache = zookeeper.read_cluster(client)
    out = {}
    for name, topic in cache.topics.items():
        version = topic.config.get("message.format.version")
        if version is not None:
            out[name] = MESSAGE_FORMAT_VERSIONS[version]
            continue
        out[name] = broker_format
    return out
