"""A report directory from ReportData: every table as CSV, the page's tables in Markdown and HTML,
the plots as PNG, and one self-contained HTML page (tables inline, images as data URIs).

    REPORT_DIR/report.html, report.md, <table>.csv, <plot>.png

The page reads top down: what every run shares (said once), the summary (the design's three
findings, each with this run's with/without ratio, the design's, and whether the run went the
design's way), the design's table exactly as ``tidelog perf tiered-storage`` prints it in
table.txt (figures from the run directories, by the command's own table code), the plots, then
a table per kind of figure with a row per run part (case x workload x tiered of a run) and only
the columns that tell the rows apart (what differs between the runs' metadata), and last when
each run ran. report.md has the same sections in the same order.

No table on the page has a column that is more than half "-": a part appears in a table only
if it measured that table's figures, and a column most rows lack stays in the CSV file.
"""

from __future__ import annotations

import base64
import csv
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tidelog import units
from tidelog.perf.cases.events import CASES
from tidelog.perf.cases.profiles import WORKLOADS
from tidelog.perf.cases.table import DESIGN, HEADER, ratio_text, table_rows
from tidelog.pipeline.plots import THINNED, draw_all, part_order
from tidelog.pipeline.report import GROUP, ReportData, group_key

NOT_MEASURED = "-"


@dataclass(frozen=True)
class Table:
    """A table as a page shows it. ``compare``: its rows are runs (or their parts) compared
    figure by figure; the events table is a log, not a comparison."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    compare: bool = True
    note: str = ""


def _cell(value: Any) -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return NOT_MEASURED
        return f"{value:.3g}" if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


def _from_dicts(name: str, title: str, rows: list[dict[str, Any]]) -> Table | None:
    if not rows:
        return None
    columns = list(rows[0])
    return Table(name, title, columns, [[row.get(c) for c in columns] for row in rows])


# What tells runs apart


@dataclass(frozen=True)
class Parts:
    """The report's run parts (groups: run, case, workload, tiered) and which of their
    identifying columns the page shows: those that differ between parts. The run's label is
    shown only when it is needed to tell two parts apart (two runs of the same case x workload x
    tiered); what every part shares is said once at the top instead."""

    kinds: dict[tuple, str]  # group -> its run's kind ("perf-tiered-storage", ...)
    shown: list[str]  # of "run", "kind", "case", "workload", "tiered"

    @classmethod
    def of(cls, data: ReportData) -> Parts:
        kinds = {
            (run.label, run.metadata.case, run.metadata.workload, bool(run.metadata.tiered)):
                run.metadata.kind
            for run in data.runs
        }  # fmt: skip
        groups = list(kinds)
        shown = []
        if len({group[1:] for group in groups}) < len(groups):
            shown.append("run")
        if len(set(kinds.values())) > 1:
            shown.append("kind")
        for number, name in enumerate(GROUP[1:], 1):
            if len({group[number] for group in groups}) > 1:
                shown.append(name)
        return cls(kinds, shown)

    def cells(self, key: tuple) -> list[Any]:
        named = dict(zip(GROUP, key, strict=True)) | {"kind": self.kinds.get(key, "")}
        return [named[name] for name in self.shown]

    def order(self, key: tuple) -> tuple:
        """Parts of a case together, tiered before without (as the design's table reads), the
        run last: two runs' figures of one case x workload x tiered sit in adjacent rows."""
        return (self.kinds.get(key, ""), *part_order(key))


def _per_part(
    name: str,
    title: str,
    parts: Parts,
    rows: list[dict[str, Any]],
    columns: list[tuple[str, str]],
    more: Sequence[str] = (),
) -> Table | None:
    """A row per part (and per value of ``more``: a consumer kind, a partition) of ``rows``,
    the parts' shown columns then ``columns`` ((key, heading) pairs)."""
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: (parts.order(group_key(r)), *(r[m] for m in more)))
    return Table(
        name,
        title,
        [*parts.shown, *more, *(heading for _, heading in columns)],
        [
            [*parts.cells(group_key(r)), *(r[m] for m in more), *(r.get(k) for k, _ in columns)]
            for r in ordered
        ],
    )


FIGURES = [
    ("records", "records acknowledged"),
    ("p50_ms", "p50 (ms)"),
    ("p95_ms", "p95 (ms)"),
    ("p99_ms", "p99 (ms)"),
    ("max_ms", "max (ms)"),
    ("avg_p99_ms", "average window p99 (ms)"),
    ("max_p99_ms", "largest window p99 (ms)"),
    ("mean_records_per_s", "records/s"),
    ("mean_mb_per_s", "MB/s"),
]


