"""A broker reads the cluster's metadata in a few round trips, whatever the number of topics.

Every ZooKeeper read is a hop to kazoo's thread and back, which a busy process makes several
milliseconds long (a broker starting has its admin API's import beside it), and a broker reads
everything at start and after each controller change. The reads go out a round at a time, each
round's at once, and they set the same watches as reads one by one. Against a real ZooKeeper."""

from __future__ import annotations

import threading
from typing import Any

from tidelog.controller import zookeeper

TOPICS = 40


class CountedRounds:
    """A KazooClient whose round trips are counted: each synchronous call is one, and reads
    sent at once (``*_async``) are one together, counted when the first of them is awaited."""

    def __init__(self, zk: Any) -> None:
        self.zk, self.rounds, self._sent = zk, 0, False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.zk, name)
        if name in ("get", "get_children", "exists"):

            def call(*args: Any, **kwargs: Any) -> Any:
                self.rounds += 1
                return method(*args, **kwargs)

            return call
        if name.endswith("_async"):

            def send(*args: Any, **kwargs: Any) -> Any:
                self._sent = True
                return Awaited(self, method(*args, **kwargs))

            return send
        return method

    def awaited(self) -> None:
        if self._sent:
            self.rounds, self._sent = self.rounds + 1, False


class Awaited:
    def __init__(self, rounds: CountedRounds, result: Any) -> None:
        self._rounds, self._result = rounds, result

    def get(self) -> Any:
        self._rounds.awaited()
        return self._result.get()


def make_topics(zk: Any, prefix: str) -> None:
    for n in range(TOPICS):
        config = {"retention.ms": str(1000 + n)} if n % 2 else {}
        zookeeper.create_topic_nodes(zk, f"{prefix}-{n}", {0: [1, 2], 1: [2, 1]}, config)


def test_a_cluster_of_forty_topics_is_read_in_a_handful_of_round_trips(connect_string):
    with zookeeper.session(connect_string) as zk:
        make_topics(zk, "many")
        zookeeper.update_isrs(zk, 1, [("many-7", 0, 0, frozenset({1}))])
        counted = CountedRounds(zk)

        cache = zookeeper.read_cluster(counted, lambda event: None)

    # the lists and the single nodes, the watches of those not there, the brokers, the
    # topics, their configs and partitions' states (read topic by topic: 130)
    assert counted.rounds <= 5
    ours = {name: topic for name, topic in cache.topics.items() if name.startswith("many-")}
    assert len(ours) == TOPICS
    assert ours["many-3"].assignment == {0: (1, 2), 1: (2, 1)}
    assert ours["many-3"].config == {"retention.ms": "1003"}
    assert ours["many-4"].config == {}
    assert ours["many-7"].states[0].isr == (1,) and ours["many-7"].states[0].zk_version == 1
    assert ours["many-7"].states[1].isr == (2, 1) and ours["many-7"].states[1].zk_version == 0


def test_the_reads_at_once_set_the_watches_of_nodes_not_made_yet(connect_string):
    fired: list[str] = []
    woken = threading.Event()

    def watch(event: Any) -> None:
        fired.append(event.path)
        woken.set()

    with zookeeper.session(connect_string) as zk:
        zookeeper.read_cluster(zk, watch)  # no preferred replica election asked for yet
        zk.create(zookeeper.PREFERRED_REPLICA_ELECTION, b"{}")
        try:
            assert woken.wait(10), "the election's creation woke no watch"
        finally:
            zk.delete(zookeeper.PREFERRED_REPLICA_ELECTION)
    assert zookeeper.PREFERRED_REPLICA_ELECTION in fired


def test_changed_topics_and_states_are_read_together(connect_string):
    with zookeeper.session(connect_string) as zk:
        make_topics(zk, "changed")
        zookeeper.update_isrs(zk, 2, [("changed-1", 1, 0, frozenset({2}))])
        paths = {zookeeper.topic_path(f"changed-{n}") for n in range(0, TOPICS, 2)}
        paths |= {zookeeper.state_path("changed-1", 1), zookeeper.topic_path("gone")}
        counted = CountedRounds(zk)

        delta = zookeeper.read_changes(counted, paths, {"changed-1", "gone"}, lambda event: None)

    # the topics, the watch of the one gone, their configs and states, the changed state
    assert counted.rounds <= 4
    assert set(delta.topics) == {f"changed-{n}" for n in range(0, TOPICS, 2)}
    assert delta.removed == {"gone"}
    state = delta.states[("changed-1", 1)]
    assert state is not None and state.isr == (2,) and state.zk_version == 1
