"""How a run's figures are written as text, by the report and by perf tiered-storage's table:
every figure printed with a unit goes through here, so none is rounded to 0 by a unit or a
number of decimals chosen for another value.

In the report, the design's reference figures are text as the design wrote them ("56 / 23 ms;
2 min") and are never reformatted; a run's figure beside one uses the unit that fits its value."""

from __future__ import annotations

import math

MINUTES_FROM_S = 600.0  # from ten minutes on, whole minutes, as the design gives its rebuilds


def number(value: float, decimals: int = 1) -> str:
    """``value`` with ``decimals`` decimals, or with as many more as its first significant
    digit needs: 25.26 -> "25.3", 0.8 -> "0.8", 0.04 -> "0.04"; 0 is "0.0"."""
    if value and math.isfinite(value):
        decimals = max(decimals, -math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def duration(seconds: float) -> str:
    """A duration in seconds below ten minutes ("0.8 s", "90.0 s"), in whole minutes from there
    ("75 min")."""
    if seconds >= MINUTES_FROM_S:
        return f"{seconds / 60:.0f} min"
    return f"{number(seconds)} s"


def milliseconds(*values: float) -> str:
    """Latencies in ms, one unit for the lot: "25.3 / 14.1 ms"."""
    return " / ".join(number(value) for value in values) + " ms"