def runs_table(data: ReportData, parts: Parts) -> Table | None:
    """A row per part, its exact latency percentiles, windowed p99 and throughput."""
    throughput = {group_key(r): r for r in data.throughput_summary}
    rows = [r | throughput.get(group_key(r), {}) for r in data.latency]
    return _per_part("runs", "Produce latency and throughput, a row per run", parts, rows, FIGURES)


# The design's table and findings


@dataclass(frozen=True)
class PartFigures:
    """One part's figures as perf tiered-storage's table reads them (table.CaseFigures): the
    average or the largest window's p99 / p95 (as the case's figure says) and the first
    rebuild's duration."""

    case: str
    workload: str
    tiered: bool
    p99_ms: float
    p95_ms: float
    rebuild_s: float | None


def design_sets(data: ReportData) -> dict[str, list[PartFigures]]:
    """The figures of each set of parts that makes one run of the design's cases, by a title
    ("" when there is one): all parts, or each run's when two runs share a case x workload x
    tiered."""
    latency = {group_key(r): r for r in data.latency}
    rebuilds: dict[tuple, float] = {}
    for event in data.events:
        if event["kind"] == "rebuild" and event["duration_ms"]:
            rebuilds.setdefault(group_key(event), event["duration_ms"] / 1000)
    designed = [
        key for key in latency if key[1] in CASES and key[2] in WORKLOADS
    ]  # the design's cases
    apart = len({key[1:] for key in designed}) < len(designed)
    sets: dict[str, list[PartFigures]] = {}
    for key in sorted(designed):
        row, prefix = latency[key], CASES[key[1]].figure
        sets.setdefault(key[0] if apart else "", []).append(
            PartFigures(
                key[1],
                key[2],
                key[3],
                row[f"{prefix}_p99_ms"],
                row[f"{prefix}_p95_ms"],
                rebuilds.get(key),
            )
        )
    return sets


def design_tables(data: ReportData) -> list[Table]:
    """The design's table of each set, its rows and columns exactly as table.txt's."""
    return [
        Table(
            "design" + (f"_{title}" if title else ""),
            "The design's table" + (f": {title}" if title else ""),
            list(HEADER),
            table_rows(figures),
            note="As table.txt prints it: p99 / p95 in ms, the average of the one-second "
            "windows' (for a rebuild, the largest window's); ratio = with tiered storage / "
            "without.",
        )
        for title, figures in design_sets(data).items()
    ]


SAME = 0.1  # a ratio within 10% of 1 is "about the same"


def direction(ratio: float) -> str:
    if ratio > 1 + SAME:
        return "higher with the tier"
    if ratio < 1 - SAME:
        return "lower with the tier"
    return "about the same"


@dataclass(frozen=True)
class Finding:
    """One of the design's findings: the question, the case that answers it, and the figure
    (of a PartFigures) whose with / without ratio is the answer; ``pair`` writes the run's
    figures with and without the tier, ``design_pair`` the design's as the design wrote them."""

    question: str
    case: str
    figure: str
    measure: Callable[[PartFigures], float | None]
    pair: Callable[[float, float], str]
    design_pair: Callable[[float, float], str]


def _durations(first: float, second: float) -> str:
    return f"{units.duration(first)} / {units.duration(second)}"


FINDINGS = [
    Finding("Does the tier cost latency in normal traffic?", "normal", "avg p99",
            lambda f: f.p99_ms, units.milliseconds, lambda a, b: f"{a:g} / {b:g} ms"),
    Finding("Do out-of-sync readers hurt less with the tier?", "consumers", "avg p99",
            lambda f: f.p99_ms, units.milliseconds, lambda a, b: f"{a:g} / {b:g} ms"),
    Finding("How much faster is a rebuild with the tier?", "rebuild", "rebuild duration",
            lambda f: f.rebuild_s, _durations, lambda a, b: f"{a / 60:g} / {b / 60:g} min"),
]  # fmt: skip


def _design_figure(finding: Finding, workload: str, tiered: bool) -> float | None:
    reference = DESIGN[(finding.case, workload, tiered)]
    return reference.rebuild_s if finding.case == "rebuild" else reference.p99_ms


