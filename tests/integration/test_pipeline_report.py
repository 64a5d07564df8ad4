"""``tidelog report`` from small real runs: a perf run and a chaos scenario on real brokers write
their run directories, Spark computes the report, and every table cell and plot is there. The
consumer lag and rebuild tables, which no command here measures yet, are checked on a directory
of run directories (one per case x workload x tiered, as the tiered-storage cases write them)
made of hand-made rows, against figures computed from those rows directly."""

from __future__ import annotations

import asyncio
import csv
import html
import math
import random
import re
import struct
from datetime import UTC, datetime

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import wait_for_leaders
from tidelog import rundata
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper
from tidelog.perf.cases.table import HEADER
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.perf.stats import percentile
from tidelog.pipeline.plots import DPI, PIXELS, height
from tidelog.pipeline.render import write_report
from tidelog.pipeline.report import compute, load_runs

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
def built(runs, spark, tmp_path_factory):
    data = compute(spark, load_runs(runs), window_seconds=1.0)
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
    plots = {"latency_over_time.png", "throughput_over_time.png", "latency_cdf.png"}
    tables = {"design", "runs", "latency", "throughput", "delivery", "events"}
    assert plots | {f"{t}.csv" for t in tables} | {"report.md", "report.html"} <= names

    for plot in plots:
        assert (out / plot).stat().st_size > 10_000, plot  # lines, labels, not a blank canvas
        assert png_size(out / plot) == PIXELS, plot
    for table in tables - {"design", "runs"}:
        for row in read_csv(out / f"{table}.csv"):
            assert all(value != "" for value in row.values()), (table, row)

    # the perf run stands for the design's normal traffic, acks=1, without the tier
    (design,) = read_csv(out / "design.csv")
    assert list(design) == HEADER
    assert (design["test case"], design["workload"]) == ("1 normal traffic", "acks=1")
    assert re.fullmatch(r"\d+\.\d / \d+\.\d", design["without (run)"]), design
    assert (design["tiered (run)"], design["ratio (run)"]) == ("-", "-")
    # a row per run, told apart by what differs in their metadata: kind, case, workload
    runs_table = {r["case"]: r for r in read_csv(out / "runs.csv")}
    assert set(runs_table) == {"normal", "hard_bounce"}
    assert {"kind", "case", "workload"} <= set(runs_table["normal"])
    assert "tiered" not in runs_table["normal"]  # neither run had the tier: said once
    assert float(runs_table["hard_bounce"]["records/s"]) > 0

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
    for title in ["a row per run", "Delivery per partition", "The design's table"]:
        assert html.escape(title) in page
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


START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC).timestamp()
CASES = {  # tiered -> (rebuild seconds, lag scale)
    True: (120.0, 1),
    False: (900.0, 7),
}


def write_case(run_dir, tiered: bool) -> None:
    """A rebuild case's run directory: 20 s of acknowledgements, two in-sync and three
    catching-up consumers of 3 partitions sampled every 0.5 s, a rebuild event."""
    rebuild_s, scale = CASES[tiered]
    chance = random.Random(int(tiered))
    acks = [(START + i * 0.01, chance.lognormvariate(1.0, 0.7)) for i in range(2000)]
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": [rundata.epoch_microseconds(at) for at, _ in acks],
            "latency_ms": [latency for _, latency in acks],
            "partition": [i % 3 for i in range(len(acks))],
            "offset": [i // 3 for i in range(len(acks))],
            "bytes": [100] * len(acks),
            "message": [None] * len(acks),
        },
    )
    consumers = ["in-sync-1", "in-sync-2", "catching-up-1", "catching-up-2", "catching-up-3"]
    samples = [
        (START + n * 0.5, consumer, partition, chance.randrange(0, 50 if "in-sync" in consumer
                                                                else 5000) * scale)
        for n in range(40) for consumer in consumers for partition in range(3)
    ]  # fmt: skip
    rundata.write_table(
        run_dir,
        "consumer",
        {
            "sampled_at": [rundata.epoch_microseconds(at) for at, *_ in samples],
            "consumer": [consumer for _, consumer, _, _ in samples],
            "partition": [partition for _, _, partition, _ in samples],
            "offset": [1000] * len(samples),
            "lag": [lag for *_, lag in samples],
        },
    )
    rundata.write_events(
        run_dir,
        [
            rundata.Event(START + 2, "rebuild", "broker 2", rebuild_s * 1000, "wiped, rebuilt"),
            rundata.Event(START + 1, "rebuild", "broker 3", None, "a moment: not a duration"),
            rundata.Event(START + 3, "hard_bounce", "broker 1", 1500.0, "not a rebuild"),
        ],
    )
    rundata.write_metadata(
        run_dir, rundata.RunMetadata("perf-tiered-storage", "rebuild", "acks=all", tiered)
    )


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """One run of the rebuild case: a directory of two run directories, tiered on and off."""
    run = tmp_path_factory.mktemp("cases") / "tiered-cases"
    for tiered in CASES:
        write_case(run / f"rebuild-acks-all-{'tiered' if tiered else 'local'}", tiered)
    return run


