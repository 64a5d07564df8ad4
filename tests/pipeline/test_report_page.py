"""``report.html`` as a reader sees it, rendered by a real browser (Debian's headless chromium at
1400 x 900): the summary of the design's findings is on the first screen, the design's table has
``table.txt``'s columns and figures, no comparison table is mostly "-", the page has a bounded
height and nothing wider than the window, and every figure loads at a laptop's size.

The runs are a fixed set of run directories laid out as ``tidelog perf tiered-storage`` writes
them (3 cases x 2 workloads x tiered on and off, each with acknowledgements, consumer samples and
the case's events, seeded), and ``table.txt`` is written by the command's own table code from
them; Spark computes the report once for the module. Screenshots of the first screen and of the
whole page go to /tmp/report-shots/."""

from __future__ import annotations

import html
import json
import random
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tidelog import rundata
from tidelog.perf.cases.events import CASES
from tidelog.perf.cases.profiles import PROFILES, WORKLOADS
from tidelog.perf.cases.runner import KIND, Result, Settings, run_dir_name, window_figures
from tidelog.perf.cases.table import HEADER, write_table
from tidelog.pipeline.render import write_report
from tidelog.pipeline.report import compute, load_runs

WINDOW = (1400, 900)
PAGE_HEIGHT_BOUND = 9000  # px at 1400 wide; the page before issue 29 was about 16,000
SHOTS = Path("/tmp/report-shots")
START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC).timestamp()
SECONDS = 12.0  # of traffic per case
RATE = 150  # acknowledgements per second
# case -> tiered -> the median produce latency (ms) and, for a rebuild, its duration (s)
LATENCY = {
    "normal": {True: (4.0, None), False: (3.6, None)},
    "consumers": {True: (5.0, None), False: (8.0, None)},
    "rebuild": {True: (5.0, 2.0), False: (9.0, 7.5)},
}


def write_part(out: Path, case: str, workload: str, tiered: bool, began: float) -> Result:
    """One case x workload x tiered as the runner leaves it; returns the figures its table
    prints (computed by the runner's own window_figures)."""
    chance = random.Random(f"{case}{workload}{tiered}")
    run_dir = out / run_dir_name(case, workload, tiered)
    median, rebuild_s = LATENCY[case][tiered]
    median *= 1.0 if workload == "acks=all" else 0.4
    event_at = began + CASES[case].event_at * SECONDS
    count = int(SECONDS * RATE)
    times = [began + n / RATE for n in range(count)]
    latencies = []
    for at in times:
        rebuilding = rebuild_s is not None and event_at <= at < event_at + rebuild_s
        latencies.append(chance.lognormvariate(0, 0.5) * median * (4 if rebuilding else 1))
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": [rundata.epoch_microseconds(at) for at in times],
            "latency_ms": latencies,
            "partition": [n % 3 for n in range(count)],
            "offset": [n // 3 for n in range(count)],
            "bytes": [1024] * count,
            "message": [None] * count,
        },
    )
    consumers = ["in-sync-1", "in-sync-2"]
    if case == "consumers":
        consumers += ["catching-up-1", "catching-up-2", "catching-up-3"]
    samples = [
        (began + n * 0.5, name, partition)
        for n in range(int(SECONDS * 2))
        for name in consumers
        for partition in range(3)
    ]
    rundata.write_table(
        run_dir,
        "consumer",
        {
            "sampled_at": [rundata.epoch_microseconds(at) for at, _, _ in samples],
            "consumer": [name for _, name, _ in samples],
            "partition": [partition for _, _, partition in samples],
            "offset": [1000] * len(samples),
            "lag": [chance.randrange(50 if "in-sync" in n else 20_000) for _, n, _ in samples],
        },
    )
    events = []
    if case == "consumers":
        events.append(rundata.Event(event_at, "catch_up_consumers", "3 consumers", None, ""))
    if case == "rebuild":
        assert rebuild_s is not None
        events += [
            rundata.Event(began - 4, "kill_and_wipe", "broker 3", 3500.0, "killed, wiped"),
            rundata.Event(event_at, "broker_start", "broker 3", None, "empty"),
            rundata.Event(event_at, "rebuild", "broker 3", rebuild_s * 1000, "back in ISRs"),
        ]
    if events:
        rundata.write_events(run_dir, events)
    p99, p95 = window_figures(run_dir, CASES[case].figure)
    result = Result(
        case, workload, tiered, run_dir, p99, p95, rebuild_s, 1.0, 0.98, count, 0, 3.9, 0.0, 1.5
    )
    rundata.write_metadata(
        run_dir,
        rundata.RunMetadata(
            kind=KIND,
            case=case,
            workload=workload,
            tiered=tiered,
            started_at=datetime.fromtimestamp(began - 5, UTC).isoformat(),
            ended_at=datetime.fromtimestamp(began + SECONDS + 1, UTC).isoformat(),
            settings={
                "command": "tidelog perf tiered-storage --profile small --out runs/ts",
                "seed": 0,
                "case": CASES[case].title,
                "window_seconds": 1.0,
                "figure": CASES[case].figure,
                "scaling": {},
            },
            profile={"name": "small", "brokers": 3},
        ),
    )
    return result