def summary_tables(data: ReportData) -> list[Table]:
    """Each finding, per workload measured with and without the tier: this run's ratio with /
    without (table.txt's p99 or rebuild ratio), the design's, and whether the run's went the
    design's way (above, below or within SAME of 1)."""
    found = []
    for title, figures in design_sets(data).items():
        by_key = {(f.case, f.workload, f.tiered): f for f in figures}
        rows = []
        for finding in FINDINGS:
            for workload in WORKLOADS:
                tiered = by_key.get((finding.case, workload, True))
                local = by_key.get((finding.case, workload, False))
                if tiered is None or local is None:
                    continue
                run = (finding.measure(tiered), finding.measure(local))
                design = (
                    _design_figure(finding, workload, True),
                    _design_figure(finding, workload, False),
                )
                run_ratio, design_ratio = ratio_text(*run), ratio_text(*design)
                if run_ratio == NOT_MEASURED:
                    reproduced = "no figure"
                else:
                    went, expected = direction(float(run_ratio)), direction(float(design_ratio))
                    reproduced = (
                        f"yes: {went}"
                        if went == expected
                        else (f"no: {went}, the design {expected.replace(' with the tier', '')}")
                    )
                rows.append(
                    [
                        finding.question,
                        workload,
                        f"{finding.figure}, with / without the tier",
                        _ratio_with(run_ratio, run, finding.pair),
                        _ratio_with(design_ratio, design, finding.design_pair),
                        reproduced,
                    ]
                )
        if rows:
            found.append(
                Table(
                    "summary" + (f"_{title}" if title else ""),
                    "Summary: the design's findings, this run and the design"
                    + (f" ({title})" if title else ""),
                    [
                        "finding",
                        "workload",
                        "figure",
                        "this run",
                        "the design",
                        "same direction as the design",
                    ],
                    rows,
                    note=f"A ratio above 1 means the tier cost latency (or time); within "
                    f"{SAME:.0%} of 1 is about the same. Ratios are table.txt's.",
                )
            )
    return found


def _ratio_with(
    ratio: str, values: tuple[float | None, float | None], pair: Callable[[float, float], str]
) -> str:
    if ratio == NOT_MEASURED or values[0] is None or values[1] is None:
        return NOT_MEASURED
    return f"{ratio} ({pair(values[0], values[1])})"


# The other tables


def _seconds_since_start(data: ReportData, row: dict[str, Any], column: str) -> float | None:
    start = data.starts.get(group_key(row))
    return None if start is None else (row[column] - start).total_seconds()


def events_table(data: ReportData, parts: Parts) -> Table | None:
    rows = [
        e
        | {
            "at_s": _seconds_since_start(data, e, "at"),
            "duration": "moment"
            if e["duration_ms"] is None
            else units.duration(e["duration_ms"] / 1000),
        }
        for e in data.events
    ]
    table = _per_part(
        "events_page",
        "Events (seconds since the part's first acknowledgement)",
        parts,
        sorted(rows, key=lambda r: r["at"]),
        [("at_s", "at (s)"), ("kind", "kind"), ("target", "target"), ("duration", "duration"),
         ("detail", "detail")],
    )  # fmt: skip
    if table is None:
        return None
    return Table(table.name, table.title, table.columns, table.rows, compare=False)


def rebuilds_table(data: ReportData, parts: Parts) -> Table | None:
    rows = [
        r | {"total": units.duration(r["total_s"]), "longest": units.duration(r["longest_s"])}
        for r in data.rebuilds
    ]
    return _per_part(
        "rebuilds_page",
        "Rebuilds (events of kind rebuild or wipe_and_rebuild)",
        parts,
        rows,
        [("rebuilds", "rebuilds"), ("total", "total"), ("longest", "longest")],
    )


def lag_table(data: ReportData, parts: Parts) -> Table | None:
    return _per_part(
        "consumer_lag_page",
        "Consumer lag per consumer kind (records a consumer has yet to read; exact "
        "percentiles over its samples)",
        parts,
        data.consumer_lag,
        [("consumers", "consumers"), ("samples", "samples"), ("mean_lag", "mean"),
         ("p50_lag", "p50"), ("p99_lag", "p99"), ("max_lag", "max")],
        more=["kind"],
    )  # fmt: skip