def test_consumer_lag_and_rebuild_tables_match_the_raw_rows(cases, spark, tmp_path):
    runs = load_runs([cases])
    assert {r.label for r in runs} == {"tiered-cases"} and len(runs) == 2
    data = compute(spark, runs, window_seconds=1.0)
    written = write_report(data, tmp_path)

    for run in runs:
        tiered = run.metadata.tiered
        rows = pq.read_table(run.directory / "consumer.parquet").to_pylist()
        totals: dict[tuple, int] = {}  # a consumer's lag over its partitions, per sample
        for row in rows:
            key = (row["consumer"], row["sampled_at"])
            totals[key] = totals.get(key, 0) + row["lag"]
        for kind in ("in-sync", "catching-up"):
            lags = sorted(lag for (c, _), lag in totals.items() if c.startswith(kind))
            (found,) = [r for r in data.consumer_lag if r["kind"] == kind and r["tiered"] == tiered]
            assert found["samples"] == len(lags) == 40 * (2 if kind == "in-sync" else 3)
            assert found["consumers"] == (2 if kind == "in-sync" else 3)
            assert found["max_lag"] == lags[-1]
            assert found["p99_lag"] == percentile(lags, 0.99)
            assert found["p50_lag"] == percentile(lags, 0.5)
            assert found["mean_lag"] == pytest.approx(sum(lags) / len(lags))
            windows = [w for w in data.lag_windows if w["kind"] == kind and w["tiered"] == tiered]
            assert len(windows) == 20 and max(w["max_lag"] for w in windows) == lags[-1]

    rebuilds = {r["tiered"]: r for r in data.rebuilds}
    for tiered, (seconds, _) in CASES.items():
        assert (rebuilds[tiered]["rebuilds"], rebuilds[tiered]["total_s"]) == (1, seconds)
    (ratio,) = data.ratios
    assert ratio["rebuild_duration_ratio"] == pytest.approx(120 / 900)
    with_tiered, without = (
        next(r for r in data.latency if r["tiered"] is tiered) for tiered in (True, False)
    )
    assert ratio["max_p99_ratio"] == pytest.approx(
        with_tiered["max_p99_ms"] / without["max_p99_ms"]
    )

    latency_row, duration_row = read_csv(tmp_path / "design.csv")  # only the rebuild ran
    assert latency_row["test case"] == "3 rebuild a broker (data wiped)"
    assert latency_row["tiered (design)"] == "56.0 / 23.0"
    assert latency_row["tiered (run)"] == (
        f"{with_tiered['max_p99_ms']:.1f} / {with_tiered['max_p95_ms']:.1f}"
    )
    assert (duration_row["tiered (run)"], duration_row["without (run)"]) == ("120.0 s", "15 min")
    assert duration_row["ratio (run)"] == f"{120 / 900:.2f}"
    lag_csv = read_csv(tmp_path / "consumer_lag.csv")
    assert {(r["kind"], r["tiered"]) for r in lag_csv} == {
        (kind, tiered) for kind in ("in-sync", "catching-up") for tiered in ("True", "False")
    }
    assert all(value != "" for row in lag_csv for value in row.values())
    plot = tmp_path / "consumer_lag_over_time.png"
    assert plot in written and plot.stat().st_size > 10_000
    # a row of panels per consumer kind
    assert png_size(plot) == (PIXELS[0], round(height(2) * DPI))
    # one panel: the rebuild case, acks=all, both tiers in it
    assert png_size(tmp_path / "latency_over_time.png") == PIXELS
    page = (tmp_path / "report.html").read_text()
    assert "Consumer lag per consumer kind" in page and "Rebuilds (events of kind" in page
