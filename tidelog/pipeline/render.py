"""A report directory from ReportData: every table as CSV and Markdown, the plots as PNG, and
one self-contained HTML page (tables inline, images as data URIs).

    REPORT_DIR/report.html, report.md, <table>.csv, <plot>.png

The design table has the design's shape (test case, workload, figure, with and without tiered
storage) with the design's reference figures beside each run's; "-" marks what a run did not
measure. Its figures are: the average of the windows' p99 / p95 for normal traffic and with
out-of-sync consumers (as ``tidelog perf tiered-storage`` prints them), the largest window's
p99 / p95 and the rebuild's duration for a rebuild. With two runs or more, the comparison table
puts their figures side by side.
"""

from __future__ import annotations

import base64
import csv
import html
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tidelog import units
from tidelog.pipeline.plots import THINNED, draw_all
from tidelog.pipeline.report import ReportData, group_key

NOT_MEASURED = "-"


@dataclass(frozen=True)
class ReferenceFigure:
    """One row of the design's reference table. ``case`` is what run metadata calls it."""

    case: str
    case_text: str
    workload: str
    figure: str
    with_tiered: str
    without: str
    columns: tuple[str, str]  # the latency table's p99 and p95 columns the figure is


AVERAGE = ("avg_p99_ms", "avg_p95_ms")
LARGEST = ("max_p99_ms", "max_p95_ms")
REFERENCE = [
    ReferenceFigure("normal", "1 normal traffic", "acks=all", "avg P99 / P95 produce latency",
                    "25 / 14 ms", "21 / 13 ms", AVERAGE),
    ReferenceFigure("normal", "1 normal traffic", "acks=1", "avg P99 / P95 produce latency",
                    "9 / 4 ms", "9 / 4 ms", AVERAGE),
    ReferenceFigure("consumers", "2 plus 9 out-of-sync consumers reading 180 MB/s of old data "
                    "per broker", "acks=all", "P99 / P95", "42 / 18 ms", "60 / 30 ms", AVERAGE),
    ReferenceFigure("consumers", "2 same", "acks=1", "P99 / P95", "10 / 5 ms", "10 / 4 ms",
                    AVERAGE),
    ReferenceFigure("rebuild", "3 rebuild a broker (data wiped)", "acks=all",
                    "max P99 / P95; duration", "56 / 23 ms; 2 min", "490 / 290 ms; 230 min",
                    LARGEST),
    ReferenceFigure("rebuild", "3 same", "acks=1", "max P99 / P95; duration",
                    "12 / 6 ms; 4 min", "10 / 5 ms; 520 min", LARGEST),
]  # fmt: skip


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[list[Any]]


def _cell(value: Any) -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, float):
        if math.isnan(value):
            return NOT_MEASURED
        return f"{value:.3g}" if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


def _from_dicts(name: str, title: str, rows: list[dict[str, Any]]) -> Table | None:
    if not rows:
        return None
    columns = list(rows[0])
    return Table(name, title, columns, [[row[c] for c in columns] for row in rows])


def design_table(data: ReportData) -> Table:
    """The design's reference table with each run's figures beside it."""
    by_key = {group_key(r): r for r in data.latency}
    rebuilds = {group_key(r): r for r in data.rebuilds}
    columns = ["test case", "workload", "figure", "reference: with tiered", "reference: without"]
    for label in data.labels:
        columns += [f"{label}: with tiered", f"{label}: without"]
    rows = []
    for reference in REFERENCE:
        row: list[Any] = [
            reference.case_text,
            reference.workload,
            reference.figure,
            reference.with_tiered,
            reference.without,
        ]
        for label in data.labels:
            for tiered in (True, False):
                key = (label, reference.case, reference.workload, tiered)
                row.append(_design_cell(reference, by_key.get(key), rebuilds.get(key)))
        rows.append(row)
    return Table("design", "The design's reference figures beside this run's", columns, rows)


def _design_cell(reference: ReferenceFigure, found: dict | None, rebuild: dict | None) -> str:
    if found is None:
        return NOT_MEASURED
    p99, p95 = reference.columns
    latency = units.milliseconds(found[p99], found[p95])
    if reference.case != "rebuild":
        return latency
    return f"{latency}; {NOT_MEASURED if rebuild is None else units.duration(rebuild['total_s'])}"


COMPARED = [
    ("latency", "records", "records acknowledged"),
    ("latency", "p50_ms", "p50 (ms)"),
    ("latency", "p95_ms", "p95 (ms)"),
    ("latency", "p99_ms", "p99 (ms)"),
    ("latency", "max_ms", "max (ms)"),
    ("latency", "avg_p99_ms", "average p99 (ms)"),
    ("latency", "max_p99_ms", "max window p99 (ms)"),
    ("throughput", "mean_records_per_s", "records/s"),
    ("throughput", "mean_mb_per_s", "MB/s"),
    ("rebuild", "total_s", "rebuild duration (s)"),
]