def delivery_page_table(data: ReportData, parts: Parts) -> Table | None:
    return _per_part(
        "delivery_page",
        "Delivery per partition: lost, duplicated, reordered",
        parts,
        data.delivery,
        [("acknowledged", "acknowledged"), ("consumed", "consumed"), ("lost", "lost"),
         ("duplicated", "duplicated"), ("reordered", "reordered")],
        more=["partition"],
    )  # fmt: skip


def times_table(data: ReportData, parts: Parts, facts: dict[str, str]) -> Table | None:
    """When each part ran: its start (the date only where it is not the one every part
    shares) and how long it took; a fact that differs between parts is a column."""
    rows: list[tuple[tuple, str, str | None, dict[str, str]]] = []
    for run in data.runs:
        meta = run.metadata
        key = (run.label, meta.case, meta.workload, bool(meta.tiered))
        started, ended = _time(meta.started_at), _time(meta.ended_at)
        took = units.duration((ended - started).total_seconds()) if started and ended else None
        if started is None:
            shown = meta.started_at
        else:
            shown = started.strftime("%H:%M:%S" if "date" in facts else "%Y-%m-%d %H:%M:%S")
        own = {name: value for name, value in _facts_of(run).items() if name not in facts}
        rows.append((key, shown, took, own))
    if not rows:
        return None
    # the date is in the start's column, the kind (when it differs) in the parts' own
    differing = sorted({name for *_, own in rows for name in own} - {"date", "kind"})
    rows.sort(key=lambda r: (r[1], parts.order(r[0])))
    return Table(
        "times",
        "When each run ran",
        [*parts.shown, "started (UTC)", "took", *differing],
        [[*parts.cells(key), shown, took, *(own.get(n) for n in differing)]
         for key, shown, took, own in rows],
    )  # fmt: skip


def _time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _facts_of(run) -> dict[str, str]:
    """What a run says about how it ran, as text: the facts the page states once if every
    run shares them."""
    meta = run.metadata
    machine = meta.machine
    started = _time(meta.started_at)
    found = {
        "kind": meta.kind,
        "command": meta.settings.get("command"),
        "seed": meta.settings.get("seed"),
        "profile": meta.profile.get("name"),
        "machine": f"{machine.get('cores')} cores, {machine.get('os')}, Python "
        f"{machine.get('python')}",
        "date": started.strftime("%Y-%m-%d") if started else "",
    }
    return {name: str(value) for name, value in found.items() if value not in (None, "")}


def shared_facts(data: ReportData) -> dict[str, str]:
    """The facts every run has, with the same value."""
    found = [_facts_of(run) for run in data.runs]
    return {
        name: value
        for name, value in found[0].items()
        if all(facts.get(name) == value for facts in found)
    }


def page_tables(data: ReportData) -> list[Table]:
    """The tables below the plots, in the page's order."""
    parts = Parts.of(data)
    found = [
        runs_table(data, parts),
        rebuilds_table(data, parts),
        lag_table(data, parts),
        delivery_page_table(data, parts),
        events_table(data, parts),
        times_table(data, parts, shared_facts(data)),
    ]
    return [table for table in found if table is not None]


def csv_tables(data: ReportData) -> list[Table]:
    """Every figure's table as CSV, every column kept."""
    found = [
        _from_dicts("latency", "Produce latency per part", data.latency),
        _from_dicts("throughput", "Throughput per part", data.throughput_summary),
        _from_dicts("tiered_ratios", "With over without tiered storage", data.ratios),
        _from_dicts("rebuilds", "Rebuild duration", data.rebuilds),
        _from_dicts("delivery", "Delivery per partition", data.delivery),
        _from_dicts("consumer_lag", "Consumer lag per consumer kind", data.consumer_lag),
        _from_dicts("events", "Events", data.events),
        _from_dicts("throughput_per_second", "Records per second", data.throughput),
        _from_dicts("latency_per_window", "Latency per window", data.windows),
        _from_dicts("consumer_lag_per_window", "Largest consumer lag per window",
                    data.lag_windows),
    ]  # fmt: skip
    return [table for table in found if table is not None]


def without_sparse_columns(table: Table) -> Table:
    """``table`` without the columns more than half of whose cells are "-" (the CSV keeps
    them)."""
    keep = [
        n
        for n in range(len(table.columns))
        if sum(_cell(row[n]) == NOT_MEASURED for row in table.rows) <= len(table.rows) / 2
    ]
    return Table(
        table.name,
        table.title,
        [table.columns[n] for n in keep],
        [[row[n] for n in keep] for row in table.rows],
        table.compare,
        table.note,
    )


