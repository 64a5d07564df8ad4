"""Time as the broker sees it, in milliseconds since the epoch.

Everything that depends on time (timestamps, roll, retention, ISR lag) asks a Clock, so tests can
drive time with ManualClock and the testbed can skew one broker's clock against the others.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int: ...


class SystemClock:
    """The wall clock, optionally shifted by ``skew_ms`` (a testbed setting, never a default)."""

    def __init__(self, skew_ms: int = 0) -> None:
        self.skew_ms = skew_ms

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000 + self.skew_ms


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def milliseconds(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a manual clock only moves forward; use a skew for a slower clock")
        self.now_ms += ms