def comparison_table(data: ReportData) -> Table | None:
    """Each figure of each case x workload x tiered, one column per run, last over first."""
    labels = data.labels
    if len(labels) < 2:
        return None
    by_key = {group_key(r): r for r in data.latency}
    throughput = {group_key(r): r for r in data.throughput_summary}
    lag = {(*group_key(r), r["kind"]): r for r in data.consumer_lag}
    rebuilds = {group_key(r): r for r in data.rebuilds}
    groups = sorted({group_key(r)[1:] for r in data.latency})
    rows = []
    for case, workload, tiered in groups:
        for table, column, text in COMPARED:
            found = {"latency": by_key, "throughput": throughput, "rebuild": rebuilds}[table]
            values = [
                found.get((label, case, workload, tiered), {}).get(column) for label in labels
            ]
            rows.append([case, workload, tiered, text, *values, _ratio(values)])
        for kind in sorted({r["kind"] for r in data.consumer_lag}):
            for column, text in [("p99_lag", "p99 lag"), ("max_lag", "max lag")]:
                values = [
                    lag.get((label, case, workload, tiered, kind), {}).get(column)
                    for label in labels
                ]
                rows.append([case, workload, tiered, f"{kind}: {text}", *values, _ratio(values)])
    # every group of a run at once: its records over the seconds its groups lasted
    totals = {label: [r for r in data.throughput_summary if r["run"] == label] for label in labels}
    for text, column in [("records/s", "records"), ("MB/s", "mean_mb_per_s")]:
        values = []
        for label in labels:
            seconds = sum(r["seconds"] for r in totals[label])
            done = sum(
                r[column] * (r["seconds"] if column == "mean_mb_per_s" else 1)
                for r in totals[label]
            )
            values.append(done / seconds if seconds else None)
        rows.append(["all", "all", "-", text, *values, _ratio(values)])
    columns = ["case", "workload", "tiered", "figure", *labels, f"{labels[-1]} / {labels[0]}"]
    return Table("comparison", "The runs side by side", columns, rows)


def _ratio(values: list[Any]) -> float | None:
    first, last = values[0], values[-1]
    if first is None or last is None or not first:
        return None
    return last / first


def tables(data: ReportData) -> list[Table]:
    found = [
        design_table(data),
        comparison_table(data),
        _from_dicts(
            "latency", "Produce latency per case x workload x tiered (exact)", data.latency
        ),
        _from_dicts("throughput", "Throughput per case x workload x tiered",
                    data.throughput_summary),
        _from_dicts("tiered_ratios", "With over without tiered storage", data.ratios),
        _from_dicts("rebuilds", "Rebuild duration (events of kind rebuild)", data.rebuilds),
        _from_dicts(
            "delivery", "Delivery per partition: lost, duplicated, reordered", data.delivery
        ),
        _from_dicts("consumer_lag", "Consumer lag per consumer kind (records; exact "
                    "percentiles over the samples of a consumer's total lag)", data.consumer_lag),
        _from_dicts("events", "Events", data.events),
        _from_dicts("throughput_per_second", "Records per second", data.throughput),
        _from_dicts("latency_per_window", "Latency per window", data.windows),
        _from_dicts("consumer_lag_per_window", "Largest consumer lag per window",
                    data.lag_windows),
    ]  # fmt: skip
    return [table for table in found if table is not None]


# Tables too long to read on a page: CSV only.
CSV_ONLY = {"throughput_per_second", "latency_per_window", "consumer_lag_per_window"}


def markdown(table: Table) -> str:
    lines = [
        f"### {table.title}",
        "",
        "| " + " | ".join(table.columns) + " |",
        "|" + "---|" * len(table.columns),
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in table.rows
    )
    return (
        f"<h2>{html.escape(table.title)}</h2>\n"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"
    )


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th { background: #eee; }
td:first-child, th:first-child { text-align: left; }
img { display: block; margin-bottom: 1.5em; border: 1px solid #ddd; }
"""


def _runs_html(data: ReportData) -> str:
    items = []
    for run in data.runs:
        meta = run.metadata
        machine = meta.machine
        items.append(
            f"<li><b>{html.escape(run.label)}</b> ({html.escape(run.directory.name)}): "
            f"{html.escape(meta.kind)}, case "
            f"{html.escape(meta.case)}, {html.escape(meta.workload)}, tiered "
            f"{'on' if meta.tiered else 'off'}; {html.escape(meta.started_at)} to "
            f"{html.escape(meta.ended_at)}; {machine.get('cores')} cores, "
            f"{html.escape(str(machine.get('os')))}</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def write_report(data: ReportData, out: str | Path) -> list[Path]:
    """Writes the report directory; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    found = tables(data)
    for table in found:
        path = out / f"{table.name}.csv"
        with open(path, "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(table.columns)
            writer.writerows([["" if v is None else v for v in row] for row in table.rows])
        written.append(path)
    images = draw_all(data, out)
    written += images
    shown = [t for t in found if t.name not in CSV_ONLY]
    intro = (
        f"Runs: {', '.join(data.labels)}. Percentiles are exact (nearest rank); "
        f"windows are {data.window_seconds:g} s; '{NOT_MEASURED}' marks what a run did not "
        f"measure. {THINNED}"
    )
    report_md = out / "report.md"
    report_md.write_text(
        "# tidelog report\n\n"
        + intro
        + "\n\n"
        + "\n".join(markdown(t) for t in shown)
        + "\n"
        + "\n".join(f"![{p.stem}]({p.name})" for p in images)
        + "\n"
    )
    written.append(report_md)
    pictures = "".join(
        f'<h2>{html.escape(p.stem.replace("_", " "))}</h2>\n<img alt="{html.escape(p.stem)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">\n'
        for p in images
    )
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tidelog report</title>"
        f"<style>{STYLE}</style></head><body>\n<h1>tidelog report</h1>\n"
        f"<p>{html.escape(intro)}</p>\n{_runs_html(data)}\n"
        + "".join(html_table(t) for t in shown)
        + pictures
        + "</body></html>\n"
    )
    report_html = out / "report.html"
    report_html.write_text(page)
    written.append(report_html)
    return written
