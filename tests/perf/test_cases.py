"""The tiered-storage cases' pieces that need no cluster: profiles, figures, the table, records."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tidelog import rundata
from tidelog.cli import build_parser
from tidelog.cli import perf as perf_commands
from tidelog.perf.cases import clusters, events, profiles, runner, table
from tidelog.perf.producer import MessageRing
from tidelog.records.format import Codec, iter_deep


def result(case: str, workload: str, tiered: bool, p99: float, p95: float, rebuild=None):
    return runner.Result(
        case=case,
        workload=workload,
        tiered=tiered,
        run_dir=Path("unused"),
        p99_ms=p99,
        p95_ms=p95,
        rebuild_s=rebuild,
        asked_mb_s=1.0,
        produced_mb_s=1.0,
        acknowledged=10,
        failed=0,
        in_sync_mb_s=2.0,
        catch_up_mb_s=0.0,
        load_average=1.5,
        brokers_cores=1.2,
        load_generator_cores=0.4,
    )


def every_result() -> list[runner.Result]:
    results = []
    for case in events.CASES:
        for workload in profiles.WORKLOADS:
            rebuild = case == "rebuild"
            results.append(result(case, workload, True, 30.0, 15.0, 10.0 if rebuild else None))
            results.append(result(case, workload, False, 20.0, 10.0, 40.0 if rebuild else None))
    return results


def test_the_table_has_the_designs_shape_with_every_cell_filled():
    rows = table.table_rows(every_result())

    # three cases x two workloads, and a rebuild duration row per rebuild workload
    assert len(rows) == 8
    assert all(cell != "-" for row in rows for cell in row)
    normal_all = rows[0]
    assert normal_all[:3] == ["1 normal traffic", "acks=all", "avg p99 / p95 ms"]
    assert normal_all[3:] == [
        "30.0 / 15.0",
        "25.0 / 14.0",
        "20.0 / 10.0",
        "21.0 / 13.0",
        "1.50 / 1.50",
        "1.19 / 1.08",
    ]
    durations = [row for row in rows if row[2] == "rebuild duration"]
    assert [row[1] for row in durations] == ["acks=all", "acks=1"]
    assert durations[0][3:] == ["10.0 s", "120.0 s", "40.0 s", "230 min", "0.25", "0.01"]
    assert rows[4][2] == "max p99 / p95 ms"  # the rebuild's figure is the largest window's
    assert "load average 1.50, CPU in cores: brokers 1.20, this command 0.40" in (
        table.format_table(every_result())
    )


def test_a_figure_below_the_tables_decimals_is_not_written_as_zero():
    results = [result("normal", "acks=1", True, 0.3, 0.04), result("normal", "acks=1", False, 2, 1)]

    (row,) = table.table_rows(results)

    assert row[3] == "0.3 / 0.04"


def test_the_out_of_sync_penalty_is_case_2_over_case_1_beside_the_designs():
    results = [
        result("normal", "acks=all", True, 20.0, 10.0),
        result("consumers", "acks=all", True, 30.0, 12.0),
        result("normal", "acks=all", False, 10.0, 5.0),
        result("consumers", "acks=all", False, 40.0, 9.0),
        result("normal", "acks=1", True, 10.0, 5.0),  # no consumers case: no line
    ]

    assert table.penalty_lines(results) == [
        "  acks=all tiered     1.50  1.68",  # the design's 42 / 25 ms
        "  acks=all without    4.00  2.86",  # and 60 / 21 ms
    ]
    assert "\n".join(table.penalty_lines(results)) in table.format_table(results)


def test_a_missing_run_leaves_its_cells_empty_rather_than_invented():
    rows = table.table_rows([r for r in every_result() if not (r.case == "normal" and r.tiered)])

    normal = [row for row in rows if row[0] == "1 normal traffic"]
    assert all(row[3] == "-" and row[7] == "-" for row in normal)
    assert all(row[5] != "-" for row in normal)


def write_acks(run_dir: Path, rows: list[tuple[float, float]]) -> None:
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": [rundata.epoch_microseconds(at) for at, _ in rows],
            "latency_ms": [latency for _, latency in rows],
            "partition": [0] * len(rows),
            "offset": list(range(len(rows))),
            "bytes": [480] * len(rows),
            "message": [None] * len(rows),
        },
    )


def test_window_figures_average_or_take_the_largest_p99_of_each_second(tmp_path):
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    # second 0: latencies 1..100 ms (p99 99, p95 95); second 1: 201..300 ms (p99 299, p95 295)
    rows = [(start + 0.001 * i, float(i + 1)) for i in range(100)]
    rows += [(start + 1 + 0.001 * i, float(201 + i)) for i in range(100)]
    write_acks(tmp_path, rows)

    assert runner.window_figures(tmp_path, "avg") == (199.0, 195.0)
    assert runner.window_figures(tmp_path, "max") == (299.0, 295.0)


def test_window_figures_of_a_run_without_acknowledgements_are_not_numbers(tmp_path):
    write_acks(tmp_path, [])

    assert all(math.isnan(figure) for figure in runner.window_figures(tmp_path, "avg"))


def test_the_full_profile_keeps_the_designs_per_broker_rates_and_consumers():
    full = profiles.PROFILES["full"]

    assert (full.acks_all_mb_per_broker, full.acks_1_mb_per_broker) == (30, 55)
    assert (full.in_sync_consumers, full.catch_up_consumers, full.catch_up_mb_per_broker) == (
        4,
        9,
        180,
    )
    # the design's messages: 30 MB/s at ~62K messages/s
    assert full.record_size == pytest.approx(30e6 / 62e3, rel=0.01)


def test_overrides_change_only_what_they_name():
    small = profiles.PROFILES["small"]

    changed = profiles.with_overrides(small, duration_s=3, history_mb=4, scale=0.5)

    assert (changed.duration_s, changed.history_mb_per_broker) == (3, 4)
    assert changed.acks_all_mb_per_broker == small.acks_all_mb_per_broker / 2
    assert changed.acks_1_mb_per_broker == small.acks_1_mb_per_broker / 2
    assert changed.catch_up_mb_per_broker == small.catch_up_mb_per_broker / 2
    assert changed.partitions == small.partitions
    assert profiles.with_overrides(small) == small
    assert profiles.with_overrides(small, partitions=30).partitions == 30
    sized = profiles.with_overrides(small, segment_bytes=65536, local_retention_bytes=131072)
    assert (sized.segment_bytes, sized.local_retention_bytes) == (65536, 131072)
    assert clusters.topic_config(sized, tiered=True)["local.retention.bytes"] == "131072"
    assert profiles.with_overrides(small, rebuild_timeout_s=60).rebuild_timeout_s == 60
    assert small.rebuild_throttle_mb_s is None  # the design's case 3 ran unthrottled
    throttled = profiles.with_overrides(small, scale=0.5, rebuild_throttle_mb_s=4)
    assert throttled.rebuild_throttle_mb_s == 4  # a rate of its own, not scaled
    # the history goes in before local retention starts (load_history sets it afterwards)
    assert "local.retention.bytes" not in clusters.topic_config(sized, tiered=True, loading=True)


def test_the_scaling_is_what_the_command_line_changed_and_the_table_says_so(tmp_path):
    full = profiles.PROFILES["full"]
    scaling = profiles.scaling(duration_s=60, scale=0.02, partitions=30)
    settings = runner.Settings(
        profile=profiles.with_overrides(full, duration_s=60, scale=0.02, partitions=30),
        out=tmp_path,
        scaling=scaling,
    )

    assert scaling == {"scale": 0.02, "duration_s": 60, "partitions": 30}
    described = table.describe_scaling(settings)
    assert described.startswith(
        "profile full, scaled to this machine: scale 0.02, duration_s 60, partitions 30"
    )
    assert "acks=all 0.6 MB/s, acks=1 1.1 MB/s" in described
    assert "3.6 MB/s per broker" in described  # the out-of-sync consumers' 180 x 0.02
    assert "30 partitions x 3 replicas, 2000 MB of history per broker" in described
    assert "segments of 1 MiB, with the tier 1 MiB kept locally per partition" in described
    assert "load average" in described
    unscaled = runner.Settings(profile=full, out=tmp_path)
    assert table.describe_scaling(unscaled).startswith("profile full as defined")


def test_the_command_line_reaches_the_cases():
    args = build_parser().parse_args(
        ["perf", "tiered-storage", "--profile", "small", "--out", "runs/ts", "--cases", "rebuild"]
    )

    assert args.run is perf_commands.run_tiered_storage
    assert (args.profile, args.out, args.cases, args.seed) == ("small", "runs/ts", ["rebuild"], 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["perf", "tiered-storage", "--profile", "huge", "--out", "x"])
    throttled = build_parser().parse_args(
        ["perf", "tiered-storage", "--out", "x", "--rebuild-throttle", "2.5"]
    )
    assert throttled.rebuild_throttle == 2.5


@pytest.mark.parametrize("rate", ["0", "-1", "nan", "inf", "fast"])
def test_a_rebuild_throttle_that_is_not_a_rate_is_refused_by_name(rate, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["perf", "tiered-storage", "--out", "x", "--rebuild-throttle", rate]
        )
    assert f"--rebuild-throttle: {rate!r} is not a rate in MB/s above 0" in capsys.readouterr().err


def records(data: bytes) -> list[tuple[bytes | None, bytes, int]]:
    return [(m.key, m.value, m.timestamp) for m in iter_deep(data)]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.SNAPPY])
def test_a_ring_cuts_the_same_seeded_keyed_records_every_time(codec):
    ring = MessageRing(record_size=50, seed=7, keys=5)
    again = MessageRing(record_size=50, seed=7, keys=5)

    batch = records(ring.message_set(3, 8, 1_700_000_000_123, codec))

    assert [key for key, _, _ in batch] == [f"key-{k % 5:08d}".encode() for k in range(3, 11)]
    assert all(len(value) == 50 for _, value, _ in batch)
    assert all(timestamp == 1_700_000_000_123 for _, _, timestamp in batch)
    assert batch == records(again.message_set(3, 8, 1_700_000_000_123, codec))
    # records with the same key carry the same payload; another seed, other payloads
    assert batch[0][1] == batch[5][1]
    other = records(MessageRing(50, 8, 5).message_set(3, 8, 1_700_000_000_123, codec))
    assert [v for _, v, _ in other] != [v for _, v, _ in batch]


def test_a_ring_is_stamped_again_when_the_second_changes():
    ring = MessageRing(record_size=10, seed=0, keys=0)

    first = records(ring.message_set(0, 2, 1_000_500, Codec.NONE))
    later = records(ring.message_set(2, 2, 1_001_200, Codec.NONE))

    assert [t for _, _, t in first] == [1_000_500] * 2
    assert [t for _, _, t in later] == [1_001_200] * 2
    assert [k for k, _, _ in first + later] == [None] * 4


def test_a_batch_across_chunks_and_the_rings_end_keeps_the_order_of_keys():
    ring = MessageRing(record_size=20, seed=3, keys=1200)  # chunks of 512: 0-511, 512-1023, ...

    batch = records(ring.message_set(1100, 200, 1_000_100, Codec.SNAPPY))

    expected = [f"key-{k % 1200:08d}".encode() for k in range(1100, 1300)]
    assert [key for key, _, _ in batch] == expected
    assert [t for _, _, t in batch] == [1_000_100] * 200
    # in the same second, a chunk already cut from keeps its stamp; one not yet cut from gets
    # the time it is first cut at
    again = records(ring.message_set(500, 30, 1_000_900, Codec.NONE))
    assert [t for _, _, t in again] == [1_000_100] * 12 + [1_000_900] * 18
