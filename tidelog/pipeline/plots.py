"""The report's PNG plots (matplotlib, no display): every figure is FIGURE_SIZE inches at DPI,
so every image is PIXELS wide and high.

Plots draw the report's per-window and per-second rows, never raw rows; a line longer than
MAX_POINTS points is thinned to every k-th point for drawing (THINNED says so on the page; the
CSV tables keep every row, and every figure in the tables is computed from all of them)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tidelog.pipeline.report import GROUP, ReportData, group_key

FIGURE_SIZE = (10, 4)
DPI = 100
PIXELS = (FIGURE_SIZE[0] * DPI, FIGURE_SIZE[1] * DPI)
MAX_POINTS = 2000
THINNED = (
    f"Plots draw at most {MAX_POINTS} points per line (longer series: every k-th window); "
    "the tables and CSV files hold every window."
)


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


def latency_over_time(data: ReportData, out: Path) -> list[Path]:
    """One plot per group: p50, p95 and p99 of each window, the group's events marked."""
    paths = []
    events = _groups(data.events)
    for key, windows in _groups(data.windows).items():
        figure, axes = _figure()
        # each window's point sits at its middle; a window without acknowledgements has none
        middle = data.window_seconds / 2
        for column, style in [("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", "-")]:
            seconds, values = thin(*_with_gaps(windows, column, data.window_seconds))
            axes.plot([s + middle for s in seconds], values, style, label=column[:-3])
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


def throughput_over_time(data: ReportData, out: Path) -> Path | None:
    if not data.throughput:
        return None
    figure, axes = _figure()
    for key, seconds in _groups(data.throughput).items():
        xs, ys = thin([r["second"] for r in seconds], [r["records"] for r in seconds])
        axes.plot(xs, ys, label=_group_name(dict(zip(GROUP, key, strict=True)), 2))
    axes.set_xlabel("seconds since the first acknowledgement")
    axes.set_ylabel("records acknowledged per second")
    axes.set_title("throughput over time")
    axes.legend(loc="upper right")
    axes.grid(True, alpha=0.3)
    return _save(figure, out / "throughput_over_time.png")


def latency_cdf(data: ReportData, out: Path) -> Path | None:
    """The latency distribution of each group (tiered storage on and off drawn apart)."""
    if not data.cdf:
        return None
    figure, axes = _figure()
    for row in data.cdf:
        values = [v for v, _ in row["points"]]
        fractions = [f for _, f in row["points"]]
        style = "-" if row["tiered"] else "--"
        axes.plot(values, fractions, style, label=_group_name(row, len(data.labels)))
    axes.set_xscale("log")
    axes.set_xlabel("produce latency (ms)")
    axes.set_ylabel("fraction of acknowledgements")
    axes.set_title("latency CDF (solid: tiered storage on, dashed: off)")
    axes.legend(loc="lower right", fontsize=8)
    axes.grid(True, alpha=0.3)
    return _save(figure, out / "latency_cdf.png")


def consumer_lag_over_time(data: ReportData, out: Path) -> Path | None:
    """The largest lag of each consumer kind per window, a line per group and kind."""
    if not data.lag_windows:
        return None
    figure, axes = _figure()
    lines: dict[tuple, list[dict[str, Any]]] = {}
    for row in data.lag_windows:
        lines.setdefault((*group_key(row), row["kind"]), []).append(row)
    for (*key, kind), rows in lines.items():
        xs, ys = thin([r["second"] for r in rows], [r["max_lag"] for r in rows])
        name = _group_name(dict(zip(GROUP, key, strict=True)), len(data.labels))
        axes.plot(xs, ys, label=f"{kind} ({name})")
    axes.set_xlabel("seconds since the first acknowledgement")
    axes.set_ylabel(f"largest consumer lag per {data.window_seconds:g} s window (records)")
    axes.set_title("consumer lag over time")
    axes.legend(loc="upper right", fontsize=8)
    axes.grid(True, alpha=0.3)
    return _save(figure, out / "consumer_lag_over_time.png")


def draw_all(data: ReportData, out: Path) -> list[Path]:
    paths = latency_over_time(data, out)
    others = (throughput_over_time(data, out), latency_cdf(data, out))
    paths += [p for p in (*others, consumer_lag_over_time(data, out)) if p]
    return paths
