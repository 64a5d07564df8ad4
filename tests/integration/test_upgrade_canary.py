"""`tidelog upgrade canary` and `rollback` on real brokers, under load from 0.9-era and 0.10-era
kafka-python clients: one broker on format v1 (its preferred leadership moved away first but
for one partition), then taken back (its copies of the partitions it led deleted and
re-replicated). Each is killed at every step (the tool stopped as a kill would, and the broker
killed once) and resumed by running it again; no acknowledged message is lost."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import run_tidelog
from tidelog import cli, runtime
from tidelog.cluster.delivery import Acked, verify
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.scenario import SCENARIO_OVERRIDES
from tidelog.controller import topics, zookeeper
from tidelog.upgrade.canary import CANARY_JOURNAL, KINDS, CanaryJournal, CanaryRun
from tidelog.upgrade.scenario import fetch_bytes

from .conftest import magics_on_disk

PHASE_ONE_DONE = {
    "broker.protocol.max.version": "0.10.0",
    "inter.broker.protocol.version": "0.10.0-IV0",
    "log.message.format.version": "0.9.0",
}
CANARY = 2
ERAS = {"old": (0, 9), "new": (0, 10, 0)}  # kafka-python api_version: Produce/Fetch v1, v2
PARTITIONS = 3
TOPICS = {era: f"canary-{era}" for era in ERAS}


class Crash(Exception):
    """Stops a run at a crash point, as a kill of the tool would: nothing after it runs."""


@dataclass
class Load:
    """An acks=all producer per era, each on its own topic (so order per partition can be
    checked), and a consumer per era reading both topics, in threads until ``stop``."""

    cluster: LocalCluster
    topics: dict[str, str]
    first_sequence: int = 0  # above the last one of an earlier load of the same topics
    acked: dict[str, list[Acked]] = field(default_factory=dict)
    consumed: dict[str, set[bytes]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)  # the producers stop
    drain: threading.Event = field(default_factory=threading.Event)  # they have stopped
    producers: list[threading.Thread] = field(default_factory=list)
    consumers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for era in ERAS:
            self.acked[era] = []
            self.consumed[era] = set()
            self.producers.append(threading.Thread(target=self._produce, args=(era,), daemon=True))
            self.consumers.append(threading.Thread(target=self._consume, args=(era,), daemon=True))
        for thread in self.producers + self.consumers:
            thread.start()

    def _produce(self, era: str) -> None:
        producer = KafkaProducer(
            bootstrap_servers=self.cluster.bootstrap_servers,
            api_version=ERAS[era],
            acks="all",
            retries=0,  # each message sent once: one found twice is a real duplicate
            request_timeout_ms=10000,
        )
        sequence = self.first_sequence
        try:
            while not self.stop.is_set():
                value = f"{era}-{sequence}".encode()
                sequence += 1
                try:
                    metadata = producer.send(self.topics[era], value=value).get(timeout=15)
                except Exception:  # not acknowledged (a leader moving): not counted as sent
                    time.sleep(0.1)
                    continue
                self.acked[era].append(Acked(metadata.partition, metadata.offset, value))
                time.sleep(0.02)
        finally:
            producer.close(timeout=5)

    def _consume(self, era: str) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.cluster.bootstrap_servers,
            api_version=ERAS[era],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
        )
        try:
            consumer.assign(
                [TopicPartition(t, p) for t in self.topics.values() for p in range(PARTITIONS)]
            )
            while not self.drain.is_set() or not self.caught_up(era):
                for records in consumer.poll(300).values():
                    self.consumed[era].update(record.value for record in records)
        finally:
            consumer.close()

    def caught_up(self, era: str) -> bool:
        return all(a.value in self.consumed[era] for acked in self.acked.values() for a in acked)

    def count(self) -> int:
        return sum(len(acked) for acked in self.acked.values())

    def wait_for_more(self, messages: int, what: str) -> None:
        target = self.count() + messages
        wait_until(lambda: self.count() >= target, 60, f"{messages} more acknowledged ({what})")

    def finish(self) -> None:
        """Stops the producers; then the consumers once they have read every acknowledged
        message (the last acknowledgements come after ``stop``)."""
        self.stop.set()
        for thread in self.producers:
            thread.join(timeout=60)
        self.drain.set()
        for thread in self.consumers:
            thread.join(timeout=90)
        assert not any(thread.is_alive() for thread in self.producers + self.consumers), (
            "a consumer never read every acknowledged message: "
            + str({era: len(self.consumed[era]) for era in ERAS})
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three brokers as phase 1 leaves them: 0.10 code, protocol 0.10.0-IV0, format v0."""
    local = LocalCluster(tmp_path_factory.mktemp("canary") / "cluster")
    local.up(3, overrides={**SCENARIO_OVERRIDES, **PHASE_ONE_DONE}, progress=lambda _: None)
    yield local
    LocalCluster(local.directory).down(progress=lambda _: None)


