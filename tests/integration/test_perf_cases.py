"""`tidelog perf tiered-storage`: the design's three cases on real clusters, briefly.

One run of the command (the small profile, a few seconds of traffic per case, a little history,
the rebuild under KIP-73's throttle) serves every test here; a thread beside it reads each
cluster's ISRs and throttle settings from ZooKeeper the whole time, so that the rebuild's end and
its throttle can be checked against what the cluster itself said.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tidelog import rundata
from tidelog.config import BROKER_KEYS
from tidelog.controller import zookeeper
from tidelog.perf import max_rate
from tidelog.perf.cases.clusters import TOPIC
from tidelog.perf.cases.events import CASES
from tidelog.perf.cases.profiles import MB, PROFILES, WORKLOADS
from tidelog.perf.cases.runner import KIND, Result, run_dir_name
from tidelog.perf.cases.table import table_rows

CLUSTERS = ("without-tiered", "tiered")
# a rate the rebuild reaches (the acks=1 traffic adds 0.8 MB/s to what the broker must fetch)
REBUILD_THROTTLE_MB_S = 2.0
STATE = "cluster.json"
RUNS = [
    (case, workload, tiered) for case in CASES for workload in WORKLOADS for tiered in (False, True)
]


class Sample(NamedTuple):
    """One look at a cluster of the command's, the disks first, then ZooKeeper."""

    at: float  # after the disks were read, before ZooKeeper was
    cluster: str
    missing: frozenset[int]  # brokers missing from some ISR of the topic
    isrs_holding: dict[int, int]  # broker: how many of the topic's ISRs hold it
    throttled: bool  # a replication throttle set (the topic's replicas or a broker's rates)
    disk_bytes: dict[int, int]  # broker: bytes of the topic's segments on its disk


@dataclass
class IsrWatcher:
    """Samples, every 50 ms, whichever of the command's clusters is up: the bytes of the
    topic's segments on each broker's disk, then the topic's ISRs and throttle settings in
    ZooKeeper."""

    directory: Path
    samples: list[Sample] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        clients: dict[str, KazooClient] = {}
        try:
            while not self.done.is_set():
                # the clusters run one after the other: only the latest one is read
                name = next(
                    (n for n in reversed(CLUSTERS) if (self.directory / n / STATE).exists()), None
                )
                for other in [n for n in clients if n != name]:
                    _drop(clients, other)
                if name is not None:
                    self._sample(name, clients)
                self.done.wait(0.05)
        finally:
            for name in list(clients):
                _drop(clients, name)

    def _sample(self, name: str, clients: dict[str, KazooClient]) -> None:
        """One look; every ZooKeeper call has a deadline (a client whose server went away
        would otherwise wait for it), and a client that fails is dropped."""
        try:
            client = clients.get(name)
            if client is None:
                connect = json.loads((self.directory / name / STATE).read_text())["zookeeper"]
                if not connect:
                    return
                client = clients[name] = KazooClient(hosts=connect, timeout=2.0)
                client.start(timeout=2.0)
            disk_bytes = _disk_bytes(self.directory / name)
            started = time.time()
            topic = client.get_async(zookeeper.topic_path(TOPIC)).get(timeout=2)[0]
            assignment = json.loads(topic)["partitions"]
            pending = [
                (replicas, client.get_async(zookeeper.state_path(TOPIC, int(number))))
                for number, replicas in assignment.items()
            ]
            isrs = [
                (replicas, json.loads(state.get(timeout=2)[0])["isr"])
                for replicas, state in pending
            ]
            brokers = {b for replicas in assignment.values() for b in replicas}
            throttled = any(
                _throttle_keys(client, path)
                for path in [
                    f"/config/topics/{TOPIC}",
                    *(zookeeper.broker_config_path(b) for b in brokers),
                ]
            )
        except NoNodeError:  # no topic yet
            return
        except Exception:  # not up yet, or already down
            _drop(clients, name)
            return
        missing = frozenset(r for replicas, isr in isrs for r in replicas if r not in isr)
        holding = {b: sum(b in isr for _, isr in isrs) for b in brokers}
        self.samples.append(Sample(started, name, missing, holding, throttled, disk_bytes))


