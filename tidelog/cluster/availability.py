"""How long a scenario's producer went without a successful acknowledgement.

Two figures, overall and per partition, from the acknowledgements' arrival times alone:

- the longest stretch without a successful acknowledgement, within the time the producer ran
  (from its start to its stop, so a partition never acknowledged again counts to the end);
- for each fault, the time from its injection to the acknowledgement that ended the longest
  stretch without one in its time (from the fault to the next one, or to the end): when the
  producer was served again after the outage the fault caused (None: it never was).

The producer sends one message at a time, round robin over the partitions, so a partition's
stretch without an acknowledgement is also the time its messages were failing or waiting.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """``longest_gap_s`` began at ``longest_gap_from`` (seconds since the epoch);
    ``served_again_after_fault_s`` has one entry per fault, in order."""

    longest_gap_s: float
    longest_gap_from: float
    served_again_after_fault_s: tuple[float | None, ...]

    def as_dict(self) -> dict:
        return {
            "longest_gap_s": round(self.longest_gap_s, 3),
            "longest_gap_from": self.longest_gap_from,
            "served_again_after_fault_s": [
                None if value is None else round(value, 3)
                for value in self.served_again_after_fault_s
            ],
        }


def window(
    acked_at: Sequence[float], faults_at: Sequence[float], start: float, end: float
) -> Window:
    """The figures of one series of acknowledgement times (sorted) over [start, end]."""
    edges = [start, *acked_at, end]
    gap, gap_from = max((after - before, before) for before, after in itertools.pairwise(edges))
    served_again: list[float | None] = []
    for number, fault in enumerate(faults_at):
        until = faults_at[number + 1] if number + 1 < len(faults_at) else end
        # the stretches that end after the fault and begin before the next one
        first = bisect.bisect_right(edges, fault)
        stretches = [
            (edges[i] - edges[i - 1], i)
            for i in range(max(first, 1), len(edges))
            if edges[i - 1] < until
        ]
        _, longest = max(stretches, default=(0.0, len(edges) - 1))
        is_ack = longest < len(edges) - 1  # not the producer's stop
        served_again.append(edges[longest] - fault if is_ack else None)
    return Window(gap, gap_from, tuple(served_again))


@dataclass(frozen=True)
class Availability:
    """The windows overall and per partition; ``full_isr_after_s``: for each fault, the time
    from its end (the fault healed, the broker back) to every partition's full ISR."""

    overall: Window
    partitions: dict[int, Window]
    full_isr_after_s: tuple[float, ...] = ()

    def as_dict(self) -> dict:
        return {
            "overall": self.overall.as_dict(),
            "partitions": {str(p): w.as_dict() for p, w in sorted(self.partitions.items())},
            "full_isr_after_s": [round(value, 3) for value in self.full_isr_after_s],
        }

    def rows(self) -> list[str]:
        """Lines for a report table: the overall figures, then each partition's."""

        def describe(found: Window) -> str:
            after = ", ".join(
                "never" if s is None else f"{s:.2f} s" for s in found.served_again_after_fault_s
            )
            return (
                f"longest without an ack {found.longest_gap_s:.2f} s; "
                f"served again after each fault: {after or '-'}"
            )

        lines = [f"{'availability':24} {'':8} {describe(self.overall)}"]
        if self.full_isr_after_s:
            isr = ", ".join(f"{value:.2f} s" for value in self.full_isr_after_s)
            lines.append(f"{'full ISR after the fault':24} {'':8} {isr}")
        for number, found in sorted(self.partitions.items()):
            lines.append(f"{'  partition ' + str(number):24} {'':8} {describe(found)}")
        return lines


def availability(
    acked: Sequence[tuple[int, float]],
    partitions: Sequence[int],
    faults_at: Sequence[float],
    start: float,
    end: float,
    full_isr_after_s: Sequence[float] = (),
) -> Availability:
    """From (partition, acked_at) of every acknowledgement, the partitions produced to, the
    injection times of the faults, and when the producer started and stopped."""
    per_partition: dict[int, list[float]] = defaultdict(list)
    for partition, at in acked:
        per_partition[partition].append(at)
    overall = sorted(at for _, at in acked)
    return Availability(
        window(overall, faults_at, start, end),
        {p: window(sorted(per_partition[p]), faults_at, start, end) for p in partitions},
        tuple(full_isr_after_s),
    )
