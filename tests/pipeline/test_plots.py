"""The report's plots: only the drawing is thinned, never the figures; every plot that draws the
case x workload x tiered series draws a workload in one colour and a tier in one line style,
a panel per case, and its legend says so."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from tidelog import rundata
from tidelog.pipeline.plots import MAX_POINTS, SeriesStyle, draw_all, latency_over_time, thin
from tidelog.pipeline.report import GROUP, ReportData, Run


def test_a_short_series_is_drawn_whole_and_a_long_one_thinned_to_every_kth_point():
    xs = [float(n) for n in range(MAX_POINTS)]
    assert thin(xs, xs) == (xs, xs)

    long = [float(n) for n in range(5 * MAX_POINTS + 3)]
    thin_xs, thin_ys = thin(long, [2 * x for x in long])

    assert len(thin_xs) <= MAX_POINTS + 1
    assert thin_xs[0] == 0 and thin_xs[-1] == long[-1]  # the ends are kept
    assert thin_xs[1] - thin_xs[0] == 6  # every 6th point of 10,003
    assert thin_ys == [2 * x for x in thin_xs]


CASES = ["consumers", "normal", "rebuild"]
WORKLOADS = ["acks=all", "acks=1"]
KINDS = ["in-sync", "catching-up"]
SERIES_PLOTS = ["latency_cdf", "throughput_over_time", "consumer_lag_over_time"]
OVER_TIME = "latency_over_time"  # one figure, or one per run when runs are apart


def series_report(labels: list[str]) -> tuple[ReportData, dict[float, tuple]]:
    """perf tiered-storage's 12 groups (3 cases x 2 workloads x tiered on/off) in each run of
    ``labels`` (a label per group when there are 12 labels, as with ``runs/ts/*/``), and what
    identifies each drawn line: its first value, which no other line starts with."""
    groups = [(c, w, t) for c in CASES for w in WORKLOADS for t in (True, False)]
    if len(labels) == len(groups):
        keys = [(label, *group) for label, group in zip(labels, groups, strict=True)]
    else:
        keys = [(label, *group) for label in labels for group in groups]
    runs = [
        Run(run, Path(run), rundata.RunMetadata("perf-tiered-storage", case, workload, tiered))
        for run, case, workload, tiered in keys
    ]
    data = ReportData(runs, window_seconds=1.0)
    lines: dict[float, tuple] = {}

    def mark(key: tuple) -> float:
        """A value no other line starts with, standing for ``key``'s group."""
        lines[float(len(lines) + 1)] = key
        return float(len(lines))

    for key in keys:
        group = dict(zip(GROUP, key, strict=True))
        data.starts[key] = datetime(2026, 5, 1, tzinfo=UTC)
        data.cdf.append(group | {"points": [(mark(key), 0.5), (1000.0, 1.0)]})
        records = mark(key)
        data.throughput += [group | {"second": s, "records": records} for s in range(5)]
        percentiles = {"p50_ms": mark(key), "p95_ms": mark(key), "p99_ms": mark(key)}
        data.windows += [group | {"second": s} | percentiles for s in range(5)]
        for kind in KINDS:
            lag = mark(key)
            data.lag_windows += [
                group | {"kind": kind, "second": s, "max_lag": lag} for s in (0, 1)
            ]
    return data, lines


@pytest.mark.parametrize(
    "labels",
    [["ts"], [f"part-{n}" for n in range(12)], ["before", "after"]],
    ids=["one run of 12 parts", "12 runs", "two runs of 12 parts"],
)
def test_each_workload_has_one_colour_and_each_tier_one_line_style_in_every_plot(
    labels, tmp_path, monkeypatch
):
    data, lines = series_report(labels)
    drawn: dict[str, Figure] = {}

    def keep(figure, path, **options):
        drawn[Path(path).stem] = figure  # the artists are what is checked: no need to draw

    monkeypatch.setattr(Figure, "savefig", keep)
    draw_all(data, tmp_path)

    over_time = [name for name in drawn if name.startswith(OVER_TIME)]
    apart = len(labels) == 2  # two runs of the same 12 parts: a figure each
    assert set(SERIES_PLOTS) <= set(drawn) and len(over_time) == (2 if apart else 1)
    colours: dict[str, set[str]] = {}
    styles: dict[bool, set[str]] = {}
    for name in SERIES_PLOTS + over_time:
        for axes in drawn[name].axes:
            looks: dict[tuple[str, str], list[tuple]] = {}
            for line in axes.get_lines():
                first = line.get_xdata()[0] if name == "latency_cdf" else line.get_ydata()[0]
                looks.setdefault((line.get_color(), line.get_linestyle()), []).append(
                    lines[float(first)]
                )
            if name in over_time:  # a part's p50 and p99: alike but for their width
                assert all(len(keys) == 2 and len(set(keys)) == 1 for keys in looks.values())
                looks = {look: keys[:1] for look, keys in looks.items()}
                # a panel per case x workload, its parts with and without the tier
                assert len({key[1:3] for keys in looks.values() for key in keys}) <= 1
            # a panel per case, and no two lines in it that look alike
            assert len({key[1] for keys in looks.values() for key in keys}) <= 1, (name, looks)
            assert all(len(keys) == 1 for keys in looks.values()), (name, looks)
            for (colour, style), [(_, _, workload, tiered)] in looks.items():
                colours.setdefault(workload, set()).add(colour)
                styles.setdefault(tiered, set()).add(style)
    assert set(colours) == set(WORKLOADS) and set(styles) == {True, False}
    assert all(len(found) == 1 for found in [*colours.values(), *styles.values()]), (
        colours,
        styles,
    )
    assert len(set.union(*colours.values())) == len(WORKLOADS)
    assert len(set.union(*styles.values())) == 2

    # each plot's legend: an entry per workload x tier, drawn as that workload's and tier's lines
    for name in SERIES_PLOTS:
        (legend,) = drawn[name].legends
        entries = {
            text.get_text(): (handle.get_color(), handle.get_linestyle())
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        }
        assert entries == {
            f"{workload}, {'tiered' if tiered else 'no tiered'}": (
                *colours[workload],
                *styles[tiered],
            )
            for workload in WORKLOADS
            for tiered in (True, False)
        }, name


def test_event_labels_never_overlap_and_axes_are_in_plain_numbers(tmp_path):
    """The rebuild case's three events (a broker killed, started and rebuilt, the last two at
    the same moment) in both tiers' parts, in one panel: each label is readable on its own."""
    data, _ = series_report(["ts"])
    for key in data.starts:
        if key[1] != "rebuild":
            continue
        group = dict(zip(GROUP, key, strict=True))
        start = data.starts[key]
        later = 2.0 if key[3] else 2.05  # the tiers' events a hair apart
        data.events += [
            group | {"at": start - timedelta(seconds=1), "kind": "kill_and_wipe",
                     "target": "broker 3", "duration_ms": 900.0, "detail": ""},
            group | {"at": start + timedelta(seconds=later), "kind": "broker_start",
                     "target": "broker 3", "duration_ms": None, "detail": ""},
            group | {"at": start + timedelta(seconds=later), "kind": "rebuild",
                     "target": "broker 3", "duration_ms": 3000.0 if key[3] else 9000.0,
                     "detail": ""},
        ]  # fmt: skip
    (name, figure), *_ = latency_over_time(data, SeriesStyle.of(data))
    assert name == "latency_over_time"
    figure.savefig(tmp_path / "drawn.png")
    renderer = figure.canvas.get_renderer()
    for axes in figure.axes:
        labels = [t for t in axes.texts if t.get_gid() == "event-label"]
        boxes = [label.get_window_extent(renderer) for label in labels]
        for n, box in enumerate(boxes):
            for other in boxes[n + 1 :]:
                assert not box.overlaps(other), [t.get_text() for t in labels]
        if axes.get_title().startswith("rebuild"):
            assert {t.get_text() for t in labels} >= {"kill_and_wipe", "broker_start, rebuild"}
        for tick in axes.get_yticklabels():
            assert re.fullmatch(r"[\d.,]*", tick.get_text()), tick.get_text()
