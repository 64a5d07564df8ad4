"""The controller's elections against a real ZooKeeper reached over a link with latency.

Until a partition's new state is written, its old leader still leads it while its followers may
already follow the new leader, and acks=all produces to it wait. So an election must write its
partitions' states together, in a few round trips whatever the number of partitions, not one
after the other: over a link with latency, the time it takes tells which.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tidelog.cluster.zookeeper import EmbeddedZooKeeper
from tidelog.controller import controller, zookeeper

ONE_WAY_S = 0.02  # latency of the link to ZooKeeper, each way
PARTITIONS = 60


class SlowLink:
    """A TCP relay on 127.0.0.1 to ``port`` that delivers every chunk ``delay`` seconds after it
    arrived, in order, both ways: a link with latency, no loss, and pipelining intact."""

    def __init__(self, port: int, delay: float) -> None:
        self.port, self.delay = port, delay
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.port))
            self.sockets += [client, upstream]
            self._relay(client, upstream)
            self._relay(upstream, client)

    def _relay(self, source: socket.socket, target: socket.socket) -> None:
        chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = chunks.get()
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    if not data:
                        target.shutdown(socket.SHUT_WR)
                        return
                    target.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@pytest.fixture(scope="module")
def slow_zookeeper(tmp_path_factory) -> Iterator[str]:
    """A ZooKeeper of its own (the tests write partition states no broker must act on), reached
    through a SlowLink; yields the link's connect string."""
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    process = server.start()
    link = SlowLink(server.port, ONE_WAY_S)
    try:
        yield link.address
    finally:
        link.close()
        process.stop(10.0)


def test_a_preferred_leader_election_writes_every_partition_together(slow_zookeeper):
    with zookeeper.session(slow_zookeeper) as client:
        zookeeper.ensure_layout(client)
        # led by broker 2, then reordered so that broker 1 is every partition's preferred
        zookeeper.create_topic_nodes(client, "moved", {p: [2, 1, 3] for p in range(PARTITIONS)}, {})
        zookeeper.reorder_replicas(client, "moved", {p: [1, 2, 3] for p in range(PARTITIONS)})

        started = time.monotonic()
        changes = controller.elect_preferred_leaders(
            client, [("moved", p) for p in range(PARTITIONS)], {1, 2, 3}, controller_epoch=1
        )
        took = time.monotonic() - started
        states = zookeeper.read_topic(client, "moved").states

    assert sorted(c.partition for c in changes if c.state is not None) == list(range(PARTITIONS))
    assert {(s.leader, s.leader_epoch) for s in states.values()} == {(1, 1)}
    # a round trip per partition would take PARTITIONS * 2 * ONE_WAY_S = 2.4 s at the very least
    # (one by one: 211 round trips for 30 partitions); written together: about 11
    round_trips = took / (2 * ONE_WAY_S)
    assert round_trips < PARTITIONS, f"{took:.2f} s: {round_trips:.0f} round trips"
