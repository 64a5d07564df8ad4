"""``perf max-rate``'s search and report, without a cluster: which rate comes next, when a step
holds, and what the report says the largest rate is."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tidelog.cli import build_parser
from tidelog.cli import perf as perf_commands
from tidelog.perf import max_rate

SETTINGS = max_rate.Settings(
    workload="acks=1",
    out=Path("unused"),
    brokers=3,
    start_mb_per_broker=1.0,
    step_factor=2.0,
    refine=2,
    max_steps=10,
    p99_bound_ms=100.0,
)


def step(number: int, offered: float, held: bool = True, **figures) -> max_rate.Step:
    values = {
        "number": number,
        "offered_mb_s": offered,
        "achieved_mb_s": offered,
        "acknowledged": 1000,
        "failed": 0,
        "seconds": 10.0,
        "p99_ms": 10.0,
        "p95_ms": 5.0,
        "consumed": 1000,
        "broker_cpu": 1.0,
        "client_cpu": 0.5,
        "load_average": 2.0,
        "verdict": "held" if held else "p99 above 100 ms",
    }
    return max_rate.Step(**(values | figures))


def rates(outcomes: list[bool], settings: max_rate.Settings = SETTINGS) -> list[float]:
    """The rates the search offers when its steps hold or fail as ``outcomes`` say."""
    steps: list[max_rate.Step] = []
    for held in outcomes:
        offered = max_rate.next_rate(settings, steps)
        assert offered is not None, f"the search ended after {len(steps)} steps"
        steps.append(step(len(steps) + 1, offered, held))
    assert max_rate.next_rate(settings, steps) is None, "the search goes on"
    return [s.offered_mb_s for s in steps]


def test_the_rate_doubles_while_steps_hold_then_bisects_the_gap_refine_times():
    # per leader broker 1, 2, 4 held; 8 failed; then 6 (held) and 7 (failed): the cluster's x3
    assert rates([True, True, True, False, True, False]) == [3, 6, 12, 24, 18, 21]


def test_a_first_step_that_fails_goes_down_until_one_holds():
    assert rates([False, False, True, True, False]) == [3, 1.5, 0.75, 1.125, 1.3125]


def test_the_search_stops_at_max_steps():
    settings = max_rate.Settings(workload="acks=1", out=Path("x"), max_steps=3)
    assert len(rates([True, True, True], settings)) == 3


def test_a_step_holds_only_when_rate_failures_consumers_and_p99_all_do():
    offered = 10.0
    assert max_rate.verdict(SETTINGS, offered, step(1, offered, achieved_mb_s=9.1)) == "held"
    assert max_rate.verdict(SETTINGS, offered, step(1, offered, achieved_mb_s=8.9)) == (
        "achieved under 90% of offered"
    )
    assert max_rate.verdict(SETTINGS, offered, step(1, offered, failed=3)) == "3 records failed"
    assert max_rate.verdict(SETTINGS, offered, step(1, offered, consumed=899)) == (
        "consumers behind"
    )
    slow = step(1, offered, p99_ms=100.5, consumed=10)
    assert max_rate.verdict(SETTINGS, offered, slow) == "consumers behind; p99 above 100 ms"
    assert max_rate.verdict(SETTINGS, offered, step(1, offered, p99_ms=math.nan)) == (
        "p99 above 100 ms"
    )


def test_the_report_gives_the_largest_rate_that_held_per_broker_and_for_the_cluster():
    steps = [step(1, 3.0), step(2, 6.0), step(3, 12.0, held=False), step(4, 9.0, held=False)]

    report = max_rate.format_report(SETTINGS, steps)

    assert max_rate.largest_held(steps) == steps[1]
    assert "max rate acks=1: 2.000 MB/s per leader broker, 6.000 MB/s for the cluster" in report
    assert "(12,500 records/s achieved" in report  # 6 MB/s of 480-byte records
    assert "--scale 0.0364" in report  # 2 of the design's 55 MB/s per leader broker
    for each in steps:
        assert max_rate.step_line(SETTINGS, each) in report
    assert "no step held" in max_rate.format_report(SETTINGS, [step(1, 3.0, held=False)])


def test_the_command_line_reaches_the_search():
    args = build_parser().parse_args(
        ["perf", "max-rate", "--workload", "acks_all", "--out", "runs/max", "--step-seconds", "5"]
    )

    assert args.run is perf_commands.run_max_rate
    assert args.workload_names[args.workload] == "acks=all"
    assert (args.step_seconds, args.shortfall, args.p99_bound_ms) == (5, 0.1, 200)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["perf", "max-rate", "--workload", "acks=0", "--out", "x"])
