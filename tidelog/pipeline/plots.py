"""The report's PNG plots (matplotlib, no display): every figure is FIGURE_SIZE inches at DPI,
so every image is PIXELS wide and high."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tidelog.pipeline.report import ReportData

FIGURE_SIZE = (10, 4)
DPI = 100
PIXELS = (FIGURE_SIZE[0] * DPI, FIGURE_SIZE[1] * DPI)


def file_label(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label)


def _group_name(row: dict[str, Any], runs: int) -> str:
    tiered = "tiered" if row["tiered"] else "no tiered"
    name = f"{row['case']}, {row['workload']}, {tiered}"
    return f"{row['run']}: {name}" if runs > 1 else name


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
    """One plot per run: p50, p95 and p99 of each window, the run's events marked."""
    paths = []
    for run in data.runs:
        windows = [w for w in data.windows if w["run"] == run.label]
        if not windows:
            continue
        figure, axes = _figure()
        # each window's point sits at its middle; a window without acknowledgements has none
        middle = data.window_seconds / 2
        for column, style in [("p50_ms", ".-"), ("p95_ms", ".--"), ("p99_ms", ".-")]:
            seconds, values = _with_gaps(windows, column, data.window_seconds)
            axes.plot([s + middle for s in seconds], values, style, label=column[:-3])
        first_ack = data.run_starts[run.label]
        for event in (e for e in data.events if e["run"] == run.label):
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
        axes.set_title(f"{run.label}: latency percentiles over time")
        axes.legend(loc="upper right")
        axes.grid(True, alpha=0.3)
        paths.append(_save(figure, out / f"latency_over_time_{file_label(run.label)}.png"))
    return paths


def throughput_over_time(data: ReportData, out: Path) -> Path | None:
    if not data.throughput:
        return None
    figure, axes = _figure()
    for run in data.runs:
        seconds = [r for r in data.throughput if r["run"] == run.label]
        axes.plot([r["second"] for r in seconds], [r["records"] for r in seconds], label=run.label)
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
        axes.plot(values, fractions, style, label=_group_name(row, len(data.runs)))
    axes.set_xscale("log")
    axes.set_xlabel("produce latency (ms)")
    axes.set_ylabel("fraction of acknowledgements")
    axes.set_title("latency CDF (solid: tiered storage on, dashed: off)")
    axes.legend(loc="lower right", fontsize=8)
    axes.grid(True, alpha=0.3)
    return _save(figure, out / "latency_cdf.png")


def draw_all(data: ReportData, out: Path) -> list[Path]:
    paths = latency_over_time(data, out)
    paths += [p for p in (throughput_over_time(data, out), latency_cdf(data, out)) if p]
    return paths
