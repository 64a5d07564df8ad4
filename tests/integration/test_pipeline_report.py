"""``tidelog report`` from small real runs: a perf run and a chaos scenario on real brokers write
their run directories, Spark computes the report, and every table cell and plot is there."""

from __future__ import annotations

import asyncio
import csv
import math
import re
import struct

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import wait_for_leaders
from tidelog import rundata
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.perf.stats import percentile
from tidelog.pipeline.plots import PIXELS
from tidelog.pipeline.render import write_report
from tidelog.pipeline.report import compute, load_runs
from tidelog.pipeline.session import local_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two run directories: perf produce (acks=1) and a hard_bounce scenario (acks=all)."""
    cluster = LocalCluster(tmp_path_factory.mktemp("report-cluster"))
    cluster.up(3, overrides=SCENARIO_OVERRIDES, progress=lambda _: None)
    base = tmp_path_factory.mktemp("runs")
    try:
        with zookeeper.session(cluster.zookeeper) as client:
            topics.create_topic(client, "perf", 2, 1, {})
        wait_for_leaders(cluster, "perf", 2)
        perf_settings = ProducerSettings("perf", 3000, 200, throughput=1500, acks=1)
        summary, errors = asyncio.run(
            run_producer(
                cluster.bootstrap_servers, perf_settings, lambda _: None, run_dir=base / "perf"
            )
        )
        assert not errors and summary.records == 3000
        rundata.write_metadata(
            base / "perf", rundata.RunMetadata("perf-produce", "normal", "acks=1")
        )
        scenario = ScenarioSettings(failure="hard_bounce", rate=100, settle_seconds=1.5)
        _, report = asyncio.run(
            run_scenario(cluster, scenario, lambda _: None, run_dir=base / "scenario")
        )
        assert report.ok, report.table()
    finally:
        cluster.down(progress=lambda _: None)
    return base / "perf", base / "scenario"


@pytest.fixture(scope="module")
def built(runs, tmp_path_factory):
    spark = local_session(cores=2, app_name="tidelog-report-tests")
    try:
        data = compute(spark, load_runs(runs), window_seconds=1.0)
    finally:
        spark.stop()
    out = tmp_path_factory.mktemp("report")
    return data, out, write_report(data, out)


def png_size(path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_the_report_has_every_table_cell_and_every_plot(runs, built):
    data, out, written = built
    names = {path.name for path in written}
    plots = {
        "latency_over_time_perf.png",
        "latency_over_time_scenario.png",
        "throughput_over_time.png",
        "latency_cdf.png",
    }
    tables = {"design", "comparison", "latency", "throughput", "delivery", "events"}
    assert plots | {f"{t}.csv" for t in tables} | {"report.md", "report.html"} <= names

    for plot in plots:
        assert (out / plot).stat().st_size > 10_000, plot  # lines, labels, not a blank canvas
        assert png_size(out / plot) == PIXELS, plot
    for table in tables - {"design", "comparison"}:
        for row in read_csv(out / f"{table}.csv"):
            assert all(value != "" for value in row.values()), (table, row)

    design = {(r["test case"], r["workload"]): r for r in read_csv(out / "design.csv")}
    measured = design[("1 normal traffic", "acks=1")]["perf: without"]
    assert re.fullmatch(r"\d+\.\d / \d+\.\d ms", measured), measured
    assert all(all(v for v in row.values()) for row in design.values())
    comparison = read_csv(out / "comparison.csv")
    assert {"perf", "scenario", "scenario / perf"} <= set(comparison[0])
    throughput = [r for r in comparison if r["figure"] == "records/s"]
    assert float(throughput[0]["scenario / perf"]) > 0

    delivery = read_csv(out / "delivery.csv")
    verdict = rundata.read_metadata(runs[1]).verdict
    assert len(delivery) == 3
    assert sum(int(r["acknowledged"]) for r in delivery) == verdict["acked"]
    assert sum(int(r["consumed"]) for r in delivery) == verdict["consumed"]
    assert {(r["lost"], r["duplicated"], r["reordered"]) for r in delivery} == {("0", "0", "0")}
    events = read_csv(out / "events.csv")
    assert [e["kind"] for e in events] == ["hard_bounce"] and float(events[0]["duration_ms"]) > 0

    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(plots)
    assert "<img" in page and 'src="latency' not in page  # nothing outside the page
    for title in ["The runs side by side", "Delivery per partition", "reference figures"]:
        assert title in page
    assert len(data.windows) > 4


def test_a_pipeline_percentile_equals_one_computed_from_the_raw_rows(runs, built):
    data, _, _ = built
    for run_dir in runs:
        acks = pq.read_table(run_dir / "acks.parquet").to_pydict()
        latencies = sorted(acks["latency_ms"])
        (row,) = [r for r in data.latency if r["run"] == run_dir.name]
        assert row["records"] == len(latencies)
        for column, fraction in [("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99)]:
            assert row[column] == percentile(latencies, fraction), (run_dir.name, column)
        assert row["max_ms"] == latencies[-1]

        # the design's average p99: the p99 of each one-second window, averaged
        windows: dict[int, list[float]] = {}
        for acked_at, latency in zip(acks["acked_at"], acks["latency_ms"], strict=True):
            windows.setdefault(math.floor(acked_at.timestamp()), []).append(latency)
        p99s = [percentile(sorted(values), 0.99) for values in windows.values()]
        assert row["windows"] == len(windows)
        assert row["avg_p99_ms"] == pytest.approx(sum(p99s) / len(p99s), rel=1e-12)
        assert row["max_p99_ms"] == max(p99s)