def _disk_bytes(cluster_dir: Path) -> dict[int, int]:
    """Broker id: the bytes of the topic's segment files in its log dir (files that go
    meanwhile, by retention, count nothing)."""
    held: dict[int, int] = {}
    for path in cluster_dir.glob(f"broker-*/logs/{TOPIC}-*/*.log"):
        broker = int(path.parts[-4].removeprefix("broker-"))
        with contextlib.suppress(FileNotFoundError):
            held[broker] = held.get(broker, 0) + path.stat().st_size
    return held


def _throttle_keys(client: KazooClient, path: str) -> list[str]:
    try:
        data = client.get_async(path).get(timeout=2)[0]
    except NoNodeError:
        return []
    return [key for key in zookeeper.parse_entity_config(data) if "throttled" in key]


def _drop(clients: dict[str, KazooClient], name: str) -> None:
    client = clients.pop(name, None)
    if client is not None:
        client.stop()
        client.close()


@dataclass
class CommandRun:
    out: Path
    stdout: str
    returncode: int
    watcher: IsrWatcher

    def run_dir(self, case: str, workload: str, tiered: bool) -> Path:
        return self.out / run_dir_name(case, workload, tiered)


@pytest.fixture(scope="module")
def command_run(tmp_path_factory) -> CommandRun:
    base = tmp_path_factory.mktemp("perf-cases")
    out, clusters = base / "runs", base / "clusters"
    watcher = IsrWatcher(clusters)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "tidelog.cli",
                "perf",
                "tiered-storage",
                "--profile",
                "small",
                "--out",
                str(out),
                "--dir",
                str(clusters),
                "--duration",
                "4",
                "--history-mb-per-broker",
                "4",
                "--scale",
                "0.5",
                "--seed",
                "11",
                "--rebuild-throttle",
                str(REBUILD_THROTTLE_MB_S),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        watcher.done.set()
        thread.join(10)
    print(completed.stdout[-5000:], completed.stderr[-5000:])
    return CommandRun(out, completed.stdout, completed.returncode, watcher)


def test_every_case_completes_and_the_table_has_every_cell(command_run):
    assert command_run.returncode == 0, command_run.stdout[-3000:]
    table = (command_run.out / "table.txt").read_text()
    assert table in command_run.stdout
    assert table.startswith("profile small, scaled to this machine: scale 0.5, duration_s 4")
    rows = table_rows(
        [
            _result_from(command_run.run_dir(case, workload, tiered))
            for case, workload, tiered in RUNS
        ]
    )
    assert len(rows) == 8
    assert all(cell != "-" and "nan" not in cell for row in rows for cell in row), rows
    for row in rows:  # the figures printed are those the run directories hold
        assert row[3] in table and row[5] in table
    for case, workload, tiered in RUNS:
        metadata = rundata.read_metadata(command_run.run_dir(case, workload, tiered))
        assert (metadata.kind, metadata.case, metadata.workload, metadata.tiered) == (
            KIND,
            case,
            workload,
            tiered,
        )
        assert metadata.settings["seed"] == 11
        assert metadata.settings["command"].startswith("tidelog perf tiered-storage")
        assert "--duration 4" in metadata.settings["command"]
        assert metadata.profile["name"] == "small" and metadata.profile["duration_s"] == 4
        assert metadata.settings["scaling"] == {
            "scale": 0.5,
            "duration_s": 4,
            "history_mb_per_broker": 4,
            "rebuild_throttle_mb_s": REBUILD_THROTTLE_MB_S,
        }
        assert metadata.machine["cores"] >= 1 and metadata.machine["disk_total_bytes"] > 0
        assert metadata.settings["topic_config"].get("remote.storage.enable") == (
            "true" if tiered else None
        )


