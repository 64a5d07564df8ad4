"""The design's table: its figures (``DESIGN``), this run's beside them with the with/without
ratios of both, the out-of-sync consumers' penalty, and the lines above it that say how the
profile was scaled to this machine."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tidelog import units
from tidelog.perf.cases.clusters import REPLICATION_FACTOR
from tidelog.perf.cases.events import CASES
from tidelog.perf.cases.profiles import MIB, WORKLOADS
from tidelog.perf.cases.runner import Result, Settings, run_dir_name


@dataclass(frozen=True)
class Reference:
    """One cell pair of the design's table: p99 and p95 in ms, the rebuild in seconds."""

    p99_ms: float
    p95_ms: float
    rebuild_s: float | None = None


# The design's table (DESIGN.md, "Reference figures"): (case, workload, tiered) -> figures.
DESIGN: dict[tuple[str, str, bool], Reference] = {
    ("normal", "acks=all", True): Reference(25, 14),
    ("normal", "acks=all", False): Reference(21, 13),
    ("normal", "acks=1", True): Reference(9, 4),
    ("normal", "acks=1", False): Reference(9, 4),
    ("consumers", "acks=all", True): Reference(42, 18),
    ("consumers", "acks=all", False): Reference(60, 30),
    ("consumers", "acks=1", True): Reference(10, 5),
    ("consumers", "acks=1", False): Reference(10, 4),
    ("rebuild", "acks=all", True): Reference(56, 23, 2 * 60),
    ("rebuild", "acks=all", False): Reference(490, 290, 230 * 60),
    ("rebuild", "acks=1", True): Reference(12, 6, 4 * 60),
    ("rebuild", "acks=1", False): Reference(10, 5, 520 * 60),
}


class CaseFigures(Protocol):
    """What a row of the design's table reads of one case x workload x tiered: a Result, or
    the same figures as ``tidelog report`` computes them from the run directories."""

    @property
    def case(self) -> str: ...
    @property
    def workload(self) -> str: ...
    @property
    def tiered(self) -> bool: ...
    @property
    def p99_ms(self) -> float: ...
    @property
    def p95_ms(self) -> float: ...
    @property
    def rebuild_s(self) -> float | None: ...


def _pair(first: float, second: float) -> str:
    """p99 / p95 in ms, neither rounded to 0 (units.number)."""
    return f"{units.number(first)} / {units.number(second)}"


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else units.duration(seconds)


def ratio_text(with_tier: float | None, without: float | None) -> str:
    """with / without, as the table prints it ("-" if either is missing or 0)."""
    if not with_tier or not without:
        return "-"
    return f"{with_tier / without:.2f}"


def _ratios(tiered: CaseFigures | None, local: CaseFigures | None) -> str:
    if tiered is None or local is None:
        return "-"
    return f"{ratio_text(tiered.p99_ms, local.p99_ms)} / {ratio_text(tiered.p95_ms, local.p95_ms)}"


def table_rows(results: Sequence[CaseFigures]) -> list[list[str]]:
    """The design's table: a row per case x workload (and a rebuild-duration row per rebuild
    workload), this run's figures with and without the tier beside the design's, and the
    with/without ratios of both. A cell this run has no figure for is "-"."""
    by_key = {(r.case, r.workload, r.tiered): r for r in results}
    rows = []
    for case in CASES.values():
        for workload in WORKLOADS:
            tiered, local = (
                by_key.get((case.name, workload, True)),
                by_key.get((case.name, workload, False)),
            )
            if tiered is None and local is None:
                continue
            design_tiered = DESIGN[(case.name, workload, True)]
            design_local = DESIGN[(case.name, workload, False)]
            rows.append(
                [
                    case.title,
                    workload,
                    f"{case.figure} p99 / p95 ms",
                    _pair(tiered.p99_ms, tiered.p95_ms) if tiered else "-",
                    _pair(design_tiered.p99_ms, design_tiered.p95_ms),
                    _pair(local.p99_ms, local.p95_ms) if local else "-",
                    _pair(design_local.p99_ms, design_local.p95_ms),
                    _ratios(tiered, local),
                    f"{design_tiered.p99_ms / design_local.p99_ms:.2f} / "
                    f"{design_tiered.p95_ms / design_local.p95_ms:.2f}",
                ]
            )
            if design_tiered.rebuild_s is not None:
                rows.append(
                    [
                        case.title,
                        workload,
                        "rebuild duration",
                        _duration(tiered.rebuild_s) if tiered else "-",
                        _duration(design_tiered.rebuild_s),
                        _duration(local.rebuild_s) if local else "-",
                        _duration(design_local.rebuild_s),
                        ratio_text(
                            tiered.rebuild_s if tiered else None, local.rebuild_s if local else None
                        ),
                        ratio_text(design_tiered.rebuild_s, design_local.rebuild_s),
                    ]
                )
    return rows


