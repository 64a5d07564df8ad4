"""The run-directory layout: tables written in their schema, refused when they do not match."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tidelog import rundata


def test_tables_and_metadata_round_trip(tmp_path):
    rundata.write_table(
        tmp_path,
        "acks",
        {
            "acked_at": [rundata.epoch_microseconds(1_700_000_000.25)],
            "latency_ms": [1.5],
            "partition": [0],
            "offset": [41],
            "bytes": [100],
            "message": [None],
        },
    )
    rundata.write_events(tmp_path, [rundata.Event(1_700_000_001.0, "hard_bounce", "broker 2")])
    rundata.write_metadata(tmp_path, rundata.RunMetadata("perf-produce", "normal", "acks=1"))

    (ack,) = rundata.read_table(tmp_path, "acks").to_pylist()
    assert ack["acked_at"] == datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=UTC)
    assert (ack["latency_ms"], ack["offset"], ack["message"]) == (1.5, 41, None)
    (event,) = rundata.read_table(tmp_path, "events").to_pylist()
    assert (event["kind"], event["duration_ms"]) == ("hard_bounce", None)
    assert rundata.read_table(tmp_path, "consumer") is None
    metadata = rundata.read_metadata(tmp_path)
    assert (metadata.kind, metadata.workload, metadata.machine["cores"]) == (
        "perf-produce",
        "acks=1",
        rundata.machine()["cores"],
    )


def test_a_table_that_does_not_match_its_schema_is_refused(tmp_path):
    with pytest.raises(ValueError, match="has columns sampled_at, consumer"):
        rundata.write_table(tmp_path, "consumer", {"sampled_at": [0], "lag": [1]})
    with pytest.raises(ValueError, match="no run table 'latency'"):
        rundata.write_table(tmp_path, "latency", {})
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        rundata.read_metadata(tmp_path)
