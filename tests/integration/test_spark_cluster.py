"""``tidelog report --master spark://...`` on a real Spark standalone cluster: a master and two
workers started by the module with the spark-class script of this environment's PySpark, on
loopback ports free at the time, and stopped after it (also when a test fails). The report
computed there by the command is the one computed in local mode (in the test's process, on the
session fixture's local session), file for file; the data source reads log
segments on the workers; a master that has no executor to give, a master nothing listens on, a
port that never answers (refused by tidelog's own probe, which a real master answers at once)
and a master tidelog does not run on are one line each.

Each command runs in a process of its own, as a user runs it: one process has one SparkSession
(the session fixture's local one here), and a session on another master needs another JVM."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from tests.integration.conftest import run_tidelog
from tests.integration.test_pipeline_report import write_case
from tests.integration.test_unreachable import says_in_one_line
from tests.pipeline.test_report_page import START
from tests.pipeline.test_segments import fill
from tidelog import rundata
from tidelog.cluster.local import wait_until
from tidelog.cluster.zookeeper import free_ports
from tidelog.pipeline.render import write_report
from tidelog.pipeline.report import compute, load_runs
from tidelog.pipeline.session import silence
from tidelog.pipeline.source import SegmentReader

pytestmark = pytest.mark.integration

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
WORKERS = 2


@dataclass
class SparkCluster:
    master: str  # spark://127.0.0.1:PORT
    web_port: int  # the master's web UI, whose /json/ says what it runs
    logs: Path

    def state(self) -> dict:
        url = f"http://127.0.0.1:{self.web_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state()["workers"] if w["state"] == "ALIVE")
        except (OSError, ValueError, KeyError):  # not up yet, or its status page half written
            return 0

    def log_tails(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.logs.glob("*.log"))
        )


def stop(process: subprocess.Popen) -> None:
    """A daemon started here, with its process group (a worker's executors are in it)."""
    if process.poll() is not None:
        return
    for signum, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    """A master and two workers of one core and 1 GB each, on 127.0.0.1."""
    base = tmp_path_factory.mktemp("spark-cluster")
    master_port, web_port, *worker_ports = free_ports(2 + 2 * WORKERS)
    cluster = SparkCluster(f"spark://127.0.0.1:{master_port}", web_port, base)
    environment = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(base)}
    commands = {
        "master": [
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(web_port)),
        ]
    }
    for number in range(WORKERS):
        port, worker_web = worker_ports[2 * number : 2 * number + 2]
        commands[f"worker-{number + 1}"] = [
            *("org.apache.spark.deploy.worker.Worker", cluster.master, "--host", "127.0.0.1"),
            *("--port", str(port), "--webui-port", str(worker_web)),
            *("--cores", "1", "--memory", "1g", "--work-dir", str(base / f"work-{number + 1}")),
        ]
    processes = []
    try:
        for name, arguments in commands.items():
            with open(base / f"{name}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [str(SPARK_CLASS), *arguments],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=environment,
                        start_new_session=True,
                    )
                )
        try:
            wait_until(
                lambda: cluster.alive_workers() == WORKERS, 180, "two workers alive at the master"
            )
        except Exception:
            pytest.fail(f"the Spark cluster did not come up\n{cluster.log_tails()}")
        yield cluster
    finally:
        for process in reversed(processes):
            stop(process)


