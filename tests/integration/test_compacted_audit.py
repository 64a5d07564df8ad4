"""scenario replication --compacted: the per-key audit of a compacted topic whose cleaner runs
during the faults. An acknowledged message may be missing only when a later message of its key
is in the log; every key ends on its last acknowledged value (or a later one sent), in
publication order per partition; no value read was never produced. One cluster serves the
module, its cleaner backing off 200 ms."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.cluster import faults
from tidelog.cluster.delivery import Acked, DeliveryConsumer, DeliveryProducer, verify
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import (
    COMPACTED_BROKER_OVERRIDES,
    COMPACTED_TOPIC_CONFIG,
    SCENARIO_OVERRIDES,
    ScenarioSettings,
    run_scenario,
)
from tidelog.controller import topics, zookeeper


@pytest.fixture(scope="module")
def compacting(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("compacted-audit"))
    overrides = {**SCENARIO_OVERRIDES, **COMPACTED_BROKER_OVERRIDES}
    cluster.up(3, overrides=overrides, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


@pytest.mark.parametrize(("failure", "message_format"), [("hard_bounce", "0.9.0")])
def test_a_compacted_topic_under_faults_passes_the_key_audit(compacting, failure, message_format):
    settings = ScenarioSettings(
        failure, "leader", message_format, rate=200, settle_seconds=2.0, compacted=True
    )
    topic, report = asyncio.run(run_scenario(compacting, settings, progress=lambda _: None))

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 400, report.table()
    assert report.consumed < report.acked / 2, "the cleaner removed too little to matter"


def test_the_audit_reports_a_key_whose_acknowledged_value_is_gone_and_a_value_never_sent(
    compacting,
):
    """Real keyed messages on a compacted topic, checked against an oracle told of two more
    acknowledgements: one of a key written again later (obsolete, not reported) and one of a
    key never written again (lost); and a producer that claims to have sent fewer messages
    than the log holds (so some values read were never produced)."""
    with zookeeper.session(compacting.zookeeper) as client:
        topics.create_topic(client, "audited", 1, 3, dict(COMPACTED_TOPIC_CONFIG))
    faults.wait_for_full_isr(compacting, "audited")

    async def produce() -> tuple[DeliveryProducer, DeliveryConsumer]:
        producer = DeliveryProducer(compacting.bootstrap_servers, "audited", -1, 200, keys=5)
        consumer = DeliveryConsumer(compacting.bootstrap_servers, "audited", compacted=True)
        stop = asyncio.Event()
        running = [asyncio.create_task(producer.run(stop)), asyncio.create_task(consumer.run(stop))]
        await asyncio.sleep(2)
        stop.set()
        await asyncio.gather(*running)
        return producer, consumer

    producer, consumer = asyncio.run(produce())
    obsolete = Acked(0, 0, b"0-99999998", key=b"key-0-000")  # key-0-000 is written again later
    gone = Acked(0, 0, b"0-99999999", key=b"key-0-999")  # a key never written again
    report = asyncio.run(
        verify(
            compacting,
            "audited",
            [*producer.acked, obsolete, gone],
            consumer,
            producer,
            compacted=True,
        )
    )
    assert [entry.split(" ")[0] for entry in report.lost] == ["0-99999999"], report.table()
    assert report.unseen == [] and report.skipped == [], report.table()

    producer.sent_per_partition[0] = 1  # as if only message 0-00000000 had been sent
    report = asyncio.run(verify(compacting, "audited", producer.acked, consumer, producer, True))
    assert report.never_produced and all("0-00000000" not in e for e in report.never_produced)
