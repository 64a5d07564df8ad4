"""The /metrics text: fetched bytes by fetch version and how they went out."""

from __future__ import annotations

from tidelog.broker.metrics import Metrics


def test_fetched_bytes_are_counted_by_version_and_path():
    metrics = Metrics()
    metrics.record_fetch(1, "converted", 100)
    metrics.record_fetch(1, "converted", 20)
    metrics.record_fetch(2, "zero_copy", 300)
    lines = metrics.render().splitlines()
    assert 'tidelog_fetch_bytes_total{version="1",path="converted"} 120' in lines
    assert 'tidelog_fetch_bytes_total{version="2",path="zero_copy"} 300' in lines
    assert "# TYPE tidelog_fetch_bytes_total counter" in lines
    assert not any('version="2",path="converted"' in line for line in lines)
