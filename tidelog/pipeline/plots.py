"""The report's PNG plots (matplotlib, no display), sized for a laptop's screen: every figure is
FIGURE_SIZE[0] inches wide at DPI (PIXELS[0] pixels), FIGURE_SIZE[1] high for one row of panels,
PANEL_HEIGHT more per further row, never above MAX_HEIGHT. Axes are in plain units and plain
numbers (ms, records/s; 40, not 4 x 10^1).

Every plot draws a case x workload x tiered group in its workload's colour and its tier's line
style, the same in every plot of a report (SeriesStyle); a plot of several groups has a panel
per case, and latency over time a panel per case x workload (small multiples) with both tiers
in it and the events' labels placed so that none overlaps another (place_labels).

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
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from tidelog.perf.cases.events import CASES
from tidelog.perf.cases.profiles import WORKLOADS
from tidelog.pipeline.report import GROUP, ReportData, group_key

FIGURE_SIZE = (10, 3.6)
PANEL_HEIGHT = 2.2  # inches per row of small multiples
MAX_HEIGHT = 8.5  # inches: a figure fits a laptop's screen
DPI = 100
PIXELS = (FIGURE_SIZE[0] * DPI, int(FIGURE_SIZE[1] * DPI))
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


def part_order(key: tuple) -> tuple:
    """How parts (run, case, workload, tiered, ...) sort on a page: the design's cases and
    workloads in the design's order (normal, consumers, rebuild; acks=all, acks=1), others after
    them by name, tiered before without, then the run."""
    run, case, workload, tiered, *more = key
    cases, workloads = list(CASES), list(WORKLOADS)
    return (
        (cases.index(case) if case in cases else len(cases), case),
        (workloads.index(workload) if workload in workloads else len(workloads), workload),
        not tiered,
        run,
        *more,
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


def _groups(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The rows of each group, in order."""
    found: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(group_key(row), []).append(row)
    return found


def height(rows: int) -> float:
    """A figure's height in inches for ``rows`` rows of panels: FIGURE_SIZE's for one, at
    most MAX_HEIGHT."""
    return min(max(FIGURE_SIZE[1], PANEL_HEIGHT * rows + 1.2), MAX_HEIGHT)


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
    columns = sorted(
        {column for _, column in where.values()}, key=lambda case: part_order(("", case, "", True))
    )
    size = (FIGURE_SIZE[0], height(len(rows)))
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


# the percentiles over time drawn in a part's colour and style, the higher the wider
PERCENTILE_LINES: dict[str, dict[str, float]] = {
    "p50_ms": {"linewidth": 0.8, "alpha": 0.6},
    "p99_ms": {"linewidth": 1.8, "alpha": 1.0},
}
EVENT_COLOUR = "tab:red"
LABEL_POINTS = 7  # the event labels' font size
LABEL_GAP = 2.0  # points between two labels' boxes