def test_each_run_counts_the_cpu_of_the_brokers_and_of_the_load_generator(command_run):
    table = (command_run.out / "table.txt").read_text()
    for case, workload, tiered in RUNS:
        result = _result_from(command_run.run_dir(case, workload, tiered))
        # both were busy with the traffic; neither can use more than the machine's cores
        cores = os.cpu_count() or 1
        assert 0 < result.brokers_cores <= cores, result
        assert 0 < result.load_generator_cores <= cores, result
        assert (
            f"brokers {result.brokers_cores:.2f}, this command {result.load_generator_cores:.2f}"
        ) in table


def _result_from(run_dir: Path) -> Result:
    figures = rundata.read_metadata(run_dir).verdict["figures"]  # type: ignore[index]
    return Result(run_dir=run_dir, **figures)


def test_the_acks_table_holds_every_record_the_producer_saw_acknowledged(command_run):
    for case, workload, tiered in RUNS:
        run_dir = command_run.run_dir(case, workload, tiered)
        verdict = rundata.read_metadata(run_dir).verdict
        acks = rundata.read_table(run_dir, "acks")
        assert acks is not None
        producer = verdict["producer"]
        assert acks.num_rows == producer["acknowledged"] > 0, (run_dir, producer)
        latencies = sorted(acks.column("latency_ms").to_pylist())
        # the same latencies as the producer's own summary: its percentiles, exactly
        assert latencies[-1] == pytest.approx(producer["latency_ms"]["max"])
        assert latencies[math.ceil(0.99 * len(latencies)) - 1] == pytest.approx(
            producer["latency_ms"]["p99"]
        )
        if case == "normal":  # nothing failed, and each acknowledged offset once
            assert verdict["errors"] == {}
            pairs = list(
                zip(
                    acks.column("partition").to_pylist(),
                    acks.column("offset").to_pylist(),
                    strict=True,
                )
            )
            assert len(set(pairs)) == len(pairs) and min(o for _, o in pairs) >= 0


def test_the_catching_up_consumers_read_old_data_and_the_in_sync_ones_keep_up(command_run):
    for workload in WORKLOADS:
        for tiered in (False, True):
            run_dir = command_run.run_dir("consumers", workload, tiered)
            consumer = rundata.read_table(run_dir, "consumer").to_pylist()
            catching_up = [row for row in consumer if row["consumer"].startswith("catching-up")]
            in_sync = [row for row in consumer if row["consumer"].startswith("in-sync")]
            assert catching_up and in_sync
            readers = rundata.read_metadata(run_dir).verdict["readers"]
            assert all(
                readers[f"catching-up-{n}"]["bytes"] > 0
                for n in range(1, PROFILES["small"].catch_up_consumers + 1)
            )
            events = rundata.read_table(run_dir, "events").to_pylist()
            assert [e["kind"] for e in events] == ["catch_up_consumers"]
            last = max(row["sampled_at"] for row in in_sync)
            final_lag = sum(r["lag"] for r in in_sync if r["sampled_at"] == last)
            assert final_lag < 5_000, final_lag


def test_the_rebuild_is_reported_only_once_the_broker_is_in_every_isr(command_run):
    for workload in WORKLOADS:
        for tiered in (False, True):
            run_dir = command_run.run_dir("rebuild", workload, tiered)
            events = rundata.read_table(run_dir, "events").to_pylist()
            assert [e["kind"] for e in events] == ["kill_and_wipe", "broker_start", "rebuild"]
            rebuild = events[-1]
            broker = int(rebuild["target"].split()[-1])
            started = rebuild["at"].timestamp()
            back = started + rebuild["duration_ms"] / 1000
            cluster = "tiered" if tiered else "without-tiered"
            seen = sorted(
                (sample.at, broker in sample.missing)
                for sample in command_run.watcher.samples
                if sample.cluster == cluster and sample.at >= started
            )
            first_back = next((i for i, (_, out) in enumerate(seen) if not out), None)
            assert first_back, f"{run_dir}: the watcher never saw broker {broker} rebuilding"
            # the last read that still found the broker out of an ISR began before the
            # command said it was back; and the command said so soon after it was
            last_out, first_in = seen[first_back - 1][0], seen[first_back][0]
            assert last_out < back, (last_out, back)
            assert back < first_in + 5, (first_in, back)