@pytest.fixture(scope="module")
def report(tmp_path_factory, spark) -> tuple[Path, Path]:
    """(the run directories' parent, with table.txt; the report written from them as
    ``tidelog report runs/ts/*/`` does: each part a run of its own)."""
    out = tmp_path_factory.mktemp("runs") / "ts"
    results = []
    began = START
    for tiered in (False, True):
        for case in CASES:
            for workload in WORKLOADS:
                results.append(write_part(out, case, workload, tiered, began))
                began += SECONDS + 30
    write_table(Settings(PROFILES["small"], out, command="tidelog perf tiered-storage"), results)
    report_dir = tmp_path_factory.mktemp("report")
    data = compute(spark, load_runs(sorted(out.glob("*/"))), window_seconds=1.0)
    write_report(data, report_dir)
    return out, report_dir


PROBE = """<script>
window.addEventListener("load", () => {
  const text = (cell) => cell.textContent.trim();
  const found = {
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
    headings: [...document.querySelectorAll("h1, h2, h3")].map((h) => ({
      text: text(h), bottom: h.getBoundingClientRect().bottom})),
    tables: [...document.querySelectorAll("table")].map((table) => ({
      id: table.id, compare: table.classList.contains("compare"),
      top: table.getBoundingClientRect().top, bottom: table.getBoundingClientRect().bottom,
      right: table.getBoundingClientRect().right,
      columns: [...table.querySelectorAll("thead th")].map(text),
      rows: [...table.querySelectorAll("tbody tr")].map((row) =>
        [...row.querySelectorAll("td, th")].map(text))})),
    images: [...document.images].map((image) => ({
      alt: image.alt, complete: image.complete, width: image.naturalWidth,
      height: image.naturalHeight, shown: image.getBoundingClientRect().width})),
  };
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify(found);
  document.body.appendChild(probe);
});
</script>"""


