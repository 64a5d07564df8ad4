"""The report's tables from figures made by hand (no Spark): the design's table is table.txt's
(the command's own rows), the summary says whether a run went the design's way, and the tables
of runs show only the columns that tell runs apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tidelog import rundata
from tidelog.perf.cases.table import HEADER, table_rows
from tidelog.pipeline.render import (
    NOT_MEASURED,
    PartFigures,
    Parts,
    design_tables,
    page_tables,
    summary_tables,
    without_sparse_columns,
)
from tidelog.pipeline.report import ReportData, Run

REBUILD_S = {True: 0.8, False: 2.6}  # what perf tiered-storage's small profile measured
START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def rebuild_report(label: str = "ts") -> ReportData:
    """One run of the rebuild case, acks=all, with and without tiered storage."""
    runs = [
        Run(label, Path(f"ts/rebuild-acks_all-{tiered}"),
            rundata.RunMetadata("perf-tiered-storage", "rebuild", "acks=all", tiered))
        for tiered in (True, False)
    ]  # fmt: skip
    data = ReportData(runs, window_seconds=1.0)
    for tiered, seconds in REBUILD_S.items():
        group = {"run": label, "case": "rebuild", "workload": "acks=all", "tiered": tiered}
        data.starts[tuple(group.values())] = START
        data.latency.append(
            group | {"max_p99_ms": 31.26, "max_p95_ms": 0.04, "avg_p99_ms": 9.0, "avg_p95_ms": 3.0}
        )
        data.rebuilds.append(group | {"rebuilds": 1, "total_s": seconds, "longest_s": seconds})
        data.events.append(
            group
            | {"at": START + timedelta(seconds=2), "kind": "rebuild", "target": "broker 2",
               "duration_ms": seconds * 1000, "detail": ""}
        )  # fmt: skip
    return data


def test_the_design_table_is_the_commands_own_from_the_runs_figures():
    (table,) = design_tables(rebuild_report())
    figures = [
        PartFigures("rebuild", "acks=all", tiered, 31.26, 0.04, seconds)
        for tiered, seconds in REBUILD_S.items()
    ]
    assert table.columns == HEADER
    assert table.rows == table_rows(figures)
    duration = next(row for row in table.rows if row[2] == "rebuild duration")
    assert duration[3:] == ["0.8 s", "120.0 s", "2.6 s", "230 min", "0.31", "0.01"]


def test_the_summary_says_a_rebuild_went_the_designs_way():
    (summary,) = summary_tables(rebuild_report())
    (row,) = summary.rows  # only the rebuild case ran
    finding = dict(zip(summary.columns, row, strict=True))
    assert finding["workload"] == "acks=all"
    assert finding["this run"] == "0.31 (0.8 s / 2.6 s)"
    assert finding["the design"] == "0.01 (2 / 230 min)"
    assert finding["same direction as the design"] == "yes: lower with the tier"


def test_two_runs_of_the_same_case_are_told_apart_by_run_and_each_has_its_design_table():
    first, second = rebuild_report("before"), rebuild_report("after")
    data = ReportData(first.runs + second.runs, window_seconds=1.0)
    for name in ("latency", "rebuilds", "events"):
        setattr(data, name, getattr(first, name) + getattr(second, name))
    data.starts = first.starts | second.starts
    assert Parts.of(data).shown == ["run", "tiered"]  # case, workload, kind: said once
    assert [t.title for t in design_tables(data)] == [
        "The design's table: after",
        "The design's table: before",
    ]
    runs = next(t for t in page_tables(data) if t.name == "runs")
    assert runs.columns[:2] == ["run", "tiered"]
    assert [row[:2] for row in runs.rows] == [
        ["after", True], ["before", True], ["after", False], ["before", False]
    ]  # fmt: skip


def test_a_column_mostly_dashes_is_left_to_the_csv():
    data = rebuild_report()
    runs = next(t for t in page_tables(data) if t.name == "runs")
    assert "records/s" in runs.columns  # no throughput measured: every cell "-"
    shown = without_sparse_columns(runs)
    assert "records/s" not in shown.columns and "largest window p99 (ms)" in shown.columns
    assert all(cell != NOT_MEASURED for row in shown.rows for cell in row)


def test_runs_of_different_kinds_are_rows_told_apart_by_what_differs():
    """A perf run and a scenario (the README's example): one row each in every table, by kind,
    case and workload; nothing they share repeated in a column."""
    runs = [
        Run("acks1", Path("runs/acks1"), rundata.RunMetadata("perf-produce", "normal", "acks=1")),
        Run("hard-bounce", Path("runs/hard-bounce"),
            rundata.RunMetadata("scenario-replication", "hard_bounce", "acks=all")),
    ]  # fmt: skip
    data = ReportData(runs, window_seconds=1.0)
    for run in runs:
        meta = run.metadata
        group = {"run": run.label, "case": meta.case, "workload": meta.workload, "tiered": False}
        data.starts[tuple(group.values())] = START
        data.latency.append(
            group | {"records": 10, "p99_ms": 3.0, "avg_p99_ms": 2.5, "avg_p95_ms": 2.0}
        )
        data.throughput_summary.append(group | {"mean_records_per_s": 5.0, "mean_mb_per_s": 0.1})
    (_, scenario) = data.latency
    data.events.append(
        {k: scenario[k] for k in ("run", "case", "workload", "tiered")}
        | {"at": START, "kind": "hard_bounce", "target": "broker 1", "duration_ms": 800.0,
           "detail": ""}
    )  # fmt: skip
    assert Parts.of(data).shown == ["kind", "case", "workload"]
    tables = {t.name: without_sparse_columns(t) for t in page_tables(data)}
    assert set(tables) == {"runs", "events_page", "times"}
    runs_table = tables["runs"]
    assert runs_table.columns[:3] == ["kind", "case", "workload"]
    assert [row[:3] for row in runs_table.rows] == [
        ["perf-produce", "normal", "acks=1"],
        ["scenario-replication", "hard_bounce", "acks=all"],
    ]
    assert {"p99 (ms)", "average window p99 (ms)", "records/s"} <= set(runs_table.columns)
    assert "p50 (ms)" not in runs_table.columns  # neither measured it
    (design,) = design_tables(data)  # the perf run stands for the design's normal traffic
    assert [row[:2] for row in design.rows] == [["1 normal traffic", "acks=1"]]
    assert summary_tables(data) == []  # no part ran with and without the tier