def command(*args: str) -> subprocess.CompletedProcess:
    """The tidelog command run in this process (a new interpreter costs seconds here)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def tidelog(*args: str) -> subprocess.CompletedProcess:
    return run_tidelog(*args, timeout=300)


def crash_once(point: str, then=None):
    """A crash_at hook that stops the run the first time it reaches ``point`` (after ``then``)."""

    def crash_at(where: str) -> None:
        if where == point:
            if then is not None:
                then()
            raise Crash(point)

    return crash_at


def killed_at_every_step(
    cluster: LocalCluster, kind: str, extra: list[str], kill_broker: str, load: Load
) -> CanaryJournal:
    """Runs ``kind`` of the canary broker, stopped as a kill would stop it after each step
    acted (before the journal says it is done, so the resumed run does it again), before the
    first step, and at ``extra`` points inside a step; each time resumed by a fresh run. At the
    start of step ``kill_broker`` the broker is killed too. The last run checks the format of
    new messages once more have been acknowledged. Returns its journal."""
    steps = [step.name for step in KINDS[kind]]
    points = [steps[0]]
    for step in steps:
        points += [p for p in [kill_broker, *extra] if p.startswith(step)] + [f"{step}: acted"]

    def kill() -> None:
        LocalCluster(cluster.directory).signal_broker(CANARY, signal.SIGKILL)

    for point in points:
        runner = CanaryRun(
            LocalCluster(cluster.directory),
            kind,
            CANARY,
            timeout=90,
            progress=lambda _: None,
            crash_at=crash_once(point, kill if point == kill_broker else None),
        )
        with pytest.raises(Crash):
            runner.run()
        journal = CanaryJournal.load(cluster.directory / CANARY_JOURNAL)
        assert journal is not None and journal.kind == kind and journal.unfinished
        if point == points[0]:  # nothing else starts while it is unfinished
            directory = str(cluster.directory)
            other = command("upgrade", "canary", "3", "--dir", directory)
            run = command("upgrade", "run", "--dir", directory, "--to", "0.10.0")
            for refused in (other, run):
                assert refused.returncode == 2
                assert f"an unfinished {kind} of broker {CANARY}" in refused.stderr

    def more_messages(where: str) -> None:
        if where == steps[-1]:
            load.wait_for_more(60, f"to check the {kind}'s formats on")

    runner = CanaryRun(LocalCluster(cluster.directory), kind, CANARY, timeout=90)
    runner.crash_at = more_messages
    journal = runner.run()
    print("\n".join(line["text"] for line in journal.document["log"]))
    return journal


def assignment(cluster: LocalCluster) -> dict[str, list[int]]:
    with zookeeper.session(cluster.zookeeper) as client:
        cache = zookeeper.read_cluster(client)
    return {
        f"{t}-{p}": list(r)
        for t, m in sorted(cache.topics.items())
        for p, r in m.assignment.items()
    }


def last_magics(cluster: LocalCluster, partition: str) -> dict[int, int]:
    """The magic of the last message each broker's copy of ``partition`` holds, read from the
    segment bytes."""
    topic, _, number = partition.rpartition("-")
    return {b: magics_on_disk(cluster, b, topic, int(number))[-1] for b in cluster.broker_ids}


def test_canary_and_rollback_killed_at_every_step_lose_nothing(cluster):
    directory = str(cluster.directory)
    names = TOPICS
    with zookeeper.session(cluster.zookeeper) as client:
        for name in names.values():
            topics.create_topic(client, name, PARTITIONS, 3, {"min.insync.replicas": "2"})
        with pytest.raises(ValueError, match="canary-old-0: .* a reorder keeps the same replicas"):
            zookeeper.reorder_replicas(client, names["old"], {0: [1, 2]})  # not a reorder
    load = Load(cluster, names)
    load.start()
    try:
        load.wait_for_more(20, "before the canary")
        before = assignment(cluster)
        preferred = sorted(p for p, replicas in before.items() if replicas[0] == CANARY)
        assert len(preferred) >= 2  # so that moving leadership away is seen

        dry = command("upgrade", "canary", str(CANARY), "--dir", directory, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"it keeps {preferred[0]};" in dry.stdout
        assert not (cluster.directory / CANARY_JOURNAL).exists() and assignment(cluster) == before

        # the canary, stopped at every step and once with its broker killed, then finished
        journal = killed_at_every_step(
            cluster,
            "canary",
            [],
            kill_broker="wait until it is in every ISR, leading what it keeps",
            load=load,
        )
        assert journal.document["state"] == "done"
        assert journal.data["kept"] == [preferred[0]]
        led = {p for p, (leader, _) in journal.data["leaders"].items() if leader == CANARY}
        assert led == {preferred[0]}
        checked = journal.data["checked"]
        assert not checked["wrong"] and checked["messages"]["v1"] > 0 < checked["messages"]["v0"]
        canary_order = assignment(cluster)
        for partition in preferred[1:]:
            assert canary_order[partition][0] != CANARY
        assert cluster.broker_settings(CANARY)["log.message.format.version"] == "0.10.0"
        converted = fetch_bytes(cluster).get("v1 converted", 0)
        load.wait_for_more(60, "on the canary")

        # read independently from the segment bytes: v1 on every copy of what it leads only
        def formats_seen() -> bool:
            return all(
                set(last_magics(cluster, p).values()) == {1 if p in led else 0} for p in before
            )

        wait_until(formats_seen, 30, "new messages in v1 where the canary leads, v0 elsewhere")
        # the old consumer reads the canary's v1 messages down-converted
        wait_until(
            lambda: fetch_bytes(cluster).get("v1 converted", 0) > converted,
            30,
            "down-converted Fetch v1 bytes on /metrics",
        )
        refused = command("upgrade", "canary", "3", "--dir", directory)
        assert refused.returncode == 2
        assert "broker 2 runs log.message.format.version=0.10.0" in refused.stderr

        # the rollback, stopped at every step (and inside its deletion), its broker killed once
        dry = command("upgrade", "rollback", str(CANARY), "--dir", directory, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        led_dir = cluster.directory / f"broker-{CANARY}" / "logs" / preferred[0]
        assert str(led_dir) in dry.stdout
        delete = KINDS["rollback"][2].name
        journal = killed_at_every_step(
            cluster,
            "rollback",
            [f"{delete}: {preferred[0]} set aside"],
            kill_broker="let it re-replicate them from their leaders",
            load=load,
        )
        assert journal.document["state"] == "done"
        assert journal.data["led"] == [preferred[0]]
        assert journal.data["deleted"] == [str(led_dir)]
        assert not list(led_dir.parent.glob("*.rollback-delete"))
        assert journal.data["re_replicated"]["messages"] > 0
        checked = journal.data["checked"]
        assert not checked["wrong"] and checked["messages"]["v1"] == 0 < checked["messages"]["v0"]
        assert cluster.broker_settings(CANARY)["log.message.format.version"] == "0.9.0"
        assert assignment(cluster) == before  # the replica order from before the canary

        load.wait_for_more(60, "after the rollback")
        wait_until(
            lambda: all(set(last_magics(cluster, p).values()) == {0} for p in before),
            30,
            "new messages in v0 on every copy",
        )
        again = command("upgrade", "rollback", str(CANARY), "--dir", directory)
        assert again.returncode == 2 and "broker 2 is not a canary" in again.stderr
    finally:
        load.finish()
    nothing_lost(load)


def nothing_lost(load: Load) -> None:
    """Every acknowledged message is in the log once, in order, on replicas that agree, and
    both consumers read it."""
    for era, name in load.topics.items():
        report = runtime.run(verify(load.cluster, name, load.acked[era]))
        assert report.acked > 20
        failures = {n: getattr(report, n) for n in report.CHECKS if n != "duplicates"}
        assert not any(failures.values()), (name, failures)
        for reader in ERAS:  # every acknowledged message read by both consumers
            assert {a.value for a in load.acked[era]} <= load.consumed[reader]


def test_a_killed_rollback_command_resumes_from_its_journal(cluster):
    """The real command killed (SIGKILL) once it has deleted the data of the partitions the
    canary led, then run again: it restarts the broker and lets it re-replicate them."""
    directory = str(cluster.directory)
    load = Load(cluster, TOPICS, first_sequence=1_000_000)
    load.start()
    try:
        rollback_killed_and_resumed(cluster, directory, load)
    finally:
        load.finish()
    nothing_lost(load)


def rollback_killed_and_resumed(cluster: LocalCluster, directory: str, load: Load) -> None:
    load.wait_for_more(20, "before the canary")
    canary = command("upgrade", "canary", str(CANARY), "--dir", directory)
    assert canary.returncode == 0, canary.stderr
    load.wait_for_more(20, "on the canary")
    argv = [sys.executable, "-m", "tidelog.cli", "upgrade", "rollback", str(CANARY)]
    process = subprocess.Popen(
        [*argv, "--dir", directory],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = cluster.directory / CANARY_JOURNAL
    step = KINDS["rollback"][3].name  # the restart: after the deletion

    def reached() -> bool:
        document = json.loads(path.read_text()) if path.exists() else {}
        return document.get("kind") == "rollback" and document["steps"][step] != "pending"

    try:
        wait_until(reached, 60, f"the rollback to reach '{step}'", interval=0.05)
    finally:
        process.kill()
        process.wait()
    assert json.loads(path.read_text())["state"] == "running"
    resumed = tidelog("upgrade", "rollback", str(CANARY), "--dir", directory)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming the rollback of broker 2" in resumed.stdout
    journal = json.loads(path.read_text())
    assert journal["state"] == "done" and len(journal["data"]["deleted"]) == 1
    assert journal["data"]["re_replicated"]["messages"] > 0
    assert cluster.broker_settings(CANARY)["log.message.format.version"] == "0.9.0"