HEADER = [
    "test case",
    "workload",
    "figure",
    "tiered (run)",
    "tiered (design)",
    "without (run)",
    "without (design)",
    "ratio (run)",
    "ratio (design)",
]


def format_table(results: list[Result]) -> str:
    """The design's table and, below it, the rates each run asked for and reached."""
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    text = [line(HEADER), line(["-" * w for w in widths]), *(line(row) for row in rows)]
    text += ["", "ratio = with tiered storage / without; MB/s of the whole cluster:"]
    for r in results:
        text.append(
            f"  {run_dir_name(r.case, r.workload, r.tiered):28} produced {r.produced_mb_s:6.2f} "
            f"of {r.asked_mb_s:6.2f} MB/s ({r.acknowledged} acknowledged, {r.failed} failed), "
            f"in-sync consumers {r.in_sync_mb_s:6.2f} MB/s, catching up "
            f"{r.catch_up_mb_s:6.2f} MB/s, load average {r.load_average:.2f}, CPU in cores: "
            f"brokers {r.brokers_cores:.2f}, this command {r.load_generator_cores:.2f}"
        )
    penalties = penalty_lines(results)
    if penalties:
        text += ["", "the out-of-sync consumers' penalty: avg p99 of case 2 / case 1 (run, design)"]
        text += penalties
    return "\n".join(text)


def penalty_lines(results: list[Result]) -> list[str]:
    """For each workload x tiered that ran both the normal and the consumers case: how much the
    out-of-sync consumers raised the average p99, beside the design's (42 / 25 ms with the tier,
    60 / 21 ms without, for acks=all)."""
    by_key = {(r.case, r.workload, r.tiered): r for r in results}
    lines = []
    for workload in WORKLOADS:
        for tiered in (True, False):
            normal = by_key.get(("normal", workload, tiered))
            loaded = by_key.get(("consumers", workload, tiered))
            if normal is None or loaded is None:
                continue
            design = (
                DESIGN[("consumers", workload, tiered)].p99_ms
                / DESIGN[("normal", workload, tiered)].p99_ms
            )
            lines.append(
                f"  {workload:8} {'tiered' if tiered else 'without':8} "
                f"{ratio_text(loaded.p99_ms, normal.p99_ms):>6}  {design:.2f}"
            )
    return lines


def describe_scaling(settings: Settings) -> str:
    """The lines above the table: the profile as run, beside the design's size."""
    profile = settings.profile
    changed = ", ".join(f"{name} {value:g}" for name, value in settings.scaling.items())
    return "\n".join(
        [
            f"profile {profile.name}"
            + (f", scaled to this machine: {changed}" if changed else " as defined"),
            f"  per leader broker: acks=all {profile.acks_all_mb_per_broker:g} MB/s, acks=1 "
            f"{profile.acks_1_mb_per_broker:g} MB/s of {profile.record_size}-byte records; "
            f"{profile.in_sync_consumers} in-sync consumers; {profile.catch_up_consumers} "
            f"out-of-sync consumers reading {profile.catch_up_mb_per_broker:g} MB/s per broker",
            f"  {profile.brokers} brokers, {profile.partitions} partitions x "
            f"{REPLICATION_FACTOR} replicas, {profile.history_mb_per_broker:g} MB of history per "
            f"broker, {profile.duration_s:g} s of traffic per case; segments of "
            f"{profile.segment_bytes / MIB:g} MiB, with the tier "
            f"{profile.local_retention_bytes / MIB:g} MiB kept locally per partition",
            "  the design: 30 / 55 MB/s per leader broker, 4 in-sync and 9 out-of-sync consumers "
            "(180 MB/s per broker), 6,300 partitions on 5 brokers, 12 TB (acks=all) and 34 TB "
            "(acks=1) per broker",
            f"  load average as the table was written: {os.getloadavg()[0]:.2f} "
            f"(1 min) on {os.cpu_count()} cores",
        ]
    )


def write_table(settings: Settings, results: list[Result]) -> None:
    """``table.txt`` under --out: how the profile was scaled, then the table."""
    table = describe_scaling(settings) + "\n\n" + format_table(results)
    (settings.out / "table.txt").write_text(table + "\n")
