"""The design table from figures made by hand (no Spark): a run's cells in a unit that fits,
the design's own figures as the design wrote them."""

from __future__ import annotations

from pathlib import Path

from tidelog import rundata
from tidelog.pipeline.render import REFERENCE, design_table
from tidelog.pipeline.report import ReportData, Run

REBUILD_S = {True: 0.8, False: 2.6}  # what perf tiered-storage's small profile measured


def rebuild_report() -> ReportData:
    """One run of the rebuild case, acks=all, with and without tiered storage."""
    runs = [
        Run("ts", Path(f"ts/rebuild-acks_all-{tiered}"),
            rundata.RunMetadata("perf-tiered-storage", "rebuild", "acks=all", tiered))
        for tiered in (True, False)
    ]  # fmt: skip
    data = ReportData(runs, window_seconds=1.0)
    for tiered, seconds in REBUILD_S.items():
        group = {"run": "ts", "case": "rebuild", "workload": "acks=all", "tiered": tiered}
        data.latency.append(group | {"max_p99_ms": 31.26, "max_p95_ms": 0.04})
        data.rebuilds.append(group | {"rebuilds": 1, "total_s": seconds, "longest_s": seconds})
    return data


def test_a_rebuild_of_seconds_reads_in_seconds_beside_the_design_minutes():
    table = design_table(rebuild_report())
    rows = {(row[0], row[1]): dict(zip(table.columns, row, strict=True)) for row in table.rows}
    rebuild = rows[("3 rebuild a broker (data wiped)", "acks=all")]

    assert rebuild["ts: with tiered"] == "31.3 / 0.04 ms; 0.8 s"
    assert rebuild["ts: without"] == "31.3 / 0.04 ms; 2.6 s"
    assert rows[("1 normal traffic", "acks=all")]["ts: with tiered"] == "-"
    # the design's figures stay as the design wrote them
    assert [(row[3], row[4]) for row in table.rows] == [
        (reference.with_tiered, reference.without) for reference in REFERENCE
    ]
    assert (rebuild["reference: with tiered"], rebuild["reference: without"]) == (
        "56 / 23 ms; 2 min",
        "490 / 290 ms; 230 min",
    )