# What the rebuild throttle's quotas let through in ``seconds``, all at the same rate: each
# starts with a second of credit. The follower checks its quota before each fetch, so one fetch
# of each partition may go past it (and a partition its last answer left at the leader's high
# watermark is fetched whatever the quota: only the new traffic into it, a few kilobytes before
# it is seen in the ISR, well inside that slack); a leader checks its own before each partition
# it reads, so one partition's read may. The rates are in ZooKeeper before the rebuilt broker
# starts: its own are read before its first fetch, and the leaders' watches have the seconds the
# broker takes to start and register to read theirs.
THROTTLE_BYTES_S = REBUILD_THROTTLE_MB_S * MB
FETCH_MAX_BYTES = BROKER_KEYS["replica.fetch.max.bytes"].default  # the command keeps it


def through_the_follower(seconds: float, partitions: int) -> float:
    return THROTTLE_BYTES_S * (seconds + 1) + partitions * FETCH_MAX_BYTES


def through_the_leaders(seconds: float, leaders: int) -> float:
    return leaders * (THROTTLE_BYTES_S * (seconds + 1) + FETCH_MAX_BYTES)


def test_the_rebuild_runs_under_the_throttle_and_the_throttle_goes_after_it(command_run):
    assert (
        f"rebuild_throttle_mb_s {REBUILD_THROTTLE_MB_S:g}"
        in (command_run.out / "table.txt").read_text()
    )
    for tiered in (False, True):
        cluster = "tiered" if tiered else "without-tiered"
        samples = [s for s in command_run.watcher.samples if s.cluster == cluster]
        rebuilds = []
        for workload in WORKLOADS:
            run_dir = command_run.run_dir("rebuild", workload, tiered)
            kill, start, rebuild = rundata.read_table(run_dir, "events").to_pylist()
            assert start["detail"] == f"empty, throttled to {REBUILD_THROTTLE_MB_S:g} MB/s"
            broker = int(rebuild["target"].split()[-1])
            started = start["at"].timestamp()
            back = started + rebuild["duration_ms"] / 1000
            profile = rundata.read_metadata(run_dir).profile
            leaders, partitions = profile["brokers"] - 1, profile["partitions"]

            # Until it is first seen in an ISR, every byte the broker holds came through the
            # quotas: a partition back in its ISR is fetched unthrottled, but a leader writes
            # the ISR to ZooKeeper before it stops counting, and the follower learns of it
            # later still. (A partition may leave its ISR again: later samples prove nothing.)
            rebuilding = [s for s in samples if started <= s.at < back]
            joined = next((n for n, s in enumerate(rebuilding) if s.isrs_holding[broker] > 0), None)
            out_of_every_isr = rebuilding[:joined]
            assert out_of_every_isr, f"{run_dir}: never seen rebuilding"
            for sample in out_of_every_isr:
                held, seconds = sample.disk_bytes.get(broker, 0), sample.at - started
                assert held <= through_the_follower(seconds, partitions), (run_dir, held, seconds)
                assert held <= through_the_leaders(seconds, leaders), (run_dir, held, seconds)
            # And the history as the rebuild began came through the leaders' quotas before the
            # broker was back: a surviving replica holds no more of a partition than its
            # leader, and what it holds is committed long before the rebuilt broker can catch
            # up to it (without the tier: local retention runs at each broker's own pace).
            if not tiered:
                first = out_of_every_isr[0]
                history = min(n for b, n in first.disk_bytes.items() if b != broker)
                assert history <= through_the_leaders(back - started, leaders), (run_dir, history)
            # the throttle goes on after the kill, once the traffic runs
            rebuilds.append((kill["at"].timestamp(), started, back))
        during = [s.throttled for s in samples if rebuilds[0][1] + 0.5 < s.at < rebuilds[0][2]]
        between = [s.throttled for s in samples if rebuilds[0][2] + 1 < s.at < rebuilds[1][0]]
        assert during and all(during), f"{cluster}: the throttle was not set during the rebuild"
        assert between and not any(between), f"{cluster}: the throttle stayed after the rebuild"


