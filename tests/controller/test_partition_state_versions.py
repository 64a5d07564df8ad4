"""A broker's metadata never goes back to an ISR the leader has already changed.

Every broker reads partition states through its own ZooKeeper watches, and also takes them from
the controller's LeaderAndIsr and UpdateMetadata. A leader changes its ISR in ZooKeeper without a
new leader epoch, so a controller's request carrying a state it read before that change (say the
whole state it sends a broker that has just come back) must not replace the newer ISR the
broker's watch has already read: within a leader epoch, the version of the state's ZooKeeper
node orders them, as Kafka's zk_version does. Against a real ZooKeeper."""

from __future__ import annotations

from tidelog.broker.control import ControlRequests
from tidelog.broker.metadata import MetadataCache, PartitionState
from tidelog.controller import zookeeper
from tidelog.controller.control_plane import partition_entry


def control_request(epoch: int, sequence: int, states: list[tuple[int, PartitionState]]) -> dict:
    return {
        "controller_id": 1,
        "controller_epoch": epoch,
        "sequence": sequence,
        "partitions": [partition_entry("orders", p, (1, 2, 3), s) for p, s in states],
    }


def test_states_read_from_zookeeper_carry_the_version_of_their_node(connect_string):
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "versions", {0: [1, 2, 3]}, {})

        first = zookeeper.read_partition_state(zk, "versions", 0)
        written = zookeeper.update_isrs(zk, 1, [("versions", 0, 0, frozenset({1, 2}))])
        shrunk = zookeeper.read_topic(zk, "versions")

        assert first is not None and first.zk_version == 0
        assert written == [True]
        assert shrunk is not None
        assert shrunk.states[0].isr == (1, 2) and shrunk.states[0].zk_version == 1
        assert first.is_older_than(shrunk.states[0])


def test_a_controllers_state_read_before_the_leaders_isr_change_does_not_undo_it(
    connect_string,
):
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "orders", {0: [1, 2, 3]}, {})
        zookeeper.update_isrs(zk, 1, [("orders", 0, 0, frozenset({1, 2}))])
        controllers_read = zookeeper.read_partition_state(zk, "orders", 0)  # ISR [1, 2]
        zookeeper.update_isrs(zk, 1, [("orders", 0, 0, frozenset({1, 2, 3}))])  # 3 caught up
        watch_read = zookeeper.read_topic(zk, "orders")
    assert controllers_read is not None and watch_read is not None
    broker = MetadataCache(topics={"orders": watch_read})
    control = ControlRequests(3, broker, lambda: None, lambda *_: None)

    answer = control.update_metadata(control_request(4, 1, [(0, controllers_read)]))

    assert answer["partitions"] == [{"topic": "orders", "partition": 0, "error_code": 0}]
    assert broker.topics["orders"].states[0].isr == (1, 2, 3)

    newer_epoch = PartitionState(2, 1, (2, 3), 4, watch_read.states[0].zk_version + 1)
    control.leader_and_isr(control_request(4, 2, [(0, newer_epoch)]))

    assert broker.topics["orders"].states[0] == newer_epoch


def test_a_state_without_a_version_is_taken_as_before():
    """A controller that sends no zk_version (or a state read where the node had just been
    made) cannot be ordered within an epoch: its state is taken, as it always was."""
    held = PartitionState(1, 3, (1, 2, 3), 4, zk_version=9)
    broker = MetadataCache()
    control = ControlRequests(2, broker, lambda: None, lambda *_: None)
    control.update_metadata(control_request(4, 1, [(0, held)]))

    unversioned = PartitionState(1, 3, (1, 2), 4)
    control.update_metadata(control_request(4, 2, [(0, unversioned)]))

    assert broker.topics["orders"].states[0].isr == (1, 2)
