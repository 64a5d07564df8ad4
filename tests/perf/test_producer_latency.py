"""The perf producer's latency figures: a record's latency runs from when it was due."""

from __future__ import annotations

import pytest

from tidelog.perf.producer import _Batch
from tidelog.perf.stats import Summary


def test_a_throttled_batch_gives_each_record_the_time_since_it_was_due():
    # three records due at 9.0, 9.1 and 9.2 s, acknowledged at 10.0 s
    batch = _Batch(acknowledged_at=10.0, first_due=9.0, spacing=0.1, count=3)

    assert list(batch.latencies_ms()) == pytest.approx([1000.0, 900.0, 800.0])


def test_an_unthrottled_batch_gives_every_record_the_same_latency():
    batch = _Batch(acknowledged_at=5.25, first_due=5.0, spacing=0.0, count=4)

    assert list(batch.latencies_ms()) == [250.0] * 4


def test_a_summary_repr_leaves_out_its_latencies():
    # asyncio builds the repr of a finished task's result; a million latencies took seconds
    summary = Summary(3, 300, 1.0, _Batch(1.0, 0.0, 0.0, 3).latencies_ms())

    assert "latencies" not in repr(summary)