def chromium(*options: str, url: str) -> str:
    found = shutil.which("chromium")
    assert found, "no chromium: make install installs Debian's"
    done = subprocess.run(
        [found, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=10000",
         *options, url],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def seen(report) -> dict:
    """What the browser laid out (the page with a script that measures it, after load), and
    screenshots of the first screen and of the whole page."""
    _, report_dir = report
    page = (report_dir / "report.html").read_text()
    probe = report_dir / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))
    dom = chromium("--dump-dom", url=probe.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    measured = json.loads(html.unescape(found.group(1)))
    SHOTS.mkdir(exist_ok=True)
    page_url = (report_dir / "report.html").as_uri()
    chromium(f"--screenshot={SHOTS / 'first-screen.png'}", url=page_url)
    tall = f"--window-size={WINDOW[0]},{min(measured['height'], 16_000)}"
    chromium(f"--screenshot={SHOTS / 'whole-page.png'}", tall, url=page_url)
    return measured


def table_txt(out: Path) -> tuple[list[str], list[list[str]]]:
    """table.txt's design table: its columns (cut where the dashes line has its gaps) and
    rows."""
    lines = (out / "table.txt").read_text().splitlines()
    header = next(n for n, line in enumerate(lines) if line.startswith("test case"))
    spans = [m.span() for m in re.finditer(r"-+", lines[header + 1])]

    def cells(line: str) -> list[str]:
        return [line[start : (spans[n + 1][0] if n + 1 < len(spans) else None)].strip()
                for n, (start, _) in enumerate(spans)]  # fmt: skip

    rows = []
    for line in lines[header + 2 :]:
        if not line.strip():
            break
        rows.append(cells(line))
    return cells(lines[header]), rows


def test_the_summary_of_the_designs_findings_is_on_the_first_screen(report, seen):
    (summary,) = [h for h in seen["headings"] if h["text"].lower().startswith("summary")]
    table = next(t for t in seen["tables"] if t["top"] >= summary["bottom"])
    assert table["bottom"] <= WINDOW[1], (summary, table["bottom"])
    findings = {row[0] for row in table["rows"]}
    assert len(findings) == 3, table["rows"]  # normal traffic, out-of-sync readers, rebuild
    for row in table["rows"]:
        assert row[-1].split(":")[0] in {"yes", "no"}, row
    # each finding's ratio is table.txt's: of avg p99 (the first of its pair), of a rebuild's
    # duration (its own row)
    _, rows = table_txt(report[0])
    cases = {"normal traffic": "1", "out-of-sync": "2", "rebuild": "3"}
    for row in table["rows"]:
        (case,) = [number for words, number in cases.items() if words in row[0]]
        (found,) = [
            r for r in rows
            if r[0].startswith(case) and r[1] == row[1]
            and (r[2] == "rebuild duration") == (case == "3")
        ]  # fmt: skip
        run, design = (ratio.split(" / ")[0] for ratio in found[7:9])
        assert (row[3].split()[0], row[4].split()[0]) == (run, design), (row, found)


def test_the_design_table_is_table_txt(report, seen):
    out, _ = report
    columns, rows = table_txt(out)
    assert columns == HEADER
    (design,) = [t for t in seen["tables"] if t["columns"] == HEADER]
    assert design["rows"] == rows
    ratios = [HEADER.index("ratio (run)"), HEADER.index("ratio (design)")]
    assert all(row[i] not in ("", "-") for row in design["rows"] for i in ratios)


def test_no_comparison_table_has_a_column_that_is_mostly_dashes(seen):
    compared = [t for t in seen["tables"] if t["compare"]]
    assert len(compared) >= 3, [t["columns"] for t in seen["tables"]]
    for table in seen["tables"]:
        for n, column in enumerate(table["columns"]):
            dashes = sum(1 for row in table["rows"] if row[n] == "-")
            assert dashes <= len(table["rows"]) / 2, (table["columns"], column)


def test_the_page_fits_the_window_and_has_a_bounded_height(seen):
    assert seen["width"] <= WINDOW[0], "the page is wider than the window"
    assert seen["height"] <= PAGE_HEIGHT_BOUND, seen["height"]
    assert all(t["right"] <= WINDOW[0] for t in seen["tables"]), "a table runs off the right"


def test_every_figure_loads_at_a_laptops_size(seen):
    images = seen["images"]
    assert len(images) >= 3
    for image in images:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
        assert image["shown"] <= WINDOW[0] - 40 and image["height"] <= WINDOW[1], image
    # latency over time is one figure of small multiples, not one plot per run
    assert len([i for i in images if i["alt"].startswith("latency_over_time")]) == 1


def test_report_md_has_the_pages_sections_in_the_pages_order(report, seen):
    _, report_dir = report
    sections = [
        line[4:] for line in (report_dir / "report.md").read_text().splitlines()
        if line.startswith("### ")
    ]  # fmt: skip
    assert sections == [h["text"] for h in seen["headings"][1:]]
    assert sections[0].startswith("Summary") and sections[1] == "The design's table"