def write_delivery(run_dir: Path) -> None:
    """A scenario's run directory with a delivery check: 600 acknowledged messages over three
    partitions, consumed back with two lost, three duplicated and one pair out of order."""
    chance = random.Random(26)
    acked = [(n % 3, n // 3, f"{n % 3}-{n // 3:08d}") for n in range(600)]
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": [rundata.epoch_microseconds(START + n * 0.01) for n in range(600)],
            "latency_ms": [chance.lognormvariate(1.0, 0.6) for _ in acked],
            "partition": [partition for partition, _, _ in acked],
            "offset": [offset for _, offset, _ in acked],
            "bytes": [100] * len(acked),
            "message": [message for _, _, message in acked],
        },
    )
    consumed = [row for n, row in enumerate(acked) if n not in (10, 11)]
    consumed += [acked[20], acked[21], acked[22]]
    consumed[40], consumed[43] = consumed[43], consumed[40]  # partition 1's, swapped
    rundata.write_table(
        run_dir,
        "consumed",
        {
            "partition": [partition for partition, _, _ in consumed],
            "offset": list(range(len(consumed))),
            "message": [message for _, _, message in consumed],
        },
    )
    rundata.write_events(
        run_dir, [rundata.Event(START + 2, "hard_bounce", "broker 2", 1800.0, "killed, started")]
    )
    rundata.write_metadata(
        run_dir, rundata.RunMetadata("scenario-replication", "hard_bounce", "acks=all")
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Runs that fill every table the report computes with Spark: the rebuild case of
    tests/integration/test_pipeline_report.py, tiered and not (latency, throughput, consumer
    lag of in-sync and catching-up consumers, rebuilds, events, the tiered ratios; a directory
    of two run directories), and a scenario with a delivery check (lost, duplicated and
    reordered messages). Each run is a few Parquet files to read: a run more is seconds more of
    each report, on both sides."""
    base = tmp_path_factory.mktemp("runs")
    cases = base / "tiered-cases"
    for tiered in (True, False):
        write_case(cases / f"rebuild-acks-all-{'tiered' if tiered else 'local'}", tiered)
    write_delivery(base / "hard-bounce")
    return [cases, base / "hard-bounce"]


@pytest.fixture(scope="module")
def local_report(runs, spark, tmp_path_factory) -> tuple[Path, float]:
    """The report of ``runs`` computed in local mode, in this process (the session fixture's
    local[2], as ``tidelog report`` without --master has): ``compute`` and ``write_report``,
    as the command runs them. (Its directory, the seconds it took.)"""
    out = tmp_path_factory.mktemp("local-report") / "report"
    started = time.monotonic()
    write_report(compute(spark, load_runs(runs), window_seconds=1.0), out)
    return out, time.monotonic() - started


def report(runs: list[Path], out: Path, *options: str) -> tuple[str, float]:
    started = time.monotonic()
    done = run_tidelog("report", *map(str, runs), "--out", str(out), *options, timeout=900)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, seconds


def test_a_report_on_the_cluster_is_the_one_computed_in_local_mode(
    spark_cluster, runs, local_report, tmp_path
):
    local, local_seconds = local_report
    said, cluster_seconds = report(runs, tmp_path / "cluster", "--master", spark_cluster.master)
    computed = [line for line in said.splitlines() if line.startswith("computed in")]
    print(f"report: local mode {local_seconds:.1f} s (in this process), on the cluster "
          f"{cluster_seconds:.1f} s (of which Spark's session and jobs: {computed})")  # fmt: skip

    assert f"Spark at {spark_cluster.master}: {WORKERS} executor(s), {WORKERS} core(s)" in said
    apps = spark_cluster.state()["completedapps"]
    assert [app["name"] for app in apps].count("tidelog-report") >= 1, apps
    local_files = sorted(p.name for p in local.iterdir())
    cluster_files = sorted(p.name for p in (tmp_path / "cluster").iterdir())
    assert cluster_files == local_files
    tables = {"latency", "throughput", "consumer_lag", "rebuilds", "delivery", "events"}
    assert {f"{table}.csv" for table in tables | {"tiered_ratios"}} <= set(local_files)
    with open(local / "delivery.csv", newline="") as file:
        delivery = list(csv.DictReader(file))
    assert [sum(int(row[n]) for row in delivery) for n in ("lost", "duplicated")] == [2, 3]
    with open(local / "consumer_lag.csv", newline="") as file:
        kinds = {row["kind"] for row in csv.DictReader(file)}
    assert kinds == {"in-sync", "catching-up"}
    for name in local_files:  # tables, report.md, plots, report.html: byte for byte
        expected = (local / name).read_bytes()
        assert (tmp_path / "cluster" / name).read_bytes() == expected, name


SOURCE_JOB = """
import json, sys
from pyspark.sql import functions as F
from tidelog.pipeline.session import session
spark = session(sys.argv[1], "tidelog-source")
frame = spark.read.format("tidelog").load(sys.argv[2]).where("offset >= 40")
rows = frame.groupBy("topic", "partition", "tier").agg(
    F.count("*").alias("rows"), F.sum("offset").alias("offsets"),
    F.sum(F.length("value")).alias("value_bytes"), F.max("timestamp").alias("last"))
print(json.dumps(sorted(map(list, rows.collect()))))
spark.stop()
"""


def test_the_data_source_reads_segments_on_the_workers(spark_cluster, make_log, clock, tmp_path):
    """The segments' input partitions are read by the executors, from the same path; what they
    count is what tidelog's segment reader reads here, in this process."""
    log = make_log(segment_bytes=2000, index_interval_bytes=300)
    fill(log, clock, 40)
    log.flush()
    directory = tmp_path / "t-0"
    assert len(list(directory.glob("*.log"))) > 3  # input partitions for both executors
    reader = SegmentReader(str(directory), None, None)
    rows = [
        row for partition in reader.partitions() for batch in reader.read(partition)
        for row in batch.to_pylist() if row["offset"] >= 40
    ]  # fmt: skip
    expected = [
        ["t", 0, "local", len(rows), sum(r["offset"] for r in rows),
         sum(len(r["value"]) for r in rows), max(r["timestamp"] for r in rows)]
    ]  # fmt: skip

    done = subprocess.run(
        [sys.executable, "-c", SOURCE_JOB, spark_cluster.master, str(directory)],
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected
    assert expected[0][3:5] == [160, sum(range(40, 200))]


def test_a_master_without_an_executor_to_give_is_one_line(spark_cluster, runs, tmp_path):
    """Executors of more memory than a worker has: the master accepts the job and never
    starts one."""
    says_in_one_line(
        "report",
        str(runs[0]),
        *("--out", str(tmp_path / "report"), "--master", spark_cluster.master),
        *("--executor-timeout", "5"),
        line=f"tidelog report: Spark master at {spark_cluster.master} does not answer (no "
        "executor in 5 s: no worker has a free core and 64g of free memory): is a Spark master "
        "running there, with workers registered? (see the README's reports on a Spark cluster)",
        env={"TIDELOG_SPARK_EXECUTOR_MEMORY": "64g"},
        within=90.0,
    )
    assert not (tmp_path / "report").exists()


def test_a_master_nothing_listens_on_is_one_line(runs, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    master = f"spark://127.0.0.1:{port}"
    says_in_one_line(
        "report",
        str(runs[0]),
        *("--out", str(tmp_path / "report"), "--master", master),
        line=f"tidelog report: Spark master at {master} does not answer (connection refused): "
        "is a Spark master running there, with workers registered? (see the README's reports "
        "on a Spark cluster)",
        within=30.0,
    )


def test_a_master_that_never_answers_is_one_line(runs, tmp_path):
    """A port that takes connections and says nothing: tidelog's probe (a Spark RPC, which a
    master answers at once) waits 10 s for an answer, where Spark's own client would try to
    register the job three times, 20 s each."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        master = f"spark://127.0.0.1:{silent.getsockname()[1]}"
        says_in_one_line(
            "report",
            str(runs[0]),
            *("--out", str(tmp_path / "report"), "--master", master),
            line=f"tidelog report: Spark master at {master} does not answer (it took the "
            "connection but did not answer a Spark RPC in 10 s): is a Spark master running "
            "there, with workers registered? (see the README's reports on a Spark cluster)",
            within=50.0,  # 10 s of the probe, on a loaded machine; Spark's tries took 60 s
        )
    assert not (tmp_path / "report").exists()


def test_tidelogs_probe_is_answered_by_a_master_at_once(spark_cluster):
    """The probe is a Spark RPC the master answers at once (with a failure: it names no
    endpoint of the master's), and it leaves no warning in the master's log (a connection
    closed with the answer unread would be a reset, which the master logs)."""
    host, port = spark_cluster.master.removeprefix("spark://").split(":")
    log = spark_cluster.logs / "master.log"
    before = len(log.read_bytes())
    started = time.monotonic()
    assert silence(host, int(port), timeout=10.0) is None
    assert time.monotonic() - started < 5.0
    time.sleep(1)
    after = log.read_bytes()[before:].decode(errors="replace")
    assert not [line for line in after.splitlines() if " WARN " in line or " ERROR " in line]


@pytest.mark.parametrize("master", ["yarn", "spark://no-port", "local[0]", "mesos://m:5050"])
def test_a_master_tidelog_does_not_run_on_is_refused_by_name(master, runs, tmp_path):
    says_in_one_line(
        "report",
        str(runs[0]),
        *("--out", str(tmp_path / "report"), "--master", master),
        line=f"tidelog report: --master {master!r} is not a Spark master tidelog runs on: give "
        "local, local[N], local[*], local[N,MAX_FAILURES] or spark://HOST:PORT[,HOST:PORT...]",
        within=30.0,
    )
