"""The report's PNG plots (matplotlib, no display): every figure is FIGURE_SIZE inches at DPI
per row of panels, so every image is PIXELS wide and PIXELS[1] high per row.

Every plot draws a case x workload x tiered group in its workload's colour and its tier's line
style, the same in every plot of a report (SeriesStyle); a plot of several groups has a panel
per case.

Plots draw the report's per-window and per-second rows, never raw rows; a line longer than
MAX_POINTS points is thinned to every k-th point for drawing (THINNED says so on the page; the
CSV tables keep every row, and every figure in the tables is computed from all of them)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tidelog.pipeline.report import GROUP, ReportData, group_key

FIGURE_SIZE = (10, 4)
DPI = 100
PIXELS = (FIGURE_SIZE[0] * DPI, FIGURE_SIZE[1] * DPI)
MAX_POINTS = 2000
THINNED = (
    f"Plots draw at most {MAX_POINTS} points per line (longer series: every k-th window); "
    "the tables and CSV files hold every window."
)


# tab:red marks the events on the latency plots, so no series is red
PALETTE = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
           "tab:olive", "tab:cyan", "tab:gray"]  # fmt: skip
TIER_STYLES = {True: "-", False: "--"}
TIER_NAMES = {True: "tiered", False: "no tiered"}


@dataclass(frozen=True)
class SeriesStyle:
    """How the plots of one report draw a case x workload x tiered group: the colour of its
    workload and the line style of its tier (TIER_STYLES); its case is its panel. The report's
    workloads, sorted, take PALETTE's colours in turn; draw_all builds one SeriesStyle for all
    its plots, so a workload has one colour and a tier one style in every plot."""

    colours: dict[str, str]

    @classmethod
    def of(cls, data: ReportData) -> SeriesStyle:
        workloads = sorted({run.metadata.workload for run in data.runs})
        return cls({name: PALETTE[n % len(PALETTE)] for n, name in enumerate(workloads)})

    def line(self, row: dict[str, Any]) -> dict[str, Any]:
        """Axes.plot's keywords for the series of ``row`` (a row with a workload and tiered)."""
        tiered = bool(row["tiered"])
        return {
            "color": self.colours[row["workload"]],
            "linestyle": TIER_STYLES[tiered],
            "label": f"{row['workload']}, {TIER_NAMES[tiered]}",
        }


