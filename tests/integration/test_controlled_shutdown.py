"""Controlled shutdown, as Kafka's default: a broker asked to stop first has the controller move
every leadership it holds to another in-sync replica, so an acks=all producer never sees a failed
delivery and the partitions it led have a new leader before it exits."""

from __future__ import annotations

import re

import pytest

from tests.integration.acked_producer import AckedProducer
from tests.integration.conftest import wait_for_leaders
from tests.integration.test_reassignment import read_back
from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper

TOPIC = "payments"
PARTITIONS = 6
ANSWER_TIMEOUT_MS = 3000  # controller.socket.timeout.ms


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("controlled"))
    overrides = {
        "controlled.shutdown.retry.backoff.ms": "200",
        "controller.socket.timeout.ms": str(ANSWER_TIMEOUT_MS),
        "min.insync.replicas": "2",
    }
    cluster.up(3, overrides=overrides, progress=lambda _: None)
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, TOPIC, PARTITIONS, 3)
    wait_for_leaders(cluster, TOPIC, PARTITIONS)
    yield cluster
    cluster.down(progress=lambda _: None)


def leaders(cluster: LocalCluster) -> dict[int, int]:
    with zookeeper.session(cluster.zookeeper) as client:
        found = zookeeper.read_topic(client, TOPIC)
    assert found is not None
    return {p: state.leader for p, state in found.states.items()}


def test_a_stopped_broker_hands_its_leaderships_over_before_it_exits(cluster):
    wait_for_full_isr(cluster, TOPIC)
    stopping = max(set(leaders(cluster).values()), key=list(leaders(cluster).values()).count)
    led = [p for p, leader in leaders(cluster).items() if leader == stopping]
    producer = AckedProducer(cluster.bootstrap_servers, TOPIC, PARTITIONS, rate=200).start()
    try:
        wait_until(lambda: producer.count() > 200, 30, "200 acknowledged messages")
        logged_before = log_sizes(cluster)
        cluster.stop_broker(stopping)
        settled = producer.count()
        wait_until(lambda: producer.count() > settled + 200, 30, "200 more acknowledgements")
    finally:
        producer.stop()

    assert producer.failed == []
    assert not set(leaders(cluster).values()) & {stopping, -1}
    broker_log = (cluster.directory / f"broker-{stopping}" / "broker.log").read_text()
    assert broker_log.index("controlled shutdown succeeded") < broker_log.index(
        f"broker {stopping} stopped"
    )
    controller_logs = "".join(
        (cluster.directory / f"broker-{b}" / "broker.log").read_text() for b in (1, 2, 3)
    )
    for partition in led:
        assert f"{TOPIC}-{partition}: leader {stopping} -> " in controller_logs
    assert set(producer.acked) <= read_back(cluster, TOPIC, PARTITIONS)
    # the partitions it followed were stopped on it before it left their ISRs (StopReplica
    # without delete, as Kafka's controller): no leader took it back in before it exited
    followed = set(range(PARTITIONS)) - set(led)
    stopping_log = (cluster.directory / f"broker-{stopping}" / "broker.log").read_text()
    for partition in followed:
        assert f"{TOPIC}-{partition}: no longer held here" in stopping_log
    assert expansions_with(cluster, stopping, followed, since=logged_before) == []

    cluster.start_broker(stopping)
    wait_for_full_isr(cluster, TOPIC)


def log_sizes(cluster: LocalCluster) -> dict[int, int]:
    return {b: (cluster.directory / f"broker-{b}" / "broker.log").stat().st_size for b in (1, 2, 3)}


def expansions_with(
    cluster: LocalCluster, broker: int, partitions: set[int], since: dict[int, int]
) -> list[str]:
    """The lines the brokers logged after ``since`` (each log's size then), from the time
    ``broker`` first stopped holding a partition on, where a leader of one of ``partitions``
    took ``broker`` into its ISR."""
    written = {}
    for b, size in since.items():
        with open(cluster.directory / f"broker-{b}" / "broker.log", "rb") as log:
            log.seek(size)
            written[b] = log.read().decode().splitlines()
    stopped_at = next(line[:23] for line in written[broker] if "no longer held here" in line)
    pattern = re.compile(rf"{TOPIC}-(\d+): ISR expands from \[[\d, ]*\] to \[([\d, ]*)\]")
    found = []
    for lines in written.values():
        for line in lines:
            match = pattern.search(line)
            if (
                match
                and line[:23] >= stopped_at  # each line opens with its time
                and int(match[1]) in partitions
                and broker in {int(r) for r in match[2].split(", ")}
            ):
                found.append(line)
    return found


def test_with_controlled_shutdown_off_the_broker_stops_as_before(cluster):
    stopping = 3
    cluster.restart_broker(
        stopping, {"controlled.shutdown.enable": "false"}, progress=lambda _: None
    )
    wait_for_full_isr(cluster, TOPIC)

    cluster.stop_broker(stopping)

    broker_log = (cluster.directory / f"broker-{stopping}" / "broker.log").read_text()
    last_run = broker_log[broker_log.rindex("starting: loading logs") :]
    assert "controlled shutdown" not in last_run
    wait_until(
        lambda: stopping not in leaders(cluster).values(),
        30,
        f"the controller to elect for what broker {stopping} led",
    )
    cluster.start_broker(stopping)


def test_a_controller_that_lost_zookeeper_still_stops_after_its_attempts(cluster):
    """The last of the module: ZooKeeper goes. A controlled shutdown's request waits for the
    controller's answer at most controller.socket.timeout.ms, also when the broker is the
    controller itself and its answer waits on a ZooKeeper that is gone; after
    controlled.shutdown.max.retries attempts the broker stops anyway, as Kafka's does."""
    with zookeeper.session(cluster.zookeeper) as client:
        controller = zookeeper.read_controller(client)
    assert cluster.state is not None and cluster.state.zookeeper_process is not None
    cluster.state.zookeeper_process.stop(5.0)

    # three attempts of at most 3 s each, 0.2 s apart, and the stop itself
    cluster.stop_broker(controller, timeout=3 * ANSWER_TIMEOUT_MS / 1000 + 10)

    broker_log = cluster.broker(controller).log_path.read_text()
    last_run = broker_log[broker_log.rindex("shutting down cleanly") :]
    assert "controlled shutdown did not complete in 3 attempts" in last_run
    assert f"broker {controller} stopped" in last_run
