"""Counters and latency summaries, shown in Prometheus' text format on /metrics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable


class Metrics:
    """Request counts and latencies per API, bytes in and out, fetched message-set bytes by
    fetch version and how they went out, and gauges read on demand."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = defaultdict(int)
        self.request_seconds: dict[str, float] = defaultdict(float)
        self.errors: dict[str, int] = defaultdict(int)
        self.bytes_in = 0
        self.bytes_out = 0
        # (fetch version, "zero_copy" | "copied" | "converted") -> message-set bytes
        self.fetch_bytes: dict[tuple[int, str], int] = defaultdict(int)
        self.gauges: dict[str, Callable[[], Iterable[tuple[dict[str, str], float]]]] = {}

    def record_request(self, api: str, seconds: float) -> None:
        self.requests[api] += 1
        self.request_seconds[api] += seconds

    def record_fetch(self, version: int, path: str, size: int) -> None:
        """``size`` bytes of messages answered to a fetch at ``version``: sent from the file as
        stored (zero_copy), as bytes read from the remote tier (copied), or down-converted."""
        self.fetch_bytes[version, path] += size

    def render(self) -> str:
        lines = [
            "# HELP tidelog_requests_total Requests handled, by API.",
            "# TYPE tidelog_requests_total counter",
        ]
        lines += [
            f'tidelog_requests_total{{api="{api}"}} {n}' for api, n in sorted(self.requests.items())
        ]
        lines += [
            "# HELP tidelog_request_seconds Time spent handling requests, by API.",
            "# TYPE tidelog_request_seconds summary",
        ]
        for api in sorted(self.requests):
            lines.append(
                f'tidelog_request_seconds_sum{{api="{api}"}} {self.request_seconds[api]:.6f}'
            )
            lines.append(f'tidelog_request_seconds_count{{api="{api}"}} {self.requests[api]}')
        lines += [
            "# HELP tidelog_request_errors_total Partition-level errors returned, by error.",
            "# TYPE tidelog_request_errors_total counter",
        ]
        lines += [
            f'tidelog_request_errors_total{{error="{name}"}} {n}'
            for name, n in sorted(self.errors.items())
        ]
        lines += [
            "# HELP tidelog_bytes_in_total Bytes received from clients.",
            "# TYPE tidelog_bytes_in_total counter",
            f"tidelog_bytes_in_total {self.bytes_in}",
            "# HELP tidelog_bytes_out_total Bytes sent to clients.",
            "# TYPE tidelog_bytes_out_total counter",
            f"tidelog_bytes_out_total {self.bytes_out}",
            "# HELP tidelog_fetch_bytes_total Message-set bytes fetched, by fetch version and path:"
            " zero_copy (the file as stored, sendfile), copied (remote tier) or converted"
            " (down-converted to the format the fetch version reads).",
            "# TYPE tidelog_fetch_bytes_total counter",
        ]
        lines += [
            f'tidelog_fetch_bytes_total{{version="{version}",path="{path}"}} {n}'
            for (version, path), n in sorted(self.fetch_bytes.items())
        ]
        for name, read in sorted(self.gauges.items()):
            lines.append(f"# TYPE {name} gauge")
            for labels, value in read():
                label_text = ",".join(f'{key}="{val}"' for key, val in sorted(labels.items()))
                lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")
        return "\n".join(lines) + "\n"