def thin(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """Every k-th point of a series longer than MAX_POINTS (the last one kept)."""
    step = -(-len(xs) // MAX_POINTS)
    if step <= 1:
        return xs, ys
    keep = [*range(0, len(xs), step)]
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def file_label(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label)


def _group_name(row: dict[str, Any], runs: int) -> str:
    tiered = "tiered" if row["tiered"] else "no tiered"
    name = f"{row['case']}, {row['workload']}, {tiered}"
    return f"{row['run']}: {name}" if runs > 1 else name


def _groups(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The rows of each group, in order."""
    found: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(group_key(row), []).append(row)
    return found


def _plot_label(data: ReportData, key: tuple) -> str:
    """A run's own label when it is one group; with the group's case, workload and tiered
    when its run has several."""
    label = key[0]
    if sum(1 for other in data.starts if other[0] == label) > 1:
        label += f"_{key[1]}_{key[2]}_{'tiered' if key[3] else 'local'}"
    return file_label(label)


def _figure() -> tuple[Figure, Axes]:
    """A figure drawn by Agg (no display, no pyplot state shared between reports)."""
    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI, layout="tight")
    return figure, figure.subplots()


def _panels(
    series: SeriesStyle,
    keys: Iterable[tuple],
    sharex: bool = False,
    sharey: bool | Literal["row"] = False,
) -> tuple[Figure, dict[tuple, Axes]]:
    """A figure of panels, a column per case, and the legend of ``series``; returns each line's
    panel. ``keys`` are the lines' (run, case, workload, tiered, *more): ``more`` (a consumer
    kind) makes rows of panels, and so do runs when two of them have the same case x workload x
    tiered (their lines would look alike in one panel)."""
    keys = list(keys)
    runs: dict[tuple, set[str]] = {}
    for run, *line in keys:
        runs.setdefault((*line,), set()).add(run)
    apart = any(len(found) > 1 for found in runs.values())

    def panel(key: tuple) -> tuple[tuple, str]:
        """(row, column): the row names the run (if apart) and ``more``."""
        run, case, _, _, *more = key
        return ((run, *more) if apart else (*more,)), case

    where = {key: panel(key) for key in keys}
    rows = sorted({row for row, _ in where.values()})
    columns = sorted({column for _, column in where.values()})
    size = (FIGURE_SIZE[0], FIGURE_SIZE[1] * len(rows))
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    grid = figure.subplots(len(rows), len(columns), squeeze=False, sharex=sharex, sharey=sharey)
    used = set(where.values())
    for i, row in enumerate(rows):
        for j, column in enumerate(columns):
            if (row, column) not in used:
                grid[i][j].set_axis_off()
                continue
            grid[i][j].set_title(column + (f" ({', '.join(row)})" if row else ""), fontsize=10)
            grid[i][j].grid(True, alpha=0.3)
    drawn = sorted({(key[2], bool(key[3])) for key in keys}, key=lambda w: (w[0], not w[1]))
    handles = [Line2D([], [], **series.line({"workload": w, "tiered": t})) for w, t in drawn]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8)
    return figure, {
        key: grid[rows.index(row)][columns.index(column)] for key, (row, column) in where.items()
    }


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=DPI)
    return path


def _with_gaps(
    windows: list[dict[str, Any]], column: str, window_seconds: float
) -> tuple[list[float], list[float]]:
    """The series of ``column`` with a NaN where windows are missing, so the line breaks there
    instead of bridging a time without acknowledgements."""
    seconds: list[float] = []
    values: list[float] = []
    for window in windows:
        if seconds and window["second"] - seconds[-1] > window_seconds * 1.5:
            seconds.append(seconds[-1] + window_seconds)
            values.append(math.nan)
        seconds.append(window["second"])
        values.append(window[column])
    return seconds, values


# the percentiles over time of one group: its series' colour and style, the higher the wider
PERCENTILE_LINES = {
    "p50_ms": {"linewidth": 1.0, "alpha": 0.7},
    "p95_ms": {"linewidth": 1.4, "alpha": 0.8},
    "p99_ms": {"linewidth": 2.2, "alpha": 1.0},
}


def latency_over_time(data: ReportData, series: SeriesStyle, out: Path) -> list[Path]:
    """One plot per group: p50, p95 and p99 of each window, the group's events marked."""
    paths = []
    events = _groups(data.events)
    for key, windows in _groups(data.windows).items():
        figure, axes = _figure()
        # each window's point sits at its middle; a window without acknowledgements has none
        middle = data.window_seconds / 2
        line = series.line(windows[0])
        for column, width in PERCENTILE_LINES.items():
            seconds, values = thin(*_with_gaps(windows, column, data.window_seconds))
            xs = [s + middle for s in seconds]
            axes.plot(xs, values, **(line | width | {"label": column[:-3]}))
        first_ack = data.starts[key]
        for event in events.get(key, []):
            at = (event["at"] - first_ack).total_seconds()
            length = (event["duration_ms"] or 0) / 1000
            if length:
                axes.axvspan(at, at + length, color="tab:red", alpha=0.15)
            axes.axvline(at, color="tab:red", linewidth=1)
            axes.annotate(
                f"{event['kind']} ({event['target']})",
                (at, 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                fontsize=8,
            )
        axes.set_yscale("log")
        axes.set_xlabel("seconds since the first acknowledgement")
        axes.set_ylabel(f"produce latency per {data.window_seconds:g} s window (ms)")
        axes.set_title(f"{_group_name(dict(zip(GROUP, key, strict=True)), 2)}: latency over time")
        axes.legend(loc="upper right")
        axes.grid(True, alpha=0.3)
        paths.append(_save(figure, out / f"latency_over_time_{_plot_label(data, key)}.png"))
    return paths


def throughput_over_time(data: ReportData, series: SeriesStyle) -> Figure | None:
    """Records acknowledged per second, a panel per case."""
    if not data.throughput:
        return None
    lines = _groups(data.throughput)
    figure, panels = _panels(series, lines, sharex=True, sharey=True)
    for key, seconds in lines.items():
        row = dict(zip(GROUP, key, strict=True))
        xs, ys = thin([r["second"] for r in seconds], [r["records"] for r in seconds])
        panels[key].plot(xs, ys, **series.line(row))
    figure.supxlabel("seconds since the first acknowledgement")
    figure.supylabel("records acknowledged per second")
    figure.suptitle("throughput over time")
    return figure


def latency_cdf(data: ReportData, series: SeriesStyle) -> Figure | None:
    """The latency distribution of each group, a panel per case."""
    if not data.cdf:
        return None
    lines = {group_key(row): row for row in data.cdf}
    figure, panels = _panels(series, lines, sharex=True, sharey=True)
    for key, row in lines.items():
        values = [v for v, _ in row["points"]]
        fractions = [f for _, f in row["points"]]
        panels[key].plot(values, fractions, **series.line(row))
        panels[key].set_xscale("log")
    figure.supxlabel("produce latency (ms)")
    figure.supylabel("fraction of acknowledgements")
    figure.suptitle("latency CDF")
    return figure


def consumer_lag_over_time(data: ReportData, series: SeriesStyle) -> Figure | None:
    """The largest lag of each consumer kind per window: a panel per case and kind (a row of
    panels per kind), a line per workload and tier."""
    if not data.lag_windows:
        return None
    lines: dict[tuple, list[dict[str, Any]]] = {}
    for row in data.lag_windows:
        lines.setdefault((*group_key(row), row["kind"]), []).append(row)
    figure, panels = _panels(series, lines, sharex=True, sharey="row")
    for key, rows in lines.items():
        xs, ys = thin([r["second"] for r in rows], [r["max_lag"] for r in rows])
        panels[key].plot(xs, ys, **series.line(rows[0]))
    figure.supxlabel("seconds since the first acknowledgement")
    figure.supylabel(f"largest consumer lag per {data.window_seconds:g} s window (records)")
    figure.suptitle("consumer lag over time")
    return figure


# The plots that draw several case x workload x tiered groups, a panel per case, by file name.
SERIES_PLOTS = {
    "throughput_over_time": throughput_over_time,
    "latency_cdf": latency_cdf,
    "consumer_lag_over_time": consumer_lag_over_time,
}


def draw_all(data: ReportData, out: Path) -> list[Path]:
    """Every plot, each workload in one colour and each tier in one line style throughout."""
    series = SeriesStyle.of(data)
    paths = latency_over_time(data, series, out)
    for name, plot in SERIES_PLOTS.items():
        figure = plot(data, series)
        if figure is not None:
            paths.append(_save(figure, out / f"{name}.png"))
    return paths