def markdown(table: Table) -> str:
    lines = [
        f"### {table.title}",
        "",
        "| " + " | ".join(table.columns) + " |",
        "|" + "---|" * len(table.columns),
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines) + "\n"


def html_table(table: Table, level: str = "h2") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>"
        + "".join(
            (NUMBER_CELL if _numeric(v) else "<td>") + f"{html.escape(_cell(v))}</td>" for v in row
        )
        + "</tr>"
        for row in table.rows
    )
    note = f'<p class="note">{html.escape(table.note)}</p>\n' if table.note else ""
    kind = "compare" if table.compare else "log"
    return (
        f"<{level}>{html.escape(table.title)}</{level}>\n"
        f'<table id="{html.escape(table.name)}" class="{kind}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>\n{note}"
    )


NUMBER_CELL = '<td class="n">'


def _numeric(value: Any) -> bool:
    """A cell right-aligned, as numbers are: a number, or text that is figures ("12.6 / 9.4",
    "2.0 s")."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and bool(value) and value[0].isdigit() and " " not in value[:2]


STYLE = """
body { font-family: sans-serif; margin: 1em 2em; color: #222; max-width: 1300px; }
h1 { margin: 0.2em 0; font-size: 1.5em; }
h2 { font-size: 1.15em; margin: 1.2em 0 0.4em; }
p { margin: 0.3em 0; }
.facts { font-size: 0.85em; color: #444; }
.note { font-size: 0.8em; color: #555; margin-bottom: 1.2em; }
table { border-collapse: collapse; margin-bottom: 0.4em; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: left; }
th { background: #eee; }
td.n { text-align: right; }
img { display: block; max-width: 100%; height: auto; margin-bottom: 1em; border: 1px solid #ddd; }
"""


def _facts_text(data: ReportData, facts: dict[str, str]) -> list[str]:
    """The lines above the summary: the runs by name (a run directory's), what they share."""
    parts = len({(r.label, r.metadata.case, r.metadata.workload, r.metadata.tiered)
                 for r in data.runs})  # fmt: skip
    labels = ", ".join(data.labels)
    if parts == len(data.labels):
        runs = f"{parts} run{'s' if parts > 1 else ''} ({labels})"
    else:
        runs = f"{len(data.labels)} run(s) ({labels}) of {parts} parts (case x workload x tiered)"
    shared = "; ".join(f"{name} {value}" for name, value in facts.items())
    return [
        f"{runs}; {'every one' if parts > 1 else 'its'}: {shared}.",
        f"Percentiles are exact (nearest rank); windows are {data.window_seconds:g} s; "
        f"'{NOT_MEASURED}' marks what a run did not measure. {THINNED}",
    ]


def write_report(data: ReportData, out: str | Path) -> list[Path]:
    """Writes the report directory; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    summaries = summary_tables(data)
    designs = design_tables(data)
    below = [without_sparse_columns(t) if t.compare else t for t in page_tables(data)]
    for table in [*summaries, *designs, *below, *csv_tables(data)]:
        path = out / f"{table.name}.csv"
        with open(path, "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(table.columns)
            writer.writerows([["" if v is None else v for v in row] for row in table.rows])
        written.append(path)
    images = draw_all(data, out)
    written += images
    facts = _facts_text(data, shared_facts(data))
    captions = {p: p.stem.replace("_", " ") for p in images}
    report_md = out / "report.md"
    report_md.write_text(
        "# tidelog report\n\n"
        + "\n\n".join(facts)
        + "\n\n"
        + "\n".join(markdown(t) for t in [*summaries, *designs])
        + "\n"
        + "\n".join(f"### {captions[p]}\n\n![{p.stem}]({p.name})\n" for p in images)
        + "\n"
        + "\n".join(markdown(t) for t in below)
    )
    written.append(report_md)
    pictures = "".join(
        f'<h2>{html.escape(captions[p])}</h2>\n<img alt="{html.escape(p.stem)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">\n'
        for p in images
    )
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tidelog report</title>"
        f"<style>{STYLE}</style></head><body>\n<h1>tidelog report</h1>\n"
        + "".join(f'<p class="facts">{html.escape(line)}</p>\n' for line in facts)
        + "".join(html_table(t) for t in [*summaries, *designs])
        + pictures
        + "".join(html_table(t) for t in below)
        + "</body></html>\n"
    )
    report_html = out / "report.html"
    report_html.write_text(page)
    written.append(report_html)
    return written