@dataclass
class MaxRateRun:
    out: Path
    stdout: str
    returncode: int
    summary: dict


@pytest.fixture(scope="module")
def max_rate_run(tmp_path_factory) -> MaxRateRun:
    """`perf max-rate` briefly: steps of two seconds from a rate any machine holds, doubling."""
    out = tmp_path_factory.mktemp("max-rate") / "runs"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog.cli",
            "perf",
            "max-rate",
            "--workload",
            "acks_all",
            "--out",
            str(out),
            "--partitions",
            "6",
            "--in-sync-consumers",
            "2",
            "--start-mb-per-broker",
            "0.05",
            "--step-factor",
            "2",
            "--step-seconds",
            "2",
            "--max-steps",
            "3",
            "--p99-bound-ms",
            "2000",
            "--warmup-seconds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(completed.stdout[-5000:], completed.stderr[-5000:])
    summary = json.loads((out / max_rate.SUMMARY).read_text()) if completed.returncode == 0 else {}
    return MaxRateRun(out, completed.stdout, completed.returncode, summary)


def test_max_rate_prints_each_step_and_the_largest_rate_that_held(max_rate_run):
    assert max_rate_run.returncode == 0, max_rate_run.stdout[-3000:]
    recorded = max_rate_run.summary["settings"]
    settings = max_rate.Settings(**recorded | {"out": Path(recorded["out"]), "cluster_dir": None})
    steps = [
        max_rate.Step(**{k: v for k, v in row.items() if k != "held"})
        for row in max_rate_run.summary["steps"]
    ]
    assert [s.number for s in steps] == list(range(1, len(steps) + 1)) and steps
    # the rates the search was to offer, and each verdict as the rule gives it
    for number, each in enumerate(steps):
        assert each.offered_mb_s == pytest.approx(max_rate.next_rate(settings, steps[:number]))
        assert each.verdict == max_rate.verdict(settings, each.offered_mb_s, each)
    assert max_rate.next_rate(settings, steps) is None
    # what was printed is the summary's figures, and the largest rate is the best step's
    assert max_rate.format_report(settings, steps) in max_rate_run.stdout
    best = max_rate.largest_held(steps)
    figure = max_rate_run.summary["max_rate"]
    if best is None:
        assert figure is None and "max rate: no step held" in max_rate_run.stdout
    else:
        assert figure["offered_mb_s"] == best.offered_mb_s
        assert figure["offered_mb_s_per_broker"] == pytest.approx(best.offered_mb_s / 3)
        assert f"{best.offered_mb_s / 3:.3f} MB/s per leader broker" in max_rate_run.stdout


def test_max_rate_figures_are_what_the_producer_and_consumers_counted(max_rate_run):
    assert max_rate_run.returncode == 0, max_rate_run.stdout[-3000:]
    record_size = max_rate_run.summary["settings"]["record_size"]
    for row in max_rate_run.summary["steps"]:
        run_dir = max_rate_run.out / f"step-{row['number']:02d}"
        acks = rundata.read_table(run_dir, "acks")
        metadata = rundata.read_metadata(run_dir)
        assert acks is not None and metadata.kind == max_rate.KIND
        producer = metadata.verdict["producer"]
        # one row per acknowledged record, and the rate is those rows over the producer's time
        assert acks.num_rows == row["acknowledged"] == producer["records"] > 0
        assert row["achieved_mb_s"] == pytest.approx(
            acks.num_rows * record_size / producer["seconds"] / 1e6
        )
        latencies = sorted(acks.column("latency_ms").to_pylist())
        assert row["p99_ms"] == pytest.approx(latencies[math.ceil(0.99 * len(latencies)) - 1])
        readers = metadata.verdict["readers"]
        assert len(readers) == 2
        assert row["consumed"] == min(r["records"] for r in readers.values())
        assert row["load_average"] > 0 and row["broker_cpu"] > 0
