"""Throughput and latency figures, printed as Kafka's perf tools print them."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field


def percentile(sorted_values: array | list[float], fraction: float) -> float:
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


@dataclass
class Summary:
    records: int
    bytes: int
    seconds: float
    # one per record (producer) or per request (consumer); not in the repr, which asyncio may
    # build for a finished task's result
    latencies_ms: array = field(repr=False)
    fetched_bytes: int | None = None  # a consumer's: the message sets as fetched (compressed)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else math.nan

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / self.seconds / 1_000_000 if self.seconds else math.nan

    def latency(self) -> dict[str, float]:
        ordered = sorted(self.latencies_ms)
        mean = sum(ordered) / len(ordered) if ordered else math.nan
        return {
            "avg": mean,
            "p50": percentile(ordered, 0.50),
            "p95": percentile(ordered, 0.95),
            "p99": percentile(ordered, 0.99),
            "p99.9": percentile(ordered, 0.999),
            "max": ordered[-1] if ordered else math.nan,
        }

    def line(self, what: str = "records sent") -> str:
        latency = self.latency()
        fetched = ""
        if self.fetched_bytes is not None and self.seconds:
            fetched = f", {self.fetched_bytes / self.seconds / 1_000_000:.2f} MB/sec fetched"
        return (
            f"{self.records} {what}, {self.records_per_second:,.1f} records/sec "
            f"({self.megabytes_per_second:.2f} MB/sec of keys and values{fetched}), "
            f"{latency['avg']:.2f} ms avg latency, "
            f"{latency['max']:.2f} ms max latency, {latency['p50']:.2f} ms 50th, "
            f"{latency['p95']:.2f} ms 95th, {latency['p99']:.2f} ms 99th, "
            f"{latency['p99.9']:.2f} ms 99.9th."
        )

    def as_dict(self) -> dict:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "records_per_second": self.records_per_second,
            "megabytes_per_second": self.megabytes_per_second,
            **({"fetched_bytes": self.fetched_bytes} if self.fetched_bytes is not None else {}),
            "latency_ms": self.latency(),
        }