def _small_multiples(
    keys: Iterable[tuple], runs_apart: bool
) -> tuple[list[tuple], list[tuple], dict[tuple, tuple[int, int]]]:
    """Where each (run, case, workload, tiered) goes in a grid of panels, one panel per case x
    workload (and run, when runs are apart): rows of cases and columns of workloads when every
    case ran every workload, else the panels two to a row. Returns (rows, columns, where)."""
    keys = list(keys)

    def order(panel: tuple) -> tuple:
        return part_order((panel[0] if runs_apart else "", panel[-2], panel[-1], True))

    panels = sorted({((key[0],) if runs_apart else ()) + (key[1], key[2]) for key in keys},
                    key=order)  # fmt: skip
    rows = list(dict.fromkeys(panel[:-1] for panel in panels))
    columns = list(dict.fromkeys((panel[-1],) for panel in sorted(
        panels, key=lambda p: part_order(("", "", p[-1], True)))))  # fmt: skip
    if len(rows) * len(columns) == len(panels):
        where = {
            key: (rows.index(panel[:-1]), columns.index(panel[-1:]))
            for key in keys
            for panel in [((key[0],) if runs_apart else ()) + (key[1], key[2])]
        }
        return rows, columns, where
    width = min(2, len(panels))
    places = {panel: divmod(n, width) for n, panel in enumerate(panels)}
    where = {key: places[((key[0],) if runs_apart else ()) + (key[1], key[2])] for key in keys}
    return [(n,) for n in range(-(-len(panels) // width))], [(n,) for n in range(width)], where


class PlainLogLocator(LogLocator):
    """Ticks at 1, 2 and 5 x 10^n over up to two decades, at 1 x 10^n over more (so that tick
    labels of a narrow panel do not run into each other)."""

    def tick_values(self, vmin: float, vmax: float):
        low, high = sorted((vmin, vmax))
        wide = low > 0 and math.log10(high / low) > 2.2
        self.set_params(subs=(1.0,) if wide else (1.0, 2.0, 5.0))
        return super().tick_values(vmin, vmax)


def plain_log_axis(axis) -> None:
    """A log axis with ticks at 1, 2, 5 x 10^n (PlainLogLocator) written as plain numbers
    (40, not 4 x 10^1)."""
    axis.set_major_locator(PlainLogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def plain_axis(axis) -> None:
    """A linear axis whose ticks are whole numbers with thousands separators, no offset and no
    scientific notation (12,000 rather than 1.2 x 10^4)."""
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.6g}"))


def place_labels(figure: Figure, axes: Axes, labels: list[tuple[float, str]]) -> list[Text]:
    """Writes each (x, text) at the top of ``axes``, at x, in the first of a stack of lines
    where it overlaps no label placed before it (boxes measured as drawn). Call once the
    figure's layout is final: the labels' places are in the figure's pixels."""
    renderer = (
        FigureCanvasAgg(figure).get_renderer()
        if not isinstance(figure.canvas, FigureCanvasAgg)
        else figure.canvas.get_renderer()
    )
    middle = sum(axes.get_xlim()) / 2
    placed: list[Any] = []
    texts: list[Text] = []
    for x, text in sorted(labels):
        line = 0
        while True:
            drawn = axes.annotate(
                text,
                (x, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2 if x <= middle else -2, -2 - line * (LABEL_POINTS + LABEL_GAP + 1)),
                textcoords="offset points",
                ha="left" if x <= middle else "right",
                va="top",
                fontsize=LABEL_POINTS,
                color=EVENT_COLOUR,
                gid="event-label",
            )
            box = drawn.get_window_extent(renderer).expanded(1.0, 1.0)
            if not any(box.overlaps(other) for other in placed):
                placed.append(box)
                texts.append(drawn)
                break
            drawn.remove()
            line += 1
    return texts


def latency_over_time(data: ReportData, series: SeriesStyle) -> list[tuple[str, Figure]]:
    """p50 and p99 of each window, one panel per case x workload with its parts with and
    without the tier in it (their colour and line style as in every plot), their events
    marked in red (a solid line with the tier, dashed without; a shaded span while one
    lasted) and labelled without overlap. One figure, or one per run when two runs have the
    same case x workload x tiered (their lines would look alike in one panel)."""
    if not data.windows:
        return []
    lines = _groups(data.windows)
    runs: dict[tuple, set[str]] = {}
    for run, *rest in lines:
        runs.setdefault(tuple(rest), set()).add(run)
    apart = any(len(found) > 1 for found in runs.values())
    figures = []
    for run in sorted({key[0] for key in lines}) if apart else [None]:
        mine = {key: rows for key, rows in lines.items() if run is None or key[0] == run}
        figure = _latency_panels(data, series, mine)
        name = "latency_over_time" + (f"_{file_label(run)}" if run is not None else "")
        figures.append((name, figure))
    return figures


def _latency_panels(
    data: ReportData, series: SeriesStyle, lines: dict[tuple, list[dict[str, Any]]]
) -> Figure:
    rows, columns, where = _small_multiples(lines, runs_apart=False)
    size = (FIGURE_SIZE[0], height(len(rows)))
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)  # drawn by Agg: the labels are measured as they will be drawn
    grid = figure.subplots(len(rows), len(columns), squeeze=False, sharex=True)
    used = set(where.values())
    for i, j in ((i, j) for i in range(len(rows)) for j in range(len(columns))):
        if (i, j) not in used:
            grid[i][j].set_axis_off()
    events = _groups(data.events)
    middle = data.window_seconds / 2  # each window's point sits at its middle
    # per panel: the events' moments (to a tenth of a second), kinds and the tiers they were in
    moments: dict[tuple[int, int], dict[float, dict[str, set[bool]]]] = {}
    for key, windows in sorted(lines.items()):
        axes = grid[where[key][0]][where[key][1]]
        axes.set_title(f"{key[1]}, {key[2]}", fontsize=9)
        line = series.line(windows[0])
        for column, width in PERCENTILE_LINES.items():
            seconds, values = thin(*_with_gaps(windows, column, data.window_seconds))
            axes.plot([s + middle for s in seconds], values, **(line | width))
        tier = TIER_STYLES[bool(key[3])]
        for event in events.get(key, []):
            at = (event["at"] - data.starts[key]).total_seconds()
            length = (event["duration_ms"] or 0) / 1000
            if length:
                axes.axvspan(at, at + length, color=EVENT_COLOUR, alpha=0.08)
            axes.axvline(at, color=EVENT_COLOUR, linewidth=0.9, linestyle=tier)
            moments.setdefault(where[key], {}).setdefault(round(at, 1), {}).setdefault(
                event["kind"], set()
            ).add(bool(key[3]))
        axes.set_yscale("log")
        axes.grid(True, alpha=0.3)
    for i, j in used:
        grid[i][j].set_ylim(top=grid[i][j].get_ylim()[1] * 4)  # room for the event labels
        plain_log_axis(grid[i][j].yaxis)
    drawn = sorted({(key[2], bool(key[3])) for key in lines}, key=lambda w: (w[0], not w[1]))
    handles = [Line2D([], [], **series.line({"workload": w, "tiered": t})) for w, t in drawn]
    handles += [
        Line2D(
            [],
            [],
            color="black",
            label=column[:-3],
            linewidth=width["linewidth"],
            alpha=width["alpha"],
        )
        for column, width in PERCENTILE_LINES.items()
    ]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8)
    figure.supxlabel("seconds since the part's first acknowledgement", fontsize=9)
    figure.supylabel(f"produce latency per {data.window_seconds:g} s window (ms)", fontsize=9)
    figure.suptitle("latency over time (events in red)", fontsize=10)
    figure.canvas.draw()  # the layout, final before the labels are placed in its pixels
    figure.set_layout_engine("none")
    for (i, j), found in moments.items():
        tiers = {bool(key[3]) for key in lines if where[key] == (i, j)}
        labels = []
        for at, kinds in found.items():
            names = [
                kind + ("" if seen == tiers else f" ({TIER_NAMES[next(iter(seen))]})")
                for kind, seen in kinds.items()
            ]
            labels.append((at, ", ".join(names)))
        place_labels(figure, grid[i][j], labels)
    return figure


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
        plain_axis(panels[key].yaxis)
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
        plain_log_axis(panels[key].xaxis)
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
        plain_axis(panels[key].yaxis)
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
    paths = [_save(figure, out / f"{name}.png") for name, figure in latency_over_time(data, series)]
    for name, plot in SERIES_PLOTS.items():
        figure = plot(data, series)
        if figure is not None:
            paths.append(_save(figure, out / f"{name}.png"))
    return paths
